# shellcheck shell=bash
# shellcheck disable=SC2154 # repo, work, NS, OPNS, STANDIN, TARGET, ARCH, image, installed: set by scripts/real-node
# The upgrade step of scripts/real-node (R45), sourced by it, which provides ok,
# now, since, operator_pods and lease_holder (and scripts/lib.sh's step, log, fail, kc and
# wait_until).

# --- Upgrade and downgrade on the real node (R45) -----------------------------------------
# The previous release is a pinned earlier commit of this repository (there are no tags yet;
# bump it with each release): its image, built by its own scripts/musl-build and scripts/image
# under the name $PREV_REPO (so that both images sit in the node's containerd at once), and its
# deploy/mutantops.yaml with only that image line changed. It is installed as docs/install.md
# says, with both examples on the stand-in, a variant added by the Mutation's token and two
# enrolled devices. Then this version's deploy/mutantops.yaml is applied over it, unchanged, as
# a user (or Argo CD) does, and afterwards the previous one again. In each direction:
#   - a client (real-node.d/poller.py) calls the API through svc/mutantops-api's ClusterIP every
#     100 ms, on a new connection each time, with the admin token and both devices' tokens,
#     from before the apply until the new leader has settled: every answer 2xx, or 429/503
#     with Retry-After (replicas of a release before the preStop hook of deploy/ stop
#     accepting the moment they are told to stop: a connection refused within 3 s of the
#     deletion of one of those is counted apart, as docs/install.md says);
#   - no variant pod replaced or restarted (pod UIDs, container IDs, restart counts), the
#     variants' Deployments and Services not written at all (resourceVersions, and the audit
#     log), the token Secrets unchanged;
#   - no object written back and forth by the two versions (the audit log, real-node.d/audit.py).
PREVIOUS=${MUTANTOPS_UPGRADE_FROM:-f5aa1592831365503542471424b8f6971415bae4}
PREV_REPO=localhost/mutantops-previous
UPGRADE_SETTLE=${MUTANTOPS_UPGRADE_SETTLE:-10} # seconds the poller runs after the new leader took over
OPUSER=system:serviceaccount:$OPNS:mutantops

# upgrade_previous: the previous release's image archive and manifest, built once per commit
# into the cache (a clone of this repository at $PREVIOUS, removed afterwards); sets
# prev_archive, prev_manifest and prev_image.
upgrade_previous() {
    local cache src pver
    cache=${MUTANTOPS_CACHE:-$HOME/.cache/mutantops}/upgrade/$PREVIOUS
    prev_archive=$cache/image-linux-$ARCH.tar prev_manifest=$cache/mutantops.yaml
    prev_image=$(cat "$cache/image-name" 2>/dev/null || true)
    if [[ -s $prev_archive && -s $prev_manifest && -n $prev_image ]]; then
        log "the previous release ${PREVIOUS:0:7}: cached in $cache"
        return
    fi
    if ! git -C "$repo" cat-file -e "$PREVIOUS^{commit}" 2>/dev/null; then
        log "commit $PREVIOUS (the previous release) is not in this clone: fetching it from origin"
        git -C "$repo" fetch -q --depth=1 origin "$PREVIOUS" 2>/dev/null || true
        git -C "$repo" cat-file -e "$PREVIOUS^{commit}" 2>/dev/null \
            || fail "commit $PREVIOUS (the previous release) is neither in this clone nor fetched from origin: fetch it (git fetch --unshallow)"
    fi
    src=$cache/src
    rm -rf "$src"
    mkdir -p "$cache"
    git clone -q --shared --no-checkout "$repo" "$src" && git -C "$src" checkout -q --detach "$PREVIOUS" \
        || fail "checking out $PREVIOUS into $src"
    pver=$(sed -n 's/^version = "\(.*\)"/\1/p' "$src/Cargo.toml" | head -n1)
    step "the previous release ${PREVIOUS:0:7} ($pver): its scripts/musl-build and scripts/image (cached afterwards)"
    (cd "$src" && scripts/musl-build "$TARGET" && scripts/image --targets "$TARGET" --name "$PREV_REPO") \
        || fail "building the previous release's image"
    cp "$src/target/image/mutantops-$pver-linux-$ARCH.tar" "$prev_archive.tmp" || fail "no image archive of $PREVIOUS"
    sed "s|image: ghcr.io/neiam/mutantops:$pver\$|image: $PREV_REPO:$pver|" "$src/deploy/mutantops.yaml" >"$prev_manifest.tmp"
    grep -q "image: $PREV_REPO:$pver\$" "$prev_manifest.tmp" || fail "the previous deploy/mutantops.yaml's image line changed: update this script"
    mv "$prev_archive.tmp" "$prev_archive"
    mv "$prev_manifest.tmp" "$prev_manifest"
    printf '%s\n' "$PREV_REPO:$pver" >"$cache/image-name"
    prev_image=$PREV_REPO:$pver
    rm -rf "$src"
}

