//! The two owner kinds seen as one: [`OwnerKind`] names a kind at run time, [`OwnerResource`]
//! is what reconcile, metrics and the API need of either custom resource type.

use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use kube::Resource;
use serde::{Serialize, de::DeserializeOwned};

use super::devices::DevicesSpec;
use super::embedded::EmbeddedJson;
use super::limits::DeviceAccess;
use super::rollout::RolloutSpec;
use super::screen::ScreenSpec;
use super::service::ServiceSpec;
use super::spec::{MutantDeployment, Mutation, OwnerStatus, Variant};

/// Which kind of custom resource owns a set of variants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OwnerKind {
    /// A `MutantDeployment`: variants declared in git.
    MutantDeployment,
    /// A `Mutation`: variants managed at run time through the HTTP API.
    Mutation,
}

/// The kind and apiVersion strings are also what `#[kube(...)]` gives [`Resource::kind`] and
/// [`Resource::api_version`] of the two types; those return a `Cow` from a function, and the
/// metric labels and logs need `&'static str`, so they are written here once more and a test
/// holds them equal to kube's.
impl OwnerKind {
    /// The Kubernetes kind: `MutantDeployment` or `Mutation`.
    pub fn kind(self) -> &'static str {
        match self {
            OwnerKind::MutantDeployment => "MutantDeployment",
            OwnerKind::Mutation => "Mutation",
        }
    }

    /// The value of the kind label (`crate::variant::KIND_LABEL`): the kind in lower case.
    pub fn label_value(self) -> &'static str {
        match self {
            OwnerKind::MutantDeployment => "mutantdeployment",
            OwnerKind::Mutation => "mutation",
        }
    }

    /// The apiVersion of both kinds: `neiam.org/v1`.
    pub fn api_version(self) -> &'static str {
        "neiam.org/v1"
    }
}

/// What the reconciler needs to know of an owner kind.
pub trait OwnerResource:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Debug
    + DeserializeOwned
    + Serialize
    + Send
    + Sync
    + 'static
{
    /// Which kind this is.
    const KIND: OwnerKind;
    /// The base Deployment as written.
    fn base(&self) -> &EmbeddedJson;
    /// The declared variants, in order.
    fn variants(&self) -> &[Variant];
    /// The last reported status.
    fn owner_status(&self) -> Option<&OwnerStatus>;
    /// The Service each variant should get, if any (R36).
    fn service(&self) -> Option<&ServiceSpec>;
    /// Its devices (`spec.devices` of a Mutation, R39), if it has them.
    fn devices(&self) -> Option<&DevicesSpec> {
        None
    }
    /// How a base change reaches the variants (`spec.rollout`), if in steps.
    fn rollout(&self) -> Option<&RolloutSpec>;
    /// Its `spec.screen` (Mutations only, R53).
    fn screen(&self) -> Option<&ScreenSpec> {
        None
    }
    /// What a Mutation's token may ask (`spec.deviceAccess`), if the kind has tokens.
    fn device_access(&self) -> Option<&DeviceAccess> {
        None
    }
}

impl OwnerResource for MutantDeployment {
    const KIND: OwnerKind = OwnerKind::MutantDeployment;
    fn base(&self) -> &EmbeddedJson {
        &self.spec.deployment
    }
    fn variants(&self) -> &[Variant] {
        &self.spec.mutations
    }
    fn owner_status(&self) -> Option<&OwnerStatus> {
        self.status.as_ref()
    }
    fn service(&self) -> Option<&ServiceSpec> {
        self.spec.service.as_ref()
    }
    fn rollout(&self) -> Option<&RolloutSpec> {
        self.spec.rollout.as_deref()
    }
}

impl OwnerResource for Mutation {
    const KIND: OwnerKind = OwnerKind::Mutation;
    fn base(&self) -> &EmbeddedJson {
        &self.spec.deployment
    }
    fn variants(&self) -> &[Variant] {
        &self.spec.variants
    }
    fn owner_status(&self) -> Option<&OwnerStatus> {
        self.status.as_ref()
    }
    fn service(&self) -> Option<&ServiceSpec> {
        self.spec.service.as_ref()
    }
    fn rollout(&self) -> Option<&RolloutSpec> {
        self.spec.rollout.as_deref()
    }
    fn devices(&self) -> Option<&DevicesSpec> {
        self.spec.devices.as_deref()
    }
    fn screen(&self) -> Option<&ScreenSpec> {
        self.spec.screen.as_deref()
    }
    fn device_access(&self) -> Option<&DeviceAccess> {
        self.spec.device_access.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings<K: OwnerResource>() -> (String, String, &'static str, &'static str) {
        (
            K::kind(&()).into_owned(),
            K::api_version(&()).into_owned(),
            K::KIND.kind(),
            K::KIND.api_version(),
        )
    }

    #[test]
    fn kinds_and_api_versions_are_kubes() {
        for (kube_kind, kube_version, kind, version) in
            [strings::<MutantDeployment>(), strings::<Mutation>()]
        {
            assert_eq!(kind, kube_kind);
            assert_eq!(version, kube_version);
        }
        assert_eq!(
            OwnerKind::MutantDeployment.label_value(),
            "mutantdeployment"
        );
        assert_eq!(OwnerKind::Mutation.label_value(), "mutation");
    }
}
