//! Shared harness of the integration tests: a client for the real control plane named by
//! `KUBECONFIG`, a fresh namespace per test, and waiting with a deadline.
//!
//! Integration tests are `#[ignore = "needs a cluster: scripts/test runs them"]`: a plain
//! `cargo test` lists them as ignored, `scripts/test` runs them with `--include-ignored`.
//! Without a reachable cluster they fail, naming the command that starts one.
#![allow(
    dead_code,
    reason = "each test binary uses a different part of the harness"
)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a failed step must fail the test"
)]

pub mod cgroup;
pub mod http;
pub mod tls;

use std::{fmt::Debug, future::Future, time::Duration};

use k8s_openapi::{
    api::core::v1::Namespace,
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, PostParams},
};

/// What to do when no cluster is reachable.
pub const NO_CLUSTER: &str = "no Kubernetes API server reachable for the integration tests. \
Start the local control plane with `scripts/cluster up` and `eval \"$(scripts/cluster env)\"`, \
or run everything with `scripts/test`";

/// A client for the cluster in `KUBECONFIG` (or the in-cluster service account), checked to
/// answer. Panics with [`NO_CLUSTER`] otherwise.
pub async fn client() -> Client {
    let client = match Client::try_default().await {
        Ok(client) => client,
        Err(err) => panic!("{NO_CLUSTER}\n(cause: {err})"),
    };
    match tokio::time::timeout(Duration::from_secs(15), client.apiserver_version()).await {
        Ok(Ok(_)) => client,
        Ok(Err(err)) => panic!("{NO_CLUSTER}\n(cause: {err})"),
        Err(_) => panic!("{NO_CLUSTER}\n(cause: no answer within 15 s)"),
    }
}

/// A namespace that belongs to one test. Dropping it deletes the namespace (in the background:
/// the namespace controller removes its contents).
pub struct TestNamespace {
    pub client: Client,
    pub name: String,
}

impl TestNamespace {
    /// Creates `<prefix>-<random>` and returns it with a client.
    pub async fn new(prefix: &str) -> Self {
        let client = client().await;
        let name = format!("{}-{}", prefix, random_suffix());
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": { "name": name, "labels": { "mutantops.neiam.org/test": "true" } }
        }))
        .unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
        TestNamespace { client, name }
    }

    /// An `Api` for a namespaced kind in this namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }

    /// The names of every `K` in this namespace, sorted.
    pub async fn names<K>(&self) -> Vec<String>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + Debug,
        <K as kube::Resource>::DynamicType: Default,
    {
        let list = self.api::<K>().list(&Default::default()).await;
        names(&list.unwrap().items)
    }
}

/// The finalizer tests put on objects to hold them; [`TestNamespace`]'s drop takes it off again
/// (from Deployments and ConfigMaps), so a failed test cannot leave its namespace stuck in
/// Terminating.
pub const TEST_HOLD: &str = "mutantops.neiam.org/test-hold";

impl Drop for TestNamespace {
    fn drop(&mut self) {
        let name = std::mem::take(&mut self.name);
        release_holds(name.clone());
        delete_on_drop::<Namespace>(name);
    }
}

/// Takes [`TEST_HOLD`] off every Deployment and ConfigMap of `namespace` (from a `Drop`: see
/// [`delete_on_drop`]).
fn release_holds(namespace: String) {
    use k8s_openapi::api::{apps::v1::Deployment, core::v1::ConfigMap};
    async fn release<K>(client: Client, namespace: &str)
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + Debug,
    {
        let api = Api::<K>::namespaced(client, namespace);
        let Ok(list) = api.list(&Default::default()).await else {
            return;
        };
        for obj in list.items {
            if obj.finalizers().iter().any(|f| f == TEST_HOLD) {
                let unhold = kube::api::Patch::Merge(
                    serde_json::json!({ "metadata": { "finalizers": null } }),
                );
                let _ = api
                    .patch(&obj.name_any(), &Default::default(), &unhold)
                    .await;
            }
        }
    }
    from_drop(move |client| async move {
        release::<Deployment>(client.clone(), &namespace).await;
        release::<ConfigMap>(client, &namespace).await;
    });
}

