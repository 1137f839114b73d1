//! Unit tests of how a batch of edits is applied: variants (R22), a devices registry (R39).

use super::*;
use crate::store::budget::{WRITE_BURST, WRITES_PER_SECOND};
use crate::store::targets::{Devices, DevicesSecret, Variants};
use crate::{
    crd::{Mutation, Variant, fixtures},
    http::overdue::stalling_request,
    variant::devices::{DeviceRecord, Registry},
};

mod copies;

fn add(label: &'static str) -> Change<Variants> {
    Box::new(move |m: &Mutation| {
        if m.spec.variants.iter().any(|v| v.label == label) {
            return Err(ApiError::conflict(format!(
                "variant {label:?} already exists"
            )));
        }
        let mut variants = m.spec.variants.clone();
        variants.push(Variant {
            label: label.into(),
            ..Variant::default()
        });
        Ok(variants)
    })
}

/// The store's own check of a Mutation: its size bound.
fn fits(before: &Vec<Variant>, after: &Mutation) -> Result<(), ApiError> {
    crate::store::size::mutation_fits("mutation ns/m", before, &after.spec.variants, after)
}

pub(super) fn pending<T: Target>(
    change: Change<T>,
    claim: Claim,
) -> (Pending<T>, oneshot::Receiver<Answer<T>>) {
    let (answer, answered) = oneshot::channel();
    (
        Pending {
            change,
            claim,
            answer,
            gather: None,
        },
        answered,
    )
}

fn labels(variants: &[Variant]) -> Vec<&str> {
    variants.iter().map(|v| v.label.as_str()).collect()
}

#[test]
fn edits_apply_in_order_and_a_refused_one_changes_nothing_of_the_others() {
    // R22: a label added twice at once is taken once; the rest all land.
    let current = fixtures::mutation("web", vec![]);
    let (mut batch, _answers): (Vec<_>, Vec<_>) = [add("a"), add("a"), add("b")]
        .into_iter()
        .map(|c| pending(c, overdue::claim()))
        .unzip();
    let (variants, results) = apply::<Variants>(|_, _| Ok(()), fits, &current, &mut batch);
    assert_eq!(labels(&variants), ["a", "b"]);
    assert_eq!(batch.len(), 3);
    let codes: Vec<_> = results
        .iter()
        .map(|r| r.as_ref().err().map(|e| e.0.as_u16()))
        .collect();
    assert_eq!(codes, [None, Some(409), None]);
}

#[test]
fn answers_carry_each_edits_own_result() {
    let current = fixtures::mutation("web", vec![]);
    let (mut batch, answers): (Vec<_>, Vec<_>) = [add("a"), add("a")]
        .into_iter()
        .map(|c| pending(c, overdue::claim()))
        .unzip();
    let (variants, results) = apply::<Variants>(|_, _| Ok(()), fits, &current, &mut batch);
    let mut written = current.clone();
    written.spec.variants = variants;
    answer::<Variants>(batch, results, written);
    let mut answers = answers.into_iter();
    let first = answers.next().unwrap().try_recv().unwrap().unwrap();
    assert_eq!(labels(&first.spec.variants), ["a"]);
    let second = answers.next().unwrap().try_recv().unwrap().unwrap_err();
    assert_eq!(second.0, StatusCode::CONFLICT);
}

#[tokio::test(start_paused = true)]
async fn an_edit_whose_request_was_told_nothing_changed_is_left_out() {
    // R34: a request cut off before its edit was sent was answered "nothing was
    // changed"; the writer must not make its change after that, and the others are applied
    // without it (the edit after it sees the Mutation as if it never came).
    let (cut, rx) = stalling_request(Duration::from_secs(1));
    assert!(cut.await.is_err());
    let late = rx.await.unwrap();
    let current = fixtures::mutation("web", vec![]);
    let (one, _a) = pending(add("a"), late);
    let (two, _b) = pending(add("a"), overdue::claim());
    let mut batch = vec![one, two];
    let (variants, results) = apply::<Variants>(|_, _| Ok(()), fits, &current, &mut batch);
    assert_eq!(labels(&variants), ["a"]);
    assert_eq!(batch.len(), 1, "the edit told nothing changed is dropped");
    assert!(results[0].is_ok(), "{results:?}");
}

