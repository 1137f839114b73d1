//! The JSON the HTTP API reads and writes (R23, R24). Request types refuse unknown fields, so a
//! typo is a 400 instead of a silently ignored setting.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use serde::{Deserialize, Serialize};

use crate::crd::{
    ContainerOverride, DeviceAccess, EmbeddedJson, Mutation, ServicePortSpec, ServiceProtocol,
    ServiceSpec, ServiceType, Toleration, Variant, VariantStatus,
};

use super::placement::{ContainerRequest, TolerationRequest};

/// `POST .../mutations`.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct CreateMutation {
    /// The Mutation's name.
    pub name: String,
    /// The base Deployment.
    pub deployment: serde_json::Value,
    /// The first variants.
    #[serde(default)]
    pub variants: Vec<VariantRequest>,
    /// What the Mutation's own token may ask (`spec.deviceAccess`); the defaults when left out.
    #[serde(default, rename = "deviceAccess")]
    pub device_access: Option<DeviceAccessRequest>,
    /// A Service per variant (`spec.service`, R36); none when left out.
    #[serde(default)]
    pub service: Option<ServiceRequest>,
}

/// `deviceAccess` of `POST .../mutations`: [`DeviceAccess`], refusing unknown fields.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DeviceAccessRequest {
    /// [`DeviceAccess::env`].
    #[serde(default)]
    pub env: Option<Vec<String>>,
    /// [`DeviceAccess::max_instances`].
    #[serde(default)]
    pub max_instances: Option<i32>,
    /// [`DeviceAccess::max_variants`].
    #[serde(default)]
    pub max_variants: Option<i32>,
    /// [`DeviceAccess::max_env`].
    #[serde(default)]
    pub max_env: Option<i32>,
    /// [`DeviceAccess::max_value_length`].
    #[serde(default)]
    pub max_value_length: Option<i32>,
    /// [`DeviceAccess::node_selector`].
    #[serde(default)]
    pub node_selector: Vec<String>,
    /// [`DeviceAccess::tolerations`].
    #[serde(default)]
    pub tolerations: Vec<String>,
}

impl From<DeviceAccessRequest> for DeviceAccess {
    fn from(r: DeviceAccessRequest) -> Self {
        DeviceAccess {
            env: r.env,
            max_instances: r.max_instances,
            max_variants: r.max_variants,
            max_env: r.max_env,
            max_value_length: r.max_value_length,
            node_selector: r.node_selector,
            tolerations: r.tolerations,
        }
    }
}

/// `service` of `POST .../mutations` (R36): [`ServiceSpec`], refusing unknown fields.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct ServiceRequest {
    /// [`ServiceSpec::type_`].
    #[serde(default, rename = "type")]
    pub type_: ServiceType,
    /// [`ServiceSpec::ports`].
    #[serde(default)]
    pub ports: Vec<ServicePortRequest>,
}

/// [`ServicePortSpec`], refusing unknown fields.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ServicePortRequest {
    /// [`ServicePortSpec::name`].
    #[serde(default)]
    pub name: Option<String>,
    /// [`ServicePortSpec::port`].
    pub port: i32,
    /// [`ServicePortSpec::target_port`].
    #[serde(default)]
    pub target_port: Option<IntOrString>,
    /// [`ServicePortSpec::protocol`].
    #[serde(default)]
    pub protocol: Option<ServiceProtocol>,
    /// [`ServicePortSpec::node_port`].
    #[serde(default)]
    pub node_port: Option<i32>,
    /// [`ServicePortSpec::app_protocol`].
    #[serde(default)]
    pub app_protocol: Option<String>,
}

impl From<ServiceRequest> for ServiceSpec {
    fn from(r: ServiceRequest) -> Self {
        ServiceSpec {
            type_: r.type_,
            ports: r
                .ports
                .into_iter()
                .map(|p| ServicePortSpec {
                    name: p.name,
                    port: p.port,
                    target_port: p.target_port,
                    protocol: p.protocol,
                    node_port: p.node_port,
                    app_protocol: p.app_protocol,
                })
                .collect(),
        }
    }
}

