//! The request shapes of a variant's `tolerations` and `containers` (R37), which `json`'s
//! `VariantRequest` holds: the CRD's types, refusing unknown fields, so that a typo is a 400
//! instead of a silently ignored setting.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::crd::{ContainerOverride, Quantity, Resources, Toleration};

/// One of `tolerations`: [`Toleration`].
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TolerationRequest {
    /// [`Toleration::key`].
    #[serde(default)]
    pub key: String,
    /// [`Toleration::operator`].
    #[serde(default)]
    pub operator: String,
    /// [`Toleration::value`].
    #[serde(default)]
    pub value: String,
    /// [`Toleration::effect`].
    #[serde(default)]
    pub effect: String,
    /// [`Toleration::toleration_seconds`].
    #[serde(default)]
    pub toleration_seconds: Option<i64>,
}

impl From<TolerationRequest> for Toleration {
    fn from(r: TolerationRequest) -> Self {
        Toleration {
            key: r.key,
            operator: r.operator,
            value: r.value,
            effect: r.effect,
            toleration_seconds: r.toleration_seconds,
        }
    }
}

/// One of `containers`: [`ContainerOverride`].
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct ContainerRequest {
    /// [`ContainerOverride::name`].
    pub name: String,
    /// [`ContainerOverride::image`].
    #[serde(default)]
    pub image: Option<String>,
    /// [`ContainerOverride::resources`].
    #[serde(default)]
    pub resources: Option<ResourcesRequest>,
    /// [`ContainerOverride::env`].
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

/// `resources` of one of `containers`: [`Resources`].
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct ResourcesRequest {
    /// [`Resources::limits`].
    #[serde(default)]
    pub limits: BTreeMap<String, Quantity>,
    /// [`Resources::requests`].
    #[serde(default)]
    pub requests: BTreeMap<String, Quantity>,
}

impl From<ContainerRequest> for ContainerOverride {
    fn from(r: ContainerRequest) -> Self {
        ContainerOverride {
            name: r.name,
            image: r.image,
            resources: r.resources.map(|r| Resources {
                limits: r.limits,
                requests: r.requests,
            }),
            env: r.env.into(),
        }
    }
}
