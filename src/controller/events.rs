//! Events on owners (R26), published as `events.k8s.io/v1` Events.
//!
//! Not kube-runtime's `Recorder`: it keeps every Event it published for six minutes, to count
//! repeats into a series, and scans that whole map on every publish. At scale that was
//! thousands of full Event objects held after a convergence (one `VariantCreated` per
//! Deployment) and a quadratic scan while converging. The operator publishes each Event once
//! per change already (see `announce`), so it has no repeats to count and keeps nothing.

use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::{
    api::{core::v1::ObjectReference, events::v1::Event},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use kube::{Api, Client, api::PostParams};

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

/// Publishes Events; cheap to share, holds no Events.
pub struct Events {
    client: Client,
    /// This replica's name (`POD_NAME`), the Events' `reportingInstance`.
    instance: String,
    /// Makes the names of Events published within one nanosecond differ.
    sequence: AtomicU64,
}

impl Events {
    /// A publisher for this replica (`instance`: `POD_NAME`, if set).
    pub fn new(client: Client, instance: Option<String>) -> Self {
        Events {
            client,
            instance: instance.unwrap_or_else(|| CONTROLLER.to_string()),
            sequence: AtomicU64::new(0),
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
            Ok(_) => {}
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
mod tests {
    use super::*;

    fn reference(namespace: Option<&str>) -> ObjectReference {
        ObjectReference {
            api_version: Some("neiam.org/v1".into()),
            kind: Some("Mutation".into()),
            name: Some("web".into()),
            namespace: namespace.map(Into::into),
            uid: Some("uid-1".into()),
            ..ObjectReference::default()
        }
    }

    // R26
    #[test]
    fn an_event_regards_its_owner_and_names_itself_apart() {
        let now = Timestamp::from_second(1_800_000_000).unwrap_or(Timestamp::UNIX_EPOCH);
        let related = ObjectReference {
            name: Some("web-beta".into()),
            ..ObjectReference::default()
        };
        let e = event(
            reference(Some("team")),
            EventType::Warning,
            "VariantInvalid",
            "é".repeat(600),
            Some(related.clone()),
            "pod-1",
            now,
            1,
        );
        assert_eq!(e.metadata.namespace.as_deref(), Some("team"));
        assert!(
            e.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("web."))
        );
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert_eq!(e.reason.as_deref(), Some("VariantInvalid"));
        assert_eq!(e.reporting_controller.as_deref(), Some("mutantops"));
        assert_eq!(e.reporting_instance.as_deref(), Some("pod-1"));
        assert_eq!(e.regarding, Some(reference(Some("team"))));
        assert_eq!(e.related, Some(related));
        assert_eq!(e.event_time, Some(MicroTime(now)));
        let note = e.note.unwrap_or_default();
        assert!(
            note.len() <= MAX_NOTE && note.chars().all(|c| c == 'é'),
            "{note}"
        );
        // two Events in the same nanosecond get different names
        let other = event(
            reference(None),
            EventType::Normal,
            "VariantCreated",
            String::new(),
            None,
            "pod-1",
            now,
            2,
        );
        assert_ne!(other.metadata.name, e.metadata.name);
        assert_eq!(other.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(other.type_.as_deref(), Some("Normal"));
    }
}
