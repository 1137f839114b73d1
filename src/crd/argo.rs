//! Argo CD's rules on a Mutation (R16, R17): whether Argo CD syncs it, and so whether the HTTP
//! API may change its variants.

use kube::ResourceExt;

use super::spec::Mutation;

/// Annotation that Argo CD puts on what it syncs.
pub const ARGO_TRACKING_ID: &str = "argocd.argoproj.io/tracking-id";
/// Label that Argo CD (label tracking) puts on what it syncs.
pub const ARGO_INSTANCE_LABEL: &str = "app.kubernetes.io/instance";
/// Annotation by which an Argo CD synced Mutation leaves its variants to the API.
pub const RUNTIME_VARIANTS: &str = "mutantops.neiam.org/runtime-variants";

impl Mutation {
    /// Whether Argo CD syncs this Mutation (R16): the API may not delete it.
    pub fn argo_synced(&self) -> bool {
        self.annotations().contains_key(ARGO_TRACKING_ID)
            || self.labels().contains_key(ARGO_INSTANCE_LABEL)
    }

    /// Whether the API must not change this Mutation's variants (R17): Argo CD syncs it and it
    /// does not leave its variants to the API (`RUNTIME_VARIANTS: "true"`).
    pub fn variants_read_only(&self) -> bool {
        self.argo_synced()
            && self.annotations().get(RUNTIME_VARIANTS).map(String::as_str) != Some("true")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::fixtures;

    fn mutation(annotations: &[(&str, &str)], labels: &[(&str, &str)]) -> Mutation {
        let mut m = fixtures::mutation("web", Vec::new());
        m.metadata.annotations = fixtures::map(annotations);
        m.metadata.labels = fixtures::map(labels);
        m
    }

    #[test]
    fn argo_rules() {
        // R16, R17
        let plain = mutation(&[], &[]);
        assert!(!plain.argo_synced() && !plain.variants_read_only());
        let tracked = mutation(
            &[(ARGO_TRACKING_ID, "app:neiam.org/Mutation:default/web")],
            &[],
        );
        assert!(tracked.argo_synced() && tracked.variants_read_only());
        let labelled = mutation(&[], &[(ARGO_INSTANCE_LABEL, "app")]);
        assert!(labelled.argo_synced() && labelled.variants_read_only());
        let runtime = mutation(&[(ARGO_TRACKING_ID, "x"), (RUNTIME_VARIANTS, "true")], &[]);
        assert!(runtime.argo_synced() && !runtime.variants_read_only());
        let not_true = mutation(&[(ARGO_TRACKING_ID, "x"), (RUNTIME_VARIANTS, "yes")], &[]);
        assert!(not_true.variants_read_only());
    }
}
