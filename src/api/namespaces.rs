//! Which namespaces the HTTP API serves (R33). The admin token creates
//! Deployments that run as any ServiceAccount of a namespace it reaches, so it reaches only
//! namespaces someone chose for it:
//!
//! - `MUTANT_API_NAMESPACES`, when set: exactly those;
//! - else `MUTANT_WATCH_NAMESPACE`, when set: that one;
//! - else the namespaces labelled [`API_LABEL`]`=`[`ENABLED`], but never `kube-system`,
//!   `kube-public`, `kube-node-lease` ([`NEVER_BY_LABEL`]) nor the operator's own namespace,
//!   which only the variables above can name.
//!
//! The labelled ones are known from a watch of Namespaces selected by that label (metadata
//! only, never every namespace): the API server sends what is labelled, and a namespace whose
//! label goes is deleted from the watch. So memory is a name per labelled namespace, and a
//! request costs no call, whatever namespace it names, which matters because the check comes
//! before the token's (an unauthenticated flood of made-up names costs nothing). A GET per
//! request with a cache would cost a call per new name, and a label's removal would be seen
//! only when the cache entry expired. Until the first list has arrived, nothing is served
//! (503, and `/readyz` says not ready).

use std::collections::BTreeSet;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Namespace;
use kube::{
    Api, Client, ResourceExt as _,
    api::PartialObjectMeta,
    runtime::{WatchStreamExt as _, watcher},
};
use tokio::sync::watch;

use crate::shutdown::Shutdown;

/// The label of a namespace that opts in to the HTTP API.
pub const API_LABEL: &str = "mutantops.neiam.org/api";

/// Its value.
pub const ENABLED: &str = "enabled";

/// The namespaces a label never opts in: Kubernetes' own, where ServiceAccounts with the
/// cluster's widest rights run (on k3s, the Helm controller's are bound to cluster-admin).
pub const NEVER_BY_LABEL: [&str; 3] = ["kube-system", "kube-public", "kube-node-lease"];

/// The namespaces the API serves.
#[derive(Clone, Debug)]
pub enum Served {
    /// Exactly these, named by the configuration.
    Named(Vec<String>),
    /// Those labelled [`API_LABEL`]`=`[`ENABLED`], but the excluded ones.
    Labelled {
        /// The labelled namespaces; `None` until the first list.
        labelled: watch::Receiver<Option<BTreeSet<String>>>,
        /// Never served, labelled or not: [`NEVER_BY_LABEL`] and the operator's namespace.
        excluded: Vec<String>,
    },
}

/// Whether the API serves a namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Serves {
    /// It does.
    Yes,
    /// It does not.
    No,
    /// Not known yet: the labelled namespaces have not been listed.
    Starting,
}

impl Served {
    /// Whether namespace `ns` is served.
    pub fn serves(&self, ns: &str) -> Serves {
        match self {
            Served::Named(names) if names.iter().any(|n| n == ns) => Serves::Yes,
            Served::Named(_) => Serves::No,
            Served::Labelled { labelled, excluded } => match &*labelled.borrow() {
                None => Serves::Starting,
                Some(_) if excluded.iter().any(|n| n == ns) => Serves::No,
                Some(names) if names.contains(ns) => Serves::Yes,
                Some(_) => Serves::No,
            },
        }
    }

    /// Why namespace `ns` is not served, and how to serve it: for the admin's 404.
    pub fn why_not(&self, ns: &str) -> String {
        match self {
            Served::Named(names) => format!(
                "this operator serves only namespaces {names:?} (MUTANT_API_NAMESPACES, else \
                 MUTANT_WATCH_NAMESPACE)"
            ),
            Served::Labelled { excluded, .. } if excluded.iter().any(|n| n == ns) => format!(
                "namespace {ns:?} is served only when MUTANT_API_NAMESPACES names it: a label \
                 does not opt in Kubernetes' own namespaces or the operator's"
            ),
            Served::Labelled { .. } => format!(
                "namespace {ns:?} is not served: label it {API_LABEL}={ENABLED} to serve it \
                 (kubectl label namespace {ns} {API_LABEL}={ENABLED})"
            ),
        }
    }

    /// Resolves true once it is known what is served (at once for [`Served::Named`]); false
    /// if the watch stopped first.
    pub fn listed(&self) -> watch::Receiver<bool> {
        let (tx, rx) = watch::channel(matches!(self, Served::Named(_)));
        if let Served::Labelled { labelled, .. } = self {
            let mut labelled = labelled.clone();
            tokio::spawn(async move {
                let listed = labelled.wait_for(Option::is_some).await.is_ok();
                tx.send_replace(listed);
            });
        }
        rx
    }
}

