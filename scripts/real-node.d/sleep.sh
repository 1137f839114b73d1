# shellcheck shell=bash
# shellcheck disable=SC2154 # work, NS, OPNS, BSNAP, DEVICE_BSNAP, ...: set by scripts/real-node
# The sleep step of scripts/real-node (R42), sourced by it, which provides ok and
# the variables it uses (and scripts/lib.sh's step, log, fail, kc and wait_until).

# --- Variants that sleep (R42) ------------------------------------------------------------
# browser-snap with spec.devices.sleep: its two variants go to zero replicas and a device's
# poll wakes them on the real node. The wake is timed from the poll (t0, just before curl
# sends it) to the variant's Service answering GET /cgi-bin/env at the node's address and
# the Service's nodePort (what the poll's `service` names, as a display reaches it); before
# each wake the variant has no pod at all, so whatever answers is a pod of this wake. The
# device polls again after `Retry-After`, as firmware does, so keepWarm never ends a wake
# before it is ready. WAKES wakes, alternately of lilygo47 and radxa-8-hd; then a device per
# variant polls every few seconds (Refresh-Rate) with warmup above the measured p95, and
# finds its variant ready and answering on every poll after its first ready one, the variant's
# Deployment seen at zero replicas (spec and status: no running pod) between any two polls.
WAKES=10
SCHEDULED_POLLS=3               # checked polls of each scheduled device, after its first
wake_s=()                       # the timed wakes, in seconds, in order
wake_label=()

usec() { printf '%s\n' "${EPOCHREALTIME/./}"; }
secs_of() { awk -v u="$1" 'BEGIN { printf "%.2f", u / 1e6 }'; }
# device_poll ID TOKEN RATE: the device's poll, its answer in $work/poll-ID.json; prints the
# HTTP status; how long the answer took at the operator (from the request sent to the whole
# answer read: curl's time_total - time_pretransfer, seconds) is added to $work/poll-times.
device_poll() {
    local out
    out=$(curl -sS -o "$work/poll-$1.json" -w '%{http_code} %{time_pretransfer} %{time_total}' \
        -H "Authorization: Bearer $2" -H "Refresh-Rate: $3" "$DEVICE_BSNAP/devices/$1/poll")
    awk -v p="${out#* }" 'BEGIN { split(p, t, " "); printf "%.6f\n", t[2] - t[1] }' >>"$work/poll-times"
    printf '%s' "${out%% *}"
}
# poll_burst N ID TOKEN...: N polls at once from one process (poll_burst.py: N connections,
# then N requests written together), spread over the devices given as ID TOKEN pairs; each
# must answer 200, timed into $work/poll-times as device_poll does.
poll_burst() {
    local code t
    python3 "$repo/scripts/real-node.d/poll_burst.py" "$DEVICE_BSNAP" "$@" >"$work/burst" ||
        fail "the burst of polls failed"
    while read -r code t; do
        [[ $code == 200 ]] || fail "a poll of the burst answered $code"
        printf '%s\n' "$t" >>"$work/poll-times"
    done <"$work/burst"
}
# service_url ANSWER: http://node:nodePort of a poll's answer's `service`.
service_url() {
    local port
    port=$(jq -r '.service.ports[0].nodePort // empty' "$1")
    [[ $port =~ ^[0-9]+$ ]] || return 1
    printf 'http://%s:%s\n' "$node_ip" "$port"
}
# answered_by URL: the pod (its HOSTNAME) that answered GET URL/cgi-bin/env; fails if none did.
answered_by() {
    curl -fsS --max-time 1 "$1/cgi-bin/env" 2>/dev/null | sed -n 's/^HOSTNAME=//p' | grep .
}
# routed URL: the pod that answered URL, asked again for up to ROUTE_GRACE seconds, as a display
# retries a fetch that failed: a pod counts as ready (and the poll says so) once its readiness
# probe passed, and the node's kube-proxy routes its Service to it a moment later (by default
# it syncs its rules at most once a second). Prints "POD SECONDS" (how long until it answered).
ROUTE_GRACE=3
routed() {
    local t0 end who
    t0=$(usec)
    end=$((t0 + ROUTE_GRACE * 1000000))
    until who=$(answered_by "$1"); do
        (($(usec) < end)) || return 1
        sleep 0.1
    done
    printf '%s %s\n' "$who" "$(secs_of $(($(usec) - t0)))"
}
# deploy_counts LABEL: "spec.replicas status.replicas status.readyReplicas" of its Deployment.
deploy_counts() {
    kc -n "$NS" get deploy "browser-snap-$1" -o json \
        | jq -r '"\(.spec.replicas // 0) \(.status.replicas // 0) \(.status.readyReplicas // 0)"'
}
# variant_asleep LABEL: Idle in the Mutation's status, its Deployment at zero, no pod left.
variant_asleep() {
    [[ $(kc -n "$NS" get mutation browser-snap -o json | jq -r --arg l "$1" \
        '.status.variants[] | select(.label == $l) | .sleep.state // empty') == Idle ]] || return 1
    [[ $(deploy_counts "$1") == "0 0 0" ]] || return 1
    [[ -z $(kc -n "$NS" get pods -l "mutantops.neiam.org/variant=$1" -o name) ]]
}
admin_call() { # admin_call METHOD URL [BODY]: prints the HTTP status, the body in $work/admin.out
    curl -sS -o "$work/admin.out" -w '%{http_code}' -X "$1" -H "Authorization: Bearer $TOKEN" \
        -H 'Content-Type: application/json' ${3:+-d "$3"} "$2"
}
# enroll ID LABEL: enrolls device ID into variant LABEL with the enrollment key (the Mutation's
# token); prints the device's token.
enroll() {
    local code
    code=$(curl -sS -o "$work/enroll-$1.json" -w '%{http_code}' -H "Authorization: Bearer $key" \
        -H 'Content-Type: application/json' -d "{\"id\": \"$1\", \"label\": \"$2\"}" "$BSNAP/devices")
    [[ $code == 201 ]] || fail "enrolling $1 into $2: $code $(cat "$work/enroll-$1.json")"
    jq -r .token "$work/enroll-$1.json"
}
set_sleep() { # set_sleep JSON: spec.devices.sleep of browser-snap
    kc -n "$NS" patch mutation browser-snap --type merge \
        -p "{\"spec\": {\"devices\": {\"enrollment\": \"Open\", \"sleep\": $1}}}" >/dev/null \
        || fail "patching spec.devices.sleep: $1"
}

