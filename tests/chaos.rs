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

mod common;

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt::Write as _,
    io::Write as _,
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
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
const ADMIN: &str = "admin-token-for-the-chaos-suite-0123456789";
/// The operator's Lease duration: a replacement of a killed operator leads after this.
const LEASE_SECONDS: &str = "6";
/// The labels of each owner's first and second worker.
const LABELS: [&[&str]; 2] = [&["a", "b", "c"], &["d", "e", TAKEN]];
/// A label whose Deployment name is held by a foreign Deployment: declared, it is a Conflict.
const TAKEN: &str = "taken";
/// How long reads may fail (the API server restarting) before the test gives up.
const READ_DEADLINE: Duration = Duration::from_secs(180);
/// How long one API request may take before the operator counts as hung.
const HTTP_TIMEOUT: Duration = Duration::from_secs(60);
/// Longer than the API server's own request timeout (60 s), so a spec edit that timed out
/// here cannot still land later.
const KUBE_WRITE_TIMEOUT: Duration = Duration::from_secs(70);
/// How long the cluster may take to converge after the run.
const CONVERGE: Duration = Duration::from_secs(300);
/// The pause after an uncertain write, before the worker's next one.
const SETTLE: Duration = Duration::from_secs(1);

/// Writes a line to the real stderr, past the test harness's capture, so the seed, progress
/// and figures show even when the test passes.
fn say(text: &str) {
    let _ = writeln!(std::io::stderr(), "{text}");
}

// --- randomness -----------------------------------------------------------------------------

/// xorshift64*: small, seedable, good enough to pick operations.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        // splitmix64 of the seed, so nearby seeds start far apart; never zero.
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((z ^ (z >> 31)) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    fn millis(&mut self, low: u64, high: u64) -> Duration {
        Duration::from_millis(low + self.below(high - low + 1))
    }

    /// A variant's env: sometimes overriding the base's `MODE`, sometimes a variable of its
    /// own, with random values.
    fn env(&mut self) -> BTreeMap<String, String> {
        let mut env = BTreeMap::new();
        if self.below(2) == 0 {
            env.insert("MODE".to_string(), format!("m{:x}", self.below(1 << 16)));
        }
        if self.below(3) != 0 {
            let name = format!("V_{}", self.below(3));
            env.insert(name, format!("{:x}", self.next() >> 40));
        }
        env
    }

    fn instances(&mut self) -> i32 {
        self.below(3) as i32
    }
}

// --- owners ------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Mutation,
    MutantDeployment,
}

impl Kind {
    fn owner_kind(self) -> OwnerKind {
        match self {
            Kind::Mutation => OwnerKind::Mutation,
            Kind::MutantDeployment => OwnerKind::MutantDeployment,
        }
    }

    /// The spec field that lists the variants.
    fn field(self) -> &'static str {
        match self {
            Kind::Mutation => "variants",
            Kind::MutantDeployment => "mutations",
        }
    }

    fn resource(self) -> ApiResource {
        match self {
            Kind::Mutation => ApiResource::erase::<Mutation>(&()),
            Kind::MutantDeployment => ApiResource::erase::<MutantDeployment>(&()),
        }
    }
}

/// A Mutation's Secret as it was right after the operator created it (R14).
#[derive(Clone, Debug, PartialEq)]
struct SecretRecord {
    uid: String,
    created: String,
    token: String,
}

struct OwnerInfo {
    kind: Kind,
    name: String,
    /// The base Deployment's name.
    base: String,
    uid: String,
    secret: Option<SecretRecord>,
}

impl OwnerInfo {
    fn owner(&self, ns: &str) -> Owner {
        Owner {
            kind: self.kind.owner_kind(),
            name: self.name.clone(),
            namespace: ns.to_string(),
            uid: self.uid.clone(),
        }
    }

    fn token(&self) -> &str {
        &self.secret.as_ref().expect("a Mutation has a Secret").token
    }
}

/// The env of a variant's container as R4 builds it from [`base`]: `BASE=1`, `MODE=base`, each
/// variant variable replacing the base's of the same name in place, the others appended in
/// name order.
fn expected_env(env: &BTreeMap<String, String>) -> Vec<(String, String)> {
    let mut out = vec![
        ("BASE".to_string(), "1".to_string()),
        ("MODE".to_string(), "base".to_string()),
    ];
    for (name, value) in env {
        match out.iter_mut().find(|(n, _)| n == name) {
            Some(entry) => entry.1 = value.clone(),
            None => out.push((name.clone(), value.clone())),
        }
    }
    out
}

/// A Deployment that the operator must never touch: it carries an owner's labels but no
/// ownerReference. Recorded as created.
#[derive(Clone, Debug)]
struct Foreign {
    name: String,
    uid: String,
    generation: Option<i64>,
    labels: BTreeMap<String, String>,
}

// --- the model ---------------------------------------------------------------------------------

/// What one label of an owner's spec holds.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Slot {
    Absent,
    Present {
        env: BTreeMap<String, String>,
        instances: i32,
    },
}

