//! The routing table of the HTTP API (R19): every route once, as method, path template, who
//! may call it, what it does and its summary. Routing, the `Allow` header of a 405, the
//! admin check and the OpenAPI document (docs/api.yaml, checked by tests/openapi.rs) all read
//! this one table.

use hyper::Method;

/// Who may call a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Only the admin token (`MUTANT_API_TOKEN`).
    Admin,
    /// The admin, or the token of the Mutation named in the path.
    MutationToken,
}

/// What a route does: one handler each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// `mutations::list`.
    ListMutations,
    /// `mutations::create`.
    CreateMutation,
    /// `mutations::get`.
    GetMutation,
    /// `mutations::delete`.
    DeleteMutation,
    /// `variants::list`.
    ListVariants,
    /// `variants::add`.
    AddVariant,
    /// `variants::get`.
    GetVariant,
    /// `variants::scale`.
    ScaleVariant,
    /// `variants::remove`.
    RemoveVariant,
}

/// One route of the table.
#[derive(Debug, PartialEq, Eq)]
pub struct Route {
    /// The HTTP method.
    pub method: Method,
    /// The path, with `{ns}`, `{name}` and `{label}` for its parameters.
    pub path: &'static str,
    /// Who may call it.
    pub access: Access,
    /// What it does.
    pub action: Action,
    /// One line for the OpenAPI document.
    pub summary: &'static str,
}

const MUTATIONS: &str = "/api/v1/namespaces/{ns}/mutations";
const MUTATION: &str = "/api/v1/namespaces/{ns}/mutations/{name}";
const VARIANTS: &str = "/api/v1/namespaces/{ns}/mutations/{name}/variants";
const VARIANT: &str = "/api/v1/namespaces/{ns}/mutations/{name}/variants/{label}";

const fn route(
    method: Method,
    path: &'static str,
    access: Access,
    action: Action,
    summary: &'static str,
) -> Route {
    Route {
        method,
        path,
        access,
        action,
        summary,
    }
}

/// Every route.
pub static ROUTES: &[Route] = &[
    route(
        Method::GET,
        MUTATIONS,
        Access::Admin,
        Action::ListMutations,
        "list the Mutations of a namespace (admin)",
    ),
    route(
        Method::POST,
        MUTATIONS,
        Access::Admin,
        Action::CreateMutation,
        "create a Mutation (admin)",
    ),
    route(
        Method::GET,
        MUTATION,
        Access::MutationToken,
        Action::GetMutation,
        "get a Mutation",
    ),
    route(
        Method::DELETE,
        MUTATION,
        Access::Admin,
        Action::DeleteMutation,
        "delete a Mutation (admin)",
    ),
    route(
        Method::GET,
        VARIANTS,
        Access::MutationToken,
        Action::ListVariants,
        "list its variants",
    ),
    route(
        Method::POST,
        VARIANTS,
        Access::MutationToken,
        Action::AddVariant,
        "add a variant",
    ),
    route(
        Method::GET,
        VARIANT,
        Access::MutationToken,
        Action::GetVariant,
        "get a variant",
    ),
    route(
        Method::PATCH,
        VARIANT,
        Access::MutationToken,
        Action::ScaleVariant,
        "scale a variant",
    ),
    route(
        Method::DELETE,
        VARIANT,
        Access::MutationToken,
        Action::RemoveVariant,
        "remove a variant",
    ),
];

/// The parameters of a routed path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Params<'a> {
    /// `{ns}`.
    pub ns: &'a str,
    /// `{name}`, in the routes below a Mutation.
    pub name: Option<&'a str>,
    /// `{label}`, in the routes of one variant.
    pub label: Option<&'a str>,
}

/// What the table says of a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Resolved<'a> {
    /// No route has this path: 404.
    NotFound,
    /// Routes have this path, not with this method: 405 with these methods.
    MethodNotAllowed(Vec<Method>),
    /// This route, with these parameters.
    Found(&'static Route, Params<'a>),
}

