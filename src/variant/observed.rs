//! What the operator keeps of a generated Deployment: [`ObservedDeployment`].
//!
//! The controllers cache every Deployment they generated, and at scale that cache is most of
//! the operator's memory. The full `k8s-openapi` Deployment costs 8 to 9 KiB per object (every
//! optional field of the pod spec inline, a map node per level); what the operator reads of it
//! is the metadata that says whose it is, `spec.replicas`, four status counters, and, only
//! when a reconcile asks whether it must apply again (R5, R12), the annotations and the spec.
//! Those two are kept as one compact JSON text and parsed on that question only, so one
//! cached Deployment costs a small fraction of the typed struct, with nothing lost that the
//! comparison needs: a hand edit anywhere in the spec is still seen and put back. The
//! metadata is the compact [`Meta`]; the caches' store reads it through kube's `Lookup`,
//! without the uid and resourceVersion in its key. [`DeploymentWire`] is the same Deployment
//! as kube's API and watches decode it (a `kube::Resource`): the object, and the few fields
//! of `ObjectMeta` that kube itself reads (name, namespace, uid, resourceVersion,
//! ownerReferences).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde::{
    Deserialize, Deserializer,
    de::{IgnoredAny, SeqAccess, Visitor},
};
use serde_json::{Value, json};

use super::meta::{HasMeta, Meta, MetaView, Names, kube_type};
use super::owner::FIELD_MANAGER;
use crate::crd::{PackedJson, StrMap, compact::CompactText};

/// kubectl's copy of the whole object it last applied: never compared, never kept.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The counters of a Deployment's status that a variant's state is computed from (R11).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutCounts {
    /// `status.observedGeneration`.
    #[serde(default)]
    pub observed_generation: Option<i64>,
    /// `status.replicas`.
    #[serde(default)]
    pub replicas: Option<i32>,
    /// `status.updatedReplicas`.
    #[serde(default)]
    pub updated_replicas: Option<i32>,
    /// `status.readyReplicas`.
    #[serde(default)]
    pub ready_replicas: Option<i32>,
    /// Whether the Deployment controller gave up on its rollout: condition `Progressing` is
    /// False with reason `ProgressDeadlineExceeded` (R43).
    #[serde(default, rename = "conditions", deserialize_with = "stalled")]
    pub stalled: bool,
}

/// One of a Deployment's `status.conditions`, as much as [`stalled`] reads.
#[derive(Deserialize)]
struct WireCondition<'a> {
    #[serde(default, rename = "type", borrow)]
    type_: std::borrow::Cow<'a, str>,
    #[serde(default, borrow)]
    status: std::borrow::Cow<'a, str>,
    #[serde(default, borrow)]
    reason: std::borrow::Cow<'a, str>,
}

/// Whether `conditions` say the rollout passed its progress deadline.
fn stalled<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    let conditions: Option<Vec<WireCondition<'de>>> = Option::deserialize(d)?;
    Ok(conditions.unwrap_or_default().iter().any(|c| {
        c.type_ == "Progressing" && c.status == "False" && c.reason == "ProgressDeadlineExceeded"
    }))
}

/// The operator's `Update` entry in a Deployment's `metadata.managedFields`: the Deployment was
/// created with a POST (which records its fields under an `Update` entry), not applied.
/// Server-side apply removes only the fields its own `Apply` entry holds, so before the first
/// apply over such a Deployment the entry is made the `Apply` one ([`Self::handover_patch`]),
/// or dropped when an `Apply` entry exists beside it: a field no longer declared is then removed
/// like any other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CreatedEntry {
    /// Its position in `managedFields`.
    pub index: usize,
    /// Whether the operator also has an `Apply` entry.
    pub applied_too: bool,
}

impl CreatedEntry {
    /// The JSON patch (RFC 6902) that hands the entry over to server-side apply, guarded by the
    /// Deployment's `resourceVersion` and by the entry itself: a Deployment changed meanwhile
    /// makes the server refuse it (422) rather than edit the wrong entry.
    pub fn handover_patch(&self, resource_version: &str) -> Value {
        let entry = format!("/metadata/managedFields/{}", self.index);
        let change = if self.applied_too {
            json!({"op": "remove", "path": entry})
        } else {
            json!({"op": "replace", "path": format!("{entry}/operation"), "value": "Apply"})
        };
        json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": resource_version},
            {"op": "test", "path": format!("{entry}/manager"), "value": FIELD_MANAGER},
            {"op": "test", "path": format!("{entry}/operation"), "value": "Update"},
            change,
        ])
    }
}