/// `POST .../variants`, and each variant of a created Mutation.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct VariantRequest {
    /// The variant's label.
    pub label: String,
    /// Extra environment variables.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Replica count; 1 when left out, as in the CRD.
    #[serde(default = "one")]
    pub instances: i32,
    /// Node labels the variant's pods must run on (R37).
    #[serde(default, rename = "nodeSelector")]
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations added to the base's (R37).
    #[serde(default)]
    pub tolerations: Vec<TolerationRequest>,
    /// Image and resources of containers of the base (R37).
    #[serde(default)]
    pub containers: Vec<ContainerRequest>,
}

fn one() -> i32 {
    1
}

impl From<VariantRequest> for Variant {
    fn from(r: VariantRequest) -> Self {
        Variant {
            label: r.label,
            env: r.env,
            instances: r.instances,
            node_selector: r.node_selector,
            tolerations: r.tolerations.into_iter().map(Toleration::from).collect(),
            containers: r
                .containers
                .into_iter()
                .map(ContainerOverride::from)
                .collect(),
        }
    }
}

/// `PATCH .../variants/{label}`.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct ScaleRequest {
    /// The new replica count.
    pub instances: i32,
}

/// A variant as the API shows it.
#[derive(Serialize, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VariantView {
    /// The variant's label.
    pub label: String,
    /// Its extra environment.
    pub env: BTreeMap<String, String>,
    /// Its replica count.
    pub instances: i32,
    /// Its node labels (R37); left out when it has none.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Its tolerations; left out when it has none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Its containers' images and resources; left out when it changes none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<ContainerOverride>,
    /// Whether the API may change it (false for an Argo CD synced Mutation without
    /// runtime variants).
    pub read_only: bool,
    /// What the controller last reported for it; null until then.
    pub status: Option<VariantStatus>,
}

/// A Mutation as the API shows it.
#[derive(Serialize, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MutationView {
    /// metadata.name.
    pub name: String,
    /// metadata.namespace.
    pub namespace: String,
    /// The base Deployment, written out as kept.
    pub deployment: EmbeddedJson,
    /// Its variants.
    pub variants: Vec<VariantView>,
    /// Name of its token's Secret; null until the controller has made it.
    pub secret: Option<String>,
    /// "N/M variants ready"; null until the controller has reported.
    pub summary: Option<String>,
    /// What is wrong with it, if anything.
    pub message: Option<String>,
    /// Whether its variants are read-only through the API.
    pub read_only: bool,
}

/// The status the controller reported for the n-th variant (matched by position and label).
fn variant_status(m: &Mutation, index: usize, label: &str) -> Option<VariantStatus> {
    let reported = &m.status.as_ref()?.variants;
    reported
        .get(index)
        .filter(|s| s.label == label)
        .or_else(|| reported.iter().find(|s| s.label == label))
        .cloned()
}

/// Renders the variant at `index`.
pub fn variant_view(m: &Mutation, index: usize) -> Option<VariantView> {
    let v = m.spec.variants.get(index)?;
    Some(VariantView {
        label: v.label.clone(),
        env: v.env.clone(),
        instances: v.instances,
        node_selector: v.node_selector.clone(),
        tolerations: v.tolerations.clone(),
        containers: v.containers.clone(),
        read_only: m.variants_read_only(),
        status: variant_status(m, index, &v.label),
    })
}

/// Renders a Mutation.
pub fn mutation_view(m: &Mutation) -> MutationView {
    let status = m.status.as_ref();
    MutationView {
        name: m.name_any(),
        namespace: m.namespace().unwrap_or_default(),
        deployment: m.spec.deployment.clone(),
        variants: (0..m.spec.variants.len())
            .filter_map(|i| variant_view(m, i))
            .collect(),
        secret: status.and_then(|s| s.secret.clone()),
        summary: status.map(|s| s.summary.clone()).filter(|s| !s.is_empty()),
        message: status.and_then(|s| s.message.clone()),
        read_only: m.variants_read_only(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{OwnerStatus, VariantState, fixtures};
    use serde_json::json;

    fn mutation() -> Mutation {
        fixtures::mutation(
            "web",
            vec![Variant {
                label: "beta".into(),
                env: BTreeMap::from([("FEATURE_X".into(), "on".into())]),
                instances: 2,
                ..Variant::default()
            }],
        )
    }

    #[test]
    fn a_variant_renders_as_the_readme_shows() {
        // R23
        let mut m = mutation();
        assert_eq!(
            serde_json::to_value(variant_view(&m, 0).unwrap()).unwrap(),
            json!({"label": "beta", "env": {"FEATURE_X": "on"}, "instances": 2,
                   "readOnly": false, "status": null})
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
}
