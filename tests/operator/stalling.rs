//! A TCP proxy to the API server that can stall, as a hung API server or a network that drops
//! packets would: it accepts connections and passes nothing on, either way. It stalls every
//! connection ([`StallingProxy::stall_all`]: the API server cut off, R34) or only those
//! open at the time, while new ones pass after a delay ([`StallingProxy::stall_open_ones`]: a
//! silent watch, R34; the long-lived watches stall, and the calls the operator makes on new
//! connections are answered). The API server's TLS goes through it untouched.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::watch,
};

/// What the proxy does with its connections.
#[derive(Clone, Copy, Debug)]
struct Stall {
    /// Whether anything passes at all.
    open: bool,
    /// The connections numbered below this are held.
    before: u64,
    /// How long a new connection waits before it is connected upstream.
    delay: Duration,
}

impl Stall {
    fn passes(&self, connection: u64) -> bool {
        self.open && connection >= self.before
    }
}

/// See the module. Its connections are numbered in the order they were accepted.
pub(super) struct StallingProxy {
    /// Where it listens, on 127.0.0.1.
    pub(super) port: u16,
    control: watch::Sender<Stall>,
    accepted: Arc<AtomicU64>,
}

impl StallingProxy {
    /// A proxy to `upstream` (`host:port`), passing everything.
    pub(super) async fn start(upstream: String) -> StallingProxy {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (control, state) = watch::channel(Stall {
            open: true,
            before: 0,
            delay: Duration::ZERO,
        });
        let accepted = Arc::new(AtomicU64::new(0));
        let counter = accepted.clone();
        tokio::spawn(async move {
            loop {
                let (client, _) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        eprintln!("proxy: accept: {e}");
                        break;
                    }
                };
                let number = counter.fetch_add(1, Ordering::SeqCst);
                let (upstream, mut state) = (upstream.clone(), state.clone());
                tokio::spawn(async move {
                    let delay = state.borrow().delay;
                    tokio::time::sleep(delay).await;
                    if state.wait_for(|s| s.passes(number)).await.is_err() {
                        return;
                    }
                    let server = match TcpStream::connect(&upstream).await {
                        Ok(server) => server,
                        Err(e) => {
                            eprintln!("proxy: connection {number} to {upstream}: {e}");
                            return;
                        }
                    };
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    tokio::spawn(pass(client_read, server_write, number, state.clone()));
                    pass(server_read, client_write, number, state).await;
                });
            }
        });
        StallingProxy {
            port,
            control,
            accepted,
        }
    }

    /// Holds every connection, new ones too.
    pub(super) fn stall_all(&self) {
        self.control.send_modify(|s| s.open = false);
    }

    /// Holds the connections open now; new ones pass, each after `delay`.
    pub(super) fn stall_open_ones(&self, delay: Duration) {
        let before = self.accepted.load(Ordering::SeqCst);
        self.control.send_modify(|s| {
            s.before = before;
            s.delay = delay;
        });
    }

    /// Passes everything again, the connections held so far included.
    pub(super) fn open(&self) {
        self.control.send_replace(Stall {
            open: true,
            before: 0,
            delay: Duration::ZERO,
        });
    }
}

/// Copies `from` to `to` while connection `number` passes; holds what it read while not.
async fn pass(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    number: u64,
    mut state: watch::Receiver<Stall>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(n) = from.read(&mut buf).await {
        if n == 0 || state.wait_for(|s| s.passes(number)).await.is_err() {
            break;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
}

/// An operator (admin token `ADMIN`, its own namespace watched and served) that reaches the
/// API server through a [`StallingProxy`], with Mutation `web` (variant `a`, 0 instances)
/// made through its API and that Mutation's token read from its Secret: what a test of a
/// stalling API server starts from.
pub(super) struct BehindStallingProxy {
    pub(super) ns: super::TestNamespace,
    pub(super) proxy: StallingProxy,
    pub(super) operator: super::Operator,
    /// Mutation `web`'s token.
    pub(super) token: String,
    dir: std::path::PathBuf,
}

impl BehindStallingProxy {
    /// Starts it in a new namespace `<prefix>-...`, with `env` added to the operator's.
    pub(super) async fn start(prefix: &str, env: &[(&str, &str)]) -> BehindStallingProxy {
        use super::{ADMIN, common};
        let ns = super::TestNamespace::new(prefix).await;
        common::install_crds(&ns.client).await;
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("{prefix}-{}", common::random_suffix()));
        std::fs::create_dir_all(&dir).unwrap();
        let kubeconfig = dir.join("kubeconfig");
        let upstream = super::replicas::kubeconfig_through(0, &kubeconfig);
        let proxy = StallingProxy::start(upstream).await;
        super::replicas::kubeconfig_through(proxy.port, &kubeconfig);
        let kubeconfig = kubeconfig.display().to_string();
        let mut vars = vec![
            ("MUTANT_API_TOKEN", ADMIN),
            ("POD_NAMESPACE", ns.name.as_str()),
            ("KUBECONFIG", kubeconfig.as_str()),
        ];
        vars.extend_from_slice(env);
        let operator = super::Operator::start_with(&ns.name, &vars);
        super::wait_api(operator.api_port, &ns.name).await;
        let mut behind = BehindStallingProxy {
            ns,
            proxy,
            operator,
            token: String::new(),
            dir,
        };
        let create = serde_json::json!({"name": "web", "deployment": super::base("web"),
                                        "variants": [{"label": "a", "instances": 0}]});
        let created = common::http::request(
            behind.operator.api_port,
            "POST",
            &behind.path(""),
            Some(ADMIN),
            Some(&create.to_string()),
        )
        .await;
        assert_eq!(created.status, 201, "{created:?}");
        let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> = behind.ns.api();
        let secret = secrets.get("web-secret").await.unwrap();
        behind.token = String::from_utf8(secret.data.unwrap()["token"].0.clone()).unwrap();
        behind
    }

    /// The API path of the namespace's Mutations, with `rest` appended.
    pub(super) fn path(&self, rest: &str) -> String {
        format!("/api/v1/namespaces/{}/mutations{rest}", self.ns.name)
    }

    /// Asserts that the operator did not panic.
    pub(super) fn no_panic(&self) {
        assert!(
            !self.operator.log_text().contains("panicked"),
            "the operator panicked"
        );
    }
}

impl Drop for BehindStallingProxy {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
