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

/// Kills the operator and restarts the API server at random moments until `until`.
pub(crate) async fn chaos(ctx: Arc<Ctx>, mut rng: Rng, until: Instant, started: Instant) {
    let mut next_progress = Instant::now() + Duration::from_secs(30);
    loop {
        let wake = Instant::now() + rng.millis(2000, 9000);
        if wake >= until {
            watched_sleep(&ctx, until).await;
            return;
        }
        watched_sleep(&ctx, wake).await;
        match rng.below(100) {
            0..=54 => ctx.kill_operator(rng.millis(0, 2500), false).await,
            55..=89 => ctx.restart_apiserver().await,
            _ => {
                // Both at once: the operator starts again while the API server is away.
                let mut operator = ctx.operator.lock().await;
                operator.kill();
                ctx.stats.lock().unwrap().operator_kills += 1;
                let pause = rng.millis(0, 2000);
                let start_later = async {
                    tokio::time::sleep(pause).await;
                    operator.launch();
                };
                tokio::join!(ctx.restart_apiserver(), start_later);
            }
        }
        ctx.fault_done();
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
