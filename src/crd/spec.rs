//! The two custom resources' spec and status types: [`Variant`], `MutantDeploymentSpec` and
//! `MutationSpec` (which derive the `MutantDeployment` and `Mutation` kinds), and the status
//! every owner reports.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::devices::{DeviceStatus, DeviceSummary, DevicesSpec};
use super::embedded::EmbeddedJson;
use super::limits::DeviceAccess;
use super::placement::{ContainerOverride, Toleration};
use super::rollout::{RolloutSpec, RolloutStatus};
use super::screen::{ScreenSpec, VariantScreen};
use super::service::{ServiceSpec, VariantService};
use super::sleep::VariantSleep;
use super::strmap::StrMap;
use super::{limits, placement};

/// A variant of the base Deployment: its own label, extra environment and replica count, and
/// where and with what images and resources its pods run when it says so.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Variant {
    /// Name of the variant, a DNS-1123 label (lower-case letters, digits and '-'). The variant
    /// runs as Deployment `<base name>-<label>` and its pods carry label
    /// `mutantops.neiam.org/variant=<label>`.
    pub label: String,

    /// Environment variables added to every container of the base. A value here replaces a
    /// base variable of the same name. In a Mutation the values are literal: `$(NAME)` is not
    /// expanded by the kubelet. At most 256 entries, names of at most 128 characters, values
    /// of at most 32768.
    #[serde(default)]
    #[schemars(schema_with = "limits::env_schema")]
    pub env: StrMap,

    /// Replica count of the variant's Deployment. Defaults to 1; 0 keeps the Deployment with
    /// no pods. At most 1000.
    #[serde(default = "default_instances")]
    #[schemars(default = "default_instances", range(max = 1000))]
    pub instances: i32,

    /// Node labels the variant's pods must run on, merged over the base's nodeSelector (a key
    /// here replaces the base's value of that key). At most 64 entries.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "placement::node_selector_schema")]
    pub node_selector: BTreeMap<String, String>,

    /// Tolerations added to the base's (one the base has already is not repeated). At most 64.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub tolerations: Vec<Toleration>,

    /// Image and resources of containers of the base, by container name. A Mutation's token
    /// may never set them. At most 64.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 64),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"])
    )]
    pub containers: Vec<ContainerOverride>,

    /// `false`: the variant gets no Service even when the owner's `service` is set (a
    /// Mutation's token's variants are stored so when `spec.deviceAccess.service` is false).
    /// Absent or `true`: it gets the owner's Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<bool>,

    /// `true`: the token's. Set on every variant a Mutation's or a device's token adds through
    /// the HTTP API; the owner may set it on a variant of the spec to hand that variant to the
    /// token. Without `spec.devices`, the Mutation's token scales and removes only variants
    /// marked so (403 for any other: the spec's, the admin token's). Its env stays held to
    /// `spec.deviceAccess.env` when the base changes: a name the base later passes to a
    /// command line (`$(NAME)`) and the owner does not list makes the variant Invalid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by_token: Option<bool>,
    /// `true`: with `spec.devices`, boards may enroll into this variant with the enrollment key
    /// (`{"id": ..., "label": ...}`): the owner's consent to share it. Otherwise the
    /// enrollment key joins a variant that exists only when `spec.deviceAccess.labelPattern`
    /// is set and matches its label (403). A device that joined it reads and polls it but
    /// never changes it: a device changes only the variant its own enrollment made. The
    /// admin token enrolls into any variant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enrollable: Option<bool>,
    /// `false`: the variant never sleeps, even when `spec.devices.sleep` is set (pinned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sleep: Option<bool>,
}

fn default_instances() -> i32 {
    1
}

impl Default for Variant {
    /// A variant that changes nothing but its label: no env, one instance, the base's
    /// placement, images and resources (what a spec entry of only a label decodes to).
    fn default() -> Self {
        Variant {
            label: String::new(),
            env: StrMap::default(),
            instances: default_instances(),
            node_selector: BTreeMap::new(),
            tolerations: Vec::new(),
            containers: Vec::new(),
            service: None,
            by_token: None,
            enrollable: None,
            sleep: None,
        }
    }
}

