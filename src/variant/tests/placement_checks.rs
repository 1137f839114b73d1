//! Tests of the checks of a variant's placement, images and resources (R8, R37) and of what a
//! Mutation's own token may set of them (R32, R37).

use super::placement::{container, quantities, strings, toleration};
use super::*;
use crate::crd::{DeviceAccess, Resources, Toleration, Variant};
use crate::variant::access::{device_may_add, validate_device_access};
use crate::variant::placement::{device_may_place, is_label_key, is_quantity};

// R8, R37: what Kubernetes would refuse in a pod spec is Invalid, each problem named.
#[test]
fn placement_fields_are_checked() {
    let problems = |v: Variant| validate_variant("web", &v).err().unwrap_or_default();
    let ok = Variant {
        node_selector: strings(&[("kubernetes.io/arch", "arm64"), ("board", "")]),
        tolerations: vec![
            toleration("", "Exists", "", ""),
            toleration("dedicated", "", "kiosk", "NoSchedule"),
            Toleration {
                toleration_seconds: Some(60),
                ..toleration("node.kubernetes.io/not-ready", "Exists", "", "NoExecute")
            },
        ],
        containers: vec![container(
            "nginx",
            Some("registry.example:5000/nginx@sha256:0123"),
            Some(Resources {
                limits: quantities(&[("cpu", "1.5"), ("memory", "1Gi"), ("nvidia.com/gpu", "1")]),
                requests: quantities(&[("cpu", ".5"), ("ephemeral-storage", "2e9")]),
            }),
        )],
        ..variant("ok", &[], 1)
    };
    assert_eq!(problems(ok), "");
    let bad = Variant {
        node_selector: strings(&[("-arch", "arm64"), ("board", "radxa 8")]),
        tolerations: vec![
            toleration("", "Equal", "", ""),
            toleration("gpu", "Exists", "yes", ""),
            toleration("gpu", "Near", "", ""),
            toleration("gpu", "Exists", "", "Sometimes"),
            Toleration {
                toleration_seconds: Some(5),
                ..toleration("gpu", "Exists", "", "NoSchedule")
            },
        ],
        containers: vec![
            container("nginx", Some(""), None),
            container("nginx", Some("nginx :1"), None),
            container(
                "sidecar",
                None,
                Some(Resources {
                    limits: quantities(&[("memory", "lots"), ("cpu", "-1")]),
                    requests: quantities(&[("bad name!", "1")]),
                }),
            ),
        ],
        ..variant("bad", &[], 1)
    };
    let e = problems(bad);
    for word in [
        "nodeSelector key \"-arch\"",
        "nodeSelector \"board\": value \"radxa 8\"",
        "tolerations[0]: a toleration without a key must have operator Exists",
        "tolerations[1].value: must be empty with operator Exists",
        "tolerations[2].operator \"Near\"",
        "tolerations[3].effect \"Sometimes\"",
        "tolerations[4].tolerationSeconds: only with effect NoExecute",
        "containers \"nginx\": image \"\"",
        "containers \"nginx\": named twice",
        "image \"nginx :1\"",
        "resources.limits.memory \"lots\"",
        "resources.limits.cpu \"-1\"",
        "resources.requests name \"bad name!\"",
    ] {
        assert!(e.contains(word), "{word:?} not in {e}");
    }
    // the hard maxima
    let many = Variant {
        node_selector: (0..65).map(|i| (format!("k{i}"), "v".to_owned())).collect(),
        tolerations: vec![toleration("a", "Exists", "", ""); 65],
        containers: (0..65)
            .map(|i| container(&format!("c{i}"), None, None))
            .collect(),
        ..variant("many", &[], 1)
    };
    let e = problems(many);
    for word in [
        "nodeSelector: 65 entries, at most 64",
        "tolerations: 65 entries, at most 64",
        "containers: 65 entries, at most 64",
    ] {
        assert!(e.contains(word), "{word:?} not in {e}");
    }
    let long = Variant {
        node_selector: strings(&[(&format!("{}/x", "a".repeat(254)), "v")]),
        containers: vec![container("nginx", Some(&"i".repeat(1025)), None)],
        ..variant("long", &[], 1)
    };
    let e = problems(long);
    assert!(
        e.contains("nodeSelector key") && e.contains("at most 1024"),
        "{e}"
    );
}

