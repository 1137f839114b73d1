//! The objects the store edits in batches: a Mutation's variants (R22), its device list (R40)
//! and its devices Secret (R39), each held to its bounds (the size of a Mutation: [`super::size`]).

use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Client,
    api::{ObjectMeta, Patch, PatchParams, PostParams},
};
use serde_json::json;

use super::{batch::Target, size::mutation_fits};
use crate::cache::Caches;
use crate::{
    crd::{DeviceStatus, DeviceSummary, Mutation, Variant, devices::MAX_DEVICES},
    http::ApiError,
    variant::{
        Owner, check_variant_count,
        devices::{Registry, devices_secret_name, summary},
        is_controlled_by,
    },
};

/// The field manager of the writes the HTTP API asks for (variants, rollout annotations, a
/// Mutation created).
pub const API_MANAGER: &str = "mutantops-api";
/// The field manager of a Mutation's `status.devices` and `status.deviceSummary`: the
/// controller's own status (server-side apply under `mutantops-operator`) never names them.
pub const DEVICES_MANAGER: &str = "mutantops-devices";

/// A Mutation, `ns/name`, whose part a target edits, the field manager its writes carry,
/// and the cache it is known from, if any.
pub struct OfMutation {
    api: Api<Mutation>,
    ns: String,
    name: String,
    manager: &'static str,
    caches: Option<Caches>,
}

impl OfMutation {
    /// Mutation `ns/name`, through `client`, written under field manager `manager`, known
    /// from `caches` when given.
    pub fn new(
        client: &Client,
        ns: &str,
        name: &str,
        manager: &'static str,
        caches: Option<&Caches>,
    ) -> Self {
        OfMutation {
            api: Api::namespaced(client.clone(), ns),
            ns: ns.to_string(),
            name: name.to_string(),
            manager,
            caches: caches.cloned(),
        }
    }

    /// The Mutation as cached, if it is.
    fn known(&self) -> Option<Mutation> {
        let cached = self.caches.as_ref()?.mutation(&self.ns, &self.name)?;
        Some(Mutation::clone(&cached))
    }

    /// Its key among the batches: the Mutation's namespace and name.
    fn key(&self) -> String {
        format!("{}/{}", self.ns, self.name)
    }

    async fn get(&self) -> Result<Mutation, ApiError> {
        let (ns, name) = (&self.ns, &self.name);
        self.api
            .get_opt(name)
            .await?
            .ok_or_else(|| ApiError::not_found(format!("mutation {ns}/{name} not found")))
    }
}

/// The variants of a Mutation.
pub struct Variants(pub OfMutation);

/// The device list in a Mutation's status (kept in id order).
pub struct Listed(pub OfMutation);

/// A Mutation without status lists no device.
static NONE_LISTED: Vec<DeviceStatus> = Vec::new();

impl Target for Variants {
    type Object = Mutation;
    type Part = Vec<Variant>;
    const WRITTEN: &'static str = "variant edits written";

    async fn read(&self) -> Result<Mutation, ApiError> {
        self.0.get().await
    }

    fn known(&self) -> Option<Mutation> {
        self.0.known()
    }

    fn part(m: &Mutation) -> &Vec<Variant> {
        &m.spec.variants
    }

    fn set(m: &mut Mutation, variants: Vec<Variant>) -> Vec<Variant> {
        std::mem::replace(&mut m.spec.variants, variants)
    }

    async fn write(&self, current: &Mutation, variants: &Vec<Variant>) -> kube::Result<Mutation> {
        let patch = json!({
            "metadata": { "resourceVersion": current.metadata.resource_version },
            "spec": { "variants": variants },
        });
        let params = PatchParams {
            field_manager: Some(self.0.manager.into()),
            ..PatchParams::default()
        };
        self.0
            .api
            .patch(&self.0.name, &params, &Patch::Merge(&patch))
            .await
    }

    /// R8, R52: at most [`MAX_VARIANTS`](crate::crd::limits::MAX_VARIANTS) variants (an edit
    /// that removes some is taken even over it); the size bound is [`Target::fits`].
    fn check(&self, before: &Vec<Variant>, after: &Mutation) -> Result<(), ApiError> {
        let (was, now) = (before.len(), after.spec.variants.len());
        if now > was {
            check_variant_count(now).map_err(ApiError::bad_request)?;
        }
        Ok(())
    }

