//! Tests of the Events and their series (R26, R34).

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

// R26: a repeat within the window counts into the series of the first
// Event; its count is written at most once per SERIES_EVERY; after the window a repeat is
// a new Event; the map is bounded.
#[test]
fn repeats_count_into_a_series() {
    let start = Instant::now();
    let now = Timestamp::from_second(1_800_000_000).unwrap_or(Timestamp::UNIX_EPOCH);
    let mut series = HashMap::new();
    let key = same_as(
        &reference(Some("team")),
        EventType::Normal,
        "VariantCreated",
        "x",
        None,
    );
    assert_ne!(
        key,
        same_as(
            &reference(Some("team")),
            EventType::Normal,
            "VariantCreated",
            "y",
            None
        )
    );
    assert_eq!(decide(&mut series, key, now, start), Decision::Create);
    let first = event(
        reference(Some("team")),
        EventType::Normal,
        "VariantCreated",
        "x".into(),
        None,
        "pod-1",
        now,
        0,
    );
    let name = first.metadata.name.clone().unwrap_or_default();
    remember(&mut series, key, &first, start);
    // Repeats within SERIES_EVERY are held; the first one after it writes the count.
    assert_eq!(
        decide(&mut series, key, now, start + Duration::from_secs(1)),
        Decision::Hold
    );
    assert_eq!(
        decide(&mut series, key, now, start + Duration::from_secs(2)),
        Decision::Hold
    );
    assert_eq!(
        decide(&mut series, key, now, start + SERIES_EVERY),
        Decision::Count {
            namespace: "team".into(),
            name,
            count: 4,
            last_seen: now,
        }
    );
    // Quiet for the window: the next one starts a new Event.
    let later = start + SERIES_EVERY + SERIES_WINDOW;
    assert_eq!(decide(&mut series, key, now, later), Decision::Create);
    // Bounded: MAX_SERIES more keys leave MAX_SERIES.
    for k in 0..=MAX_SERIES as u64 {
        remember(&mut series, k + 1000, &first, later);
    }
    assert_eq!(series.len(), MAX_SERIES);
}