impl Slot {
    fn of(list: &[Variant], label: &str) -> Slot {
        match list.iter().find(|v| v.label == label) {
            Some(v) => Slot::Present {
                env: v.env.clone(),
                instances: v.instances,
            },
            None => Slot::Absent,
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    Add {
        env: BTreeMap<String, String>,
        instances: i32,
    },
    Scale {
        instances: i32,
    },
    Remove,
}

impl Op {
    fn name(&self) -> &'static str {
        match self {
            Op::Add { .. } => "add",
            Op::Scale { .. } => "scale",
            Op::Remove => "remove",
        }
    }

    /// The state after this op on `slot`, or `None` when it is refused there.
    fn apply(&self, slot: &Slot) -> Option<Slot> {
        match (self, slot) {
            (Op::Add { env, instances }, Slot::Absent) => Some(Slot::Present {
                env: env.clone(),
                instances: *instances,
            }),
            (Op::Scale { instances }, Slot::Present { env, .. }) => Some(Slot::Present {
                env: env.clone(),
                instances: *instances,
            }),
            (Op::Remove, Slot::Present { .. }) => Some(Slot::Absent),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Acked,
    Refused,
    Uncertain,
    Unreachable,
}

const OUTCOMES: [Outcome; 4] = [
    Outcome::Acked,
    Outcome::Refused,
    Outcome::Uncertain,
    Outcome::Unreachable,
];

// --- shared state ---------------------------------------------------------------------------------

#[derive(Default)]
struct Stats {
    ops: BTreeMap<(&'static str, &'static str, Outcome), u64>,
    violations: Vec<String>,
    operator_kills: u64,
    hung_kills: u64,
    self_exits: Vec<String>,
    apiserver_restarts: u64,
    apiserver_restart_seconds: Vec<f64>,
    last_fault: Option<Instant>,
    last_write: Option<Instant>,
}

struct Ctx {
    client: Client,
    ns: String,
    api_port: u16,
    script: PathBuf,
    operator: tokio::sync::Mutex<OperatorProcess>,
    stats: Mutex<Stats>,
}

impl Ctx {
    fn violation(&self, text: String) {
        say(&format!("chaos: VIOLATION: {text}"));
        self.stats.lock().unwrap().violations.push(text);
    }

    fn count(&self, channel: &'static str, op: &'static str, outcome: Outcome) {
        let mut stats = self.stats.lock().unwrap();
        *stats.ops.entry((channel, op, outcome)).or_default() += 1;
        if outcome != Outcome::Unreachable {
            stats.last_write = Some(Instant::now());
        }
    }

    fn fault_done(&self) {
        self.stats.lock().unwrap().last_fault = Some(Instant::now());
    }

    fn api(&self, kind: Kind) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.ns, &kind.resource())
    }

    /// Kills the operator with SIGKILL and starts it again after `pause`.
    async fn kill_operator(&self, pause: Duration, hung: bool) {
        let mut operator = self.operator.lock().await;
        operator.kill();
        {
            let mut stats = self.stats.lock().unwrap();
            stats.operator_kills += 1;
            if hung {
                stats.hung_kills += 1;
            }
        }
        tokio::time::sleep(pause).await;
        operator.start();
    }

    /// Restarts the operator if it exited by itself, as the kubelet would.
    async fn watch_operator(&self) {
        let mut operator = self.operator.lock().await;
        if let Some(status) = operator.exited() {
            let text = format!(
                "operator start #{} exited by itself ({status}); log: {}",
                operator.starts,
                operator.log.display()
            );
            say(&format!("chaos: {text}"));
            self.stats.lock().unwrap().self_exits.push(text);
            tokio::time::sleep(Duration::from_secs(1)).await;
            operator.start();
        }
    }

    async fn restart_apiserver(&self) {
        let started = Instant::now();
        let out = tokio::process::Command::new(&self.script)
            .arg("restart-apiserver")
            .output()
            .await
            .unwrap();
        assert!(
            out.status.success(),
            "scripts/cluster restart-apiserver failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let mut stats = self.stats.lock().unwrap();
        stats.apiserver_restarts += 1;
        stats
            .apiserver_restart_seconds
            .push(started.elapsed().as_secs_f64());
    }

    /// Reads an owner, retrying while the API server is away.
    async fn read_owner(&self, kind: Kind, name: &str) -> DynamicObject {
        let api = self.api(kind);
        retry_read(&format!("{kind:?} {name}"), || api.get(name)).await
    }
}

/// Runs a read until it succeeds; panics after [`READ_DEADLINE`].
async fn retry_read<T, F, Fut>(what: &str, mut read: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let deadline = Instant::now() + READ_DEADLINE;
    loop {
        let error = match tokio::time::timeout(Duration::from_secs(20), read()).await {
            Ok(Ok(value)) => return value,
            Ok(Err(e)) => e.to_string(),
            Err(_) => "no answer in 20 s".to_string(),
        };
        assert!(
            Instant::now() < deadline,
            "reading {what} failed for {READ_DEADLINE:?}; last error: {error}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Whether a failed request never reached the server: its connection was refused.
fn connection_refused(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(err);
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        next = e.source();
    }
    false
}

// --- the operator process ---------------------------------------------------------------------

/// The `mutantops` binary on one namespace, on fixed ports across restarts (as a pod behind
/// its Service), its log appended across restarts.
struct OperatorProcess {
    child: Option<Child>,
    log: PathBuf,
    ns: String,
    api_port: u16,
    metrics_port: u16,
    starts: u32,
}

impl OperatorProcess {
    fn new(ns: &str) -> OperatorProcess {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("operator-logs");
        std::fs::create_dir_all(&dir).unwrap();
        OperatorProcess {
            child: None,
            log: dir.join(format!("{ns}.log")),
            ns: ns.to_string(),
            api_port: common::free_port(),
            metrics_port: common::free_port(),
            starts: 0,
        }
    }

    /// Starts it, always with the same environment.
    fn start(&mut self) {
        self.starts += 1;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        writeln!(file, "=== chaos: operator start #{} ===", self.starts).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_mutantops"))
            .env("MUTANT_WATCH_NAMESPACE", &self.ns)
            .env("MUTANT_API_ADDR", format!("127.0.0.1:{}", self.api_port))
            .env(
                "MUTANT_METRICS_ADDR",
                format!("127.0.0.1:{}", self.metrics_port),
            )
            .env("MUTANT_API_TOKEN", ADMIN)
            .env("MUTANT_LEASE_DURATION_SECONDS", LEASE_SECONDS)
            .env("RUST_LOG", "info,mutantops=debug")
            .env_remove("MUTANT_API_INSECURE")
            .env_remove("POD_NAME")
            .env_remove("POD_NAMESPACE")
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    /// SIGKILL, as a crash or an OOM kill, and reaps it.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The exit status, if it has exited by itself.
    fn exited(&mut self) -> Option<ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok().flatten()?;
        self.child = None;
        Some(status)
    }
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(80)..];
            say(&format!(
                "--- last lines of the operator log ({}) ---\n{}",
                self.log.display(),
                tail.join("\n")
            ));
        }
    }
}

// --- the HTTP API, without panics ------------------------------------------------------------------

#[derive(Debug)]
enum Wire {
    Answer(common::http::Reply),
    /// No connection: nothing was sent.
    Unreachable(String),
    /// Sent, and the connection broke before a whole answer came.
    Lost(String),
    /// Sent, and no answer within [`HTTP_TIMEOUT`].
    Hung,
}

async fn send(port: u16, method: &str, path: &str, token: &str, body: Option<&Value>) -> Wire {
    let connect = tokio::time::timeout(
        Duration::from_secs(5),
        TcpStream::connect(("127.0.0.1", port)),
    )
    .await;
    let mut stream = match connect {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => return Wire::Unreachable(e.to_string()),
        Err(_) => return Wire::Unreachable("connect timed out".to_string()),
    };
    let body = body.map(Value::to_string).unwrap_or_default();
    let mut raw = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\
         Authorization: Bearer {token}\r\n"
    );
    if !body.is_empty() {
        write!(
            raw,
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        )
        .unwrap();
    }
    raw.push_str("\r\n");
    raw.push_str(&body);
    if let Err(e) = stream.write_all(raw.as_bytes()).await {
        return Wire::Lost(e.to_string());
    }
    let mut out = Vec::new();
    let read = tokio::time::timeout(HTTP_TIMEOUT, stream.read_to_end(&mut out)).await;
    let Ok(read) = read else { return Wire::Hung };
    let text = String::from_utf8_lossy(&out);
    match common::http::parse(&text) {
        Some(reply) if complete(&reply) => Wire::Answer(reply),
        _ => Wire::Lost(match read {
            Err(e) => e.to_string(),
            Ok(n) => format!("connection closed after {n} bytes without a whole answer"),
        }),
    }
}