#[tokio::test(start_paused = true)]
async fn an_edit_that_changes_nothing_is_not_a_write() {
    // Removing what is not there: the request's outcome stays "nothing was changed".
    let (cut, rx) = stalling_request(Duration::from_secs(1));
    let current = fixtures::mutation("web", vec![]);
    let ((), cut) = tokio::join!(
        async {
            let claim = rx.await.unwrap();
            let unchanged: Change<Variants> = Box::new(|m: &Mutation| Ok(m.spec.variants.clone()));
            let (p, _answer) = pending(unchanged, claim);
            let mut batch = vec![p];
            let (variants, results) = apply::<Variants>(|_, _| Ok(()), fits, &current, &mut batch);
            assert!(variants.is_empty() && results[0].is_ok());
        },
        cut
    );
    assert_eq!(
        cut.unwrap_err().outcome,
        overdue::Outcome::NothingWritten,
        "no write was claimed"
    );
}

fn enroll(id: &'static str) -> Change<DevicesSecret> {
    Box::new(move |d: &Devices| {
        let mut registry = d.registry.clone();
        if registry.devices.contains_key(id) {
            return Err(ApiError::conflict(format!(
                "device {id:?} is already enrolled"
            )));
        }
        let record = DeviceRecord {
            hash: [0; 32],
            variant: "v".into(),
            enrolled_at: "2026-12-05T00:00:00Z".into(),
        };
        registry.devices.insert(id.into(), record);
        Ok(registry)
    })
}

#[test]
fn enrollments_of_one_secret_are_applied_together_and_an_id_is_taken_once() {
    // R39: boards enrolling at once are written in one write; a second board with an id
    // already taken in the same batch is refused, the others land.
    let current = Devices {
        secret: None,
        registry: Registry::default(),
    };
    let (mut batch, _answers): (Vec<_>, Vec<_>) = [enroll("a"), enroll("b"), enroll("a")]
        .into_iter()
        .map(|c| pending(c, overdue::claim()))
        .unzip();
    let (registry, results) =
        apply::<DevicesSecret>(|_, _| Ok(()), |_, _| Ok(()), &current, &mut batch);
    let ids: Vec<_> = registry.devices.keys().map(String::as_str).collect();
    assert_eq!(ids, ["a", "b"]);
    let codes: Vec<_> = results
        .iter()
        .map(|r| r.as_ref().err().map(|e| e.0.as_u16()))
        .collect();
    assert_eq!(codes, [None, None, Some(409)]);
}

/// An edit adding variant `label` with one env value of `bytes` characters.
fn add_heavy(label: &'static str, bytes: usize) -> Change<Variants> {
    Box::new(move |m: &Mutation| {
        let mut variants = m.spec.variants.clone();
        let mut v = Variant {
            label: label.into(),
            ..Variant::default()
        };
        v.env = [("BLOB".to_string(), "x".repeat(bytes))]
            .into_iter()
            .collect();
        variants.push(v);
        Ok(variants)
    })
}

#[test]
fn an_edit_past_the_size_bound_is_refused_alone_and_one_that_shrinks_is_taken() {
    // R52: the bound is checked after each edit: the one that would cross it gets 413 naming
    // it, the edits before and after it (small ones) still land.
    let max = crate::store::size::MAX_MUTATION_BYTES;
    let current = fixtures::mutation("web", vec![]);
    let (mut batch, _answers): (Vec<_>, Vec<_>) =
        [add_heavy("a", max / 2), add_heavy("b", max / 2), add("c")]
            .into_iter()
            .map(|c| pending(c, overdue::claim()))
            .unzip();
    let (variants, results) = apply::<Variants>(|_, _| Ok(()), fits, &current, &mut batch);
    assert_eq!(labels(&variants), ["a", "c"]);
    let refused = results[1]
        .as_ref()
        .err()
        .map(|e| (e.0.as_u16(), e.1.clone()));
    let (code, message) = refused.unwrap_or_else(|| panic!("{results:?}"));
    assert_eq!(code, 413);
    assert!(
        message.contains(&format!("over the bound of {max} bytes")),
        "{message}"
    );

    // Already over the bound (grown by hand): removing a variant is still taken.
    let mut over = fixtures::mutation("web", vec![]);
    over.spec.variants = variants;
    let mut big = over.spec.variants[0].clone();
    big.label = "d".into();
    over.spec.variants.push(big);
    let remove_a: Change<Variants> = Box::new(|m: &Mutation| {
        Ok(m.spec
            .variants
            .iter()
            .filter(|v| v.label != "a")
            .cloned()
            .collect())
    });
    let (mut batch, _answers): (Vec<_>, Vec<_>) = [remove_a]
        .into_iter()
        .map(|c| pending(c, overdue::claim()))
        .unzip();
    let (variants, results) = apply::<Variants>(|_, _| Ok(()), fits, &over, &mut batch);
    assert!(results[0].is_ok(), "{results:?}");
    assert_eq!(labels(&variants), ["c", "d"]);
}