/// Runs `work` with a client of its own, to the end, from a `Drop`. Drop cannot await, and
/// the test's own client cannot be used there: its connection tasks live on the test's
/// runtime, which this blocks. A short-lived runtime on its own thread does the work.
fn from_drop<F, Fut>(work: F)
where
    F: FnOnce(Client) -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    let done = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build();
        if let Ok(runtime) = runtime {
            runtime.block_on(async move {
                if let Ok(client) = Client::try_default().await {
                    work(client).await;
                }
            });
        }
    });
    let _ = done.join();
}

/// Deletes cluster-scoped object `name` of kind `K` from a `Drop` ([`from_drop`]), so a test
/// leaves the cluster as it found it even when it fails.
pub fn delete_on_drop<K: ClusterKind>(name: String) {
    from_drop(move |client| async move {
        match Api::<K>::all(client)
            .delete(&name, &DeleteParams::background())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(err) => eprintln!("warning: deleting {} {name}: {err}", K::kind(&())),
        }
    });
}

/// A cluster-scoped kind a test creates objects of.
pub trait ClusterKind:
    kube::Resource<Scope = kube::core::ClusterResourceScope, DynamicType = ()>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
    + Send
    + 'static
{
}

impl<K> ClusterKind for K where
    K: kube::Resource<Scope = kube::core::ClusterResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static
{
}

/// Deletes the cluster-scoped object it names when dropped ([`delete_on_drop`]).
pub struct RemoveOnDrop<K: ClusterKind>(String, std::marker::PhantomData<K>);

impl<K: ClusterKind> RemoveOnDrop<K> {
    pub fn new(name: &str) -> Self {
        RemoveOnDrop(name.to_owned(), std::marker::PhantomData)
    }
}

impl<K: ClusterKind> Drop for RemoveOnDrop<K> {
    fn drop(&mut self) {
        delete_on_drop::<K>(std::mem::take(&mut self.0));
    }
}

