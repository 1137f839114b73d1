//! R48: the API server away, then back, and how soon the operator catches up; the
//! cluster must hold a change of every owner, Deployments and statuses, within
//! [`AFTER_FAULTS`]: no watch may still be waiting out a long backoff.
//!
//! - the faults of chaos seed 1796202855564298565, which once took 80 s to converge where
//!   other seeds took 7, made without the workers' writes: the operator killed and the API
//!   server restarted at the seed's moments (two restarts in its first 30 s);
//! - an outage of 30 s, as a board's k3s restarting makes: with kube-runtime's own backoff
//!   the change took 73 s after the API server was back (a watch waited 50 s for its next
//!   try), with the caches' own (src/cache/backoff.rs) 5 s.

use super::*;

/// The seed that once took 80 s to converge.
const SEED: u64 = 1_796_202_855_564_298_565;
/// How long the change may take to be everywhere, after the last fault (R48: seconds,
/// and 15 s at most).
const AFTER_FAULTS: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "chaos: restarts the API server; scripts/test runs it alone"]
async fn chaos_seed_restarts_converge_in_seconds() {
    let faults = schedule(SEED, 30);
    let restarts = faults
        .iter()
        .filter(|(_, fault)| !matches!(fault, Fault::Kill(_)))
        .count();
    assert!(restarts >= 2, "the seed's API-server restarts: {faults:?}");
    let (_ns, ctx) = start("restarts").await;
    let mut owners = Vec::new();
    for (i, (kind, name)) in OWNERS.iter().enumerate() {
        owners.push(Arc::new(create_owner(&ctx, *kind, name, i).await));
    }
    let finals = specs(&ctx, &owners).await;
    let first = converged(&ctx, &owners, &finals, Duration::from_secs(60)).await;
    say(&format!("restarts: the owners converged in {first:.1?}"));

    let started = Instant::now();
    for (wait, fault) in faults {
        watched_sleep(&ctx, Instant::now() + wait).await;
        say(&format!(
            "restarts: {:>5.1}s: {fault:?}",
            started.elapsed().as_secs_f64()
        ));
        inflict(&ctx, fault).await;
    }
    ctx.watch_operator().await;

    let changed = Instant::now();
    for owner in &owners {
        scale_first_variant(&ctx, owner).await;
    }
    let finals = specs(&ctx, &owners).await;
    let took = converged(&ctx, &owners, &finals, Duration::from_secs(120)).await;
    let since_change = changed.elapsed();
    say(&format!(
        "restarts: seed {SEED}: the change was everywhere {took:.1?} after it was made, \
         {since_change:.1?} after the last fault"
    ));
    assert!(
        took <= AFTER_FAULTS,
        "the change took {took:?} after the seed's faults (at most {AFTER_FAULTS:?})"
    );
    let stats = ctx.stats.lock().unwrap();
    assert!(stats.violations.is_empty(), "{:?}", stats.violations);
}

/// The spec of every owner, as its variants.
async fn specs(ctx: &Ctx, owners: &[Arc<OwnerInfo>]) -> BTreeMap<String, Vec<Variant>> {
    let mut finals = BTreeMap::new();
    for owner in owners {
        let obj = ctx.read_owner(owner.kind, &owner.name).await;
        finals.insert(owner.name.clone(), spec_list(&obj, owner.kind).1);
    }
    finals
}

/// How long it took until the cluster held `finals` exactly; panics after `limit`.
async fn converged(
    ctx: &Ctx,
    owners: &[Arc<OwnerInfo>],
    finals: &BTreeMap<String, Vec<Variant>>,
    limit: Duration,
) -> Duration {
    let from = Instant::now();
    loop {
        let found = differences(ctx, owners, finals, &[]).await;
        if found.objects.is_empty() && found.statuses.is_empty() {
            return from.elapsed();
        }
        assert!(
            from.elapsed() < limit,
            "no convergence in {limit:?}: {:?} {:?}",
            found.objects,
            found.statuses
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One change of `owner`'s spec: its first variant asks for one more instance (back to one
/// at three), written with the resourceVersion read.
async fn scale_first_variant(ctx: &Ctx, owner: &OwnerInfo) {
    let obj = ctx.read_owner(owner.kind, &owner.name).await;
    let (version, mut list) = spec_list(&obj, owner.kind);
    let first = list.first_mut().expect("every owner declares a variant");
    first.instances = if first.instances >= 3 {
        1
    } else {
        first.instances + 1
    };
    let patch = json!({
        "metadata": {"resourceVersion": version},
        "spec": {owner.kind.field(): list},
    });
    ctx.api(owner.kind)
        .patch(&owner.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("{:?} {}: {e}", owner.kind, owner.name));
}

/// How long the API server stays away in [`chaos_outage_of_the_api_server_is_caught_up_in_seconds`].
const OUTAGE: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "chaos: stops the API server; scripts/test runs it alone"]
async fn chaos_outage_of_the_api_server_is_caught_up_in_seconds() {
    let (_ns, ctx) = start("outage").await;
    let mut owners = Vec::new();
    for (i, (kind, name)) in OWNERS.iter().enumerate() {
        owners.push(Arc::new(create_owner(&ctx, *kind, name, i).await));
    }
    let finals = specs(&ctx, &owners).await;
    converged(&ctx, &owners, &finals, Duration::from_secs(60)).await;

    say(&format!("outage: the API server away for {OUTAGE:?}"));
    ctx.restart_apiserver_after(OUTAGE).await;
    ctx.watch_operator().await;
    for owner in &owners {
        scale_first_variant(&ctx, owner).await;
    }
    let finals = specs(&ctx, &owners).await;
    let took = converged(&ctx, &owners, &finals, Duration::from_secs(180)).await;
    say(&format!(
        "outage: the change was everywhere {took:.1?} after it was made, the API server back"
    ));
    assert!(
        took <= AFTER_FAULTS,
        "the change took {took:?} after an outage of {OUTAGE:?} (at most {AFTER_FAULTS:?})"
    );
}
