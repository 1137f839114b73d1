//! R34: what requests that cannot authenticate, or that ask for
//! validated reads, cost the API server. Counted in the API server's audit log: the operator's
//! reads of Mutations while the requests ran.
//!
//! Two replicas, as `deploy/` runs them: A reaches the API server directly, B through a proxy
//! that holds every answer for 300 ms (`replicas.rs`), so a Mutation made through A is a miss
//! on B that B must check with the API server.

use std::{
    net::Ipv4Addr,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use super::{replicas::Replicas, *};

/// A well-formed Mutation token (64 lower-case hex characters) that belongs to nobody.
fn random_token() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).unwrap();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The operator's reads (get or list) of Mutations in `ns` whose path contains `needle`,
/// logged after `offset`; waits a moment first so the audit log has them all.
async fn mutation_reads(offset: u64, ns: &str, needle: &str) -> Vec<String> {
    tokio::time::sleep(Duration::from_secs(1)).await;
    operator_requests(&audit_log(), offset, ns)
        .into_iter()
        .filter(|r| r.starts_with("get ") || r.starts_with("list "))
        .filter(|r| r.contains("/mutations") && r.contains(needle))
        .collect()
}

/// R34, R20: a request without a bearer token, with a malformed one, or about a
/// namespace the API does not serve is answered 401 without asking the API server anything,
/// and as fast for an existing Mutation as for an absent one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn requests_without_a_usable_token_cost_the_api_server_nothing() {
    let r = Replicas::start("abuse-anon").await;
    let b = r.b.api_port;
    r.create("web").await;
    // A Mutation the operator does not serve: another namespace, made with kubectl's rights.
    let other = TestNamespace::new("abuse-other").await;
    let hidden: Mutation = common::from_json(mutation("hidden", base("web"), json!([])));
    other
        .api::<Mutation>()
        .create(&Default::default(), &hidden)
        .await
        .unwrap();

    let offset = log_size(&audit_log());
    let own = format!("/api/v1/namespaces/{}/mutations/web", r.ns.name);
    for (token, headers) in [
        (None, &[][..]),
        (Some("x"), &[][..]),
        (Some("not a token at all"), &[][..]),
        (None, &[("Authorization", "Basic YWRtaW46YWRtaW4=")][..]),
        (Some(&*random_token().to_uppercase()), &[][..]),
    ] {
        for _ in 0..40 {
            let reply = common::http::Request::new("GET", &own, token, None)
                .headers(headers)
                .send(b)
                .await;
            assert_eq!(reply.status, 401, "{token:?} {headers:?}: {reply:?}");
        }
    }
    // Well-formed tokens, about a namespace B does not serve: an existing Mutation and an
    // absent one answer alike, and fast (the lookup took 6 s for the existing one).
    let mut slowest = Duration::ZERO;
    for name in ["hidden", "absent"] {
        let path = format!("/api/v1/namespaces/{}/mutations/{name}", other.name);
        for _ in 0..20 {
            let began = Instant::now();
            let reply = common::http::request(b, "GET", &path, Some(&random_token()), None).await;
            slowest = slowest.max(began.elapsed());
            assert_eq!(reply.status, 401, "{name}: {reply:?}");
            assert_eq!(
                reply.json()["error"],
                json!(mutantops::api::auth::UNAUTHORIZED)
            );
        }
    }
    assert!(
        slowest < Duration::from_secs(1),
        "an unserved namespace's answer took {slowest:?}: it waited on the API server"
    );

    let own_reads = mutation_reads(offset, &r.ns.name, "/mutations").await;
    assert_eq!(
        own_reads,
        Vec::<String>::new(),
        "reads for anonymous requests"
    );
    let other_reads = mutation_reads(offset, &other.name, "/mutations").await;
    assert_eq!(
        other_reads,
        Vec::<String>::new(),
        "reads about an unserved namespace"
    );
}

