//! R30: several replicas on one namespace. Exactly one leads (the Lease names it, its
//! `mutant_operator_leader` reads 1) and only its reconciles act; every replica serves the
//! API. When the leader dies without a word (SIGKILL) another takes over once the Lease
//! expires; when it stops cleanly (SIGTERM) it releases the Lease and another takes over at
//! once.

use std::time::Instant;

use k8s_openapi::api::coordination::v1::Lease;
use serde_json::json;

use super::*;

/// The Lease duration the replicas here run with.
const LEASE_SECONDS: u64 = 4;

/// Two replicas on one fresh namespace, the Lease in that namespace too.
struct Replicas {
    ns: TestNamespace,
    ops: Vec<Operator>,
    names: Vec<String>,
}

impl Replicas {
    async fn start(prefix: &str, lease_seconds: u64) -> Replicas {
        let ns = TestNamespace::new(prefix).await;
        common::install_crds(&ns.client).await;
        let seconds = lease_seconds.to_string();
        let names: Vec<String> = ["replica-a", "replica-b"]
            .iter()
            .map(|n| n.to_string())
            .collect();
        let ops = names
            .iter()
            .map(|name| {
                Operator::start_with(
                    &ns.name,
                    &[
                        ("POD_NAMESPACE", &ns.name),
                        ("POD_NAME", name),
                        ("MUTANT_LEASE_DURATION_SECONDS", &seconds),
                        ("MUTANT_API_TOKEN", ADMIN),
                    ],
                )
            })
            .collect();
        Replicas { ns, ops, names }
    }

    /// The index of the one replica whose metrics say it leads, once exactly one does (of
    /// those still running, `alive`).
    async fn leader(&self, alive: &[usize], timeout: Duration) -> usize {
        wait_for("exactly one leader", timeout, || async {
            let mut leaders = Vec::new();
            for &i in alive {
                match leader_gauge(self.ops[i].metrics_port).await {
                    Some(1) => leaders.push(i),
                    Some(0) => {}
                    other => return Err(format!("replica {i}: leader gauge {other:?}")),
                }
            }
            match leaders.as_slice() {
                [one] => Ok(*one),
                _ => Err(format!("leaders: {leaders:?}")),
            }
        })
        .await
    }

    /// The Lease's holder and transitions.
    async fn lease(&self) -> (Option<String>, Option<i32>) {
        let api: Api<Lease> = self.ns.api();
        let spec = api.get("mutantops-leader").await.unwrap().spec.unwrap();
        (spec.holder_identity, spec.lease_transitions)
    }

    /// Asserts that replica `i`'s API lists Mutations (200).
    async fn api_answers(&self, i: usize) {
        let path = format!("/api/v1/namespaces/{}/mutations", self.ns.name);
        let reply =
            common::http::request(self.ops[i].api_port, "GET", &path, Some(ADMIN), None).await;
        assert_eq!(reply.status, 200, "replica {i}'s API: {reply:?}");
    }

    /// Waits until replica `i`'s API serves (200 once its caches have synced).
    async fn wait_api(&self, i: usize) {
        super::wait_api(self.ops[i].api_port, &self.ns.name).await;
    }

    async fn apply_mutation(&self, variants: Value) {
        let api: Api<Mutation> = self.ns.api();
        api.patch(
            "m",
            &PatchParams::apply("test-author").force(),
            &Patch::Apply(&mutation("m", base("mu"), variants)),
        )
        .await
        .unwrap();
    }

    async fn wait_deployment(&self, name: &str) {
        let api: Api<Deployment> = self.ns.api();
        wait_for(&format!("Deployment {name}"), CONVERGE, || async {
            match api.get_opt(name).await.map_err(|e| e.to_string())? {
                Some(_) => Ok(()),
                None => Err("absent".to_string()),
            }
        })
        .await;
    }
}

/// `mutant_operator_leader` from a scrape of the metrics port.
async fn leader_gauge(port: u16) -> Option<i64> {
    tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let reply = common::http::request(port, "GET", "/metrics", None, None).await;
    reply
        .body
        .lines()
        .find_map(|l| l.strip_prefix("mutant_operator_leader "))
        .and_then(|v| v.trim().parse().ok())
}

/// Lines of the log where a reconcile really ran (a follower's skips say "not the leader").
fn reconciled(op: &Operator) -> usize {
    op.log_text()
        .lines()
        .filter(|l| l.contains("reconciled") && l.contains("/m."))
        .count()
}

