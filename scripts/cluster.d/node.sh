# shellcheck shell=bash
# shellcheck disable=SC2034 # CURRENT, FAIL_REASON, NODE_LEFTOVERS, NODE_COMPONENTS: scripts/cluster's
# The real node of scripts/cluster (`scripts/cluster up --real-node`): containerd, kubelet and
# kube-proxy on this machine, beside the fake kwok node, so that images really run. Sourced by
# scripts/cluster, which provides launch, stop, pid_of, wait_for and the paths (and
# scripts/lib.sh's log, die and kc).
#
# What it changes on the machine, and how `down` puts it back:
#   - processes: containerd (and its shims), kubelet, kube-proxy, the pods' processes. `down`
#     removes every pod sandbox through the CRI (crictl rmp), stops the three by pid, then
#     kills whatever is still in the pods' cgroups and any shim of this containerd;
#   - mounts (pod volumes, container root filesystems, network namespaces): unmounted;
#   - cgroups (kubepods): removed;
#   - the bridge $NODE_BRIDGE and its veths: deleted; iptables: `kube-proxy --cleanup`, then
#     any chain that was not there before `up` is flushed and deleted, and a table that was not
#     there is deleted once empty (nft);
#   - sysctls (the kubelet sets kernel.panic, kernel.panic_on_oops, vm.overcommit_memory...,
#     the bridge plugin net.ipv4.ip_forward): the values read before `up` are written back.
# There is one real node per machine (the kubelet's port 10250, the bridge and iptables are
# machine-wide): $NODE_RUN/owner names the state dir that has it.
#
# Debian packages (installed when missing and running as root): containerd, runc,
# containernetworking-plugins, iptables, conntrack, iproute2. kubelet, kube-proxy and crictl are
# built from the Go module proxy and cached like the control plane; the pause image
# (containerd's sandbox) is written by scripts/image from the kubelet's own pause.c.