    fn fits(&self, before: &Vec<Variant>, after: &Mutation) -> Result<(), ApiError> {
        mutation_fits(&self.describe(), before, &after.spec.variants, after)
    }

    fn describe(&self) -> String {
        format!("mutation {}/{}", self.0.ns, self.0.name)
    }

    fn owner(&self) -> (&str, &str) {
        (&self.0.ns, &self.0.name)
    }

    fn key(&self) -> String {
        self.0.key()
    }
}

impl Target for Listed {
    type Object = Mutation;
    type Part = Vec<DeviceStatus>;
    const WRITTEN: &'static str = "device list edits written";

    async fn read(&self) -> Result<Mutation, ApiError> {
        self.0.get().await
    }

    fn known(&self) -> Option<Mutation> {
        self.0.known()
    }

    fn part(m: &Mutation) -> &Vec<DeviceStatus> {
        m.status.as_ref().map_or(&NONE_LISTED, |s| &s.devices)
    }

    /// The summary is written with the list: a stale one is written even when the list is
    /// the same.
    fn needs_write(m: &Mutation, devices: &Vec<DeviceStatus>) -> bool {
        let summary_now = m.status.as_ref().and_then(|s| s.device_summary.as_deref());
        devices != Self::part(m) || summary_now != Some(&summary(devices))
    }

    fn set(m: &mut Mutation, mut devices: Vec<DeviceStatus>) -> Vec<DeviceStatus> {
        devices.sort_by(|a, b| a.id.cmp(&b.id));
        std::mem::replace(&mut m.status.get_or_insert_default().devices, devices)
    }

    async fn write(
        &self,
        current: &Mutation,
        devices: &Vec<DeviceStatus>,
    ) -> kube::Result<Mutation> {
        let version = current.metadata.resource_version.as_deref();
        patch_listed(&self.0.api, &self.0.name, version, devices).await
    }

    /// R40, R52: at most [`MAX_DEVICES`] devices listed, what `maxDevices` may allow (an edit
    /// that lists fewer is taken even over it); the size bound is [`Target::fits`].
    fn check(&self, before: &Vec<DeviceStatus>, after: &Mutation) -> Result<(), ApiError> {
        let (was, now) = (before.len(), Self::part(after).len());
        let bound = usize::try_from(MAX_DEVICES).unwrap_or(0);
        if now > bound && now > was {
            return Err(ApiError::forbidden(format!(
                "{} would list {now} devices, over the bound of {bound}: nothing was changed",
                self.describe()
            )));
        }
        Ok(())
    }

    fn fits(&self, before: &Vec<DeviceStatus>, after: &Mutation) -> Result<(), ApiError> {
        let what = format!("mutation {}/{}", self.0.ns, self.0.name);
        mutation_fits(&what, before, Self::part(after), after)
    }

    fn describe(&self) -> String {
        format!("the device list of mutation {}/{}", self.0.ns, self.0.name)
    }

    fn owner(&self) -> (&str, &str) {
        (&self.0.ns, &self.0.name)
    }

    fn key(&self) -> String {
        self.0.key()
    }
}

/// A devices Secret as read: the Secret (none yet) and its registry.
#[derive(Clone, Debug)]
pub struct Devices {
    /// The Secret, when there is one, without its data: the registry is what it holds, and
    /// every write replaces the data whole.
    pub secret: Option<Secret>,
    /// What it holds.
    pub registry: Registry,
}

/// The devices Secret `<name>-devices` of a Mutation.
pub struct DevicesSecret {
    api: Api<Secret>,
    owner: Owner,
    name: String,
    max_devices: usize,
}

impl DevicesSecret {
    /// The devices Secret of `owner`, through `client`, which may hold at most `max_devices`
    /// devices (the Mutation's `spec.devices.maxDevices`).
    pub fn new(client: &Client, owner: &Owner, max_devices: usize) -> Self {
        DevicesSecret {
            api: Api::namespaced(client.clone(), &owner.namespace),
            owner: owner.clone(),
            name: devices_secret_name(&owner.name),
            max_devices,
        }
    }
}

impl Target for DevicesSecret {
    type Object = Devices;
    type Part = Registry;
    const WRITTEN: &'static str = "device registry edits written";

