//! What a token may change of a variant that exists, from who made it (R32, R39). Pure: no
//! I/O.
//!
//! - A device changes (scales) only a variant that enrollment made and no other device holds
//!   ([`device_may_change`]): one lost board gives away no more than itself.
//! - Without `spec.devices`, the Mutation's token scales and removes only variants a token
//!   added, or that the owner handed it (`byToken: true`), by labels it may use, and scales
//!   only those placed where it may place ([`token_may_change`]).
//! - The enrollment key joins a variant that exists only with the owner's consent
//!   (`enrollable: true`, or `spec.deviceAccess.labelPattern` matching its label:
//!   [`may_join`]).
//! - Only the owner marks a variant either way ([`token_may_mark`]).
//!
//! The admin token is held to none of it.

use super::{placement::device_may_place, registry::Registry, totals::glob_match};
use crate::crd::{DeviceAccess, Variant};

/// A change of a variant that exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// `PATCH .../variants/{label}`.
    Scale,
    /// `DELETE .../variants/{label}`.
    Remove,
}

impl Change {
    fn verb(self) -> &'static str {
        match self {
            Change::Scale => "scales",
            Change::Remove => "removes",
        }
    }
}

/// What the owner does to change any variant: the admin token, or the spec.
const OWNER_CHANGES: &str = "the owner changes it with the admin token or in the spec";

/// Whether the Mutation's own token (without `spec.devices`) may make `change` to `v`: only a
/// variant a token added or the owner handed it (`byToken: true`), whose label matches
/// `spec.deviceAccess.labelPattern` when that is set, and, for a scale, whose node labels,
/// tolerations and containers the token could have asked for on an add. Err is the message of
/// a 403 naming the variant, why, and how the owner allows it.
pub fn token_may_change(
    access: Option<&DeviceAccess>,
    v: &Variant,
    change: Change,
) -> Result<(), String> {
    let label = &v.label;
    if v.by_token != Some(true) {
        return Err(format!(
            "variant {label:?}: not made by a token (the owner's spec or the admin token put it \
             there); a Mutation's token {} only the variants a token added, unless the owner \
             hands it this one with byToken: true in the spec",
            change.verb()
        ));
    }
    if let Some(pattern) = access.and_then(|a| a.label_pattern.as_deref())
        && !glob_match(pattern, label)
    {
        return Err(format!(
            "variant {label:?}: its label does not match {pattern:?} \
             (spec.deviceAccess.labelPattern), and a Mutation's token {} only variants whose \
             labels it may use; {OWNER_CHANGES}",
            change.verb()
        ));
    }
    match change {
        Change::Scale => placed_for_token(access, v),
        Change::Remove => Ok(()),
    }
}

/// Whether `v` runs where a token may place it (its node labels, tolerations and containers,
/// as on an add: R37), so that a token may scale it. Err names the variant and the field.
pub fn placed_for_token(access: Option<&DeviceAccess>, v: &Variant) -> Result<(), String> {
    device_may_place(access, v).map_err(|e| {
        format!(
            "variant {:?} is placed where a token may not place it, so no token scales it: \
             {e}; {OWNER_CHANGES}, or lists the key in spec.deviceAccess",
            v.label
        )
    })
}

/// Whether device `id` may change (scale) variant `label`, as registry `r` of the Mutation's
/// devices Secret has it: only a variant that enrollment made (`made-variants`), that is the
/// device's own, and that no other device holds. Err is the message of a 403 naming the
/// variant and why.
pub fn device_may_change(r: &Registry, id: &str, label: &str) -> Result<(), String> {
    let own = r.devices.get(id).is_some_and(|d| d.variant == label);
    if !own || !r.made.contains(label) {
        return Err(format!(
            "variant {label:?}: not made by this device's enrollment (the owner's spec or the \
             admin token made it); a device changes only a variant its own enrollment made and \
             no other device holds; {OWNER_CHANGES}"
        ));
    }
    let others = r
        .devices
        .iter()
        .filter(|(other, d)| other.as_str() != id && d.variant == label)
        .count();
    if others > 0 {
        return Err(format!(
            "variant {label:?}: held by {others} other device{} too; a device changes only a \
             variant its own enrollment made and no other device holds; {OWNER_CHANGES}",
            if others == 1 { "" } else { "s" }
        ));
    }
    Ok(())
}

