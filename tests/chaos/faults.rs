//! The faults: the operator killed and started again, the API server restarted.

use super::*;

// --- faults --------------------------------------------------------------------------------------

/// Sleeps until `wake`, restarting the operator meanwhile if it exits by itself.
pub(crate) async fn watched_sleep(ctx: &Ctx, wake: Instant) {
    while Instant::now() < wake {
        let step = (wake - Instant::now()).min(Duration::from_millis(250));
        tokio::time::sleep(step).await;
        ctx.watch_operator().await;
    }
}

/// One fault of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The operator killed, started again after the pause.
    Kill(Duration),
    /// The API server killed and started again (`scripts/cluster restart-apiserver`).
    RestartApiServer,
    /// Both at once: the operator killed, and started again after the pause while the API
    /// server is away.
    Both(Duration),
}

/// The next fault of a run and how long after the end of the one before it comes (2 to 9 s),
/// drawn from the run's fault rng ([`fault_rng`]).
pub(crate) fn next_fault(rng: &mut Rng) -> (Duration, Fault) {
    let wait = rng.millis(2000, 9000);
    let fault = match rng.below(100) {
        0..=54 => Fault::Kill(rng.millis(0, 2500)),
        55..=89 => Fault::RestartApiServer,
        _ => Fault::Both(rng.millis(0, 2000)),
    };
    (wait, fault)
}

/// The rng of a run's faults: what the run's seed gives after one draw per worker.
pub(crate) fn fault_rng(seed: u64) -> (Vec<Rng>, Rng) {
    let mut rng = Rng::new(seed);
    let workers = (0..OWNERS.len() * LABELS.len())
        .map(|_| Rng::new(rng.next()))
        .collect();
    (workers, Rng::new(rng.next()))
}

/// The faults a seed makes in its first `seconds`, each with the wait before it, as
/// [`chaos`] makes them (the moments differ by how long each fault takes).
pub(crate) fn schedule(seed: u64, seconds: u64) -> Vec<(Duration, Fault)> {
    let (_, mut rng) = fault_rng(seed);
    let mut at = Duration::ZERO;
    let mut faults = Vec::new();
    loop {
        let (wait, fault) = next_fault(&mut rng);
        at += wait;
        if at >= Duration::from_secs(seconds) {
            return faults;
        }
        faults.push((wait, fault));
    }
}

/// Makes `fault` happen.
pub(crate) async fn inflict(ctx: &Ctx, fault: Fault) {
    match fault {
        Fault::Kill(pause) => ctx.kill_operator(pause, false).await,
        Fault::RestartApiServer => ctx.restart_apiserver().await,
        Fault::Both(pause) => {
            let mut operator = ctx.operator.lock().await;
            operator.kill();
            ctx.stats.lock().unwrap().operator_kills += 1;
            let start_later = async {
                tokio::time::sleep(pause).await;
                operator.launch();
            };
            tokio::join!(ctx.restart_apiserver(), start_later);
        }
    }
    ctx.fault_done();
}

/// Kills the operator and restarts the API server at random moments until `until`.
pub(crate) async fn chaos(ctx: Arc<Ctx>, mut rng: Rng, until: Instant, started: Instant) {
    let mut next_progress = Instant::now() + Duration::from_secs(30);
    loop {
        let (wait, fault) = next_fault(&mut rng);
        let wake = Instant::now() + wait;
        if wake >= until {
            watched_sleep(&ctx, until).await;
            return;
        }
        watched_sleep(&ctx, wake).await;
        inflict(&ctx, fault).await;
        if Instant::now() >= next_progress {
            next_progress = Instant::now() + Duration::from_secs(30);
            say(&progress(&ctx, started));
        }
    }
}

pub(crate) fn progress(ctx: &Ctx, started: Instant) -> String {
    let stats = ctx.stats.lock().unwrap();
    let total: u64 = stats.ops.values().sum();
    let acked: u64 = stats
        .ops
        .iter()
        .filter(|((_, _, o), _)| *o == Outcome::Acked)
        .map(|(_, n)| n)
        .sum();
    format!(
        "chaos: {:>4.0}s: {total} writes ({acked} acknowledged), {} operator kills, {} API \
         server restarts, {} violations",
        started.elapsed().as_secs_f64(),
        stats.operator_kills,
        stats.apiserver_restarts,
        stats.violations.len()
    )
}
