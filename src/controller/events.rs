//! Events on owners (R26), published as `events.k8s.io/v1` Events.
//!
//! Not kube-runtime's `Recorder`: it keeps every Event it published for six minutes, to count
//! repeats into a series, and scans that whole map on every publish. At scale that was
//! thousands of full Event objects held after a convergence (one `VariantCreated` per
//! Deployment) and a quadratic scan while converging. The operator publishes each Event once
//! per change already (see `announce`); what repeats is a change made again and again (a
//! board adding and removing its variant in a loop, R34). Those repeats are kept
//! as a series, the Kubernetes way: the first is an Event, a repeat within [`SERIES_WINDOW`]
//! only counts in memory (a hash and a count per series, at most [`MAX_SERIES`]), and the
//! Event's `series` (count, last seen) is written at most once per [`SERIES_EVERY`], by the
//! repeat that finds it older or by [`Events::flush`]. So a loop costs one Event and a patch
//! every few seconds, not an Event per change.

use std::{
    collections::HashMap,
    hash::{Hash as _, Hasher as _},
    sync::{
        Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use tokio::time::Instant;

use k8s_openapi::{
    api::{core::v1::ObjectReference, events::v1::Event},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
};

/// The `reportingController` of every Event.
const CONTROLLER: &str = "mutantops";
/// The longest `note` the API server accepts, in bytes.
const MAX_NOTE: usize = 1024;

/// Normal or Warning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// Something happened as it should.
    Normal,
    /// Something the user should look at.
    Warning,
}

/// How long after its last repeat an Event still counts the next one as part of its series.
pub const SERIES_WINDOW: Duration = Duration::from_secs(10 * 60);
/// How often, at most, a series' count is written to its Event.
pub const SERIES_EVERY: Duration = Duration::from_secs(10);
/// The most series remembered at once; past it the one quiet longest is forgotten.
pub const MAX_SERIES: usize = 512;

/// One Event that has repeats: where it is and how many times it happened.
#[derive(Debug)]
struct Series {
    namespace: String,
    name: String,
    /// Times it happened, the first included.
    count: i32,
    /// The count its Event says.
    written: i32,
    last_seen: Timestamp,
    last_seen_at: Instant,
    written_at: Instant,
}

/// What [`Events::publish`] does with an Event.
#[derive(Debug, PartialEq)]
enum Decision {
    /// Create it: the first of its kind in the window.
    Create,
    /// A repeat: write the series' count to Event `namespace/name`.
    Count {
        namespace: String,
        name: String,
        count: i32,
        last_seen: Timestamp,
    },
    /// A repeat, counted; its Event is written later.
    Hold,
}

/// Publishes Events; cheap to share, holds only the series of repeated ones.
pub struct Events {
    client: Client,
    /// This replica's name (`POD_NAME`), the Events' `reportingInstance`.
    instance: String,
    /// Makes the names of Events published within one nanosecond differ.
    sequence: AtomicU64,
    /// The series, by the hash of what makes two Events the same.
    series: Mutex<HashMap<u64, Series>>,
}

/// What makes two Events the same occurrence again: what they regard and relate to, why, and
/// what they say.
fn same_as(
    regarding: &ObjectReference,
    type_: EventType,
    reason: &str,
    note: &str,
    related: Option<&ObjectReference>,
) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (
        &regarding.namespace,
        &regarding.name,
        &regarding.uid,
        type_ == EventType::Warning,
        reason,
        note,
    )
        .hash(&mut hasher);
    related.map(|r| (&r.kind, &r.name)).hash(&mut hasher);
    hasher.finish()
}

/// Counts one occurrence of `key` at `now` (`at`, the same instant on the monotonic clock) and
/// says what to write (pure but for the map).
fn decide(series: &mut HashMap<u64, Series>, key: u64, now: Timestamp, at: Instant) -> Decision {
    match series.get_mut(&key) {
        Some(s) if at.duration_since(s.last_seen_at) < SERIES_WINDOW => {
            s.count = s.count.saturating_add(1);
            s.last_seen = now;
            s.last_seen_at = at;
            if at.duration_since(s.written_at) >= SERIES_EVERY {
                s.written = s.count;
                s.written_at = at;
                Decision::Count {
                    namespace: s.namespace.clone(),
                    name: s.name.clone(),
                    count: s.count,
                    last_seen: now,
                }
            } else {
                Decision::Hold
            }
        }
        _ => Decision::Create,
    }
}

/// Remembers the Event just created for `key`, forgetting series quiet for the window and,
/// past [`MAX_SERIES`], the one quiet longest.
fn remember(series: &mut HashMap<u64, Series>, key: u64, event: &Event, at: Instant) {
    series.retain(|_, s| at.duration_since(s.last_seen_at) < SERIES_WINDOW);
    if series.len() >= MAX_SERIES
        && let Some(oldest) = series
            .iter()
            .min_by_key(|(_, s)| s.last_seen_at)
            .map(|(k, _)| *k)
    {
        series.remove(&oldest);
    }
    let (Some(namespace), Some(name)) = (&event.metadata.namespace, &event.metadata.name) else {
        return;
    };
    series.insert(
        key,
        Series {
            namespace: namespace.clone(),
            name: name.clone(),
            count: 1,
            written: 1,
            last_seen: event
                .event_time
                .as_ref()
                .map_or(Timestamp::UNIX_EPOCH, |t| t.0),
            last_seen_at: at,
            written_at: at,
        },
    );
}