/// Whether the enrollment key may enroll a board into `v`, a variant that exists (R39): only
/// with the owner's consent, `v` marked `enrollable: true` or `spec.deviceAccess.labelPattern`
/// set and matching its label. A pattern consents only for the owner's variants, never for
/// one another board's enrollment `made`: a lifted key could otherwise put a fake board into
/// every board's variant and so freeze it for its own board. Err is the message of a 403
/// naming the label and the ways to consent.
pub fn may_join(access: Option<&DeviceAccess>, v: &Variant, made: bool) -> Result<(), String> {
    if v.enrollable == Some(true) {
        return Ok(());
    }
    let label = &v.label;
    if made {
        return Err(format!(
            "label {label:?}: a variant another board's enrollment made, which the owner has not \
             marked enrollable: true; a board enrolls into it only with that mark"
        ));
    }
    match access.and_then(|a| a.label_pattern.as_deref()) {
        Some(pattern) if glob_match(pattern, label) => Ok(()),
        Some(pattern) => Err(format!(
            "label {label:?}: the owner has not opened this variant to enrollment: it is not \
             marked enrollable: true, and its label does not match {pattern:?} \
             (spec.deviceAccess.labelPattern); the owner consents with either"
        )),
        None => Err(format!(
            "label {label:?}: the owner has not opened this variant to enrollment; the owner \
             consents by marking it enrollable: true in the spec, or by setting \
             spec.deviceAccess.labelPattern to a pattern its label matches"
        )),
    }
}

