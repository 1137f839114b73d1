//! Tests of a variant's placement, images and resources (R37) merged over the base's pod
//! template; their checks are in `placement_checks`.

use std::collections::BTreeMap;

use serde_json::json;

use super::*;
use crate::crd::{ContainerOverride, Quantity, Resources, Toleration, Variant};
use crate::variant::placement::known_containers;

/// `pairs` as a map of strings.
pub(super) fn strings(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// `pairs` as a map of quantities.
pub(super) fn quantities(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
        .collect()
}

/// A toleration of `key` with `operator`, `value` and `effect`.
pub(super) fn toleration(key: &str, operator: &str, value: &str, effect: &str) -> Toleration {
    Toleration {
        key: key.into(),
        operator: operator.into(),
        value: value.into(),
        effect: effect.into(),
        toleration_seconds: None,
    }
}

/// Container `name` of the base given `image` and `resources`.
pub(super) fn container(
    name: &str,
    image: Option<&str>,
    resources: Option<Resources>,
) -> ContainerOverride {
    ContainerOverride {
        name: name.into(),
        image: image.map(str::to_owned),
        resources,
        env: Default::default(),
    }
}

/// The fixture base with a nodeSelector, a toleration and resources on its first container.
fn placed_base() -> Base {
    let mut b = base_json();
    let pod = &mut b["spec"]["template"]["spec"];
    pod["nodeSelector"] = json!({"kubernetes.io/arch": "amd64", "zone": "hall"});
    pod["tolerations"] = json!([
        {"key": "dedicated", "operator": "Equal", "value": "kiosk", "effect": "NoSchedule"}
    ]);
    pod["containers"][0]["resources"] = json!({
        "requests": {"cpu": "100m", "memory": "128Mi"},
        "limits": {"memory": "256Mi"}
    });
    Base::parse(&b).unwrap_or_else(|e| panic!("{e}"))
}

// R37: the variant's node labels are merged over the base's, its value winning; a base without
// a nodeSelector gets the variant's.
#[test]
fn node_selector_keys_of_the_variant_win() {
    let v = Variant {
        node_selector: strings(&[("kubernetes.io/arch", "arm64"), ("board", "radxa-8")]),
        ..variant("radxa-8-hd", &[], 1)
    };
    let d = build(&placed_base(), &owner(), &v);
    assert_eq!(
        at(&d, "/spec/template/spec/nodeSelector"),
        &json!({"board": "radxa-8", "kubernetes.io/arch": "arm64", "zone": "hall"})
    );
    let bare = build(&base(), &owner(), &v);
    assert_eq!(
        at(&bare, "/spec/template/spec/nodeSelector"),
        &json!({"board": "radxa-8", "kubernetes.io/arch": "arm64"})
    );
}

// R37: tolerations are appended to the base's, none twice: one the base has (an empty operator
// being Equal) or the variant repeats is left out.
#[test]
fn tolerations_are_appended_without_duplicates() {
    let gpu = toleration("gpu", "Exists", "", "");
    let v = Variant {
        tolerations: vec![
            toleration("dedicated", "", "kiosk", "NoSchedule"),
            gpu.clone(),
            gpu,
            Toleration {
                toleration_seconds: Some(30),
                ..toleration("node.kubernetes.io/unreachable", "Exists", "", "NoExecute")
            },
        ],
        ..variant("edge", &[], 1)
    };
    let d = build(&placed_base(), &owner(), &v);
    assert_eq!(
        at(&d, "/spec/template/spec/tolerations"),
        &json!([
            {"key": "dedicated", "operator": "Equal", "value": "kiosk", "effect": "NoSchedule"},
            {"key": "gpu", "operator": "Exists"},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
             "effect": "NoExecute", "tolerationSeconds": 30}
        ])
    );
    // the same key with another value is another toleration
    let other = Variant {
        tolerations: vec![toleration("dedicated", "Equal", "lobby", "NoSchedule")],
        ..variant("edge", &[], 1)
    };
    let d = build(&placed_base(), &owner(), &other);
    let list = at(&d, "/spec/template/spec/tolerations")
        .as_array()
        .cloned();
    assert_eq!(list.map(|l| l.len()), Some(2));
}