/// The message of an error answer (`{"error": "..."}`), or the raw body.
fn error_of(reply: &common::http::Reply) -> String {
    serde_json::from_str::<Value>(&reply.body)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_string))
        .unwrap_or_else(|| reply.body.clone())
}

/// Whether the body is as long as the Content-Length said.
fn complete(reply: &common::http::Reply) -> bool {
    reply
        .header("content-length")
        .and_then(|l| l.parse::<usize>().ok())
        .is_none_or(|l| reply.body.len() >= l)
}

// --- workers ----------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Channel {
    /// The HTTP API with the Mutation's own token.
    Token,
    /// The HTTP API with the admin token.
    Admin,
    /// A spec edit through the Kubernetes API.
    Kube,
}

impl Channel {
    fn name(self) -> &'static str {
        match self {
            Channel::Token => "api-token",
            Channel::Admin => "api-admin",
            Channel::Kube => "kube-spec",
        }
    }
}

/// One writer of some labels of one owner, with the model of those labels.
struct Worker {
    owner: Arc<OwnerInfo>,
    labels: &'static [&'static str],
    model: BTreeMap<&'static str, BTreeSet<Slot>>,
    rng: Rng,
    /// The last operations, for the message of a violation.
    history: Vec<String>,
}

impl Worker {
    fn new(
        owner: Arc<OwnerInfo>,
        labels: &'static [&'static str],
        initial: &[Variant],
        rng: Rng,
    ) -> Worker {
        let model = labels
            .iter()
            .map(|l| (*l, BTreeSet::from([Slot::of(initial, l)])))
            .collect();
        Worker {
            owner,
            labels,
            model,
            rng,
            history: Vec::new(),
        }
    }

    fn note(&mut self, text: String) {
        if self.history.len() == 16 {
            self.history.remove(0);
        }
        self.history.push(text);
    }

    fn who(&self, label: &str) -> String {
        format!("{:?} {} label {label:?}", self.owner.kind, self.owner.name)
    }

    async fn run(mut self, ctx: Arc<Ctx>, until: Instant) -> Worker {
        while Instant::now() < until {
            let pause = self.rng.millis(150, 1000);
            tokio::time::sleep(pause).await;
            let channel = match (self.owner.kind, self.rng.below(10)) {
                (Kind::MutantDeployment, _) | (Kind::Mutation, 0..=3) => Channel::Kube,
                (Kind::Mutation, 4..=5) => Channel::Admin,
                (Kind::Mutation, _) => Channel::Token,
            };
            let outcome = match channel {
                Channel::Kube => self.spec_edit(&ctx).await,
                Channel::Token | Channel::Admin => self.api_edit(&ctx, channel).await,
            };
            if outcome == Outcome::Uncertain {
                tokio::time::sleep(SETTLE).await;
            }
        }
        self
    }

    /// An add, scale or remove through the HTTP API.
    async fn api_edit(&mut self, ctx: &Ctx, channel: Channel) -> Outcome {
        let label = *self.rng.pick(self.labels);
        let possible = self.model[label].clone();
        let maybe_absent = possible.contains(&Slot::Absent);
        let maybe_present = possible.iter().any(|s| matches!(s, Slot::Present { .. }));
        let r = self.rng.below(100);
        // Mostly what can succeed, sometimes what must be refused.
        let op = match (maybe_absent, maybe_present, r) {
            (true, false, 0..=89) | (true, true, 0..=33) | (false, true, 0..=4) => Op::Add {
                env: self.rng.env(),
                instances: self.rng.instances(),
            },
            (true, false, 90..=94) | (true, true, 34..=66) | (false, true, 5..=64) => Op::Scale {
                instances: self.rng.instances(),
            },
            _ => Op::Remove,
        };
        let token = match channel {
            Channel::Admin => ADMIN,
            _ => self.owner.token(),
        };
        let variants = format!(
            "/api/v1/namespaces/{}/mutations/{}/variants",
            ctx.ns, self.owner.name
        );
        let (method, path, body) = match &op {
            Op::Add { env, instances } => (
                "POST",
                variants,
                Some(json!({ "label": label, "env": env, "instances": instances })),
            ),
            Op::Scale { instances } => (
                "PATCH",
                format!("{variants}/{label}"),
                Some(json!({ "instances": instances })),
            ),
            Op::Remove => ("DELETE", format!("{variants}/{label}"), None),
        };
        let wire = send(ctx.api_port, method, &path, token, body.as_ref()).await;
        if matches!(wire, Wire::Hung) {
            // The request may still be in progress: end it, so it cannot land later.
            ctx.kill_operator(Duration::ZERO, true).await;
        }
        let who = self.who(label);
        let done: Vec<Slot> = possible.iter().filter_map(|s| op.apply(s)).collect();
        let outcome = match &wire {
            Wire::Unreachable(_) => Outcome::Unreachable,
            Wire::Lost(_) | Wire::Hung => Outcome::Uncertain,
            Wire::Answer(reply) => match (&op, reply.status) {
                (Op::Add { .. }, 201) | (Op::Scale { .. }, 200) | (Op::Remove, 204) => {
                    Outcome::Acked
                }
                // Refused for the label, and for nothing else (the body says which).
                (Op::Add { .. }, 409)
                    if error_of(reply).contains(&format!("variant {label:?} already exists")) =>
                {
                    Outcome::Refused
                }
                (Op::Scale { .. } | Op::Remove, 404)
                    if error_of(reply).contains(&format!("variant {label:?} not found")) =>
                {
                    Outcome::Refused
                }
                (_, status) if status >= 500 => Outcome::Uncertain,
                (_, status) => {
                    ctx.violation(format!(
                        "{who}: {} {path} answered {status}: {}",
                        method, reply.body
                    ));
                    Outcome::Uncertain
                }
            },
        };
        let answer = match &wire {
            Wire::Answer(reply) => reply.status.to_string(),
            Wire::Unreachable(e) => format!("unreachable: {e}"),
            Wire::Lost(e) => format!("lost: {e}"),
            Wire::Hung => "no answer".to_string(),
        };
        self.note(format!(
            "{} {} {label} {op:?} -> {answer}",
            channel.name(),
            op.name()
        ));
        ctx.count(channel.name(), op.name(), outcome);
        match outcome {
            Outcome::Unreachable => {}
            Outcome::Uncertain => {
                self.model.get_mut(label).unwrap().extend(done);
            }
            Outcome::Refused => {
                let left: BTreeSet<Slot> = possible
                    .iter()
                    .filter(|s| op.apply(s).is_none())
                    .cloned()
                    .collect();
                if left.is_empty() {
                    ctx.violation(format!(
                        "{who}: {method} {path} was refused ({answer}), but the writes before \
                         it allow only {possible:?}, where it succeeds; recent: {:#?}",
                        self.history
                    ));
                    self.resync(ctx, label).await;
                } else {
                    self.model.insert(label, left);
                }
            }
            Outcome::Acked => {
                let Wire::Answer(reply) = &wire else {
                    unreachable!()
                };
                let after = match &op {
                    Op::Remove => Slot::Absent,
                    _ => {
                        let view = reply.json();
                        Slot::Present {
                            env: serde_json::from_value(view["env"].clone()).unwrap(),
                            instances: view["instances"].as_i64().unwrap() as i32,
                        }
                    }
                };
                if !done.contains(&after) {
                    ctx.violation(format!(
                        "{who}: {method} {path} answered {} with {after:?}, but from what the \
                         writes before it allow ({possible:?}) it can only give {done:?}; \
                         recent: {:#?}",
                        reply.status, self.history
                    ));
                }
                self.model.insert(label, BTreeSet::from([after]));
            }
        }
        outcome
    }

    /// Sets the model of `label` to what the spec holds now (after a violation, so one
    /// problem is reported once).
    async fn resync(&mut self, ctx: &Ctx, label: &'static str) {
        let obj = ctx.read_owner(self.owner.kind, &self.owner.name).await;
        let (_, list) = spec_list(&obj, self.owner.kind);
        self.model
            .insert(label, BTreeSet::from([Slot::of(&list, label)]));
    }

    /// Checks this worker's labels in a spec just read against the model.
    fn verify(&mut self, ctx: &Ctx, list: &[Variant], when: &str) {
        for &label in self.labels {
            let count = list.iter().filter(|v| v.label == label).count();
            if count > 1 {
                ctx.violation(format!(
                    "{} {when}: declared {count} times: {list:?}",
                    self.who(label)
                ));
            }
            let seen = Slot::of(list, label);
            if !self.model[label].contains(&seen) {
                ctx.violation(format!(
                    "{} {when}: the spec holds {seen:?}, but the acknowledged writes allow only \
                     {:?}; recent: {:#?}",
                    self.who(label),
                    self.model[label],
                    self.history
                ));
                self.model.insert(label, BTreeSet::from([seen]));
            }
        }
    }

    /// A read-modify-write of the owner's spec through the Kubernetes API, guarded by the
    /// resourceVersion that was read.
    async fn spec_edit(&mut self, ctx: &Ctx) -> Outcome {
        let kind = self.owner.kind;
        let obj = ctx.read_owner(kind, &self.owner.name).await;
        let (rv, list) = spec_list(&obj, kind);
        self.verify(ctx, &list, "read before a spec edit");
        let label = *self.rng.pick(self.labels);
        let op = match Slot::of(&list, label) {
            Slot::Absent => Op::Add {
                env: self.rng.env(),
                instances: self.rng.instances(),
            },
            Slot::Present { .. } if self.rng.below(10) < 6 => Op::Scale {
                instances: self.rng.instances(),
            },
            Slot::Present { .. } => Op::Remove,
        };
        let mut new_list = list.clone();
        match &op {
            Op::Add { env, instances } => new_list.push(Variant {
                label: label.to_string(),
                env: env.clone(),
                instances: *instances,
            }),
            Op::Scale { instances } => {
                for v in new_list.iter_mut().filter(|v| v.label == label) {
                    v.instances = *instances;
                }
            }
            Op::Remove => new_list.retain(|v| v.label != label),
        }
        let patch = json!({
            "metadata": { "resourceVersion": rv },
            "spec": { kind.field(): new_list },
        });
        let params = PatchParams {
            field_manager: Some("chaos-test".to_string()),
            ..PatchParams::default()
        };
        let api = ctx.api(kind);
        let result = tokio::time::timeout(
            KUBE_WRITE_TIMEOUT,
            api.patch(&self.owner.name, &params, &Patch::Merge(&patch)),
        )
        .await;
        let (outcome, answer) = match &result {
            Ok(Ok(_)) => (Outcome::Acked, "200".to_string()),
            Ok(Err(kube::Error::Api(s))) if s.code == 409 || s.code == 429 => {
                (Outcome::Refused, s.code.to_string())
            }
            Ok(Err(kube::Error::Api(s))) if s.code >= 500 => {
                (Outcome::Uncertain, format!("{} {}", s.code, s.message))
            }
            Ok(Err(kube::Error::Api(s))) => {
                ctx.violation(format!(
                    "{}: the spec edit was rejected: {} {}",
                    self.who(label),
                    s.code,
                    s.message
                ));
                (Outcome::Uncertain, s.code.to_string())
            }
            Ok(Err(e)) if connection_refused(e) => (Outcome::Unreachable, e.to_string()),
            Ok(Err(e)) => (Outcome::Uncertain, e.to_string()),
            Err(_) => (Outcome::Uncertain, "timed out".to_string()),
        };
        self.note(format!(
            "kube-spec {} {label} {op:?} -> {answer}",
            op.name()
        ));
        ctx.count(Channel::Kube.name(), op.name(), outcome);
        for &l in self.labels {
            let written = Slot::of(&new_list, l);
            match outcome {
                Outcome::Acked => {
                    self.model.insert(l, BTreeSet::from([written]));
                }
                Outcome::Uncertain => {
                    self.model.get_mut(l).unwrap().insert(written);
                }
                Outcome::Refused | Outcome::Unreachable => {}
            }
        }
        outcome
    }
}

