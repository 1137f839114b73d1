//! Whole reconciles against a scripted API server ([`Server`]), no cluster: a [`Context`] over
//! the scripted client and test caches, one [`reconcile`] of a Mutation, and the exact list of
//! requests it made, in order, with the Events apart (which Events, by reason, in order; not
//! where they fall among the writes), and the [`Action`] it returned.
//!
//! The rooms, by feature: `created` (a new Mutation, a variant added), `sleep` (a variant idled
//! and woken), `rollout` (a step, its pause and its resume), `devices` (a device gone, its
//! variant expired).

use std::{collections::BTreeMap, sync::Arc};

use k8s_openapi::{ByteString, api::core::v1::Secret, jiff::Timestamp};
use kube::runtime::{controller::Action, watcher};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::super::{
    announce,
    context::{self, Context},
    events, hold,
    tests::scripted::{Asked, Reply, Route, Server, on},
};
use super::reconcile;
use crate::{
    cache::Writers,
    crd::{DeviceState, DeviceStatus, Mutation, OwnerKind, OwnerStatus},
    metrics::Metrics,
    store::Store,
    variant::{self, Base, FIELD_MANAGER, ObservedDeployment, Owner, Planned, devices::Registry},
};

mod created;
mod devices;
mod rollout;
mod sleep;

/// The Mutation's name, namespace and uid in every test.
const NAME: &str = "snap";
const NAMESPACE: &str = "team";
const UID: &str = "uid-snap";

/// The collections the requests go to.
const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/team/deployments";
const SECRETS: &str = "/api/v1/namespaces/team/secrets";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/team/events";
const MUTATION: &str = "/apis/neiam.org/v1/namespaces/team/mutations/snap";
const REVISIONS: &str = "/apis/apps/v1/namespaces/team/controllerrevisions";

/// The content types of the requests.
const JSON: &str = "[application/json]";
const APPLY: &str = "[application/apply-patch+yaml]";
const MERGE: &str = "[application/merge-patch+json]";

/// The base every test's Mutation runs, with `image`.
fn base(image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": image}]}
            }
        }
    })
}

/// Mutation `snap` in `team` as the cache holds it: `spec` (its base `web:1` unless it has
/// one), generation 1, no status yet.
fn mutation(spec: Value) -> Mutation {
    let mut spec = spec;
    if spec.get("deployment").is_none() {
        spec["deployment"] = base("web:1");
    }
    let m = json!({
        "apiVersion": "neiam.org/v1", "kind": "Mutation",
        "metadata": {
            "name": NAME, "namespace": NAMESPACE, "uid": UID,
            "resourceVersion": "10", "generation": 1,
        },
        "spec": spec,
    });
    serde_json::from_value(m).unwrap_or_else(|e| panic!("a Mutation: {e}"))
}

/// The owner of the Mutation's generated objects.
fn owner() -> Owner {
    Owner {
        kind: OwnerKind::Mutation,
        name: NAME.into(),
        namespace: NAMESPACE.into(),
        uid: UID.into(),
    }
}

/// The Deployments planned for `m`'s variants, by the code under test's own plan: what a
/// reconcile applied before, for the cache of a test to hold.
fn planned(m: &Mutation) -> Vec<Value> {
    let base = Base::parse(&m.spec.deployment.value()).unwrap_or_else(|e| panic!("{e}"));
    variant::plan(&base, &owner(), &m.spec.variants)
        .into_iter()
        .filter_map(|p| match p {
            Planned::Apply { object, .. } => Some(object),
            _ => None,
        })
        .collect()
}

