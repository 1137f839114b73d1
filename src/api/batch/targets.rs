//! The objects edited in batches: a Mutation's variants (R22), its devices Secret (R39) and
//! its device list (R40, written as `submit::devices` writes it).

use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Client,
    api::{ObjectMeta, Patch, PatchParams, PostParams},
};
use serde_json::json;

use super::{super::error::ApiError, Target};
use crate::{
    controller::secret::owned_metadata,
    crd::{DeviceStatus, Mutation, Variant},
    submit::devices::patch as patch_listed,
    variant::{
        Owner,
        devices::{Registry, devices_secret_name},
        is_controlled_by,
    },
};

/// The field manager of the API's writes.
const MANAGER: &str = "mutantops-api";

/// A Mutation, `ns/name`, whose part a target edits.
pub struct OfMutation {
    api: Api<Mutation>,
    ns: String,
    name: String,
}

impl OfMutation {
    /// Mutation `ns/name`, through `client`.
    pub fn new(client: &Client, ns: &str, name: &str) -> Self {
        OfMutation {
            api: Api::namespaced(client.clone(), ns),
            ns: ns.to_string(),
            name: name.to_string(),
        }
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
        let current = self.0.get().await?;
        let (ns, name) = (&self.0.ns, &self.0.name);
        if current.variants_read_only() {
            return Err(ApiError::conflict(format!(
                "mutation {ns}/{name} is synced by Argo CD without annotation \
                 mutantops.neiam.org/runtime-variants: \"true\": its variants belong in git"
            )));
        }
        Ok(current)
    }

    fn part(m: &Mutation) -> &Vec<Variant> {
        &m.spec.variants
    }

    fn set(m: &mut Mutation, variants: Vec<Variant>) {
        m.spec.variants = variants;
    }

    async fn write(&self, current: &Mutation, variants: &Vec<Variant>) -> kube::Result<Mutation> {
        let patch = json!({
            "metadata": { "resourceVersion": current.metadata.resource_version },
            "spec": { "variants": variants },
        });
        let params = PatchParams {
            field_manager: Some(MANAGER.into()),
            ..PatchParams::default()
        };
        self.0
            .api
            .patch(&self.0.name, &params, &Patch::Merge(&patch))
            .await
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

    fn part(m: &Mutation) -> &Vec<DeviceStatus> {
        m.status.as_ref().map_or(&NONE_LISTED, |s| &s.devices)
    }

    fn set(m: &mut Mutation, devices: Vec<DeviceStatus>) {
        m.status.get_or_insert_default().devices = devices;
    }

    async fn write(
        &self,
        current: &Mutation,
        devices: &Vec<DeviceStatus>,
    ) -> kube::Result<Mutation> {
        let version = current.metadata.resource_version.as_deref();
        patch_listed(&self.0.api, &self.0.name, version, devices).await
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
    /// The Secret, when there is one.
    pub secret: Option<Secret>,
    /// What it holds.
    pub registry: Registry,
}

/// The devices Secret `<name>-devices` of a Mutation.
pub struct DevicesSecret {
    api: Api<Secret>,
    owner: Owner,
    name: String,
}

impl DevicesSecret {
    /// The devices Secret of `owner`, through `client`.
    pub fn new(client: &Client, owner: &Owner) -> Self {
        DevicesSecret {
            api: Api::namespaced(client.clone(), &owner.namespace),
            owner: owner.clone(),
            name: devices_secret_name(&owner.name),
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
            secret: Some(secret),
            registry,
        })
    }

    fn part(d: &Devices) -> &Registry {
        &d.registry
    }

    fn set(d: &mut Devices, registry: Registry) {
        d.registry = registry;
    }

    async fn write(&self, current: &Devices, registry: &Registry) -> kube::Result<Devices> {
        let params = PostParams {
            field_manager: Some(MANAGER.into()),
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
                        ..owned_metadata(&self.owner, &self.name)
                    },
                    type_: Some("Opaque".to_owned()),
                    data,
                    ..Secret::default()
                };
                self.api.create(&params, &secret).await?
            }
        };
        Ok(Devices {
            secret: Some(written),
            registry: registry.clone(),
        })
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
