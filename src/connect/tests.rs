use std::{collections::HashMap, ffi::OsString, fs};

use super::tls::client_identity;
use super::*;
use base64::Engine as _;

/// A directory of its own under the system's temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("mutantops-connect-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
    let map: HashMap<String, OsString> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), OsString::from(v)))
        .collect();
    move |name| map.get(name).cloned()
}

#[test]
fn kubeconfig_env_comes_first_then_the_cluster_then_home() {
    let nothing_exists = |_: &Path| false;
    let everything_exists = |_: &Path| true;
    assert_eq!(
        source(
            env(&[
                ("KUBECONFIG", "/a/one::/b/two"),
                ("KUBERNETES_SERVICE_HOST", "10.0.0.1"),
                ("HOME", "/home/u"),
            ]),
            everything_exists
        )
        .unwrap(),
        Source::Kubeconfig(vec!["/a/one".into(), "/b/two".into()])
    );
    // An empty KUBECONFIG names no file.
    assert_eq!(
        source(
            env(&[("KUBECONFIG", ""), ("KUBERNETES_SERVICE_HOST", "10.0.0.1")]),
            everything_exists
        )
        .unwrap(),
        Source::InCluster
    );
    assert_eq!(
        source(env(&[("HOME", "/home/u")]), everything_exists).unwrap(),
        Source::Kubeconfig(vec!["/home/u/.kube/config".into()])
    );
    let err = source(env(&[("HOME", "/home/u")]), nothing_exists).unwrap_err();
    assert!(err.to_string().contains("no connection settings"), "{err}");
}

const KUBECONFIG: &str = "
apiVersion: v1
kind: Config
current-context: dev
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority: pki/ca.crt
- name: absolute
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority: /etc/ca.crt
users:
- name: me
  user:
    client-certificate: me.crt
    client-key: keys/me.key
    tokenFile: token
contexts:
- name: dev
  context: {cluster: local, user: me, namespace: edge}
";

#[test]
fn relative_paths_are_relative_to_the_kubeconfig() {
    let config = parse_kubeconfig(KUBECONFIG, Some(Path::new("/srv/kube"))).unwrap();
    let ca = |i: usize| {
        config.clusters[i]
            .cluster
            .as_ref()
            .and_then(|c| c.certificate_authority.clone())
    };
    assert_eq!(ca(0).as_deref(), Some("/srv/kube/pki/ca.crt"));
    assert_eq!(ca(1).as_deref(), Some("/etc/ca.crt"));
    let user = config.auth_infos[0].auth_info.as_ref().unwrap();
    assert_eq!(user.client_certificate.as_deref(), Some("/srv/kube/me.crt"));
    assert_eq!(user.client_key.as_deref(), Some("/srv/kube/keys/me.key"));
    assert_eq!(user.token_file.as_deref(), Some("/srv/kube/token"));
    assert_eq!(config.current_context.as_deref(), Some("dev"));
}

#[test]
fn empty_and_malformed_kubeconfigs() {
    let empty = parse_kubeconfig("\u{feff}\n", None).unwrap();
    assert!(empty.clusters.is_empty() && empty.current_context.is_none());
    let err = parse_kubeconfig("clusters: 3", None).unwrap_err();
    assert!(err.starts_with("not a kubeconfig"), "{err}");
}

#[tokio::test]
async fn a_missing_kubeconfig_file_is_named() {
    let err = load(&Source::Kubeconfig(vec!["/nonexistent/kubeconfig".into()]))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("/nonexistent/kubeconfig"), "{err}");
}

/// The configuration of a kubeconfig with `user` under `users[0].user`.
async fn config_with_user(user: &str, cluster_extra: &str) -> kube::Config {
    let text = format!(
        "
clusters:
- name: c
  cluster:
    server: https://127.0.0.1:6443
{cluster_extra}
users:
- name: u
  user:
{user}
contexts:
- name: x
  context: {{cluster: c, user: u}}
current-context: x
"
    );
    let kubeconfig = parse_kubeconfig(&text, None).unwrap();
    kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap()
}

#[tokio::test]
async fn unsupported_settings_are_refused_by_name() {
    let cases = [
        (
            "    exec: {apiVersion: client.authentication.k8s.io/v1, command: aws}",
            "",
            "`exec`",
        ),
        (
            "    auth-provider: {name: gcp, config: {}}",
            "",
            "`auth-provider`",
        ),
        (
            "    username: admin\n    password: secret",
            "",
            "basic authentication",
        ),
        (
            "    token: abc",
            "    insecure-skip-tls-verify: true",
            "insecure-skip-tls-verify",
        ),
        (
            "    token: abc",
            "    proxy-url: http://proxy:3128",
            "proxy-url",
        ),
    ];
    for (user, cluster, named) in cases {
        let config = config_with_user(user, cluster).await;
        let err = build(config)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains(named), "{named}: {err:?}");
        assert!(err.contains("not supported"), "{err}");
    }
}

