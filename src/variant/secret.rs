//! What the caches keep of a Mutation's Secret: [`CachedSecret`], its metadata compact and
//! its token, nothing else (the k8s-openapi Secret is a full `ObjectMeta`, a map of its data
//! and its labels' map: about 2 KiB each).

use k8s_openapi::api::core::v1::Secret;

use super::devices::Registry;
use super::meta::{HasMeta, Meta, MetaView, kube_type};
use super::names::TOKEN_KEY;
use super::registry::ByHash;

/// A Mutation's Secret as the caches keep it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CachedSecret {
    /// Its metadata: whose it is.
    pub metadata: Meta,
    /// `data.token`, the Mutation's API token, when it has one.
    pub token: Option<Box<[u8]>>,
    /// The devices and their token hashes, when this is a Mutation's devices Secret
    /// (`<name>-devices`) with any.
    pub devices: Option<Box<Registry>>,
    /// Its devices by the hashes of their tokens, for the token check (R39).
    pub by_hash: ByHash,
    /// The screen, when this is one of a Mutation's screen Secrets (R53).
    pub screen: Option<std::sync::Arc<super::screen::Screen>>,
}

impl CachedSecret {
    /// Parts a Secret the watch decoded into what is kept, and the Secret (without its data)
    /// for the controller's feed.
    pub fn split(mut secret: Secret) -> (CachedSecret, Secret) {
        let mut data = secret.data.take().unwrap_or_default();
        let token = data
            .remove(TOKEN_KEY)
            .map(|token| token.0.into_boxed_slice());
        let screen = super::screen::Screen::from_secret(&secret, &mut data);
        let registry = Registry::from_data(&data);
        let by_hash = ByHash::of(&registry);
        let devices = (registry != Registry::default()).then(|| Box::new(registry));
        let kept = CachedSecret {
            metadata: Meta::of(&secret.metadata),
            token,
            devices,
            by_hash,
            screen,
        };
        (kept, secret)
    }
}

impl HasMeta for CachedSecret {
    fn meta_view(&self) -> &dyn MetaView {
        &self.metadata
    }
}

kube_type!(lookup CachedSecret: "Secret", "", "v1", "v1", "secrets");

#[cfg(test)]
mod tests {
    use kube::runtime::reflector::Lookup;
    use serde_json::json;

    use super::*;

    // R14, R20: the token and the owner are kept, the rest is not
    #[test]
    fn a_cached_secret_keeps_its_token_and_owner() {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "web-secret", "namespace": "team", "uid": "s-1",
                "ownerReferences": [{"apiVersion": "neiam.org/v1", "kind": "Mutation",
                    "name": "web", "uid": "u-web", "controller": true}]},
            "data": {"token": "c2VjcmV0", "other": "eA=="}, "type": "Opaque"
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let (kept, passed) = CachedSecret::split(secret);
        assert_eq!(kept.token.as_deref(), Some(&b"secret"[..]));
        assert_eq!(kept.metadata.controller().map(|c| c.uid), Some("u-web"));
        assert_eq!(Lookup::name(&kept).as_deref(), Some("web-secret"));
        assert_eq!(passed.data, None);
        assert_eq!(passed.metadata.name.as_deref(), Some("web-secret"));
        let (none, _) = CachedSecret::split(Secret::default());
        assert_eq!(none.token, None);
    }
}
