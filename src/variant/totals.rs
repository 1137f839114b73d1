//! What a Mutation's token may add in all (R32): the instances of all the
//! Mutation's variants together, the variants with a Service that opens a port on every node
//! or an address on the LAN, and which labels it may use (a label names a Deployment and a
//! Service, `<base>-<label>`, which other pods reach by that name). Each bound is the owner's
//! to change in `spec.deviceAccess`; the admin is not held to them.

use crate::crd::{
    Variant,
    limits::{
        DEVICE_MAX_EXPOSED_SERVICES, DEVICE_MAX_TOTAL_INSTANCES, DeviceAccess, MAX_LABEL_PATTERN,
    },
};

/// Whether `text` matches `pattern`, where `*` stands for any characters (none included).
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, rest) = match parts.split_first() {
        Some(split) => split,
        None => return text.is_empty(),
    };
    let Some(mut left) = text.strip_prefix(first) else {
        return false;
    };
    let Some((last, middle)) = rest.split_last() else {
        return left.is_empty();
    };
    for part in middle {
        match left.find(part) {
            Some(at) => left = &left[at + part.len()..],
            None => return false,
        }
    }
    left.len() >= last.len() && left.ends_with(last)
}

/// The most instances of all variants together a token may leave: the owner's, or the default.
fn max_total(access: Option<&DeviceAccess>) -> (i64, &'static str) {
    match access.and_then(|a| a.max_total_instances) {
        Some(n) => (i64::from(n), "spec.deviceAccess.maxTotalInstances"),
        None => (
            i64::from(DEVICE_MAX_TOTAL_INSTANCES),
            "the default; the owner may change it in spec.deviceAccess.maxTotalInstances",
        ),
    }
}

/// Whether a token may give variant `label` `instances` (adding it when absent) in a Mutation
/// with `variants` and `access`: the sum of all instances after it within the bound, unless
/// the variant only shrinks.
pub fn may_total(
    access: Option<&DeviceAccess>,
    variants: &[Variant],
    label: &str,
    instances: i32,
) -> Result<(), String> {
    let now = variants
        .iter()
        .find(|v| v.label == label)
        .map(|v| v.instances);
    if now.is_some_and(|n| instances <= n) {
        return Ok(());
    }
    let others: i64 = variants
        .iter()
        .filter(|v| v.label != label)
        .map(|v| i64::from(v.instances.max(0)))
        .sum();
    let total = others + i64::from(instances.max(0));
    let (max, source) = max_total(access);
    if total > max {
        return Err(format!(
            "instances {instances}: the Mutation's variants would have {total} instances in \
             all; a Mutation's token may leave at most {max} ({source})"
        ));
    }
    Ok(())
}

/// Whether the variants a token adds get the owner's Service (R32, R36): only when the owner
/// opted in, with `spec.deviceAccess.service: true` or a `labelPattern` (the names it hands
/// out). Otherwise a token's label would name a Service, `<base>-<label>`, that another app
/// of the namespace may expect (`web-db`), so the variant is stored with `service: false`.
pub fn token_variants_served(access: Option<&DeviceAccess>) -> bool {
    match access {
        Some(a) => a.service.unwrap_or(a.label_pattern.is_some()),
        None => false,
    }
}

/// Whether a token may use `label` (R32): give it to a variant it adds; only a label matching
/// `spec.deviceAccess.labelPattern`. (Which variants that exist it may join or change is
/// `rights`'s.)
pub fn may_use_label(access: Option<&DeviceAccess>, label: &str) -> Result<(), String> {
    match access.and_then(|a| a.label_pattern.as_deref()) {
        Some(pattern) if !glob_match(pattern, label) => Err(format!(
            "label {label:?}: a Mutation's token may use only labels matching {pattern:?} \
             (spec.deviceAccess.labelPattern)"
        )),
        _ => Ok(()),
    }
}

/// Whether a token may add `variant` to a Mutation with `variants`, `access`, and a Service of
/// its own for each variant that is `exposed` (NodePort or LoadBalancer): its label matches
/// the owner's pattern, the instances stay within the total, and the exposed Services within
/// their bound.
pub fn may_add(
    access: Option<&DeviceAccess>,
    variants: &[Variant],
    variant: &Variant,
    exposed: bool,
) -> Result<(), String> {
    may_use_label(access, &variant.label)?;
    may_total(access, variants, &variant.label, variant.instances)?;
    let served = token_variants_served(access) && variant.service != Some(false);
    if exposed && served {
        let open = variants.iter().filter(|v| v.service != Some(false)).count();
        let (max, source) = match access.and_then(|a| a.max_exposed_services) {
            Some(n) => (
                usize::try_from(n).unwrap_or(0),
                "spec.deviceAccess.maxExposedServices",
            ),
            None => (
                DEVICE_MAX_EXPOSED_SERVICES,
                "the default; the owner may change it in spec.deviceAccess.maxExposedServices, \
                 or give the token's variants no Service with spec.deviceAccess.service: false",
            ),
        };
        if open >= max {
            return Err(format!(
                "service: the Mutation has {open} variants with a NodePort or LoadBalancer \
                 Service; a Mutation's token may add one only while it has fewer than {max} \
                 ({source})"
            ));
        }
    }
    Ok(())
}

