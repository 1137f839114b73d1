//! Progress held back a moment (R50): the Deployment controller observes an
//! owner's Deployments one after another, and each observation re-queues the owner, so its
//! status went from "0/5" through partial counts to "5/5", a write each. A status that
//! differs from the written one only by progress still under way ([`variant::only_progress`])
//! waits up to [`PROGRESS_HOLD`] from when it was first put off, for the rest to come with
//! it; any other change, and the last variant getting Ready, is written at once. What is
//! remembered here is only when a status was first put off: lost with the process, it costs
//! one more write at most.

use std::{
    collections::HashMap,
    sync::{Mutex, PoisonError},
    time::{Duration, Instant},
};

use crate::{crd::OwnerStatus, variant};

/// How long a status of progress under way may be put off, at most.
pub const PROGRESS_HOLD: Duration = Duration::from_secs(1);

/// When each owner's (by uid) status was first put off.
#[derive(Default)]
pub struct ProgressHold {
    since: Mutex<HashMap<String, Instant>>,
}

impl ProgressHold {
    /// Whether owner `uid`'s `status`, which differs from `previous`, is put off, and for how
    /// long from `now`; `None`: write it now.
    pub(super) fn put_off(
        &self,
        uid: &str,
        previous: &OwnerStatus,
        status: &OwnerStatus,
        now: Instant,
    ) -> Option<Duration> {
        let mut since = self.since.lock().unwrap_or_else(PoisonError::into_inner);
        // Owners deleted while put off are forgotten with the rest of what is long past.
        since.retain(|_, first| now.saturating_duration_since(*first) < 10 * PROGRESS_HOLD);
        if !variant::only_progress(previous, status) {
            since.remove(uid);
            return None;
        }
        let first = *since.entry(uid.to_owned()).or_insert(now);
        let left = PROGRESS_HOLD.saturating_sub(now.saturating_duration_since(first));
        if left.is_zero() {
            since.remove(uid);
            return None;
        }
        Some(left)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{Condition, VariantState, VariantStatus};

    fn variant(label: &str, state: VariantState) -> VariantStatus {
        VariantStatus {
            label: label.into(),
            state,
            message: None,
            deployment: format!("web-{label}"),
            replicas: 0,
            ready_replicas: 0,
            service: None,
            sleep: None,
            screen: None,
        }
    }

    fn status(states: &[VariantState]) -> OwnerStatus {
        let variants: Vec<_> = ["a", "b", "c"]
            .iter()
            .zip(states)
            .map(|(l, s)| variant(l, *s))
            .collect();
        let summary = variant::summary(&variants);
        let ready = variant::ready_condition(&variants, None, Some(1), None, "t0");
        OwnerStatus {
            observed_generation: Some(1),
            secret: Some("web-secret".into()),
            summary,
            variants,
            conditions: vec![ready],
            ..OwnerStatus::default()
        }
    }

    use VariantState::{Conflict, Progressing as P, Ready as R};

    #[test]
    fn partial_progress_waits_at_most_the_hold() {
        // R50: "1/3" after "0/3" is put off for the rest, once, for at most 1 s.
        let hold = ProgressHold::default();
        let (zero, one, two, all) = (
            status(&[P, P, P]),
            status(&[R, P, P]),
            status(&[R, R, P]),
            status(&[R, R, R]),
        );
        let t0 = Instant::now();
        assert_eq!(hold.put_off("u", &zero, &one, t0), Some(PROGRESS_HOLD));
        let later = t0 + Duration::from_millis(400);
        assert_eq!(
            hold.put_off("u", &zero, &two, later),
            Some(Duration::from_millis(600))
        );
        // The last one Ready: written at once.
        assert_eq!(hold.put_off("u", &zero, &all, later), None);
        // Still partial after the hold: written.
        assert_eq!(hold.put_off("u", &zero, &two, t0), Some(PROGRESS_HOLD));
        assert_eq!(hold.put_off("u", &zero, &two, t0 + PROGRESS_HOLD), None);
        // Written, so the next partial status is put off anew.
        let after = t0 + PROGRESS_HOLD + Duration::from_millis(1);
        assert_eq!(hold.put_off("u", &zero, &two, after), Some(PROGRESS_HOLD));
        // Another owner's hold is its own.
        assert_eq!(hold.put_off("v", &zero, &one, after), Some(PROGRESS_HOLD));
    }

    #[test]
    fn anything_but_progress_is_written_at_once() {
        let hold = ProgressHold::default();
        let t0 = Instant::now();
        // The first status, with no variants yet.
        assert_eq!(
            hold.put_off("u", &OwnerStatus::default(), &status(&[P, P, P]), t0),
            None
        );
        // A variant going back, or in conflict.
        assert_eq!(
            hold.put_off("u", &status(&[R, R, P]), &status(&[R, P, P]), t0),
            None
        );
        assert_eq!(
            hold.put_off("u", &status(&[P, P, P]), &status(&[R, Conflict, P]), t0),
            None
        );
        // A problem of the owner's.
        let mut problem = status(&[R, P, P]);
        problem.message = Some("base invalid".into());
        assert_eq!(hold.put_off("u", &status(&[P, P, P]), &problem, t0), None);
        // A condition that changes its status (not only its message).
        let mut other = status(&[R, P, P]);
        other.conditions.push(Condition {
            type_: "Sleeping".into(),
            ..other.conditions[0].clone()
        });
        assert_eq!(hold.put_off("u", &status(&[P, P, P]), &other, t0), None);
        // Fewer ready replicas.
        let mut before = status(&[P, P, P]);
        before.variants[1].ready_replicas = 2;
        assert_eq!(hold.put_off("u", &before, &status(&[R, P, P]), t0), None);
        // What the devices did, and how many there are.
        let mut seen = status(&[R, P, P]);
        seen.device_summary = Some(Box::new(crate::crd::DeviceSummary {
            total: 1,
            ..Default::default()
        }));
        assert_eq!(hold.put_off("u", &status(&[P, P, P]), &seen, t0), None);
    }
}