# timed_wake LABEL ID TOKEN: waits until LABEL sleeps with no pod, then wakes it with a poll
# of device ID and times it to its Service answering.
timed_wake() {
    local label=$1 id=$2 tok=$3 t0 t code url retry next_poll deadline who
    wait_until 60 "$label asleep with no pod" variant_asleep "$label"
    t0=$(usec)
    code=$(device_poll "$id" "$tok" 3600)
    [[ $code == 200 ]] || fail "poll of $id: $code $(cat "$work/poll-$id.json")"
    [[ $(jq -r .ready "$work/poll-$id.json") == false ]] \
        || fail "$label has no pod, and the poll answered ready: $(cat "$work/poll-$id.json")"
    retry=$(jq -r '.retryAfterSeconds // 1' "$work/poll-$id.json")
    url=$(service_url "$work/poll-$id.json") || fail "the poll names no nodePort: $(cat "$work/poll-$id.json")"
    next_poll=$((t0 + retry * 1000000)) deadline=$((t0 + 60000000))
    until who=$(answered_by "$url"); do
        t=$(usec)
        ((t < deadline)) || fail "$label: its Service $url did not answer within 60 s of the poll"
        if ((t >= next_poll)); then
            code=$(device_poll "$id" "$tok" 3600)
            [[ $code == 200 ]] || fail "poll of $id: $code $(cat "$work/poll-$id.json")"
            retry=$(jq -r '.retryAfterSeconds // 1' "$work/poll-$id.json")
            next_poll=$((t + retry * 1000000))
        fi
        sleep 0.05
    done
    t=$(usec)
    [[ $who == browser-snap-$label-* ]] || fail "$url was answered by $who, not a pod of $label"
    wake_s+=("$(secs_of $((t - t0)))")
    wake_label+=("$label")
}