impl Events {
    /// A publisher for this replica (`instance`: `POD_NAME`, if set).
    pub fn new(client: Client, instance: Option<String>) -> Self {
        Events {
            client,
            instance: instance.unwrap_or_else(|| CONTROLLER.to_string()),
            sequence: AtomicU64::new(0),
            series: Mutex::new(HashMap::new()),
        }
    }

    fn series(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Series>> {
        self.series.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes the count of every series whose Event is behind, if [`SERIES_EVERY`] has passed
    /// since its last write: the repeats of a loop that has stopped are not left uncounted.
    pub async fn flush(&self) {
        let at = Instant::now();
        let due: Vec<(String, String, i32, Timestamp)> = self
            .series()
            .values_mut()
            .filter(|s| s.count > s.written && at.duration_since(s.written_at) >= SERIES_EVERY)
            .map(|s| {
                s.written = s.count;
                s.written_at = at;
                (s.namespace.clone(), s.name.clone(), s.count, s.last_seen)
            })
            .collect();
        for (namespace, name, count, last_seen) in due {
            self.write_series(&namespace, &name, count, last_seen).await;
        }
    }

    /// Writes `count` and `last_seen` to the `series` of Event `namespace/name`.
    async fn write_series(&self, namespace: &str, name: &str, count: i32, last_seen: Timestamp) {
        let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        let patch = serde_json::json!({
            "series": { "count": count, "lastObservedTime": MicroTime(last_seen) }
        });
        if let Err(err) = api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::debug!(event = name, error = %crate::error_chain(&err), "Event series not written");
        }
    }

    /// Publishes an Event about `regarding` (`related`: a second object it concerns, such as
    /// a variant's Deployment). A failure is logged; it never fails a reconcile.
    pub async fn publish(
        &self,
        regarding: ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
        related: Option<ObjectReference>,
    ) {
        let now = Timestamp::now();
        let key = same_as(&regarding, type_, reason, &note, related.as_ref());
        let at = Instant::now();
        let decision = decide(&mut self.series(), key, now, at);
        match decision {
            Decision::Create => {}
            Decision::Hold => return,
            Decision::Count {
                namespace,
                name,
                count,
                last_seen,
            } => {
                self.write_series(&namespace, &name, count, last_seen).await;
                return;
            }
        }
        let sequence = self.sequence.fetch_add(1, Ordering::Relaxed);
        let event = event(
            regarding,
            type_,
            reason,
            note,
            related,
            &self.instance,
            now,
            sequence,
        );
        let namespace = event.metadata.namespace.clone().unwrap_or_default();
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        match api.create(&PostParams::default(), &event).await {
            Ok(_) => remember(&mut self.series(), key, &event, at),
            // The namespace is being deleted: nobody will read the Event.
            Err(err) if crate::expected_api_error(&err) => {
                tracing::debug!(reason, error = %crate::error_chain(&err), "Event not published");
            }
            Err(err) => {
                tracing::warn!(reason, error = %crate::error_chain(&err), "could not publish an Event");
            }
        }
    }
}

/// The Event object (pure, for tests): named after the object it regards and the time, in
/// its namespace (`default` for a cluster-scoped one), the note cut to what the server takes.
#[allow(
    clippy::too_many_arguments,
    reason = "the fields of one Event, each used once"
)]
fn event(
    regarding: ObjectReference,
    type_: EventType,
    reason: &str,
    note: String,
    related: Option<ObjectReference>,
    instance: &str,
    now: Timestamp,
    sequence: u64,
) -> Event {
    let namespace = regarding
        .namespace
        .clone()
        .unwrap_or_else(|| "default".to_string());
    let stamp = now.as_nanosecond().unsigned_abs();
    let name = format!(
        "{}.{stamp:x}{:03x}",
        regarding.name.as_deref().unwrap_or("mutantops"),
        sequence % 0x1000
    );
    Event {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(namespace),
            ..ObjectMeta::default()
        },
        action: Some("Reconcile".to_string()),
        reason: Some(reason.to_string()),
        note: Some(truncate(note, MAX_NOTE)),
        type_: Some(
            match type_ {
                EventType::Normal => "Normal",
                EventType::Warning => "Warning",
            }
            .to_string(),
        ),
        event_time: Some(MicroTime(now)),
        reporting_controller: Some(CONTROLLER.to_string()),
        reporting_instance: Some(instance.to_string()),
        regarding: Some(regarding),
        related,
        ..Event::default()
    }
}

/// `text` cut to at most `max` bytes, at a character boundary.
fn truncate(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut cut = max;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    text
}

#[cfg(test)]
mod tests;