/// The resourceVersion and the variants of an owner read as a dynamic object.
fn spec_list(obj: &DynamicObject, kind: Kind) -> (String, Vec<Variant>) {
    let rv = obj.metadata.resource_version.clone().unwrap();
    let list = obj.data["spec"]
        .get(kind.field())
        .cloned()
        .map(|v| serde_json::from_value(v).unwrap())
        .unwrap_or_default();
    (rv, list)
}

// --- faults --------------------------------------------------------------------------------------

/// Sleeps until `wake`, restarting the operator meanwhile if it exits by itself.
async fn watched_sleep(ctx: &Ctx, wake: Instant) {
    while Instant::now() < wake {
        let step = (wake - Instant::now()).min(Duration::from_millis(250));
        tokio::time::sleep(step).await;
        ctx.watch_operator().await;
    }
}

/// Kills the operator and restarts the API server at random moments until `until`.
async fn chaos(ctx: Arc<Ctx>, mut rng: Rng, until: Instant, started: Instant) {
    let mut next_progress = Instant::now() + Duration::from_secs(30);
    loop {
        let wake = Instant::now() + rng.millis(2000, 9000);
        if wake >= until {
            watched_sleep(&ctx, until).await;
            return;
        }
        watched_sleep(&ctx, wake).await;
        match rng.below(100) {
            0..=54 => ctx.kill_operator(rng.millis(0, 2500), false).await,
            55..=89 => ctx.restart_apiserver().await,
            _ => {
                // Both at once: the operator starts again while the API server is away.
                let mut operator = ctx.operator.lock().await;
                operator.kill();
                ctx.stats.lock().unwrap().operator_kills += 1;
                let pause = rng.millis(0, 2000);
                let start_later = async {
                    tokio::time::sleep(pause).await;
                    operator.start();
                };
                tokio::join!(ctx.restart_apiserver(), start_later);
            }
        }
        ctx.fault_done();
        if Instant::now() >= next_progress {
            next_progress = Instant::now() + Duration::from_secs(30);
            say(&progress(&ctx, started));
        }
    }
}

