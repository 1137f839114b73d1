# shellcheck shell=bash
# Building the control plane of scripts/cluster: each binary with `go build` from the Go module
# proxy at the pinned versions, cached outside the work tree. Sourced by scripts/cluster, which
# provides the paths (and scripts/lib.sh's log and die).

# --- building ---------------------------------------------------------------------------------

# Go settings for every build: no cgo, the installed toolchain only (nothing else can be
# downloaded here), and no VCS stamping (the wrapper modules live in temp dirs).
go_env() {
  export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
}

# mod_info MODULE@VERSION FIELD: download the module and print one field of `go mod download -json`.
mod_info() {
  local json
  json=$(go mod download -json "$1") || die "go mod download $1 failed: $json"
  python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$json" "$2"
}

# write_wrapper DIR MODULE VERSION: a go.mod in DIR that requires MODULE@VERSION and replaces
# every module that MODULE's own go.mod replaces with a relative path (k8s staging modules,
# etcd's sibling modules) by its published version. The `go` and `godebug` lines are copied
# from MODULE's go.mod, so the binaries run with the runtime defaults upstream chose.
write_wrapper() {
  local dir=$1 module=$2 version=$3 gomod
  gomod=$(mod_info "$module@$version" GoMod)
  mkdir -p "$dir"
  go mod edit -json "$gomod" | python3 -c '
import json, sys
m = json.load(sys.stdin)
module, version = sys.argv[1], sys.argv[2]
# Published version of a relative-path module: k8s staging v1.Y.Z -> v0.Y.Z; etcd: same tag.
published = "v0." + version[len("v1."):] if module == "k8s.io/kubernetes" else version
required = {r["Path"] for r in m.get("Require") or []}
out = ["module mutantops.local/cluster-build", "", "go " + m["Go"]]
for d in m.get("Godebug") or []:
    out.append("godebug %s=%s" % (d["Key"], d["Value"]))
out += ["", "require %s %s" % (module, version), ""]
n = 0
for r in m.get("Replace") or []:
    old, new = r["Old"]["Path"], r["New"]["Path"]
    # Only relative targets of modules that are really required: etcd also "replaces"
    # forbidden modules with ./FORBIDDEN_DEPENDENCY, which are not part of the build.
    if new.startswith(".") and old in required:
        out.append("replace %s => %s %s" % (old, old, published))
        n += 1
if n == 0 and any(r["New"]["Path"].startswith(".") for r in m.get("Replace") or []):
    sys.exit("no relative replaces of required modules found in " + module)
print("\n".join(out))
' "$module" "$version" >"$dir/go.mod"
}

# atomic_install TMPDIR FINALDIR: the build went into TMPDIR; rename it into place (same
# filesystem, so an interrupted build never looks like a finished one).
atomic_install() {
  local tmp=$1 final=$2
  chmod 755 "$tmp"
  rm -rf "$final"
  mv "$tmp" "$final"
}

have_bins() { # have_bins DIR NAME...: all binaries present and executable
  local dir=$1; shift
  local b
  for b in "$@"; do [[ -x $dir/bin/$b ]] || return 1; done
}

# build_k8s_into DIR BIN...: the named commands of k8s.io/kubernetes (cmd/BIN) into DIR/bin.
build_k8s_into() {
  local dir=$1 start tmp minor ver_pkg date flags=() pkgs=() b
  shift
  have_bins "$dir" "$@" && return 0
  start=$SECONDS
  log "building Kubernetes $K8S_VERSION ($*) with go build; the first build takes several minutes"
  tmp=$(mktemp -d "$CACHE/.$(basename "$dir").tmp.XXXXXX")
  BUILD_TMP+=("$tmp")
  write_wrapper "$tmp/src" k8s.io/kubernetes "$K8S_VERSION"
  for b in "$@"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
  # Version stamps as hack/lib/version.sh sets them (both packages): `kubectl version` and
  # /version report v1.34.4, which is also the binary version the apiserver's compatibility
  # (emulation) logic is derived from. The commit is unknown to the module proxy, so empty;
  # the build date is the tag's time from the proxy, so rebuilds are reproducible.
  minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  date=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["Time"])' \
    "$(mod_info "k8s.io/kubernetes@$K8S_VERSION" Info)")
  for ver_pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=("-X" "$ver_pkg.gitVersion=$K8S_VERSION" "-X" "$ver_pkg.gitMajor=1"
            "-X" "$ver_pkg.gitMinor=$minor" "-X" "$ver_pkg.gitTreeState=clean"
            "-X" "$ver_pkg.gitCommit=" "-X" "$ver_pkg.buildDate=$date")
  done
  # One `go build` for all of them: the packages they share compile once. (&& chains: set -e
  # does not apply inside a subshell that is followed by ||.)
  (
    cd "$tmp/src" &&
      go get "${pkgs[@]/%/@$K8S_VERSION}" >&2 &&
      go build -trimpath -ldflags "-s -w ${flags[*]}" -o "$tmp/bin/" "${pkgs[@]}"
  ) || die "building Kubernetes $K8S_VERSION ($*) failed"
  rm -rf "$tmp/src"
  atomic_install "$tmp" "$dir"
  log "built Kubernetes $K8S_VERSION ($*) in $((SECONDS - start))s -> $dir/bin"
}

build_k8s() { build_k8s_into "$K8S_DIR" "${K8S_BINS[@]}"; }