/// A Deployment as the operator caches it. Decoded from the API server's JSON (watch events,
/// GET and apply responses) like any `apps/v1` Deployment, through [`kube::Resource`]:
///
/// - `metadata`: name, namespace, uid, resourceVersion, generation, labels and
///   ownerReferences, compact (annotations are in the compared text, kubectl's last-applied copy
///   is dropped, of `managedFields` only the operator's own `Update` entry is noted, the rest
///   is skipped unread);
/// - `spec.replicas` and the status counters, typed;
/// - the annotations and the whole spec as one compact JSON text, for [`Self::comparable`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ObservedDeployment {
    /// The object's metadata, without `managedFields` and annotations.
    pub metadata: Meta,
    /// `spec.replicas`, when set.
    pub replicas: Option<i32>,
    /// The status counters, when the Deployment controller has written a status.
    pub status: Option<RolloutCounts>,
    /// The operator's `Update` entry in `managedFields`, when it created the Deployment with
    /// a POST and has not applied over it since.
    pub created_entry: Option<CreatedEntry>,
    /// `{"annotations": {...}, "spec": {...}}` as compact JSON text, packed.
    compared: PackedJson,
}

impl ObservedDeployment {
    /// The Deployment as a JSON object of `apiVersion`, `kind`, `metadata` (annotations
    /// included) and `spec`: what [`super::needs_apply`] compares with the desired object.
    pub fn comparable(&self) -> Value {
        let mut rest: Value = serde_json::from_str(&self.compared.unpack()).unwrap_or(Value::Null);
        let mut metadata = self.metadata.to_json();
        if let Some(annotations) = rest.get_mut("annotations").map(Value::take)
            && !annotations.is_null()
        {
            metadata.insert("annotations".into(), annotations);
        }
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": metadata,
            "spec": rest.get_mut("spec").map(Value::take).unwrap_or(Value::Null),
        })
    }
}

/// The fields read off the wire; everything else (`managedFields`, ...) is skipped by the decoder
/// without being built first, and of `status.conditions` only whether the rollout stalled.
#[derive(Deserialize)]
struct Wire {
    #[serde(default)]
    metadata: WireMeta,
    /// Written out as compact text while it is read: no `Value` tree in between.
    #[serde(default)]
    spec: Option<CompactText>,
    #[serde(default)]
    status: Option<RolloutCounts>,
}

/// `spec.replicas`, read off the spec's text (everything else skipped unread).
#[derive(Deserialize)]
struct Replicas {
    #[serde(default)]
    replicas: Option<i32>,
}

/// The metadata kept (annotations only until they move into the compared text).
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireMeta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default)]
    generation: Option<i64>,
    #[serde(default)]
    labels: Option<StrMap>,
    #[serde(default)]
    annotations: Option<BTreeMap<String, String>>,
    #[serde(default)]
    owner_references: Option<Vec<OwnerReference>>,
    #[serde(default)]
    managed_fields: ManagedFields,
}

/// What `managedFields` says of the operator's entries; their field sets are skipped unread.
#[derive(Default)]
struct ManagedFields(Option<CreatedEntry>);

/// One entry of `managedFields`, as far as it is read.
#[derive(Deserialize)]
struct ManagedEntry {
    #[serde(default)]
    manager: Option<String>,
    #[serde(default)]
    operation: Option<String>,
    #[serde(default)]
    subresource: Option<IgnoredAny>,
}