/// Declares the spec of one owner kind and, through kube's derive, the kind itself: both kinds
/// share their group, status, category and columns (`Base`, `Ready`, the kind's own columns,
/// `Age`, and with `-o wide` `Variants`, `Services` and `Message`).
macro_rules! owner_kind {
    (
        $(#[$meta:meta])*
        kind = $kind:literal, shortname = $short:literal, about = $about:literal,
        columns = [$($column:tt)*],
        pub struct $spec:ident { $($fields:tt)* }
    ) => {
        $(#[$meta])*
        #[allow(
            clippy::duplicated_attributes,
            reason = "each printcolumn(...) names its own type_; clippy reads them as repeated \
                      attributes"
        )]
        #[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
        #[kube(
            group = "neiam.org",
            version = "v1",
            kind = $kind,
            namespaced,
            status = "OwnerStatus",
            shortname = $short,
            category = "mutantops",
            doc = $about,
            printcolumn(
                name = "Base",
                type_ = "string",
                json_path = ".spec.deployment.metadata.name",
                description = "name of the base Deployment"
            ),
            printcolumn(
                name = "Ready",
                type_ = "string",
                json_path = ".status.summary",
                description = "variants ready"
            ),
            $($column)*
            printcolumn(
                name = "Age",
                type_ = "date",
                json_path = ".metadata.creationTimestamp"
            ),
            printcolumn(
                name = "Variants",
                type_ = "string",
                json_path = ".status.variantLabels",
                description = "labels of the variants declared",
                priority = "1"
            ),
            printcolumn(
                name = "Services",
                type_ = "string",
                json_path = ".status.variantServices",
                description = "the variants' Services and their ports",
                priority = "1"
            ),
            printcolumn(
                name = "Rollout",
                type_ = "string",
                json_path = ".status.rollout.phase",
                description = "where the rollout of the base stands (spec.rollout)",
                priority = "1"
            ),
            printcolumn(
                name = "Message",
                type_ = "string",
                json_path = ".status.message",
                description = "what is wrong with the object as a whole, if anything",
                priority = "1"
            )
        )]
        #[serde(rename_all = "camelCase")]
        pub struct $spec { $($fields)* }
    };
}

owner_kind! {
    /// Desired state of a MutantDeployment: a base Deployment and the variants to run of it.
    kind = "MutantDeployment",
    shortname = "md",
    about = "A base Deployment run as several variants, declared in git. Each entry of \
             spec.mutations becomes Deployment <base name>-<label>.",
    columns = [],
    pub struct MutantDeploymentSpec {
    /// The base: a whole apps/v1 Deployment (apiVersion, kind, metadata.name, spec). It is not
    /// created itself; each variant is a copy of it.
    #[schemars(schema_with = "embedded_deployment")]
    pub deployment: EmbeddedJson,

    /// The variants to run, at most 500. Removing one deletes its Deployment.
    #[serde(default)]
    #[schemars(length(max = 500))]
    pub mutations: Vec<Variant>,

    /// A Service per variant, `<base name>-<label>`, selecting only that variant's pods; its
    /// address is in the variant's status. Absent: no Services (removing it deletes them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceSpec>,

    /// How a change of the base reaches the variants: in steps, each step's Deployments
    /// available before the next starts; status.rollout says where it stands. Absent: every
    /// variant at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<Box<RolloutSpec>>,

    /// Each variant's picture, fetched from its Service once per refreshEvery, kept in a Secret
    /// the Mutation owns and served by the HTTP API with an ETag (304 when unchanged), the last
    /// good one while the renderer sleeps or fails. Absent: the API serves no screens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub screen: Option<Box<ScreenSpec>>,
}
}

owner_kind! {
    /// Desired state of a Mutation: a base Deployment and variants managed at run time through the
    /// HTTP API.
    kind = "Mutation",
    shortname = "mut",
    about = "A base Deployment run as several variants that are managed at run time through \
             the mutantops HTTP API. Each variant becomes Deployment <base name>-<label>; the \
             Mutation's token is in Secret <name>-secret.",
    columns = [
        printcolumn(
            name = "Secret",
            type_ = "string",
            json_path = ".status.secret",
            description = "Secret holding this Mutation's API token"
        ),
        printcolumn(
            name = "Devices",
            type_ = "integer",
            json_path = ".status.deviceSummary.total",
            description = "devices enrolled (spec.devices)",
            priority = "1"
        ),
        printcolumn(
            name = "Online",
            type_ = "integer",
            json_path = ".status.deviceSummary.online",
            description = "devices heard from within lateAfter",
            priority = "1"
        ),
    ],
    pub struct MutationSpec {
    /// The base: a whole apps/v1 Deployment (apiVersion, kind, metadata.name, spec). It is not
    /// created itself; each variant is a copy of it.
    #[schemars(schema_with = "embedded_deployment")]
    pub deployment: EmbeddedJson,

    /// The variants to run, usually added and removed through the HTTP API; at most 500. An
    /// Argo CD synced Mutation with annotation mutantops.neiam.org/runtime-variants=true leaves
    /// this out of its manifest.
    #[serde(default)]
    #[schemars(length(max = 500))]
    pub variants: Vec<Variant>,

    /// What the Mutation's own token (its devices) may ask of the variants: which env names,
    /// how many instances, variants and env entries, how long a value, which node labels and
    /// taints. Absent: the defaults (any env name but those that change how a process loads or
    /// starts; 10 instances, 20 variants, 32 env entries, values of 4096 bytes, 40 instances
    /// in all, 5 NodePort or LoadBalancer Services, any label; no node labels, no
    /// tolerations). The admin token is not bound by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_access: Option<Box<DeviceAccess>>,

    /// A Service per variant, `<base name>-<label>`, selecting only that variant's pods; its
    /// address is in the variant's status and in the HTTP API's answer for the variant, so a
    /// device holding the Mutation's token can look up its own. Absent: no Services (removing
    /// it deletes them). The Mutation's token cannot change it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceSpec>,

    /// Devices as objects of their own. Set, the Mutation's token becomes an enrollment key:
    /// it may enroll devices (POST .../devices) and nothing else, and each device gets a
    /// token of its own that reaches only its own record, its variant and that variant's
    /// Service; env a device sends is then limited to the names deviceAccess.env lists.
    /// Absent: the Mutation's token manages the variants itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices: Option<Box<DevicesSpec>>,

    /// How a change of the base reaches the variants: in steps, each step's Deployments
    /// available before the next starts; status.rollout says where it stands. Absent: every
    /// variant at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<Box<RolloutSpec>>,

    /// Each variant's picture, fetched from its Service by the operator once per
    /// refreshEvery, kept in a Secret the Mutation owns and served to the devices by the HTTP
    /// API with an ETag (304 when unchanged), the last good one while the renderer sleeps or
    /// fails. Absent: the API serves no screens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub screen: Option<Box<ScreenSpec>>,
}
}