# upgrade_state FILE: what must not change across a phase, one line each: every pod of $NS
# (uid, container ids, restarts), the variants' Deployments and Services (resourceVersion),
# the token Secrets (a hash of their data).
upgrade_state() {
    {
        kc -n "$NS" get pods -l mutantops.neiam.org/variant -o json | jq -r '.items[] | "pod \(.metadata.name) \(.metadata.uid) \(
            [.status.containerStatuses[]? | "\(.containerID) \(.restartCount)"] | join(" "))"'
        kc -n "$NS" get deployments,services -l mutantops.neiam.org/owner -o json \
            | jq -r '.items[] | "\(.kind) \(.metadata.name) \(.metadata.resourceVersion)"'
        for s in browser-snap-secret browser-snap-devices; do
            printf 'secret %s %s\n' "$s" "$(kc -n "$NS" get secret "$s" -o json | jq -cS .data | sha256sum | cut -c1-16)"
        done
        printf 'secret mutantops-api %s\n' "$(kc -n "$OPNS" get secret mutantops-api -o json | jq -cS .data | sha256sum | cut -c1-16)"
    } | sort
}

# The objects no version may write while the other runs: the variants' Deployments and Services.
upgrade_keep() {
    kc -n "$NS" get deployments,services -l mutantops.neiam.org/owner -o json | jq -r --arg ns "$NS" \
        '.items[] | "\(if .kind == "Deployment" then "deployments" else "services" end) \($ns) \(.metadata.name)"'
}

joined() { tr '\n' ',' | sed 's/,$//'; }
operator_names() { operator_pods | sed 's|^pod/||' | sort | joined; }

