//! R30, R50: the leader renews its Lease with one request per renewal, a replace on
//! the resourceVersion of its own last write, and no read before it: 12 requests a minute at
//! the default 15 s duration, where a read before every write made 24. Counted in the API
//! server's audit log.

use std::time::Duration;

use super::*;

#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn the_leader_renews_without_reading_the_lease() {
    let ns = TestNamespace::new("lease-requests").await;
    common::install_crds(&ns.client).await;
    let operator = Operator::start_with(&ns.name, &[("POD_NAMESPACE", &ns.name)]);
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = ns.api();
    wait_for("a leader", CONVERGE, || async {
        let lease = leases
            .get_opt("mutantops-leader")
            .await
            .map_err(|e| e.to_string())?;
        lease
            .and_then(|l| l.spec?.holder_identity)
            .ok_or_else(|| "no holder yet".to_string())
    })
    .await;
    let audit = audit_log();
    let offset = log_size(&audit);
    // The audit log is written as each request completes, beside the answer: the create that
    // made the Lease may land after `offset`. Counted are the requests received from now on.
    let since = k8s_openapi::jiff::Timestamp::now();
    // Three renewals at least (every 5 s).
    tokio::time::sleep(Duration::from_secs(16)).await;
    let requests: Vec<String> = audit_events(&audit, offset)
        .into_iter()
        .filter(|e| {
            e["objectRef"]["resource"] == "leases"
                && e["objectRef"]["namespace"] == ns.name.as_str()
                && e["requestReceivedTimestamp"]
                    .as_str()
                    .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
                    .is_some_and(|t| t >= since)
        })
        .map(|e| e["verb"].as_str().unwrap_or("").to_string())
        .collect();
    println!("the leader's Lease requests in 16 s: {requests:?}");
    let updates = requests.iter().filter(|v| *v == "update").count();
    assert!(
        (3..=4).contains(&updates),
        "renewals every 5 s: {requests:?}"
    );
    assert_eq!(
        requests.len(),
        updates,
        "nothing but the renewals: {requests:?}"
    );
    drop(operator);
}
