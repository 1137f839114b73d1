//! What the operator keeps of a Service it generated: [`ObservedService`].
//!
//! Like [`ObservedDeployment`](super::super::ObservedDeployment), it is decoded straight from
//! the API server's JSON rather than through the typed k8s-openapi Service: the metadata that
//! says whose it is, the spec as one compact JSON text (compared on demand, R5, R12), and the
//! load balancer's addresses. What the status reports of it is read off the spec's text
//! ([`ObservedService::view`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Deserializer};
use serde_json::{Value, json};

use super::super::{meta::kube_type, observed::CreatedEntry, owner::FIELD_MANAGER};
use crate::crd::{PackedJson, compact::CompactText};

/// A Service as the operator caches it: its metadata (kubectl's last-applied copy and, in the
/// watch's cache, `managedFields` dropped), its spec as compact JSON text, and the addresses
/// of `status.loadBalancer.ingress`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ObservedService {
    /// The object's metadata.
    pub metadata: ObjectMeta,
    /// `status.loadBalancer.ingress`: each entry's IP, else its host name.
    pub ingress: Vec<String>,
    /// `spec` as compact JSON text, packed.
    spec: PackedJson,
}

/// What a variant's status reports of a Service's spec.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceView {
    /// `spec.type`; the server defaults it to ClusterIP.
    #[serde(default, rename = "type")]
    pub type_: Option<String>,
    /// `spec.clusterIP`.
    #[serde(default, rename = "clusterIP")]
    pub cluster_ip: Option<String>,
    /// `spec.ports`.
    #[serde(default)]
    pub ports: Vec<PortView>,
}

/// One of [`ServiceView::ports`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PortView {
    /// `name`.
    #[serde(default)]
    pub name: Option<String>,
    /// `port`.
    #[serde(default)]
    pub port: i32,
    /// `protocol`; the server defaults it to TCP.
    #[serde(default)]
    pub protocol: Option<String>,
    /// `nodePort`, for NodePort and LoadBalancer.
    #[serde(default)]
    pub node_port: Option<i32>,
}

impl ObservedService {
    /// The spec's type, cluster IP and ports ([`ServiceView`]); empty for a spec that does not
    /// decode (the server never gives one).
    pub fn view(&self) -> ServiceView {
        serde_json::from_str(&self.spec.unpack()).unwrap_or_default()
    }

    /// The Service as a JSON object of `apiVersion`, `kind`, `metadata` and `spec`: what
    /// `service_needs_apply` compares with the desired object.
    pub fn comparable(&self) -> Value {
        let mut metadata = self.metadata.clone();
        metadata.managed_fields = None;
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": serde_json::to_value(&metadata).unwrap_or(Value::Null),
            "spec": serde_json::from_str::<Value>(&self.spec.unpack()).unwrap_or(Value::Null),
        })
    }

    /// The operator's `Update` entry in `managedFields` (a Service it created with a POST and
    /// has not applied over since), to hand over before an apply. Only an object read from
    /// the API server has `managedFields`; a cached one does not.
    pub fn created_entry(&self) -> Option<CreatedEntry> {
        let entries = self.metadata.managed_fields.as_deref().unwrap_or_default();
        let ours = |operation: &str| {
            entries.iter().position(|e| {
                e.manager.as_deref() == Some(FIELD_MANAGER)
                    && e.operation.as_deref() == Some(operation)
                    && e.subresource.as_deref().is_none_or(str::is_empty)
            })
        };
        ours("Update").map(|index| CreatedEntry {
            index,
            applied_too: ours("Apply").is_some(),
        })
    }
}

/// The fields read off the wire.
#[derive(Deserialize)]
struct Wire {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: Option<CompactText>,
    #[serde(default)]
    status: Option<WireStatus>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireStatus {
    #[serde(default)]
    load_balancer: Option<WireBalancer>,
}

#[derive(Deserialize)]
struct WireBalancer {
    #[serde(default)]
    ingress: Option<Vec<WireIngress>>,
}

#[derive(Deserialize)]
struct WireIngress {
    #[serde(default)]
    ip: Option<String>,
    #[serde(default)]
    hostname: Option<String>,
}

impl<'de> Deserialize<'de> for ObservedService {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let Wire {
            mut metadata,
            spec,
            status,
        } = Wire::deserialize(deserializer)?;
        if let Some(annotations) = metadata.annotations.as_mut() {
            annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
        }
        let ingress = status
            .and_then(|s| s.load_balancer)
            .and_then(|b| b.ingress)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|i| i.ip.or(i.hostname))
            .collect();
        let spec = spec.map_or_else(|| "null".to_string(), |CompactText(text)| text);
        Ok(ObservedService {
            metadata,
            ingress,
            spec: PackedJson::pack(&spec),
        })
    }
}

impl super::super::meta::HasMeta for ObservedService {
    fn meta_view(&self) -> &dyn super::super::meta::MetaView {
        &self.metadata
    }
}

kube_type!(resource ObservedService: "Service", "", "v1", "v1", "services");