#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn one_replica_leads_and_another_takes_over_when_it_dies() {
    let mut r = Replicas::start("leader-kill", LEASE_SECONDS).await;
    r.wait_api(0).await;
    r.wait_api(1).await;
    let leader = r.leader(&[0, 1], CONVERGE).await;
    let follower = 1 - leader;
    let (holder, _) = r.lease().await;
    assert_eq!(holder.as_deref(), Some(r.names[leader].as_str()));

    // Only the leader reconciles; the follower sees the Mutation and skips it.
    r.apply_mutation(json!([{ "label": "a", "instances": 1 }]))
        .await;
    r.wait_deployment("mu-a").await;
    wait_for("the follower to skip the Mutation", CONVERGE, || async {
        let log = r.ops[follower].log_text();
        if log.contains("not the leader; skipping") {
            Ok(())
        } else {
            Err(())
        }
    })
    .await;
    // The leader logs "reconciled" when its reconcile returns, after the Deployment is made.
    wait_for("the leader to log its reconcile", CONVERGE, || async {
        match reconciled(&r.ops[leader]) {
            0 => Err(0),
            n => Ok(n),
        }
    })
    .await;
    assert_eq!(
        reconciled(&r.ops[follower]),
        0,
        "the follower reconciled:\n{}",
        r.ops[follower].log_text()
    );
    // Still exactly one leader, and both APIs answer.
    assert_eq!(r.leader(&[0, 1], CONVERGE).await, leader);
    r.api_answers(leader).await;
    r.api_answers(follower).await;

    // The leader dies without releasing the Lease: the follower takes over once it expires,
    // and answers its API all along.
    let killed = Instant::now();
    r.ops[leader].kill();
    let deadline = Duration::from_secs(LEASE_SECONDS + 6);
    let mut probes = 0;
    wait_for("the follower to take over", deadline, || {
        probes += 1;
        let r = &r;
        async move {
            r.api_answers(follower).await;
            match leader_gauge(r.ops[follower].metrics_port).await {
                Some(1) => Ok(()),
                other => Err(other),
            }
        }
    })
    .await;
    let handover = killed.elapsed();
    eprintln!("handover after SIGKILL: {handover:?} ({probes} API probes answered 200)");
    assert!(
        probes >= 3,
        "the follower's API was probed during the handover"
    );
    let (holder, transitions) = r.lease().await;
    assert_eq!(holder.as_deref(), Some(r.names[follower].as_str()));
    assert!(transitions >= Some(1), "leaseTransitions {transitions:?}");

    // The new leader reconciles a spec change.
    r.apply_mutation(json!([{ "label": "a", "instances": 1 },
                           { "label": "b", "instances": 1 }]))
        .await;
    r.wait_deployment("mu-b").await;
    wait_for("the new leader to log its reconcile", CONVERGE, || async {
        match reconciled(&r.ops[follower]) {
            0 => Err(0),
            n => Ok(n),
        }
    })
    .await;
    r.api_answers(follower).await;
}

#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_leader_that_stops_releases_the_lease() {
    // A long Lease: a takeover well within it can only come from the release.
    const LONG: u64 = 10;
    let mut r = Replicas::start("leader-term", LONG).await;
    r.wait_api(0).await;
    r.wait_api(1).await;
    let leader = r.leader(&[0, 1], CONVERGE).await;
    let follower = 1 - leader;

    let stopping = Instant::now();
    let status = r.ops[leader].terminate(Duration::from_secs(15));
    assert!(
        status.is_some_and(|s| s.success()),
        "SIGTERM: {status:?}\n{}",
        r.ops[leader].log_text()
    );
    assert!(
        r.ops[leader].log_text().contains("released the lease"),
        "{}",
        r.ops[leader].log_text()
    );
    wait_for(
        "the follower to take over",
        Duration::from_secs(LONG / 2),
        || async {
            r.api_answers(follower).await;
            match leader_gauge(r.ops[follower].metrics_port).await {
                Some(1) => Ok(()),
                other => Err(other),
            }
        },
    )
    .await;
    let handover = stopping.elapsed();
    eprintln!("handover after SIGTERM: {handover:?}");
    // The follower retries every LONG/5 = 2 s; the expiry would take LONG = 10 s.
    assert!(
        handover < Duration::from_secs(LONG / 5 + 3),
        "handover took {handover:?}"
    );
    let (holder, _) = r.lease().await;
    assert_eq!(holder.as_deref(), Some(r.names[follower].as_str()));

    r.apply_mutation(json!([{ "label": "a", "instances": 1 }]))
        .await;
    r.wait_deployment("mu-a").await;
}

/// Where Debian's `faketime` package puts the preload library.
pub(super) fn libfaketime() -> String {
    let candidates = [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/faketime/libfaketime.so.1",
    ];
    candidates
        .iter()
        .find(|p| std::path::Path::new(p).exists())
        .map(|p| p.to_string())
        .unwrap_or_else(|| {
            panic!("libfaketime not found in {candidates:?}: install Debian's faketime (scripts/test does)")
        })
}