build_etcd() {
  have_bins "$ETCD_DIR" etcd && return 0
  local start tmp
  start=$SECONDS
  log "building etcd $ETCD_VERSION with go build; the first build takes a few minutes"
  tmp=$(mktemp -d "$CACHE/.etcd-$ETCD_VERSION.tmp.XXXXXX")
  BUILD_TMP+=("$tmp")
  write_wrapper "$tmp/src" go.etcd.io/etcd/server/v3 "$ETCD_VERSION"
  (
    cd "$tmp/src" &&
      go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >&2 &&
      go build -trimpath -ldflags "-s -w" -o "$tmp/bin/etcd" go.etcd.io/etcd/server/v3
  ) || die "building etcd $ETCD_VERSION failed"
  rm -rf "$tmp/src"
  atomic_install "$tmp" "$ETCD_DIR"
  log "built etcd $ETCD_VERSION in $((SECONDS - start))s -> $ETCD_DIR/bin"
}

# build_kine: kine, only for MUTANTOPS_DATASTORE=kine (never by build_all: the test suite and
# CI run on etcd). Its own lock: another state dir may build the rest meanwhile.
build_kine() {
  have_bins "$KINE_DIR" kine && return 0
  local start tmp
  go_env
  trap cleanup_build_tmp EXIT
  exec 9>"$CACHE/.build-kine.lock"
  flock 9
  have_bins "$KINE_DIR" kine && { exec 9>&-; return 0; }
  start=$SECONDS
  log "building kine $KINE_VERSION with go build; the first build takes a few minutes"
  tmp=$(mktemp -d "$CACHE/.kine-$KINE_VERSION.tmp.XXXXXX")
  BUILD_TMP+=("$tmp")
  write_wrapper "$tmp/src" github.com/k3s-io/kine "$KINE_VERSION"
  (
    cd "$tmp/src" &&
      go get "github.com/k3s-io/kine@$KINE_VERSION" >&2 &&
      go build -trimpath -ldflags "-s -w" -o "$tmp/bin/kine" github.com/k3s-io/kine
  ) || die "building kine $KINE_VERSION failed"
  rm -rf "$tmp/src"
  atomic_install "$tmp" "$KINE_DIR"
  exec 9>&-
  log "built kine $KINE_VERSION in $((SECONDS - start))s -> $KINE_DIR/bin"
}

build_kwok() {
  have_bins "$KWOK_DIR" kwok && [[ -f $KWOK_DIR/stages.yaml ]] && return 0
  local start tmp src f
  start=$SECONDS
  log "building kwok $KWOK_VERSION with go install; the first build takes a few minutes"
  tmp=$(mktemp -d "$CACHE/.kwok-$KWOK_VERSION.tmp.XXXXXX")
  BUILD_TMP+=("$tmp")
  (
    cd "$tmp" && GOBIN=$tmp/bin go install -trimpath \
      -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}" \
      "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  ) || die "building kwok $KWOK_VERSION failed"
  # The kwok binary has no built-in lifecycle: without Stage objects it refuses to start
  # ("no stages found"). kwokctl feeds it the stages shipped in the module under
  # kustomize/stage/; take the same files from this very version: node-initialize (node
  # becomes Ready), node-heartbeat-with-lease (kwok keeps the Node's Lease and conditions
  # fresh so the node lifecycle controller never marks it NotReady), and pod-ready /
  # pod-complete / pod-delete (pods become Running+Ready, Jobs complete, deleted pods go).
  src=$(mod_info "sigs.k8s.io/kwok@$KWOK_VERSION" Dir)/kustomize/stage
  for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
           pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    [[ -f $src/$f ]] || die "kwok $KWOK_VERSION has no stage file $f"
    printf -- '---\n'
    cat "$src/$f"
  done >"$tmp/stages.yaml"
  atomic_install "$tmp" "$KWOK_DIR"
  log "built kwok $KWOK_VERSION in $((SECONDS - start))s -> $KWOK_DIR/bin"
}

BUILD_TMP=()
cleanup_build_tmp() {
  local d
  for d in "${BUILD_TMP[@]}"; do
    [[ -e $d ]] && { chmod -R u+w "$d" 2>/dev/null || true; rm -rf "$d"; }
  done
  return 0
}

built() {
  have_bins "$K8S_DIR" "${K8S_BINS[@]}" && have_bins "$ETCD_DIR" etcd \
    && have_bins "$KWOK_DIR" kwok && [[ -f $KWOK_DIR/stages.yaml ]]
}

build_all() {
  built && return 0 # a warm cache never runs go
  command -v go >/dev/null || die "go is not installed (needed once to build the control plane)"
  mkdir -p "$CACHE"
  go_env
  trap cleanup_build_tmp EXIT
  # One builder at a time per cache (two state dirs may run `up` at once); whoever waited
  # finds the binaries built. Temp dirs of builds that were killed are removed under the lock.
  exec 9>"$CACHE/.build.lock"
  flock 9
  built && { exec 9>&-; return 0; }
  rm -rf "$CACHE"/.*.tmp.??????
  log "building the control plane into $CACHE with $(go version | cut -d' ' -f3):" \
      "the first build takes several minutes (about 9 on 2 cores); later runs reuse it"
  build_etcd
  build_kwok
  build_k8s
  exec 9>&-
}
