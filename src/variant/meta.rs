//! An object's metadata as the operator reads it ([`MetaView`]), whether the whole
//! `ObjectMeta` of an object just read from the API server or the compact [`Meta`] the caches
//! keep of each generated Deployment.
//!
//! `ObjectMeta` is about 400 bytes of mostly empty fields before anything is allocated, and
//! its labels are a `BTreeMap` (a node with room for eleven entries) and its ownerReferences
//! four strings each. [`Meta`] keeps what the operator reads (name, namespace, uid,
//! resourceVersion, generation, the labels, the ownerReferences), each packed, and writes it
//! back as the same JSON for the comparison with the desired object.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::{Map, Value};

use crate::crd::StrMap;

/// A controller ownerReference, as far as ownership is decided by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControllerRef<'a> {
    /// Its kind.
    pub kind: &'a str,
    /// Its name.
    pub name: &'a str,
    /// Its uid.
    pub uid: &'a str,
}

/// What the operator reads of an object's metadata.
pub trait MetaView: Sync {
    /// `metadata.name`.
    fn name(&self) -> Option<&str>;
    /// `metadata.namespace`.
    fn namespace(&self) -> Option<&str>;
    /// `metadata.uid`.
    fn uid(&self) -> Option<&str>;
    /// `metadata.resourceVersion`.
    fn resource_version(&self) -> Option<&str>;
    /// The value of label `key`.
    fn label(&self, key: &str) -> Option<&str>;
    /// The ownerReference with `controller: true`, if any.
    fn controller(&self) -> Option<ControllerRef<'_>>;
}

/// The accessors of [`MetaView`] that read an optional text field of the same name.
macro_rules! optional_fields {
    ($($field:ident),+) => {
        $(
            fn $field(&self) -> Option<&str> {
                self.$field.as_deref()
            }
        )+
    };
}

impl MetaView for ObjectMeta {
    optional_fields!(name, namespace, uid, resource_version);
    fn label(&self, key: &str) -> Option<&str> {
        self.labels.as_ref()?.get(key).map(String::as_str)
    }
    fn controller(&self) -> Option<ControllerRef<'_>> {
        self.owner_references
            .iter()
            .flatten()
            .find(|r| r.controller == Some(true))
            .map(|r| ControllerRef {
                kind: &r.kind,
                name: &r.name,
                uid: &r.uid,
            })
    }
}

/// An object whose metadata the operator reads: a cached Deployment or Service.
pub trait HasMeta {
    /// Its metadata.
    fn meta_view(&self) -> &dyn MetaView;
}

/// One ownerReference, its four strings in one text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerRef {
    /// apiVersion, kind, name and uid, in this order, back to back.
    text: Box<str>,
    /// Where kind, name and uid begin in `text`.
    starts: [u32; 3],
    controller: Option<bool>,
    block_owner_deletion: Option<bool>,
}

impl OwnerRef {
    /// What [`MetaView::controller`] tells of this reference.
    fn reference(&self) -> ControllerRef<'_> {
        ControllerRef {
            kind: self.part(1),
            name: self.part(2),
            uid: self.part(3),
        }
    }

    fn part(&self, i: usize) -> &str {
        let start = match i {
            0 => 0,
            _ => self.starts.get(i - 1).map_or(0, |&s| s as usize),
        };
        let end = self.starts.get(i).map_or(self.text.len(), |&s| s as usize);
        self.text.get(start..end).unwrap_or_default()
    }

    /// The ownerReference's JSON, as the API server writes it.
    fn to_json(&self) -> Value {
        let mut r = Map::new();
        r.insert("apiVersion".into(), self.part(0).into());
        r.insert("kind".into(), self.part(1).into());
        r.insert("name".into(), self.part(2).into());
        r.insert("uid".into(), self.part(3).into());
        if let Some(c) = self.controller {
            r.insert("controller".into(), c.into());
        }
        if let Some(b) = self.block_owner_deletion {
            r.insert("blockOwnerDeletion".into(), b.into());
        }
        Value::Object(r)
    }
}

