//! The binary's command line and start-up checks (issue: foundation; R20 start-up errors, R27).
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
        .env_remove("MUTANT_API_INSECURE");
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
