//! Reading the API server's audit log (scripts/cluster enables it): the operator's requests,
//! and whether a converged operator stays quiet.

use std::io::{Read, Seek, SeekFrom};

use super::*;

/// The audit log of the local control plane.
pub fn audit_log() -> std::path::PathBuf {
    match std::env::var_os("MUTANTOPS_AUDIT_LOG") {
        Some(path) => path.into(),
        None => panic!(
            "this test reads the API server's audit log: run it through scripts/test, or set \
             MUTANTOPS_AUDIT_LOG to the audit log of the cluster in KUBECONFIG"
        ),
    }
}

pub fn log_size(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// The API server's audit events of the operator's completed requests (user agent
/// `mutantops/`) logged after `offset`.
pub fn audit_events(path: &std::path::Path, offset: u64) -> Vec<Value> {
    let mut file = std::fs::File::open(path).unwrap();
    file.seek(SeekFrom::Start(offset)).unwrap();
    let mut text = String::new();
    file.read_to_string(&mut text).unwrap();
    text.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|e| e["stage"] == "ResponseComplete")
        .filter(|e| {
            e["userAgent"]
                .as_str()
                .unwrap_or("")
                .starts_with("mutantops/")
        })
        .collect()
}

/// The operator's requests in `namespace` logged after `offset`, except watches and Lease
/// renewals, as "verb uri" lines.
pub fn operator_requests(path: &std::path::Path, offset: u64, namespace: &str) -> Vec<String> {
    audit_events(path, offset)
        .into_iter()
        .filter(|e| e["verb"] != "watch")
        .filter(|e| {
            e["requestURI"]
                .as_str()
                .unwrap_or("")
                .contains(&format!("/namespaces/{namespace}/"))
        })
        // The leader's Lease renewals are the one periodic write, and not a reconcile's.
        .filter(|e| {
            !e["requestURI"]
                .as_str()
                .unwrap_or("")
                .contains("/apis/coordination.k8s.io/")
        })
        .map(|e| {
            format!(
                "{} {}",
                e["verb"].as_str().unwrap_or(""),
                e["requestURI"].as_str().unwrap_or("")
            )
        })
        .collect()
}

/// How many reconciles the operator has logged.
pub fn reconciles(operator: &Operator) -> usize {
    operator.log_text().matches("reconciled").count()
}

/// Waits for a quiet moment: two seconds without a request from the operator in the fixture's
/// namespace. Returns the audit log's size at its end, to read what comes after.
pub async fn quiet_offset(f: &Fixture, audit: &std::path::Path) -> u64 {
    wait_for("the operator to fall quiet", CONVERGE, || async {
        let start = log_size(audit);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let requests = operator_requests(audit, start, &f.ns.name);
        if requests.is_empty() {
            Ok(log_size(audit))
        } else {
            Err(requests)
        }
    })
    .await
}

/// R12: waits until the operator has logged two reconciles more than `before`, gives it a
/// second more, and asserts that it made no request in the fixture's namespace after `offset`.
pub async fn assert_steady(f: &Fixture, audit: &std::path::Path, offset: u64, before: usize) {
    wait_for("the owners to be reconciled again", CONVERGE, || async {
        let after = reconciles(&f.operator);
        if after >= before + 2 {
            Ok(())
        } else {
            Err(after - before)
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let requests = operator_requests(audit, offset, &f.ns.name);
    assert!(
        requests.is_empty(),
        "a steady-state reconcile made requests: {requests:#?}"
    );
}
