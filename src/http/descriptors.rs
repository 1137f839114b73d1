//! The listeners' connection caps fitted to the file descriptors the process has
//! (R34).
//!
//! Every open connection is a descriptor; so is every connection to the API server (the
//! watches, the reconciles' calls, the API's own calls) and every file read. A cap above what
//! the process may open lets idle clients take the descriptors the operator needs for itself:
//! `accept` then fails with "Too many open files" and nobody is answered, the admin neither.
//!
//! At start the soft `RLIMIT_NOFILE` is raised to the hard one (as Go programs do), and the
//! two listeners' caps together are kept below what is left of it after [`RESERVE`]. A cap
//! lowered to fit is logged with the limit and the way to raise it.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// The descriptors kept for the operator's own use: standard streams and the runtime's own
/// (about 8), the two listeners, the watches (about 10, one connection each), the reconciles'
/// calls (8 per kind in flight, one connection each), the HTTP API's calls to the API server
/// (a token's writes are rate-limited, so few at once) and the files it reads (the
/// kubeconfig's token, TLS files). 19 were open at rest in the soak (docs/soak.md).
pub const RESERVE: u64 = 96;

/// The fewest connections a listener is given however small the limit: the admin and a probe
/// still get in, because at the cap an idle connection is closed to make room (`conns.rs`).
pub const FLOOR: usize = 4;

/// The caps of the two listeners.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    /// The HTTP API's connections.
    pub api: usize,
    /// The metrics and probe listener's.
    pub metrics: usize,
}

/// Why the caps could not be fitted: the limit is too low. Its text is what is wrong with
/// `RLIMIT_NOFILE`, which the start-up error names as the setting.
#[derive(Debug, PartialEq, Eq)]
pub struct TooFew {
    /// The descriptor limit.
    pub limit: u64,
}

impl std::fmt::Display for TooFew {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the process may open only {} files, and needs at least {}: {} for its \
             own connections and files and {} for each listener; raise it (`ulimit -n`, or the \
             container runtime's default)",
            self.limit,
            RESERVE + 2 * FLOOR as u64,
            RESERVE,
            FLOOR
        )
    }
}

/// The caps that fit `limit` descriptors (`None`: unlimited): the configured ones when they
/// fit with [`RESERVE`] to spare, else lowered. The metrics listener keeps its cap up to an
/// eighth of what is left (its clients are the kubelet's probes and a few scrapers), the API
/// gets the rest; neither below [`FLOOR`].
pub fn fit(limit: Option<u64>, wanted: Caps) -> Result<Caps, TooFew> {
    let Some(limit) = limit else {
        return Ok(wanted);
    };
    let left = usize::try_from(limit.saturating_sub(RESERVE)).unwrap_or(usize::MAX);
    if left < 2 * FLOOR {
        return Err(TooFew { limit });
    }
    if wanted.api.saturating_add(wanted.metrics) <= left {
        return Ok(wanted);
    }
    let metrics = wanted.metrics.min((left / 8).max(FLOOR));
    let api = wanted.api.min(left - metrics);
    Ok(Caps { api, metrics })
}

/// The soft descriptor limit, raised to the hard one first when it is lower (`None`:
/// unlimited). A raise refused leaves the soft limit as it was.
pub fn open_files_limit() -> Option<u64> {
    let Rlimit { current, maximum } = getrlimit(Resource::Nofile);
    if current.is_some() && current != maximum {
        let raised = Rlimit {
            current: maximum,
            maximum,
        };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => {
                tracing::debug!(from = ?current, to = ?maximum, "raised the descriptor limit");
                return maximum;
            }
            Err(err) => {
                tracing::debug!(error = %err, "could not raise the descriptor limit");
            }
        }
    }
    current
}

/// [`fit`] for the process's own limit ([`open_files_limit`]), with a log line for each cap
/// lowered, naming the limit and the setting.
pub fn fit_process(wanted: Caps) -> Result<Caps, TooFew> {
    let limit = open_files_limit();
    let caps = fit(limit, wanted)?;
    let limit = limit.unwrap_or(u64::MAX);
    if caps.api < wanted.api {
        tracing::warn!(
            limit,
            configured = wanted.api,
            cap = caps.api,
            "MUTANT_API_MAX_CONNECTIONS lowered to fit the descriptor limit (RLIMIT_NOFILE), \
             {RESERVE} of which are kept for the operator's own connections and files; raise \
             the limit to keep the configured cap"
        );
    }
    if caps.metrics < wanted.metrics {
        tracing::warn!(
            limit,
            configured = wanted.metrics,
            cap = caps.metrics,
            "the metrics listener's connection cap lowered to fit the descriptor limit"
        );
    }
    Ok(caps)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULTS: Caps = Caps {
        api: 256,
        metrics: 64,
    };

    #[test]
    fn caps_that_fit_are_kept() {
        // R34: a usual container limit keeps the defaults.
        assert_eq!(fit(Some(1024), DEFAULTS), Ok(DEFAULTS));
        assert_eq!(fit(None, DEFAULTS), Ok(DEFAULTS));
        assert_eq!(fit(Some(RESERVE + 320), DEFAULTS), Ok(DEFAULTS));
    }

    #[test]
    fn caps_are_lowered_below_the_limit() {
        // R34: at 160 descriptors the default 256 API connections would take
        // them all; the two caps together leave RESERVE free.
        let caps = fit(Some(160), DEFAULTS).unwrap();
        assert_eq!(
            caps,
            Caps {
                api: 56,
                metrics: 8
            }
        );
        assert!((caps.api + caps.metrics) as u64 + RESERVE <= 160);
        // Just below what the defaults need: the metrics listener gives way to an eighth of
        // what is left, and the API keeps its configured cap.
        let caps = fit(Some(RESERVE + 319), DEFAULTS).unwrap();
        assert_eq!(
            caps,
            Caps {
                api: 256,
                metrics: 39
            }
        );
        // A configured cap below what is left stays as it is.
        let small = Caps {
            api: 32,
            metrics: 64,
        };
        assert_eq!(
            fit(Some(160), small).unwrap(),
            Caps {
                api: 32,
                metrics: 8
            }
        );
    }

    #[test]
    fn a_limit_too_small_is_refused_with_what_it_needs() {
        assert_eq!(
            fit(Some(RESERVE + 7), DEFAULTS),
            Err(TooFew { limit: RESERVE + 7 })
        );
        assert_eq!(
            fit(Some(RESERVE + 8), DEFAULTS),
            Ok(Caps { api: 4, metrics: 4 })
        );
        let message = TooFew { limit: 100 }.to_string();
        assert!(message.contains("only 100 files"), "{message}");
        assert!(message.contains("at least 104"), "{message}");
        assert!(message.contains("ulimit -n"), "{message}");
    }
}
