//! The store (R52): the one writer of a Mutation and of its Secrets, below both the HTTP API
//! and the controllers, which hand it edits and await each edit's own outcome. It alone writes
//! a Mutation's `spec.variants`, its `status.devices` and `status.deviceSummary`, its
//! controller status, its rollout annotations, its creation and deletion, its token Secret and
//! its devices Secret; nothing above it calls the API server's write methods for them. So each
//! invariant is held once, on every path:
//!
//! - one batching engine ([`batch`]): the edits of one object that arrive together are written
//!   together, whoever sent them (a request, a heartbeat, the controller's expiry);
//! - one retry policy on a resourceVersion conflict, bounded by [`batch::MAX_ATTEMPTS`];
//! - the field managers as constants ([`API_MANAGER`], [`DEVICES_MANAGER`],
//!   [`OPERATOR_MANAGER`]);
//! - a Mutation's size ([`size::MAX_MUTATION_BYTES`]), checked after every edit and before every
//!   create: an edit that would grow it past the bound is refused (413), naming it.
//!
//! The rooms, lowest first: `budget` (each object's writes), `batch` (the engine), `size` (a
//! Mutation's size bound), `targets` (what it edits, and its bounds).

use std::{sync::Arc, time::Duration};

use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Client,
    api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions},
};
use serde_json::json;

use crate::{
    cache::Caches,
    crd::{DeviceStatus, Mutation, OwnerResource, OwnerStatus, Variant},
    http::{ApiError, overdue},
    variant::{self, Owner, devices::Registry},
};

mod batch;
mod budget;
mod size;
mod targets;

use batch::Batches;
use batch::Target;
pub use targets::{API_MANAGER, DEVICES_MANAGER, Devices};
use targets::{DevicesSecret, Listed, OfMutation, Variants};

/// 64 lower-case hex characters from 32 bytes of the OS random source.
pub fn new_token() -> crate::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(crate::Error::Random)?;
    Ok(bytes.iter().fold(String::with_capacity(64), |mut out, b| {
        out.push(char::from_digit(u32::from(b >> 4), 16).unwrap_or('0'));
        out.push(char::from_digit(u32::from(b & 0xf), 16).unwrap_or('0'));
        out
    }))
}

/// The field manager of the controller's writes (its status, the variants and devices its
/// expiry removes).
pub const OPERATOR_MANAGER: &str = variant::FIELD_MANAGER;

/// How long a heartbeat's edit of a device list waits for others to be written with (R40),
/// unless it refreshes a last-seen time alone (`Policy::refresh_gather`, longer): the
/// devices' polls of one Mutation cost one write a second at most, however many there are,
/// where each write carries the whole list. A heartbeat records when the device was heard, not
/// when it was written, so the wait changes nothing it says.
pub const HEARTBEAT_GATHER: Duration = Duration::from_secs(1);

/// How long one call of the controller's edits may take (a request's edits are bounded by
/// the request's own deadline instead).
pub const CONTROLLER_CALL_LIMIT: Duration = Duration::from_secs(10);

/// The one writer of Mutations and their Secrets: the client and the batches of each kind of
/// edit. Cheap to clone; every clone shares the batches.
#[derive(Clone)]
pub struct Store {
    client: Client,
    /// The caches the Mutations' edits start from (see [`Store::reading`]).
    caches: Option<Caches>,
    variants: Batches<Variants>,
    registries: Batches<DevicesSecret>,
    lists: Batches<Listed>,
}

impl Store {
    /// A store writing through `client`, with no edit waiting.
    pub fn new(client: Client) -> Self {
        Store {
            client,
            caches: None,
            variants: Batches::default(),
            registries: Batches::default(),
            lists: Batches::default(),
        }
    }

