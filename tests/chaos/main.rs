//! The chaos suite (R13, R14, R22, R30; the end state by R4, R5, R6, R9, R11).
//!
//! For `MUTANTOPS_CHAOS_SECONDS` (default 60), workers make random variant adds, scales and
//! removes on three Mutations and two MutantDeployments: through the HTTP API with each
//! Mutation's own token and with the admin token, and as read-modify-write spec edits through
//! the Kubernetes API (merge patches carrying the resourceVersion that was read). Meanwhile, at
//! random moments, the operator is killed with SIGKILL and started again with the same
//! environment, and the kube-apiserver process is killed and started again
//! (`scripts/cluster restart-apiserver`).
//!
//! Each owner has two workers on disjoint sets of labels, so edits of one owner race each
//! other (R22) while every label has one writer whose history is known. Every write gets an
//! outcome: `2xx` (acknowledged), `refused` (an answer saying nothing changed: 409 for a label
//! that exists, 404 for one that does not, a resourceVersion conflict of a spec edit, 429),
//! `unreachable` (no connection: nothing was sent) or `uncertain` (no answer, or a 5xx: it may
//! or may not have landed). A model keeps, per label, the set of states the writes so far
//! allow: an acknowledged write leaves exactly one, an uncertain one adds its effect to the
//! set. Every spec read during the run and the final one must be in that set, so an
//! acknowledged write that goes missing, or a refusal that contradicts one, fails the test.
//! After an uncertain write a worker waits a second before its next one, so a write the
//! server was still processing when its client lost the answer has landed by then.
//!
//! Once the run and its last fault are over, the cluster must converge to exactly the final
//! specs: one Deployment per declared variant, built as R4 says (labels, selector, pod
//! template labels, controller ownerReference, replicas, env) and as the operator's own
//! builder makes it; nothing else owned by an owner (no orphan, no duplicate); the foreign
//! Deployments that carry an owner's labels, one of them on a variant's name, untouched (R6,
//! R9); every status reporting the final spec; every Mutation's Secret the one created before
//! the run, with the same token (R14).
//!
//! The seed is printed at the start: `MUTANTOPS_CHAOS_SEED=<seed>` makes the same random
//! choices again (the timing of the processes still differs). The figures (operations by kind
//! and outcome, faults, convergence time) are printed at the end.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a failed step must fail the test"
)]

#[path = "../common/mod.rs"]
mod common;
mod faults;
mod model;
mod restarts;
mod setup;
mod verify;
mod workers;

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt::Write as _,
    io::Write as _,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use common::{TestNamespace, base, from_json};
use k8s_openapi::api::{apps::v1::Deployment, core::v1::Secret};
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams},
};
use mutantops::{
    crd::{MutantDeployment, Mutation, OwnerKind, OwnerStatus, Variant, VariantState},
    variant::{self, Base, Owner},
};
use serde_json::{Value, json};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    time::Instant,
};

/// The admin token the operator runs with.
pub(crate) const ADMIN: &str = "admin-token-for-the-chaos-suite-0123456789";
/// The operator's Lease duration: a replacement of a killed operator leads after this.
pub(crate) const LEASE_SECONDS: &str = "6";
/// The labels of each owner's first and second worker.
pub(crate) const LABELS: [&[&str]; 2] = [&["a", "b", "c"], &["d", "e", TAKEN]];
/// The owners of a run, in the order their workers draw from the seed.
pub(crate) const OWNERS: [(Kind, &str); 5] = [
    (Kind::Mutation, "m0"),
    (Kind::Mutation, "m1"),
    (Kind::Mutation, "m2"),
    (Kind::MutantDeployment, "d0"),
    (Kind::MutantDeployment, "d1"),
];
/// A label whose Deployment name is held by a foreign Deployment: declared, it is a Conflict.
pub(crate) const TAKEN: &str = "taken";
/// How long reads may fail (the API server restarting) before the test gives up.
pub(crate) const READ_DEADLINE: Duration = Duration::from_secs(180);
/// How long one API request may take before the operator counts as hung.
pub(crate) const HTTP_TIMEOUT: Duration = Duration::from_secs(60);
/// Longer than the API server's own request timeout (60 s), so a spec edit that timed out
/// here cannot still land later.
pub(crate) const KUBE_WRITE_TIMEOUT: Duration = Duration::from_secs(70);
/// How long the cluster may take to converge after the run.
pub(crate) const CONVERGE: Duration = Duration::from_secs(300);
/// The pause after an uncertain write, before the worker's next one.
pub(crate) const SETTLE: Duration = Duration::from_secs(1);

/// Writes a line to the real stderr, past the test harness's capture, so the seed, progress
/// and figures show even when the test passes.
pub(crate) fn say(text: &str) {
    let _ = writeln!(std::io::stderr(), "{text}");
}

use faults::*;
use model::*;
use setup::*;
use verify::*;
use workers::*;

