//! R32, R41: the families a token may not set by default, with names the code does not spell
//! out, and the app settings they leave alone.

use super::*;

// R32: a name of each family that appears nowhere in the code is refused, named by its
// family; compared as env_key reads it
#[test]
fn names_nobody_listed_are_refused_by_their_family() {
    for (name, family) in [
        ("KAFKA_HEAP_OPTS", "launcher"),
        ("JAVA_OPTS_APPEND", "launcher"),
        ("zookeeper_jvmflags", "launcher"),
        ("MYAPP_EXTRA_ARGS", "launcher"),
        ("SPARK_SUBMIT_OPTS", "launcher"),
        ("JAVA_OPTIONS", "launcher"),
        ("ANT_OPTS", "launcher"),
        ("LS_JAVA_OPTS", "launcher"),
        ("my-app.opts", "launcher"),
        ("GUILE_LOAD_PATH", "interpreters"),
        ("NODE_PATH", "interpreters"),
        ("R_LIBS_USER", "interpreters"),
        ("GEM_HOME", "interpreters"),
        ("ERL_LIBS", "interpreters"),
        ("PIP_INDEX_URL", "package"),
        ("UV_INDEX_URL", "package"),
        ("YARN_REGISTRY", "package"),
        ("BUNDLE_GEMFILE", "package"),
        ("cargo_registries_crates_io_protocol", "package"),
        ("HEX_MIRROR", "package"),
        ("COMPOSER_HOME", "interpreters"),
        ("grpc_proxy", "proxies"),
        ("Socks5_Proxy", "proxies"),
        ("npm_config_https_proxy", "package"),
        ("GIT_SSL_CAINFO", "TLS"),
        ("AWS_CA_BUNDLE", "TLS"),
        ("SSLKEYLOGFILE", "TLS"),
        ("MYAPP_TLS_INSECURE", "TLS"),
        ("DYLD_INSERT_LIBRARIES", "loader"),
        ("GLIBC_TUNABLES", "loader"),
        ("GIT_EXEC_PATH", "interpreters"),
        ("GNUPGHOME", "git"),
        ("ZDOTDIR", "shells"),
        ("XDG_CONFIG_DIRS", "shells"),
        ("LESSOPEN", "shells"),
        ("APP_START_CMD", "shells"),
        ("KUBERNETES_SERVICE_HOST", "cloud"),
        ("AWS_ENDPOINT_URL", "cloud"),
        ("DOCKER_HOST", "cloud"),
        ("RES_NAMESERVERS", "resolver"),
        ("GODEBUG", "debug"),
        ("GOTRACEBACK", "debug"),
        ("NODE_DEBUG", "debug"),
        ("NODE_V8_COVERAGE", "debug"),
    ] {
        let said = denied(name).unwrap_or_default();
        assert!(said.contains(family), "{name}: {said:?}, wanted {family}");
    }
}

// R32: the seed's names and common settings of a display's app stay a token's to set
#[test]
fn app_settings_are_no_family() {
    for name in [
        "FEATURE_X",
        "SNAP_RES",
        "SCREEN",
        "TITLE",
        "NODE_ENV",
        "RAILS_ENV",
        "MALLOC_ARENA_MAX",
        "LANG",
        "TZ",
        "PATHNAME",
        "PATH_PREFIX",
        "ENVIRONMENT",
        "HOMEPAGE",
        "HOME_ASSISTANT_URL",
        "REFRESH_SECONDS",
        "RSSI",
        "CLIENT",
        "PAGE",
        "MODE",
        "COLOUR",
        "WEBHOOK_URL",
    ] {
        assert_eq!(denied(name), None, "{name}");
    }
}

// R32: the second line still holds the names a pattern would not find
#[test]
fn the_second_line_names_what_no_family_finds() {
    for name in ["PROMPT_COMMAND", "SSH_AUTH_SOCK", "ENV", "PS4"] {
        assert!(denied(name).is_some(), "{name}");
    }
    assert!(
        STARTUP_ENV
            .iter()
            .all(|e| e.trim_end_matches('*') == env_key(e.trim_end_matches('*')))
    );
}
