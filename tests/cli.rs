//! The binary's command line and start-up checks (R20 start-up errors, R27).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a failed step must fail the test"
)]

use std::process::{Command, Output};

fn mutantops(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mutantops"));
    command
        .args(args)
        .env_remove("MUTANT_API_TOKEN")
        .env_remove("MUTANT_API_INSECURE")
        .env_remove("MUTANT_API_INSECURE_ALLOW_REMOTE");
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().unwrap()
}

#[test]
fn version_and_help() {
    let version = mutantops(&["--version"], &[]);
    assert!(version.status.success());
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("mutantops {}", env!("CARGO_PKG_VERSION"))
    );
    let help = mutantops(&["--help"], &[]);
    assert!(help.status.success());
    let text = String::from_utf8_lossy(&help.stdout);
    for word in [
        "mutantops crd",
        "MUTANT_API_ADDR",
        "MUTANT_METRICS_ADDR",
        "MUTANT_API_TOKEN",
        "MUTANT_API_INSECURE",
        "MUTANT_API_INSECURE_ALLOW_REMOTE",
        "MUTANT_API_TLS_CERT_FILE",
        "MUTANT_API_TLS_KEY_FILE",
    ] {
        assert!(text.contains(word), "--help should mention {word}:\n{text}");
    }
}

#[test]
fn unknown_arguments_exit_2_with_usage() {
    let out = mutantops(&["--frobnicate"], &[]);
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("unknown argument '--frobnicate'") && text.contains("Usage:"),
        "{text}"
    );
}

/// R20: a malformed address or boolean is a start-up error, not a silent default. These fail
/// before any connection to a cluster is tried.
#[test]
fn bad_configuration_exits_non_zero_and_names_the_variable() {
    for (name, value) in [
        ("MUTANT_API_ADDR", "not-an-address"),
        ("MUTANT_METRICS_ADDR", "9568"),
        ("MUTANT_API_INSECURE", "sometimes"),
        ("MUTANT_LOG_FORMAT", "yaml"),
    ] {
        let out = mutantops(&[], &[(name, value)]);
        assert_eq!(out.status.code(), Some(1), "{name}={value}");
        let text = String::from_utf8_lossy(&out.stderr);
        assert!(text.contains(name), "{name}={value}: {text}");
    }
}

/// R20: a short admin token, and auth turned off on an address others can
/// reach, are start-up errors naming the variable, before any connection is tried; the token
/// itself is never printed.
#[test]
fn a_short_admin_token_or_remote_insecure_api_is_refused_at_start() {
    let no_cluster = ("KUBECONFIG", "/nonexistent/kubeconfig");
    let out = mutantops(&["run"], &[("MUTANT_API_TOKEN", "hunter2"), no_cluster]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("MUTANT_API_TOKEN: 7 characters") && text.contains("at least 32"),
        "{text}"
    );
    assert!(
        !text.contains("hunter2"),
        "the token must not be printed: {text}"
    );

    let out = mutantops(&["run"], &[("MUTANT_API_INSECURE", "true"), no_cluster]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("0.0.0.0:8080") && text.contains("MUTANT_API_INSECURE_ALLOW_REMOTE"),
        "{text}"
    );
    // Allowed, it gets as far as the (missing) kubeconfig.
    let out = mutantops(
        &["run"],
        &[
            ("MUTANT_API_INSECURE", "true"),
            ("MUTANT_API_INSECURE_ALLOW_REMOTE", "true"),
            no_cluster,
        ],
    );
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(!text.contains("MUTANT_API_INSECURE"), "{text}");
}

/// R47: one TLS file without the other, or a certificate and key that do not belong
/// together, is a start-up error naming the file, before any connection is tried.
#[test]
fn a_bad_tls_pair_exits_non_zero_and_names_the_file() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-tls");
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, text: String| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let key_a = rcgen::KeyPair::generate().unwrap();
    let cert_a = rcgen::CertificateParams::new(vec!["a.example".to_string()])
        .unwrap()
        .self_signed(&key_a)
        .unwrap();
    let cert = write("a.crt", cert_a.pem());
    let other_key = write("b.key", rcgen::KeyPair::generate().unwrap().serialize_pem());
    let empty = write("empty.crt", String::new());
    let cases = [
        (
            vec![("MUTANT_API_TLS_CERT_FILE", cert.as_str())],
            "MUTANT_API_TLS_KEY_FILE",
        ),
        (
            vec![
                ("MUTANT_API_TLS_CERT_FILE", cert.as_str()),
                ("MUTANT_API_TLS_KEY_FILE", other_key.as_str()),
            ],
            "b.key is not the key of the certificate",
        ),
        (
            vec![
                ("MUTANT_API_TLS_CERT_FILE", empty.as_str()),
                ("MUTANT_API_TLS_KEY_FILE", other_key.as_str()),
            ],
            "empty.crt: no PEM CERTIFICATE block",
        ),
    ];
    for (env, named) in cases {
        let mut env = env;
        // Never reaches a cluster: the pair is checked first.
        env.push(("KUBECONFIG", "/nonexistent/kubeconfig"));
        let out = mutantops(&["run"], &env);
        assert_eq!(out.status.code(), Some(1), "{env:?}");
        let text = String::from_utf8_lossy(&out.stderr);
        assert!(text.contains(named), "{env:?}: {text}");
    }
}

