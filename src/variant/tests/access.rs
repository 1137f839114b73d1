//! Tests of what a Mutation's own token may ask (R32), of the hard
//! maxima of every variant, of the literal env values of a Mutation and of whose a Deployment
//! of a variant's name is (R9).

use serde_json::{Value, json};

use super::*;
use crate::crd::{
    DeviceAccess,
    limits::{MAX_ENV, MAX_ENV_VALUE, MAX_INSTANCES, MAX_VARIANTS},
};
use crate::variant::access::{
    DeviceLimits, device_may_add, device_may_scale, literal_env_value, validate_device_access,
    value_from_names,
};
use crate::variant::families::denied;

/// A base whose container has a literal entry, and one from each kind of `valueFrom`.
pub(super) fn base_with_secrets() -> Value {
    let mut b = base_json();
    b["spec"]["template"]["spec"]["containers"][1]["env"] = json!([
        {"name": "TITLE", "value": "lobby"},
        {"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "LIMIT", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory"}}},
    ]);
    b
}

/// The 403 message of a token's request, or "" when allowed.
pub(super) fn refusal(
    access: Option<&DeviceAccess>,
    env: &[(&str, &str)],
    instances: i32,
) -> String {
    device_may_add(
        &base_with_secrets(),
        access,
        &variant("board-7", env, instances),
        1,
        false,
    )
    .err()
    .unwrap_or_default()
}

// R32: the variables that change how a process loads or starts are on one list; app settings
// are not.
#[test]
fn startup_variables_are_recognised() {
    for name in [
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "LD_AUDIT",
        "ld_preload",
        "BASH_ENV",
        "ENV",
        "SHELLOPTS",
        "PS4",
        "JAVA_TOOL_OPTIONS",
        "_JAVA_OPTIONS",
        "JDK_JAVA_OPTIONS",
        "NODE_OPTIONS",
        "NODE_PATH",
        "npm_config_script_shell",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "PYTHONHOME",
        "PYTHONBREAKPOINT",
        "PERL5OPT",
        "PERL5LIB",
        "PERLLIB",
        "RUBYOPT",
        "RUBYLIB",
        "GCONV_PATH",
        "GLIBC_TUNABLES",
        "PATH",
        "HOME",
        "LUA_INIT",
        "DOTNET_STARTUP_HOOKS",
        "CORECLR_PROFILER_PATH",
        "OPENSSL_CONF",
        "MY_PATH",
    ] {
        assert!(denied(name).is_some(), "{name} should be refused");
    }
    for name in [
        "FEATURE_X",
        "SNAP_RES",
        "SCREEN",
        "NODE_ENV",
        "MALLOC_ARENA_MAX",
        "LANG",
        "TZ",
        "PATHNAME",
        "ENVIRONMENT",
        "HOMEPAGE",
    ] {
        assert!(denied(name).is_none(), "{name} should be allowed");
    }
}

// R32: the seed's walk-through still works with a token and no deviceAccess.
#[test]
fn app_settings_are_allowed() {
    assert_eq!(refusal(None, &[("FEATURE_X", "on")], 2), "");
    assert_eq!(refusal(None, &[("SNAP_RES", "1280x800")], 3), "");
    // a value that looks like a reference is fine: it is written literal
    assert_eq!(refusal(None, &[("SUBTITLE", "$(DB_PASSWORD)")], 1), "");
}

// R32: a literal entry of the base is the owner's: a token replaces it only when the owner
// lists it (an admin's variant may, as R4 says)
#[test]
fn a_literal_base_entry_is_the_owners_to_open() {
    let said = refusal(None, &[("title", "kiosk")], 1);
    assert!(
        said.contains("\"TITLE\"") && said.contains("value of its own"),
        "{said}"
    );
    let listed = DeviceAccess {
        env: Some(vec!["TITLE".into()]),
        ..DeviceAccess::default()
    };
    assert_eq!(refusal(Some(&listed), &[("TITLE", "kiosk")], 1), "");
}

