//! Unit tests of the API's wire shapes.

use super::*;
use crate::crd::{OwnerStatus, VariantState, fixtures};
use serde_json::json;

fn mutation() -> Mutation {
    fixtures::mutation(
        "web",
        vec![Variant {
            label: "beta".into(),
            env: [("FEATURE_X", "on")].into_iter().collect(),
            instances: 2,
            ..Variant::default()
        }],
    )
}

#[test]
fn a_variant_renders_as_docs_api_shows() {
    // R23
    let mut m = mutation();
    assert_eq!(
        serde_json::to_value(variant_view(&m, 0).unwrap()).unwrap(),
        json!({"label": "beta", "env": {"FEATURE_X": "on"}, "instances": 2,
               "readOnly": false, "status": null})
    );
    // R39: a device's view leaves the env out, key and values.
    let mut device = variant_view(&m, 0).unwrap();
    device.env = None;
    assert_eq!(
        serde_json::to_value(device).unwrap(),
        json!({"label": "beta", "instances": 2, "readOnly": false, "status": null})
    );
    m.status = Some(OwnerStatus {
        variants: vec![VariantStatus {
            replicas: 2,
            ..fixtures::variant_status("beta", VariantState::Ready, 2)
        }],
        summary: "1/1 variants ready".into(),
        secret: Some("web-secret".into()),
        ..OwnerStatus::default()
    });
    assert_eq!(
        serde_json::to_value(variant_view(&m, 0).unwrap()).unwrap()["status"],
        json!({"label": "beta", "state": "Ready", "message": null, "deployment": "web-beta",
               "replicas": 2, "readyReplicas": 2})
    );
    let view = serde_json::to_value(mutation_view(&m)).unwrap();
    let mut keys: Vec<&str> = view
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "deployment",
            "message",
            "name",
            "namespace",
            "readOnly",
            "secret",
            "summary",
            "variants"
        ]
    );
    assert_eq!(view["summary"], "1/1 variants ready");
    assert_eq!(view["secret"], "web-secret");
}