/// Whether a token may send `v` (a variant it adds, or enrolls a board with) as it is: only
/// the owner (the spec, or the admin token) marks a variant the token's (`byToken`; every
/// variant a token adds is stored so) or open to enrollment (`enrollable`). Err names the
/// field.
pub fn token_may_mark(v: &Variant) -> Result<(), String> {
    if v.enrollable.is_some() {
        return Err(format!(
            "enrollable (variant {:?}): only the owner (the spec, or the admin token) opens a \
             variant to enrollment",
            v.label
        ));
    }
    if v.by_token.is_some() {
        return Err(format!(
            "byToken (variant {:?}): only the owner (the spec, or the admin token) marks a \
             variant; a variant a token adds is stored as the token's by itself",
            v.label
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::Toleration;
    use crate::variant::devices::DeviceRecord;

    fn variant(label: &str) -> Variant {
        Variant {
            label: label.into(),
            ..Variant::default()
        }
    }

    fn tokens(label: &str) -> Variant {
        Variant {
            by_token: Some(true),
            ..variant(label)
        }
    }

    fn registry(devices: &[(&str, &str)], made: &[&str]) -> Registry {
        let mut r = Registry::default();
        for (id, label) in devices {
            let record = DeviceRecord {
                hash: [0; 32],
                variant: (*label).to_owned(),
                enrolled_at: "2026-12-03T08:00:00Z".to_owned(),
            };
            r.devices.insert((*id).to_owned(), record);
        }
        r.made = made.iter().map(|l| (*l).to_owned()).collect();
        r
    }

    // R39: a device changes only the variant its enrollment made, while no other device holds
    // it; the owner's variants and shared ones are refused, naming the variant and why.
    #[test]
    fn a_device_changes_only_what_its_enrollment_made_for_it_alone() {
        let r = registry(
            &[("radxa-8", "radxa"), ("lily-1", "lily"), ("lily-2", "lily")],
            &["radxa", "lily"],
        );
        assert_eq!(device_may_change(&r, "radxa-8", "radxa"), Ok(()));
        let shared = device_may_change(&r, "lily-1", "lily").unwrap_err();
        assert!(
            shared.contains("\"lily\"") && shared.contains("1 other device too"),
            "{shared}"
        );
        let spec = registry(&[("board", "lobby"), ("radxa-8", "radxa")], &["radxa"]);
        let owners = device_may_change(&spec, "board", "lobby").unwrap_err();
        assert!(
            owners.contains("\"lobby\"")
                && owners.contains("not made by this device's enrollment")
                && owners.contains("admin token"),
            "{owners}"
        );
        // Not its own variant, or no record at all: refused.
        assert!(device_may_change(&r, "radxa-8", "lily").is_err());
        assert!(device_may_change(&r, "gone", "radxa").is_err());
        // The last of the sharers holds it alone: a variant enrollment made, now its alone.
        let alone = registry(&[("lily-2", "lily")], &["lily"]);
        assert_eq!(device_may_change(&alone, "lily-2", "lily"), Ok(()));
    }

    // R32: without spec.devices, the token changes only variants a token made or the owner
    // handed it, by labels it may use, and scales only those placed where it may place.
    #[test]
    fn a_token_changes_only_the_tokens_variants() {
        let e = token_may_change(None, &variant("admin"), Change::Scale).unwrap_err();
        assert!(
            e.contains("\"admin\"") && e.contains("not made by a token") && e.contains("byToken"),
            "{e}"
        );
        let e = token_may_change(None, &variant("admin"), Change::Remove).unwrap_err();
        assert!(e.contains("removes"), "{e}");
        assert_eq!(
            token_may_change(None, &tokens("beta"), Change::Scale),
            Ok(())
        );
        assert_eq!(
            token_may_change(None, &tokens("beta"), Change::Remove),
            Ok(())
        );
        let narrowed = DeviceAccess {
            label_pattern: Some("board-*".into()),
            ..DeviceAccess::default()
        };
        let e = token_may_change(Some(&narrowed), &tokens("db"), Change::Remove).unwrap_err();
        assert!(
            e.contains("\"db\"") && e.contains("board-*") && e.contains("labelPattern"),
            "{e}"
        );
        assert_eq!(
            token_may_change(Some(&narrowed), &tokens("board-1"), Change::Scale),
            Ok(())
        );
        // Handed to the token, but tolerating every taint: removed, never scaled.
        let everywhere = Variant {
            tolerations: vec![Toleration {
                operator: "Exists".into(),
                ..Toleration::default()
            }],
            ..tokens("anywhere")
        };
        let e = token_may_change(None, &everywhere, Change::Scale).unwrap_err();
        assert!(
            e.contains("\"anywhere\"") && e.contains("every taint"),
            "{e}"
        );
        assert_eq!(token_may_change(None, &everywhere, Change::Remove), Ok(()));
        let listed = DeviceAccess {
            tolerations: vec!["neiam.org/board".into()],
            ..DeviceAccess::default()
        };
        let board = Variant {
            tolerations: vec![Toleration {
                key: "neiam.org/board".into(),
                operator: "Exists".into(),
                ..Toleration::default()
            }],
            ..tokens("board")
        };
        assert!(token_may_change(None, &board, Change::Scale).is_err());
        assert_eq!(
            token_may_change(Some(&listed), &board, Change::Scale),
            Ok(())
        );
    }

    // R39: the enrollment key joins a variant that exists only with the owner's consent.
    #[test]
    fn joining_a_variant_needs_the_owners_consent() {
        let e = may_join(None, &variant("lobby"), false).unwrap_err();
        assert!(
            e.contains("\"lobby\"") && e.contains("enrollable: true") && e.contains("labelPattern"),
            "{e}"
        );
        let open = Variant {
            enrollable: Some(true),
            ..variant("lobby")
        };
        assert_eq!(may_join(None, &open, false), Ok(()));
        let shut = Variant {
            enrollable: Some(false),
            ..variant("lobby")
        };
        assert!(may_join(None, &shut, false).is_err());
        let pattern = DeviceAccess {
            label_pattern: Some("board-*".into()),
            ..DeviceAccess::default()
        };
        assert_eq!(may_join(Some(&pattern), &variant("board-7"), false), Ok(()));
        let e = may_join(Some(&pattern), &variant("lobby"), false).unwrap_err();
        assert!(e.contains("\"board-*\""), "{e}");
        // The owner's mark wins over a pattern the label does not match.
        assert_eq!(may_join(Some(&pattern), &open, false), Ok(()));
        // Another board's variant: the pattern does not consent, only the owner's mark.
        let e = may_join(Some(&pattern), &variant("board-7"), true).unwrap_err();
        assert!(e.contains("another board's enrollment"), "{e}");
        let marked = Variant {
            enrollable: Some(true),
            ..variant("board-7")
        };
        assert_eq!(may_join(Some(&pattern), &marked, true), Ok(()));
    }

    // R32, R39: only the owner marks a variant.
    #[test]
    fn only_the_owner_marks_a_variant() {
        assert_eq!(token_may_mark(&variant("beta")), Ok(()));
        let open = Variant {
            enrollable: Some(true),
            ..variant("beta")
        };
        assert!(token_may_mark(&open).unwrap_err().contains("enrollable"));
        assert!(
            token_may_mark(&tokens("beta"))
                .unwrap_err()
                .contains("byToken")
        );
    }
}