# upgrade_phase NAME MANIFEST: MANIFEST applied over what runs, checked as the header says.
upgrade_phase() {
    local name=$1 manifest=$2 outgoing incoming offset poller t0 t_rolled t_leader tolerate
    outgoing=$(operator_names)
    # Replicas of a release before the preStop hook stop accepting the moment they are told to
    # stop, while kube-proxy still sends them connections for a second or so: counted apart.
    tolerate=0
    kc -n "$OPNS" get deploy mutantops-operator -o json \
        | jq -e '.spec.template.spec.containers[0].lifecycle.preStop' >/dev/null || tolerate=3
    upgrade_state >"$work/$name-before"
    upgrade_keep >"$work/$name-keep"
    offset=$(stat -c %s "$MUTANTOPS_AUDIT_LOG")
    : >"$work/$name-polls"
    python3 "$repo/scripts/real-node.d/poller.py" "$work/$name-polls" 0.1 \
        "$UP_API/mutations/browser-snap" "$TOKEN" \
        "$UP_API/mutations/browser-snap/devices/up-lily" "$tok_up_lily" \
        "$UP_API/mutations/browser-snap/variants/radxa-8-hd" "$tok_up_radxa" &
    poller=$!
    sleep 2
    t0=$(now)
    kc apply -f "$manifest" >/dev/null || fail "kubectl apply -f $manifest"
    kc -n "$OPNS" rollout status deploy/mutantops-operator --timeout=180s >/dev/null \
        || fail "$name: the operator's rollout did not finish"
    t_rolled=$(since "$t0")
    # Both replicas new, and one of them holds the Lease.
    incoming=$(operator_names)
    [[ $(tr ',' '\n' <<<"$incoming" | grep -cxFf <(tr ',' '\n' <<<"$outgoing") || true) == 0 ]] \
        || fail "$name: replicas $incoming include one of before ($outgoing)"
    new_holder() { [[ ,$incoming, == *,$(lease_holder),* ]]; }
    wait_until 60 "$name: a new replica holding the Lease" new_holder
    t_leader=$(since "$t0")
    sleep "$UPGRADE_SETTLE"
    kill -TERM "$poller"
    wait "$poller" || true
    ok "$name: $(kc -n "$OPNS" get deploy mutantops-operator -o jsonpath='{.spec.template.spec.containers[0].image}') rolled out in ${t_rolled}s, Lease with $(lease_holder) at ${t_leader}s"

    python3 "$repo/scripts/real-node.d/audit.py" "$MUTANTOPS_AUDIT_LOG" "$offset" "$OPUSER" \
        "$outgoing" "$incoming" "$work/$name-keep" >"$work/$name-audit" \
        || { cat "$work/$name-audit" >&2; fail "$name: the audit log shows writes that should not be"; }
    log "$name: the operator's writes, by version (the audit log):"
    cat "$work/$name-audit" >&2
    ok "$name: the variants' Deployments and Services not written, nothing written back and forth"

    upgrade_state >"$work/$name-after"
    diff "$work/$name-before" "$work/$name-after" >&2 \
        || fail "$name: variant pods, Deployments, Services or tokens changed (above: < before, > after)"
    ok "$name: every variant pod, container, Deployment, Service and token as before ($(grep -c '^pod ' "$work/$name-after") pods)"

    python3 "$repo/scripts/real-node.d/poller.py" check "$work/$name-polls" "$MUTANTOPS_AUDIT_LOG" "$offset" \
        "$OPNS" "$outgoing" "$tolerate" >"$work/$name-calls" \
        || { cat "$work/$name-calls" >&2; fail "$name: API calls failed through the rolling update"; }
    ok "$name: through svc/mutantops-api every 100 ms: $(head -n1 "$work/$name-calls")"
    up_rows+=("$(printf '  %-10s %9ss %9ss  %s' "$name" "$t_rolled" "$t_leader" "$(head -n1 "$work/$name-calls")")")
}