fn progress(ctx: &Ctx, started: Instant) -> String {
    let stats = ctx.stats.lock().unwrap();
    let total: u64 = stats.ops.values().sum();
    let acked: u64 = stats
        .ops
        .iter()
        .filter(|((_, _, o), _)| *o == Outcome::Acked)
        .map(|(_, n)| n)
        .sum();
    format!(
        "chaos: {:>4.0}s: {total} writes ({acked} acknowledged), {} operator kills, {} API \
         server restarts, {} violations",
        started.elapsed().as_secs_f64(),
        stats.operator_kills,
        stats.apiserver_restarts,
        stats.violations.len()
    )
}

// --- the end state ------------------------------------------------------------------------------

/// What differs from the final specs, in two parts: the objects the operator writes
/// (Deployments, Secrets; R4–R6, R9, R14) and the statuses it reports (R11), which also wait
/// for the Deployment controller and the pods.
#[derive(Default)]
struct Differences {
    objects: Vec<String>,
    statuses: Vec<String>,
    /// How many variants each status reports in each state.
    states: BTreeMap<&'static str, usize>,
}

/// Everything about the cluster that differs from the final specs; empty when it has
/// converged.
async fn differences(
    ctx: &Ctx,
    owners: &[Arc<OwnerInfo>],
    finals: &BTreeMap<String, Vec<Variant>>,
    foreign: &[Foreign],
) -> Differences {
    let mut problems = Vec::new();
    let mut statuses = Vec::new();
    let mut states = BTreeMap::new();
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ctx.ns);
    let list = match tokio::time::timeout(
        Duration::from_secs(20),
        deployments.list(&ListParams::default()),
    )
    .await
    {
        Ok(Ok(list)) => list.items,
        Ok(Err(e)) => {
            problems.push(format!("listing Deployments: {e}"));
            return Differences {
                objects: problems,
                statuses,
                states: BTreeMap::new(),
            };
        }
        Err(_) => {
            problems.push("listing Deployments: no answer".to_string());
            return Differences {
                objects: problems,
                statuses,
                states: BTreeMap::new(),
            };
        }
    };
    let mut by_name: BTreeMap<String, &Deployment> =
        list.iter().map(|d| (d.name_any(), d)).collect();

    for f in foreign {
        let Some(d) = by_name.remove(&f.name) else {
            problems.push(format!("foreign Deployment {} is gone", f.name));
            continue;
        };
        let managers: Vec<&str> = d
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .filter_map(|m| m.manager.as_deref())
            .collect();
        if d.metadata.uid.as_deref() != Some(f.uid.as_str())
            || d.metadata.generation != f.generation
            || d.labels() != &f.labels
            || !d.owner_references().is_empty()
            || d.metadata.deletion_timestamp.is_some()
            || managers.contains(&variant::FIELD_MANAGER)
        {
            problems.push(format!(
                "foreign Deployment {} was touched: uid {:?} generation {:?} labels {:?} \
                 ownerReferences {:?} managers {managers:?} (created as {f:?})",
                f.name,
                d.metadata.uid,
                d.metadata.generation,
                d.labels(),
                d.owner_references()
            ));
        }
    }

    for owner in owners {
        let declared = &finals[&owner.name];
        for v in declared.iter().filter(|v| v.label != TAKEN) {
            let name = variant::deployment_name(&owner.base, &v.label);
            match by_name.remove(&name) {
                None => problems.push(format!(
                    "{:?} {}: variant {:?} has no Deployment {name}",
                    owner.kind, owner.name, v.label
                )),
                Some(d) => problems.extend(deployment_differences(ctx, owner, v, d)),
            }
        }
        statuses.extend(status_differences(ctx, owner, declared, &list, &mut states).await);
        if let Some(record) = &owner.secret {
            problems.extend(secret_differences(ctx, owner, record).await);
        }
    }
    for (name, d) in by_name {
        problems.push(format!(
            "Deployment {name} is declared by no spec (orphan or duplicate): labels {:?} \
             ownerReferences {:?}",
            d.labels(),
            d.owner_references()
        ));
    }
    Differences {
        objects: problems,
        statuses,
        states,
    }
}