# pct P VALUES...: the P-th percentile, nearest rank, of VALUES.
pct() {
    local p=$1
    shift
    printf '%s\n' "$@" | sort -g | awk -v p="$p" '{ v[NR] = $1 } END { r = int((p * NR + 99) / 100); print v[r < 1 ? 1 : r] }'
}

sleep_checks() {
    local t_step tok_lily tok_radxa label i w p50 p95 rate
    t_step=$(usec)
    wake_load=$(cut -d' ' -f1-3 /proc/loadavg)
    key=$(kc -n "$NS" get secret browser-snap-secret -o jsonpath='{.data.token}' | base64 -d)
    node_ip=$(kc get node "$NODE" -o jsonpath='{.status.addresses[?(@.type=="InternalIP")].address}')
    [[ -n $key && -n $node_ip ]] || fail "no enrollment key or no address of $NODE"
    set_sleep '{"idleAfter": "2s", "warmup": "2s", "keepWarm": "2s", "maxWakePerHour": 3600}'
    # The owner opens both spec variants to enrollment (enrollable: true), so that boards
    # enroll into them with the enrollment key (R39).
    kc -n "$NS" patch mutation browser-snap --type json -p '[
        {"op": "add", "path": "/spec/variants/0/enrollable", "value": true},
        {"op": "add", "path": "/spec/variants/1/enrollable", "value": true}]' >/dev/null \
        || fail "marking browser-snap's variants enrollable"
    for label in lilygo47 radxa-8-hd; do
        wait_until 90 "$label asleep with no pod" variant_asleep "$label"
    done
    ok "spec.devices.sleep: lilygo47 and radxa-8-hd Idle, their Deployments at 0 replicas, no pod"

    # One device per variant, each said to come back in an hour: only its polls wake it. (A
    # device enrolled and not yet polled keeps its variant up: its first poll is not timed.)
    tok_lily=$(enroll wake-lily lilygo47)
    tok_radxa=$(enroll wake-radxa radxa-8-hd)
    [[ $(device_poll wake-lily "$tok_lily" 3600) == 200 ]] || fail "first poll of wake-lily"
    [[ $(device_poll wake-radxa "$tok_radxa" 3600) == 200 ]] || fail "first poll of wake-radxa"
    for i in $(seq 0 $((WAKES - 1))); do
        if ((i % 2 == 0)); then
            timed_wake lilygo47 wake-lily "$tok_lily"
        else
            timed_wake radxa-8-hd wake-radxa "$tok_radxa"
        fi
    done
    p50=$(pct 50 "${wake_s[@]}")
    p95=$(pct 95 "${wake_s[@]}")
    wake_p50=$p50 wake_p95=$p95
    printf '\n  %-5s %-12s %s\n' wake variant "poll to the Service answering"
    for i in "${!wake_s[@]}"; do
        printf '  %-5s %-12s %6s s\n' "$((i + 1))" "${wake_label[$i]}" "${wake_s[$i]}"
    done
    printf '  %-18s %6s s\n  %-18s %6s s\n\n' "p50 ($WAKES wakes)" "$p50" "p95 (nearest rank)" "$p95"
    ok "$WAKES wakes by a poll, each answered by a new pod through the NodePort: p50 ${p50}s, p95 ${p95}s"
    delete_devices wake-lily wake-radxa

    # A device per variant on a schedule: warmup above the p95 just measured, keepWarm 1 s,
    # and a Refresh-Rate that leaves each variant down a few seconds between two polls (it is
    # up from warmup + a 2 s margin before an expected poll to 2 s + keepWarm after it).
    w=$(awk -v p="$p95" 'BEGIN { printf "%d", int(p) + 1 }')
    rate=$((w + 8))
    set_sleep "{\"idleAfter\": \"2s\", \"warmup\": \"${w}s\", \"keepWarm\": \"1s\", \"maxWakePerHour\": 3600}"
    scheduled_devices "$w" "$rate"
    sched_w=$w sched_rate=$rate
    # Fifty polls at once (their variants asleep again or about to be), and every poll of the
    # step: how long a device waited for its answer, through the Service's ClusterIP.
    poll_burst 50 snap-lily "$sched_tok_lily" snap-radxa "$sched_tok_radxa"
    mapfile -t poll_s <"$work/poll-times"
    poll_n=${#poll_s[@]}
    poll_p50=$(awk -v s="$(pct 50 "${poll_s[@]}")" 'BEGIN { printf "%.1f", s * 1000 }')
    poll_p99=$(awk -v s="$(pct 99 "${poll_s[@]}")" 'BEGIN { printf "%.1f", s * 1000 }')
    poll_max=$(awk -v s="$(pct 100 "${poll_s[@]}")" 'BEGIN { printf "%.1f", s * 1000 }')
    ok "$poll_n polls of sleeping variants (50 of them at once) answered in p50 ${poll_p50} ms, p99 ${poll_p99} ms, max ${poll_max} ms"
    delete_devices snap-lily snap-radxa
    sleep_step_s=$(secs_of $(($(usec) - t_step)))
}