/// Deployment `object` as applied and observed by the Deployment controller: generation 1,
/// every replica of its spec ready and updated.
fn applied(object: &Value) -> ObservedDeployment {
    let mut d = object.clone();
    let replicas = d["spec"]["replicas"].clone();
    let name = d["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    d["metadata"]["uid"] = json!(format!("uid-of-{name}"));
    d["metadata"]["resourceVersion"] = json!("5");
    d["metadata"]["generation"] = json!(1);
    d["metadata"]["managedFields"] = json!([{"manager": FIELD_MANAGER, "operation": "Apply"}]);
    d["status"] = json!({
        "observedGeneration": 1, "replicas": replicas, "updatedReplicas": replicas,
        "readyReplicas": replicas, "availableReplicas": replicas,
    });
    serde_json::from_value(d).unwrap_or_else(|e| panic!("a Deployment: {e}"))
}

/// One reconcile's world: the scripted server, the context over it, and the caches' writers.
struct Scene {
    server: Server,
    ctx: Arc<Context>,
    writers: Writers,
    /// The resourceVersion of the Mutation as the watch last delivered it.
    version: u32,
    /// Kept so that the leader flag stays set.
    _leader: watch::Sender<bool>,
}

impl Scene {
    /// A context over a server answering `routes`, and empty caches. Events are always
    /// accepted.
    fn new(routes: Vec<Route>) -> Scene {
        let (server, client) = Server::routed(Vec::new());
        let (caches, writers) = crate::cache::for_tests();
        let (leader, is_leader) = watch::channel(true);
        let ctx = Context {
            store: Store::new(client.clone()),
            events: events::Events::new(client.clone(), Some("mutantops-0".into())),
            client,
            secrets: Some(caches.secrets.clone()),
            caches,
            announced: announce::Announced::default(),
            metrics: Arc::new(Metrics::new()),
            leader: is_leader,
            pod_security: variant::PodSecurity::default(),
            expiry: context::ExpiryMemory::default(),
            written: context::WrittenStatuses::default(),
            revisions: context::RevisionMemory::default(),
            screens: context::ScreenMemory::default(),
            screen_cache_bytes: 8 << 20,
            progress: hold::ProgressHold::default(),
        };
        let scene = Scene {
            server,
            ctx: Arc::new(ctx),
            writers,
            version: 10,
            _leader: leader,
        };
        scene.script(routes);
        scene
    }

    /// Replaces the answers not used yet with `routes` (and Events always accepted).
    fn script(&self, routes: Vec<Route>) {
        self.server.clear();
        self.server.then(routes);
        let events = on("POST", EVENTS, Reply::Echo(201)).every();
        self.server.then(vec![events]);
    }

    /// `m` after `edit`, at the next resourceVersion, as the watch delivers it; in the cache
    /// too.
    fn edited(&mut self, m: &Mutation, edit: impl FnOnce(&mut Mutation)) -> Mutation {
        let mut m = m.clone();
        edit(&mut m);
        self.version += 1;
        m.metadata.resource_version = Some(self.version.to_string());
        self.writers.mutation(watcher::Event::Apply(m.clone()));
        m
    }

    /// `m` with `status` (and the device list `m` had: another writer's), as the watch
    /// delivers it after a write of its status.
    fn moved_on(&mut self, m: &Mutation, status: OwnerStatus) -> Mutation {
        self.edited(m, |m| {
            let listed = m.status.take().unwrap_or_default();
            m.status = Some(OwnerStatus {
                devices: listed.devices,
                device_summary: listed.device_summary,
                ..status
            });
        })
    }

    /// What ran before a test: `m` reconciled until a reconcile writes nothing (four times at
    /// most), every write answered as the API server would, each Deployment written then
    /// cached as applied and ready, each status written delivered; `m` as it then is.
    async fn settle(&mut self, m: &Mutation) -> Mutation {
        let mut m = m.clone();
        for _ in 0..4 {
            self.script(vec![
                on("POST", DEPLOYMENTS, Reply::Echo(201)).every(),
                on("PATCH", format!("{DEPLOYMENTS}/*"), Reply::Echo(200)).every(),
                on("POST", REVISIONS, Reply::Echo(201)).every(),
                on("PATCH", format!("{MUTATION}/status"), stored(&m)).every(),
            ]);
            let (_, asked) = self.reconcile(&m).await;
            if asked.writes.is_empty() {
                self.script(Vec::new());
                return m;
            }
            let deployment = |line: &str| {
                line.starts_with(&format!("POST {DEPLOYMENTS}?"))
                    || line.starts_with(&format!("PATCH {DEPLOYMENTS}/"))
            };
            for a in &asked.writes {
                if deployment(&a.line) {
                    self.cache(applied(&a.body));
                }
            }
            if asked.writes.iter().any(|a| a.line == status_applied()) {
                m = self.moved_on(&m, written(&asked, &status_applied()));
            }
        }
        panic!("still writing after four reconciles")
    }

    /// [`Scene::new`] with `m` in the Mutation cache and its token Secret in the Secret
    /// cache, as after its first reconcile.
    fn of(m: &Mutation, routes: Vec<Route>) -> Scene {
        let mut scene = Scene::new(routes);
        scene.writers.mutation(watcher::Event::Apply(m.clone()));
        let token = [("token".to_owned(), ByteString(b"0123".to_vec()))];
        let name = variant::secret_name(NAME);
        scene.writers.secret(secret(&name, token.into()));
        scene
    }

    /// `m` with `devices` listed in its status (and their summary), at the next
    /// resourceVersion, as the watch delivers it after the devices' writer wrote them; in the
    /// cache too.
    fn heard(&mut self, m: &Mutation, devices: Vec<DeviceStatus>) -> Mutation {
        self.edited(m, |m| *m = listing(m, devices))
    }

    /// Puts `d` in the cache of the Mutations' Deployments.
    fn cache(&mut self, d: ObservedDeployment) {
        let event = watcher::Event::Apply(d);
        self.writers.deployment(OwnerKind::Mutation, event);
    }

    /// Puts the devices Secret of `registry` in the Secret cache.
    fn registry(&mut self, registry: &Registry) {
        let name = variant::devices::devices_secret_name(NAME);
        self.writers.secret(secret(&name, registry.to_data()));
    }

    /// The value of the metrics' `series`.
    fn counted(&self, series: &str) -> u64 {
        let metrics = self.ctx.metrics.encode_text();
        let line = metrics.lines().find_map(|l| l.strip_prefix(series));
        let value = line.and_then(|v| v.trim().parse().ok());
        value.unwrap_or_else(|| panic!("no {series} in {metrics}"))
    }

    /// One reconcile of `m`: what it returned, and the requests it made, the Events apart.
    async fn reconcile(&self, m: &Mutation) -> (Action, Requests) {
        let action = reconcile::<Mutation>(Arc::new(m.clone()), self.ctx.clone())
            .await
            .unwrap_or_else(|e| panic!("the reconcile failed: {e}"));
        (action, Requests::of(self.server.take()))
    }
}

/// The status a reconcile wrote, from the body of its request `line`.
fn written(asked: &Requests, line: &str) -> OwnerStatus {
    let body = asked.body(line);
    serde_json::from_value(body["status"].clone()).unwrap_or_else(|e| panic!("a status: {e}"))
}

/// A Secret of the Mutation's, named `name`, with `data`.
fn secret(name: &str, data: BTreeMap<String, ByteString>) -> Secret {
    Secret {
        metadata: owner().owned_metadata(name),
        data: Some(data),
        ..Secret::default()
    }
}

/// The requests of one reconcile: every one but the Events, in order, as `METHOD path?query
/// [content type]` with its body; the Events, in order, by reason and note.
#[derive(Debug)]
struct Requests {
    writes: Vec<Asked>,
    events: Vec<(String, String)>,
}

impl Requests {
    fn of(asked: Vec<Asked>) -> Requests {
        let event = format!("POST {EVENTS}? {JSON}");
        let (events, writes): (Vec<Asked>, Vec<Asked>) =
            asked.into_iter().partition(|a| a.line == event);
        let text = |v: &Value, key: &str| v[key].as_str().unwrap_or_default().to_owned();
        let events = events
            .iter()
            .map(|e| (text(&e.body, "reason"), text(&e.body, "note")))
            .collect();
        Requests { writes, events }
    }

    /// The requests but the Events, as lines.
    fn lines(&self) -> Vec<&str> {
        self.writes.iter().map(|a| a.line.as_str()).collect()
    }

    /// The Events' reasons.
    fn reasons(&self) -> Vec<&str> {
        self.events.iter().map(|(r, _)| r.as_str()).collect()
    }

    /// The body of the request whose line is `line`.
    fn body(&self, line: &str) -> &Value {
        let found = self.writes.iter().find(|a| a.line == line);
        &found
            .unwrap_or_else(|| panic!("no {line} in {self:#?}"))
            .body
    }
}

/// The query of an operator's POST (strict field validation) of Deployments.
fn created(collection: &str) -> String {
    format!("POST {collection}?fieldManager={FIELD_MANAGER}&fieldValidation=Strict {JSON}")
}

/// A server-side apply of Deployment `name`, forced, under the operator's field manager.
fn apply(name: &str) -> String {
    format!("PATCH {DEPLOYMENTS}/{name}?&force=true&fieldManager={FIELD_MANAGER} {APPLY}")
}

/// The server-side apply of the Mutation's status.
fn status_applied() -> String {
    format!("PATCH {MUTATION}/status?&force=true&fieldManager={FIELD_MANAGER} {APPLY}")
}

/// The answer to a write of the Mutation's status or spec: `m` as stored.
fn stored(m: &Mutation) -> Reply {
    let mut v = json!(m);
    v["metadata"]["resourceVersion"] = json!("11");
    Reply::Json(200, v)
}

/// When every device of the tests enrolled: long ago, at a fixed time.
const ENROLLED: &str = "2025-01-02T03:04:05Z";

/// The registry of devices `(id, variant)`, all enrolled at [`ENROLLED`], and of the variants
/// enrollment made, `made`.
fn registry(devices: &[(&str, &str)], made: &[&str]) -> Registry {
    let record = |(id, label): &(&str, &str)| {
        let record = variant::devices::DeviceRecord {
            hash: variant::devices::token_hash(id),
            variant: (*label).to_owned(),
            enrolled_at: ENROLLED.to_owned(),
        };
        ((*id).to_owned(), record)
    };
    Registry {
        devices: devices.iter().map(record).collect(),
        made: made.iter().map(|l| (*l).to_owned()).collect(),
    }
}

/// Device `id` of variant `label` as the status lists it: last heard `seen` seconds ago, in
/// `state`, with `poll` (its last poll and what is known of its polls), if any.
fn device(
    id: &str,
    label: &str,
    seen: i64,
    state: DeviceState,
    poll: Option<Value>,
) -> DeviceStatus {
    let mut d = json!({
        "id": id, "variant": label, "enrolledAt": ENROLLED,
        "lastSeen": rfc3339(ago(seen)), "state": state,
    });
    if let Some(poll) = poll {
        d["poll"] = poll;
    }
    serde_json::from_value(d).unwrap_or_else(|e| panic!("a device: {e}"))
}

/// `m` with `devices` listed in its status, and their summary.
fn listing(m: &Mutation, devices: Vec<DeviceStatus>) -> Mutation {
    let mut m = m.clone();
    let status = m.status.get_or_insert_default();
    status.device_summary = Some(Box::new(variant::devices::summary(&devices)));
    status.devices = devices;
    m
}

/// `t` as the status writes times.
fn rfc3339(t: Timestamp) -> String {
    variant::devices::rfc3339(t)
}

/// Now, less `seconds`.
fn ago(seconds: i64) -> Timestamp {
    let now = Timestamp::now().as_second();
    Timestamp::from_second(now - seconds).unwrap_or_else(|e| panic!("{e}"))
}