/// The namespaces the API serves: `named` (the configuration's), else the labelled ones but
/// [`NEVER_BY_LABEL`] and `own` (the operator's namespace), watched with `client` until
/// `stop`, each watch asked to end after `timeout` seconds as the caches' are
/// ([`crate::cache::watch_timeout`]: so that a quiet watch hears a bookmark within the
/// client's bound on its silence, R34).
pub fn served(
    named: Option<Vec<String>>,
    own: Option<&str>,
    client: &Client,
    stop: Shutdown,
    timeout: Option<u32>,
) -> Served {
    if let Some(names) = named {
        tracing::info!(namespaces = ?names, "the HTTP API serves these namespaces");
        return Served::Named(names);
    }
    let excluded: Vec<String> = NEVER_BY_LABEL
        .iter()
        .copied()
        .chain(own)
        .map(str::to_owned)
        .collect();
    tracing::info!(
        label = %format!("{API_LABEL}={ENABLED}"),
        never = ?excluded,
        "the HTTP API serves the namespaces labelled for it"
    );
    let (tx, labelled) = watch::channel(None);
    tokio::spawn(watch_labelled(client.clone(), tx, stop, timeout));
    Served::Labelled { labelled, excluded }
}

/// Keeps `tx` at the names of the namespaces labelled for the API until `stop`.
async fn watch_labelled(
    client: Client,
    tx: watch::Sender<Option<BTreeSet<String>>>,
    stop: Shutdown,
    timeout: Option<u32>,
) {
    // Metadata only: a Namespace's spec and status are of no use here.
    let api: Api<PartialObjectMeta<Namespace>> = Api::all(client);
    let config = watcher::Config::default().labels(&format!("{API_LABEL}={ENABLED}"));
    let config = match timeout {
        Some(timeout) => config.timeout(timeout),
        None => config,
    };
    let events = watcher(api, config).backoff(crate::cache::WatchBackoff::default());
    let mut events = std::pin::pin!(events);
    let stopped = stop.wait();
    let mut stopped = std::pin::pin!(stopped);
    let mut listing: Option<BTreeSet<String>> = None;
    loop {
        let event = tokio::select! {
            () = &mut stopped => return,
            event = events.next() => event,
        };
        match event {
            None => return,
            Some(Ok(watcher::Event::Init)) => listing = Some(BTreeSet::new()),
            Some(Ok(watcher::Event::InitApply(ns))) => {
                listing.get_or_insert_default().insert(ns.name_any());
            }
            Some(Ok(watcher::Event::InitDone)) => {
                let names = listing.take().unwrap_or_default();
                tracing::info!(
                    namespaces = ?names,
                    "namespaces labelled {API_LABEL}={ENABLED} listed"
                );
                tx.send_replace(Some(names));
            }
            Some(Ok(watcher::Event::Apply(ns))) => {
                let name = ns.name_any();
                tx.send_if_modified(|names| match names {
                    Some(names) => names.insert(name),
                    None => false,
                });
            }
            Some(Ok(watcher::Event::Delete(ns))) => {
                let name = ns.name_any();
                tx.send_if_modified(|names| match names {
                    Some(names) => names.remove(&name),
                    None => false,
                });
            }
            Some(Err(err)) => tracing::warn!(
                error = %crate::error_chain(&err),
                "the watch of namespaces labelled {API_LABEL}={ENABLED} failed; retrying \
                 (the operator needs list and watch on namespaces)"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labelled(names: Option<&[&str]>) -> Served {
        let names = names.map(|n| n.iter().map(|s| (*s).to_owned()).collect());
        let (_tx, labelled) = watch::channel(names);
        Served::Labelled {
            labelled,
            excluded: NEVER_BY_LABEL
                .iter()
                .chain(&["mutants"])
                .map(|s| (*s).to_owned())
                .collect(),
        }
    }

    #[test]
    fn named_namespaces_are_served_whatever_they_are() {
        // R33: the configuration may name any namespace, kube-system included.
        let served = Served::Named(vec!["boards".into(), "kube-system".into()]);
        assert_eq!(served.serves("boards"), Serves::Yes);
        assert_eq!(served.serves("kube-system"), Serves::Yes);
        assert_eq!(served.serves("default"), Serves::No);
        assert!(
            served
                .why_not("default")
                .contains("[\"boards\", \"kube-system\"]")
        );
    }

    #[test]
    fn only_labelled_namespaces_are_served_never_the_excluded() {
        // R33
        let served = labelled(Some(&["boards", "kube-system", "mutants"]));
        assert_eq!(served.serves("boards"), Serves::Yes);
        assert_eq!(served.serves("default"), Serves::No);
        assert_eq!(served.serves("kube-system"), Serves::No);
        assert_eq!(served.serves("mutants"), Serves::No);
        assert!(
            served
                .why_not("default")
                .contains("kubectl label namespace default mutantops.neiam.org/api=enabled"),
            "{}",
            served.why_not("default")
        );
        assert!(
            served
                .why_not("kube-system")
                .contains("only when MUTANT_API_NAMESPACES names it")
        );
        assert_eq!(labelled(None).serves("boards"), Serves::Starting);
    }
}