REAL_NODE_NAME=mutantops-node-0
CRITOOLS_VERSION=v1.34.0         # sigs.k8s.io/cri-tools (crictl), the line of Kubernetes 1.34
PAUSE_IMAGE=registry.k8s.io/pause:3.10
NODE_BRIDGE=mutantops0
NODE_POD_SUBNET=10.89.0.0/24     # apart from kwok's fake 10.244.0.0/16
# Pods land on the real node only while the fake one carries this taint (`schedule real`);
# the real node carries it from its registration until then.
REAL_NODE_TAINT=mutantops.neiam.org/real-node
FAKE_NODE_TAINT=mutantops.neiam.org/fake-node
NODE_BINS=(kubelet kube-proxy)
K8S_NODE_DIR=$CACHE/k8s-node-$K8S_VERSION
CRICTL_DIR=$CACHE/crictl-$CRITOOLS_VERSION
PAUSE_DIR=$CACHE/pause-${PAUSE_IMAGE##*:}
NODE_RUN=/run/mutantops-node     # sockets: short paths, machine-wide like the node itself
NODE_STATE=$STATE/node
NODE_SOCK=$NODE_RUN/containerd.sock
REAL_NODE_MARK=$STATE/real-node  # present while this state dir's cluster has a real node
NODE_COMPONENTS=(containerd kubelet kube-proxy)

real_node_wanted() { [[ -f $REAL_NODE_MARK ]]; }

crictl() {
  local config=$NODE_STATE/crictl.yaml
  if [[ ! -f $config ]]; then
    mkdir -p "$NODE_STATE"
    printf 'runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 30\n' "$NODE_SOCK" "$NODE_SOCK" >"$config"
  fi
  "$CRICTL_DIR/bin/crictl" --config "$config" "$@"
}

# --- building -----------------------------------------------------------------------------------

build_crictl() {
  have_bins "$CRICTL_DIR" crictl && return 0
  local start tmp
  start=$SECONDS
  log "building crictl $CRITOOLS_VERSION with go install"
  tmp=$(mktemp -d "$CACHE/.crictl-$CRITOOLS_VERSION.tmp.XXXXXX")
  BUILD_TMP+=("$tmp")
  (cd "$tmp" && GOBIN=$tmp/bin go install -trimpath -ldflags "-s -w" \
    "sigs.k8s.io/cri-tools/cmd/crictl@$CRITOOLS_VERSION") || die "building crictl failed"
  atomic_install "$tmp" "$CRICTL_DIR"
  log "built crictl $CRITOOLS_VERSION in $((SECONDS - start))s -> $CRICTL_DIR/bin"
}

# The pause image: scripts/image compiles the kubelet's pause.c statically and writes the
# image archive; kept in the cache, keyed by the image's tag.
build_pause() {
  [[ -s $PAUSE_DIR/pause.tar ]] && return 0
  local tmp
  log "writing the pause image $PAUSE_IMAGE (scripts/image pause)"
  tmp=$(mktemp -d "$CACHE/.pause.tmp.XXXXXX")
  BUILD_TMP+=("$tmp")
  "$REPO_ROOT/scripts/image" pause --out "$tmp" >&2 || die "scripts/image pause failed"
  [[ -s $tmp/pause.tar ]] || die "scripts/image pause wrote no pause.tar"
  atomic_install "$tmp" "$PAUSE_DIR"
}

node_built() {
  have_bins "$K8S_NODE_DIR" "${NODE_BINS[@]}" && have_bins "$CRICTL_DIR" crictl \
    && [[ -s $PAUSE_DIR/pause.tar ]]
}

# Debian's containerd, runc, CNI plugins, iptables, conntrack (kube-proxy), iproute2.
node_packages() {
  local missing=() cmd pkg
  while read -r cmd pkg; do
    command -v "$cmd" >/dev/null 2>&1 || [[ -x $cmd ]] || missing+=("$pkg")
  done <<'PKGS'
containerd containerd
runc runc
/usr/lib/cni/bridge containernetworking-plugins
iptables iptables
nft nftables
conntrack conntrack
ip iproute2
PKGS
  ((${#missing[@]})) || return 0
  if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
    die "the real node needs Debian packages: ${missing[*]}"
  fi
  log "installing Debian packages for the real node: ${missing[*]}"
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 \
    || die "apt-get install ${missing[*]} failed"
}

build_node() {
  node_packages
  node_built && return 0
  command -v go >/dev/null || die "go is not installed (needed once to build the real node)"
  mkdir -p "$CACHE"
  go_env
  trap cleanup_build_tmp EXIT
  exec 9>"$CACHE/.build.lock"
  if ! flock -n 9; then
    log "waiting for another build of $CACHE to finish"
    flock 9
  fi
  if ! node_built; then
    log "building the real node into $CACHE: kubelet and kube-proxy (about 10 min on 2 cores" \
        "the first time), crictl and the pause image; later runs reuse them"
    build_k8s_into "$K8S_NODE_DIR" "${NODE_BINS[@]}"
    build_crictl
    build_pause
  fi
  exec 9>&-
}

# --- the node's address ---------------------------------------------------------------------------

# The address the kubelet registers and the API server is reached at from pods (the endpoint of
# the `kubernetes` Service): the one of the interface that holds the default route.
node_ip() {
  local dev
  dev=$(awk 'NR > 1 && $1 != "lo" && $2 == "00000000" { print $1; exit }' /proc/net/route)
  [[ -n $dev ]] || return 1
  ip -4 -o addr show dev "$dev" scope global | awk '{ split($4, a, "/"); print a[1]; exit }'
}

# --- what `up` changes, recorded for `down` -------------------------------------------------------

# The sysctls a node changes, and the others under the same roots: read before `up` and
# written back by `down`. Counters and per-boot values are left out.
SYSCTL_ROOTS=(kernel vm net.ipv4 net.ipv6.conf.all net.ipv6.conf.default net.bridge net.netfilter)
SYSCTL_SKIP='^(kernel\.(random|ns_last_pid|pty\.nr|tainted|sched_domain|usermodehelper|seccomp\.actions_logged)|net\.netfilter\.nf_conntrack_count|net\.ipv4\.(tcp_mem|udp_mem|route\.|neigh\.)|net\.ipv4\.conf\.(veth|mutantops|cni))'
snapshot_sysctls() {
  sysctl -a 2>/dev/null | grep -E "^($(IFS='|'; echo "${SYSCTL_ROOTS[*]//./\\.}"))\." \
    | grep -Ev "$SYSCTL_SKIP" | sort
}
# iptables and ip6tables, one line a chain ("iptables nat KUBE-SERVICES") and a rule
# ("iptables nat -A PREROUTING ..."), without counters.
snapshot_iptables() {
  local t
  for t in iptables ip6tables; do
    command -v "$t-save" >/dev/null 2>&1 || continue
    "$t-save" 2>/dev/null | awk -v t="$t" '
      /^\*/ { table = substr($0, 2); next }
      /^:/ { print t, table, substr($1, 2); next }
      /^-A / { print t, table, $0 }'
  done | sort
}
snapshot_netns() { find /run/netns -mindepth 1 -maxdepth 1 -printf '%f\n' 2>/dev/null | sort || true; }

# --- configuration files ------------------------------------------------------------------------

write_node_config() {
  local ip=$1 ports
  mkdir -p "$NODE_STATE"/{containerd,kubelet,cni/net.d,cni/ipam} "$NODE_RUN"
  chmod 700 "$NODE_STATE"
  ports=$(python3 -c '
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))')
  read -r KUBELET_HEALTHZ_PORT PROXY_HEALTHZ_PORT PROXY_METRICS_PORT <<<"$ports"
  cat >>"$PORTS_FILE" <<PORTS
KUBELET_HEALTHZ_PORT=$KUBELET_HEALTHZ_PORT
PROXY_HEALTHZ_PORT=$PROXY_HEALTHZ_PORT
PROXY_METRICS_PORT=$PROXY_METRICS_PORT
PORTS

  # containerd: everything under the state dir and $NODE_RUN; the CRI with runc and cgroupfs.
  # restrict_oom_score_adj: root in a container without CAP_SYS_RESOURCE (as here) may not
  # lower a process's oom_score_adj, and runc then fails every pod sandbox.
  cat >"$NODE_STATE/containerd/config.toml" <<TOML
version = 2
root = "$NODE_STATE/containerd/root"
state = "$NODE_RUN/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "$NODE_SOCK"
[plugins."io.containerd.internal.v1.opt"]
  path = "$NODE_STATE/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$NODE_STATE/cni/net.d"
TOML

  # One bridge, host-local addresses from a subnet of its own, the pods' gateway on the host.
  # No masquerade from the plugin: pods talk to this machine only.
  cat >"$NODE_STATE/cni/net.d/10-mutantops.conflist" <<CNI
{
  "cniVersion": "0.4.0",
  "name": "mutantops",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$NODE_BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$NODE_STATE/cni/ipam",
        "ranges": [[{"subnet": "$NODE_POD_SUBNET"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
CNI
  # (loopback is set up by containerd itself for every sandbox.)

  # kubelet: cgroupfs (cgroup v1 here), no swap check, client certificates from the cluster CA
  # only (no anonymous or webhook), its own ports. Eviction and image GC are set so that a
  # busy build machine's disk does not evict the test pods.
  cat >"$NODE_STATE/kubelet/config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failSwapOn: false
containerRuntimeEndpoint: unix://$NODE_SOCK
address: $ip
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: AlwaysAllow}
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, nodefs.inodesFree: 1%, imagefs.available: 1%}
imageGCHighThresholdPercent: 99
imageGCLowThresholdPercent: 98
serializeImagePulls: false
protectKernelDefaults: false
resolvConf: /etc/resolv.conf
maxPods: 110
YAML
  node_kubeconfig kubelet "$KUBELET_TOKEN" >"$NODE_STATE/kubelet/kubeconfig"

  # kube-proxy, iptables mode. masqueradeAll: a pod reaching a Service whose endpoint is on
  # the same bridge gets its answer through the host, as it went. Conntrack and localhost
  # node ports left as they are, so it changes no sysctl of its own.
  cat >"$NODE_STATE/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
hostnameOverride: $REAL_NODE_NAME
clientConnection: {kubeconfig: $NODE_STATE/kube-proxy.kubeconfig}
healthzBindAddress: 127.0.0.1:$PROXY_HEALTHZ_PORT
metricsBindAddress: 127.0.0.1:$PROXY_METRICS_PORT
nodePortAddresses: ["$ip/32"]
iptables: {masqueradeAll: true, localhostNodePorts: false}
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
YAML
  node_kubeconfig kube-proxy "$PROXY_TOKEN" >"$NODE_STATE/kube-proxy.kubeconfig"
}

node_kubeconfig() { # node_kubeconfig USER TOKEN
  cat <<KC
apiVersion: v1
kind: Config
clusters:
- name: mutantops-test
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority: $PKI/ca.crt
users:
- name: $1
  user:
    token: $2
contexts:
- name: $1
  context: {cluster: mutantops-test, user: $1}
current-context: $1
KC
}

# Tokens of the kubelet (the Node authorizer's system:node:NAME) and of kube-proxy (bound to
# system:node-proxier by the default RBAC), added to the API server's token file.
node_tokens() {
  KUBELET_TOKEN=$(openssl rand -hex 32)
  PROXY_TOKEN=$(openssl rand -hex 32)
  printf '%s,system:node:%s,kubelet,"system:nodes"\n' "$KUBELET_TOKEN" "$REAL_NODE_NAME" >>"$TOKEN_FILE"
  printf '%s,system:kube-proxy,kube-proxy\n' "$PROXY_TOKEN" >>"$TOKEN_FILE"
}

# --- starting -------------------------------------------------------------------------------------

# Whether anything of the cluster in state dir $1 still runs (its control plane or its node).
cluster_alive_in() {
  local f pid bin exe
  for f in "$1"/pids/*.pid; do
    [[ -f $f ]] || continue
    { read -r pid; read -r bin; } <"$f" || true
    [[ ${pid:-} =~ ^[0-9]+$ && -n ${bin:-} ]] || continue
    alive "$pid" || continue
    exe=$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | head -n1) || continue
    [[ $exe == "$bin" ]] && return 0
  done
  return 1
}

# The real node is one per machine. A cluster that holds it and still runs is waited for
# (MUTANTOPS_NODE_WAIT_SECONDS, 30 min by default, with a line every 30 s); one whose processes
# are all gone (killed with its session, a machine that lost power) is brought down first, so
# that the sysctls and iptables it changed are put back from its own snapshots.
node_claim() {
  local owner waited=0 limit=${MUTANTOPS_NODE_WAIT_SECONDS:-1800}
  [[ $limit =~ ^[0-9]+$ ]] || die "MUTANTOPS_NODE_WAIT_SECONDS must be a number of seconds, not '$limit'"
  # One claimer at a time (closed below, so that containerd and the kubelet do not inherit it).
  exec 9>/run/mutantops-node.lock
  flock 9
  while :; do
    owner=$(cat "$NODE_RUN/owner" 2>/dev/null || true)
    [[ -n $owner && $owner != "$STATE" && -f $owner/real-node ]] || break
    if ! cluster_alive_in "$owner"; then
      log "the real node's last owner, the cluster in $owner, no longer runs: bringing it down" \
          "to put the machine back as it found it"
      MUTANTOPS_CLUSTER_DIR=$owner "$0" down \
        || die "could not clean up after the cluster in $owner: run MUTANTOPS_CLUSTER_DIR=$owner $0 down"
      continue
    fi
    ((waited < limit)) || die "the real node of this machine still belongs to the cluster in" \
      "$owner after ${limit}s: run MUTANTOPS_CLUSTER_DIR=$owner $0 down first"
    ((waited % 30 == 0)) && log "the real node of this machine belongs to the running cluster in" \
      "$owner; waiting for it to go down (${waited}s of ${limit}s)"
    sleep 5
    waited=$((waited + 5))
  done
  mkdir -p "$NODE_RUN"
  echo "$STATE" >"$NODE_RUN/owner"
  exec 9>&-
}

crio_ready() { crictl info >/dev/null; }
real_node_ready() {
  [[ $(kc get node "$REAL_NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}') == True ]]
}
kubelet_healthz() { http_ok "http://127.0.0.1:$KUBELET_HEALTHZ_PORT/healthz"; }
proxy_healthz() { curl -fsS --max-time 3 "http://127.0.0.1:$PROXY_HEALTHZ_PORT/healthz" >/dev/null; }

start_real_node() {
  local ip=$NODE_IP
  node_claim
  snapshot_sysctls >"$STATE/run/sysctl.before"
  snapshot_iptables >"$STATE/run/iptables.before"
  snapshot_netns >"$STATE/run/netns.before"
  write_node_config "$ip"

  # Images come from archives imported into containerd (the pause image here, the others by
  # the tests); nothing is pulled from outside: every registry request goes to a proxy on a
  # closed local port and fails at once.
  HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 NO_PROXY="" \
    launch containerd --config "$NODE_STATE/containerd/config.toml"
  wait_for containerd 60 "containerd CRI" crio_ready
  CURRENT=containerd
  ctr --address "$NODE_SOCK" -n k8s.io images import \
      "$PAUSE_DIR/pause.tar" >/dev/null \
    || { FAIL_REASON="importing $PAUSE_IMAGE into containerd failed"; return 1; }

  launch kubelet \
    --config="$NODE_STATE/kubelet/config.yaml" \
    --kubeconfig="$NODE_STATE/kubelet/kubeconfig" \
    --root-dir="$NODE_STATE/kubelet/root" \
    --hostname-override="$REAL_NODE_NAME" --node-ip="$ip" \
    --node-labels="mutantops.neiam.org/node=real" \
    --register-with-taints="$REAL_NODE_TAINT=true:NoSchedule"
  wait_for kubelet 60 "kubelet /healthz" kubelet_healthz

  launch kube-proxy --config="$NODE_STATE/kube-proxy.yaml"
  wait_for kube-proxy 60 "kube-proxy /healthz" proxy_healthz
  wait_for kubelet 90 "node $REAL_NODE_NAME Ready" real_node_ready
}

# --- scheduling: fake or real ---------------------------------------------------------------------

# schedule real: new pods go to the real node only (the fake node is tainted); schedule fake:
# the other way round (as after `up`). Pods already bound stay where they are.
cmd_schedule() {
  local where=${1:-}
  [[ -f $KUBECONFIG_FILE ]] || die "no cluster in $STATE: run $0 up --real-node"
  real_node_wanted || die "the cluster in $STATE has no real node: run $0 up --real-node"
  case $where in
    real)
      kc taint node "$NODE_NAME" "$FAKE_NODE_TAINT=true:NoSchedule" --overwrite >/dev/null
      kc taint node "$REAL_NODE_NAME" "$REAL_NODE_TAINT-" >/dev/null 2>&1 || true ;;
    fake)
      kc taint node "$REAL_NODE_NAME" "$REAL_NODE_TAINT=true:NoSchedule" --overwrite >/dev/null
      kc taint node "$NODE_NAME" "$FAKE_NODE_TAINT-" >/dev/null 2>&1 || true ;;
    *) die "usage: $0 schedule real|fake" ;;
  esac
  log "new pods are scheduled on the $where node"
}

# --- stopping -------------------------------------------------------------------------------------

# Mount points at or below a directory, deepest first.
mounts_under() {
  awk -v d="$1" '{ gsub(/\\040/, " ", $5); if ($5 == d || index($5, d "/") == 1) print $5 }' \
    /proc/self/mountinfo | sort -r
}

# The pods' cgroups, deepest first, in every v1 hierarchy (or the v2 tree).
pod_cgroups() {
  local root
  for root in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods /sys/fs/cgroup/kubepods.slice; do
    [[ -d $root ]] && find "$root" -depth -type d
  done
  return 0
}

stop_real_node() {
  local pid i m n leftover=0
  [[ -f $REAL_NODE_MARK || -n $(pid_of containerd)$(pid_of kubelet)$(pid_of kube-proxy) ]] || return 0
  log "stopping the real node"
  stop kubelet
  # Every sandbox through the CRI: containers stopped, network torn down, netns and mounts gone.
  if [[ -n $(pid_of containerd) && -x $CRICTL_DIR/bin/crictl ]]; then
    crictl rmp --all --force >/dev/null 2>&1 || log "crictl rmp failed; cleaning up by hand"
  fi
  stop containerd
  stop kube-proxy
  # What the CRI could not remove: processes left in the pods' cgroups, this containerd's shims.
  for ((i = 0; i < 3; i++)); do
    n=0
    while read -r pid; do
      [[ -n $pid ]] || continue
      kill -KILL "$pid" 2>/dev/null && n=$((n + 1))
    done < <(pod_cgroups | while read -r m; do cat "$m/cgroup.procs" 2>/dev/null; done | sort -u)
    for pid in $(pgrep -f "containerd-shim.*-address $NODE_SOCK" || true); do
      kill -KILL "$pid" 2>/dev/null && n=$((n + 1))
    done
    ((n == 0)) && break
    leftover=$((leftover + n))
    sleep 0.5
  done
  ((leftover == 0)) || log "killed $leftover process(es) the CRI left"
  # Mounts: pod volumes, root filesystems, shm, and the network namespaces made since `up`.
  for m in $(mounts_under "$NODE_STATE") $(mounts_under "$NODE_RUN"); do
    umount -l "$m" 2>/dev/null || true
  done
  if [[ -f $STATE/run/netns.before ]]; then
    for n in $(comm -13 "$STATE/run/netns.before" <(snapshot_netns)); do
      umount -l "/run/netns/$n" 2>/dev/null || true
      rm -f "/run/netns/$n"
    done
  fi
  # cgroups: the kubelet's kubepods tree, deepest first.
  while read -r m; do rmdir "$m" 2>/dev/null || true; done < <(pod_cgroups)
  # Network: the bridge (its veths went with the sandboxes) and kube-proxy's rules.
  ip link show "$NODE_BRIDGE" >/dev/null 2>&1 && ip link delete "$NODE_BRIDGE" 2>/dev/null
  if [[ -x $K8S_NODE_DIR/bin/kube-proxy ]]; then
    "$K8S_NODE_DIR/bin/kube-proxy" --cleanup >/dev/null 2>&1 || true
  fi
  restore_iptables
  restore_sysctls
  local left
  left=$(node_leftovers)
  if [[ -n $left ]]; then
    log "still changed after stopping the real node:"
    printf '%s\n' "$left" | sed 's/^/[cluster]   /' >&2
    NODE_LEFTOVERS=1
  fi
  rm -rf "$NODE_STATE" "$NODE_RUN"
  rm -f "$REAL_NODE_MARK"
  log "real node stopped; machine state restored"
}

# Rules and chains that were not there before `up` (kube-proxy's KUBE-*, the kubelet's
# canaries): the new rules deleted, then the new chains flushed and deleted.
restore_iptables() {
  [[ -f $STATE/run/iptables.before ]] || return 0
  local tool table rest
  comm -13 "$STATE/run/iptables.before" <(snapshot_iptables) >"$STATE/run/iptables.new"
  while read -r tool table rest; do
    [[ $rest == "-A "* ]] || continue
    # shellcheck disable=SC2086 # a rule as iptables-save prints it, quoted for the shell
    eval "$tool -w -t $table -D ${rest#-A }" 2>/dev/null || true
  done <"$STATE/run/iptables.new"
  while read -r tool table rest; do
    [[ $rest == "-A "* ]] || "$tool" -w -t "$table" -F "$rest" 2>/dev/null || true
  done <"$STATE/run/iptables.new"
  while read -r tool table rest; do
    [[ $rest == "-A "* ]] || "$tool" -w -t "$table" -X "$rest" 2>/dev/null || true
  done <"$STATE/run/iptables.new"
  # Tables that did not exist before `up` (on a fresh machine kube-proxy and the kubelet make
  # filter, nat and mangle) and now hold only their built-in chains: deleted with nft, since
  # iptables-nft cannot drop a table (with iptables-legacy they are kernel modules: left).
  command -v nft >/dev/null 2>&1 || return 0
  local family
  while read -r tool table; do
    snapshot_iptables | awk -v t="$tool" -v tb="$table" \
      '$1 == t && $2 == tb && $3 == "-A" { rules = 1 } END { exit !rules }' && continue
    case $tool in iptables) family=ip ;; ip6tables) family=ip6 ;; *) continue ;; esac
    nft delete table "$family" "$table" 2>/dev/null || true
  done < <(comm -13 <(awk '{ print $1, $2 }' "$STATE/run/iptables.before" | sort -u) \
                    <(snapshot_iptables | awk '{ print $1, $2 }' | sort -u))
}

restore_sysctls() {
  [[ -f $STATE/run/sysctl.before ]] || return 0
  local line restored=()
  # The old values of what changed; net.ipv4.ip_forward first, since writing it resets every
  # interface's forwarding, which is then written back after it.
  while read -r line; do
    [[ -n $line ]] || continue
    sysctl -q -w "${line%% = *}=${line#* = }" >/dev/null 2>&1 && restored+=("${line%% = *}")
  done < <(comm -23 "$STATE/run/sysctl.before" <(snapshot_sysctls) \
             | awk '/^net\.ipv4\.ip_forward = /{ print; next } { rest = rest $0 "\n" } END { printf "%s", rest }')
  ((${#restored[@]} == 0)) || log "restored sysctls: ${restored[*]}"
}

# What is still changed after `down` (empty when the machine is as before `up`): used by
# `scripts/cluster node-leftovers` and the tests.
node_leftovers() {
  local d
  [[ -f $STATE/run/sysctl.before ]] && d=$(comm -3 "$STATE/run/sysctl.before" <(snapshot_sysctls)) \
    && [[ -n $d ]] && printf 'sysctl: %s\n' "$d"
  [[ -f $STATE/run/iptables.before ]] && d=$(comm -13 "$STATE/run/iptables.before" <(snapshot_iptables)) \
    && [[ -n $d ]] && printf 'iptables: %s\n' "$d"
  ip link show "$NODE_BRIDGE" >/dev/null 2>&1 && echo "bridge: $NODE_BRIDGE"
  d=$(mounts_under "$NODE_STATE"; mounts_under "$NODE_RUN")
  [[ -n $d ]] && printf 'mount: %s\n' "$d"
  d=$(pod_cgroups)
  [[ -n $d ]] && printf 'cgroup: %s\n' "$d"
  d=$(pgrep -f "containerd-shim.*-address $NODE_SOCK" || true)
  [[ -n $d ]] && printf 'process: %s\n' "$d"
  return 0
}