impl From<&OwnerReference> for OwnerRef {
    fn from(r: &OwnerReference) -> Self {
        let mut text =
            String::with_capacity(r.api_version.len() + r.kind.len() + r.name.len() + r.uid.len());
        let mut starts = [0; 3];
        for (start, part) in starts.iter_mut().zip([&r.api_version, &r.kind, &r.name]) {
            text.push_str(part);
            *start = u32::try_from(text.len()).unwrap_or(u32::MAX);
        }
        text.push_str(&r.uid);
        OwnerRef {
            text: text.into_boxed_str(),
            starts,
            controller: r.controller,
            block_owner_deletion: r.block_owner_deletion,
        }
    }
}

/// The metadata the caches keep of a generated object (see the module's documentation).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    /// `metadata.name`, `namespace`, `uid` and `resourceVersion`, in one allocation.
    pub names: Names,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// `metadata.labels`; `None` when the object has none.
    pub labels: Option<StrMap>,
    /// `metadata.ownerReferences`; `None` when the object has none.
    pub owner_references: Option<Box<[OwnerRef]>>,
}

/// An object's name, namespace, uid and resourceVersion as one text: at 1000 x 5 the four as
/// separate strings were 20,000 allocations of a few bytes each, every one a 32-byte chunk of
/// the allocator's (plus 48 bytes of pointers) for texts of 6 to 36 bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Names {
    text: Box<str>,
    /// Where each of the four ends in `text`.
    ends: [u32; 4],
    /// Which of the four the object has (bit `i` for field `i`).
    present: u8,
}

impl Names {
    /// The four fields, in the order name, namespace, uid, resourceVersion.
    pub fn new(fields: [Option<&str>; 4]) -> Names {
        let len = fields.iter().flatten().map(|f| f.len()).sum();
        let mut text = String::with_capacity(len);
        let (mut ends, mut present) = ([0; 4], 0);
        for (i, field) in fields.iter().enumerate() {
            if let Some(f) = field {
                text.push_str(f);
                present |= 1 << i;
            }
            // Offsets fit: metadata texts are bounded far below 4 GiB by the API server.
            ends[i] = u32::try_from(text.len()).unwrap_or(u32::MAX);
        }
        Names {
            text: text.into_boxed_str(),
            ends,
            present,
        }
    }

    fn field(&self, i: usize) -> Option<&str> {
        if self.present & (1 << i) == 0 {
            return None;
        }
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        self.text.get(start..self.ends[i] as usize)
    }
}

impl Meta {
    /// The fields kept of `meta`.
    pub fn of(meta: &ObjectMeta) -> Meta {
        Meta {
            names: Names::new([
                meta.name.as_deref(),
                meta.namespace.as_deref(),
                meta.uid.as_deref(),
                meta.resource_version.as_deref(),
            ]),
            generation: meta.generation,
            labels: meta.labels.as_ref().map(StrMap::from),
            owner_references: meta
                .owner_references
                .as_ref()
                .map(|refs| refs.iter().map(OwnerRef::from).collect()),
        }
    }

    /// The metadata as a JSON object, as the API server writes what is kept of it.
    pub fn to_json(&self) -> Map<String, Value> {
        let mut m = Map::new();
        let mut text = |key: &str, value: Option<&str>| {
            if let Some(v) = value {
                m.insert(key.into(), Value::from(v));
            }
        };
        text("name", self.name());
        text("namespace", self.namespace());
        text("uid", self.uid());
        text("resourceVersion", self.resource_version());
        if let Some(g) = self.generation {
            m.insert("generation".into(), g.into());
        }
        if let Some(labels) = &self.labels {
            let labels = labels.iter().map(|(k, v)| (k.into(), v.into())).collect();
            m.insert("labels".into(), Value::Object(labels));
        }
        if let Some(refs) = &self.owner_references {
            let refs = refs.iter().map(OwnerRef::to_json).collect();
            m.insert("ownerReferences".into(), Value::Array(refs));
        }
        m
    }
}

impl MetaView for Meta {
    fn name(&self) -> Option<&str> {
        self.names.field(0)
    }
    fn namespace(&self) -> Option<&str> {
        self.names.field(1)
    }
    fn uid(&self) -> Option<&str> {
        self.names.field(2)
    }
    fn resource_version(&self) -> Option<&str> {
        self.names.field(3)
    }
    fn label(&self, key: &str) -> Option<&str> {
        self.labels.as_ref()?.get(key)
    }
    fn controller(&self) -> Option<ControllerRef<'_>> {
        let references = self.owner_references.as_deref()?;
        references
            .iter()
            .find(|r| r.controller == Some(true))
            .map(OwnerRef::reference)
    }
}

