//! The owner of generated objects, the labels and annotations that mark them as the
//! operator's, and the checks of whose an object is (R4, R6, R9).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::meta::MetaView;

use crate::crd::OwnerKind;

/// Label on every generated Deployment, its selector and its pods: the owner's name.
pub const OWNER_LABEL: &str = "mutantops.neiam.org/owner";

/// Label on every generated Deployment, its selector and its pods: the variant's label.
pub const VARIANT_LABEL: &str = "mutantops.neiam.org/variant";

/// Label on every generated Deployment, its selector and its pods: the owner's kind,
/// `mutantdeployment` or `mutation`, so that a MutantDeployment and a Mutation of the same name
/// never select (or prune) each other's objects.
pub const KIND_LABEL: &str = "mutantops.neiam.org/kind";

/// Annotation on every generated Deployment: a hash of the desired object, so that any change
/// of the desired state (including a removed field) is visible by comparing with what is
/// observed. See [`needs_apply`](super::build::needs_apply).
pub const HASH_ANNOTATION: &str = "mutantops.neiam.org/desired-hash";

/// The server-side apply field manager of every write the operator makes (R5).
pub const FIELD_MANAGER: &str = "mutantops-operator";

/// Type of the condition reported by [`ready_condition`](super::status::ready_condition).
pub const READY_CONDITION: &str = "Ready";

/// Longest Deployment name a variant may get (R8): a DNS-1123 label.
pub const MAX_DEPLOYMENT_NAME: usize = 63;

/// The object that owns generated Deployments: enough of it to label, reference and recognise
/// them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// MutantDeployment or Mutation.
    pub kind: OwnerKind,
    /// metadata.name.
    pub name: String,
    /// metadata.namespace; generated Deployments live here.
    pub namespace: String,
    /// metadata.uid; the controller ownerReference points at it.
    pub uid: String,
}

impl Owner {
    /// Takes name, namespace and uid from an object read from the API server. Fails, naming
    /// what is missing, for an object that was never stored (no uid) or is not namespaced.
    pub fn from_resource<K: kube::Resource>(kind: OwnerKind, obj: &K) -> crate::Result<Owner> {
        let meta = obj.meta();
        let name = meta.name.clone().ok_or(crate::Error::MissingField {
            object: kind.kind().to_string(),
            field: "name",
        })?;
        let missing = |field| crate::Error::MissingField {
            object: format!("{} {name:?}", kind.kind()),
            field,
        };
        let namespace = meta.namespace.clone().ok_or_else(|| missing("namespace"))?;
        let uid = meta.uid.clone().ok_or_else(|| missing("uid"))?;
        Ok(Owner {
            kind,
            name,
            namespace,
            uid,
        })
    }

    /// [`Owner::owner_reference`] as the JSON list a generated object's metadata holds.
    pub fn owner_references_json(&self) -> serde_json::Value {
        let r = self.owner_reference();
        serde_json::json!([{
            "apiVersion": r.api_version,
            "kind": r.kind,
            "name": r.name,
            "uid": r.uid,
            "controller": true,
            "blockOwnerDeletion": true,
        }])
    }

    /// The controller ownerReference every generated Deployment carries, so that deleting the
    /// owner deletes it through garbage collection (R4, R7).
    pub fn owner_reference(&self) -> OwnerReference {
        OwnerReference {
            api_version: self.kind.api_version().to_owned(),
            kind: self.kind.kind().to_owned(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }

    /// The metadata of a Secret the operator keeps for this owner (its token's, its devices'):
    /// labelled so the operator watches only its own Secrets, controlled by the owner so
    /// garbage collection deletes it with it.
    pub fn owned_metadata(&self, name: &str) -> ObjectMeta {
        let labels = std::collections::BTreeMap::from([
            (OWNER_LABEL.to_string(), self.name.clone()),
            (KIND_LABEL.to_string(), self.kind.label_value().to_string()),
            (
                "app.kubernetes.io/managed-by".to_string(),
                "mutantops".to_string(),
            ),
        ]);
        ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(self.namespace.clone()),
            labels: Some(labels),
            owner_references: Some(vec![self.owner_reference()]),
            ..ObjectMeta::default()
        }
    }

    /// The three mutantops labels of one variant's Deployment, selector and pods.
    pub(super) fn labels<'a>(&'a self, label: &'a str) -> [(&'static str, &'a str); 3] {
        [
            (OWNER_LABEL, self.name.as_str()),
            (VARIANT_LABEL, label),
            (KIND_LABEL, self.kind.label_value()),
        ]
    }
}

/// The uid of the controller ownerReference (`controller: true`) of an object, if any.
pub fn controller_uid(meta: &(impl MetaView + ?Sized)) -> Option<&str> {
    meta.controller().map(|r| r.uid)
}

/// Whether the object's controller ownerReference points at `owner_uid` (R9).
pub fn is_controlled_by(meta: &(impl MetaView + ?Sized), owner_uid: &str) -> bool {
    controller_uid(meta) == Some(owner_uid)
}

/// Whether a Deployment may be deleted by prune on behalf of `owner` (R6): it carries this
/// owner's name and kind labels AND its controller ownerReference has this owner's uid. A
/// Deployment that merely carries the labels, or belongs to a same-named owner of the other
/// kind, is never touched. (The caller still skips names of declared variants.)
pub fn may_prune(meta: &(impl MetaView + ?Sized), owner: &Owner) -> bool {
    meta.label(OWNER_LABEL) == Some(owner.name.as_str())
        && meta.label(KIND_LABEL) == Some(owner.kind.label_value())
        && is_controlled_by(meta, &owner.uid)
}

/// Whose a Deployment is that has the name of one of `owner`'s variants, when it is not
/// `owner`'s (R9).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Foreign {
    /// Whose it is, as the end of a sentence: "has no controller", "is controlled by ...".
    pub by: String,
    /// It is controlled by an earlier owner of the same kind and name (deleted and made
    /// again): the garbage collector removes it soon, and the variant is applied then.
    pub passing: bool,
}

/// Whether the Deployment of `meta` belongs to someone other than `owner` (its controller
/// ownerReference has another uid, or there is none), and whose (R9). `None`: it is `owner`'s.
pub fn foreign(meta: &(impl MetaView + ?Sized), owner: &Owner) -> Option<Foreign> {
    if is_controlled_by(meta, &owner.uid) {
        return None;
    }
    Some(match meta.controller() {
        None => Foreign {
            by: "has no controller".to_owned(),
            passing: false,
        },
        // Deleted and created again: the old one's Deployments await the garbage collector,
        // after which this variant is applied.
        Some(r) if r.kind == owner.kind.kind() && r.name == owner.name => Foreign {
            by: format!(
                "is controlled by an earlier {} {:?} (uid {}), until the garbage collector \
                 removes it",
                r.kind, r.name, r.uid
            ),
            passing: true,
        },
        Some(r) => Foreign {
            by: format!("is controlled by {} {:?}", r.kind, r.name),
            passing: false,
        },
    })
}

/// R9: the message of a variant whose `kind` `name` exists (`meta`) and is not `owner`'s
/// ([`foreign`]); `None` when there is none, or it is `owner`'s.
pub fn left_alone(
    kind: &str,
    name: &str,
    meta: Option<&dyn MetaView>,
    owner: &Owner,
) -> Option<String> {
    let by = foreign(meta?, owner)?.by;
    Some(format!(
        "{kind} {name:?} already exists and {by}; it is left alone"
    ))
}