/// Finds the route of `method` and `path`.
pub fn resolve<'a>(method: &Method, path: &'a str) -> Resolved<'a> {
    let mut allowed = Vec::new();
    for route in ROUTES {
        if let Some(params) = params(route.path, path) {
            if route.method == *method {
                return Resolved::Found(route, params);
            }
            allowed.push(route.method.clone());
        }
    }
    if allowed.is_empty() {
        Resolved::NotFound
    } else {
        Resolved::MethodNotAllowed(allowed)
    }
}

/// The parameters of `path` when it has the shape of `template`: the same segments, each
/// literal one equal, no parameter empty.
fn params<'a>(template: &str, path: &'a str) -> Option<Params<'a>> {
    let mut found = Params::default();
    let mut segments = path.split('/');
    for expected in template.split('/') {
        let segment = segments.next()?;
        match expected {
            "{ns}" | "{name}" | "{label}" if segment.is_empty() => return None,
            "{ns}" => found.ns = segment,
            "{name}" => found.name = Some(segment),
            "{label}" => found.label = Some(segment),
            literal if literal != segment => return None,
            _ => {}
        }
    }
    segments.next().is_none().then_some(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    // R19
    #[test]
    fn paths_resolve_to_their_route_and_parameters() {
        let base = "/api/v1/namespaces/ns/mutations";
        fn found(method: Method, path: &str) -> Option<(Action, Params<'_>)> {
            match resolve(&method, path) {
                Resolved::Found(route, params) => Some((route.action, params)),
                _ => None,
            }
        }
        let p = |name: Option<&'static str>, label: Option<&'static str>| Params {
            ns: "ns",
            name,
            label,
        };
        assert_eq!(
            found(Method::GET, base),
            Some((Action::ListMutations, p(None, None)))
        );
        assert_eq!(
            found(Method::DELETE, &format!("{base}/web")),
            Some((Action::DeleteMutation, p(Some("web"), None)))
        );
        assert_eq!(
            found(Method::POST, &format!("{base}/web/variants")),
            Some((Action::AddVariant, p(Some("web"), None)))
        );
        assert_eq!(
            found(Method::PATCH, &format!("{base}/web/variants/beta")),
            Some((Action::ScaleVariant, p(Some("web"), Some("beta"))))
        );
        for unknown in [
            "/",
            "/api/v1/namespaces/ns",
            "/api/v1/namespaces//mutations",
            "/api/v1/namespaces/ns/deployments",
            "/api/v1/namespaces/ns/mutations/",
            "/api/v1/namespaces/ns/mutations/web/variants/beta/extra",
            "/api/v2/namespaces/ns/mutations",
        ] {
            assert_eq!(
                resolve(&Method::GET, unknown),
                Resolved::NotFound,
                "{unknown}"
            );
        }
    }

    // R19: a 405 lists exactly the methods of that path
    #[test]
    fn other_methods_are_not_allowed_and_listed() {
        let path = "/api/v1/namespaces/ns/mutations/web/variants/beta";
        assert_eq!(
            resolve(&Method::POST, path),
            Resolved::MethodNotAllowed(vec![Method::GET, Method::PATCH, Method::DELETE])
        );
        assert_eq!(
            resolve(&Method::PUT, "/api/v1/namespaces/ns/mutations"),
            Resolved::MethodNotAllowed(vec![Method::GET, Method::POST])
        );
    }

    #[test]
    fn every_route_is_there_once_and_says_who_may_call_it() {
        for (i, route) in ROUTES.iter().enumerate() {
            let path = route
                .path
                .replace("{ns}", "ns")
                .replace("{name}", "web")
                .replace("{label}", "beta");
            assert!(
                matches!(resolve(&route.method, &path), Resolved::Found(r, _) if std::ptr::eq(r, route)),
                "{} {}",
                route.method,
                route.path
            );
            assert_eq!(
                route.summary.ends_with("(admin)"),
                route.access == Access::Admin,
                "{}: the summary says who may call it",
                route.summary
            );
            for other in &ROUTES[i + 1..] {
                assert!(
                    (other.method.clone(), other.path) != (route.method.clone(), route.path)
                        && other.action != route.action,
                    "{} {} twice",
                    route.method,
                    route.path
                );
            }
        }
    }
}
