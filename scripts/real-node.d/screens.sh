# shellcheck shell=bash
# shellcheck disable=SC2154 # work, NS, OPNS, API, TOKEN, STANDIN, wake_p95...: set by scripts/real-node
# The screens step of scripts/real-node (R53), sourced by it after the sleep step, which
# provides ok, port_forward, lease_holder, usec/secs_of and the wake p95 (and scripts/lib.sh's
# step, log, fail, kc and wait_until).
#
# deploy/examples/screens/browser-snap-screens.yaml on the stand-in image, whose
# /cgi-bin/screen answers the picture of screen_source.py, which runs on this machine (the real
# node is this machine), counts every request the renderer passes on, and serves the file the
# step changes; the example's spec.screen points at /cgi-bin/screen,
# with its time compressed SCREEN_FACTOR times (refreshEvery 15m -> SCREEN_REFRESH s, a display
# polling every minute -> every 60/SCREEN_FACTOR s). SCREEN_DISPLAYS displays (displays.py)
# enroll and poll for a simulated hour while the test changes the picture once and has the
# renderer answer 500 for a while; then the same displays poll the same Mutation without
# spec.screen, for the renderer's awake time without it. Prints one line: fetches at the
# renderer, 304s, answers served stale, and the renderer's awake seconds per refresh.
SCREEN_FACTOR=30
SCREEN_REFRESH=30
SCREEN_DISPLAYS=10
SCREEN_HOUR=$((3600 / SCREEN_FACTOR))      # a simulated hour, in seconds
SCREEN_POLL=$((60 / SCREEN_FACTOR))        # a display's minute, in seconds
SCREEN_BASE_S=60                           # the run without spec.screen, in seconds
SNAPS=browser-snap-screens

