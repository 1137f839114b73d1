use super::*;
use crate::crd::DeviceSummary;

// R53: screens are reserved against MUTANT_SCREEN_CACHE_MIB at once, counting what this
// replica wrote before its cache shows it, and what the cache holds of the others.
#[test]
fn screens_are_reserved_within_the_bound() {
    let memory = ScreenMemory::default();
    let none = || std::iter::empty::<(String, usize)>();
    assert_eq!(memory.reserve("ns/a", 600, none(), 1000), Ok(()));
    assert_eq!(memory.reserve("ns/b", 600, none(), 1000), Err(600));
    // The same Secret replaced: its old size does not count.
    assert_eq!(memory.reserve("ns/a", 900, none(), 1000), Ok(()));
    memory.release("ns/a");
    let cached = || [("ns/c".to_owned(), 300), ("ns/a".to_owned(), 900)].into_iter();
    assert_eq!(memory.reserve("ns/b", 600, cached(), 1000), Err(1200));
    assert_eq!(memory.reserve("ns/a", 600, cached(), 1000), Ok(()));
    assert_eq!(memory.reserve("ns/b", 100, cached(), 1000), Ok(()));
}

// R42: a reconcile that starts before the cache has the status the last one wrote works
// from the written one (the device list, another writer's, from the cache); once the cache
// has moved on, or after a minute, from the cache
#[test]
fn a_written_status_stands_in_until_the_cache_moves_on() {
    let written = WrittenStatuses::default();
    let t0 = Instant::now();
    let status = |summary: &str, devices: i32| OwnerStatus {
        summary: summary.to_owned(),
        device_summary: Some(Box::new(DeviceSummary {
            total: devices,
            ..DeviceSummary::default()
        })),
        ..OwnerStatus::default()
    };
    let at = |name, version| At {
        namespace: "ns",
        name,
        version: Some(version),
    };
    let still = |_: &str, _: &str, _: &str| false;
    assert_eq!(
        written.previous("u", Some("1"), status("cached", 0), t0, still),
        status("cached", 0)
    );
    written.wrote("u", at("a", "1"), &status("written", 0), t0, still);
    let seen = written.previous("u", Some("1"), status("cached", 2), t0, still);
    assert_eq!(seen, status("written", 2));
    // another owner's is its own
    assert_eq!(
        written.previous("v", Some("1"), status("cached", 0), t0, still),
        status("cached", 0)
    );
    // after a minute with the cache where it was, the cache is taken as it is
    let late = t0 + WRITTEN_STANDS;
    assert_eq!(
        written.previous("u", Some("1"), status("cached", 0), late, still),
        status("cached", 0)
    );
    // the cache moved on: forgotten
    written.wrote("u", at("a", "1"), &status("written", 0), t0, still);
    assert_eq!(
        written.previous("u", Some("2"), status("newer", 0), t0, still),
        status("newer", 0)
    );
    assert_eq!(
        written.previous("u", Some("1"), status("cached", 0), t0, still),
        status("cached", 0)
    );
}

// R42: a written status is dropped as soon as any reconcile sees that the cache moved on from
// its owner's version (or lost the owner), not only at its own owner's next reconcile
#[test]
fn written_statuses_go_once_the_cache_has_them() {
    let written = WrittenStatuses::default();
    let t0 = Instant::now();
    let at = |name, version| At {
        namespace: "ns",
        name,
        version: Some(version),
    };
    let still = |_: &str, _: &str, _: &str| false;
    for (uid, name) in [("u1", "a"), ("u2", "b"), ("u3", "c")] {
        written.wrote(uid, at(name, "7"), &OwnerStatus::default(), t0, still);
    }
    assert_eq!(written.len(), 3);
    // the cache now holds "a" at a newer version and has lost "c": only "b" stands
    let moved = |ns: &str, name: &str, from: &str| {
        assert_eq!(ns, "ns");
        !(name == "b" && from == "7")
    };
    written.wrote("u4", at("d", "1"), &OwnerStatus::default(), t0, moved);
    assert_eq!(written.len(), 2, "b and the new one");
    let seen = written.previous("u2", Some("7"), OwnerStatus::default(), t0, moved);
    assert_eq!(seen, OwnerStatus::default());
    assert_eq!(
        written.len(),
        1,
        "b is kept while the cache still holds version 7"
    );
    let everything_moved = |_: &str, _: &str, _: &str| true;
    written.previous("u9", None, OwnerStatus::default(), t0, everything_moved);
    assert_eq!(written.len(), 0);
}

// R42: a variant due by the wall clock (which may have jumped
// forward on a board without a real-time clock) is expired only once this process has
// watched it be due for the whole watch, by its own monotonic clock; one that stops being
// due is watched anew
#[test]
fn expiry_waits_for_the_monotonic_watch_and_the_hourly_cap() {
    let memory = ExpiryMemory::default();
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    let watch = Duration::from_secs(600);
    let due = vec!["a".to_owned()];
    assert_eq!(
        memory.watched("ns", "m", &due, watch, at(0)),
        (vec![], Some(watch))
    );
    assert_eq!(
        memory.watched("ns", "m", &due, watch, at(599)),
        (vec![], Some(Duration::from_secs(1)))
    );
    // the device came back: forgotten, and watched anew when due again
    assert_eq!(
        memory.watched("ns", "m", &[], watch, at(600)),
        (vec![], None)
    );
    let (ready, _) = memory.watched("ns", "m", &due, watch, at(601));
    assert!(ready.is_empty());
    let (ready, wait) = memory.watched("ns", "m", &due, watch, at(1201));
    assert_eq!((ready, wait), (due.clone(), None));
    // another Mutation's watch is its own
    assert_eq!(
        memory.watched("ns", "other", &due, watch, at(1201)).0,
        Vec::<String>::new()
    );
    // at most two an hour
    assert!(memory.take(2, at(0)));
    assert!(memory.take(2, at(10)));
    assert!(!memory.take(2, at(3599)));
    assert!(memory.take(2, at(3600)));
}