// --- the test -------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "chaos: restarts the API server; scripts/test runs it alone"]
async fn chaos_converges() {
    let seconds = env_number("MUTANTOPS_CHAOS_SECONDS").unwrap_or(60);
    let seed = env_number("MUTANTOPS_CHAOS_SEED").unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    });
    say(&format!(
        "chaos: seed {seed}, {seconds} s (replay: MUTANTOPS_CHAOS_SEED={seed} \
         MUTANTOPS_CHAOS_SECONDS={seconds})"
    ));
    let (_ns, ctx) = start("chaos").await;

    // Three Mutations and two MutantDeployments; beside each, two foreign Deployments with its
    // labels: one on the name of its variant TAKEN, one on a name no variant has.
    let mut owners = Vec::new();
    let mut foreign = Vec::new();
    let (worker_rngs, fault_rng) = fault_rng(seed);
    let mut worker_rngs = worker_rngs.into_iter();
    let mut workers = Vec::new();
    for (i, (kind, name)) in OWNERS.iter().enumerate() {
        let owner = Arc::new(create_owner(&ctx, *kind, name, i).await);
        foreign.push(create_foreign(&ctx, &owner, TAKEN).await);
        foreign.push(create_foreign(&ctx, &owner, "stray").await);
        for labels in LABELS {
            let worker_rng = worker_rngs.next().unwrap();
            workers.push(Worker::new(
                owner.clone(),
                labels,
                &initial_variants(i),
                worker_rng,
            ));
        }
        owners.push(owner);
    }

    let started = Instant::now();
    let until = started + Duration::from_secs(seconds);
    let chaos_task = tokio::spawn(chaos(ctx.clone(), fault_rng, until, started));
    let tasks: Vec<_> = workers
        .into_iter()
        .map(|w| tokio::spawn(w.run(ctx.clone(), until)))
        .collect();
    if let Err(e) = chaos_task.await {
        std::panic::resume_unwind(e.into_panic());
    }
    let mut workers = Vec::new();
    for task in tasks {
        match task.await {
            Ok(w) => workers.push(w),
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
    ctx.watch_operator().await;
    say(&progress(&ctx, started));

    // The final specs: every label as the writes allow, nothing else declared.
    let mut finals = BTreeMap::new();
    for owner in &owners {
        let obj = ctx.read_owner(owner.kind, &owner.name).await;
        let (_, list) = spec_list(&obj, owner.kind);
        for w in workers.iter_mut().filter(|w| Arc::ptr_eq(&w.owner, owner)) {
            w.verify(&ctx, &list, "final spec");
        }
        let pool: BTreeSet<&str> = LABELS.iter().flat_map(|l| l.iter().copied()).collect();
        for v in &list {
            if !pool.contains(v.label.as_str()) {
                ctx.violation(format!(
                    "{:?} {}: final spec declares {:?}, which no one wrote",
                    owner.kind, owner.name, v.label
                ));
            }
        }
        finals.insert(owner.name.clone(), list);
    }

    // Convergence: exactly the final specs.
    let last_fault = ctx.stats.lock().unwrap().last_fault.unwrap_or(started);
    let last_write = ctx.stats.lock().unwrap().last_write.unwrap_or(started);
    let deadline = Instant::now() + CONVERGE;
    let mut next_report = Instant::now() + Duration::from_secs(10);
    // When the Deployments and Secrets last became exactly right.
    let mut objects_right: Option<Instant> = None;
    let mut states;
    loop {
        let found = differences(&ctx, &owners, &finals, &foreign).await;
        states = found.states;
        if found.objects.is_empty() {
            objects_right.get_or_insert_with(Instant::now);
        } else {
            objects_right = None;
        }
        if found.objects.is_empty() && found.statuses.is_empty() {
            break;
        }
        let problems: Vec<String> = found.objects.into_iter().chain(found.statuses).collect();
        if Instant::now() >= next_report {
            next_report = Instant::now() + Duration::from_secs(10);
            say(&format!(
                "chaos: converging, {:.0}s after the last fault; {} differences, e.g.:\n  {}",
                last_fault.elapsed().as_secs_f64(),
                problems.len(),
                problems[..problems.len().min(4)].join("\n  ")
            ));
        }
        if Instant::now() >= deadline {
            ctx.violation(format!(
                "no convergence {CONVERGE:?} after the run; what differs:\n  {}",
                problems.join("\n  ")
            ));
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let now = Instant::now();
    ctx.watch_operator().await;
    let converged = Convergence {
        objects: objects_right
            .unwrap_or(now)
            .saturating_duration_since(last_fault),
        statuses: now - last_fault,
        since_write: now - last_write,
        states,
    };
    say(&figures(&ctx, seed, seconds, &converged));
    let stats = ctx.stats.lock().unwrap();
    let acked = stats
        .ops
        .iter()
        .filter(|((_, _, o), _)| *o == Outcome::Acked)
        .count();
    assert!(acked > 0, "no write was acknowledged at all");
    assert!(
        stats.violations.is_empty(),
        "{} violations (seed {seed}):\n{}",
        stats.violations.len(),
        stats.violations.join("\n")
    );
}