# write_wake_bench: the wake figures into BENCHMARKS.md: the table's "real node: wake" row
# and subsection "Wake to ready on the real node" of "How each figure is measured", each
# replaced where it is (scripts/bench keeps both as they are).
write_wake_bench() {
    local default rows i result
    default=$(sed -n 's/^pub const DEFAULT_WARMUP: &str = "\([0-9]*\)s";$/\1/p' src/crd/sleep.rs)
    [[ $default =~ ^[0-9]+$ ]] || fail "no DEFAULT_WARMUP in seconds in src/crd/sleep.rs"
    result=met
    awk -v p="$wake_p95" -v d="$default" 'BEGIN { exit !(p < d) }' || result='**missed**'
    rows=""
    for i in "${!wake_s[@]}"; do
        rows+="| $((i + 1)) | ${wake_label[$i]} | ${wake_s[$i]} s |"$'\n'
    done
    printf '| real node: a wake by a poll to the Service answering, p50 / p95 of %s (scripts/real-node) | %s s / %s s | p95 < default warmup (%s s) | %s |\n' \
        "$WAKES" "$wake_p50" "$wake_p95" "$default" "$result" >"$work/wake-row.md"
    result=met
    awk -v m="$poll_max" 'BEGIN { exit !(m < 100) }' || result='**missed**'
    printf '| real node: a poll of a sleeping variant answered, p50 / p99 / max of %s, 50 at once among them (scripts/real-node) | %s ms / %s ms / %s ms | max < 100 ms | %s |\n' \
        "$poll_n" "$poll_p50" "$poll_p99" "$poll_max" "$result" >>"$work/wake-row.md"
    cat >"$work/wake-section.md" <<MD
### Wake to ready on the real node

Written by \`scripts/real-node --wake-bench\` (\`scripts/bench\` keeps it as it is):
$(date -u '+%Y-%m-%d %H:%M UTC'), commit \`$(git rev-parse --short HEAD)\`, on the real node of
\`scripts/cluster up --real-node\` (containerd, kubelet and kube-proxy in iptables mode on this
machine, $(nproc) cores shared with the control plane, the operator and other work: load average
$wake_load when the step began). The whole step, set-up, wakes and scheduled polls, took
$sleep_step_s s of the run.

deploy/examples/browser-snap.yaml on the stand-in image (busybox httpd, already in the node's
containerd: no pull), as the rest of \`scripts/real-node\` runs it, with \`spec.devices.sleep\`
(\`idleAfter: 2s\`, \`warmup: 2s\`, \`keepWarm: 2s\`, \`maxWakePerHour: 3600\`) and the base's
\`terminationGracePeriodSeconds: 1\` (busybox as PID 1 ignores SIGTERM; a renderer exits on it).
One device per variant is enrolled and polls with \`Refresh-Rate: 3600\`, so that nothing but its
poll wakes the variant. A wake: once the variant is \`Idle\`, its Deployment at 0 replicas and
none of its pods left, the clock starts just before curl sends the device's poll (through
the ClusterIP of \`svc/mutantops-api\`, kube-proxy's rules on this machine), which answers \`ready: false\` with the Service; then
curl asks \`GET /cgi-bin/env\` of the Service every 50 ms (1 s timeout each) until a pod of the
variant answers 200 (its \`HOSTNAME\`), the device polling again after each \`Retry-After\` as
firmware does. The Service is reached as a display reaches it, and as is reliable here: the
node's InternalIP and the \`nodePort\` the poll's \`service\` names, served by kube-proxy's
rules on this machine (it serves node ports at that address only, \`nodePortAddresses\`, not at
127.0.0.1); no \`kubectl port-forward\` in the way, which would pick one pod at its start. The
time holds the poll's write, the leader's scale-up, the Deployment and ReplicaSet controllers,
the scheduler, the kubelet starting a sandbox (bridge CNI) and the container, the EndpointSlice
and kube-proxy's rules. The wakes alternate between lilygo47 (2 instances) and radxa-8-hd (3);
the first pod to answer counts. Percentiles by nearest rank: of 10, p50 is the 5th and p95 the
10th (the slowest).

| wake | variant | poll to the Service answering |
| ---: | --- | ---: |
${rows}
p50 **${wake_p50} s**, p95 **${wake_p95} s**.

Then a device per variant polls every ${sched_rate} s (\`Refresh-Rate: ${sched_rate}\`, half a period
apart) with \`warmup: ${sched_w}s\` (above that p95) and \`keepWarm: 1s\`: each of its
${SCHEDULED_POLLS} polls after the first found its variant ready (\`ready: true\`, and the Service
answering from a pod that was not there at the previous poll), and between any two of them the
variant's Deployment was seen at 0 replicas, spec and status (it is up from \`warmup\` and a 2 s margin
before an expected poll to 2 s and \`keepWarm\` after it).

A poll never waits for its variant: every poll of the step (the wakes' and the scheduled
devices', by curl) and then 50 polls at once of the scheduled devices (one process with 50
connections, \`scripts/real-node.d/poll_burst.py\`, every request written together), ${poll_n} in
all, through the ClusterIP of \`svc/mutantops-api\` by kube-proxy's rules, each timed at the
operator, from its request sent to its whole answer read (curl's \`time_total\` less
\`time_pretransfer\`: the connection's setup is the kernel's, not the operator's): p50
**${poll_p50} ms**, p99 **${poll_p99} ms**, max **${poll_max} ms**. The answer comes from the
replica's cache; the poll's write, which wakes the variant, is not waited for.

The default \`warmup\` (\`DEFAULT_WARMUP\` in src/crd/sleep.rs) is ${default} s: above this p95,
which is only the platform's part of a wake. The stand-in answers as soon as its container
runs; a renderer (a headless browser of a few hundred MiB, on a board with 1-4 GiB and slower
cores and storage) must first start itself, and the rest of the default is room for that. A
device that polls before its variant is ready is told \`ready: false\` with \`Retry-After\` and
counted (\`mutantops_late_wakes_total\`); with \`mutantops_variant_wake_to_ready_seconds\` that
tells an owner whose renderer starts faster or slower what to set \`warmup\` to.
MD
    python3 "$repo/scripts/real-node.d/benchmarks_md.py" "$work/wake-row.md" "$work/wake-section.md" \
        "| real node: " "| real node: screens" || fail "writing the wake figures into BENCHMARKS.md"
    log "wrote the wake figures into BENCHMARKS.md"
}

delete_devices() { # delete_devices ID...: the admin removes them
    local id code
    for id in "$@"; do
        code=$(admin_call DELETE "$BSNAP/devices/$id")
        [[ $code == 204 ]] || fail "DELETE device $id: $code $(cat "$work/admin.out")"
    done
}

# scheduled_devices WARMUP RATE: snap-lily (lilygo47) and snap-radxa (radxa-8-hd) enroll and
# poll every RATE seconds, half a period apart (a first poll that finds its variant not ready
# comes back as told, and the schedule starts from the one that finds it ready); every poll
# after that must find the variant ready and answered by a pod that was not there at the
# previous poll, the variant seen at zero replicas (spec and status) in between.
scheduled_devices() {
    local w=$1 rate=$2 t d code who took url counts
    local ids=(snap-lily snap-radxa) labels=(lilygo47 radxa-8-hd) toks=() due=() polls=(0 0)
    local zero=(0 0) before=("" "") tok_lily tok_radxa retry
    tok_lily=$(enroll snap-lily lilygo47)
    tok_radxa=$(enroll snap-radxa radxa-8-hd)
    toks=("$tok_lily" "$tok_radxa")
    sched_tok_lily=$tok_lily sched_tok_radxa=$tok_radxa
    t=$(usec)
    due=("$t" $((t + rate * 500000)))
    while ((polls[0] <= SCHEDULED_POLLS || polls[1] <= SCHEDULED_POLLS)); do
        for d in 0 1; do
            ((polls[d] <= SCHEDULED_POLLS && $(usec) >= due[d])) || continue
            code=$(device_poll "${ids[$d]}" "${toks[$d]}" "$rate")
            [[ $code == 200 ]] || fail "poll of ${ids[$d]}: $code $(cat "$work/poll-${ids[$d]}.json")"
            if ((polls[d] == 0)) && [[ $(jq -r .ready "$work/poll-${ids[$d]}.json") != true ]]; then
                # Its first poll woke the variant: it comes back as told (Retry-After), as a
                # display does, and its schedule starts from the poll that finds it ready.
                retry=$(jq -r '.retryAfterSeconds // 1' "$work/poll-${ids[$d]}.json")
                due[d]=$(($(usec) + retry * 1000000))
                continue
            fi
            if ((polls[d] > 0)); then
                [[ $(jq -r .ready "$work/poll-${ids[$d]}.json") == true ]] \
                    || fail "${ids[$d]}'s poll $((polls[d] + 1)) (every ${rate}s, warmup ${w}s): not ready: $(cat "$work/poll-${ids[$d]}.json")"
                url=$(service_url "$work/poll-${ids[$d]}.json") || fail "the poll names no nodePort"
                read -r who took < <(routed "$url") \
                    || fail "${ids[$d]}'s poll said ready, and $url did not answer within ${ROUTE_GRACE} s"
                [[ $who == "browser-snap-${labels[$d]}-"* ]] || fail "$url was answered by $who"
                [[ " ${before[$d]} " != *" pod/$who "* ]] \
                    || fail "${labels[$d]}: $who answered, a pod that ran at the previous poll"
                ((zero[d] == 1)) \
                    || fail "${labels[$d]} was not seen at zero replicas between ${ids[$d]}'s polls $((polls[d])) and $((polls[d] + 1))"
                ok "${ids[$d]} poll $((polls[d] + 1)) (every ${rate}s, warmup ${w}s): ready, answered by $who after ${took} s; ${labels[$d]} at 0 replicas since the last poll"
            fi
            before[d]=$(kc -n "$NS" get pods -l "mutantops.neiam.org/variant=${labels[$d]}" -o name | tr '\n' ' ')
            zero[d]=0
            if ((polls[d] == 0)); then
                due[d]=$(($(usec) + rate * 1000000))
            else
                due[d]=$((due[d] + rate * 1000000))
            fi
            polls[d]=$((polls[d] + 1))
        done
        for d in 0 1; do
            counts=$(deploy_counts "${labels[$d]}") || fail "reading browser-snap-${labels[$d]}"
            [[ $counts != "0 0 0" ]] || zero[d]=1
        done
        sleep 0.2
    done
}