upgrade_checks() {
    local t_step key
    t_step=$(now)
    up_rows=()
    upgrade_previous
    scripts/cluster ctr images import "$prev_archive" >/dev/null || fail "importing $prev_archive"
    grep -qxF "$prev_image" <<<"$(scripts/cluster ctr images ls -q)" || fail "containerd does not list $prev_image"
    ok "the previous release ${PREVIOUS:0:7} imported as $prev_image beside $image"

    kc apply -f "$prev_manifest" >/dev/null || fail "kubectl apply -f the previous deploy/mutantops.yaml"
    installed=1
    kc -n "$OPNS" create secret generic mutantops-api --from-literal=token="$TOKEN" >/dev/null
    kc -n "$OPNS" rollout restart deploy/mutantops-operator >/dev/null
    kc -n "$OPNS" rollout status deploy/mutantops-operator --timeout=180s >/dev/null \
        || fail "the previous release did not become Ready"
    ok "the previous release runs: both replicas Ready with the admin token"

    UP_API=http://$(kc -n "$OPNS" get svc mutantops-api -o jsonpath='{.spec.clusterIP}')/api/v1/namespaces/$NS
    sed -e "s|image: ghcr.io/neiam/browser-snap:latest|image: $STANDIN|" \
        -e 's|^\( *\)containers:$|\1terminationGracePeriodSeconds: 1\n\1containers:|' \
        "$repo/deploy/examples/browser-snap.yaml" >"$work/up-snap.yaml"
    sed -e "s|image: nginx:1.21|image: $STANDIN|" \
        -e 's|^\( *\)containers:$|\1terminationGracePeriodSeconds: 1\n\1containers:|' \
        "$repo/deploy/examples/nginx-mutant.yaml" >"$work/up-nginx.yaml"
    for f in up-snap up-nginx; do
        grep -q "image: $STANDIN" "$work/$f.yaml" || fail "an example's image line changed: update this script"
        kc -n "$NS" apply -f "$work/$f.yaml" >/dev/null || fail "kubectl apply -f $f.yaml"
    done
    kc -n "$NS" wait --for=condition=Ready --timeout=120s mutation/browser-snap >/dev/null \
        || fail "browser-snap did not become Ready"
    # A variant added by the Mutation's own token, then devices: its token becomes the
    # enrollment key, and two devices are enrolled with it.
    key=$(kc -n "$NS" get secret browser-snap-secret -o jsonpath='{.data.token}' | base64 -d)
    code=$(curl -sS -o "$work/up-add" -w '%{http_code}' -H "Authorization: Bearer $key" \
        -H 'Content-Type: application/json' -d '{"label": "kiosk", "instances": 1}' "$UP_API/mutations/browser-snap/variants")
    [[ $code == 201 ]] || fail "adding variant kiosk with the Mutation's token: $code $(cat "$work/up-add")"
    kc -n "$NS" patch mutation browser-snap --type merge -p '{"spec": {"devices": {"enrollment": "Open"}}}' >/dev/null \
        || fail "patching spec.devices"
    up_enroll() {
        local code
        code=$(curl -sS -o "$work/up-enroll" -w '%{http_code}' -H "Authorization: Bearer $key" \
            -H 'Content-Type: application/json' -d "{\"id\": \"$1\", \"label\": \"$2\"}" "$UP_API/mutations/browser-snap/devices")
        [[ $code == 201 ]] || fail "enrolling $1 into $2: $code $(cat "$work/up-enroll")"
        jq -r .token "$work/up-enroll"
    }
    tok_up_lily=$(up_enroll up-lily lilygo47)
    tok_up_radxa=$(up_enroll up-radxa radxa-8-hd)
    all_available() {
        kc -n "$NS" get deployments -l mutantops.neiam.org/owner -o json | jq -e '
            (.items | length) == 5 and all(.items[]; (.status.availableReplicas // 0) == .spec.replicas
                and .status.updatedReplicas == .spec.replicas and (.status.replicas // 0) == .spec.replicas)' >/dev/null
    }
    wait_until 120 "the 5 variants' Deployments available" all_available
    ok "both examples on the previous release: 5 variants ($(kc -n "$NS" get pods -o name | wc -l) pods), kiosk added by the token, 2 devices enrolled"

    upgrade_phase upgrade "$repo/deploy/mutantops.yaml"
    upgrade_phase downgrade "$prev_manifest"

    kc delete mutations,mutantdeployments --all -n "$NS" --wait=true --timeout=60s >/dev/null || fail "deleting the examples"
    kc delete -f "$prev_manifest" --wait=true --timeout=120s >/dev/null || fail "uninstalling the previous release"
    # What this release adds that the previous one does not (its Secrets policy) stays after a
    # downgrade; the uninstall takes it too.
    kc delete -f "$repo/deploy/mutantops.yaml" --ignore-not-found --wait=true --timeout=120s >/dev/null \
        || fail "uninstalling what this release added"
    installed=""
    up_step_s=$(since "$t_step")
    printf '\n  %-10s %10s %10s  %s\n' phase "rolled out" "new leader" "API calls through the Service"
    printf '%s\n' "${up_rows[@]}"
}