    /// The store, its edits of a Mutation starting from `caches`' copy instead of a read of
    /// the API server: each write is guarded by the resourceVersion it started from, so a
    /// copy the cache has not brought up to date costs a conflict and a read, never an edit;
    /// in a steady state it saves a GET of the whole Mutation (its device list included) per
    /// write.
    pub fn reading(self, caches: &Caches) -> Self {
        Store {
            caches: Some(caches.clone()),
            ..self
        }
    }

    /// The client it writes through (for the reads and the other writes of its users).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Edits Mutation `ns/name`'s `spec.variants` under field manager `manager`, together with
    /// the other edits of them waiting: `change` computes the new list from the Mutation as
    /// read from the API server and as the edits before it left it (or refuses), and the list
    /// is written on the resourceVersion it was read at. Answers the Mutation as written (as
    /// read, when nothing changed). Each call to the API server is bounded by `limit`.
    pub async fn edit_variants<F>(
        &self,
        ns: &str,
        name: &str,
        manager: &'static str,
        limit: Duration,
        change: F,
    ) -> Result<Arc<Mutation>, ApiError>
    where
        F: Fn(&Mutation) -> Result<Vec<Variant>, ApiError> + Send + Sync + 'static,
    {
        let target = Variants(self.mutation(ns, name, manager));
        self.variants.edit(target, limit, Box::new(change)).await
    }

    /// Mutation `ns/name` as a target of edits under field manager `manager`, known from the
    /// caches when the store reads them.
    fn mutation(&self, ns: &str, name: &str, manager: &'static str) -> OfMutation {
        OfMutation::new(&self.client, ns, name, manager, self.caches.as_ref())
    }

    /// [`Store::edit_devices`] for a heartbeat, which nobody waits on: it is written with the
    /// other edits of the Mutation's device list that come within `gather` (at least
    /// [`HEARTBEAT_GATHER`]), or sooner with one that may wait less.
    pub async fn note_devices<F>(
        &self,
        (ns, name): (&str, &str),
        limit: Duration,
        gather: Duration,
        change: F,
    ) -> Result<Arc<Mutation>, ApiError>
    where
        F: Fn(&Mutation) -> Result<Vec<DeviceStatus>, ApiError> + Send + Sync + 'static,
    {
        let target = Listed(self.mutation(ns, name, DEVICES_MANAGER));
        let change = Box::new(change);
        self.lists
            .edit_gathered(target, limit, change, gather.max(HEARTBEAT_GATHER))
            .await
    }

    /// Edits Mutation `ns/name`'s device list (`status.devices`, kept in id order, and its
    /// summary) as [`Store::edit_variants`] edits its variants.
    pub async fn edit_devices<F>(
        &self,
        ns: &str,
        name: &str,
        limit: Duration,
        change: F,
    ) -> Result<Arc<Mutation>, ApiError>
    where
        F: Fn(&Mutation) -> Result<Vec<DeviceStatus>, ApiError> + Send + Sync + 'static,
    {
        let target = Listed(self.mutation(ns, name, DEVICES_MANAGER));
        self.lists.edit(target, limit, Box::new(change)).await
    }

    /// Edits the devices Secret of `owner` (created when missing) as [`Store::edit_variants`]
    /// edits variants: `change` edits the registry in place, or refuses; an edit that would
    /// hold more than `max_devices` devices is refused (403). A Secret of that name the
    /// Mutation does not control is refused (409), never read further.
    pub async fn edit_registry<F>(
        &self,
        owner: &Owner,
        max_devices: usize,
        limit: Duration,
        change: F,
    ) -> Result<Arc<Devices>, ApiError>
    where
        F: Fn(&mut Registry) -> Result<(), ApiError> + Send + Sync + 'static,
    {
        let target = DevicesSecret::new(&self.client, owner, max_devices);
        let change = move |d: &Devices| {
            let mut registry = d.registry.clone();
            change(&mut registry)?;
            Ok(registry)
        };
        self.registries.edit(target, limit, Box::new(change)).await
    }

