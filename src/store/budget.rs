//! Each object's budget of writes (R52): a writer that has spent it waits for the next write
//! it may make, so no path, however often it asks, writes one object more often than that.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use tokio::time::Instant;

/// Writes of one object a second, over time: the budget a writer's writes are held to (R52).
pub const WRITES_PER_SECOND: u32 = 20;
/// Writes of one object at once, before [`WRITES_PER_SECOND`] holds them back.
pub const WRITE_BURST: u32 = 100;
/// Objects whose budget is remembered; beyond it, those whose budget is whole are forgotten.
const BUDGETS_KEPT: usize = 1024;

/// Each object's budget of writes: how many it may make now, and since when that holds.
#[derive(Clone, Default)]
pub(super) struct Budgets(Arc<Mutex<HashMap<String, (f64, Instant)>>>);

impl Budgets {
    /// Takes one write of `key`'s budget: at once, or after waiting for it to refill (then
    /// true).
    pub(super) async fn spend(&self, key: &str) -> bool {
        let wait = {
            let mut budgets = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            let now = Instant::now();
            let (rate, burst) = (f64::from(WRITES_PER_SECOND), f64::from(WRITE_BURST));
            let refilled = |(left, at): (f64, Instant)| {
                (left + now.saturating_duration_since(at).as_secs_f64() * rate).min(burst)
            };
            if budgets.len() >= BUDGETS_KEPT && !budgets.contains_key(key) {
                budgets.retain(|_, budget| refilled(*budget) < burst);
            }
            let left = budgets.get(key).copied().map_or(burst, refilled) - 1.0;
            budgets.insert(key.to_owned(), (left, now));
            // Below zero: the write waits until the budget is back at zero.
            Duration::from_secs_f64((-left).max(0.0) / rate)
        };
        if wait.is_zero() {
            return false;
        }
        tokio::time::sleep(wait).await;
        true
    }
}
