//! What the tests that read the repository's own files share: where it is, reading a file
//! of it, and the operator's metric names in a PromQL expression. A module of its own (not
//! part of `common`), so the tests that need only this include only this.
#![allow(dead_code, reason = "each test that includes this uses part of it")]

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
};

/// The repository's root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The text of `path`, relative to the repository's root; a missing file fails the test,
/// naming it.
pub fn read(path: &str) -> String {
    let path = repo().join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every file under `dir` (recursively, sorted) that `keep` keeps.
pub fn files_under(dir: &Path, keep: &dyn Fn(&Path) -> bool) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            files.extend(files_under(&path, keep));
        } else if keep(&path) {
            files.push(path);
        }
    }
    files
}

/// The operator's exposition (OpenMetrics), as the library renders it, with a Mutation of one
/// device and a rollout at its second step in its caches, so the device and rollout families
/// have series too.
pub fn exposition() -> String {
    let metrics = mutantops::metrics::Metrics::new();
    let (mutant_deployments, _) = kube::runtime::reflector::store();
    let (mutations, mut writer) = kube::runtime::reflector::store();
    let fleet: mutantops::crd::Mutation = serde_json::from_value(serde_json::json!({
        "apiVersion": "neiam.org/v1", "kind": "Mutation",
        "metadata": {"name": "fleet", "namespace": "displays", "uid": "u-1"},
        "spec": {"deployment": {}, "devices": {"enrollment": "Open"}},
        "status": {"summary": "", "devices": [{
            "id": "lilygo-1", "variant": "lilygo", "enrolledAt": "2026-12-01T00:00:00Z",
            "lastSeen": "2026-12-03T00:00:00Z", "state": "Online",
            "reported": {"batteryMillivolts": 3910, "rssi": -61}}],
            "rollout": {"revision": "5e1f0c2a9b", "previousRevision": "77aa01bc3d", "step": 1,
                        "stepStarted": "2026-12-03T00:00:00Z", "updated": 1,
                        "phase": "Progressing"}}
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(fleet));
    metrics.set_stores(mutant_deployments, mutations);
    metrics.encode()
}

/// The operator's metric names (`mutant_operator_*`, `mutantops_*`, `process_*`) in a PromQL
/// expression,
/// outside quoted strings (label values).
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut unquoted = String::with_capacity(expr.len());
    let mut quote = None;
    for c in expr.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if matches!(c, '"' | '\'' | '`') => quote = Some(c),
            None => unquoted.push(c),
        }
    }
    unquoted
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|word| {
            word.starts_with("mutant_operator_")
                || word.starts_with("mutantops_")
                || word.starts_with("process_")
        })
        .map(str::to_string)
        .collect()
}