/// An object in memory: a number, and the times it was written.
#[derive(Clone, Default)]
struct Counter {
    value: Arc<Mutex<u32>>,
    writes: Arc<Mutex<Vec<tokio::time::Instant>>>,
}

impl Target for Counter {
    type Object = u32;
    type Part = u32;
    const WRITTEN: &'static str = "counter written";

    async fn read(&self) -> Result<u32, ApiError> {
        Ok(*self.value.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn part(object: &u32) -> &u32 {
        object
    }

    fn set(object: &mut u32, part: u32) -> u32 {
        std::mem::replace(object, part)
    }

    async fn write(&self, _: &u32, part: &u32) -> kube::Result<u32> {
        *self.value.lock().unwrap_or_else(PoisonError::into_inner) = *part;
        let mut writes = self.writes.lock().unwrap_or_else(PoisonError::into_inner);
        writes.push(tokio::time::Instant::now());
        Ok(*part)
    }

    fn describe(&self) -> String {
        "counter".into()
    }

    fn key(&self) -> String {
        "counter".into()
    }

    fn owner(&self) -> (&str, &str) {
        ("ns", "counter")
    }
}

fn increment() -> Change<Counter> {
    Box::new(|n: &u32| Ok(n + 1))
}

/// R52: an object is written at most [`WRITE_BURST`] times at once and then
/// [`WRITES_PER_SECOND`] times a second, however often a caller asks (one edit after another);
/// no edit is lost for it.
#[tokio::test(start_paused = true)]
async fn one_object_is_written_within_its_budget() {
    let counter = Counter::default();
    let batches = Batches::<Counter>::default();
    let start = tokio::time::Instant::now();
    let edits = usize::try_from(WRITE_BURST).unwrap_or(0) + 40;
    for _ in 0..edits {
        let edit = batches.edit(counter.clone(), Duration::from_secs(10), increment());
        assert!(edit.await.is_ok());
    }
    let writes = counter
        .writes
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    assert_eq!(
        writes.len(),
        edits,
        "each edit came alone, so each is a write"
    );
    let burst = usize::try_from(WRITE_BURST).unwrap_or(0);
    let at_once = writes
        .iter()
        .filter(|t| t.duration_since(start) < Duration::from_millis(1));
    assert_eq!(at_once.count(), burst, "the burst, at once");
    let gap = Duration::from_secs(1) / WRITES_PER_SECOND;
    for pair in writes[burst..].windows(2) {
        assert!(
            pair[1] - pair[0] >= gap - Duration::from_millis(1),
            "{pair:?}"
        );
    }
    let value = *counter.value.lock().unwrap_or_else(PoisonError::into_inner);
    assert_eq!(usize::try_from(value).ok(), Some(edits));
}

/// R52: edits that arrive while a writer waits for its budget are written with it: a hundred
/// callers at once past the burst cost a few writes, and each gets its own answer.
#[tokio::test(start_paused = true)]
async fn edits_that_wait_for_the_budget_are_written_together() {
    let counter = Counter::default();
    let batches = Batches::<Counter>::default();
    for _ in 0..WRITE_BURST {
        let edit = batches.edit(counter.clone(), Duration::from_secs(10), increment());
        assert!(edit.await.is_ok());
    }
    let callers = (0..100).map(|_| {
        let (counter, batches) = (counter.clone(), batches.clone());
        tokio::spawn(async move {
            let edit = batches.edit(counter, Duration::from_secs(10), increment());
            edit.await.is_ok()
        })
    });
    for caller in futures::future::join_all(callers).await {
        assert!(matches!(caller, Ok(true)));
    }
    let writes = counter
        .writes
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .len();
    let burst = usize::try_from(WRITE_BURST).unwrap_or(0);
    assert!(
        writes <= burst + 2,
        "{} writes for 100 edits",
        writes - burst
    );
    assert_eq!(
        *counter.value.lock().unwrap_or_else(PoisonError::into_inner),
        WRITE_BURST + 100
    );
}

/// An object with a version: the server's copy, a cache's copy (which may lag), and the
/// reads and writes made of it. A write made from another version than the server's is a
/// conflict, as a resourceVersion guard makes it.
#[derive(Clone, Default)]
struct Versioned {
    server: Arc<Mutex<(u32, u32)>>,
    cached: Arc<Mutex<Option<(u32, u32)>>>,
    reads: Arc<Mutex<u32>>,
    writes: Arc<Mutex<u32>>,
}

fn locked<T: Copy>(m: &Mutex<T>) -> T {
    *m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Target for Versioned {
    /// (version, value)
    type Object = (u32, u32);
    type Part = u32;
    const WRITTEN: &'static str = "versioned written";

    async fn read(&self) -> Result<(u32, u32), ApiError> {
        *self.reads.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        Ok(locked(&self.server))
    }

    fn known(&self) -> Option<(u32, u32)> {
        locked(&self.cached)
    }

    fn part(object: &(u32, u32)) -> &u32 {
        &object.1
    }

    fn set(object: &mut (u32, u32), part: u32) -> u32 {
        std::mem::replace(&mut object.1, part)
    }

    async fn write(&self, current: &(u32, u32), part: &u32) -> kube::Result<(u32, u32)> {
        *self.writes.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        let mut server = self.server.lock().unwrap_or_else(PoisonError::into_inner);
        if server.0 != current.0 {
            let status = kube::core::Status::failure("the object was modified", "Conflict");
            return Err(kube::Error::Api(Box::new(status.with_code(409))));
        }
        *server = (server.0 + 1, *part);
        Ok(*server)
    }

    fn describe(&self) -> String {
        "versioned".into()
    }

    fn key(&self) -> String {
        "versioned".into()
    }

    fn owner(&self) -> (&str, &str) {
        ("ns", "versioned")
    }
}

fn set_to(value: u32) -> Change<Versioned> {
    Box::new(move |_: &(u32, u32)| Ok(value))
}

/// R52: a write starts from the cached copy without a read; a cache that lags costs a
/// conflict and a read, never the edit; an edit that changes nothing of a cached copy is
/// answered only after the server's own copy agrees.
#[tokio::test]
async fn a_write_starts_from_what_is_known_and_reads_only_when_that_is_stale() {
    let limit = Duration::from_secs(10);
    let target = Versioned::default();
    *target.server.lock().unwrap_or_else(PoisonError::into_inner) = (5, 1);
    *target.cached.lock().unwrap_or_else(PoisonError::into_inner) = Some((5, 1));
    let batches = Batches::<Versioned>::default();

    // The cache is current: one write, no read.
    let written = batches.edit(target.clone(), limit, set_to(2)).await;
    assert_eq!(written.ok().as_deref(), Some(&(6, 2)));
    assert_eq!((locked(&target.reads), locked(&target.writes)), (0, 1));

    // The cache still says version 5: the write conflicts, then the read and a write land.
    let written = batches.edit(target.clone(), limit, set_to(3)).await;
    assert_eq!(written.ok().as_deref(), Some(&(7, 3)));
    assert_eq!((locked(&target.reads), locked(&target.writes)), (1, 3));
    assert_eq!(locked(&target.server), (7, 3));

    // Nothing to change by the (stale) cache's copy, but the server's holds another value:
    // the server's copy is read and the edit written on it.
    *target.cached.lock().unwrap_or_else(PoisonError::into_inner) = Some((5, 4));
    let written = batches.edit(target.clone(), limit, set_to(4)).await;
    assert_eq!(written.ok().as_deref(), Some(&(8, 4)));
    assert_eq!((locked(&target.reads), locked(&target.writes)), (2, 4));

    // Nothing to change by the server's copy either: answered without a write.
    *target.cached.lock().unwrap_or_else(PoisonError::into_inner) = Some((8, 4));
    let written = batches.edit(target.clone(), limit, set_to(4)).await;
    assert_eq!(written.ok().as_deref(), Some(&(8, 4)));
    assert_eq!((locked(&target.reads), locked(&target.writes)), (3, 4));
}

/// R40, R52: heartbeats that may wait are gathered into one write per window, however fast
/// the writes are; an edit that may not wait ends the window at once.
#[tokio::test(start_paused = true)]
async fn heartbeats_are_gathered_and_an_urgent_edit_ends_the_window() {
    let counter = Counter::default();
    let batches = Batches::<Counter>::default();
    let limit = Duration::from_secs(10);
    let window = Duration::from_secs(1);
    let start = tokio::time::Instant::now();
    let notes = (0..50).map(|i| {
        let (counter, batches) = (counter.clone(), batches.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(15 * i)).await;
            batches
                .edit_gathered(counter, limit, increment(), window)
                .await
                .is_ok()
        })
    });
    for note in futures::future::join_all(notes).await {
        assert!(matches!(note, Ok(true)));
    }
    let writes = counter
        .writes
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    assert_eq!(
        writes.len(),
        1,
        "fifty heartbeats within the window: one write"
    );
    assert!(writes[0].duration_since(start) >= window, "{writes:?}");
    assert_eq!(locked(&counter.value), 50);

    // A heartbeat waits; an edit that may not wait comes: both are written at once.
    let start = tokio::time::Instant::now();
    let note = {
        let (counter, batches) = (counter.clone(), batches.clone());
        tokio::spawn(async move {
            batches
                .edit_gathered(counter, limit, increment(), window)
                .await
                .is_ok()
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        batches
            .edit(counter.clone(), limit, increment())
            .await
            .is_ok()
    );
    assert!(matches!(note.await, Ok(true)));
    let writes = counter
        .writes
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    assert_eq!(writes.len(), 2, "{writes:?}");
    assert!(writes[1].duration_since(start) < window, "{writes:?}");
    assert_eq!(locked(&counter.value), 52);
}

/// R52, R40: a writer gathering a long window (refreshes of last-seen times) writes sooner
/// when an edit comes that may wait less (a change of state), with both; an edit that may wait
/// longer does not stretch a short window.
#[tokio::test(start_paused = true)]
async fn an_edit_that_may_wait_less_ends_a_longer_window() {
    let counter = Counter::default();
    let batches = Batches::<Counter>::default();
    let limit = Duration::from_secs(10);
    let start = tokio::time::Instant::now();
    let note = |after: u64, window: u64| {
        let (counter, batches) = (counter.clone(), batches.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(after)).await;
            let window = Duration::from_secs(window);
            let edit = batches.edit_gathered(counter, limit, increment(), window);
            edit.await.is_ok()
        })
    };
    // A refresh that may wait 150 s, then a change of state that may wait 1 s, 10 s later.
    let (long, short) = (note(0, 150), note(10, 1));
    assert!(matches!(long.await, Ok(true)));
    assert!(matches!(short.await, Ok(true)));
    let writes = counter
        .writes
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let at: Vec<u64> = writes
        .iter()
        .map(|w| w.duration_since(start).as_secs())
        .collect();
    assert_eq!(at, [11], "both written once, when the short window ended");

    // A short window first, then a long one: written when the short one ends.
    let start = tokio::time::Instant::now();
    let (short, long) = (note(0, 2), note(1, 150));
    assert!(matches!(short.await, Ok(true)));
    assert!(matches!(long.await, Ok(true)));
    let writes = counter
        .writes
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    assert_eq!(writes.len(), 2, "{writes:?}");
    assert_eq!(writes[1].duration_since(start).as_secs(), 2);
    assert_eq!(locked(&counter.value), 4);
}