impl<'de> Deserialize<'de> for ManagedFields {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Entries;
        impl<'de> Visitor<'de> for Entries {
            type Value = ManagedFields;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of managedFields entries, or null")
            }
            fn visit_unit<E>(self) -> Result<ManagedFields, E> {
                Ok(ManagedFields(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ManagedFields, A::Error> {
                let (mut created, mut applied) = (None, false);
                let mut index = 0;
                while let Some(entry) = seq.next_element::<ManagedEntry>()? {
                    if entry.manager.as_deref() == Some(FIELD_MANAGER)
                        && entry.subresource.is_none()
                    {
                        match entry.operation.as_deref() {
                            Some("Update") => created = created.or(Some(index)),
                            Some("Apply") => applied = true,
                            _ => {}
                        }
                    }
                    index += 1;
                }
                Ok(ManagedFields(created.map(|index| CreatedEntry {
                    index,
                    applied_too: applied,
                })))
            }
        }
        deserializer.deserialize_any(Entries)
    }
}

/// Decodes a Deployment: the compact object, and what kube reads of its metadata.
fn decode<'de, D: Deserializer<'de>>(deserializer: D) -> Result<DeploymentWire, D::Error> {
    let Wire {
        metadata: wire,
        spec,
        status,
    } = Wire::deserialize(deserializer)?;
    let annotations = wire.annotations.map(|mut annotations| {
        annotations.remove(LAST_APPLIED);
        annotations
    });
    let metadata = Meta {
        names: Names::new([
            wire.name.as_deref(),
            wire.namespace.as_deref(),
            wire.uid.as_deref(),
            wire.resource_version.as_deref(),
        ]),
        generation: wire.generation,
        labels: wire.labels,
        owner_references: wire
            .owner_references
            .as_ref()
            .map(|refs| refs.iter().map(Into::into).collect()),
    };
    let spec = spec.map_or_else(|| "null".to_string(), |CompactText(text)| text);
    let replicas = serde_json::from_str::<Replicas>(&spec)
        .ok()
        .and_then(|r| r.replicas);
    let annotations = serde_json::to_string(&annotations).unwrap_or_else(|_| "null".into());
    let mut compared = String::with_capacity(spec.len() + annotations.len() + 26);
    compared.push_str("{\"annotations\":");
    compared.push_str(&annotations);
    compared.push_str(",\"spec\":");
    compared.push_str(&spec);
    compared.push('}');
    Ok(DeploymentWire {
        metadata: ObjectMeta {
            name: wire.name,
            namespace: wire.namespace,
            uid: wire.uid,
            resource_version: wire.resource_version,
            owner_references: wire.owner_references,
            ..ObjectMeta::default()
        },
        observed: ObservedDeployment {
            metadata,
            replicas,
            status,
            created_entry: wire.managed_fields.0,
            compared: PackedJson::pack(&compared),
        },
    })
}

impl<'de> Deserialize<'de> for ObservedDeployment {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        decode(deserializer).map(DeploymentWire::into_observed)
    }
}

/// A Deployment as kube's API calls and watches decode it: the [`ObservedDeployment`], and the
/// fields of `ObjectMeta` kube reads (name, namespace, uid, the resourceVersion a watch resumes
/// from, ownerReferences to find the owner to reconcile). What the caches store and the
/// controllers read is the `ObservedDeployment`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeploymentWire {
    /// Name, namespace and ownerReferences.
    pub metadata: ObjectMeta,
    /// The Deployment.
    pub observed: ObservedDeployment,
}

impl DeploymentWire {
    /// The Deployment, without kube's copy of its metadata.
    pub fn into_observed(self) -> ObservedDeployment {
        self.observed
    }

    /// Parts the Deployment (to keep) from kube's copy of its metadata (to pass on).
    pub fn split(mut self) -> (ObservedDeployment, DeploymentWire) {
        (std::mem::take(&mut self.observed), self)
    }
}

impl<'de> Deserialize<'de> for DeploymentWire {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        decode(deserializer)
    }
}

impl HasMeta for ObservedDeployment {
    fn meta_view(&self) -> &dyn MetaView {
        &self.metadata
    }
}

kube_type!(lookup ObservedDeployment: "Deployment", "apps", "v1", "apps/v1", "deployments");

kube_type!(resource DeploymentWire: "Deployment", "apps", "v1", "apps/v1", "deployments");

#[cfg(test)]
mod tests {
    use kube::runtime::reflector::Lookup;
    use serde_json::json;

    use super::*;

    // What kube reads off a decoded Deployment (a watch resumes from each event's
    // resourceVersion; the owner to reconcile is found by its ownerReferences), and what the
    // cache keeps of it.
    #[test]
    fn the_wire_form_has_what_kube_reads() {
        let served = json!({
            "metadata": {"name": "web-a", "namespace": "team", "uid": "d-1",
                "resourceVersion": "77", "generation": 2, "labels": {"k": "v"},
                "ownerReferences": [{"apiVersion": "neiam.org/v1", "kind": "Mutation",
                    "name": "web", "uid": "u-web", "controller": true}]},
            "spec": {"replicas": 2}
        });
        let wire: DeploymentWire = serde_json::from_value(served).unwrap_or_default();
        let meta = &wire.metadata;
        assert_eq!(meta.resource_version.as_deref(), Some("77"));
        assert_eq!(
            (meta.name.as_deref(), meta.uid.as_deref()),
            (Some("web-a"), Some("d-1"))
        );
        assert_eq!(meta.owner_references.as_ref().map(Vec::len), Some(1));
        let (kept, passed) = wire.split();
        assert_eq!(passed.observed, ObservedDeployment::default());
        assert_eq!(kept.metadata.resource_version(), Some("77"));
        assert_eq!(kept.metadata.label("k"), Some("v"));
        assert_eq!(
            (kept.replicas, kept.metadata.generation),
            (Some(2), Some(2))
        );
        assert_eq!(Lookup::name(&kept).as_deref(), Some("web-a"));
        assert_eq!(Lookup::uid(&kept), None, "not in the store's key");
    }
}