    /// The devices Secret of `owner` as the API server has it now, and its registry (empty
    /// when there is none); 409 for a Secret of that name the Mutation does not control.
    pub async fn read_registry(&self, owner: &Owner) -> Result<Registry, ApiError> {
        Ok(DevicesSecret::new(&self.client, owner, usize::MAX)
            .read()
            .await?
            .registry)
    }

    /// Creates Mutation `m` under [`API_MANAGER`], refused (413) over [`size::MAX_MUTATION_BYTES`]
    /// and (409) when the name is taken.
    pub async fn create_mutation(&self, m: &Mutation) -> Result<Mutation, ApiError> {
        let ns = m.metadata.namespace.as_deref().unwrap_or_default();
        let name = m.metadata.name.as_deref().unwrap_or_default();
        size::mutation_within(&format!("mutation {ns}/{name}"), m, 0)?;
        let api: Api<Mutation> = Api::namespaced(self.client.clone(), ns);
        let params = PostParams {
            field_manager: Some(API_MANAGER.into()),
            ..PostParams::default()
        };
        match overdue::write(api.create(&params, m)).await {
            Ok(created) => Ok(created),
            Err(err) if crate::conflict(&err) => Err(ApiError::conflict(format!(
                "mutation {ns}/{name} already exists"
            ))),
            Err(err) => Err(err.into()),
        }
    }

    /// Deletes Mutation `ns/name` in the background, on the condition that it is still the
    /// object of `uid` (not a new one of that name).
    pub async fn delete_mutation(
        &self,
        ns: &str,
        name: &str,
        uid: Option<String>,
    ) -> Result<(), ApiError> {
        let api: Api<Mutation> = Api::namespaced(self.client.clone(), ns);
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid,
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        match overdue::write(api.delete(name, &params)).await {
            Ok(_) => Ok(()),
            Err(err) if crate::not_found(&err) => Err(ApiError::not_found(format!(
                "mutation {ns}/{name} not found"
            ))),
            // The uid precondition failed (a new Mutation of that name): the server's message
            // names both uids.
            Err(kube::Error::Api(status)) if crate::status_is(&status, 409, None) => {
                Err(ApiError::conflict(format!(
                    "mutation {ns}/{name} changed meanwhile: {}",
                    status.message
                )))
            }
            Err(err) => Err(err.into()),
        }
    }

    /// Writes `annotations` (each a value, or null to remove it) on Mutation `ns/name` under
    /// [`API_MANAGER`]: a merge patch of the annotations alone, not on a resourceVersion (the
    /// operator's status writes move it on every few seconds during a rollout).
    pub async fn annotate(
        &self,
        ns: &str,
        name: &str,
        annotations: serde_json::Value,
    ) -> Result<(), ApiError> {
        let api: Api<Mutation> = Api::namespaced(self.client.clone(), ns);
        let patch = json!({"metadata": { "annotations": annotations }});
        let params = PatchParams {
            field_manager: Some(API_MANAGER.into()),
            ..PatchParams::default()
        };
        match overdue::write(api.patch(name, &params, &Patch::Merge(&patch))).await {
            Ok(_) => Ok(()),
            Err(err) if crate::conflict(&err) => Err(ApiError::conflict(format!(
                "mutation {ns}/{name} changed meanwhile; read its status.rollout and try again"
            ))),
            Err(err) => Err(err.into()),
        }
    }

    /// Creates `secret` (a Mutation's token Secret) under [`OPERATOR_MANAGER`]: the API
    /// server's answer as it is, so the caller tells a taken name (409) from a failure.
    pub async fn create_secret(&self, secret: &Secret) -> kube::Result<Secret> {
        let ns = secret.metadata.namespace.as_deref().unwrap_or_default();
        let api: Api<Secret> = Api::namespaced(self.client.clone(), ns);
        let params = PostParams {
            field_manager: Some(OPERATOR_MANAGER.into()),
            ..PostParams::default()
        };
        api.create(&params, secret).await
    }