// R32: a base entry that has valueFrom cannot be replaced by a token, whatever the owner says.
#[test]
fn value_from_entries_cannot_be_replaced() {
    assert_eq!(
        value_from_names(&base_with_secrets()),
        ["DB_PASSWORD", "LIMIT", "MODE", "POD_NAME"]
            .map(str::to_owned)
            .into()
    );
    for name in ["DB_PASSWORD", "POD_NAME", "LIMIT", "MODE"] {
        let e = refusal(None, &[(name, "x")], 1);
        assert!(
            e.contains(&format!("env {name:?}")) && e.contains("valueFrom"),
            "{name}: {e}"
        );
    }
    let listed = DeviceAccess {
        env: Some(vec!["DB_PASSWORD".into()]),
        ..DeviceAccess::default()
    };
    assert!(refusal(Some(&listed), &[("DB_PASSWORD", "x")], 1).contains("valueFrom"));
}

// R32: start-up variables are refused unless the owner lists them; an allow-list narrows what
// a token may set to exactly its names.
#[test]
fn startup_variables_need_the_owner_and_the_allow_list_narrows() {
    let e = refusal(None, &[("FEATURE_X", "on"), ("LD_PRELOAD", "/tmp/x.so")], 1);
    assert!(
        e.contains("env \"LD_PRELOAD\"") && e.contains("spec.deviceAccess.env"),
        "{e}"
    );
    let e = refusal(None, &[("NODE_OPTIONS", "--inspect=0.0.0.0")], 1);
    assert!(e.contains("NODE_OPTIONS"), "{e}");
    let access = DeviceAccess {
        env: Some(vec!["FEATURE_X".into(), "NODE_OPTIONS".into()]),
        ..DeviceAccess::default()
    };
    assert_eq!(
        refusal(
            Some(&access),
            &[("NODE_OPTIONS", "--max-old-space-size=64")],
            1
        ),
        ""
    );
    assert_eq!(refusal(Some(&access), &[("FEATURE_X", "on")], 1), "");
    let e = refusal(Some(&access), &[("SNAP_RES", "1x1")], 1);
    assert!(
        e.contains("env \"SNAP_RES\"") && e.contains("not in spec.deviceAccess.env"),
        "{e}"
    );
    assert!(refusal(Some(&access), &[("LD_PRELOAD", "x")], 1).contains("LD_PRELOAD"));
    // an empty list: no env at all, but variants still
    let none = DeviceAccess {
        env: Some(Vec::new()),
        ..DeviceAccess::default()
    };
    assert_eq!(refusal(Some(&none), &[], 1), "");
    assert!(refusal(Some(&none), &[("FEATURE_X", "on")], 1).contains("FEATURE_X"));
}

