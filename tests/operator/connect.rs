//! The operator's own client stack (src/connect.rs) against the real API server: a kubeconfig
//! with a client certificate, and one with a `tokenFile`, both with relative paths, connect and
//! reconcile; the audit log shows the requests were made as the certificate's user.

use serde_json::json;

use super::*;

/// The directory of the test cluster's kubeconfig and its CA key (`scripts/cluster` keeps
/// them in one state directory).
fn cluster_dir() -> std::path::PathBuf {
    let kubeconfig = std::env::var_os("KUBECONFIG").expect("KUBECONFIG names the test cluster");
    let dir = std::path::Path::new(&kubeconfig)
        .parent()
        .unwrap()
        .to_path_buf();
    assert!(
        dir.join("pki/ca.key").exists(),
        "this test signs a client certificate with the CA of scripts/cluster, which is not \
         next to {}: run it through scripts/test",
        std::path::Path::new(&kubeconfig).display()
    );
    dir
}

fn run(program: &str, args: &[&str]) {
    let out = std::process::Command::new(program)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `openssl req` with `mode` (`-new` for a request, `-x509` for a self-signed
/// certificate) for a new P-256 key written to `key`, subject `subject`, the result written
/// to `out`, and `extra` arguments.
fn openssl_req(
    mode: &str,
    key: &std::path::Path,
    out: &std::path::Path,
    subject: &str,
    extra: &[&str],
) {
    let mut args = vec![
        "req",
        mode,
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
    ];
    args.extend(["-nodes", "-keyout", key.to_str().unwrap()]);
    args.extend(["-out", out.to_str().unwrap(), "-subj", subject]);
    args.extend(extra);
    run("openssl", &args);
}

/// The test cluster's kubeconfig (the one in `KUBECONFIG`).
fn kubeconfig() -> Value {
    let path = std::env::var("KUBECONFIG").unwrap();
    serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The server URL of the test cluster's kubeconfig.
fn server() -> String {
    let config = kubeconfig();
    config["clusters"][0]["cluster"]["server"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The token the test cluster's kubeconfig authenticates with.
fn token() -> String {
    let config = kubeconfig();
    config["users"][0]["user"]["token"]
        .as_str()
        .expect("the test cluster's kubeconfig authenticates with a token")
        .to_owned()
}

/// A kubeconfig in `dir` whose CA is the file `ca.crt` next to it and whose user is `user`.
fn write_kubeconfig(dir: &std::path::Path, user: &str) -> std::path::PathBuf {
    std::fs::copy(cluster_dir().join("pki/ca.crt"), dir.join("ca.crt")).unwrap();
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\n\
             clusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority: ca.crt\n\
             users:\n- name: u\n  user:\n{user}\n\
             contexts:\n- name: x\n  context: {{cluster: c, user: u}}\n\
             current-context: x\n",
            server()
        ),
    )
    .unwrap();
    path
}

fn scratch_dir(name: &str) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("connect-{name}-{}", common::random_suffix()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The distinct users of the operator's requests in `namespace` after `offset`.
fn operator_users(offset: u64, namespace: &str) -> Vec<String> {
    let mut users: Vec<String> = audit_events(&audit_log(), offset)
        .into_iter()
        .filter(|e| {
            e["requestURI"]
                .as_str()
                .unwrap_or("")
                .contains(&format!("/namespaces/{namespace}/"))
        })
        .filter_map(|e| e["user"]["username"].as_str().map(str::to_owned))
        .collect();
    users.sort();
    users.dedup();
    users
}

async fn reconciles_with(kubeconfig: &std::path::Path, prefix: &str) -> Fixture {
    let f = Fixture::with_env(prefix, &[("KUBECONFIG", kubeconfig.to_str().unwrap())]).await;
    f.apply::<Mutation>(&mutation(
        "web",
        base("web"),
        json!([{"label": "a", "instances": 1}]),
    ))
    .await;
    f.wait_deployment("web-a", "created by the operator", |d| ready(d, 1))
        .await;
    f
}

#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_client_certificate_from_a_kubeconfig_connects() {
    let cluster = cluster_dir();
    let dir = scratch_dir("cert");
    let user = format!("mutantops-cert-{}", common::random_suffix());
    let (key, csr, crt) = (dir.join("me.key"), dir.join("me.csr"), dir.join("me.crt"));
    let subject = format!("/O=system:masters/CN={user}");
    openssl_req("-new", &key, &csr, &subject, &[]);
    // A v3 certificate for client authentication, as kubeadm and k3s issue them.
    let ext = dir.join("client.ext");
    std::fs::write(
        &ext,
        "keyUsage = critical, digitalSignature\nextendedKeyUsage = clientAuth\n",
    )
    .unwrap();
    run(
        "openssl",
        &[
            "x509",
            "-req",
            "-in",
            csr.to_str().unwrap(),
            "-CA",
            cluster.join("pki/ca.crt").to_str().unwrap(),
            "-CAkey",
            cluster.join("pki/ca.key").to_str().unwrap(),
            "-CAcreateserial",
            "-CAserial",
            dir.join("ca.srl").to_str().unwrap(),
            "-days",
            "1",
            "-extfile",
            ext.to_str().unwrap(),
            "-out",
            crt.to_str().unwrap(),
        ],
    );
    // Relative paths: resolved against the kubeconfig's directory, not the working directory.
    let kubeconfig = write_kubeconfig(
        &dir,
        "    client-certificate: me.crt\n    client-key: me.key",
    );

    let offset = log_size(&audit_log());
    let f = reconciles_with(&kubeconfig, "conn-cert").await;
    wait_for(
        "the audit log to show the operator's user",
        CONVERGE,
        || async {
            match operator_users(offset, &f.ns.name) {
                users if users == [user.clone()] => Ok(()),
                users => Err(format!("{users:?}")),
            }
        },
    )
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_token_file_from_a_kubeconfig_connects() {
    let token = token();
    let dir = scratch_dir("token");
    std::fs::write(dir.join("token"), format!("{token}\n")).unwrap();
    let kubeconfig = write_kubeconfig(&dir, "    tokenFile: token");
    reconciles_with(&kubeconfig, "conn-token").await;
}

/// The in-cluster settings (a token file and a CA file, as the ServiceAccount volume has them):
/// both are read again after the refresh interval, so a rotated token or CA is picked up by new
/// requests without a restart, and a wrong one is refused by the server rather than ignored.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn token_and_ca_files_are_read_again() {
    let cluster = cluster_dir();
    let dir = scratch_dir("reload");
    let token = token();

    // Another CA, which did not sign the API server's certificate.
    let other_ca = dir.join("other-ca.crt");
    let other_key = dir.join("other-ca.key");
    openssl_req(
        "-x509",
        &other_key,
        &other_ca,
        "/CN=some other CA",
        &["-days", "1"],
    );
    let (ca_file, token_file) = (dir.join("ca.crt"), dir.join("token"));
    std::fs::copy(&other_ca, &ca_file).unwrap();
    std::fs::write(&token_file, format!("{token}\n")).unwrap();

    let mut settings = kube::Config::new(server().parse().unwrap());
    settings.root_cert_file = Some(ca_file.clone());
    settings.auth_info.token_file = Some(token_file.to_str().unwrap().to_owned());
    // Read again at every request, so the test need not wait a minute.
    let client = mutantops::connect::build_with_refresh(settings, Duration::ZERO).unwrap();
    let namespaces = || async {
        Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
            .list(&Default::default())
            .await
    };

    // The wrong CA: the server's certificate is not trusted.
    let err = namespaces().await.unwrap_err();
    let mut chain = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(e) = source {
        chain.push_str(&format!(": {e}"));
        source = e.source();
    }
    assert!(chain.contains("UnknownIssuer"), "{chain}");

    // The CA is rotated in: trusted now.
    std::fs::copy(cluster.join("pki/ca.crt"), &ca_file).unwrap();
    namespaces().await.unwrap();

    // A token the server does not know: 401.
    std::fs::write(&token_file, "not-a-token\n").unwrap();
    match namespaces().await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 401, "{status:?}"),
        other => panic!("expected 401, got {other:?}"),
    }

    // The right token again.
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    namespaces().await.unwrap();
}

/// Credentials the server refuses end the process at once with the server's answer: unlike an
/// unreachable server, waiting would not fix them.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn refused_credentials_end_the_process() {
    let dir = scratch_dir("refused");
    let kubeconfig = write_kubeconfig(&dir, "    token: not-a-token");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mutantops"))
        .arg("run")
        .env("KUBECONFIG", &kubeconfig)
        .env(
            "MUTANT_API_ADDR",
            format!("127.0.0.1:{}", common::free_port()),
        )
        .env(
            "MUTANT_METRICS_ADDR",
            format!("127.0.0.1:{}", common::free_port()),
        )
        .env_remove("MUTANT_API_TOKEN")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("401"), "{text}");
}
