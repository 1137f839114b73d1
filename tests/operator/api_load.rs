//! R22 under load: 20 clients each send 10 variant edits at once to ONE Mutation (200
//! concurrent edits: adds of distinct labels and scales of distinct variants). Every edit that
//! answered 2xx is in the final spec, the edits waiting together were written together (each
//! write the operator logged is one the API server audited, and there are fewer writes than
//! edits), and the controller converges on all of them. The figures (answers, writes,
//! resourceVersion conflicts retried, time) are
//! printed for `--nocapture`; only correctness is asserted. A request over its caller's share of
//! the connections (R44: a quarter each for a token, its Mutation and an address) or over its
//! token's budget of changes (R34: 2 a second, 60 at once) is sent again after its
//! `Retry-After`, as a device does.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use k8s_openapi::api::apps::v1::Deployment;
use serde_json::json;

use super::*;

const CLIENTS: usize = 20;
const EDITS_PER_CLIENT: usize = 10;
/// The Mutation all edits go to.
const NAME: &str = "load";

/// One edit a client sends.
#[derive(Debug, Clone)]
enum Edit {
    /// POST a new variant `label` with env `CLIENT`/`EDIT`.
    Add {
        label: String,
        client: usize,
        edit: usize,
    },
    /// PATCH variant `label` (made with 0 instances) to `instances`.
    Scale { label: String, instances: i32 },
}

impl Edit {
    /// Client `client`'s edit number `edit`: even ones add, odd ones scale, each on a label of
    /// its own, so every edit's effect can be checked in the final spec.
    fn new(client: usize, edit: usize) -> Edit {
        if edit.is_multiple_of(2) {
            Edit::Add {
                label: format!("a-{client}-{edit}"),
                client,
                edit,
            }
        } else {
            Edit::Scale {
                label: scaled_label(client, edit),
                instances: 1 + edit as i32,
            }
        }
    }

    fn label(&self) -> &str {
        match self {
            Edit::Add { label, .. } | Edit::Scale { label, .. } => label,
        }
    }
}

/// How long one edit may take before the test gives up on it. Not a speed requirement: this
/// only keeps a hung server from hanging the test.
const PATIENCE: Duration = Duration::from_secs(600);

/// Sends one API request like [`Fixture::call`], waiting up to [`PATIENCE`] for the answer.
async fn call(
    f: &Fixture,
    method: &str,
    path: &str,
    token: &str,
    body: &Value,
) -> common::http::Reply {
    use tokio::io::AsyncWriteExt;
    let port = f.operator.api_port;
    let body = body.to_string();
    let request = format!(
        "{method} /api/v1/namespaces/{}{path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
         Connection: close\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        f.ns.name,
        body.len()
    );
    // A request over its caller's share of the busy connections (R44) is
    // answered 503 with Retry-After at once, before anything is done, and one over its token's
    // budget of changes 429 (R34): a client sends it again after that second, as a device
    // does.
    loop {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        // A connection refused for its address's share is answered and closed at once: the
        // write may then fail, and the read end in a reset after the answer.
        let _ = stream.write_all(request.as_bytes()).await;
        let (out, _) = common::http::read_until_closed(&mut stream, PATIENCE).await;
        let text = String::from_utf8_lossy(&out);
        let reply =
            common::http::parse(&text).unwrap_or_else(|| panic!("not an HTTP response: {text:?}"));
        // R34: so is one over the token's budget of changes (429).
        let over_budget = reply.status == 429 && reply.body.contains("too many changes");
        let over_share = reply.status == 503
            && (reply.body.contains("in flight") || reply.body.contains("share of connections"));
        if over_budget || over_share {
            RETRIED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        }
        return reply;
    }
}

/// How many requests were sent again after a 503 for their caller's share or a 429 for its
/// budget of changes.
static RETRIED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn scaled_label(client: usize, edit: usize) -> String {
    format!("s-{client}-{edit}")
}