/// How Deployment `d` differs from variant `v` of `owner` as R4 and the operator build it.
fn deployment_differences(
    ctx: &Ctx,
    owner: &OwnerInfo,
    v: &Variant,
    d: &Deployment,
) -> Vec<String> {
    let mut problems = Vec::new();
    let name = d.name_any();
    let mut problem = |what: String| problems.push(format!("Deployment {name}: {what}"));
    let ours = BTreeMap::from([
        (variant::OWNER_LABEL.to_string(), owner.name.clone()),
        (variant::VARIANT_LABEL.to_string(), v.label.clone()),
        (
            variant::KIND_LABEL.to_string(),
            owner.kind.owner_kind().label_value().to_string(),
        ),
    ]);
    let with = |extra: (&str, &str)| {
        let mut labels = ours.clone();
        labels.insert(extra.0.to_string(), extra.1.to_string());
        labels
    };
    if d.metadata.deletion_timestamp.is_some() {
        problem("is being deleted".to_string());
    }
    if d.labels() != &with(("team", "edge")) {
        problem(format!("labels {:?}", d.labels()));
    }
    let refs = d.owner_references();
    let good_ref = refs.len() == 1
        && refs[0].api_version == "neiam.org/v1"
        && refs[0].kind == owner.kind.owner_kind().kind()
        && refs[0].name == owner.name
        && refs[0].uid == owner.uid
        && refs[0].controller == Some(true)
        && refs[0].block_owner_deletion == Some(true);
    if !good_ref {
        problem(format!("ownerReferences {refs:?}"));
    }
    let Some(spec) = d.spec.as_ref() else {
        problem("no spec".to_string());
        return problems;
    };
    if spec.replicas != Some(v.instances) {
        problem(format!(
            "replicas {:?}, declared {}",
            spec.replicas, v.instances
        ));
    }
    let selector = spec.selector.match_labels.clone().unwrap_or_default();
    if selector != with(("app", &owner.base)) {
        problem(format!("selector {selector:?}"));
    }
    let template_labels = spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    if template_labels != with(("app", &owner.base)) {
        problem(format!("pod template labels {template_labels:?}"));
    }
    let containers = spec
        .template
        .spec
        .as_ref()
        .map(|p| p.containers.clone())
        .unwrap_or_default();
    if containers.len() != 1 {
        problem(format!("{} containers", containers.len()));
    } else {
        let env: Vec<(String, String)> = containers[0]
            .env
            .iter()
            .flatten()
            .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
            .collect();
        if env != expected_env(&v.env) {
            problem(format!("env {env:?}, expected {:?}", expected_env(&v.env)));
        }
    }
    // Everything else (annotations, the desired-state hash) as the operator builds it.
    let base = Base::parse(&base(&owner.base)).unwrap();
    let desired = variant::build(&base, &owner.owner(&ctx.ns), v);
    let observed = serde_json::to_value(d)
        .and_then(serde_json::from_value::<variant::ObservedDeployment>)
        .unwrap();
    if variant::needs_apply(&desired, Some(&observed)) {
        problem("differs from what the operator builds for its variant".to_string());
    }
    problems
}

/// The state and ready replicas R11 gives a variant of `instances` whose Deployment is
/// `current`: Ready once the Deployment has observed its latest generation and its replicas,
/// updated and ready replicas all equal `instances`, else Progressing.
fn r11_state(instances: i32, current: Option<&Deployment>) -> (VariantState, i32) {
    let Some(d) = current else {
        return (VariantState::Progressing, 0);
    };
    let status = d.status.clone().unwrap_or_default();
    let ready = status.ready_replicas.unwrap_or(0);
    let done = status.observed_generation >= d.metadata.generation
        && d.spec.as_ref().and_then(|s| s.replicas) == Some(instances)
        && status.replicas.unwrap_or(0) == instances
        && status.updated_replicas.unwrap_or(0) == instances
        && ready == instances;
    if done {
        (VariantState::Ready, ready)
    } else {
        (VariantState::Progressing, ready)
    }
}

/// How the owner's spec and status differ from the final spec and from what R11 says of the
/// Deployments as they are now. Whether the pods become ready is up to the Deployment
/// controller and the (fake) kubelet, not the operator: a variant may stay Progressing, as
/// long as its status says so.
async fn status_differences(
    ctx: &Ctx,
    owner: &OwnerInfo,
    declared: &[Variant],
    deployments: &[Deployment],
    states: &mut BTreeMap<&'static str, usize>,
) -> Vec<String> {
    let obj = match tokio::time::timeout(
        Duration::from_secs(20),
        ctx.api(owner.kind).get(&owner.name),
    )
    .await
    {
        Ok(Ok(obj)) => obj,
        Ok(Err(e)) => return vec![format!("reading {}: {e}", owner.name)],
        Err(_) => return vec![format!("reading {}: no answer", owner.name)],
    };
    let who = format!("{:?} {}", owner.kind, owner.name);
    let (_, spec) = spec_list(&obj, owner.kind);
    if spec != declared {
        return vec![format!(
            "{who}: its spec changed after the run: {spec:?}, final was {declared:?}"
        )];
    }
    if obj.metadata.uid.as_deref() != Some(owner.uid.as_str()) {
        return vec![format!("{who}: uid changed to {:?}", obj.metadata.uid)];
    }
    let status: OwnerStatus = match obj.data.get("status") {
        Some(s) => serde_json::from_value(s.clone()).unwrap(),
        None => return vec![format!("{who}: no status")],
    };
    let mut problems = Vec::new();
    if status.observed_generation != obj.metadata.generation {
        problems.push(format!(
            "{who}: status observedGeneration {:?}, generation {:?}",
            status.observed_generation, obj.metadata.generation
        ));
    }
    let labels: Vec<&str> = status.variants.iter().map(|s| s.label.as_str()).collect();
    let want: Vec<&str> = declared.iter().map(|v| v.label.as_str()).collect();
    if labels != want {
        problems.push(format!("{who}: status lists {labels:?}, spec {want:?}"));
        return problems;
    }
    for (s, v) in status.variants.iter().zip(declared) {
        *states.entry(s.state.as_str()).or_default() += 1;
        let name = variant::deployment_name(&owner.base, &v.label);
        let current = deployments.iter().find(|d| d.name_any() == name);
        let good = if v.label == TAKEN {
            s.state == VariantState::Conflict
        } else {
            let (state, ready) = r11_state(v.instances, current);
            s.state == state
                && s.replicas == v.instances
                && s.ready_replicas == ready
                && s.deployment == name
        };
        if !good {
            let observed = current.map(|d| {
                let st = d.status.clone().unwrap_or_default();
                format!(
                    "generation {:?} observed {:?} replicas {:?} updated {:?} ready {:?}",
                    d.metadata.generation,
                    st.observed_generation,
                    st.replicas,
                    st.updated_replicas,
                    st.ready_replicas
                )
            });
            problems.push(format!(
                "{who}: status of {:?}: {:?} {}/{} (its Deployment now: {observed:?})",
                v.label, s.state, s.ready_replicas, s.replicas
            ));
        }
    }
    if owner.kind == Kind::Mutation && status.secret.as_deref() != Some(&*secret_name(owner)) {
        problems.push(format!("{who}: status secret {:?}", status.secret));
    }
    problems
}

