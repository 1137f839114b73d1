# shellcheck shell=bash
# shellcheck disable=SC2034 # CURRENT, FAIL_REASON: read by scripts/cluster's up_abort
# Starting the control plane of scripts/cluster: each component launched in its own session and
# waited for; the API server's flags in one place (`up` and `restart-apiserver`). Sourced by
# scripts/cluster, which provides pid_of, the paths and the ports (and scripts/lib.sh's log
# and kc).

# --- starting ------------------------------------------------------------------------------------

# launch COMPONENT ARGS...: start the binary in its own session (it outlives this script and
# ^C here), output to its log, pid to its pid file. It inherits none of this script's other
# fds (the state lock, fd 8; the saved stdout/stderr, fds 6 and 7), so `$(scripts/cluster up)`
# or `scripts/cluster up | tee` returns when the script ends.
launch() {
  local c=$1 bin pid
  shift
  bin=$(bin_of "$c")
  if [[ -f $LOGS/$c.log ]]; then mv -f "$LOGS/$c.log" "$LOGS/$c.log.prev"; fi
  printf '=== %s started by scripts/cluster at %s\n' "$c" "$(date -u +%FT%TZ)" >"$LOGS/$c.log"
  setsid "$bin" "$@" >>"$LOGS/$c.log" 2>&1 </dev/null 6>&- 7>&- 8>&- &
  pid=$!
  printf '%s\n%s\n' "$pid" "$bin" >"$PIDS/$c.pid"
  CURRENT=$c
  # Until setsid has exec'd the binary, /proc/PID/cmdline names setsid (or this shell), and
  # pid_of would take the component for dead: on a cold page cache that took long enough for
  # `up` to fail at once. Wait (10 s at most) for the exec or the process's end.
  local i exe
  for ((i = 0; i < 100; i++)); do
    alive "$pid" || break
    exe=$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | head -n1) || true
    [[ $exe == "$bin" ]] && break
    sleep 0.1
  done
  log "started $c (pid $pid)"
}

# wait_for COMPONENT SECONDS WHAT COMMAND...: poll COMMAND until it succeeds, failing if the
# component's process dies or the deadline passes.
wait_for() {
  local c=$1 secs=$2 what=$3 deadline next
  shift 3
  CURRENT=$c
  deadline=$((SECONDS + secs))
  next=$((SECONDS + 10))
  until "$@" >/dev/null 2>&1; do
    [[ -n $(pid_of "$c") ]] || { FAIL_REASON="$c exited while waiting for $what"; return 1; }
    ((SECONDS < deadline)) || { FAIL_REASON="$c: no $what after ${secs}s"; return 1; }
    if ((SECONDS >= next)); then
      log "still waiting for $what ($((deadline - SECONDS))s left)"
      next=$((SECONDS + 10))
    fi
    sleep 0.3
  done
  log "$what: ok"
}

