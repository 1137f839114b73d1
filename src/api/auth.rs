//! Who is calling (R20). Every `/api` request needs `Authorization: Bearer <token>`:
//! the admin token (`MUTANT_API_TOKEN`) allows everything; a Mutation's own token (key `token`
//! of its Secret `<name>-secret`, accepted only while that Secret is controlled by the
//! Mutation) allows only that Mutation's GET and its variants, or with `spec.devices` only the
//! enrollment of devices; a device's token (its SHA-256 among those of Secret
//! `<name>-devices`) only that device's record and its own variant (R39). Tokens are compared
//! in constant time and never logged or returned. Everything is read from the operator's caches, and no
//! Secret outside the operator's own is ever cached; only a token this replica cannot check
//! yet makes the caller (`api::handle`) ask the API server, once and within a budget, whether
//! its caches lag (`fresh.rs`).

use hyper::{HeaderMap, header::AUTHORIZATION};
use kube::runtime::reflector::ObjectRef;

use super::routes::{Access, Action};
use crate::{
    cache::Caches,
    config::Secret as Token,
    crd::Mutation,
    variant::{
        devices::{constant_time_eq, devices_secret_name},
        is_controlled_by, secret_name,
    },
};

/// The one body of every 401, whatever the reason, so a Mutation's token cannot probe for
/// other Mutations.
pub const UNAUTHORIZED: &str = "unauthorized: this request needs a valid bearer token";

/// Who the caller is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Caller {
    /// The admin token, or auth turned off.
    Admin,
    /// The token of Mutation `name` in namespace `namespace`.
    Mutation {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// The token of device `id` of Mutation `name` (R39), which uses variant `variant`.
    Device {
        /// The Mutation's namespace.
        namespace: String,
        /// The Mutation's name.
        name: String,
        /// The device's id.
        id: String,
        /// The label of its variant.
        variant: String,
    },
}

impl Caller {
    /// Whose share of the buffered bytes the caller's requests hold (R44).
    pub fn budget_key(&self) -> crate::http::Key {
        match self {
            Caller::Admin => std::sync::Arc::from("admin"),
            Caller::Mutation { namespace, name } => {
                crate::http::key_of(&["token ", namespace, "/", name])
            }
            Caller::Device {
                namespace,
                name,
                id,
                ..
            } => crate::http::key_of(&["device ", namespace, "/", name, "/", id]),
        }
    }

    /// Whether the caller may act on Mutation `namespace/name` (its GET and its variants).
    pub fn may_use(&self, namespace: &str, name: &str) -> bool {
        match self {
            Caller::Admin => true,
            Caller::Mutation {
                namespace: ns,
                name: n,
            }
            | Caller::Device {
                namespace: ns,
                name: n,
                ..
            } => ns == namespace && n == name,
        }
    }
}

/// Why a caller may not call a route: 401 (docs/api.md's answer for a Mutation's token on an
/// admin route) or 403 naming what was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// 401.
    Unauthorized,
    /// 403, with what was refused.
    Forbidden(String),
}

/// What the Mutation's token is with `spec.devices` set.
pub const ENROLLMENT_KEY_ONLY: &str = "with spec.devices set, the Mutation's token is an \
    enrollment key: it may enroll devices (POST .../devices) and nothing else";

/// Whether `caller` may call a route of `access` doing `action` with path parameters
/// `label` and `id` (R20, R39); `devices_on`: the Mutation has `spec.devices`.
pub fn permits(
    caller: &Caller,
    access: Access,
    action: Action,
    label: Option<&str>,
    id: Option<&str>,
    devices_on: bool,
) -> Result<(), Denied> {
    let forbidden = |what: String| Err(Denied::Forbidden(what));
    match caller {
        Caller::Admin if access == Access::DeviceOnly => forbidden(
            "only the device's own token polls: a poll is that device's heartbeat".to_owned(),
        ),
        Caller::Admin => Ok(()),
        Caller::Mutation { .. } => match access {
            Access::Admin => Err(Denied::Unauthorized),
            Access::Enroll => Ok(()),
            Access::MutationToken if devices_on => forbidden(ENROLLMENT_KEY_ONLY.to_owned()),
            Access::MutationToken => Ok(()),
            Access::Device | Access::DeviceOnly => forbidden(
                "the Mutation's token does not reach a device: use the device's own token"
                    .to_owned(),
            ),
        },
        Caller::Device {
            id: own, variant, ..
        } => {
            let refused = |what: &str| {
                forbidden(format!(
                    "device {own:?}'s token reaches only its own record, its variant \
                     {variant:?}, that variant's Service and its screen: {what} is refused"
                ))
            };
            match (access, action) {
                (Access::Device | Access::DeviceOnly, _) if id == Some(own.as_str()) => Ok(()),
                (Access::Device | Access::DeviceOnly, _) => {
                    refused(&format!("device {:?}", id.unwrap_or_default()))
                }
                // Whether it may scale its variant is the handler's to say, from who made it
                // (`variant::rights`).
                (
                    Access::MutationToken,
                    Action::GetVariant | Action::ScaleVariant | Action::VariantScreen,
                ) if label == Some(variant.as_str()) => Ok(()),
                (
                    Access::MutationToken,
                    Action::GetVariant | Action::ScaleVariant | Action::VariantScreen,
                ) => refused(&format!("variant {:?}", label.unwrap_or_default())),
                (Access::Enroll, _) => refused("enrolling a device"),
                (Access::MutationToken, Action::AddVariant) => refused("adding a variant"),
                (Access::MutationToken, Action::RemoveVariant) => refused("removing a variant"),
                (Access::MutationToken, Action::ListVariants) => refused("listing the variants"),
                (Access::MutationToken, Action::GetMutation) => refused("reading the Mutation"),
                _ => refused("this admin route"),
            }
        }
    }
}