/// The wall-clock time of the first log line of `op`, minus the test's own: how far its clock
/// is off, in seconds.
fn log_clock_offset(op: &Operator) -> i64 {
    use k8s_openapi::jiff::Timestamp;
    let text = op.log_text();
    let first = text
        .split_whitespace()
        .next()
        .unwrap_or_else(|| panic!("no log line yet"));
    let logged: Timestamp = first
        .parse()
        .unwrap_or_else(|e| panic!("{first:?} is not a timestamp: {e}"));
    logged.as_second() - Timestamp::now().as_second()
}

/// R30 on boards without a real-time clock: a follower whose wall clock is `skew` off (given
/// to libfaketime, e.g. "+1h") never takes the Lease from a live leader, and takes it from a
/// killed one within the Lease's duration plus one renew period. Expiry is timed on each
/// replica's monotonic clock, never by comparing `renewTime` with its wall clock.
async fn skewed_follower(prefix: &str, skew: &str, expected_offset: i64) {
    const SECONDS: u64 = 9;
    let duration = Duration::from_secs(SECONDS);
    let renew = duration / 3;
    let ns = TestNamespace::new(prefix).await;
    common::install_crds(&ns.client).await;
    let seconds = SECONDS.to_string();
    let replica = |name: &str, extra: &[(&str, &str)]| {
        let mut env = vec![
            ("POD_NAMESPACE", ns.name.as_str()),
            ("POD_NAME", name),
            ("MUTANT_LEASE_DURATION_SECONDS", seconds.as_str()),
        ];
        env.extend_from_slice(extra);
        Operator::start_with(&ns.name, &env)
    };
    let mut leader = replica("steady", &[]);
    wait_for("the steady replica to lead", CONVERGE, || async {
        match leader_gauge(leader.metrics_port).await {
            Some(1) => Ok(()),
            other => Err(other),
        }
    })
    .await;

    let preload = libfaketime();
    let follower = replica(
        "skewed",
        &[
            ("LD_PRELOAD", preload.as_str()),
            ("FAKETIME", skew),
            // Only the wall clock is skewed, as on a board before NTP answers.
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
            ("FAKETIME_DONT_RESET", "1"),
        ],
    );
    // It talks to the API server (through TLS, checked against its skewed clock) and serves.
    wait_for("the skewed replica to serve metrics", CONVERGE, || async {
        match leader_gauge(follower.metrics_port).await {
            Some(g) => Ok(g),
            None => Err(()),
        }
    })
    .await;
    let offset = log_clock_offset(&follower);
    assert!(
        (offset - expected_offset).abs() < 120,
        "the skewed replica's clock is {offset} s off, not about {expected_offset}:\n{}",
        follower.log_text()
    );

    let lease_api: Api<Lease> = ns.api();
    let lease = || async {
        let spec = lease_api
            .get("mutantops-leader")
            .await
            .unwrap()
            .spec
            .unwrap();
        (spec.holder_identity, spec.lease_transitions)
    };
    let (_, transitions) = lease().await;

    // Two whole durations with a live leader: the skewed follower never takes over.
    let watch_until = Instant::now() + duration * 2;
    while Instant::now() < watch_until {
        assert_eq!(leader_gauge(leader.metrics_port).await, Some(1));
        assert_eq!(
            leader_gauge(follower.metrics_port).await,
            Some(0),
            "the skewed follower took over a live leader:\n{}",
            follower.log_text()
        );
        assert_eq!(lease().await, (Some("steady".to_string()), transitions));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // The leader dies: the skewed follower takes over within duration + one renew period.
    let killed = Instant::now();
    leader.kill();
    let bound = duration + renew;
    wait_for("the skewed follower to take over", bound * 2, || async {
        match (leader_gauge(follower.metrics_port).await, lease().await.0) {
            (Some(1), Some(holder)) if holder == "skewed" => Ok(()),
            other => Err(other),
        }
    })
    .await;
    let handover = killed.elapsed();
    eprintln!("skew {skew}: handover after SIGKILL {handover:?} (bound {bound:?})");
    assert!(
        handover <= bound,
        "the skewed follower took {handover:?} to take over, more than {bound:?}:\n{}",
        follower.log_text()
    );
}

#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_follower_whose_clock_is_an_hour_ahead_waits_for_the_leader() {
    skewed_follower("leader-skew-ahead", "+1h", 3600).await;
}

#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_follower_whose_clock_is_an_hour_behind_takes_over_a_dead_leader() {
    skewed_follower("leader-skew-behind", "-1h", -3600).await;
}