/// State of one variant.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum VariantState {
    /// The Deployment is being created, updated or scaled.
    Progressing,
    /// The Deployment has observed its spec and all its replicas are updated and ready.
    Ready,
    /// The variant cannot be applied (bad label, env name or instances), or its Service cannot
    /// be made; see message.
    Invalid,
    /// Asleep (spec.devices.sleep): its Deployment is at zero replicas while no device needs
    /// it; `instances` is kept for when it wakes. The message says why.
    Idle,
    /// The label repeats, or the Deployment or Service name belongs to someone else; see
    /// message.
    Conflict,
}

impl VariantState {
    /// The state as written in status.
    pub fn as_str(self) -> &'static str {
        match self {
            VariantState::Progressing => "Progressing",
            VariantState::Ready => "Ready",
            VariantState::Invalid => "Invalid",
            VariantState::Idle => "Idle",
            VariantState::Conflict => "Conflict",
        }
    }
}

/// Observed state of one variant.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VariantStatus {
    /// The variant's label.
    pub label: String,
    /// Progressing, Ready, Invalid or Conflict.
    pub state: VariantState,
    /// Why the variant is Invalid or in Conflict; null otherwise.
    pub message: Option<String>,
    /// Name of the variant's Deployment.
    pub deployment: String,
    /// Replicas the Deployment asks for.
    pub replicas: i32,
    /// Replicas that are ready.
    pub ready_replicas: i32,
    /// The variant's Service and how to reach it, when the owner asks for Services and it
    /// exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<Box<VariantService>>,
    /// Whether it sleeps now and why (Mutations with spec.devices.sleep).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sleep: Option<Box<VariantSleep>>,
    /// Its screen: which one is served, when it was fetched, and why the last fetch failed,
    /// if it did (Mutations with spec.screen).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub screen: Option<Box<VariantScreen>>,
}

/// A standard Kubernetes condition (`type`, `status`, `reason`, `message`,
/// `lastTransitionTime`), so generic tools understand the object.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Condition type; mutantops reports `Ready`.
    #[serde(rename = "type")]
    pub type_: String,
    /// True, False or Unknown.
    pub status: String,
    /// CamelCase reason of the last transition.
    pub reason: String,
    /// Human-readable details.
    #[serde(default)]
    pub message: String,
    /// When the status last changed (RFC 3339).
    pub last_transition_time: String,
    /// The generation this condition was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// Observed state of a MutantDeployment or Mutation.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OwnerStatus {
    /// The metadata.generation this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Name of the Secret holding the Mutation's API token (Mutations only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// "N/M variants ready".
    #[serde(default)]
    pub summary: String,
    /// What is wrong with the object as a whole (invalid base, foreign Secret); absent when
    /// nothing is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The declared variants' labels, comma-separated in spec order: kubectl's `VARIANTS`
    /// column (`-o wide`), which can show one value per object, not a list.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub variant_labels: String,
    /// The variants' Services and their ports, as kubectl shows a Service's (`80:30080/TCP`),
    /// comma-separated: kubectl's `SERVICES` column (`-o wide`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub variant_services: String,
    /// One entry per declared variant, in spec order.
    #[serde(default)]
    pub variants: Vec<VariantStatus>,
    /// Standard conditions; `Ready` is True when every valid variant is Ready.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The enrolled devices, in id order (Mutations with spec.devices only). No token is ever
    /// written here: the devices' tokens are kept as SHA-256 hashes in Secret `<name>-devices`.
    /// One writer writes the list whole (R40, R52), so it is atomic: the API server records
    /// one owner for it in managedFields, not one entry per device and field (12.7 KB per 50
    /// devices, carried by every read and write of the Mutation).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 500), extend("x-kubernetes-list-type" = "atomic"))]
    pub devices: Vec<DeviceStatus>,
    /// How many devices are in each state (Mutations with spec.devices only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_summary: Option<Box<DeviceSummary>>,
    /// Where the rollout of the base stands (spec.rollout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<Box<RolloutStatus>>,
}

/// Schema of the embedded base Deployment: any object with apiVersion, kind and metadata,
/// kept as written.
fn embedded_deployment(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-embedded-resource": true,
        "x-kubernetes-preserve-unknown-fields": true
    })
}