    /// A Secret of that name that the Mutation does not control is refused (409), never read
    /// further.
    async fn read(&self) -> Result<Devices, ApiError> {
        let Some(secret) = self.api.get_opt(&self.name).await? else {
            let registry = Registry::default();
            return Ok(Devices {
                secret: None,
                registry,
            });
        };
        if !is_controlled_by(&secret.metadata, &self.owner.uid) {
            return Err(ApiError::conflict(format!(
                "Secret {:?} exists and is not owned by mutation {}/{}: devices cannot \
                 enroll until it is deleted",
                self.name, self.owner.namespace, self.owner.name
            )));
        }
        let registry = Registry::from_data(secret.data.as_ref().unwrap_or(&Default::default()));
        Ok(Devices {
            secret: Some(without_data(secret)),
            registry,
        })
    }

    fn part(d: &Devices) -> &Registry {
        &d.registry
    }

    fn set(d: &mut Devices, registry: Registry) -> Registry {
        std::mem::replace(&mut d.registry, registry)
    }

    async fn write(&self, current: &Devices, registry: &Registry) -> kube::Result<Devices> {
        let params = PostParams {
            field_manager: Some(API_MANAGER.into()),
            ..PostParams::default()
        };
        let data = Some(registry.to_data());
        let written = match &current.secret {
            Some(secret) => {
                let mut secret = secret.clone();
                secret.data = data;
                secret.string_data = None;
                self.api.replace(&self.name, &params, &secret).await?
            }
            None => {
                let contents = "SHA-256 hashes of device tokens; no token";
                let secret = Secret {
                    metadata: ObjectMeta {
                        annotations: Some(
                            [("mutantops.neiam.org/contents".into(), contents.into())].into(),
                        ),
                        ..self.owner.owned_metadata(&self.name)
                    },
                    type_: Some("Opaque".to_owned()),
                    data,
                    ..Secret::default()
                };
                self.api.create(&params, &secret).await?
            }
        };
        Ok(Devices {
            secret: Some(without_data(written)),
            registry: registry.clone(),
        })
    }

    /// R39, R52: an edit that would enroll more devices than `maxDevices` is refused (403);
    /// one that removes devices is taken even over it (the bound may have been lowered).
    fn check(&self, before: &Registry, after: &Devices) -> Result<(), ApiError> {
        let (was, now) = (before.devices.len(), after.registry.devices.len());
        if now <= self.max_devices || now <= was {
            return Ok(());
        }
        Err(ApiError::forbidden(format!(
            "mutation {}/{} has {was} devices, its maxDevices: no more enroll",
            self.owner.namespace, self.owner.name
        )))
    }

    fn describe(&self) -> String {
        format!("Secret {}/{}", self.owner.namespace, self.name)
    }

    fn owner(&self) -> (&str, &str) {
        (&self.owner.namespace, &self.owner.name)
    }

    /// A Mutation deleted and created again has a writer of its own.
    fn key(&self) -> String {
        format!("{}/{}/{}", self.owner.namespace, self.name, self.owner.uid)
    }
}

/// `secret` without its data: a devices Secret's data is its registry once more, encoded.
fn without_data(secret: Secret) -> Secret {
    Secret {
        data: None,
        string_data: None,
        ..secret
    }
}

/// Writes `devices` (in id order) and their summary as Mutation `name`'s device list, guarded
/// by `resource_version`: a JSON merge patch of the status subresource under
/// [`DEVICES_MANAGER`], the one write of both fields.
async fn patch_listed(
    api: &Api<Mutation>,
    name: &str,
    resource_version: Option<&str>,
    devices: &[DeviceStatus],
) -> kube::Result<Mutation> {
    let params = PatchParams {
        field_manager: Some(DEVICES_MANAGER.into()),
        ..PatchParams::default()
    };
    let patch = ListPatch {
        metadata: Guard { resource_version },
        status: ListStatus {
            devices,
            device_summary: summary(devices),
        },
    };
    api.patch_status(name, &params, &Patch::Merge(&patch)).await
}

/// The merge patch of a device list, written straight from the list: through `json!` each of
/// up to 500 devices became a map of its own first (a few MiB at once while a fleet enrolls).
#[derive(Debug, serde::Serialize)]
struct ListPatch<'a> {
    metadata: Guard<'a>,
    status: ListStatus<'a>,
}

/// The resourceVersion a patch is guarded by (`null`: none).
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Guard<'a> {
    resource_version: Option<&'a str>,
}

#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct ListStatus<'a> {
    devices: &'a [DeviceStatus],
    device_summary: DeviceSummary,
}

#[cfg(test)]
mod tests;
