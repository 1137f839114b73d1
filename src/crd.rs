//! The two custom resources, `MutantDeployment` and `Mutation` (group `neiam.org`, version
//! `v1`), their status, and `mutantops crd`, which prints their CustomResourceDefinitions.
//! [`OwnerResource`] sees both as one kind of owner; [`EmbeddedJson`] holds their base.
//!
//! The base Deployment is kept as raw JSON ([`EmbeddedJson`]) on purpose: its schema is
//! `x-kubernetes-preserve-unknown-fields`, so the API server accepts anything there, and one
//! object with a malformed base must be reported in its own status (R10) rather than break
//! the decoding of every object in a watch. It is held as compact text, not as a
//! `serde_json::Value` tree: every owner is cached, and the tree costs several times the text.

mod argo;
pub(crate) mod compact;
pub(crate) mod devices;
mod embedded;
#[cfg(test)]
pub(crate) mod fixtures;
pub(crate) mod limits;
mod owner;
mod packed;
mod placement;
mod print;
pub(crate) mod rollout;
pub(crate) mod screen;
mod service;
pub(crate) mod sleep;
mod spec;
mod strmap;

pub use argo::{ARGO_INSTANCE_LABEL, ARGO_TRACKING_ID, RUNTIME_VARIANTS};
pub use devices::{DeviceState, DeviceStatus, DeviceSummary, DevicesSpec, Enrollment, Reported};
pub use embedded::EmbeddedJson;
pub use limits::DeviceAccess;
pub use owner::{OwnerKind, OwnerResource};
pub use packed::PackedJson;
pub use placement::{ContainerOverride, Quantity, Resources, Toleration};
pub use print::{crd_files, crds_yaml, print_crds};
pub use rollout::{OnFailure, RolloutPhase, RolloutSpec, RolloutStatus, RolloutStep};
pub use screen::{ScreenSpec, VariantScreen};
pub use service::{
    IpFamily, IpFamilyPolicy, MAX_CIDR, MAX_SERVICE_PORTS, MAX_SOURCE_RANGES, ServicePortSpec,
    ServiceProtocol, ServiceSpec, ServiceType, TrafficPolicy, VariantService, VariantServicePort,
};
pub use sleep::{PollStats, QuietHours, SleepSpec, SleepState, VariantSleep, WakeCause};
pub use spec::{
    Condition, MutantDeployment, MutantDeploymentSpec, Mutation, MutationSpec, OwnerStatus,
    Variant, VariantState, VariantStatus,
};
pub use strmap::StrMap;
