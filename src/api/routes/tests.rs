//! The routing table's tests (R19, R39).

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
        id: None,
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
    let d = |id| Params {
        ns: "ns",
        name: Some("web"),
        label: None,
        id: Some(id),
    };
    assert_eq!(
        found(Method::POST, &format!("{base}/web/devices")),
        Some((Action::EnrollDevice, p(Some("web"), None)))
    );
    assert_eq!(
        found(Method::DELETE, &format!("{base}/web/devices/board-8")),
        Some((Action::RemoveDevice, d("board-8")))
    );
    assert_eq!(
        found(Method::POST, &format!("{base}/web/devices/board-8/token")),
        Some((Action::RotateToken, d("board-8")))
    );
    assert_eq!(
        found(Method::GET, &format!("{base}/web/devices/board-8/poll")),
        Some((Action::Poll, d("board-8")))
    );
    for unknown in [
        "/",
        "/api/v1/namespaces/ns",
        "/api/v1/namespaces//mutations",
        "/api/v1/namespaces/ns/deployments",
        "/api/v1/namespaces/ns/mutations/",
        "/api/v1/namespaces/ns/mutations/web/variants/beta/extra",
        "/api/v1/namespaces/ns/mutations/web/devices/board-8/other",
        "/api/v1/namespaces/ns/mutations/web/devices/board-8/poll/x",
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
            .replace("{label}", "beta")
            .replace("{id}", "board-8");
        assert!(
            matches!(resolve(&route.method, &path), Resolved::Found(r, _) if std::ptr::eq(r, route)),
            "{} {}",
            route.method,
            route.path
        );
        // the shape is the template's
        assert_eq!(
            shape_of(&path).map(|(shape, _)| shape),
            Some(route.shape),
            "{}",
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