/// Eight random lower-case hex characters.
pub fn random_suffix() -> String {
    let mut bytes = [0u8; 4];
    getrandom::fill(&mut bytes).unwrap();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Polls `check` every 200 ms until it returns `Ok(value)`, or panics after `timeout` with
/// `what` and the last `Err` it returned (the state it was waiting on).
pub async fn wait_for<T, E, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    E: Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match check().await {
            Ok(value) => return value,
            Err(last) => {
                if tokio::time::Instant::now() >= deadline {
                    panic!("timed out after {timeout:?} waiting for {what}; last seen: {last:?}");
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Builds a typed object from JSON, for concise fixtures.
pub fn from_json<K: serde::de::DeserializeOwned>(value: serde_json::Value) -> K {
    serde_json::from_value(value).unwrap()
}

/// The names of a list of objects, sorted.
pub fn names<K: ResourceExt>(items: &[K]) -> Vec<String> {
    let mut names: Vec<String> = items.iter().map(|o| o.name_any()).collect();
    names.sort();
    names
}

/// Installs (server-side applies) the CRDs generated from the Rust types and waits until the
/// API server has established them. Idempotent; tests running at once may all call it.
pub async fn install_crds(client: &Client) {
    use kube::CustomResourceExt;
    for crd in [
        mutantops::crd::MutantDeployment::crd(),
        mutantops::crd::Mutation::crd(),
    ] {
        apply_crd(client, &crd).await;
    }
}

/// Server-side applies `crd` and waits until the API server has established it.
pub async fn apply_crd(client: &Client, crd: &CustomResourceDefinition) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = crd.name_any();
    let params = kube::api::PatchParams::apply("mutantops-tests").force();
    api.patch(&name, &params, &kube::api::Patch::Apply(crd))
        .await
        .unwrap_or_else(|e| panic!("the API server rejected CRD {name}: {e}"));
    wait_for(
        &format!("CRD {name} to be established"),
        Duration::from_secs(30),
        || async {
            let crd = api.get(&name).await.map_err(|e| e.to_string())?;
            let conditions = crd.status.and_then(|s| s.conditions).unwrap_or_default();
            let established = conditions
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            if established {
                Ok(())
            } else {
                Err(format!("{conditions:?}"))
            }
        },
    )
    .await;
}

/// A `mutantops` process (the real binary) reconciling one namespace, with its log in a file.
/// It can be killed and launched again on the same ports and log (as a pod behind its
/// Service). Dropping it kills the process; when a test fails, the log's tail is printed.
pub struct Operator {
    child: Option<std::process::Child>,
    pub log: std::path::PathBuf,
    namespace: String,
    env: Vec<(String, String)>,
    pub api_port: u16,
    pub metrics_port: u16,
    /// How many times the process was launched.
    pub starts: u32,
    /// The most files the process may open (`prlimit --nofile`), if limited.
    open_files: Option<u64>,
    /// The cgroup the process runs in (its directory), if not this one's.
    cgroup: Option<std::path::PathBuf>,
}

impl Operator {
    /// Starts `mutantops` against the cluster in `KUBECONFIG`, scoped to `namespace`.
    pub fn start(namespace: &str) -> Operator {
        Self::start_with(namespace, &[])
    }

    /// Like [`Operator::start`], with extra environment variables. Waits until the operator
    /// listens, and starts it again on other ports if one was taken in between (the operator
    /// then exits saying it cannot listen); an operator that exits for another reason, or is
    /// still connecting after 30 s, is returned as it is, for the test to judge.
    pub fn start_with(namespace: &str, env: &[(&str, &str)]) -> Operator {
        Self::start_limited(namespace, env, None)
    }

    /// [`Operator::start_with`], allowed to open at most `open_files` files (`RLIMIT_NOFILE`,
    /// set with `prlimit`), as a container's limit would.
    pub fn start_limited(
        namespace: &str,
        env: &[(&str, &str)],
        open_files: Option<u64>,
    ) -> Operator {
        Self::start_confined(namespace, env, open_files, None)
    }

    /// [`Operator::start_limited`], in cgroup `cgroup` (see [`cgroup::MemoryCgroup`]) from its
    /// first instruction, as a container would be.
    pub fn start_confined(
        namespace: &str,
        env: &[(&str, &str)],
        open_files: Option<u64>,
        cgroup: Option<&std::path::Path>,
    ) -> Operator {
        let own_addresses = env
            .iter()
            .any(|(k, _)| *k == "MUTANT_API_ADDR" || *k == "MUTANT_METRICS_ADDR");
        let mut attempt = 1;
        loop {
            let mut operator = Self::spawn(namespace, env, open_files, cgroup);
            if own_addresses {
                return operator;
            }
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            let listening = |text: &str, port: u16| {
                let addr = format!("127.0.0.1:{port}");
                text.lines()
                    .any(|line| line.contains("listening") && line.contains(&addr))
            };
            loop {
                let text = operator.log_text();
                if (listening(&text, operator.api_port) && listening(&text, operator.metrics_port))
                    || std::time::Instant::now() >= deadline
                {
                    return operator;
                }
                if operator.exited().is_some() {
                    if text.contains("cannot listen") && attempt < 5 {
                        break;
                    }
                    return operator;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            attempt += 1;
            operator.kill();
        }
    }

    fn spawn(
        namespace: &str,
        env: &[(&str, &str)],
        open_files: Option<u64>,
        cgroup: Option<&std::path::Path>,
    ) -> Operator {
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("operator-logs");
        std::fs::create_dir_all(&dir).unwrap();
        let mut operator = Operator {
            child: None,
            log: dir.join(format!("{namespace}-{}.log", random_suffix())),
            namespace: namespace.to_string(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            api_port: free_port(),
            metrics_port: free_port(),
            starts: 0,
            open_files,
            cgroup: cgroup.map(std::path::Path::to_path_buf),
        };
        operator.launch();
        operator
    }

    /// Launches the process (again, after [`Operator::kill`] or its own exit): the same
    /// environment, ports and log, which gets a line marking each start.
    pub fn launch(&mut self) {
        self.kill();
        self.starts += 1;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        if self.starts > 1 {
            use std::io::Write;
            writeln!(file, "=== operator start #{} ===", self.starts).unwrap();
        }
        let binary = env!("CARGO_BIN_EXE_mutantops");
        let mut command = match (self.open_files, &self.cgroup) {
            (None, None) => std::process::Command::new(binary),
            (Some(n), None) => {
                // prlimit execs the binary: the child's pid is the operator's.
                let mut command = std::process::Command::new("prlimit");
                command.arg(format!("--nofile={n}:{n}")).arg(binary);
                command
            }
            (open_files, Some(cgroup)) => {
                // The shell moves itself into the cgroup, then execs: the operator's pid.
                let mut command = std::process::Command::new("sh");
                command
                    .arg("-c")
                    .arg(r#"echo $$ > "$1/cgroup.procs" && shift && exec "$@""#)
                    .arg("sh")
                    .arg(cgroup);
                if let Some(n) = open_files {
                    command.args(["prlimit", &format!("--nofile={n}:{n}")]);
                }
                command.arg(binary);
                command
            }
        };
        command
            .env("MUTANT_WATCH_NAMESPACE", &self.namespace)
            .env("MUTANT_API_ADDR", format!("127.0.0.1:{}", self.api_port))
            .env(
                "MUTANT_METRICS_ADDR",
                format!("127.0.0.1:{}", self.metrics_port),
            )
            .env("RUST_LOG", "info,mutantops=debug")
            .env_remove("MUTANT_API_TOKEN")
            .env_remove("MUTANT_API_INSECURE")
            .env_remove("MUTANT_API_INSECURE_ALLOW_REMOTE")
            .env_remove("POD_NAME")
            .env_remove("POD_NAMESPACE")
            .stdout(std::process::Stdio::null())
            .stderr(file);
        for (key, value) in &self.env {
            command.env(key, value);
        }
        self.child = Some(command.spawn().unwrap());
    }

    /// Kills the process with SIGKILL, as a crash or OOM kill would, and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The exit status, once the process has exited by itself (then it is reaped).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok().flatten()?;
        self.child = None;
        Some(status)
    }

    /// Sends SIGTERM and waits up to `timeout` for the exit status.
    pub fn terminate(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let pid = self.child.as_ref()?.id().to_string();
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status();
        let deadline = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < deadline {
            if let Some(status) = self.exited() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            let text = self.log_text();
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(80)..];
            eprintln!(
                "--- last lines of the operator log for {} ({}) ---\n{}",
                self.namespace,
                self.log.display(),
                tail.join("\n")
            );
        }
    }
}

/// A loopback port that was free a moment ago, from below the kernel's ephemeral range
/// (32768 and up), where the many outgoing connections of a test run take theirs: a port from
/// bind(0) can be handed to an outgoing connection before the operator listens on it.
pub fn free_port() -> u16 {
    for _ in 0..1000 {
        let mut bytes = [0u8; 2];
        getrandom::fill(&mut bytes).unwrap();
        let port = 20000 + u16::from_le_bytes(bytes) % 12000;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port between 20000 and 32000");
}

/// A base Deployment named `name` with one container that has env `BASE=1` and `MODE=base`.
pub fn base(name: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": { "name": name, "labels": { "team": "edge" } },
        "spec": {
            "replicas": 1,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name } },
                "spec": { "containers": [{
                    "name": "app",
                    "image": "registry.example/app:1",
                    "env": [{ "name": "BASE", "value": "1" }, { "name": "MODE", "value": "base" }]
                }] }
            }
        }
    })
}