/// R34: wrong tokens from one client, as fast as it can send them, do not spend
/// the checks another client needs: a Mutation created through A is usable through B at once
/// all the while; and the flood costs the API server a bounded number of reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn wrong_tokens_from_one_client_do_not_spend_the_checks_of_another() {
    let r = Replicas::start("abuse-budget").await;
    let b = r.b.api_port;
    let offset = log_size(&audit_log());
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicUsize::new(0));
    let began = Instant::now();
    let flood: Vec<_> = (0..4)
        .map(|worker| {
            let (stop, sent, ns) = (stop.clone(), sent.clone(), r.ns.name.clone());
            tokio::spawn(async move {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let path = format!("/api/v1/namespaces/{ns}/mutations/guess-{worker}-{i}");
                    let token = random_token();
                    let raw = common::http::Request::new("GET", &path, Some(&token), None).bytes(b);
                    let reply =
                        common::http::send_raw_from(Ipv4Addr::new(127, 0, 0, 2), b, &raw).await;
                    assert_eq!(reply.status, 401, "{reply:?}");
                    sent.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    // Let the flood spend whatever it can first.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for i in 0..3 {
        let name = format!("real-{i}");
        let token = r.create(&name).await;
        let reply = r
            .call(b, "GET", &format!("/mutations/{name}"), Some(&token), None)
            .await;
        assert_eq!(
            reply.status, 200,
            "the token of {name}, made through A, used through B during the flood: {reply:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for worker in flood {
        worker.await.unwrap();
    }
    let seconds = began.elapsed().as_secs_f64();
    let sent = sent.load(Ordering::Relaxed);
    let reads = mutation_reads(offset, &r.ns.name, "/mutations/guess-").await;
    // Five at once and two a second for the one address (plus one for rounding).
    let bound = 5 + (2.0 * seconds).ceil() as usize + 1;
    println!(
        "flood: {sent} requests in {seconds:.1} s; {} reads (bound {bound})",
        reads.len()
    );
    assert!(
        sent > 4 * bound,
        "the flood must outrun its budget: {sent} requests"
    );
    assert!(
        reads.len() <= bound,
        "{} reads of the API server for one address's wrong tokens in {seconds:.1} s",
        reads.len()
    );
}

/// R34: validated reads (`Cache-Control: no-cache`) are limited per token: 429
/// with `Retry-After` beyond the budget, each read within it is one read of the API server,
/// and another token keeps its own budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn validated_reads_are_limited_per_token() {
    let f = Fixture::with_api("abuse-nocache").await;
    let mut tokens = Vec::new();
    for name in ["first", "second"] {
        let create = json!({"name": name, "deployment": base(name),
                            "variants": [{"label": "a", "instances": 0}]});
        let created = f
            .call("POST", "/mutations", Some(ADMIN), Some(&create))
            .await;
        assert_eq!(created.status, 201, "{created:?}");
        tokens.push(f.token(name).await);
    }
    let port = f.operator.api_port;
    let path = |name: &str| format!("/api/v1/namespaces/{}/mutations/{name}", f.ns.name);
    let no_cache = [("Cache-Control", "no-cache")];
    let offset = log_size(&audit_log());
    let began = Instant::now();
    let (mut served, mut refused) = (0usize, 0usize);
    for _ in 0..60 {
        let reply = common::http::Request::new("GET", &path("first"), Some(&tokens[0]), None)
            .headers(&no_cache)
            .send(port)
            .await;
        match reply.status {
            200 => served += 1,
            429 => {
                refused += 1;
                assert_eq!(reply.header("retry-after"), Some("1"), "{reply:?}");
                assert!(reply.json()["error"].as_str().unwrap().contains("no-cache"));
            }
            _ => panic!("{reply:?}"),
        }
    }
    let seconds = began.elapsed().as_secs_f64();
    // Ten at once, five a second (plus one for rounding).
    let bound = 10 + (5.0 * seconds).ceil() as usize + 1;
    println!("no-cache: {served} served, {refused} refused in {seconds:.1} s (bound {bound})");
    assert!(
        refused > 0,
        "60 validated reads in {seconds:.1} s were all served"
    );
    assert!(
        served <= bound,
        "{served} validated reads in {seconds:.1} s"
    );
    // A plain read with the same token is still served from the cache.
    let plain = common::http::request(port, "GET", &path("first"), Some(&tokens[0]), None).await;
    assert_eq!(plain.status, 200, "{plain:?}");
    // Another token has its own budget.
    let other = common::http::Request::new("GET", &path("second"), Some(&tokens[1]), None)
        .headers(&no_cache)
        .send(port)
        .await;
    assert_eq!(other.status, 200, "{other:?}");
    let reads = mutation_reads(offset, &f.ns.name, "/mutations/first").await;
    assert!(
        reads.len() <= served,
        "{} reads of the API server for {served} validated reads",
        reads.len()
    );
}