/// The base of the load Mutation: paused, so its variant Deployments get no ReplicaSets and no
/// pods (the load is on the API and the Mutation, not on the scheduler), and they still carry
/// the replica count the operator writes.
fn paused_base() -> Value {
    let mut base = base(NAME);
    base["spec"]["paused"] = json!(true);
    base
}

/// Counts the operator's requests on the Mutation's main resource (not its status) in the
/// audit log after `offset`: patches by HTTP status code.
fn audited_patches(path: &std::path::Path, offset: u64, ns: &str) -> BTreeMap<u16, usize> {
    let uri = format!("/apis/neiam.org/v1/namespaces/{ns}/mutations/{NAME}?");
    let mut counts = BTreeMap::new();
    for line in operator_requests_with_codes(path, offset) {
        let (verb, request_uri, code) = line;
        if verb == "patch" && request_uri.starts_with(&uri) {
            *counts.entry(code).or_default() += 1;
        }
    }
    counts
}

/// The operator's completed requests after `offset`: (verb, requestURI, response code).
fn operator_requests_with_codes(path: &std::path::Path, offset: u64) -> Vec<(String, String, u16)> {
    audit_events(path, offset)
        .into_iter()
        .map(|e| {
            (
                e["verb"].as_str().unwrap_or("").to_string(),
                e["requestURI"].as_str().unwrap_or("").to_string(),
                e["responseStatus"]["code"].as_u64().unwrap_or(0) as u16,
            )
        })
        .collect()
}