/// A kubeconfig that asks for an authentication method the operator does not implement is a
/// start-up error naming the setting, before any connection is tried; so is one that names no
/// cluster at all.
#[test]
fn unsupported_kubeconfig_exits_non_zero_and_names_the_setting() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-kubeconfig");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, user, named) in [
        (
            "exec",
            "exec: {apiVersion: client.authentication.k8s.io/v1, command: aws}",
            "`exec`",
        ),
        ("provider", "auth-provider: {name: oidc}", "`auth-provider`"),
        ("basic", "username: a, password: b", "basic authentication"),
    ] {
        let path = dir.join(name);
        std::fs::write(
            &path,
            format!(
                "clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:1'}}}}]\n\
                 users: [{{name: u, user: {{{user}}}}}]\n\
                 contexts: [{{name: x, context: {{cluster: c, user: u}}}}]\n\
                 current-context: x\n"
            ),
        )
        .unwrap();
        let out = mutantops(&["run"], &[("KUBECONFIG", path.to_str().unwrap())]);
        assert_eq!(out.status.code(), Some(1), "{name}");
        let text = String::from_utf8_lossy(&out.stderr);
        assert!(
            text.contains(named) && text.contains("not supported"),
            "{name}: {text}"
        );
    }

    let out = mutantops(&["run"], &[("KUBECONFIG", "/nonexistent/kubeconfig")]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("/nonexistent/kubeconfig"), "{text}");
}

/// A CA certificate that signed nothing: lets a kubeconfig load without any real cluster.
const UNUSED_CA: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJvakNDQVVlZ0F3SUJBZ0lVRmdpNUFuRkZha3BLNkttQUtlQ2I1RERCQnZnd0NnWUlLb1pJemowRUF3SXcKSlRFak1DRUdBMVVFQXd3YWJYVjBZVzUwYjNCeklIUmxjM1FnUTBFZ0tIVnVkWE5sWkNrd0lCY05Nall4TVRJNQpNak16TmpNeFdoZ1BNakV5TmpFeE1EVXlNek0yTXpGYU1DVXhJekFoQmdOVkJBTU1HbTExZEdGdWRHOXdjeUIwClpYTjBJRU5CSUNoMWJuVnpaV1FwTUZrd0V3WUhLb1pJemowQ0FRWUlLb1pJemowREFRY0RRZ0FFalBta3ovNVQKL2MvclRBbWRucHdFSXdDTWlNQWJXRGtyU2VFZDN6eit2ejZscHNMVTlXcTVjbHJFWFVqcnFSd0hiaHZVQndhQQpQbk9Oby9GK0M5OURrcU5UTUZFd0hRWURWUjBPQkJZRUZGUW4zV0UwSVQ2eFFXd2FnNkw4MVpaYUVPQ0hNQjhHCkExVWRJd1FZTUJhQUZGUW4zV0UwSVQ2eFFXd2FnNkw4MVpaYUVPQ0hNQThHQTFVZEV3RUIvd1FGTUFNQkFmOHcKQ2dZSUtvWkl6ajBFQXdJRFNRQXdSZ0loQU5wWldBZDNmWGJVOXNhakJ1RExOdjlBWEcycHB0dWJGa1RQbHVKcgpvOTNRQWlFQW1BSm1iODVmS2JZZ0pkVFErMUUrNFV4T3dRa0E1bEQ4SW9KQ2VzRXduR009Ci0tLS0tRU5EIENFUlRJRklDQVRFLS0tLS0K";

/// R30: while the API server cannot be reached the operator waits and says so, rather than
/// exiting into the kubelet's crash-loop back-off.
#[test]
fn an_unreachable_api_server_is_waited_for() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-unreachable");
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    // Port 1 on loopback: nothing listens there, every connection is refused.
    std::fs::write(
        &kubeconfig,
        format!(
            "clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:1', \
             certificate-authority-data: {UNUSED_CA}}}}}]\n\
             users: [{{name: u, user: {{token: abc}}}}]\n\
             contexts: [{{name: x, context: {{cluster: c, user: u}}}}]\n\
             current-context: x\n"
        ),
    )
    .unwrap();
    let log = dir.join("stderr");
    let mut child = Command::new(env!("CARGO_BIN_EXE_mutantops"))
        .arg("run")
        .env("KUBECONFIG", &kubeconfig)
        .env_remove("MUTANT_API_TOKEN")
        .env_remove("MUTANT_API_INSECURE")
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    // Two tries logged (1 s apart), and the process still running after them.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap();
        if text.matches("cannot be reached yet; retrying").count() >= 2 {
            break text;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("exited with {status} instead of waiting:\n{text}");
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no retries logged:\n{text}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let still_running = child.try_wait().unwrap().is_none();
    let _ = child.kill();
    let _ = child.wait();
    assert!(still_running, "{text}");
}