// R32: the bounds of a token, named with their value and where it comes from; the owner may
// change each.
#[test]
fn tokens_are_bounded_and_the_owner_moves_the_bounds() {
    assert_eq!(
        DeviceLimits::of(None),
        DeviceLimits {
            instances: 10,
            variants: 20,
            env: 32,
            value_length: 4096
        }
    );
    let e = refusal(None, &[], 11);
    assert!(
        e.contains("instances 11") && e.contains("at most 10") && e.contains("maxInstances"),
        "{e}"
    );
    assert_eq!(refusal(None, &[], 10), "");
    let e = device_may_scale(None, 11).unwrap_err();
    assert!(e.contains("at most 10"), "{e}");
    let env: Vec<(String, String)> = (0..33).map(|i| (format!("V{i}"), "x".into())).collect();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let e = refusal(None, &env, 1);
    assert!(
        e.contains("33 entries") && e.contains("at most 32") && e.contains("maxEnv"),
        "{e}"
    );
    assert_eq!(refusal(None, &env[..32], 1), "");
    let long = "x".repeat(4097);
    let e = refusal(None, &[("SUBTITLE", &long)], 1);
    assert!(
        e.contains("env \"SUBTITLE\"") && e.contains("4097") && e.contains("at most 4096"),
        "{e}"
    );
    // R32: the bound counts bytes, what is stored and sent: 1024 four-byte
    // characters fit, one more does not.
    let wide = "\u{1F4A1}".repeat(1024);
    assert_eq!(refusal(None, &[("SUBTITLE", &wide)], 1), "");
    let wider = "\u{1F4A1}".repeat(1025);
    let e = refusal(None, &[("SUBTITLE", &wider)], 1);
    assert!(
        e.contains("4100 bytes") && e.contains("at most 4096"),
        "{e}"
    );
    // R44: what a token's body may be follows the same bounds.
    assert_eq!(
        DeviceLimits::of(None).body_bytes(),
        64 * 1024 + 32 * (144 + 4096)
    );
    let full = device_may_add(&base_json(), None, &variant("x", &[], 1), 20, false).unwrap_err();
    assert!(
        full.contains("has 20") && full.contains("fewer than 20") && full.contains("maxVariants"),
        "{full}"
    );
    assert!(device_may_add(&base_json(), None, &variant("x", &[], 1), 19, false).is_ok());

    let owner_says = DeviceAccess {
        max_instances: Some(2),
        max_variants: Some(50),
        max_env: Some(40),
        max_value_length: Some(8192),
        ..DeviceAccess::default()
    };
    let e = refusal(Some(&owner_says), &[], 3);
    assert!(
        e.contains("at most 2 (spec.deviceAccess.maxInstances)"),
        "{e}"
    );
    assert_eq!(refusal(Some(&owner_says), &env, 2), "");
    assert_eq!(refusal(Some(&owner_says), &[("SUBTITLE", &long)], 1), "");
    assert!(
        device_may_add(
            &base_json(),
            Some(&owner_says),
            &variant("x", &[], 1),
            49,
            false
        )
        .is_ok()
    );
    let zero = DeviceAccess {
        max_variants: Some(0),
        ..DeviceAccess::default()
    };
    assert!(device_may_add(&base_json(), Some(&zero), &variant("x", &[], 1), 0, false).is_err());
}

// R32: a deviceAccess sent to the API is checked as the CRD schema checks it.
#[test]
fn device_access_is_validated() {
    assert_eq!(validate_device_access(&DeviceAccess::default()), Ok(()));
    let bad = DeviceAccess {
        env: Some(vec!["1BAD".into(), "x".repeat(129)]),
        max_instances: Some(MAX_INSTANCES + 1),
        max_variants: Some(-1),
        ..DeviceAccess::default()
    };
    let e = validate_device_access(&bad).unwrap_err();
    for word in [
        "1BAD",
        "129 characters",
        "maxInstances 1001",
        "maxVariants -1",
    ] {
        assert!(e.contains(word), "{word}: {e}");
    }
}

// R32: every variant, whoever writes it, is held to the hard maxima of the CRD schema.
#[test]
fn every_variant_is_held_to_the_hard_maxima() {
    assert_eq!(
        validate_variant("web", &variant("a", &[], MAX_INSTANCES)),
        Ok(())
    );
    let e = validate_variant("web", &variant("a", &[], MAX_INSTANCES + 1)).unwrap_err();
    assert!(e.contains("instances 1001: at most 1000"), "{e}");
    let mut v = variant("a", &[], 1);
    v.env = (0..=MAX_ENV)
        .map(|i| (format!("V{i}"), String::new()))
        .collect();
    let e = validate_variant("web", &v).unwrap_err();
    assert!(e.contains("257 entries, at most 256"), "{e}");
    let mut v = variant("a", &[], 1);
    v.env.insert("X".repeat(129), "1".into());
    v.env.insert("BIG".into(), "y".repeat(MAX_ENV_VALUE + 1));
    let e = validate_variant("web", &v).unwrap_err();
    assert!(e.contains("129 characters, at most 128"), "{e}");
    assert!(e.contains("env \"BIG\": value of 32769 characters"), "{e}");
    assert_eq!(check_variant_count(MAX_VARIANTS), Ok(()));
    let e = check_variant_count(MAX_VARIANTS + 1).unwrap_err();
    assert!(e.contains("501, at most 500"), "{e}");
}