    /// Writes the screen of variant `label` of Mutation `owner` (R53) into its Secret
    /// ([`variant::screen::screen_secret_name`]): created when missing, else replaced with the
    /// resourceVersion read, only while the Mutation controls it. A Secret of that name the
    /// Mutation does not control is left alone: `Ok(false)`.
    pub async fn put_screen(
        &self,
        owner: &Owner,
        label: &str,
        screen: &variant::screen::Screen,
    ) -> crate::Result<bool> {
        use variant::screen::{ETAG_ANNOTATION, SCREEN_KEY, TYPE_ANNOTATION, screen_secret_name};
        let name = screen_secret_name(&owner.name, label);
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &owner.namespace);
        let mut metadata = owner.owned_metadata(&name);
        if let Some(labels) = metadata.labels.as_mut() {
            labels.insert(variant::VARIANT_LABEL.to_string(), label.to_string());
        }
        metadata.annotations = Some(std::collections::BTreeMap::from([
            (ETAG_ANNOTATION.to_string(), screen.etag.clone()),
            (TYPE_ANNOTATION.to_string(), screen.content_type.clone()),
        ]));
        let mut secret = Secret {
            metadata,
            type_: Some("Opaque".to_string()),
            data: Some(std::collections::BTreeMap::from([(
                SCREEN_KEY.to_string(),
                k8s_openapi::ByteString(screen.bytes.to_vec()),
            )])),
            ..Secret::default()
        };
        let params = PostParams {
            field_manager: Some(OPERATOR_MANAGER.into()),
            ..PostParams::default()
        };
        // Two rounds at most: one Secret changed between the read and the replace is read
        // again once; past that the next refresh writes it.
        for _ in 0..2 {
            let Some(existing) = api.get_metadata_opt(&name).await? else {
                match api.create(&params, &secret).await {
                    Ok(_) => return Ok(true),
                    Err(err) if crate::already_exists(&err) => continue,
                    Err(err) => return Err(err.into()),
                }
            };
            if !variant::is_controlled_by(&existing.metadata, &owner.uid) {
                return Ok(false);
            }
            secret.metadata.uid = existing.metadata.uid;
            secret.metadata.resource_version = existing.metadata.resource_version;
            match api.replace(&name, &params, &secret).await {
                Ok(_) => return Ok(true),
                Err(err) if crate::conflict(&err) || crate::not_found(&err) => {}
                Err(err) => return Err(err.into()),
            }
        }
        Err(crate::Error::Internal(
            "the screen Secret changed twice while it was written",
        ))
    }

    /// Deletes the screen Secret `name` of a variant that is gone, if it is still the one
    /// `uid` names (R53).
    pub async fn delete_screen(&self, namespace: &str, name: &str, uid: &str) -> crate::Result<()> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_string()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => Ok(()),
            Err(err) if crate::conflict(&err) || crate::not_found(&err) => Ok(()),
            Err(err) => Err(err.into()),
        }
    }

    /// Server-side applies an owner's status under [`OPERATOR_MANAGER`], so fields it no
    /// longer reports are removed. Never the device list: that is [`Store::edit_devices`]'s,
    /// under a field manager of its own.
    pub async fn apply_status<K: OwnerResource>(
        &self,
        owner: &Owner,
        status: &OwnerStatus,
    ) -> crate::Result<()> {
        let status = OwnerStatus {
            devices: Vec::new(),
            device_summary: None,
            ..status.clone()
        };
        let patch = json!({
            "apiVersion": owner.kind.api_version(),
            "kind": owner.kind.kind(),
            "status": status,
        });
        let api: Api<K> = Api::namespaced(self.client.clone(), &owner.namespace);
        let params = PatchParams::apply(OPERATOR_MANAGER).force();
        api.patch_status(&owner.name, &params, &Patch::Apply(&patch))
            .await?;
        Ok(())
    }
}