/// Implements kube's type description for a type the caches hold: `Lookup` (how the store
/// finds it: by name and namespace, the uid and resourceVersion kept once, in the object, not
/// again in its key) or `Resource` (what a watch decodes, with kube's `ObjectMeta` at
/// `metadata`). `MetaView` must be in scope where a `lookup` is declared.
macro_rules! kube_type {
    (@names $kind:literal, $group:literal, $version:literal, $api_version:literal, $plural:literal) => {
        fn kind(_: &()) -> std::borrow::Cow<'_, str> {
            std::borrow::Cow::Borrowed($kind)
        }
        fn group(_: &()) -> std::borrow::Cow<'_, str> {
            std::borrow::Cow::Borrowed($group)
        }
        fn version(_: &()) -> std::borrow::Cow<'_, str> {
            std::borrow::Cow::Borrowed($version)
        }
        fn api_version(_: &()) -> std::borrow::Cow<'_, str> {
            std::borrow::Cow::Borrowed($api_version)
        }
        fn plural(_: &()) -> std::borrow::Cow<'_, str> {
            std::borrow::Cow::Borrowed($plural)
        }
    };
    (lookup $ty:ty: $($names:literal),+) => {
        impl kube::runtime::reflector::Lookup for $ty {
            type DynamicType = ();
            kube_type!(@names $($names),+);
            fn name(&self) -> Option<std::borrow::Cow<'_, str>> {
                self.metadata.name().map(std::borrow::Cow::Borrowed)
            }
            fn namespace(&self) -> Option<std::borrow::Cow<'_, str>> {
                self.metadata.namespace().map(std::borrow::Cow::Borrowed)
            }
            fn resource_version(&self) -> Option<std::borrow::Cow<'_, str>> {
                None
            }
            fn uid(&self) -> Option<std::borrow::Cow<'_, str>> {
                None
            }
        }
    };
    (resource $ty:ty: $($names:literal),+) => {
        impl kube::Resource for $ty {
            type DynamicType = ();
            type Scope = k8s_openapi::NamespaceResourceScope;
            kube_type!(@names $($names),+);
            fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }
            fn meta_mut(
                &mut self,
            ) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }
    };
}
pub(super) use kube_type;

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    // R6, R9, R12: the compact metadata answers as the whole one does, and writes out the same
    #[test]
    fn compact_metadata_reads_as_the_whole() {
        let full: ObjectMeta = serde_json::from_value(json!({
            "name": "web-a", "namespace": "team", "uid": "u-1", "resourceVersion": "42",
            "generation": 3, "labels": {"b": "2", "a": "1"},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "u-x"},
                {"apiVersion": "neiam.org/v1", "kind": "Mutation", "name": "web",
                 "uid": "u-web", "controller": true, "blockOwnerDeletion": true}
            ]
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let compact = Meta::of(&full);
        let views: [&dyn MetaView; 2] = [&full, &compact];
        for m in views {
            assert_eq!(m.name(), Some("web-a"));
            assert_eq!(m.namespace(), Some("team"));
            assert_eq!(m.uid(), Some("u-1"));
            assert_eq!(m.resource_version(), Some("42"));
            assert_eq!((m.label("a"), m.label("c")), (Some("1"), None));
            let expected = ControllerRef {
                kind: "Mutation",
                name: "web",
                uid: "u-web",
            };
            assert_eq!(m.controller(), Some(expected));
        }
        let mut written = serde_json::to_value(&full).unwrap_or_default();
        assert_eq!(Value::Object(compact.to_json()), written);
        written["ownerReferences"] = json!(null);
        let none: ObjectMeta = serde_json::from_value(written).unwrap_or_default();
        assert_eq!(Meta::of(&none).controller(), None);
        assert_eq!(Meta::default().to_json(), Map::new());
    }

    // R6, R9, R12: an absent field stays absent beside an empty one, and each reads back as it was
    #[test]
    fn names_keep_each_field_apart() {
        let names = Names::new([Some("web-a"), None, Some(""), Some("42")]);
        let got: Vec<_> = (0..4).map(|i| names.field(i)).collect();
        assert_eq!(got, [Some("web-a"), None, Some(""), Some("42")]);
        assert_eq!(Names::default().field(0), None);
    }
}