// R32: a Mutation's env values reach the container as sent: every `$` is doubled, which the
// kubelet turns back into one, so `$(VAR)` is never expanded. A MutantDeployment's are written
// as declared.
#[test]
fn a_mutations_env_values_are_literal() {
    assert_eq!(literal_env_value("on"), "on");
    assert_eq!(literal_env_value("$(DB_PASSWORD)"), "$$(DB_PASSWORD)");
    assert_eq!(literal_env_value("a$$(X)b$"), "a$$$$(X)b$$");
    let v = variant("a", &[("TITLE", "$(DB_PASSWORD)"), ("NEW", "$x")], 1);
    let built = build(&base(), &owner(), &v);
    let env = at(&built, "/spec/template/spec/containers/0/env");
    assert!(
        env.as_array()
            .into_iter()
            .flatten()
            .any(|e| e == &json!({"name": "NEW", "value": "$$x"})),
        "{env}"
    );
    assert!(
        env.as_array()
            .into_iter()
            .flatten()
            .any(|e| e == &json!({"name": "TITLE", "value": "$$(DB_PASSWORD)"})),
        "{env}"
    );
    let md = Owner {
        kind: crate::crd::OwnerKind::MutantDeployment,
        ..owner()
    };
    let declared = build(&base(), &md, &v);
    assert!(
        at(&declared, "/spec/template/spec/containers/0/env")
            .as_array()
            .into_iter()
            .flatten()
            .any(|e| e == &json!({"name": "TITLE", "value": "$(DB_PASSWORD)"}))
    );
}

// R32: whatever a token sends, the container sees that value, not another variable's.
#[test]
fn escaped_values_survive_the_kubelets_expansion() {
    let secret = |name: &str| (name == "DB_PASSWORD").then_some("hunter2");
    for sent in [
        "$(DB_PASSWORD)",
        "$$(DB_PASSWORD)",
        "$$$(DB_PASSWORD)",
        "x$(DB_PASSWORD",
        "$",
        "$$",
        "a $b $(c) $$(d)",
        "plain",
    ] {
        assert_eq!(
            kubelet_expand(&literal_env_value(sent), secret),
            sent,
            "{sent}"
        );
    }
    // unescaped, the first would have carried the Secret
    assert_eq!(kubelet_expand("$(DB_PASSWORD)", secret), "hunter2");
}

// R9: whose a Deployment of a variant's name is.
#[test]
fn a_deployment_of_the_name_is_foreign_unless_controlled_by_the_owner() {
    let o = owner();
    assert_eq!(
        foreign(&meta(&[], Some(("Mutation", "snap", "uid-1"))), &o),
        None
    );
    let nobody = foreign(&meta(&[], None), &o).unwrap_or_else(|| panic!("foreign"));
    assert_eq!(
        (nobody.by.as_str(), nobody.passing),
        ("has no controller", false)
    );
    let other = foreign(&meta(&[], Some(("Mutation", "other", "uid-9"))), &o)
        .unwrap_or_else(|| panic!("foreign"));
    assert!(
        other.by.contains("\"other\"") && !other.passing,
        "{other:?}"
    );
    let md = foreign(&meta(&[], Some(("MutantDeployment", "snap", "uid-9"))), &o)
        .unwrap_or_else(|| panic!("foreign"));
    assert!(!md.passing, "{md:?}");
    // an earlier Mutation of the same name, deleted: its Deployments are on their way out
    let earlier = foreign(&meta(&[], Some(("Mutation", "snap", "uid-0"))), &o)
        .unwrap_or_else(|| panic!("foreign"));
    assert!(
        earlier.passing && earlier.by.contains("earlier"),
        "{earlier:?}"
    );
}

// R8: a Mutation's name is at most 63 characters (the owner label's value).
#[test]
fn mutation_names_must_fit_a_label_value() {
    assert_eq!(validate_mutation_name(&"m".repeat(63)), Ok(()));
    assert_eq!(validate_mutation_name("web.v2"), Ok(()));
    // a DNS-1123 subdomain's labels are each at most 63: a longer name has dots
    let long = format!("{}.{}", "m".repeat(40), "n".repeat(29));
    assert_eq!(validate_name(&long), Ok(()));
    let e = validate_mutation_name(&long).unwrap_err();
    assert!(
        e.contains("70 characters") && e.contains("at most 63"),
        "{e}"
    );
    assert!(validate_mutation_name("Bad_Name").is_err());
}
