//! Unit tests of the settings read from the environment.
use super::*;
use std::collections::HashMap;

fn config(vars: &[(&str, &str)]) -> Result<Config> {
    let map: HashMap<String, OsString> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), OsString::from(v)))
        .collect();
    Config::from_env(|name| map.get(name).cloned())
}

#[test]
fn defaults() {
    let c = config(&[]).unwrap();
    assert_eq!(c.api_addr, "0.0.0.0:8080".parse().unwrap());
    assert_eq!(c.metrics_addr, "0.0.0.0:9568".parse().unwrap());
    assert_eq!(c.api_token, None);
    assert!(!c.api_insecure);
    assert_eq!(c.log_format, LogFormat::Text);
    assert_eq!(c.watch_namespace, None);
    assert_eq!(c.lease_duration, Duration::from_secs(15));
    assert_eq!(c.pod_namespace, None);
    assert_eq!(c.pod_name, None);
}

// R47: both TLS files or neither; one alone is an error naming the other.
#[test]
fn tls_files_come_in_pairs() {
    assert_eq!(config(&[]).unwrap().api_tls, None);
    let c = config(&[
        ("MUTANT_API_TLS_CERT_FILE", "/tls/tls.crt"),
        ("MUTANT_API_TLS_KEY_FILE", " /tls/tls.key "),
    ])
    .unwrap();
    assert_eq!(
        c.api_tls,
        Some(TlsFiles {
            cert: PathBuf::from("/tls/tls.crt"),
            key: PathBuf::from("/tls/tls.key"),
        })
    );
    let e = config(&[("MUTANT_API_TLS_CERT_FILE", "/tls/tls.crt")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("MUTANT_API_TLS_KEY_FILE is not"), "{e}");
    let e = config(&[("MUTANT_API_TLS_KEY_FILE", "/tls/tls.key")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("MUTANT_API_TLS_CERT_FILE is not"), "{e}");
    // empty counts as unset
    assert_eq!(
        config(&[
            ("MUTANT_API_TLS_CERT_FILE", ""),
            ("MUTANT_API_TLS_KEY_FILE", " ")
        ])
        .unwrap()
        .api_tls,
        None
    );
}

#[test]
fn lease_settings() {
    let c = config(&[
        ("MUTANT_LEASE_DURATION_SECONDS", " 4 "),
        ("POD_NAMESPACE", "mutants"),
        ("POD_NAME", "mutantops-operator-abc"),
    ])
    .unwrap();
    assert_eq!(c.lease_duration, Duration::from_secs(4));
    assert_eq!(c.pod_namespace.as_deref(), Some("mutants"));
    assert_eq!(c.pod_name.as_deref(), Some("mutantops-operator-abc"));
    assert_eq!(
        config(&[("MUTANT_LEASE_DURATION_SECONDS", "2")])
            .unwrap()
            .lease_duration,
        Duration::from_secs(2)
    );
}

#[test]
fn explicit_values() {
    let c = config(&[
        ("MUTANT_API_ADDR", "127.0.0.1:18080"),
        ("MUTANT_METRICS_ADDR", "[::1]:19568"),
        (
            "MUTANT_API_TOKEN",
            " abcdefghijklmnopqrstuvwxyz-0123456789 \n",
        ),
        ("MUTANT_API_INSECURE", "TRUE"),
        ("MUTANT_LOG_FORMAT", "json"),
        ("MUTANT_WATCH_NAMESPACE", "edge"),
    ])
    .unwrap();
    assert_eq!(c.api_addr, "127.0.0.1:18080".parse().unwrap());
    assert_eq!(c.metrics_addr, "[::1]:19568".parse().unwrap());
    let token = "abcdefghijklmnopqrstuvwxyz-0123456789";
    assert_eq!(c.api_token, Some(Secret::new(token)));
    assert_eq!(c.api_token.as_ref().map(Secret::expose), Some(token));
    // the token never shows in a printed configuration
    let printed = format!("{c:?}");
    assert!(
        !printed.contains("abc") && printed.contains("REDACTED"),
        "{printed}"
    );
    assert!(c.api_insecure);
    assert_eq!(c.log_format, LogFormat::Json);
    assert_eq!(c.watch_namespace.as_deref(), Some("edge"));
}

#[test]
fn empty_token_is_no_token() {
    assert_eq!(config(&[("MUTANT_API_TOKEN", "")]).unwrap().api_token, None);
}

#[test]
fn malformed_values_are_errors_not_defaults() {
    for (name, value) in [
        ("MUTANT_API_ADDR", "8080"),
        ("MUTANT_API_ADDR", "localhost:8080"),
        ("MUTANT_METRICS_ADDR", "0.0.0.0"),
        ("MUTANT_API_INSECURE", "maybe"),
        ("MUTANT_LOG_FORMAT", "xml"),
        ("MUTANT_WATCH_NAMESPACE", "Not_A_Namespace"),
        ("MUTANT_LEASE_DURATION_SECONDS", "1"),
        ("MUTANT_LEASE_DURATION_SECONDS", "0"),
        ("MUTANT_LEASE_DURATION_SECONDS", "-5"),
        ("MUTANT_LEASE_DURATION_SECONDS", "15s"),
        ("MUTANT_LEASE_DURATION_SECONDS", "1.5"),
        ("MUTANT_LEASE_DURATION_SECONDS", ""),
        ("MUTANT_LEASE_DURATION_SECONDS", "99999999999"),
        ("POD_NAMESPACE", "Bad_Namespace"),
    ] {
        let err = config(&[(name, value)]).unwrap_err().to_string();
        assert!(err.contains(name), "{name}={value}: {err}");
    }
}

#[test]
fn token_is_never_printed() {
    let c = config(&[("MUTANT_API_TOKEN", "s3cr3t-value-0123456789abcdef0123")]).unwrap();
    assert!(!format!("{c:?}").contains("s3cr3t"));
}

// R20: a short admin token is refused at start, naming the variable and the
// minimum, never showing the token.
#[test]
fn a_short_admin_token_is_refused() {
    let e = config(&[("MUTANT_API_TOKEN", "a")])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("MUTANT_API_TOKEN: 1 characters") && e.contains("at least 32"),
        "{e}"
    );
    let short = "s".repeat(31);
    let e = config(&[("MUTANT_API_TOKEN", &short)])
        .unwrap_err()
        .to_string();
    assert!(e.contains("31 characters") && !e.contains(&short), "{e}");
    let enough = "0123456789abcdef".repeat(2);
    assert!(
        config(&[("MUTANT_API_TOKEN", &enough)])
            .unwrap()
            .api_token
            .is_some()
    );
    // surrounding white space does not count
    let padded = format!("  {short}  ");
    assert!(config(&[("MUTANT_API_TOKEN", &padded)]).is_err());
}

// R20: no auth on an address others can reach only when asked for twice.
#[test]
fn insecure_is_loopback_only_unless_allowed() {
    for addr in ["0.0.0.0:8080", "10.0.0.7:8080", "[::]:8080"] {
        let e = config(&[("MUTANT_API_INSECURE", "true"), ("MUTANT_API_ADDR", addr)])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("MUTANT_API_INSECURE") && e.contains("MUTANT_API_INSECURE_ALLOW_REMOTE"),
            "{addr}: {e}"
        );
    }
    // the default address is every interface: refused too
    assert!(config(&[("MUTANT_API_INSECURE", "true")]).is_err());
    for addr in ["127.0.0.1:8080", "127.0.0.2:18080", "[::1]:8080"] {
        let c = config(&[("MUTANT_API_INSECURE", "true"), ("MUTANT_API_ADDR", addr)]).unwrap();
        assert!(c.api_insecure, "{addr}");
    }
    let c = config(&[
        ("MUTANT_API_INSECURE", "true"),
        ("MUTANT_API_INSECURE_ALLOW_REMOTE", "true"),
    ])
    .unwrap();
    assert!(c.api_insecure);
    // the permission alone changes nothing, and a malformed one is an error
    assert!(
        !config(&[("MUTANT_API_INSECURE_ALLOW_REMOTE", "true")])
            .unwrap()
            .api_insecure
    );
    let e = config(&[("MUTANT_API_INSECURE_ALLOW_REMOTE", "maybe")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("MUTANT_API_INSECURE_ALLOW_REMOTE"), "{e}");
}

// R33, R34: the namespaces the API serves, its connection cap and
// how long the API server may be silent; bad values are errors naming the variable.
#[test]
fn api_namespaces_connections_and_staleness() {
    let c = config(&[]).unwrap();
    assert_eq!(c.api_namespaces, None);
    assert_eq!(c.api_max_connections, DEFAULT_API_MAX_CONNECTIONS);
    assert_eq!(c.api_buffer_mib, DEFAULT_API_BUFFER_MIB);
    // R34: one deadline per request, under the 4.5 s after which firmware gives up.
    assert_eq!(c.api_request_deadline, Duration::from_secs(4));
    assert_eq!(c.stale_after, Duration::from_secs(30));
    // R34: a watch is stale after twice the API server's bookmark interval.
    assert_eq!(c.watch_stale_after, Duration::from_secs(120));
    assert_eq!(c.metrics_max_devices, DEFAULT_METRICS_MAX_DEVICES);
    let c = config(&[
        ("MUTANT_API_NAMESPACES", " boards, kiosks ,"),
        ("MUTANT_API_MAX_CONNECTIONS", "64"),
        ("MUTANT_API_BUFFER_MIB", "2"),
        ("MUTANT_API_REQUEST_DEADLINE_SECONDS", "9"),
        ("MUTANT_STALE_AFTER_SECONDS", "5"),
        ("MUTANT_WATCH_STALE_AFTER_SECONDS", "6"),
        ("MUTANT_METRICS_MAX_DEVICES", "0"),
    ])
    .unwrap();
    assert_eq!(c.metrics_max_devices, 0);
    assert_eq!(
        c.api_namespaces,
        Some(vec!["boards".to_string(), "kiosks".to_string()])
    );
    assert_eq!(c.api_max_connections, 64);
    // R44: the buffered bytes.
    assert_eq!(c.api_buffer_mib, 2);
    assert_eq!(c.api_request_deadline, Duration::from_secs(9));
    assert_eq!(c.stale_after, Duration::from_secs(5));
    assert_eq!(c.watch_stale_after, Duration::from_secs(6));
    assert_eq!(
        config(&[("MUTANT_API_NAMESPACES", " , ")])
            .unwrap()
            .api_namespaces,
        None
    );
    for (name, value) in [
        ("MUTANT_API_NAMESPACES", "Boards"),
        ("MUTANT_API_MAX_CONNECTIONS", "0"),
        ("MUTANT_API_MAX_CONNECTIONS", "lots"),
        ("MUTANT_API_BUFFER_MIB", "0"),
        ("MUTANT_API_BUFFER_MIB", "1025"),
        ("MUTANT_API_REQUEST_DEADLINE_SECONDS", "0"),
        ("MUTANT_API_REQUEST_DEADLINE_SECONDS", "61"),
        ("MUTANT_STALE_AFTER_SECONDS", "0"),
        ("MUTANT_WATCH_STALE_AFTER_SECONDS", "3"),
        ("MUTANT_METRICS_MAX_DEVICES", "100001"),
        ("MUTANT_METRICS_MAX_DEVICES", "-1"),
    ] {
        let e = config(&[(name, value)]).unwrap_err().to_string();
        assert!(e.contains(name), "{name}={value}: {e}");
    }
    // The API serves only what the operator watches.
    let e = config(&[
        ("MUTANT_WATCH_NAMESPACE", "boards"),
        ("MUTANT_API_NAMESPACES", "boards,kiosks"),
    ])
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("\"kiosks\"") && e.contains("does not watch"),
        "{e}"
    );
}