// R37: a container's image is replaced, and its resources merged by resource name; the other
// containers and the init containers are left as they are.
#[test]
fn image_and_resources_land_in_the_named_container() {
    let v = Variant {
        containers: vec![container(
            "nginx",
            Some("nginx:1.27-alpine-slim"),
            Some(Resources {
                limits: quantities(&[("memory", "64Mi"), ("cpu", "250m")]),
                requests: quantities(&[("memory", "32Mi")]),
            }),
        )],
        ..variant("lilygo47", &[("SNAP_RES", "960x540")], 1)
    };
    let d = build(&placed_base(), &owner(), &v);
    let nginx = at(&d, "/spec/template/spec/containers/0");
    assert_eq!(nginx["image"], "nginx:1.27-alpine-slim");
    assert_eq!(
        nginx["resources"],
        json!({
            "requests": {"cpu": "100m", "memory": "32Mi"},
            "limits": {"cpu": "250m", "memory": "64Mi"}
        })
    );
    assert_eq!(
        nginx["env"][3],
        json!({"name": "SNAP_RES", "value": "960x540"})
    );
    let sidecar = at(&d, "/spec/template/spec/containers/1");
    assert_eq!(sidecar["image"], "busybox");
    assert!(sidecar.get("resources").is_none(), "{sidecar}");
    assert_eq!(
        at(&d, "/spec/template/spec/initContainers"),
        at(&base_json(), "/spec/template/spec/initContainers")
    );
    // only the image: the resources stay the base's; a container without resources gets them
    let image_only = Variant {
        containers: vec![
            container("nginx", Some("nginx:2"), None),
            container(
                "sidecar",
                None,
                Some(Resources {
                    requests: quantities(&[("cpu", "10m")]),
                    ..Resources::default()
                }),
            ),
        ],
        ..variant("edge", &[], 1)
    };
    let d = build(&placed_base(), &owner(), &image_only);
    assert_eq!(
        at(&d, "/spec/template/spec/containers/0/resources"),
        at(
            placed_base().value(),
            "/spec/template/spec/containers/0/resources"
        )
    );
    assert_eq!(
        at(&d, "/spec/template/spec/containers/1"),
        &json!({"name": "sidecar", "image": "busybox", "resources": {"requests": {"cpu": "10m"}}})
    );
}

// R37: a variant that sets none of the fields builds the Deployment it built before they
// existed, so no running variant is rewritten by an upgrade; each field changes the hash.
#[test]
fn a_variant_without_placement_leaves_the_pod_spec_alone() {
    let d = build(&placed_base(), &owner(), &variant("plain", &[], 1));
    let mut expected = at(placed_base().value(), "/spec/template/spec").clone();
    expected["containers"][1]
        .as_object_mut()
        .map(|c| c.remove("env"));
    let mut pod = at(&d, "/spec/template/spec").clone();
    pod["containers"][1]
        .as_object_mut()
        .map(|c| c.remove("env"));
    assert_eq!(pod, expected);
    let hash = |v: &Variant| {
        build(&base(), &owner(), v)["metadata"]["annotations"][HASH_ANNOTATION].clone()
    };
    let plain = variant("plain", &[], 1);
    for changed in [
        Variant {
            node_selector: strings(&[("a", "b")]),
            ..plain.clone()
        },
        Variant {
            tolerations: vec![toleration("a", "Exists", "", "")],
            ..plain.clone()
        },
        Variant {
            containers: vec![container("nginx", Some("nginx:2"), None)],
            ..plain.clone()
        },
    ] {
        assert_ne!(hash(&changed), hash(&plain), "{changed:?}");
    }
}

// R37: a container name the base does not have (an init container's included) makes the
// variant Invalid, its message naming the container and those the base has.
#[test]
fn an_unknown_container_name_is_invalid() {
    let v = Variant {
        containers: vec![container("snap", Some("snap:slim"), None)],
        ..variant("lilygo47", &[], 1)
    };
    let e = known_containers(&base_json(), &v).unwrap_err();
    assert!(
        e.contains("containers \"snap\"") && e.contains("nginx, sidecar"),
        "{e}"
    );
    let init = Variant {
        containers: vec![container("init", Some("busybox:2"), None)],
        ..variant("init", &[], 1)
    };
    assert!(known_containers(&base_json(), &init).is_err());
    let planned = plan(&base(), &owner(), &[v, variant("ok", &[], 1)]);
    match &planned[0] {
        Planned::Invalid { message, .. } => assert!(message.contains("\"snap\""), "{message}"),
        other => panic!("expected Invalid, got {other:?}"),
    }
    assert!(matches!(planned[1], Planned::Apply { .. }));
    let known = Variant {
        containers: vec![container("sidecar", Some("busybox:2"), None)],
        ..variant("known", &[], 1)
    };
    assert_eq!(known_containers(&base_json(), &known), Ok(()));
}

// R37: a toleration the base writes differently (operator left out) is still the same one.
#[test]
fn the_base_may_write_a_toleration_without_operator() {
    let mut b = base_json();
    b["spec"]["template"]["spec"]["tolerations"] = json!([{"key": "dedicated", "value": "kiosk"}]);
    let base = Base::parse(&b).unwrap_or_else(|e| panic!("{e}"));
    let v = Variant {
        tolerations: vec![toleration("dedicated", "Equal", "kiosk", "")],
        ..variant("edge", &[], 1)
    };
    let d = build(&base, &owner(), &v);
    assert_eq!(
        at(&d, "/spec/template/spec/tolerations"),
        &json!([{"key": "dedicated", "value": "kiosk"}])
    );
}
