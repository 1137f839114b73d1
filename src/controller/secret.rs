//! The Mutation's Secret `<name>-secret` (R14, R15): a random token, created once, owned by
//! the Mutation (so garbage collection deletes it with the Mutation), never rewritten. A Secret
//! of that name that the Mutation does not control is left alone and reported.

use std::collections::BTreeMap;

use k8s_openapi::{ByteString, api::core::v1::Secret};
use kube::{Api, ResourceExt, runtime::reflector::ObjectRef};

use super::context::Context;
use crate::{
    Result,
    variant::{Owner, TOKEN_KEY, is_controlled_by, secret_name},
};

/// What became of the Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretState {
    /// The Mutation's own Secret exists (found or just created).
    Owned { created: bool },
    /// A Secret of that name exists and is not controlled by this Mutation.
    Foreign,
}

/// Makes sure the Mutation has its Secret. Reads the cache first, so a steady state makes no
/// request. On a cache miss it creates the Secret without asking first (a new Mutation's name
/// is free, and one request does it); only when the server answers that the name is taken
/// (409) is the Secret looked up, metadata only, so a foreign Secret's data is never read.
pub async fn ensure(ctx: &Context, owner: &Owner) -> Result<SecretState> {
    let name = secret_name(&owner.name);
    let key = ObjectRef::new(&name).within(&owner.namespace);
    if let Some(cached) = ctx.secrets.as_ref().and_then(|store| store.get(&key))
        && is_controlled_by(&cached.metadata, &owner.uid)
    {
        return Ok(SecretState::Owned { created: false });
    }
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &owner.namespace);
    // Two rounds at most: a Secret deleted between the 409 and the look-up is created again
    // once.
    for _ in 0..2 {
        match ctx.store.create_secret(&new_secret(owner, &name)?).await {
            Ok(created) => {
                tracing::info!(namespace = %owner.namespace, secret = %created.name_any(), "created the Mutation's Secret");
                return Ok(SecretState::Owned { created: true });
            }
            Err(err) if crate::already_exists(&err) => {}
            Err(err) => return Err(err.into()),
        }
        if let Some(existing) = api.get_metadata_opt(&name).await? {
            return Ok(if is_controlled_by(&existing.metadata, &owner.uid) {
                SecretState::Owned { created: false }
            } else {
                SecretState::Foreign
            });
        }
    }
    Ok(SecretState::Foreign)
}

/// The Secret object: [`Owner::owned_metadata`], immutable so not even the operator can rewrite the
/// token.
fn new_secret(owner: &Owner, name: &str) -> Result<Secret> {
    Ok(Secret {
        metadata: owner.owned_metadata(name),
        type_: Some("Opaque".to_string()),
        immutable: Some(true),
        data: Some(BTreeMap::from([(
            TOKEN_KEY.to_string(),
            ByteString(crate::store::new_token()?.into_bytes()),
        )])),
        ..Secret::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_64_lowercase_hex_and_differ() {
        // R14
        let a = crate::store::new_token().unwrap();
        let b = crate::store::new_token().unwrap();
        assert_eq!(a.len(), 64);
        assert!(
            a.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()),
            "{a}"
        );
        assert_ne!(a, b);
    }

    #[test]
    fn secret_is_named_after_the_mutation() {
        assert_eq!(secret_name("browser-snap"), "browser-snap-secret");
    }
}
