# shellcheck shell=bash
# shellcheck disable=SC2154 # work, NS, STANDIN: set by scripts/real-node
# The rollout step of scripts/real-node (R43), sourced by it, which provides ok (and
# scripts/lib.sh's step, fail, kc and wait_until).

# --- A base change in steps, on real pods (R43) -------------------------------------------
# MutantDeployment rollout-snap, three variants of the stand-in (lily, radxa, epaper) with
# spec.rollout: the lilys first. Its base is then changed to an image that was never imported
# into the node's containerd and that no registry serves (this machine reaches none): the
# kubelet's pull fails (ErrImagePull, ImagePullBackOff), the first step misses its deadline
# and the rollout is Degraded naming lily, while radxa and epaper keep the pods they had,
# serving, and lily's old pod keeps serving beside the one that cannot start.
ROLLOUT_DEADLINE=20
rollout_snap() {
    cat <<YAML
apiVersion: neiam.org/v1
kind: MutantDeployment
metadata:
  name: rollout-snap
spec:
  deployment:
    apiVersion: apps/v1
    kind: Deployment
    metadata:
      name: rollout-snap
    spec:
      selector:
        matchLabels:
          app: rollout-snap
      template:
        metadata:
          labels:
            app: rollout-snap
        spec:
          terminationGracePeriodSeconds: 1
          containers:
          - name: snap
            image: $1
            ports:
            - containerPort: 80
  mutations:
  - label: lily
  - label: radxa
  - label: epaper
  rollout:
    steps:
    - variants: ["lily"]
    progressDeadlineSeconds: $ROLLOUT_DEADLINE
YAML
}
# rollout_field PATH: a field of rollout-snap's status.rollout, as jq prints it.
rollout_field() {
    kc -n "$NS" get mutantdeployment rollout-snap -o json | jq -r ".status.rollout$1 // empty"
}
# variant_pods LABEL: the names of its pods that are Running, sorted.
variant_pods() {
    kc -n "$NS" get pods -l "mutantops.neiam.org/owner=rollout-snap,mutantops.neiam.org/variant=$1" \
        --field-selector=status.phase=Running -o name | sort
}
# serves POD: it answers GET /cgi-bin/env at its own address.
serves() {
    local ip
    ip=$(kc -n "$NS" get "$1" -o jsonpath='{.status.podIP}')
    [[ -n $ip ]] && curl -fsS --max-time 2 "http://$ip/cgi-bin/env" | grep -q '^HOSTNAME='
}
rollout_complete() {
    [[ $(rollout_field .phase) == Complete ]] \
        && [[ $(kc -n "$NS" get mutantdeployment rollout-snap -o jsonpath='{.status.summary}') == "3/3 variants ready" ]]
}
rollout_degraded() { [[ $(rollout_field .phase) == Degraded ]]; }
pull_failed() {
    kc -n "$NS" get pods -l "mutantops.neiam.org/owner=rollout-snap,mutantops.neiam.org/variant=lily" -o json \
        | jq -e '[.items[].status.containerStatuses[]?.state.waiting.reason // empty]
                 | any(. == "ErrImagePull" or . == "ImagePullBackOff")' >/dev/null
}

rollout_checks() {
    local old_radxa old_epaper old_lily p label image
    rollout_snap "$STANDIN" | kc -n "$NS" apply -f - >/dev/null
    wait_until 120 "rollout-snap ready, its rollout Complete" rollout_complete
    old_lily=$(variant_pods lily) old_radxa=$(variant_pods radxa) old_epaper=$(variant_pods epaper)
    ok "rollout-snap: 3 variants on real pods, rollout of revision $(rollout_field .revision) Complete"

    rollout_snap registry.invalid/mutantops/never-imported:1 | kc -n "$NS" apply -f - >/dev/null
    wait_until 60 "lily's new pod failing to pull its image" pull_failed
    ok "the new base's image was never imported: lily's new pod is in ErrImagePull/ImagePullBackOff"
    wait_until $((ROLLOUT_DEADLINE + 60)) "the rollout Degraded at its first step" rollout_degraded
    [[ $(rollout_field '.failed | join(",")') == lily ]] \
        || fail "status.rollout.failed is $(rollout_field '.failed'), want [lily]"
    [[ $(rollout_field .step) == 0 ]] || fail "status.rollout.step is $(rollout_field .step), want 0"
    ok "the rollout stopped at step 0 after ${ROLLOUT_DEADLINE}s, Degraded: $(rollout_field .message)"
    [[ $(variant_pods radxa) == "$old_radxa" && $(variant_pods epaper) == "$old_epaper" ]] \
        || fail "radxa's or epaper's pods changed: they were never to take the new base"
    for p in $old_radxa $old_epaper $old_lily; do
        serves "$p" || fail "$p does not answer at its address"
    done
    for label in radxa epaper; do
        image=$(kc -n "$NS" get deploy "rollout-snap-$label" -o jsonpath='{.spec.template.spec.containers[0].image}')
        [[ $image == "$STANDIN" ]] || fail "rollout-snap-$label runs $image"
    done
    ok "radxa and epaper keep their pods on the old base, serving; lily's old pod serves beside the one that cannot start"
    kc -n "$NS" delete mutantdeployment rollout-snap --wait=true >/dev/null
}