#[test]
fn requests_refuse_unknown_fields_and_default_instances() {
    // R24
    let err = serde_json::from_str::<VariantRequest>(r#"{"label":"a","replicas":2}"#);
    assert!(
        err.unwrap_err()
            .to_string()
            .contains("unknown field `replicas`")
    );
    let ok: VariantRequest = serde_json::from_str(r#"{"label":"a"}"#).unwrap();
    assert_eq!((ok.instances, ok.env.len()), (1, 0));
    // R32, R39: the owner's marks, spelled as in the CRD
    let marked: VariantRequest =
        serde_json::from_str(r#"{"label":"a","enrollable":true,"byToken":true}"#).unwrap();
    let marked = Variant::from(marked);
    assert_eq!(
        (marked.enrollable, marked.by_token),
        (Some(true), Some(true))
    );
    assert!(serde_json::from_str::<ScaleRequest>(r#"{"instances":"4"}"#).is_err());
    assert!(serde_json::from_str::<ScaleRequest>(r#"{"instances":4,"env":{}}"#).is_err());
    // R32: the owner's deviceAccess, spelled as in the CRD, typos refused
    let create: CreateMutation = serde_json::from_str(
        r#"{"name":"web","deployment":{},"deviceAccess":{"env":["SCREEN"],"maxInstances":2}}"#,
    )
    .unwrap();
    let access = DeviceAccess::from(create.device_access.unwrap());
    assert_eq!(access.env, Some(vec!["SCREEN".to_string()]));
    assert_eq!(access.max_instances, Some(2));
    let typo = serde_json::from_str::<CreateMutation>(
        r#"{"name":"web","deployment":{},"deviceAccess":{"maxInstance":2}}"#,
    );
    assert!(
        typo.unwrap_err()
            .to_string()
            .contains("unknown field `maxInstance`")
    );
}

// R36: the request spells the field as the CRD does; typos are refused
#[test]
fn a_service_request_is_the_crds_field() {
    let r: ServiceRequest = serde_json::from_str(
        r#"{"type":"NodePort","ports":[{"name":"http","port":80,"targetPort":"web"}]}"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let spec = ServiceSpec::from(r);
    assert_eq!(spec.type_, ServiceType::NodePort);
    assert_eq!(
        spec.ports[0].target_port,
        Some(IntOrString::String("web".into()))
    );
    let typo = serde_json::from_str::<ServiceRequest>(r#"{"ports":[{"prot":80}]}"#);
    assert!(typo.is_err_and(|e| e.to_string().contains("unknown field `prot`")));
    let bad_type = serde_json::from_str::<ServiceRequest>(r#"{"type":"ExternalName"}"#);
    assert!(bad_type.is_err());
    let empty: ServiceRequest = serde_json::from_str("{}").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ServiceSpec::from(empty), ServiceSpec::default());
    // R36: who may reach it, spelled as the CRD and Kubernetes spell it.
    let reach: ServiceRequest = serde_json::from_str(
        r#"{"type":"LoadBalancer","loadBalancerSourceRanges":["192.168.1.0/24"],
            "externalTrafficPolicy":"Local","ipFamilies":["IPv4"],"ipFamilyPolicy":"SingleStack"}"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let spec = ServiceSpec::from(reach);
    let crd: ServiceSpec = serde_json::from_value(serde_json::to_value(&spec).unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(crd, spec);
    assert_eq!(spec.load_balancer_source_ranges, ["192.168.1.0/24"]);
    assert!(serde_json::from_str::<ServiceRequest>(r#"{"ipFamilies":["IPv5"]}"#).is_err());
    assert!(serde_json::from_str::<ServiceRequest>(r#"{"sourceRanges":[]}"#).is_err());
}

// R37, R24: the request's placement and containers are the CRD's fields, typos refused.
#[test]
fn a_request_carries_placement_and_refuses_typos() {
    let sent = json!({
        "label": "radxa-8-hd",
        "env": {"SNAP_RES": "1280x800"},
        "nodeSelector": {"kubernetes.io/arch": "arm64"},
        "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [{"name": "snap", "image": "snap:2", "resources": {
            "limits": {"memory": "64Mi", "cpu": 1}}}]
    });
    let request: VariantRequest =
        serde_json::from_value(sent.clone()).unwrap_or_else(|e| panic!("{e}"));
    let v = Variant::from(request);
    assert_eq!(v.node_selector["kubernetes.io/arch"], "arm64");
    assert_eq!(v.tolerations[0].effect, "NoSchedule");
    assert_eq!(v.containers[0].image.as_deref(), Some("snap:2"));
    // the API answers the variant as it is stored, with the new fields
    let m = fixtures::mutation("browser-snap", vec![v]);
    let view = serde_json::to_value(variant_view(&m, 0)).unwrap_or_default();
    assert_eq!(view["nodeSelector"], sent["nodeSelector"]);
    assert_eq!(view["tolerations"], sent["tolerations"]);
    assert_eq!(
        view["containers"],
        json!([{"name": "snap", "image": "snap:2", "resources": {
            "limits": {"cpu": "1", "memory": "64Mi"}}}])
    );
    // and leaves them out when the variant sets none
    let plain = fixtures::mutation("web", vec![fixtures::variant("beta", &[], 1)]);
    let view = serde_json::to_value(variant_view(&plain, 0)).unwrap_or_default();
    for field in ["nodeSelector", "tolerations", "containers"] {
        assert!(view.get(field).is_none(), "{field}: {view}");
    }
    for (typo, field) in [
        (json!({"label": "a", "nodeselector": {}}), "nodeselector"),
        (
            json!({"label": "a", "tolerations": [{"keys": "x"}]}),
            "keys",
        ),
        (
            json!({"label": "a", "containers": [{"name": "x", "img": "y"}]}),
            "img",
        ),
        (
            json!({"label": "a", "containers": [{"name": "x", "resources": {"limit": {}}}]}),
            "limit",
        ),
    ] {
        let e = serde_json::from_value::<VariantRequest>(typo).unwrap_err();
        assert!(
            e.to_string().contains(&format!("unknown field `{field}`")),
            "{e}"
        );
    }
    let e = serde_json::from_value::<VariantRequest>(
        json!({"label": "a", "containers": [{"image": "y"}]}),
    )
    .unwrap_err();
    assert!(e.to_string().contains("missing field `name`"), "{e}");
}