// R37: label keys and quantities as Kubernetes reads them.
#[test]
fn label_keys_and_quantities() {
    for ok in ["arch", "kubernetes.io/arch", "a.b-c/D_e.f", &"k".repeat(63)] {
        assert!(is_label_key(ok), "{ok}");
    }
    for bad in [
        "",
        "/arch",
        "Example.com/arch",
        "a/b/c",
        "-a",
        "a-",
        &"k".repeat(64),
    ] {
        assert!(!is_label_key(bad), "{bad}");
    }
    for ok in [
        "1", "100m", "0.5", ".5", "1.", "64Mi", "1Gi", "2e9", "1E-3", "+1k", "-1", "3n",
    ] {
        assert!(is_quantity(ok), "{ok}");
    }
    for bad in [
        "", ".", "m", "1 Gi", "1Gb", "1e", "1e1.5x", "1.2.3", "0x10", "Mi",
    ] {
        assert!(!is_quantity(bad), "{bad}");
    }
}

// R37 (with R32): a Mutation's token may set node labels only of the keys its owner lists,
// tolerate only the taint keys it lists, never without a key, and never set containers.
#[test]
fn device_tokens_place_only_as_the_owner_allows() {
    let placed = |selector: &[(&str, &str)], tolerations: Vec<Toleration>| Variant {
        node_selector: strings(selector),
        tolerations,
        ..variant("board-7", &[("SNAP_RES", "1280x800")], 1)
    };
    // by default: env as before, no node labels, no tolerations
    assert_eq!(device_may_place(None, &placed(&[], vec![])), Ok(()));
    let e =
        device_may_place(None, &placed(&[("kubernetes.io/arch", "arm64")], vec![])).unwrap_err();
    assert!(
        e.contains("nodeSelector \"kubernetes.io/arch\"")
            && e.contains("spec.deviceAccess.nodeSelector"),
        "{e}"
    );
    let e = device_may_place(
        None,
        &placed(&[], vec![toleration("gpu", "Exists", "", "")]),
    )
    .unwrap_err();
    assert!(
        e.contains("tolerations[0] (key \"gpu\")") && e.contains("spec.deviceAccess.tolerations"),
        "{e}"
    );
    let access = DeviceAccess {
        node_selector: vec!["kubernetes.io/arch".into()],
        tolerations: vec!["gpu".into()],
        ..DeviceAccess::default()
    };
    let allowed = placed(
        &[("kubernetes.io/arch", "arm64")],
        vec![toleration("gpu", "Exists", "", "NoSchedule")],
    );
    assert_eq!(device_may_place(Some(&access), &allowed), Ok(()));
    assert!(device_may_add(&base_json(), Some(&access), &allowed, 1, false).is_ok());
    let e = device_may_place(
        Some(&access),
        &placed(&[("kubernetes.io/hostname", "b7")], vec![]),
    )
    .unwrap_err();
    assert!(e.contains("\"kubernetes.io/hostname\""), "{e}");
    let e = device_may_place(
        Some(&access),
        &placed(&[], vec![toleration("", "Exists", "", "")]),
    )
    .unwrap_err();
    assert!(
        e.contains("tolerations[0]") && e.contains("every taint"),
        "{e}"
    );
    // containers: never, whatever the owner allows
    let image = Variant {
        containers: vec![container("nginx", Some("nginx:evil"), None)],
        ..allowed
    };
    let e = device_may_add(&base_json(), Some(&access), &image, 1, false).unwrap_err();
    assert!(
        e.contains("containers (\"nginx\")") && e.contains("image or resources"),
        "{e}"
    );
    // a deviceAccess sent to the API: its keys must be label keys
    let bad = DeviceAccess {
        node_selector: vec!["bad key".into()],
        tolerations: vec![String::new()],
        ..DeviceAccess::default()
    };
    let e = validate_device_access(&bad).unwrap_err();
    assert!(
        e.contains("deviceAccess.nodeSelector \"bad key\"")
            && e.contains("deviceAccess.tolerations \"\""),
        "{e}"
    );
    assert_eq!(validate_device_access(&access), Ok(()));
}
