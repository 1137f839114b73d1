//! The OpenAPI document of the HTTP API, `docs/api.yaml`, stays true to the code (R19, R20).
//! Needs no cluster. It checks that:
//!
//! - the document is OpenAPI 3.0.3 and its `info.version` is the crate's version;
//! - its operations are exactly the routes of [`mutantops::api::ROUTES`]: every (method, path)
//!   of the table is in `paths`, and every operation in `paths` is in the table;
//! - each operation's `summary` is the table's;
//! - each operation declares exactly the path parameters of its template;
//! - each operation lists 401 among its responses (every `/api` request needs a token).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a failed step must fail the test"
)]

use std::collections::{BTreeMap, BTreeSet};

use mutantops::api::ROUTES;
use serde_json::Value;

/// The operation keys of an OpenAPI 3.0 path item.
const METHODS: &[&str] = &[
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// `docs/api.yaml`, parsed.
fn document() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/api.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Follows a local `$ref` (`#/components/...`), if `value` is one.
fn resolve<'a>(doc: &'a Value, value: &'a Value) -> &'a Value {
    let Some(reference) = value.get("$ref").and_then(Value::as_str) else {
        return value;
    };
    let pointer = reference
        .strip_prefix("#/")
        .unwrap_or_else(|| panic!("only local references are expected, not {reference}"));
    let target = pointer
        .split('/')
        .try_fold(doc, |node, segment| node.get(segment))
        .unwrap_or_else(|| panic!("{reference} does not resolve"));
    resolve(doc, target)
}

/// Every operation of the document: (lower-case method, path) → (path item, operation).
fn operations(doc: &Value) -> BTreeMap<(String, String), (&Value, &Value)> {
    let paths = doc
        .get("paths")
        .and_then(Value::as_object)
        .expect("the document has `paths`");
    let mut found = BTreeMap::new();
    for (path, item) in paths {
        let fields = item
            .as_object()
            .unwrap_or_else(|| panic!("{path}: not a path item"));
        for (key, operation) in fields {
            let method = key.to_lowercase();
            if METHODS.contains(&method.as_str()) {
                let previous = found.insert((method.clone(), path.clone()), (item, operation));
                assert!(previous.is_none(), "{method} {path} is there twice");
            }
        }
    }
    found
}

/// The table's routes as (lower-case method, path template).
fn routes() -> BTreeSet<(String, String)> {
    ROUTES
        .iter()
        .map(|r| (r.method.as_str().to_lowercase(), r.path.to_string()))
        .collect()
}

#[test]
fn the_version_is_the_crates() {
    let doc = document();
    assert_eq!(doc["openapi"].as_str(), Some("3.0.3"), "openapi");
    assert_eq!(
        doc["info"]["version"].as_str(),
        Some(env!("CARGO_PKG_VERSION")),
        "info.version must be the version in Cargo.toml"
    );
}

#[test]
fn the_operations_are_exactly_the_routes() {
    let doc = document();
    let documented: BTreeSet<(String, String)> = operations(&doc).into_keys().collect();
    let routes = routes();
    assert_eq!(routes.len(), ROUTES.len(), "ROUTES has a route twice");
    let missing: Vec<_> = routes.difference(&documented).collect();
    let extra: Vec<_> = documented.difference(&routes).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "docs/api.yaml is out of date: routes missing from it {missing:?}, operations it has \
         that ROUTES does not {extra:?}"
    );
}

#[test]
fn each_summary_is_the_tables() {
    let doc = document();
    let operations = operations(&doc);
    for route in ROUTES {
        let (method, path, summary) = (&route.method, route.path, &route.summary);
        let key = (method.as_str().to_lowercase(), path.to_string());
        let Some((_, operation)) = operations.get(&key) else {
            continue; // reported by the_operations_are_exactly_the_routes
        };
        assert_eq!(
            operation["summary"].as_str(),
            Some(*summary),
            "{method} {path}: summary"
        );
    }
}

#[test]
fn each_operation_declares_the_parameters_of_its_path() {
    let doc = document();
    for ((method, path), (item, operation)) in operations(&doc) {
        let in_template: BTreeSet<&str> = path
            .split('/')
            .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
            .collect();
        let declared: BTreeSet<&str> = [item, operation]
            .into_iter()
            .filter_map(|node| node.get("parameters")?.as_array())
            .flatten()
            .map(|p| resolve(&doc, p))
            .filter(|p| p["in"].as_str() == Some("path"))
            .map(|p| {
                assert_eq!(
                    p["required"].as_bool(),
                    Some(true),
                    "{method} {path}: path parameters are required"
                );
                p["name"].as_str().expect("a parameter has a name")
            })
            .collect();
        assert_eq!(declared, in_template, "{method} {path}: path parameters");
    }
}

#[test]
fn each_operation_lists_401() {
    let doc = document();
    for ((method, path), (_, operation)) in operations(&doc) {
        // Keys read as text: `'401'` and `401` are the same response code.
        let codes: BTreeSet<String> = operation
            .get("responses")
            .and_then(Value::as_object)
            .unwrap_or_else(|| panic!("{method} {path}: no responses"))
            .keys()
            .cloned()
            .collect();
        assert!(
            codes.contains("401"),
            "{method} {path}: every /api request needs a token, so 401 must be listed \
             (it has {codes:?})"
        );
    }
}