# bmp FILE SEED: a 1-bit 800x480 BMP (48,062 bytes), a stripe pattern of SEED.
bmp() {
    python3 - "$1" "$2" <<'PY'
import struct, sys
w, h, row = 800, 480, 100
pixels = bytes(((y // (int(sys.argv[2]) + 2)) % 2) * 0xFF for y in range(h) for _ in range(row))
head = struct.pack("<2sIHHI", b"BM", 62 + len(pixels), 0, 0, 62)
info = struct.pack("<IiiHHIIiiII", 40, w, h, 1, 1, 0, len(pixels), 2835, 2835, 2, 2)
open(sys.argv[1], "wb").write(head + info + b"\x00\x00\x00\x00\xff\xff\xff\x00" + pixels)
PY
}
# sleep_until T0 S: until S seconds after unix time T0.
sleep_until() { sleep "$(awk -v t="$1" -v s="$2" -v n="$(date +%s.%N)" 'BEGIN { d = t + s - n; printf "%.2f", (d > 0 ? d : 0) }')"; }
etag_of() { printf '"%s"' "$(sha256sum "$1" | cut -d' ' -f1)"; }
# fetches: the requests the renderer has passed on so far (screen_source.py's count).
fetches() { if [[ -f $screen_dir/fetches ]]; then wc -l <"$screen_dir/fetches"; else echo 0; fi; }
screen_status() { # screen_status FIELD: status.variants[lilygo47].screen.FIELD
    kc -n "$NS" get mutation "$SNAPS" -o json \
        | jq -r --arg f "$1" '.status.variants[] | select(.label == "lilygo47") | .screen[$f] // empty'
}
screen_etag_is() { [[ $(screen_status etag) == "$1" ]]; }
screen_stale_because() { # screen_stale_because REASON: stale, and the condition says why
    [[ $(screen_status stale) == true && $(screen_status reason) == "$1" ]] || return 1
    kc -n "$NS" get mutation "$SNAPS" -o json | jq -e --arg r "$1" \
        '.status.conditions[] | select(.type == "ScreenStale" and .status == "True") | .reason == $r' >/dev/null
}
# metric NAME_AND_LABELS: the sum of the leader's samples whose line starts with it (through
# the API server's proxy to the pod).
metric() {
    kc get --raw "/api/v1/namespaces/$OPNS/pods/$leader:9568/proxy/metrics" \
        | awk -v k="$1" 'index($0, k) == 1 { s += $NF; n++ } END { if (!n) exit 1; printf "%d\n", s }'
}
# awake SINCE UNTIL: seconds of [SINCE, UNTIL] (unix times) in which the renderer had a pod,
# from the watch of its Deployment's status.replicas ($work/awake: "<time> <replicas>").
awake() {
    python3 - "$work/awake" "$1" "$2" <<'PY'
import sys
start, stop = float(sys.argv[2]), float(sys.argv[3])
events = [(float(t), int(r or 0)) for t, _, r in (l.partition(" ") for l in open(sys.argv[1]).read().split("\n") if l)]
up, at, total = 0, start, 0.0
for t, r in events:
    if t > stop:
        break
    if t > at:
        total += (t - at) if up else 0
        at = t
    up = r > 0
total += (stop - at) if up and stop > at else 0
print(f"{total:.1f}")
PY
}

screen_checks() {
    local w leader doc key ids=() i tok t0 t1 a b f0 f1 poll0 poll1 counts awake_s refreshes
    local base_t0 base_t1 base_awake pid code t_step
    t_step=$(usec)
    screen_dir=$work/screen
    node_ip=${node_ip:-$(kc get node "$NODE" -o jsonpath='{.status.addresses[?(@.type=="InternalIP")].address}')}
    mkdir -p "$screen_dir"
    bmp "$screen_dir/screen" 1
    a=$(etag_of "$screen_dir/screen")
    # warmup above the wake p95 of the sleep step, as an owner would set it from that figure.
    w=$(awk -v p="${wake_p95:-3}" 'BEGIN { printf "%d", int(p) + 2 }')
    doc=$(kc -n "$NS" create --dry-run=client -o json -f deploy/examples/screens/browser-snap-screens.yaml) \
        || fail "reading deploy/examples/screens/browser-snap-screens.yaml"
    # The renderer's picture comes from this machine: the node's address, a port of its own.
    local source_port
    source_port=$(pick_port)
    python3 "$repo/scripts/real-node.d/screen_source.py" "$screen_dir" "$source_port" &
    pf_pids+=($!)
    wait_until 10 "screen_source.py on :$source_port" curl -fsS -o /dev/null "http://127.0.0.1:$source_port/screen"
    rm -f "$screen_dir/fetches"
    jq --arg img "$STANDIN" --arg src "http://$node_ip:$source_port/screen" --arg r "${SCREEN_REFRESH}s" --arg w "${w}s" '
        .spec.deployment.spec.template.spec.terminationGracePeriodSeconds = 1
        | .spec.deployment.spec.template.spec.containers[0] |= (
            (if .image == "ghcr.io/neiam/browser-snap:latest" then .image = $img else error("the example image changed") end)
            | .env += [{name: "SCREEN_SOURCE", value: $src}])
        | .spec.screen.path = "/cgi-bin/screen" | .spec.screen.refreshEvery = $r
        | .spec.devices.sleep = {idleAfter: "30s", warmup: $w, keepWarm: "5s", maxWakePerHour: 3600}' \
        <<<"$doc" >"$work/screens.json" || fail "the screens example is not as this step expects"
    kc -n "$NS" apply -f "$work/screens.json" >/dev/null || fail "applying the screens example"
    local deadline=$((SECONDS + 90))
    until screen_etag_is "$a"; do
        if ((SECONDS >= deadline)); then
            kc -n "$NS" get mutation "$SNAPS" -o json | jq '.status' >&2
            kc -n "$NS" get pods -o wide >&2
            fail "no first screen ($a) from $SNAPS within 90 s (its status above)"
        fi
        sleep 1
    done
    ok "spec.screen: the first screen fetched from lilygo47's ClusterIP Service's pod, etag $a"

    # The leader's metrics; after a restart the Lease may name a pod that is gone for a while.
    # shellcheck disable=SC2317 # called through wait_until
    leader_running() { operator_pods | grep -qxF "pod/$(lease_holder)"; }
    wait_until 60 "a running replica (not one being deleted) holding the Lease" leader_running
    leader=$(lease_holder)
    key=$(kc -n "$NS" get secret "$SNAPS-secret" -o jsonpath='{.data.token}' | base64 -d)
    [[ -n $key ]] || fail "no token Secret $SNAPS-secret"
    local screens_api=$API/api/v1/namespaces/$NS/mutations/$SNAPS
    local display_api=http://$api_ip/api/v1/namespaces/$NS/mutations/$SNAPS
    for i in $(seq 1 "$SCREEN_DISPLAYS"); do
        code=$(curl -sS -o "$work/enroll.json" -w '%{http_code}' -H "Authorization: Bearer $key" \
            -H 'Content-Type: application/json' -d "{\"id\": \"display-$i\", \"label\": \"lilygo47\"}" \
            "$screens_api/devices")
        [[ $code == 201 ]] || fail "enrolling display-$i: $code $(cat "$work/enroll.json")"
        tok=$(jq -r .token "$work/enroll.json")
        ids+=("display-$i" "$tok")
    done
    ok "$SCREEN_DISPLAYS displays enrolled into lilygo47 with the enrollment key"

    # The renderer's pods over time, from a watch of its Deployment.
    kc -n "$NS" get deploy "$SNAPS-lilygo47" -w -o jsonpath='{.status.replicas}{"\n"}' \
        | while read -r r; do echo "$EPOCHREALTIME ${r:-0}"; done >"$work/awake" &
    pf_pids+=($!)
    f0=$(fetches)
    poll0=$(metric 'mutantops_variant_wakes_total{cause="poll"}') || fail "reading the leader's metrics"
    t0=$(date +%s.%N)
    python3 "$repo/scripts/real-node.d/displays.py" run "$work/displays" "$SCREEN_HOUR" "$SCREEN_POLL" \
        "$display_api" "${ids[@]}" &
    pid=$!
    pf_pids+=("$pid")
    # A third of the hour in, the picture changes; from 55 % to 85 % the renderer answers 500.
    sleep_until "$t0" $((SCREEN_HOUR / 3))
    bmp "$work/next.bmp" 2
    b=$(etag_of "$work/next.bmp")
    mv "$work/next.bmp" "$screen_dir/screen"
    sleep_until "$t0" $((SCREEN_HOUR * 55 / 100))
    touch "$screen_dir/fail"
    wait_until $((SCREEN_REFRESH * 3 / 2)) "the screen stale, the condition saying Status" screen_stale_because Status
    ok "the renderer answering 500: the last good screen kept, stale, ScreenStale says Status"
    sleep_until "$t0" $((SCREEN_HOUR * 85 / 100))
    rm -f "$screen_dir/fail"
    wait "$pid" || fail "the displays failed"
    t1=$(date +%s.%N)
    f1=$(fetches)
    poll1=$(metric 'mutantops_variant_wakes_total{cause="poll"}') || fail "reading the leader's metrics"
    counts=$(python3 "$repo/scripts/real-node.d/displays.py" count "$work/displays")
    awake_s=$(awake "$t0" "$t1")
    refreshes=$(awk -v a="$t0" -v b="$t1" -v r="$SCREEN_REFRESH" 'BEGIN { printf "%.1f", (b - a) / r }')
    screen_fetches=$((f1 - f0))
    screen_304=$(jq .not_modified <<<"$counts")
    screen_stale=$(jq .served_stale <<<"$counts")
    screen_awake=$awake_s
    screen_awake_per=$(awk -v a="$awake_s" -v n="$refreshes" 'BEGIN { printf "%.1f", a / n }')
    [[ $(jq .errors <<<"$counts") == 0 ]] || fail "displays saw errors: $counts"
    [[ $(jq -c .poll_status <<<"$counts") == "{\"200\":$(jq .polls <<<"$counts")}" ]] || fail "a poll not answered 200: $counts"
    [[ $(jq -r '.screen_status | keys | map(select(. != "200" and . != "304")) | length' <<<"$counts") == 0 ]] \
        || fail "a screen request answered neither 200 nor 304: $counts"
    [[ $(jq .mismatched <<<"$counts") == 0 ]] || fail "a screen's bytes did not hash to its ETag: $counts"
    jq -e --arg a "$a" --arg b "$b" --argjson n "$SCREEN_DISPLAYS" '.etags == [$a, $b] and .held == {($b): $n}' \
        <<<"$counts" >/dev/null || fail "the displays saw etags $(jq -c .etags <<<"$counts") and hold $(jq -c .held <<<"$counts"), not $a then $b, all $b"
    ((screen_304 > 0 && screen_stale > 0)) || fail "no 304 or no stale answer: $counts"
    ((poll1 == poll0)) || fail "polls woke the renderer $((poll1 - poll0)) times"
    # One fetch per refresh, whatever the displays do: the refreshes of the hour, the failed
    # ones tried again (every min(refreshEvery, 30 s)), and one more for a refresh at either end.
    ((screen_fetches >= 2 && screen_fetches <= ${refreshes%.*} + 3)) \
        || fail "$screen_fetches fetches at the renderer in $refreshes refreshes"
    awk -v a="$screen_awake_per" -v r="$SCREEN_REFRESH" 'BEGIN { exit !(a < r * 0.75) }' \
        || fail "the renderer was awake $screen_awake_per s of each ${SCREEN_REFRESH}-s refresh"
    ok "$SCREEN_DISPLAYS displays, $(jq .polls <<<"$counts") polls and $(jq .screens <<<"$counts") screen requests in a compressed hour: 0 errors, every body its ETag, the new picture seen by all, 0 wakes by a poll"
    screen_polls=$(jq .polls <<<"$counts") screen_requests=$(jq .screens <<<"$counts")

    # The same displays, polls only, the Mutation without spec.screen: polls wake the renderer.
    kc -n "$NS" patch mutation "$SNAPS" --type json -p '[{"op": "remove", "path": "/spec/screen"}]' >/dev/null \
        || fail "removing spec.screen"
    base_t0=$(date +%s.%N)
    python3 "$repo/scripts/real-node.d/displays.py" run "$work/displays-base" "$SCREEN_BASE_S" "$SCREEN_POLL" \
        "$display_api" --no-screen "${ids[@]}" || fail "the displays without spec.screen failed"
    base_t1=$(date +%s.%N)
    base_awake=$(awake "$base_t0" "$base_t1")
    screen_base_per=$(awk -v a="$base_awake" -v t0="$base_t0" -v t1="$base_t1" -v r="$SCREEN_REFRESH" \
        'BEGIN { printf "%.1f", a / ((t1 - t0) / r) }')
    ok "without spec.screen, the same polls keep the renderer awake ${base_awake} s of $(awk -v a="$base_t0" -v b="$base_t1" 'BEGIN { printf "%.0f", b - a }') s"
    kill "${pf_pids[-1]}" 2>/dev/null || true
    kc -n "$NS" delete mutation "$SNAPS" --wait=true --timeout=60s >/dev/null || fail "deleting $SNAPS"
    screen_base_awake=$base_awake screen_base_s=$(awk -v a="$base_t0" -v b="$base_t1" 'BEGIN { printf "%.0f", b - a }')
    screen_hour_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", b - a }') screen_refreshes=$refreshes
    # shellcheck disable=SC2034 # printed by scripts/real-node
    screen_step_s=$(secs_of $(($(usec) - t_step)))
    printf '\n  screens, an hour compressed %sx (%s displays polling every minute, refreshEvery 15m): %s fetches at the renderer, %s 304s of %s screen requests, %s answers served stale; renderer awake %s s per refresh (%s s without spec.screen)\n\n' \
        "$SCREEN_FACTOR" "$SCREEN_DISPLAYS" "$screen_fetches" "$screen_304" "$screen_requests" "$screen_stale" \
        "$screen_awake_per" "$screen_base_per"
}

# write_screen_bench: the screens step's figures into BENCHMARKS.md: the table's "real node:
# screens" rows (after the other "real node:" rows) and subsection "Screens on the real node"
# of "How each figure is measured", each replaced where it is.
write_screen_bench() {
    local result=met
    awk -v a="$screen_awake_per" -v r="$SCREEN_REFRESH" 'BEGIN { exit !(a < r * 0.75) }' || result='**missed**'
    {
        printf '| real node: screens, %s displays for an hour compressed %sx (refreshEvery 15m as %s s): fetches at the renderer, 304s of screen requests, answers served stale (scripts/real-node) | %s fetches, %s 304s of %s, %s stale | one fetch per refresh, whatever the displays do | met |\n' \
            "$SCREEN_DISPLAYS" "$SCREEN_FACTOR" "$SCREEN_REFRESH" "$screen_fetches" "$screen_304" "$screen_requests" "$screen_stale"
        printf '| real node: screens, the renderer awake per refresh, with / without spec.screen (scripts/real-node) | %s s / %s s of %s s | with: under 3/4 of a refresh | %s |\n' \
            "$screen_awake_per" "$screen_base_per" "$SCREEN_REFRESH" "$result"
    } >"$work/screen-rows.md"
    cat >"$work/screen-section.md" <<MD
### Screens on the real node

Written by \`scripts/real-node --wake-bench\` (\`scripts/bench\` keeps it as it is):
$(date -u '+%Y-%m-%d %H:%M UTC'), commit \`$(git rev-parse --short HEAD)\`, on the real node of
\`scripts/cluster up --real-node\`, after the wake figures above (their p95 sets \`warmup\`).

deploy/examples/screens/browser-snap-screens.yaml on the stand-in image: \`/cgi-bin/screen\`
passes on a 48,062-byte BMP (1-bit, 800x480) that \`screen_source.py\` serves on this machine
(the real node), which counts each request the renderer makes; the example's \`spec.screen\` asks for it every ${SCREEN_REFRESH} s
(its 15 minutes compressed ${SCREEN_FACTOR} times), with \`spec.devices.sleep\` (warmup above the
wake p95, \`keepWarm: 5s\`). ${SCREEN_DISPLAYS} displays (\`scripts/real-node.d/displays.py\`) enroll with the
enrollment key and, for an hour compressed to ${screen_hour_s} s, wake every ${SCREEN_POLL} s (a minute;
10 % jitter), each on a new connection through the ClusterIP of \`svc/mutantops-api\`: they
poll, and half of them ask for their screen only when the poll's etag is not the one they hold
(docs/devices.md's recipe), the other half on every wake with \`If-None-Match\`. A third of
the way in the picture changes; from 55 % to 85 % the renderer answers 500.

${screen_polls} polls and ${screen_requests} screen requests, all answered (200 or 304, every body
hashing to its ETag, every display holding the new picture at the end); **${screen_fetches}
fetches** at the renderer in ${screen_refreshes} refreshes, **${screen_304} answers 304**, and
**${screen_stale} answers served stale** (with \`Age\`) while the renderer failed; no poll woke
the renderer. From a watch of its Deployment, the renderer had a pod for ${screen_awake} s of
the hour: **${screen_awake_per} s per ${SCREEN_REFRESH}-s refresh** (warmup, the fetch, keepWarm
and the pod's stop). The same displays polling the same Mutation without \`spec.screen\` for
${screen_base_s} s kept it up ${screen_base_awake} s: **${screen_base_per} s per refresh**, as
every poll is a reason to be up.
MD
    python3 "$repo/scripts/real-node.d/benchmarks_md.py" "$work/screen-rows.md" "$work/screen-section.md" \
        "| real node: screens" || fail "writing the screens figures into BENCHMARKS.md"
    log "wrote the screens figures into BENCHMARKS.md"
}
