//! The JSON the HTTP API reads and writes (R23, R24). Request types refuse unknown fields, so a
//! typo is a 400 instead of a silently ignored setting.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use serde::{Deserialize, Serialize};

use crate::crd::{
    ContainerOverride, DeviceAccess, DevicesSpec, EmbeddedJson, Enrollment, IpFamily,
    IpFamilyPolicy, Mutation, QuietHours, ServicePortSpec, ServiceProtocol, ServiceSpec,
    ServiceType, SleepSpec, StrMap, Toleration, TrafficPolicy, Variant, VariantStatus,
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
    /// Devices of their own (`spec.devices`, R39); none when left out.
    #[serde(default)]
    pub devices: Option<DevicesRequest>,
}

/// `devices` of `POST .../mutations`: [`DevicesSpec`], refusing unknown fields.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DevicesRequest {
    /// [`DevicesSpec::enrollment`].
    #[serde(default)]
    pub enrollment: Enrollment,
    /// [`DevicesSpec::open_until`].
    #[serde(default)]
    pub open_until: Option<String>,
    /// [`DevicesSpec::max_devices`].
    #[serde(default)]
    pub max_devices: Option<i32>,
    /// [`DevicesSpec::late_after`].
    #[serde(default)]
    pub late_after: Option<String>,
    /// [`DevicesSpec::gone_after`].
    #[serde(default)]
    pub gone_after: Option<String>,
    /// [`DevicesSpec::persist_every`].
    #[serde(default)]
    pub persist_every: Option<String>,
    /// [`DevicesSpec::sleep`].
    #[serde(default)]
    pub sleep: Option<SleepRequest>,
    /// [`DevicesSpec::ids`].
    #[serde(default)]
    pub ids: Option<Vec<String>>,
}

/// `devices.sleep` of `POST .../mutations`: [`SleepSpec`], refusing unknown fields.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SleepRequest {
    #[serde(default)]
    idle_after: Option<String>,
    #[serde(default)]
    warmup: Option<String>,
    #[serde(default)]
    keep_warm: Option<String>,
    #[serde(default)]
    expire_after: Option<String>,
    #[serde(default)]
    quiet_hours: Option<QuietHoursRequest>,
    #[serde(default)]
    max_wake_per_hour: Option<i32>,
    #[serde(default)]
    site_silent_min: Option<i32>,
}

/// `devices.sleep.quietHours`: [`QuietHours`], refusing unknown fields.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct QuietHoursRequest {
    #[serde(default)]
    days: Vec<String>,
    from: String,
    to: String,
    time_zone: String,
}

impl From<SleepRequest> for SleepSpec {
    fn from(r: SleepRequest) -> Self {
        SleepSpec {
            idle_after: r.idle_after,
            warmup: r.warmup,
            keep_warm: r.keep_warm,
            expire_after: r.expire_after,
            quiet_hours: r.quiet_hours.map(|q| QuietHours {
                days: q.days,
                from: q.from,
                to: q.to,
                time_zone: q.time_zone,
            }),
            max_wake_per_hour: r.max_wake_per_hour,
            site_silent_min: r.site_silent_min,
        }
    }
}

