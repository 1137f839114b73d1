//! Who is calling (R20). Every `/api` request needs `Authorization: Bearer <token>`:
//! the admin token (`MUTANT_API_TOKEN`) allows everything; a Mutation's own token (key `token`
//! of its Secret `<name>-secret`, accepted only while that Secret is controlled by the
//! Mutation) allows only that Mutation's GET and its variants. Tokens are compared in constant
//! time and never logged or returned. Everything is read from the operator's caches, and no
//! Secret outside the operator's own is ever cached; only a token this replica cannot check
//! yet makes the caller (`api::handle`) ask the API server, once and within a budget, whether
//! its caches lag (`fresh.rs`).

use hyper::{HeaderMap, header::AUTHORIZATION};
use kube::runtime::reflector::ObjectRef;
use subtle::ConstantTimeEq as _;

use crate::{
    cache::Caches,
    config::Secret as Token,
    variant::{is_controlled_by, secret_name},
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
}

impl Caller {
    /// Whether the caller may act on Mutation `namespace/name` (its GET and its variants).
    pub fn may_use(&self, namespace: &str, name: &str) -> bool {
        match self {
            Caller::Admin => true,
            Caller::Mutation {
                namespace: ns,
                name: n,
            } => ns == namespace && n == name,
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
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
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

/// Compares two byte strings in time that depends only on their lengths (subtle's `ct_eq`).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.ct_eq(b).into()
}

impl Auth {
    /// Identifies the caller of a request about namespace `namespace` and, if the route names
    /// one, Mutation `mutation`. `None` means 401.
    pub fn caller(
        &self,
        headers: &HeaderMap,
        caches: &Caches,
        namespace: &str,
        mutation: Option<&str>,
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
        let name = mutation?;
        let owner = caches
            .mutations
            .get(&ObjectRef::new(name).within(namespace))?;
        let uid = owner.metadata.uid.as_deref()?;
        let secret = caches
            .secrets
            .get(&ObjectRef::new(&secret_name(name)).within(namespace))?;
        if !is_controlled_by(&secret.metadata, uid) {
            return None;
        }
        let expected = secret.token.as_deref()?;
        constant_time_eq(expected, token.as_bytes()).then(|| Caller::Mutation {
            namespace: namespace.to_string(),
            name: name.to_string(),
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

    // Issue 25, item 5: only the shape of a Mutation token is checked with the API server.
    #[test]
    fn mutation_tokens_have_one_shape() {
        assert!(is_mutation_token(&"0123456789abcdef".repeat(4)));
        assert!(!is_mutation_token(&"0123456789ABCDEF".repeat(4)));
        assert!(!is_mutation_token(&"0123456789abcdef".repeat(3)));
        assert!(!is_mutation_token(&format!("{}g", "a".repeat(63))));
        assert!(!is_mutation_token(""));
    }

    #[test]
    fn constant_time_comparison() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert!(!constant_time_eq(b"", b"a"));
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
}
