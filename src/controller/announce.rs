//! Which problems deserve an Event now (R26: once per change, not once per resync).
//!
//! The last written status says what was already reported, and survives restarts. It can lag
//! behind by one reconcile, though: a reconcile may start before the watch has delivered the
//! status the previous one wrote. So the problems announced in the last minute are also
//! remembered in memory, per owner.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use crate::{
    crd::{OwnerStatus, VariantState},
    variant::BASE_NOT_ALLOWED,
};

/// How long announced problems are remembered in memory.
const REMEMBER: Duration = Duration::from_secs(60);

/// One reportable problem of an owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// `VariantInvalid`, `VariantConflict`, `InvalidObject`, or `BaseNotAllowed` (R33).
    pub reason: &'static str,
    /// The Event's note.
    pub note: String,
    /// The variant's Deployment name, for variant problems.
    pub deployment: Option<String>,
    /// Which variant entry (label and occurrence, as a label may repeat), or the object.
    key: (String, usize),
}

/// The problems a status reports: the object's message and each Invalid or Conflict variant.
/// The message is an `InvalidObject`, or a `BaseNotAllowed` when the Ready condition says the
/// operator does not make the base in its namespace (R33).
pub fn problems(status: &OwnerStatus) -> Vec<Problem> {
    let mut found = Vec::new();
    if let Some(message) = &status.message {
        let not_allowed = status
            .conditions
            .iter()
            .any(|c| c.reason == BASE_NOT_ALLOWED);
        found.push(Problem {
            reason: if not_allowed {
                BASE_NOT_ALLOWED
            } else {
                "InvalidObject"
            },
            note: message.clone(),
            deployment: None,
            key: (String::new(), 0),
        });
    }
    for (i, v) in status.variants.iter().enumerate() {
        let reason = match v.state {
            VariantState::Invalid => "VariantInvalid",
            VariantState::Conflict => "VariantConflict",
            VariantState::Progressing | VariantState::Ready | VariantState::Idle => continue,
        };
        let nth = status.variants[..i]
            .iter()
            .filter(|p| p.label == v.label)
            .count();
        found.push(Problem {
            reason,
            note: format!(
                "variant {}: {}",
                v.label,
                v.message.as_deref().unwrap_or("")
            ),
            deployment: Some(v.deployment.clone()),
            key: (v.label.clone(), nth),
        });
    }
    found
}

/// Problems announced recently, per owner uid.
#[derive(Default)]
pub struct Announced(Mutex<HashMap<String, (Vec<Problem>, Instant)>>);

impl Announced {
    /// The problems of `current` to announce now: those neither in the `previous` status nor
    /// announced for this owner in the last minute. Remembers `current` as announced.
    pub fn fresh(&self, uid: &str, previous: &OwnerStatus, current: &OwnerStatus) -> Vec<Problem> {
        let before = problems(previous);
        let now = Instant::now();
        let Ok(mut recent) = self.0.lock() else {
            // A poisoned lock only loses the in-memory memory; the status comparison remains.
            return problems(current)
                .into_iter()
                .filter(|p| !before.contains(p))
                .collect();
        };
        recent.retain(|_, (_, at)| now.duration_since(*at) < REMEMBER);
        let remembered = recent
            .get(uid)
            .map(|(p, _)| p.as_slice())
            .unwrap_or_default();
        let current = problems(current);
        let fresh = current
            .iter()
            .filter(|p| !before.contains(p) && !remembered.contains(p))
            .cloned()
            .collect();
        recent.insert(uid.to_string(), (current, now));
        fresh
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{VariantStatus, fixtures};

    fn status(
        variants: &[(&str, VariantState, Option<&str>)],
        message: Option<&str>,
    ) -> OwnerStatus {
        OwnerStatus {
            message: message.map(str::to_string),
            variants: variants
                .iter()
                .map(|(label, state, message)| VariantStatus {
                    message: message.map(str::to_string),
                    ..fixtures::variant_status(label, *state, 0)
                })
                .collect(),
            ..OwnerStatus::default()
        }
    }

    #[test]
    fn only_invalid_and_conflicting_variants_and_messages_are_problems() {
        // R26
        let s = status(
            &[
                ("a", VariantState::Ready, None),
                ("b", VariantState::Invalid, Some("bad")),
                ("c", VariantState::Conflict, Some("taken")),
                ("d", VariantState::Progressing, None),
            ],
            Some("invalid base"),
        );
        let reasons: Vec<&str> = problems(&s).iter().map(|p| p.reason).collect();
        assert_eq!(
            reasons,
            ["InvalidObject", "VariantInvalid", "VariantConflict"]
        );
    }

    #[test]
    fn a_base_not_allowed_here_is_its_own_reason() {
        // R33: the message of a base the operator does not make in its namespace
        let mut s = status(
            &[("a", VariantState::Invalid, Some("not applied: why"))],
            Some("base deployment not allowed here: why"),
        );
        s.conditions.push(crate::crd::Condition {
            type_: "Ready".to_owned(),
            status: "False".to_owned(),
            reason: BASE_NOT_ALLOWED.to_owned(),
            message: String::new(),
            last_transition_time: "t".to_owned(),
            observed_generation: None,
        });
        let reasons: Vec<&str> = problems(&s).iter().map(|p| p.reason).collect();
        assert_eq!(reasons, [BASE_NOT_ALLOWED, "VariantInvalid"]);
    }

    #[test]
    fn a_problem_is_announced_once_even_when_the_status_lags() {
        // R26: once per change, also when two reconciles see the same stale status.
        let announced = Announced::default();
        let old = OwnerStatus::default();
        let new = status(&[("b", VariantState::Invalid, Some("bad"))], None);
        assert_eq!(announced.fresh("uid", &old, &new).len(), 1);
        assert_eq!(
            announced.fresh("uid", &old, &new).len(),
            0,
            "stale status, same problem"
        );
        assert_eq!(
            announced.fresh("uid", &new, &new).len(),
            0,
            "status caught up"
        );
    }

    #[test]
    fn a_changed_or_returning_problem_is_announced_again() {
        let announced = Announced::default();
        let empty = OwnerStatus::default();
        let bad = status(&[("b", VariantState::Invalid, Some("bad"))], None);
        let worse = status(&[("b", VariantState::Invalid, Some("worse"))], None);
        assert_eq!(announced.fresh("uid", &empty, &bad).len(), 1);
        assert_eq!(announced.fresh("uid", &bad, &worse).len(), 1, "new message");
        assert_eq!(announced.fresh("uid", &worse, &empty).len(), 0, "fixed");
        assert_eq!(
            announced.fresh("uid", &empty, &bad).len(),
            1,
            "broken again"
        );
    }

    #[test]
    fn repeated_labels_are_told_apart() {
        // R9: the second "c" is a Conflict while the first is fine; both keep their identity.
        let announced = Announced::default();
        let s = status(
            &[
                ("c", VariantState::Ready, None),
                ("c", VariantState::Conflict, Some("repeats")),
            ],
            None,
        );
        assert_eq!(announced.fresh("uid", &OwnerStatus::default(), &s).len(), 1);
        assert_eq!(announced.fresh("other", &s, &s).len(), 0);
    }
}