fn secret_name(owner: &OwnerInfo) -> String {
    format!("{}-secret", owner.name)
}

/// R14: the Secret is the one created before the run, with the same token.
async fn secret_differences(ctx: &Ctx, owner: &OwnerInfo, record: &SecretRecord) -> Vec<String> {
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &ctx.ns);
    let name = secret_name(owner);
    match tokio::time::timeout(Duration::from_secs(20), api.get_opt(&name)).await {
        Ok(Ok(Some(secret))) => {
            let now = secret_record(&secret);
            if now != *record {
                vec![
                    format!(
                        "Secret {name} changed since its creation: was {:?}, now {:?}",
                        (&record.uid, &record.created),
                        (&now.uid, &now.created)
                    ) + if now.token == record.token {
                        ""
                    } else {
                        ", and its token changed"
                    },
                ]
            } else {
                Vec::new()
            }
        }
        Ok(Ok(None)) => vec![format!("Secret {name} is gone")],
        Ok(Err(e)) => vec![format!("reading Secret {name}: {e}")],
        Err(_) => vec![format!("reading Secret {name}: no answer")],
    }
}

fn secret_record(secret: &Secret) -> SecretRecord {
    SecretRecord {
        uid: secret.metadata.uid.clone().unwrap_or_default(),
        created: format!("{:?}", secret.metadata.creation_timestamp),
        token: secret
            .data
            .as_ref()
            .and_then(|d| d.get("token"))
            .map(|t| String::from_utf8_lossy(&t.0).to_string())
            .unwrap_or_default(),
    }
}

// --- set-up -------------------------------------------------------------------------------------

/// `scripts/cluster`, after checking that the cluster it manages (`MUTANTOPS_CLUSTER_DIR`, else
/// `<repo>/.cluster`) is the one in `KUBECONFIG`: the test restarts that API server.
fn cluster_script() -> PathBuf {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let state = std::env::var_os("MUTANTOPS_CLUSTER_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo.join(".cluster"));
    let theirs = state.join("kubeconfig");
    let ours = std::env::var_os("KUBECONFIG").map(PathBuf::from);
    let same = match (&ours, theirs.canonicalize()) {
        (Some(ours), Ok(theirs)) => ours.canonicalize().ok() == Some(theirs),
        _ => false,
    };
    assert!(
        same,
        "the chaos test restarts the API server of the cluster in {} (MUTANTOPS_CLUSTER_DIR, \
         else <repo>/.cluster), so KUBECONFIG must be its kubeconfig ({}), not {ours:?}. Run \
         `scripts/cluster up` and `eval \"$(scripts/cluster env)\"` with the same \
         MUTANTOPS_CLUSTER_DIR.",
        state.display(),
        theirs.display()
    );
    repo.join("scripts/cluster")
}

fn env_number(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    Some(
        value
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{name}={value:?}: {e}")),
    )
}

/// Creates a Deployment that carries `owner`'s labels but no ownerReference.
async fn create_foreign(ctx: &Ctx, owner: &OwnerInfo, variant_label: &str) -> Foreign {
    let name = variant::deployment_name(&owner.base, variant_label);
    let labels = BTreeMap::from([
        (variant::OWNER_LABEL.to_string(), owner.name.clone()),
        (
            variant::VARIANT_LABEL.to_string(),
            variant_label.to_string(),
        ),
        (
            variant::KIND_LABEL.to_string(),
            owner.kind.owner_kind().label_value().to_string(),
        ),
    ]);
    let d: Deployment = from_json(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": { "name": name, "labels": labels },
        "spec": {
            "replicas": 0,
            "selector": { "matchLabels": { "foreign": name } },
            "template": {
                "metadata": { "labels": { "foreign": name } },
                "spec": { "containers": [{ "name": "x", "image": "registry.example/x:1" }] }
            }
        }
    }));
    let api: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ctx.ns);
    let created = api.create(&PostParams::default(), &d).await.unwrap();
    Foreign {
        name,
        uid: created.metadata.uid.clone().unwrap(),
        generation: created.metadata.generation,
        labels: created.labels().clone(),
    }
}

/// The first variants of owner number `i`.
fn initial_variants(i: usize) -> Vec<Variant> {
    let mut list = vec![Variant {
        label: "a".to_string(),
        env: BTreeMap::from([("V_0".to_string(), format!("first-{i}"))]),
        instances: 1,
    }];
    if i.is_multiple_of(2) {
        list.push(Variant {
            label: "d".to_string(),
            env: BTreeMap::new(),
            instances: 0,
        });
    }
    list
}