/// The problems of the bounds of this room in `access`, as the CRD schema has them.
pub fn problems(access: &DeviceAccess, out: &mut Vec<String>) {
    if let Some(n) = access.max_total_instances
        && !(0..=500_000).contains(&n)
    {
        out.push(format!(
            "deviceAccess.maxTotalInstances {n}: must be between 0 and 500000"
        ));
    }
    if let Some(n) = access.max_exposed_services
        && !(0..=500).contains(&n)
    {
        out.push(format!(
            "deviceAccess.maxExposedServices {n}: must be between 0 and 500"
        ));
    }
    if let Some(pattern) = &access.label_pattern {
        let allowed =
            |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '*';
        if pattern.is_empty() || pattern.len() > MAX_LABEL_PATTERN || !pattern.chars().all(allowed)
        {
            out.push(format!(
                "deviceAccess.labelPattern {pattern:?}: 1 to {MAX_LABEL_PATTERN} of lower-case \
                 letters, digits, '-' and '*'"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn variant(label: &str, instances: i32) -> Variant {
        Variant {
            label: label.into(),
            instances,
            ..Variant::default()
        }
    }

    #[test]
    fn globs_match_as_shells_do() {
        for (pattern, text, matches) in [
            ("board-*", "board-47", true),
            ("board-*", "board-", true),
            ("board-*", "db", false),
            ("*-kiosk", "hall-kiosk", true),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
            ("ab*ba", "aba", false),
            ("exact", "exact", true),
            ("exact", "exactly", false),
            ("*", "", true),
        ] {
            assert_eq!(glob_match(pattern, text), matches, "{pattern} {text}");
        }
    }

    // R32: the total of instances, the exposed Services and the label pattern,
    // each naming where its bound comes from; shrinking is always allowed.
    #[test]
    fn totals_bound_what_a_token_adds() {
        let many: Vec<Variant> = (0..4).map(|i| variant(&format!("v{i}"), 10)).collect();
        let e = may_total(None, &many, "new", 1).unwrap_err();
        assert!(
            e.contains("41 instances") && e.contains("at most 40") && e.contains("default"),
            "{e}"
        );
        assert!(may_total(None, &many, "v0", 5).is_ok());
        assert!(may_total(None, &many, "v0", 10).is_ok());
        assert!(may_total(None, &many, "v0", 11).is_err());
        let owner = DeviceAccess {
            max_total_instances: Some(100),
            label_pattern: Some("board-*".into()),
            max_exposed_services: Some(4),
            ..DeviceAccess::default()
        };
        let e = may_add(Some(&owner), &many, &variant("db", 1), false).unwrap_err();
        assert!(
            e.contains("\"db\"") && e.contains("board-*") && e.contains("labelPattern"),
            "{e}"
        );
        assert!(may_add(Some(&owner), &many, &variant("board-1", 1), false).is_ok());
        let e = may_add(Some(&owner), &many, &variant("board-1", 1), true).unwrap_err();
        assert!(
            e.contains("4 variants") && e.contains("maxExposedServices"),
            "{e}"
        );
        let unserved = DeviceAccess {
            service: Some(false),
            ..owner.clone()
        };
        assert!(may_add(Some(&unserved), &many, &variant("board-1", 1), true).is_ok());
        let mut problems_found = Vec::new();
        let bad = DeviceAccess {
            label_pattern: Some("Board_*".into()),
            max_total_instances: Some(-1),
            ..DeviceAccess::default()
        };
        problems(&bad, &mut problems_found);
        assert_eq!(problems_found.len(), 2, "{problems_found:?}");
    }

    // R32, R36: a token's variants are served only when the owner opted in.
    #[test]
    fn a_tokens_variants_are_served_only_when_the_owner_opts_in() {
        use super::token_variants_served as served;
        let with = |service: Option<bool>, pattern: Option<&str>| DeviceAccess {
            service,
            label_pattern: pattern.map(str::to_owned),
            ..DeviceAccess::default()
        };
        assert!(!served(None));
        assert!(!served(Some(&with(None, None))));
        assert!(served(Some(&with(None, Some("board-*")))));
        assert!(served(Some(&with(Some(true), None))));
        assert!(!served(Some(&with(Some(false), Some("board-*")))));
    }
}
