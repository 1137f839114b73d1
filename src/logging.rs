//! Log set-up: human-readable lines by default, one JSON object per line with
//! `MUTANT_LOG_FORMAT=json`, filtered by `RUST_LOG` (default `info`).
//!
//! `RUST_LOG` takes comma-separated `target=level` directives and a bare default level, as in
//! `info,mutantops=debug,kube=warn` (a target also covers its submodules). They are parsed into
//! a [`Targets`] filter rather than an `EnvFilter`: `EnvFilter` and its span and field filters
//! (`target[span{field=value}]=level`) cost the release binary about 170 KiB (regex DFAs). A
//! `RUST_LOG` that does not parse, such as one with span filters, falls back to `info` with a
//! warning in the log.

use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, fmt};

use crate::config::LogFormat;

/// Filter used when `RUST_LOG` is unset or cannot be parsed.
const DEFAULT_FILTER: &str = "info";

/// Installs the global subscriber. Calling it twice keeps the first one.
pub fn init(format: LogFormat) {
    let (filter, warning) = filter_from(std::env::var("RUST_LOG").ok().as_deref());
    let layer = fmt::layer().with_writer(std::io::stderr).with_ansi(false);
    let layer = match format {
        LogFormat::Text => layer.boxed(),
        LogFormat::Json => layer.json().flatten_event(true).boxed(),
    };
    // An error only means a subscriber is already installed (tests); the first one stays.
    if tracing_subscriber::registry()
        .with(filter)
        .with(layer)
        .try_init()
        .is_ok()
        && let Some(warning) = warning
    {
        // Through the subscriber, so that a JSON log stays one object per line.
        tracing::warn!("{warning}");
    }
}

/// The filter for a `RUST_LOG` value (`None` when unset), and a warning when the value was
/// rejected in favour of the default.
///
/// Empty directives are skipped (`info,` is `info`); a value with no directive at all enables
/// nothing, as `EnvFilter` does for an empty `RUST_LOG`.
fn filter_from(rust_log: Option<&str>) -> (Targets, Option<String>) {
    let Some(value) = rust_log else {
        return (default_filter(), None);
    };
    let directives: Vec<&str> = value
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .collect();
    if let Some(bad) = directives.iter().find(|d| d.contains(['[', ']', '{', '}'])) {
        return (
            default_filter(),
            Some(format!(
                "RUST_LOG: span and field filters such as `{bad}` are not supported; \
                 logging at `{DEFAULT_FILTER}`"
            )),
        );
    }
    match directives.join(",") {
        joined if joined.is_empty() => (Targets::new(), None),
        joined => match joined.parse::<Targets>() {
            Ok(filter) => (filter, None),
            Err(e) => (
                default_filter(),
                Some(format!(
                    "RUST_LOG={value:?} is not a valid filter ({e}); logging at `{DEFAULT_FILTER}`"
                )),
            ),
        },
    }
}

fn default_filter() -> Targets {
    Targets::new().with_default(tracing::Level::INFO)
}

#[cfg(test)]
mod tests {
    use tracing::Level;

    use super::*;

    fn parse(value: Option<&str>) -> (Targets, Option<String>) {
        filter_from(value)
    }

    #[test]
    fn unset_means_info() {
        let (filter, warning) = parse(None);
        assert!(warning.is_none());
        assert!(filter.would_enable("mutantops::api", &Level::INFO));
        assert!(!filter.would_enable("mutantops::api", &Level::DEBUG));
    }

    #[test]
    fn directives_per_target_with_a_default() {
        let (filter, warning) = parse(Some("info,mutantops=debug,kube=warn"));
        assert!(warning.is_none());
        assert!(filter.would_enable("mutantops", &Level::DEBUG));
        assert!(filter.would_enable("mutantops::controller", &Level::DEBUG));
        assert!(!filter.would_enable("mutantops::controller", &Level::TRACE));
        assert!(!filter.would_enable("kube_runtime", &Level::DEBUG));
        assert!(!filter.would_enable("kube::client", &Level::INFO));
        assert!(filter.would_enable("kube::client", &Level::WARN));
        assert!(filter.would_enable("hyper", &Level::INFO));
        assert!(!filter.would_enable("hyper", &Level::DEBUG));
    }

    #[test]
    fn levels_are_case_insensitive_and_a_bare_target_means_trace() {
        let (filter, warning) = parse(Some(" WARN , mutantops "));
        assert!(warning.is_none());
        assert!(filter.would_enable("mutantops::api", &Level::TRACE));
        assert!(filter.would_enable("tokio", &Level::WARN));
        assert!(!filter.would_enable("tokio", &Level::INFO));
    }

    #[test]
    fn off_and_empty_directives() {
        let (filter, warning) = parse(Some("off,,mutantops=error,"));
        assert!(warning.is_none());
        assert!(filter.would_enable("mutantops", &Level::ERROR));
        assert!(!filter.would_enable("kube", &Level::ERROR));

        // As with `EnvFilter`, a `RUST_LOG` without directives enables nothing.
        let (filter, warning) = parse(Some(""));
        assert!(warning.is_none());
        assert!(!filter.would_enable("mutantops", &Level::ERROR));
    }

    #[test]
    fn an_unparsable_value_falls_back_to_info_with_a_warning() {
        for value in [
            "mutantops=loud",
            "a=b=c",
            "mutantops[reconcile{name=x}]=debug",
        ] {
            let (filter, warning) = parse(Some(value));
            let warning = warning.unwrap_or_else(|| panic!("{value:?} gave no warning"));
            assert!(warning.contains("RUST_LOG"), "{warning}");
            assert!(filter.would_enable("mutantops", &Level::INFO), "{value:?}");
            assert!(
                !filter.would_enable("mutantops", &Level::DEBUG),
                "{value:?}"
            );
        }
    }
}