http_ok() { # http_ok URL [curl args]: the body is "ok" or etcd's health
  local url=$1 body
  shift
  body=$(curl -fsS --max-time 3 "$@" "$url") || return 1
  [[ $body == ok || $body == *'"health":"true"'* ]]
}
api_readyz() {
  http_ok "https://127.0.0.1:$API_PORT/readyz" --cacert "$PKI/ca.crt" \
    -H "Authorization: Bearer $ADMIN_TOKEN"
}
node_ready() {
  [[ $(kc get node "$NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}') == True ]]
}
default_sa() { kc -n default get serviceaccount default; }

# The one fake node. kwok plays its kubelet (it manages the nodes annotated
# kwok.x-k8s.io/node=fake, so never the real node of `up --real-node`): the node-initialize
# stage makes it Ready, the lease heartbeat keeps it so, and pods bound to it become
# Running+Ready. No taint, so ordinary pods land on it; podCIDR gives kwok room for 65k pod IPs.
node_manifest() {
  cat <<NODE
apiVersion: v1
kind: Node
metadata:
  name: $NODE_NAME
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    type: kwok
    kubernetes.io/hostname: $NODE_NAME
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
spec:
  podCIDR: 10.244.0.0/16
  podCIDRs: [10.244.0.0/16]
status:
  capacity: {cpu: "32", memory: 256Gi, pods: "1000", ephemeral-storage: 1Ti}
  allocatable: {cpu: "32", memory: 256Gi, pods: "1000", ephemeral-storage: 1Ti}
  nodeInfo:
    architecture: amd64
    operatingSystem: linux
    kubeletVersion: fake
    kubeProxyVersion: fake
NODE
}

# How kube-apiserver finds its advertise address (written into the `kubernetes` Service's
# endpoints): with --bind-address=127.0.0.1 it takes the address of the interface that holds
# the default route. A loopback address is no choice (Endpoints may not hold loopback IPs),
# so none is passed. On a machine with no default route on a real interface (no network at
# all, e.g. a bare network namespace, where only lo's "unreachable" IPv6 route exists)
# kube-apiserver exits with "Unable to find suitable network address": then, and only then,
# a TEST-NET-1 address (RFC 5737, never routed) is advertised. Nothing connects to it: there
# is no kube-proxy and every client here uses 127.0.0.1.
advertise_args() {
  local v4 v6
  v4=$(awk 'NR > 1 && $1 != "lo" && $2 == "00000000" { print $1 }' /proc/net/route 2>/dev/null)
  v6=$(awk '$1 == "00000000000000000000000000000000" && $2 == "00" && $NF != "lo" { print $NF }' \
         /proc/net/ipv6_route 2>/dev/null)
  if [[ -z $v4 && -z $v6 ]]; then
    log "no default route on this machine: advertising 192.0.2.1 (see advertise_args)"
    echo "--advertise-address=192.0.2.1"
  fi
}

# start_apiserver: launch kube-apiserver against the running etcd with this state dir's ports,
# certificates, token file and audit policy, and wait for /readyz. The one place its flags are
# written: `up` and `restart-apiserver` both start it here.
start_apiserver() {
  local adv compaction bind=127.0.0.1
  adv=$(advertise_args)
  # With a real node, pods reach the API server through the `kubernetes` Service at the
  # node's address, so it listens there too (still TLS, token or client certificate).
  if real_node_wanted; then
    load_ports
    [[ -n ${NODE_IP:-} ]] || { FAIL_REASON="no NODE_IP in $PORTS_FILE"; return 1; }
    bind=0.0.0.0 adv="--advertise-address=$NODE_IP"
  fi
  compaction=$(cat "$STATE/run/etcd-compaction" 2>/dev/null || echo 5m)
  # shellcheck disable=SC2086 # $adv is empty or one flag
  launch kube-apiserver \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address="$bind" --secure-port="$API_PORT" $adv \
    --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
    --client-ca-file="$PKI/ca.crt" \
    --kubelet-client-certificate="$PKI/kubelet-client.crt" \
    --kubelet-client-key="$PKI/kubelet-client.key" \
    --kubelet-preferred-address-types=InternalIP,Hostname \
    --token-auth-file="$TOKEN_FILE" \
    --authorization-mode=Node,RBAC \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$PKI/sa.pub" \
    --service-account-signing-key-file="$PKI/sa.key" \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --cert-dir="$STATE/run/kube-apiserver" \
    --allow-privileged=true --profiling=false \
    --audit-policy-file="$STATE/run/audit-policy.yaml" \
    --audit-log-path="$AUDIT_LOG" --audit-log-format=json --audit-log-maxsize=500 \
    --audit-log-maxbackup=1 \
    --etcd-compaction-interval="$compaction"
  wait_for kube-apiserver 90 "kube-apiserver /readyz" api_readyz
}

# start_kine: kine on SQLite in place of etcd, as k3s runs it (with kine's own default SQLite
# settings, its DefaultParams: WAL, synchronous NORMAL, busy timeout 30 s, immediate
# transactions; fsync is on, where etcd here runs with --unsafe-no-fsync), serving the etcd API on the etcd
# port and its Prometheus metrics (kine_sql_total, kine_sql_time_seconds) on the peer port,
# which etcd alone uses. Built without cgo, kine's SQLite is modernc's translation of the same
# C library. Compaction is left to kube-apiserver (MUTANTOPS_ETCD_COMPACTION), as with etcd.
KINE_SQLITE_PARAMS='_journal_mode=WAL&_busy_timeout=30000&_synchronous=NORMAL&_txlock=immediate&_stmt_cache_size=20&cache=shared'
start_kine() {
  mkdir -p "$STATE/kine"
  launch kine \
    --endpoint="sqlite://$STATE/kine/state.db?$KINE_SQLITE_PARAMS" \
    --listen-address="127.0.0.1:$ETCD_PORT" \
    --metrics-bind-address="127.0.0.1:$ETCD_PEER_PORT"
  wait_for kine 30 "kine metrics" curl -sf -o /dev/null "http://127.0.0.1:$ETCD_PEER_PORT/metrics"
}

start_cluster() {
  local kcfg=$KUBECONFIG_FILE
  mkdir -p "$PIDS" "$LOGS" "$STATE/run"
  echo "${MUTANTOPS_ETCD_COMPACTION:-5m}" >"$STATE/run/etcd-compaction"
  pick_ports
  if real_node_wanted; then
    NODE_IP=$(node_ip) || { FAIL_REASON="no address on the default route's interface for the real node"; return 1; }
    echo "NODE_IP=$NODE_IP" >>"$PORTS_FILE"
  fi
  gen_pki
  write_kubeconfig

  echo "${MUTANTOPS_DATASTORE:-etcd}" >"$STATE/run/datastore"
  if [[ $(datastore) == kine ]]; then
    start_kine
  else
    launch etcd \
      --name=mutantops --data-dir="$STATE/etcd" \
      --listen-client-urls="http://127.0.0.1:$ETCD_PORT" \
      --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
      --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
      --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
      --initial-cluster="mutantops=http://127.0.0.1:$ETCD_PEER_PORT" \
      --unsafe-no-fsync --log-level=warn
    wait_for etcd 30 "etcd health" http_ok "http://127.0.0.1:$ETCD_PORT/health"
  fi

  # Every request at Metadata level (who, verb, object; no bodies): tests count the operator's
  # own requests from it by user agent (a steady-state reconcile must make none).
  cat >"$STATE/run/audit-policy.yaml" <<'POLICY'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
POLICY
  rm -f "$AUDIT_LOG"

  start_apiserver

  # kube-controller-manager and kube-scheduler get no --authentication-kubeconfig /
  # --authorization-kubeconfig: their secure ports then only serve the always-allowed
  # /healthz, /readyz, /livez (all this script needs), and they don't log a stream of
  # "missing requestheader-client-ca-file" errors (this apiserver has no front proxy).
  # The controller manager's API client gets more than its default 20 qps / 30 burst, which
  # throttles the Deployment and ReplicaSet controllers when a test suite runs in parallel.
  launch kube-controller-manager \
    --kubeconfig="$kcfg" \
    --bind-address=127.0.0.1 --secure-port="$KCM_PORT" --cert-dir="$STATE/run/kube-controller-manager" \
    --leader-elect=false \
    --controllers='*' \
    --root-ca-file="$PKI/ca.crt" \
    --service-account-private-key-file="$PKI/sa.key" \
    --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --kube-api-qps=200 --kube-api-burst=400 \
    --profiling=false
  launch kube-scheduler \
    --kubeconfig="$kcfg" \
    --bind-address=127.0.0.1 --secure-port="$SCHED_PORT" --cert-dir="$STATE/run/kube-scheduler" \
    --leader-elect=false --profiling=false
  # kwok's own HTTP server (healthz, fake kubelet endpoints) on a loopback port; its stages
  # come from the file written at build time (see build_kwok).
  launch kwok \
    --kubeconfig="$kcfg" --manage-all-nodes=false \
    --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
    --config="$KWOK_DIR/stages.yaml" \
    --node-lease-duration-seconds=40 \
    --server-address="127.0.0.1:$KWOK_PORT"

  wait_for kube-controller-manager 60 "kube-controller-manager /healthz" \
    http_ok "https://127.0.0.1:$KCM_PORT/healthz" -k
  wait_for kube-scheduler 60 "kube-scheduler /healthz" \
    http_ok "https://127.0.0.1:$SCHED_PORT/healthz" -k
  wait_for kwok 60 "kwok /healthz" http_ok "http://127.0.0.1:$KWOK_PORT/healthz"

  CURRENT=kube-apiserver
  node_manifest | kc apply -f - >/dev/null || { FAIL_REASON="creating node $NODE_NAME failed"; return 1; }
  wait_for kwok 60 "node $NODE_NAME Ready" node_ready
  wait_for kube-controller-manager 60 "ServiceAccount default/default" default_sa
  if real_node_wanted; then start_real_node; fi
}