// R33: the operator's ServiceAccount, from the downward API; unset or empty is unknown, and a
// value that cannot be a ServiceAccount name is an error naming the variable.
#[test]
fn pod_service_account() {
    assert_eq!(config(&[]).unwrap().pod_service_account, None);
    assert_eq!(
        config(&[("POD_SERVICE_ACCOUNT", " ")])
            .unwrap()
            .pod_service_account,
        None
    );
    let c = config(&[("POD_SERVICE_ACCOUNT", " mutantops ")]).unwrap();
    assert_eq!(c.pod_service_account.as_deref(), Some("mutantops"));
    let e = config(&[("POD_SERVICE_ACCOUNT", "Not/A-Name")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("POD_SERVICE_ACCOUNT"), "{e}");
}

// R34: MUTANT_API_TRUSTED_PROXIES trusts no proxy unless set; a list of ranges parses, and a
// malformed entry or a range of every address stops the start with the variable's name.
#[test]
fn trusted_proxies() {
    assert!(config(&[]).unwrap().api_trusted_proxies.is_empty());
    assert!(
        config(&[("MUTANT_API_TRUSTED_PROXIES", "")])
            .unwrap()
            .api_trusted_proxies
            .is_empty()
    );
    let c = config(&[("MUTANT_API_TRUSTED_PROXIES", "10.42.0.0/16, 127.0.0.7")]).unwrap();
    assert_eq!(
        c.api_trusted_proxies.to_string(),
        "10.42.0.0/16,127.0.0.7/32"
    );
    for bad in ["10.42.0.0/33", "traefik", "0.0.0.0/0"] {
        let e = config(&[("MUTANT_API_TRUSTED_PROXIES", bad)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("MUTANT_API_TRUSTED_PROXIES"), "{e}");
        assert!(e.contains(bad), "{e}");
    }
}