#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn two_hundred_concurrent_edits_of_one_mutation_all_land() {
    // R22, with the default request deadline (R34, 4 s): the edits waiting together are
    // written together, so none waits for the others' writes one by one (it took a deadline
    // of 60 s when each edit wrote on its own, one at a time).
    let f = Fixture::with_env("api-load", &[("MUTANT_API_TOKEN", ADMIN)]).await;
    wait_api(f.operator.api_port, &f.ns.name).await;
    let ns = f.ns.name.clone();

    // The variants the scales will change, all at 0 instances to begin with.
    let scaled: Vec<Value> = (0..CLIENTS)
        .flat_map(|c| (1..EDITS_PER_CLIENT).step_by(2).map(move |e| (c, e)))
        // Handed to the token (R32), which scales half of them.
        .map(|(c, e)| json!({"label": scaled_label(c, e), "instances": 0, "byToken": true}))
        .collect();
    let initial = scaled.len();
    // R32: a Mutation's token may add a variant only while it has fewer than 20, unless its
    // owner says more: this one ends with 200.
    let create = json!({"name": NAME, "deployment": paused_base(), "variants": scaled,
                        "deviceAccess": {"maxVariants": 250, "maxTotalInstances": 100000}});
    let created = f
        .call("POST", "/mutations", Some(ADMIN), Some(&create))
        .await;
    assert_eq!(created.status, 201, "{created:?}");
    let token = f.token(NAME).await;

    let audit = std::env::var_os("MUTANTOPS_AUDIT_LOG").map(std::path::PathBuf::from);
    let audit_offset = audit.as_deref().map(log_size);
    let log_offset = f.operator.log_text().len();

    // 20 clients at once, each sending its 10 edits at once; half of them with the Mutation's
    // own token, half with the admin token.
    let started = Instant::now();
    let clients = (0..CLIENTS).map(|client| {
        let (f, token) = (&f, &token);
        async move {
            let auth = if client.is_multiple_of(2) {
                token.as_str()
            } else {
                ADMIN
            };
            let edits = (0..EDITS_PER_CLIENT).map(|edit| async move {
                let edit = Edit::new(client, edit);
                let began = Instant::now();
                let reply = match &edit {
                    Edit::Add {
                        label,
                        client,
                        edit: n,
                    } => {
                        let body = json!({
                            "label": label,
                            "env": {"CLIENT": client.to_string(), "EDIT": n.to_string()},
                            "instances": 0,
                        });
                        call(
                            f,
                            "POST",
                            &format!("/mutations/{NAME}/variants"),
                            auth,
                            &body,
                        )
                        .await
                    }
                    Edit::Scale { label, instances } => {
                        let body = json!({ "instances": instances });
                        let path = format!("/mutations/{NAME}/variants/{label}");
                        call(f, "PATCH", &path, auth, &body).await
                    }
                };
                (edit, reply, began.elapsed())
            });
            futures::future::join_all(edits).await
        }
    });
    let results: Vec<_> = futures::future::join_all(clients)
        .await
        .into_iter()
        .flatten()
        .collect();
    let elapsed = started.elapsed();

    // The answers.
    let mut by_status: BTreeMap<u16, usize> = BTreeMap::new();
    for (_, reply, _) in &results {
        *by_status.entry(reply.status).or_default() += 1;
    }
    let mut latencies: Vec<_> = results.iter().map(|(_, _, d)| *d).collect();
    latencies.sort();
    let percentile = |p: usize| latencies[(latencies.len() * p / 100).min(latencies.len() - 1)];

    // What each 2xx answer said is in the final spec; nothing else was added.
    let mutation = f.mutations().get(NAME).await.unwrap();
    let spec: BTreeMap<&str, &mutantops::crd::Variant> = mutation
        .spec
        .variants
        .iter()
        .map(|v| (v.label.as_str(), v))
        .collect();
    assert_eq!(
        spec.len(),
        mutation.spec.variants.len(),
        "a label appears twice in the spec"
    );
    let mut ok_adds = 0;
    for (edit, reply, _) in &results {
        let landed = spec.get(edit.label());
        if !(200..300).contains(&reply.status) {
            if let Edit::Add { label, .. } = edit {
                assert!(landed.is_none(), "refused add {label} is in the spec");
            }
            continue;
        }
        let variant =
            landed.unwrap_or_else(|| panic!("{edit:?} answered {reply:?} but is not in the spec"));
        match edit {
            Edit::Add {
                client, edit: n, ..
            } => {
                ok_adds += 1;
                assert_eq!(reply.status, 201, "{edit:?}: {reply:?}");
                let env: Vec<(&str, &str)> = variant.env.iter().collect();
                let (c, e) = (client.to_string(), n.to_string());
                assert_eq!(
                    env,
                    [("CLIENT", c.as_str()), ("EDIT", e.as_str())],
                    "{edit:?}"
                );
                assert_eq!(variant.instances, 0, "{edit:?}");
            }
            Edit::Scale { instances, .. } => {
                assert_eq!(reply.status, 200, "{edit:?}: {reply:?}");
                assert_eq!(variant.instances, *instances, "{edit:?} was lost");
                assert_eq!(reply.json()["instances"], *instances, "{edit:?}");
            }
        }
    }
    assert_eq!(
        mutation.spec.variants.len(),
        initial + ok_adds,
        "variants in the spec: the {initial} made at creation plus the {ok_adds} added"
    );
    // R22: none is lost: every one of the 200 concurrent edits landed.
    let refused: Vec<_> = results
        .iter()
        .filter(|(_, r, _)| !(200..300).contains(&r.status))
        .map(|(e, r, _)| format!("{e:?}: {} {}", r.status, r.body))
        .collect();
    assert!(
        refused.is_empty(),
        "{} of {} edits were refused:\n{}",
        refused.len(),
        results.len(),
        refused.join("\n")
    );

    // The writes and retries: the operator logs each write of a batch of edits and each
    // resourceVersion conflict it retries (at debug).
    let log = f.operator.log_text();
    let new_log = &log[log_offset.min(log.len())..];
    let ours =
        |l: &&str| l.contains(&format!("name=\"{NAME}\"")) || l.contains(&format!("name={NAME}"));
    let retries = new_log
        .lines()
        .filter(ours)
        .filter(|l| l.contains("resourceVersion conflict"))
        .count();
    let field = |l: &str, name: &str| -> Option<usize> {
        l.split(&format!("{name}="))
            .nth(1)?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    let writes: Vec<&str> = new_log
        .lines()
        .filter(ours)
        .filter(|l| l.contains("variant edits written"))
        .collect();
    let max_attempt = writes
        .iter()
        .filter_map(|l| field(l, "attempt"))
        .max()
        .unwrap_or(1);
    let largest = writes
        .iter()
        .filter_map(|l| field(l, "edits"))
        .max()
        .unwrap_or(0);
    assert!(
        !writes.is_empty() && writes.len() < results.len(),
        "{} writes for {} edits: the edits waiting together are written together",
        writes.len(),
        results.len()
    );

    // The audit log, when there is one: each write the operator logged is one the API server
    // made (200), and each conflict is a 409 the API server answered.
    let audited = match (&audit, audit_offset) {
        (Some(path), Some(offset)) => {
            let counts = wait_for("the audit log to show every write", CONVERGE, || async {
                let counts = audited_patches(path, offset, &ns);
                let written = counts.get(&200).copied().unwrap_or(0);
                if written >= writes.len() {
                    Ok(counts)
                } else {
                    Err(counts)
                }
            })
            .await;
            assert_eq!(
                counts.get(&200).copied().unwrap_or(0),
                writes.len(),
                "each logged write is one write of the Mutation: {counts:?}"
            );
            assert_eq!(
                counts.get(&409).copied().unwrap_or(0),
                retries,
                "every 409 of the API server is a logged retry: {counts:?}"
            );
            format!("{counts:?}")
        }
        _ => "n/a (MUTANTOPS_AUDIT_LOG not set)".to_string(),
    };

    println!("load: {CLIENTS} clients x {EDITS_PER_CLIENT} concurrent edits on one Mutation");
    println!("  edits sent:            {}", results.len());
    println!("  answers by status:     {by_status:?}");
    println!(
        "  sent again after 503 (share of busy connections) or 429 (budget of changes): {}",
        RETRIED.load(std::sync::atomic::Ordering::Relaxed)
    );
    println!("  2xx:                   {}", results.len() - refused.len());
    println!(
        "  writes:                {} (most edits in one: {largest}; conflicts retried: {retries}, most attempts for one write: {max_attempt})",
        writes.len()
    );
    println!("  audited patches:       {audited}");
    println!("  elapsed:               {:.2} s", elapsed.as_secs_f64());
    println!(
        "  latency p50/p90/max:   {:.0} / {:.0} / {:.0} ms",
        percentile(50).as_secs_f64() * 1e3,
        percentile(90).as_secs_f64() * 1e3,
        latencies[latencies.len() - 1].as_secs_f64() * 1e3
    );

    // The controller converges on all of them: one Deployment per variant, with its replicas.
    let converged = Instant::now();
    let deployments: Api<Deployment> = f.deployments();
    let want: BTreeMap<String, i32> = mutation
        .spec
        .variants
        .iter()
        .map(|v| (format!("{NAME}-{}", v.label), v.instances))
        .collect();
    wait_for(
        "a Deployment per variant with its replicas",
        CONVERGE * 2,
        || async {
            let list = deployments
                .list(
                    &kube::api::ListParams::default()
                        .labels(&format!("mutantops.neiam.org/owner={NAME}")),
                )
                .await
                .map_err(|e| e.to_string())?;
            let have: BTreeMap<String, i32> = list
                .items
                .iter()
                .map(|d| {
                    (
                        d.name_any(),
                        d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(-1),
                    )
                })
                .collect();
            if have == want {
                Ok(())
            } else {
                let differ = want.iter().filter(|(k, v)| have.get(*k) != Some(v)).count();
                Err(format!(
                    "{} of {} differ or are missing",
                    differ,
                    want.len()
                ))
            }
        },
    )
    .await;
    println!(
        "  controller converged:  {} Deployments, {:.2} s after the last answer",
        want.len(),
        converged.elapsed().as_secs_f64()
    );
}