impl From<DevicesRequest> for DevicesSpec {
    fn from(r: DevicesRequest) -> Self {
        DevicesSpec {
            enrollment: r.enrollment,
            open_until: r.open_until,
            max_devices: r.max_devices,
            late_after: r.late_after,
            gone_after: r.gone_after,
            persist_every: r.persist_every,
            sleep: r.sleep.map(SleepSpec::from),
            ids: r.ids,
        }
    }
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
    /// [`DeviceAccess::max_total_instances`].
    #[serde(default)]
    pub max_total_instances: Option<i32>,
    /// [`DeviceAccess::max_exposed_services`].
    #[serde(default)]
    pub max_exposed_services: Option<i32>,
    /// [`DeviceAccess::service`].
    #[serde(default)]
    pub service: Option<bool>,
    /// [`DeviceAccess::label_pattern`].
    #[serde(default)]
    pub label_pattern: Option<String>,
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
            max_total_instances: r.max_total_instances,
            max_exposed_services: r.max_exposed_services,
            service: r.service,
            label_pattern: r.label_pattern,
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
    /// [`ServiceSpec::load_balancer_source_ranges`].
    #[serde(default, rename = "loadBalancerSourceRanges")]
    pub load_balancer_source_ranges: Vec<String>,
    /// [`ServiceSpec::external_traffic_policy`].
    #[serde(default, rename = "externalTrafficPolicy")]
    pub external_traffic_policy: Option<TrafficPolicy>,
    /// [`ServiceSpec::ip_families`].
    #[serde(default, rename = "ipFamilies")]
    pub ip_families: Vec<IpFamily>,
    /// [`ServiceSpec::ip_family_policy`].
    #[serde(default, rename = "ipFamilyPolicy")]
    pub ip_family_policy: Option<IpFamilyPolicy>,
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
            load_balancer_source_ranges: r.load_balancer_source_ranges,
            external_traffic_policy: r.external_traffic_policy,
            ip_families: r.ip_families,
            ip_family_policy: r.ip_family_policy,
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
    /// [`Variant::enrollable`]: the owner's only (a token's is refused, R39).
    #[serde(default)]
    pub enrollable: Option<bool>,
    /// [`Variant::by_token`]: the owner's only (a token's is refused, R32).
    #[serde(default, rename = "byToken")]
    pub by_token: Option<bool>,
}

fn one() -> i32 {
    1
}

impl From<VariantRequest> for Variant {
    fn from(r: VariantRequest) -> Self {
        Variant {
            label: r.label,
            env: r.env.into(),
            instances: r.instances,
            node_selector: r.node_selector,
            tolerations: r.tolerations.into_iter().map(Toleration::from).collect(),
            containers: r
                .containers
                .into_iter()
                .map(ContainerOverride::from)
                .collect(),
            service: None,
            by_token: r.by_token,
            enrollable: r.enrollable,
            sleep: None,
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

/// A variant as the API shows it, borrowed from the cached Mutation: a GET serialises it
/// without copying a string of it.
#[derive(Serialize, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VariantView<'a> {
    /// The variant's label.
    pub label: &'a str,
    /// Its extra environment; left out in the answers to a device's token, which carry no
    /// env values (R39).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env: Option<&'a StrMap>,
    /// Its replica count.
    pub instances: i32,
    /// Its node labels (R37); left out when it has none.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: &'a BTreeMap<String, String>,
    /// Its tolerations; left out when it has none.
    #[serde(skip_serializing_if = "<[Toleration]>::is_empty")]
    pub tolerations: &'a [Toleration],
    /// Its containers' images and resources; left out when it changes none.
    #[serde(skip_serializing_if = "<[ContainerOverride]>::is_empty")]
    pub containers: &'a [ContainerOverride],
    /// Whether the API may change it (false for an Argo CD synced Mutation without
    /// runtime variants).
    pub read_only: bool,
    /// What the controller last reported for it; null until then.
    pub status: Option<&'a VariantStatus>,
    /// With spec.rollout, the base revision its Deployment runs (R43); left out
    /// otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
}

/// A Mutation as the API shows it.
#[derive(Serialize, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MutationView<'a> {
    /// metadata.name.
    pub name: String,
    /// metadata.namespace.
    pub namespace: String,
    /// The base Deployment, written out as kept.
    pub deployment: EmbeddedJson,
    /// Its variants.
    pub variants: Vec<VariantView<'a>>,
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
fn variant_status<'a>(m: &'a Mutation, index: usize, label: &str) -> Option<&'a VariantStatus> {
    let reported = &m.status.as_ref()?.variants;
    reported
        .get(index)
        .filter(|s| s.label == label)
        .or_else(|| reported.iter().find(|s| s.label == label))
}

/// Renders the variant at `index`.
pub fn variant_view(m: &Mutation, index: usize) -> Option<VariantView<'_>> {
    let v = m.spec.variants.get(index)?;
    Some(VariantView {
        label: &v.label,
        env: Some(&v.env),
        instances: v.instances,
        node_selector: &v.node_selector,
        tolerations: &v.tolerations,
        containers: &v.containers,
        read_only: m.variants_read_only(),
        status: variant_status(m, index, &v.label),
        revision: None,
    })
}

/// Renders a Mutation.
pub fn mutation_view(m: &Mutation) -> MutationView<'_> {
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
mod tests;
