//! The random choices, the owners, the model of what each label may hold, and the state the
//! workers share.

use super::*;

// --- randomness -----------------------------------------------------------------------------

/// xorshift64*: small, seedable, good enough to pick operations.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        // splitmix64 of the seed, so nearby seeds start far apart; never zero.
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((z ^ (z >> 31)) | 1)
    }

    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub(crate) fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    pub(crate) fn millis(&mut self, low: u64, high: u64) -> Duration {
        Duration::from_millis(low + self.below(high - low + 1))
    }

    /// A variant's env: sometimes overriding the base's `MODE`, sometimes a variable of its
    /// own, with random values.
    pub(crate) fn env(&mut self) -> BTreeMap<String, String> {
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

    pub(crate) fn instances(&mut self) -> i32 {
        self.below(3) as i32
    }
}

// --- owners ------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Mutation,
    MutantDeployment,
}

impl Kind {
    pub(crate) fn owner_kind(self) -> OwnerKind {
        match self {
            Kind::Mutation => OwnerKind::Mutation,
            Kind::MutantDeployment => OwnerKind::MutantDeployment,
        }
    }

    /// The spec field that lists the variants.
    pub(crate) fn field(self) -> &'static str {
        match self {
            Kind::Mutation => "variants",
            Kind::MutantDeployment => "mutations",
        }
    }

    pub(crate) fn resource(self) -> ApiResource {
        match self {
            Kind::Mutation => ApiResource::erase::<Mutation>(&()),
            Kind::MutantDeployment => ApiResource::erase::<MutantDeployment>(&()),
        }
    }
}

/// A Mutation's Secret as it was right after the operator created it (R14).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SecretRecord {
    pub(crate) uid: String,
    pub(crate) created: String,
    pub(crate) token: String,
}

pub(crate) struct OwnerInfo {
    pub(crate) kind: Kind,
    pub(crate) name: String,
    /// The base Deployment's name.
    pub(crate) base: String,
    pub(crate) uid: String,
    pub(crate) secret: Option<SecretRecord>,
}

impl OwnerInfo {
    pub(crate) fn owner(&self, ns: &str) -> Owner {
        Owner {
            kind: self.kind.owner_kind(),
            name: self.name.clone(),
            namespace: ns.to_string(),
            uid: self.uid.clone(),
        }
    }

    pub(crate) fn token(&self) -> &str {
        &self.secret.as_ref().expect("a Mutation has a Secret").token
    }
}

/// The env of a variant's container as R4 builds it from [`base`]: `BASE=1`, `MODE=base`, each
/// variant variable replacing the base's of the same name in place, the others appended in
/// name order.
pub(crate) fn expected_env(env: &BTreeMap<String, String>) -> Vec<(String, String)> {
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
pub(crate) struct Foreign {
    pub(crate) name: String,
    pub(crate) uid: String,
    pub(crate) generation: Option<i64>,
    pub(crate) labels: BTreeMap<String, String>,
}

// --- the model ---------------------------------------------------------------------------------

/// What one label of an owner's spec holds; `by_token`: the variant is the token's
/// (`byToken: true`), which only then scales or removes it (R32).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Slot {
    Absent,
    Present {
        env: BTreeMap<String, String>,
        instances: i32,
        by_token: bool,
    },
}

impl Slot {
    pub(crate) fn of(list: &[Variant], label: &str) -> Slot {
        match list.iter().find(|v| v.label == label) {
            Some(v) => Slot::Present {
                env: v.env.to_map(),
                instances: v.instances,
                by_token: v.by_token == Some(true),
            },
            None => Slot::Absent,
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) enum Op {
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
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Op::Add { .. } => "add",
            Op::Scale { .. } => "scale",
            Op::Remove => "remove",
        }
    }