/// How requests are authenticated.
#[derive(Clone, Debug)]
pub enum Auth {
    /// `MUTANT_API_INSECURE=true`: everyone is admin.
    Off,
    /// Bearer tokens; the admin token if one is configured.
    Tokens(Option<Token>),
}

/// The bearer token of a request, if it has a well-formed one.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    // The scheme and the space are checked as bytes; only the token is made text (a header
    // value is visible ASCII or not text at all).
    let value = headers.get(AUTHORIZATION)?.as_bytes();
    let (scheme, token) = value.split_at_checked(7)?;
    if !scheme.eq_ignore_ascii_case(b"bearer ") {
        return None;
    }
    let token = std::str::from_utf8(token.trim_ascii()).ok()?;
    (!token.is_empty() && token.bytes().all(|b| b.is_ascii_graphic())).then_some(token)
}

/// Whether `token` has the shape of a Mutation's token (64 lower-case hex characters, as the
/// controller makes them: `controller::secret`). Only such a token is worth asking the API
/// server about when this replica cannot check it (`fresh.rs`).
pub fn is_mutation_token(token: &str) -> bool {
    token.len() == 64
        && token
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

impl Auth {
    /// Identifies the caller of a request about namespace `namespace` and, if the route names
    /// one, Mutation `owner` as cached (the request looked it up once). `None` means 401.
    pub fn caller(
        &self,
        headers: &HeaderMap,
        caches: &Caches,
        namespace: &str,
        owner: Option<&Mutation>,
    ) -> Option<Caller> {
        let admin = match self {
            Auth::Off => return Some(Caller::Admin),
            Auth::Tokens(admin) => admin,
        };
        let token = bearer(headers)?;
        if admin
            .as_ref()
            .is_some_and(|a| constant_time_eq(a.expose().as_bytes(), token.as_bytes()))
        {
            return Some(Caller::Admin);
        }
        let owner = owner?;
        let name = owner.metadata.name.as_deref()?;
        let uid = owner.metadata.uid.as_deref()?;
        // One key for both Secrets, its name replaced: each look-up of the store takes a key
        // of its own strings.
        let mut key = ObjectRef::new("").within(namespace);
        key.name = secret_name(name);
        let secret = caches.secrets.get(&key)?;
        if !is_controlled_by(&secret.metadata, uid) {
            return None;
        }
        if let Some(expected) = secret.token.as_deref()
            && constant_time_eq(expected, token.as_bytes())
        {
            return Some(Caller::Mutation {
                namespace: namespace.to_string(),
                name: name.to_string(),
            });
        }
        // R39: a device's token, checked against the hashes of the Mutation's devices Secret,
        // while the Mutation has spec.devices.
        owner.spec.devices.as_ref()?;
        key.name = devices_secret_name(name);
        let devices = caches.secrets.get(&key)?;
        if !is_controlled_by(&devices.metadata, uid) {
            return None;
        }
        let registry = devices.devices.as_deref()?;
        let id = devices.by_hash.device_of(token)?;
        let variant = registry.devices.get(id)?.variant.clone();
        Some(Caller::Device {
            namespace: namespace.to_string(),
            name: name.to_string(),
            id: id.to_string(),
            variant,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn headers(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        h
    }

    #[test]
    fn bearer_tokens_are_read_strictly() {
        // R20
        assert_eq!(bearer(&headers("Bearer abc")), Some("abc"));
        assert_eq!(bearer(&headers("bearer abc")), Some("abc"));
        assert_eq!(bearer(&headers("Basic abc")), None);
        assert_eq!(bearer(&headers("Bearer ")), None);
        assert_eq!(bearer(&headers("Bearerabc")), None);
        assert_eq!(bearer(&HeaderMap::new()), None);
    }

    // R34: only the shape of a Mutation token is checked with the API server.
    #[test]
    fn mutation_tokens_have_one_shape() {
        assert!(is_mutation_token(&"0123456789abcdef".repeat(4)));
        assert!(!is_mutation_token(&"0123456789ABCDEF".repeat(4)));
        assert!(!is_mutation_token(&"0123456789abcdef".repeat(3)));
        assert!(!is_mutation_token(&format!("{}g", "a".repeat(63))));
        assert!(!is_mutation_token(""));
    }

    // R20: tokens and hashes of every length compared, a difference anywhere found
    #[test]
    fn constant_time_comparison() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert!(!constant_time_eq(b"", b"a"));
        assert!(constant_time_eq(b"", b""));
        for len in 1..=70 {
            let token: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            assert!(constant_time_eq(&token, &token.clone()), "length {len}");
            for at in 0..len {
                let mut other = token.clone();
                other[at] ^= 0x01;
                assert!(!constant_time_eq(&token, &other), "length {len}, byte {at}");
            }
        }
    }

    #[test]
    fn a_mutation_token_reaches_only_its_mutation() {
        let caller = Caller::Mutation {
            namespace: "ns".into(),
            name: "web".into(),
        };
        assert!(caller.may_use("ns", "web"));
        assert!(!caller.may_use("ns", "other"));
        assert!(!caller.may_use("other", "web"));
        assert!(Caller::Admin.may_use("any", "thing"));
    }

    // R20, R39: what each credential may call, with and without spec.devices
    #[test]
    fn each_credential_reaches_what_it_may() {
        let token = Caller::Mutation {
            namespace: "ns".into(),
            name: "web".into(),
        };
        let device = Caller::Device {
            namespace: "ns".into(),
            name: "web".into(),
            id: "board-8".into(),
            variant: "radxa".into(),
        };
        let allowed = |caller: &Caller, action: Action, label, id, on| {
            let route = crate::api::ROUTES
                .iter()
                .find(|r| r.action == action)
                .unwrap_or_else(|| panic!("{action:?}"));
            permits(caller, route.access, action, label, id, on)
        };
        let forbidden = |r: Result<(), Denied>| matches!(r, Err(Denied::Forbidden(_)));
        // the admin: everything but a device's heartbeat
        assert_eq!(
            allowed(&Caller::Admin, Action::ListDevices, None, None, true),
            Ok(())
        );
        assert!(forbidden(allowed(
            &Caller::Admin,
            Action::Poll,
            None,
            Some("board-8"),
            true
        )));
        // a Mutation's token without spec.devices: the rights docs/api.md gives it
        assert_eq!(
            allowed(&token, Action::AddVariant, None, None, false),
            Ok(())
        );
        assert_eq!(
            allowed(&token, Action::ListMutations, None, None, false),
            Err(Denied::Unauthorized)
        );
        // with spec.devices: enrollment only
        assert_eq!(
            allowed(&token, Action::EnrollDevice, None, None, true),
            Ok(())
        );
        for action in [
            Action::AddVariant,
            Action::GetMutation,
            Action::ScaleVariant,
        ] {
            assert_eq!(
                allowed(&token, action, Some("radxa"), None, true),
                Err(Denied::Forbidden(ENROLLMENT_KEY_ONLY.to_owned())),
                "{action:?}"
            );
        }
        assert!(forbidden(allowed(
            &token,
            Action::GetDevice,
            None,
            Some("board-8"),
            true
        )));
        // a device: its own record and variant, nothing else
        for action in [
            Action::GetDevice,
            Action::RemoveDevice,
            Action::RotateToken,
            Action::Poll,
        ] {
            assert_eq!(
                allowed(&device, action, None, Some("board-8"), true),
                Ok(())
            );
            let other = allowed(&device, action, None, Some("board-9"), true);
            assert!(
                matches!(&other, Err(Denied::Forbidden(m)) if m.contains("device \"board-9\"")),
                "{other:?}"
            );
        }
        for action in [Action::GetVariant, Action::ScaleVariant] {
            assert_eq!(allowed(&device, action, Some("radxa"), None, true), Ok(()));
            assert!(forbidden(allowed(
                &device,
                action,
                Some("admin-only"),
                None,
                true
            )));
        }
        for action in [
            Action::RemoveVariant,
            Action::AddVariant,
            Action::ListVariants,
            Action::GetMutation,
            Action::EnrollDevice,
            Action::ListDevices,
            Action::DeleteMutation,
        ] {
            assert!(
                forbidden(allowed(&device, action, Some("radxa"), None, true)),
                "{action:?}"
            );
        }
        assert!(device.may_use("ns", "web") && !device.may_use("ns", "other"));
    }
}