/// Creates owner `name`: Mutations `m0` and `m1` through the HTTP API, the others through the
/// Kubernetes API. Waits for a Mutation's Secret and records it.
async fn create_owner(ctx: &Ctx, kind: Kind, name: &str, i: usize) -> OwnerInfo {
    let base_name = format!("{name}-app");
    let variants = initial_variants(i);
    if kind == Kind::Mutation && i < 2 {
        let body = json!({ "name": name, "deployment": base(&base_name), "variants": variants });
        let path = format!("/api/v1/namespaces/{}/mutations", ctx.ns);
        match send(ctx.api_port, "POST", &path, ADMIN, Some(&body)).await {
            Wire::Answer(reply) if reply.status == 201 => {}
            other => panic!("creating Mutation {name} through the API: {other:?}"),
        }
    } else {
        let manifest = json!({
            "apiVersion": "neiam.org/v1",
            "kind": format!("{:?}", kind),
            "metadata": { "name": name },
            "spec": { "deployment": base(&base_name), kind.field(): variants },
        });
        let obj: DynamicObject = serde_json::from_value(manifest).unwrap();
        ctx.api(kind)
            .create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("creating {kind:?} {name}: {e}"));
    }
    let obj = ctx.read_owner(kind, name).await;
    let secret = match kind {
        Kind::MutantDeployment => None,
        Kind::Mutation => {
            let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &ctx.ns);
            let secret_name = format!("{name}-secret");
            let secret = common::wait_for(
                &format!("Secret {secret_name}"),
                Duration::from_secs(60),
                || async {
                    match api.get_opt(&secret_name).await {
                        Ok(Some(s)) => Ok(s),
                        Ok(None) => Err("absent".to_string()),
                        Err(e) => Err(e.to_string()),
                    }
                },
            )
            .await;
            Some(secret_record(&secret))
        }
    };
    OwnerInfo {
        kind,
        name: name.to_string(),
        base: base_name,
        uid: obj.metadata.uid.clone().unwrap(),
        secret,
    }
}

/// Waits until the operator's API answers a list with the admin token.
async fn wait_api(ctx: &Ctx) {
    let path = format!("/api/v1/namespaces/{}/mutations", ctx.ns);
    common::wait_for("the HTTP API to serve", Duration::from_secs(60), || async {
        match send(ctx.api_port, "GET", &path, ADMIN, None).await {
            Wire::Answer(reply) if reply.status == 200 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

/// How long convergence took.
struct Convergence {
    /// From the last fault until the Deployments and Secrets were exactly right.
    objects: Duration,
    /// From the last fault until the statuses said what R11 says of the Deployments too.
    statuses: Duration,
    /// From the last write until the statuses were right.
    since_write: Duration,
    /// The variants by state as the statuses report them at the end.
    states: BTreeMap<&'static str, usize>,
}

fn figures(ctx: &Ctx, seed: u64, seconds: u64, converged: &Convergence) -> String {
    let stats = ctx.stats.lock().unwrap();
    let mut out = String::new();
    writeln!(
        out,
        "chaos figures (seed {seed}, {seconds} s):\n  {:<18}{:>8}{:>9}{:>11}{:>13}",
        "writes", "2xx", "refused", "uncertain", "unreachable"
    )
    .unwrap();
    let mut totals = [0u64; 4];
    let kinds: BTreeSet<(&str, &str)> = stats.ops.keys().map(|(c, o, _)| (*c, *o)).collect();
    for (channel, op) in kinds {
        let n: Vec<u64> = OUTCOMES
            .iter()
            .map(|o| stats.ops.get(&(channel, op, *o)).copied().unwrap_or(0))
            .collect();
        for (t, x) in totals.iter_mut().zip(&n) {
            *t += x;
        }
        writeln!(
            out,
            "  {:<18}{:>8}{:>9}{:>11}{:>13}",
            format!("{channel} {op}"),
            n[0],
            n[1],
            n[2],
            n[3]
        )
        .unwrap();
    }
    let all: u64 = totals.iter().sum();
    let restart = &stats.apiserver_restart_seconds;
    let mean_restart = if restart.is_empty() {
        0.0
    } else {
        restart.iter().sum::<f64>() / restart.len() as f64
    };
    write!(
        out,
        "  {:<18}{:>8}{:>9}{:>11}{:>13}\n\
         chaos: seed={seed} seconds={seconds} writes={all} (2xx={} refused={} uncertain={} \
         unreachable={}) operator-kills={} (hung-request={}) operator-self-exits={} \
         apiserver-restarts={} (mean {mean_restart:.1}s) after the last fault: Deployments \
         exact in {:.1}s, statuses right in {:.1}s ({:.1}s after the last write); variants at \
         the end: {:?}; violations={}",
        "total",
        totals[0],
        totals[1],
        totals[2],
        totals[3],
        totals[0],
        totals[1],
        totals[2],
        totals[3],
        stats.operator_kills,
        stats.hung_kills,
        stats.self_exits.len(),
        stats.apiserver_restarts,
        converged.objects.as_secs_f64(),
        converged.statuses.as_secs_f64(),
        converged.since_write.as_secs_f64(),
        converged.states,
        stats.violations.len()
    )
    .unwrap();
    out
}

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
    let script = cluster_script();
    let ns = TestNamespace::new("chaos").await;
    common::install_crds(&ns.client).await;
    let mut operator = OperatorProcess::new(&ns.name);
    let api_port = operator.api_port;
    operator.start();
    say(&format!(
        "chaos: namespace {}, operator log {}",
        ns.name,
        operator.log.display()
    ));
    let ctx = Arc::new(Ctx {
        client: ns.client.clone(),
        ns: ns.name.clone(),
        api_port,
        script,
        operator: tokio::sync::Mutex::new(operator),
        stats: Mutex::new(Stats::default()),
    });
    wait_api(&ctx).await;

    // Three Mutations and two MutantDeployments; beside each, two foreign Deployments with its
    // labels: one on the name of its variant TAKEN, one on a name no variant has.
    let mut owners = Vec::new();
    let mut foreign = Vec::new();
    let plan = [
        (Kind::Mutation, "m0"),
        (Kind::Mutation, "m1"),
        (Kind::Mutation, "m2"),
        (Kind::MutantDeployment, "d0"),
        (Kind::MutantDeployment, "d1"),
    ];
    let mut rng = Rng::new(seed);
    let mut workers = Vec::new();
    for (i, (kind, name)) in plan.iter().enumerate() {
        let owner = Arc::new(create_owner(&ctx, *kind, name, i).await);
        foreign.push(create_foreign(&ctx, &owner, TAKEN).await);
        foreign.push(create_foreign(&ctx, &owner, "stray").await);
        for labels in LABELS {
            let worker_rng = Rng::new(rng.next());
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
    let chaos_task = tokio::spawn(chaos(ctx.clone(), Rng::new(rng.next()), until, started));
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