    /// The state after this op on `slot`, sent with the Mutation's own token (`token`) or the
    /// admin's, or `None` when it is refused there: the token scales and removes only the
    /// token's variants (R32), and what it adds is the token's.
    pub(crate) fn apply(&self, slot: &Slot, token: bool) -> Option<Slot> {
        match (self, slot) {
            (Op::Add { env, instances }, Slot::Absent) => Some(Slot::Present {
                env: env.clone(),
                instances: *instances,
                by_token: token,
            }),
            (
                Op::Scale { .. } | Op::Remove,
                Slot::Present {
                    by_token: false, ..
                },
            ) if token => None,
            (Op::Scale { instances }, Slot::Present { env, by_token, .. }) => Some(Slot::Present {
                env: env.clone(),
                instances: *instances,
                by_token: *by_token,
            }),
            (Op::Remove, Slot::Present { .. }) => Some(Slot::Absent),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Outcome {
    Acked,
    Refused,
    Uncertain,
    Unreachable,
}

pub(crate) const OUTCOMES: [Outcome; 4] = [
    Outcome::Acked,
    Outcome::Refused,
    Outcome::Uncertain,
    Outcome::Unreachable,
];

// --- shared state ---------------------------------------------------------------------------------

#[derive(Default)]
pub(crate) struct Stats {
    pub(crate) ops: BTreeMap<(&'static str, &'static str, Outcome), u64>,
    pub(crate) violations: Vec<String>,
    pub(crate) operator_kills: u64,
    pub(crate) hung_kills: u64,
    pub(crate) self_exits: Vec<String>,
    pub(crate) apiserver_restarts: u64,
    pub(crate) apiserver_restart_seconds: Vec<f64>,
    pub(crate) last_fault: Option<Instant>,
    pub(crate) last_write: Option<Instant>,
}

pub(crate) struct Ctx {
    pub(crate) client: Client,
    pub(crate) ns: String,
    pub(crate) api_port: u16,
    pub(crate) script: PathBuf,
    pub(crate) operator: tokio::sync::Mutex<common::Operator>,
    pub(crate) stats: Mutex<Stats>,
}

impl Ctx {
    pub(crate) fn violation(&self, text: String) {
        say(&format!("chaos: VIOLATION: {text}"));
        self.stats.lock().unwrap().violations.push(text);
    }

    pub(crate) fn count(&self, channel: &'static str, op: &'static str, outcome: Outcome) {
        let mut stats = self.stats.lock().unwrap();
        *stats.ops.entry((channel, op, outcome)).or_default() += 1;
        if outcome != Outcome::Unreachable {
            stats.last_write = Some(Instant::now());
        }
    }

    pub(crate) fn fault_done(&self) {
        self.stats.lock().unwrap().last_fault = Some(Instant::now());
    }

    pub(crate) fn api(&self, kind: Kind) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.ns, &kind.resource())
    }

    /// Kills the operator with SIGKILL and starts it again after `pause`.
    pub(crate) async fn kill_operator(&self, pause: Duration, hung: bool) {
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
        operator.launch();
    }

    /// Restarts the operator if it exited by itself, as the kubelet would.
    pub(crate) async fn watch_operator(&self) {
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
            operator.launch();
        }
    }

    pub(crate) async fn restart_apiserver(&self) {
        self.restart_apiserver_after(Duration::ZERO).await;
    }

    /// Kills the API server and starts it again `down` later (whole seconds), ready.
    pub(crate) async fn restart_apiserver_after(&self, down: Duration) {
        let started = Instant::now();
        let out = tokio::process::Command::new(&self.script)
            .arg("restart-apiserver")
            .arg(down.as_secs().to_string())
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
    pub(crate) async fn read_owner(&self, kind: Kind, name: &str) -> DynamicObject {
        let api = self.api(kind);
        retry_read(&format!("{kind:?} {name}"), || api.get(name)).await
    }
}

/// Runs a read until it succeeds; panics after [`READ_DEADLINE`].
pub(crate) async fn retry_read<T, F, Fut>(what: &str, mut read: F) -> T
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
pub(crate) fn connection_refused(err: &(dyn std::error::Error + 'static)) -> bool {
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
