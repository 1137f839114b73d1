//! R34: clients that open connections and send nothing. The operator runs
//! with 128 file descriptors (as a container's limit would have it) and a cap of 32 API
//! connections, while clients on twenty machines keep 300 connections open, opening a new one
//! whenever one is closed: 400 such connections used to leave the process without descriptors (accept failed
//! with "Too many open files", admin requests got no answer). With the cap, the admin is
//! answered, the operator's own calls to the API server go on (a Mutation created through the
//! API gets its Deployment), and the probes answer.

use std::{
    net::Ipv4Addr,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use tokio::io::AsyncReadExt;

use super::*;

/// Keeps `count` idle connections to `port` open until `stop`, from `machines` (each holding
/// at most its quarter of the connections: R44), replacing each one the server closes a
/// moment later; counts the connections opened.
fn idle_flood(
    port: u16,
    count: usize,
    machines: &[Ipv4Addr],
    stop: Arc<AtomicBool>,
    opened: Arc<AtomicUsize>,
) {
    for i in 0..count {
        let (stop, opened) = (stop.clone(), opened.clone());
        let source = machines[i % machines.len()];
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let socket = tokio::net::TcpSocket::new_v4().unwrap();
                socket.bind((source, 0).into()).unwrap();
                let Ok(mut stream) = socket.connect(([127, 0, 0, 1], port).into()).await else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                opened.fetch_add(1, Ordering::Relaxed);
                // Nothing is sent; wait until the server closes the connection (or the end).
                let mut buf = [0u8; 256];
                let _ = tokio::time::timeout(Duration::from_secs(60), stream.read(&mut buf)).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
    }
}

/// Loopback addresses 127.0.0.`n` for each `n` of `range`: machines of their own.
fn machines(range: std::ops::Range<u8>) -> Vec<Ipv4Addr> {
    range.map(|n| Ipv4Addr::new(127, 0, 0, n)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn idle_connections_cannot_take_the_operators_descriptors() {
    let ns = TestNamespace::new("conncap").await;
    common::install_crds(&ns.client).await;
    let operator = Operator::start_limited(
        &ns.name,
        &[
            ("MUTANT_API_TOKEN", ADMIN),
            ("MUTANT_API_MAX_CONNECTIONS", "32"),
        ],
        Some(128),
    );
    let f = Fixture { operator, ns };
    let (api, metrics) = (f.operator.api_port, f.operator.metrics_port);
    wait_api(api, &f.ns.name).await;

    let stop = Arc::new(AtomicBool::new(false));
    let opened = Arc::new(AtomicUsize::new(0));
    idle_flood(api, 300, &machines(10..30), stop.clone(), opened.clone());
    wait_for("300 idle connections", CONVERGE, || async {
        let n = opened.load(Ordering::Relaxed);
        (n >= 300).then_some(()).ok_or(n)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    // The admin is answered, a Mutation is created (the operator's own calls: a dry run, the
    // create, then the leader's reconcile) and gets its Deployment; the probes answer.
    let list = f.call("GET", "/mutations", Some(ADMIN), None).await;
    assert_eq!(list.status, 200, "{list:?}");
    let create = json!({"name": "web", "deployment": base("web"),
                        "variants": [{"label": "a", "instances": 0}]});
    let created = f
        .call("POST", "/mutations", Some(ADMIN), Some(&create))
        .await;
    assert_eq!(created.status, 201, "{created:?}");
    f.wait_deployment("web-a", "created", |_| true).await;
    let ready = common::http::request(metrics, "GET", "/readyz", None, None).await;
    assert_eq!(ready.status, 200, "{ready:?}");
    let flooded = opened.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    println!("{flooded} idle connections opened during the test");
    assert!(
        flooded > 300,
        "the server closed none of the idle connections"
    );
    let log = f.operator.log_text();
    assert!(
        !log.contains("Too many open files"),
        "the operator ran out of descriptors"
    );
}

/// R34: with the default `MUTANT_API_MAX_CONNECTIONS` (256) and a
/// descriptor limit of 160, 400 idle clients used to exhaust the descriptors: the admin got no
/// answer, and the log said "Too many open files" 98 times. Now the caps of both listeners are
/// lowered at start to fit the limit, with a log line saying so; under 400 idle connections to
/// the API and 100 to the metrics listener the admin and the probe are answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn the_default_caps_fit_a_small_descriptor_limit() {
    let ns = TestNamespace::new("connfit").await;
    common::install_crds(&ns.client).await;
    let operator = Operator::start_limited(&ns.name, &[("MUTANT_API_TOKEN", ADMIN)], Some(160));
    let f = Fixture { operator, ns };
    let (api, metrics) = (f.operator.api_port, f.operator.metrics_port);
    wait_api(api, &f.ns.name).await;
    let log = f.operator.log_text();
    assert!(
        log.contains("MUTANT_API_MAX_CONNECTIONS lowered") && log.contains("cap=56"),
        "no log line of the lowered cap: {log}"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let (to_api, to_metrics) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    // The API's 56 connections from twenty machines; the metrics listener's 8 from four, who
    // fill it (two each, a quarter): more machines than a listener has connections would each
    // hold one and leave no newcomer room, whoever it is.
    idle_flood(api, 400, &machines(10..30), stop.clone(), to_api.clone());
    idle_flood(
        metrics,
        100,
        &machines(30..34),
        stop.clone(),
        to_metrics.clone(),
    );
    wait_for("400 and 100 idle connections", CONVERGE, || async {
        let (a, m) = (
            to_api.load(Ordering::Relaxed),
            to_metrics.load(Ordering::Relaxed),
        );
        (a >= 400 && m >= 100).then_some(()).ok_or((a, m))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    for _ in 0..3 {
        let list = f.call("GET", "/mutations", Some(ADMIN), None).await;
        assert_eq!(list.status, 200, "{list:?}");
        let ready = common::http::request(metrics, "GET", "/readyz", None, None).await;
        assert_eq!(ready.status, 200, "{ready:?}");
    }
    stop.store(true, Ordering::Relaxed);
    let log = f.operator.log_text();
    assert!(
        !log.contains("Too many open files"),
        "the operator ran out of descriptors"
    );
}