#[tokio::test]
async fn a_token_user_builds_a_client() {
    let config = config_with_user("    token: abc", "").await;
    assert!(build(config).is_ok());
}

#[test]
fn token_comes_before_token_file_and_is_sensitive() {
    let dir = TempDir::new("precedence");
    let file = dir.0.join("token");
    fs::write(&file, "from-file\n").unwrap();
    let user = AuthInfo {
        token: Some("from-token".to_owned().into()),
        token_file: Some(file.to_str().unwrap().to_owned()),
        ..AuthInfo::default()
    };
    let header = |user: &AuthInfo| {
        let value = Credential::from_auth_info(user, FILE_REFRESH)
            .unwrap()
            .header()
            .unwrap();
        assert!(value.is_sensitive());
        value
    };
    assert_eq!(header(&user), "Bearer from-token");

    let user = AuthInfo {
        token_file: Some(file.to_str().unwrap().to_owned()),
        ..AuthInfo::default()
    };
    assert_eq!(header(&user), "Bearer from-file");

    assert!(
        Credential::from_auth_info(&AuthInfo::default(), FILE_REFRESH)
            .unwrap()
            .header()
            .is_none()
    );
    let empty = AuthInfo {
        token: Some(" \n".to_owned().into()),
        ..AuthInfo::default()
    };
    assert!(Credential::from_auth_info(&empty, FILE_REFRESH).is_err());
}

#[test]
fn token_file_is_read_again_after_the_refresh_interval() {
    let dir = TempDir::new("refresh");
    let path = dir.0.join("token");
    fs::write(&path, "one").unwrap();

    // Not due yet: the token read at start stays.
    let slow = TokenFile::new(path.clone(), Duration::from_secs(3600)).unwrap();
    fs::write(&path, "two").unwrap();
    assert_eq!(slow.header(), "Bearer one");

    // Due at every call: the new token is used; a failed read keeps the last good one.
    let due = TokenFile::new(path.clone(), Duration::ZERO).unwrap();
    assert_eq!(due.header(), "Bearer two");
    fs::write(&path, "three").unwrap();
    assert_eq!(due.header(), "Bearer three");
    fs::remove_file(&path).unwrap();
    assert_eq!(due.header(), "Bearer three");
    fs::write(&path, "").unwrap();
    assert_eq!(due.header(), "Bearer three");
    fs::write(&path, "four\n").unwrap();
    assert_eq!(due.header(), "Bearer four");

    // A token file that cannot be read at start is an error naming it.
    let missing = dir.0.join("missing");
    let err = TokenFile::new(missing, Duration::ZERO)
        .err()
        .unwrap_or_default();
    assert!(err.contains("missing"), "{err}");
}

#[test]
fn client_certificate_and_key_must_come_together() {
    let pem = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
    let b64 = base64::engine::general_purpose::STANDARD.encode(pem);
    let only_cert = AuthInfo {
        client_certificate_data: Some(b64.clone()),
        ..AuthInfo::default()
    };
    assert_eq!(
        client_identity(&only_cert).err().as_deref(),
        Some("client-certificate without client-key")
    );
    let only_key = AuthInfo {
        client_key_data: Some(b64.clone().into()),
        ..AuthInfo::default()
    };
    assert_eq!(
        client_identity(&only_key).err().as_deref(),
        Some("client-key without client-certificate")
    );
    let not_base64 = AuthInfo {
        client_certificate_data: Some("%%%".to_owned()),
        client_key_data: Some(b64.into()),
        ..AuthInfo::default()
    };
    let err = client_identity(&not_base64).err().unwrap_or_default();
    assert!(
        err.contains("client-certificate-data is not base64"),
        "{err}"
    );
    let missing_file = AuthInfo {
        client_certificate: Some("/nonexistent/me.crt".to_owned()),
        client_key: Some("/nonexistent/me.key".to_owned()),
        ..AuthInfo::default()
    };
    let err = client_identity(&missing_file).err().unwrap_or_default();
    assert!(err.contains("/nonexistent/me.crt"), "{err}");
    assert!(client_identity(&AuthInfo::default()).unwrap().is_none());
}
