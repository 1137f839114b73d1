# shellcheck shell=bash
# shellcheck disable=SC2154 # self, repo, CHECK: set by scripts/image
# `scripts/image selftest`: the checks of the image that need no cluster. Sourced by
# scripts/image, which provides CHECK and the commands it tests (step, log, die and
# apt_install come from scripts/lib.sh).

# --- selftest ---------------------------------------------------------------------------------

passed=0
failed=0
selftest_ok() { passed=$((passed + 1)); printf '  ok    %s\n' "$*"; }
selftest_fail() { failed=$((failed + 1)); printf '  FAIL  %s\n' "$*"; }

cmd_selftest() {
    (($# == 0)) || die "selftest takes no arguments"
    [[ $(id -u) == 0 ]] || die "selftest runs a private containerd and chroot: run it as root"
    if ! command -v ctr >/dev/null 2>&1 || ! command -v containerd >/dev/null 2>&1; then
        apt_install containerd || die "containerd is missing: install Debian's containerd"
    fi
    [[ -x $BUSYBOX ]] || apt_install busybox-static || die "$BUSYBOX is missing: install Debian's busybox-static"
    local started=$SECONDS
    tmp=$(mktemp -d /tmp/mutantops-image.XXXXXX)
    ctrd_pid=""
    trap selftest_cleanup EXIT

    # The binaries: target/musl's where built, else busybox standing in for amd64.
    local -a specs=() specs_b=()
    local t a
    for t in "${ALL_TARGETS[@]}"; do
        a=$(arch_of_target "$t")
        [[ ! -f target/musl/$t/mutantops ]] || specs+=("$a=$repo/target/musl/$t/mutantops")
    done
    if [[ ! -f target/musl/x86_64-unknown-linux-musl/mutantops ]]; then
        specs=("amd64=$BUSYBOX" "${specs[@]}")
        log "target/musl/x86_64-unknown-linux-musl/mutantops is missing: $BUSYBOX stands in for linux/amd64"
    fi
    # The second build's inputs differ in everything but content: other path, mode 0600,
    # mtime 1970, umask 077, time zone, locale, working directory.
    mkdir -p "$tmp/in"
    local s
    for s in "${specs[@]}"; do
        cp "${s#*=}" "$tmp/in/${s%%=*}"
        chmod 0600 "$tmp/in/${s%%=*}"
        touch -d @0 "$tmp/in/${s%%=*}"
        specs_b+=("${s%%=*}=$tmp/in/${s%%=*}")
    done

    step "(a) two builds of the image, pause and standin, compared byte for byte (at $((SECONDS - started)) s)"
    local -a args_a=() args_b=()
    for s in "${specs[@]}"; do args_a+=(--binary "$s"); done
    for s in "${specs_b[@]}"; do args_b+=(--binary "$s"); done
    "$self" "${args_a[@]}" --out "$tmp/a" >"$tmp/a.log" 2>&1 || { cat "$tmp/a.log"; die "the first build failed"; }
    cat "$tmp/a.log"
    (cd "$tmp/in" && umask 077 && TZ=Pacific/Kiritimati LC_ALL=C "$self" "${args_b[@]}" --out "$tmp/b") \
        >"$tmp/b.log" 2>&1 || { cat "$tmp/b.log"; die "the second build failed"; }
    for s in pause standin; do
        "$self" "$s" --out "$tmp/a" >>"$tmp/a.log" 2>&1 || { cat "$tmp/a.log"; die "scripts/image $s failed"; }
        (cd "$tmp/in" && umask 077 && "$self" "$s" --out "$tmp/b") >>"$tmp/b.log" 2>&1 \
            || { cat "$tmp/b.log"; die "scripts/image $s failed (second build)"; }
    done
    grep -E '^registry|^localhost' "$tmp/a.log" || true
    local files
    files=$(cd "$tmp/a" && find . -type f | sort)
    if diff -r "$tmp/a" "$tmp/b" >"$tmp/diff.txt" 2>&1 && [[ $files == "$(cd "$tmp/b" && find . -type f | sort)" ]]; then
        selftest_ok "rebuilds are identical: $(wc -l <<<"$files") files, index $(grep '^index' "$tmp/a.log" | awk '{print $2}')"
    else
        selftest_fail "rebuilds differ: $(head -c 600 "$tmp/diff.txt")"
    fi
    if grep -q '^index' "$tmp/b.log" && [[ $(grep '^index' "$tmp/a.log") == "$(grep '^index' "$tmp/b.log")" ]]; then
        selftest_ok "both builds print the same index digest"
    else
        selftest_fail "the builds print different index digests"
    fi

    step "(b) binaries that must be refused (at $((SECONDS - started)) s)"
    refused "busybox (x86-64) as linux/arm64" linux/arm64 --binary "linux/arm64=$BUSYBOX"
    refused "busybox (x86-64) as linux/arm/v7" linux/arm/v7 --binary "linux/arm/v7=$BUSYBOX"
    local dynamic
    dynamic=$(command -v ls)
    if "${CHECK[@]}" elf amd64 "$dynamic" >/dev/null 2>&1; then
        log "$dynamic is static: no dynamic binary to refuse"
    else
        refused "a dynamic binary ($dynamic) as linux/amd64" "dynamically linked" --binary "linux/amd64=$dynamic"
    fi
    refused "a shell script as linux/amd64" "not an ELF file" --binary "linux/amd64=$self"
    if [[ -f target/musl/aarch64-unknown-linux-musl/mutantops ]]; then
        refused "the aarch64 binary as linux/amd64" linux/amd64 \
            --binary "linux/amd64=$repo/target/musl/aarch64-unknown-linux-musl/mutantops"
    fi

    step "(c) the archives imported into a private containerd (at $((SECONDS - started)) s)"
    selftest_containerd

    step "(d) the image's config and tree, as the Containerfile says (at $((SECONDS - started)) s)"
    if "${CHECK[@]}" check "$tmp/a" --revision "$(revision)" --crds "$repo/deploy/crds" --no-run >"$tmp/check.log" 2>&1; then
        selftest_ok "scripts/image check --no-run: $(tail -n 1 "$tmp/check.log")"
    else
        selftest_fail "scripts/image check --no-run:"
        cat "$tmp/check.log"
    fi

    step "(e) pause and standin run (at $((SECONDS - started)) s)"
    selftest_run_helpers

    step "selftest (${specs[*]%%=*}) in $((SECONDS - started)) s"
    echo "$passed passed, $failed failed"
    ((failed == 0))
}

refused() { # refused WHAT MUST_SAY BUILD_ARGS...: the build must fail, saying MUST_SAY
    local what=$1 say=$2
    shift 2
    rm -rf "$tmp/wrong"
    if "$self" "$@" --out "$tmp/wrong" >"$tmp/wrong.log" 2>&1; then
        selftest_fail "$what was accepted"
    elif ! grep -q -- "$say" "$tmp/wrong.log"; then
        selftest_fail "$what was refused without naming '$say': $(tail -n 2 "$tmp/wrong.log")"
    elif [[ -e $tmp/wrong/oci || -n $(find "$tmp/wrong" -name '*.tar' 2>/dev/null) ]]; then
        selftest_fail "$what was refused but left an image behind"
    else
        selftest_ok "$what refused: $(grep -m1 error: "$tmp/wrong.log" | sed 's/.*error: //')"
    fi
}

selftest_cleanup() {
    local status=$?
    if [[ -n ${ctrd_pid:-} ]]; then
        kill -TERM "$ctrd_pid" 2>/dev/null || true
        local i
        for ((i = 0; i < 50; i++)); do kill -0 "$ctrd_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$ctrd_pid" 2>/dev/null || true
        wait "$ctrd_pid" 2>/dev/null || true
    fi
    [[ -z ${helper_pid:-} ]] || { kill -KILL "$helper_pid" 2>/dev/null || true; wait "$helper_pid" 2>/dev/null || true; }
    [[ -z ${tmp:-} ]] || rm -rf "$tmp"
    exit "$status"
}

selftest_containerd() {
    local d=$tmp/ctrd
    mkdir -p "$d"
    # Everything under $d: root, state, sockets, the opt plugin's directory. Only what an
    # import needs is loaded; the native snapshotter unpacks without mounts.
    cat >"$d/config.toml" <<EOF
version = 2
root = "$d/root"
state = "$d/state"
disabled_plugins = [
  "io.containerd.grpc.v1.cri",
  "io.containerd.internal.v1.tracing",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.overlayfs",
  "io.containerd.snapshotter.v1.zfs",
]

[grpc]
  address = "$d/sock"

[ttrpc]
  address = "$d/sock.ttrpc"

[debug]
  level = "warn"

[plugins."io.containerd.internal.v1.opt"]
  path = "$d/opt"
EOF
    containerd --config "$d/config.toml" --root "$d/root" --state "$d/state" --address "$d/sock" \
        >"$d/containerd.log" 2>&1 &
    ctrd_pid=$!
    local i
    for ((i = 0; i < 100; i++)); do
        ctr -a "$d/sock" version >/dev/null 2>&1 && break
        kill -0 "$ctrd_pid" 2>/dev/null || break
        sleep 0.1
    done
    if ! ctr -a "$d/sock" version >/dev/null 2>&1; then
        selftest_fail "containerd did not start: $(tail -n 5 "$d/containerd.log")"
        return
    fi
    echo "  containerd $(containerd --version | awk '{print $3}') on $d/sock (pid $ctrd_pid)"

    local host version
    host=$(host_arch) || host=""
    version=$(cargo_version)
    local name=ghcr.io/neiam/mutantops:$version
    # import FILE NAMESPACE ARCH NAME: import, then the name must be listed with the archive's
    # manifest digest, and `ctr images check` must call it complete.
    import() {
        local file=$1 ns=$2 arch=$3 want=$4 digest listed
        local -a ctr=(ctr -a "$d/sock" -n "$ns")
        local -a opts=(--snapshotter native)
        # Another architecture's image is imported for its platform, not unpacked (as on a
        # board of that architecture, minus the unpack).
        [[ $arch == "$host" ]] || opts+=(--no-unpack --platform "$(platform_of "$arch")")
        if ! "${ctr[@]}" images import "${opts[@]}" "$file" >"$d/import.log" 2>&1; then
            selftest_fail "ctr -n $ns images import $(basename "$file"): $(tail -n 3 "$d/import.log")"
            return
        fi
        digest=$(tar -xOf "$file" index.json | jq -r '.manifests[0].digest')
        listed=$("${ctr[@]}" images ls | awk -v n="$want" '$1 == n { print $3 }')
        if [[ $listed != "$digest" ]]; then
            selftest_fail "$(basename "$file"): $want is listed with '$listed', want $digest"
            return
        fi
        local status
        status=$("${ctr[@]}" images check --snapshotter native | awk -v n="$want" '$1 == n { print $4, $5 }')
        if [[ $status != complete* ]]; then
            selftest_fail "$(basename "$file"): ctr images check says '$status'"
            return
        fi
        selftest_ok "$(basename "$file") -> -n $ns $want $digest, $status$([[ $arch == "$host" ]] && echo ", unpacked")"
    }
    local f arch
    for f in "$tmp"/a/mutantops-*-linux-*.tar; do
        arch=${f##*-linux-}
        arch=${arch%.tar}
        if [[ $arch == amd64 ]]; then
            import "$f" k8s.io "$arch" "$name"
        else
            import "$f" "selftest-$arch" "$arch" "$name"
        fi
    done
    import "$tmp/a/pause.tar" k8s.io "$host" "$PAUSE_NAME"
    import "$tmp/a/standin.tar" k8s.io "$host" "$STANDIN_NAME"

    local names want
    names=$(ctr -a "$d/sock" -n k8s.io images ls -q | sort)
    want=$(printf '%s\n' "$name" "$STANDIN_NAME" "$PAUSE_NAME" | sort)
    if [[ $names == "$want" ]]; then
        selftest_ok "ctr -n k8s.io images ls: exactly $(tr '\n' ' ' <<<"$names")"
    else
        selftest_fail "ctr -n k8s.io images ls: $(tr '\n' ' ' <<<"$names"), want $(tr '\n' ' ' <<<"$want")"
    fi

    kill -TERM "$ctrd_pid"
    for ((i = 0; i < 100; i++)); do kill -0 "$ctrd_pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$ctrd_pid" 2>/dev/null; then
        kill -KILL "$ctrd_pid" 2>/dev/null || true
        selftest_fail "containerd did not stop on SIGTERM"
    fi
    wait "$ctrd_pid" 2>/dev/null || true
    ctrd_pid=""
    rm -rf "$d"
    echo "  containerd stopped, $d removed"
}

selftest_run_helpers() {
    local root=$tmp/run out
    # pause: prints its version, stops on SIGTERM.
    mkdir -p "$root/pause"
    "${CHECK[@]}" unpack "$tmp/a/pause.tar" "$root/pause" >/dev/null
    out=$("$root/pause/pause" -v 2>&1) || true
    if [[ $out == "pause.c $PAUSE_VERSION" ]]; then
        selftest_ok "pause -v: $out"
    else
        selftest_fail "pause -v printed '$out'"
    fi
    "$root/pause/pause" 2>/dev/null &
    helper_pid=$!
    sleep 0.2
    kill -TERM "$helper_pid"
    local status=0
    wait "$helper_pid" || status=$?
    helper_pid=""
    if [[ $status == 0 ]]; then selftest_ok "pause exits 0 on SIGTERM"; else selftest_fail "pause exited $status on SIGTERM"; fi

    # standin: its own entrypoint, chrooted into the unpacked layer, as root and as uid 4321.
    mkdir -p "$root/standin"
    local -a entrypoint
    mapfile -t entrypoint < <("${CHECK[@]}" unpack "$tmp/a/standin.tar" "$root/standin")
    local user port body chroot
    chroot=$(command -v chroot) || die "chroot (coreutils) is missing"
    for user in 0:0 4321:4321; do
        port=$(pick_port)
        env -i PATH=/bin PORT="$port" MUTANT_SELFTEST=variant-a \
            "$chroot" --userspec="$user" "$root/standin" "${entrypoint[@]}" 2>"$tmp/standin.log" &
        helper_pid=$!
        body=""
        local i
        for ((i = 0; i < 50; i++)); do
            body=$(python3 -c 'import sys, urllib.request as u
r = u.urlopen(sys.argv[1], timeout=2)
print(r.headers.get("Content-Type")); print(r.read().decode(), end="")' "http://127.0.0.1:$port/" 2>/dev/null) && break
            sleep 0.1
        done
        kill -TERM "$helper_pid" 2>/dev/null || true
        wait "$helper_pid" 2>/dev/null || true
        helper_pid=""
        local envs
        envs=$(sed 1d <<<"$body")
        if [[ $(head -n1 <<<"$body") == text/plain* ]] && grep -qx MUTANT_SELFTEST=variant-a <<<"$envs" \
            && grep -qx "PORT=$port" <<<"$envs" && [[ $envs == "$(LC_ALL=C sort <<<"$envs")" ]]; then
            selftest_ok "standin as $user on :$port: GET / answers its environment, sorted ($(wc -l <<<"$envs") variables)"
        else
            selftest_fail "standin as $user: GET / answered '$(head -c 300 <<<"$body")' $(tail -n 3 "$tmp/standin.log")"
        fi
    done
}
