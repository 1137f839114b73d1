//! R43: a base change reaching the variants in steps, decided without I/O.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::{
    crd::{OnFailure, RolloutPhase, RolloutSpec, RolloutStatus, RolloutStep},
    variant::rollout::{
        Health, Outcome, RolloutPolicy, Running, Word, decide, matches, revision_of,
    },
};

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).unwrap()
}

fn step_of(patterns: &[&str]) -> RolloutStep {
    RolloutStep {
        variants: Some(patterns.iter().map(|p| (*p).to_owned()).collect()),
        ..RolloutStep::default()
    }
}

fn pause() -> RolloutStep {
    RolloutStep {
        pause: Some(true),
        ..RolloutStep::default()
    }
}

fn policy(steps: Vec<RolloutStep>) -> RolloutPolicy {
    RolloutPolicy::of(&RolloutSpec {
        steps,
        progress_deadline_seconds: Some(60),
        ..RolloutSpec::default()
    })
    .unwrap()
}

/// Ten display variants, `lily-0`..`lily-4` and `radxa-0`..`radxa-4`, each running `rev`
/// and `health`.
fn ten<'a>(revs: &'a [String], health: &[Health]) -> Vec<Running<'a>> {
    const LABELS: [&str; 10] = [
        "lily-0", "lily-1", "lily-2", "lily-3", "lily-4", "radxa-0", "radxa-1", "radxa-2",
        "radxa-3", "radxa-4",
    ];
    LABELS
        .iter()
        .enumerate()
        .map(|(i, label)| Running {
            label,
            revision: Some(revs[i].as_str()),
            idle: false,
            health: health[i],
        })
        .collect()
}

fn complete(revision: &str) -> RolloutStatus {
    RolloutStatus {
        revision: revision.to_owned(),
        step: 3,
        phase: RolloutPhase::Complete,
        ..RolloutStatus::default()
    }
}

fn count(o: &Outcome, revision: &str) -> usize {
    o.targets.iter().filter(|t| *t == revision).count()
}

#[test]
fn patterns_match_labels_with_stars_anywhere() {
    for (pattern, label, expected) in [
        ("lily-*", "lily-0", true),
        ("lily-*", "radxa-0", false),
        ("*", "anything", true),
        ("*-0", "lily-0", true),
        ("*-0", "lily-10", false),
        ("l*y-*", "lily-3", true),
        ("lily", "lily", true),
        ("lily", "lily-0", false),
        ("a*a", "a", false),
        ("a*a", "aa", true),
    ] {
        assert_eq!(matches(pattern, label), expected, "{pattern} {label}");
    }
}

#[test]
fn a_step_is_exactly_one_thing_and_refusals_name_it() {
    let both = RolloutStep {
        percent: Some(10),
        pause: Some(true),
        ..RolloutStep::default()
    };
    let bad = |steps| {
        RolloutPolicy::of(&RolloutSpec {
            steps,
            ..RolloutSpec::default()
        })
        .unwrap_err()
    };
    assert!(bad(vec![both]).contains("spec.rollout.steps[0]: a step is exactly one"));
    assert!(bad(vec![RolloutStep::default()]).contains("steps[0]"));
    let zero = RolloutStep {
        percent: Some(0),
        ..RolloutStep::default()
    };
    assert!(bad(vec![pause(), zero]).contains("steps[1].percent: 0 is not between 1 and 100"));
    assert!(bad(vec![step_of(&["Lily_*"])]).contains("\"Lily_*\" is not a label pattern"));
    assert!(bad(vec![step_of(&[])]).contains("between 1 and 64 patterns"));
}

#[test]
fn steps_take_the_variants_they_name_first_and_the_rest_come_last() {
    let p = policy(vec![
        step_of(&["lily-0"]),
        RolloutStep {
            percent: Some(30),
            ..RolloutStep::default()
        },
        pause(),
        step_of(&["radxa-*", "lily-0"]),
    ]);
    let labels = [
        "lily-0", "lily-1", "lily-2", "lily-3", "radxa-0", "radxa-1", "other",
    ];
    // 30% of 7 is 3 (rounded up): lily-1 and lily-2 beside lily-0, taken already.
    assert_eq!(p.groups(&labels), vec![0, 1, 1, 4, 3, 3, 4]);
}

#[test]
fn the_first_status_runs_everything_at_the_current_revision() {
    let p = policy(vec![step_of(&["lily-*"])]);
    let revs = vec!["old".to_owned(); 10];
    let v = ten(&revs, &[Health::Available; 10]);
    let o = decide(&p, "new", &["new"], None, &v, Word::default(), at(0));
    assert_eq!(count(&o, "new"), 10);
    assert_eq!(o.status.phase, RolloutPhase::Complete);
    assert_eq!(o.status.revision, "new");
}

// The base changes: only the first step's variants take it; the next step starts once they
// are available with it; the variants no step names come last; then Complete, the old
// revision kept as previous.
#[test]
fn a_base_change_goes_step_by_step() {
    let p = policy(vec![step_of(&["lily-0", "lily-1"]), step_of(&["lily-*"])]);
    let old = vec!["a".to_owned(); 10];
    let v = ten(&old, &[Health::Available; 10]);
    let kept = ["a", "b"];
    let o = decide(
        &p,
        "b",
        &kept,
        Some(&complete("a")),
        &v,
        Word::default(),
        at(0),
    );
    assert_eq!(&o.targets[..3], ["b", "b", "a"]);
    assert_eq!(count(&o, "b"), 2);
    assert_eq!(o.status.step, 0);
    assert_eq!(o.status.phase, RolloutPhase::Progressing);
    assert_eq!(o.status.previous_revision.as_deref(), Some("a"));
    assert_eq!(o.next, Some(Duration::from_secs(60)));

    // Applied, not yet available: the same, the deadline nearer.
    let mut revs = old.clone();
    revs[0] = "b".into();
    revs[1] = "b".into();
    let mut health = [Health::Available; 10];
    health[0] = Health::Progressing;
    let v = ten(&revs, &health);
    let o2 = decide(&p, "b", &kept, Some(&o.status), &v, Word::default(), at(20));
    assert_eq!(o2.targets, o.targets);
    assert_eq!(o2.next, Some(Duration::from_secs(40)));

    // Available: step 1 (the other lilies), then the radxas.
    let v = ten(&revs, &[Health::Available; 10]);
    let o3 = decide(
        &p,
        "b",
        &kept,
        Some(&o2.status),
        &v,
        Word::default(),
        at(30),
    );
    assert_eq!(o3.status.step, 1);
    assert_eq!(count(&o3, "b"), 5);
    assert!(o3.targets[5..].iter().all(|t| t == "a"));
    let revs: Vec<String> = o3.targets.clone();
    let v = ten(&revs, &[Health::Available; 10]);
    let o4 = decide(
        &p,
        "b",
        &kept,
        Some(&o3.status),
        &v,
        Word::default(),
        at(40),
    );
    assert_eq!((o4.status.step, count(&o4, "b")), (2, 10));
    let revs: Vec<String> = o4.targets.clone();
    let v = ten(&revs, &[Health::Available; 10]);
    let o5 = decide(
        &p,
        "b",
        &kept,
        Some(&o4.status),
        &v,
        Word::default(),
        at(50),
    );
    assert_eq!(o5.status.phase, RolloutPhase::Complete);
    assert_eq!(o5.status.updated, 10);
    assert_eq!(o5.status.previous_revision.as_deref(), Some("a"));
    assert_eq!(o5.next, None);
}

// Idle variants take the new base at once, variants at it are skipped (their step passes at
// once), and maxUnavailableVariants bounds how many of a step start together.
#[test]
fn idle_and_current_variants_never_wait_and_a_step_is_bounded() {
    let p = RolloutPolicy::of(&RolloutSpec {
        steps: vec![step_of(&["lily-*"])],
        max_unavailable_variants: Some(2),
        ..RolloutSpec::default()
    })
    .unwrap();
    let mut revs = vec!["a".to_owned(); 10];
    revs[0] = "b".into();
    let mut v = ten(&revs, &[Health::Available; 10]);
    v[9].idle = true;
    let o = decide(
        &p,
        "b",
        &["a", "b"],
        Some(&complete("a")),
        &v,
        Word::default(),
        at(0),
    );
    // lily-0 is done; lily-1 and lily-2 start; radxa-4 is idle.
    assert_eq!(
        o.targets,
        ["b", "b", "b", "a", "a", "a", "a", "a", "a", "b"].map(String::from)
    );
}

// A pause step waits for a resume of that step, taken once.
#[test]
fn a_pause_step_waits_for_its_resume() {
    let p = policy(vec![step_of(&["lily-0"]), pause(), step_of(&["lily-*"])]);
    let mut revs = vec!["a".to_owned(); 10];
    revs[0] = "b".into();
    let v = ten(&revs, &[Health::Available; 10]);
    let kept = ["a", "b"];
    let first = decide(
        &p,
        "b",
        &kept,
        Some(&complete("a")),
        &v,
        Word::default(),
        at(0),
    );
    assert_eq!(first.status.phase, RolloutPhase::Paused, "{first:?}");
    assert_eq!(first.status.step, 1);
    assert_eq!(count(&first, "b"), 1);
    let stale = Word {
        resumed: Some("b/0/1"),
        ..Word::default()
    };
    let o = decide(&p, "b", &kept, Some(&first.status), &v, stale, at(1));
    assert_eq!(
        o.status.phase,
        RolloutPhase::Paused,
        "another step's resume"
    );
    let word = Word {
        resumed: Some("b/1/2"),
        ..Word::default()
    };
    let o = decide(&p, "b", &kept, Some(&first.status), &v, word, at(2));
    assert_eq!(
        (o.status.step, o.status.phase),
        (2, RolloutPhase::Progressing)
    );
    assert_eq!(count(&o, "b"), 5);
    assert_eq!(o.status.resumed.as_deref(), Some("b/1/2"));
}

// spec.rollout.paused holds the rollout where it is: nothing new starts, nothing goes back.
#[test]
fn paused_holds_without_going_back() {
    let mut spec = RolloutSpec {
        steps: vec![step_of(&["lily-*"])],
        ..RolloutSpec::default()
    };
    let mut revs = vec!["a".to_owned(); 10];
    revs[0] = "b".into();
    let v = ten(&revs, &[Health::Progressing; 10]);
    spec.paused = Some(true);
    let p = RolloutPolicy::of(&spec).unwrap();
    let o = decide(
        &p,
        "b",
        &["a", "b"],
        Some(&complete("a")),
        &v,
        Word::default(),
        at(0),
    );
    assert_eq!(o.status.phase, RolloutPhase::Paused);
    assert_eq!(count(&o, "b"), 1, "{:?}", o.targets);
}

// A step whose variant is not available by the deadline (or stalls) fails: Pause holds the
// rollout; Rollback returns the failed variants to the previous revision; a resume retries.
#[test]
fn a_failed_step_holds_or_rolls_back_and_a_resume_retries_it() {
    for on_failure in [OnFailure::Pause, OnFailure::Rollback] {
        let p = RolloutPolicy::of(&RolloutSpec {
            steps: vec![step_of(&["lily-0", "lily-1"])],
            progress_deadline_seconds: Some(30),
            on_failure: Some(on_failure),
            ..RolloutSpec::default()
        })
        .unwrap();
        let kept = ["a", "b"];
        let old = vec!["a".to_owned(); 10];
        let v = ten(&old, &[Health::Available; 10]);
        let o = decide(
            &p,
            "b",
            &kept,
            Some(&complete("a")),
            &v,
            Word::default(),
            at(0),
        );
        let mut revs = old.clone();
        revs[0] = "b".into();
        revs[1] = "b".into();
        let mut health = [Health::Available; 10];
        health[1] = Health::Progressing;
        let v = ten(&revs, &health);
        let failed = decide(&p, "b", &kept, Some(&o.status), &v, Word::default(), at(31));
        assert_eq!(failed.status.phase, RolloutPhase::Degraded);
        assert_eq!(failed.status.failed, ["lily-1"]);
        let message = failed.status.message.clone().unwrap();
        assert!(message.contains("step 0 failed: lily-1"), "{message}");
        let lily1 = if on_failure == OnFailure::Rollback {
            "a"
        } else {
            "b"
        };
        assert_eq!(failed.targets[..3], ["b", lily1, "a"]);
        // held: nothing changes later
        let later = decide(
            &p,
            "b",
            &kept,
            Some(&failed.status),
            &v,
            Word::default(),
            at(90),
        );
        assert_eq!(later.status, failed.status);
        // a resume of the step retries it, with a new deadline
        let word = Word {
            resumed: Some("b/0/x"),
            ..Word::default()
        };
        let retry = decide(&p, "b", &kept, Some(&failed.status), &v, word, at(100));
        assert_eq!(
            retry.status.phase,
            RolloutPhase::Progressing,
            "{on_failure:?}"
        );
        assert_eq!(retry.targets[..3], ["b", "b", "a"]);
        assert_eq!(retry.next, Some(Duration::from_secs(30)));
    }
    // A Deployment that gave up fails its step before the deadline.
    let p = policy(vec![step_of(&["lily-0"])]);
    let mut revs = vec!["a".to_owned(); 10];
    revs[0] = "b".into();
    let mut health = [Health::Available; 10];
    health[0] = Health::Stalled;
    let v = ten(&revs, &health);
    let o = decide(
        &p,
        "b",
        &["a", "b"],
        Some(&complete("a")),
        &v,
        Word::default(),
        at(1),
    );
    assert_eq!(o.status.phase, RolloutPhase::Degraded);
}

// The base edited mid-rollout starts again at the first step; variants on the abandoned
// revision keep it while it is kept, and the previous revision stays the last good one.
#[test]
fn an_edit_mid_rollout_starts_again_from_the_last_good_revision() {
    let p = policy(vec![step_of(&["lily-0"]), step_of(&["lily-*"])]);
    let mut revs = vec!["a".to_owned(); 10];
    revs[0] = "b".into();
    let v = ten(&revs, &[Health::Available; 10]);
    let mid = RolloutStatus {
        revision: "b".into(),
        previous_revision: Some("a".into()),
        step: 1,
        phase: RolloutPhase::Progressing,
        ..RolloutStatus::default()
    };
    let o = decide(
        &p,
        "c",
        &["a", "b", "c"],
        Some(&mid),
        &v,
        Word::default(),
        at(0),
    );
    assert_eq!(o.status.previous_revision.as_deref(), Some("a"));
    assert_eq!(o.status.step, 0);
    assert_eq!(&o.targets[..2], ["c", "a"]);
    // Its base no longer at hand, lily-0 would fall back to the last good one instead.
    let p2 = policy(vec![step_of(&["lily-1"])]);
    let o = decide(
        &p2,
        "c",
        &["a", "c"],
        Some(&mid),
        &v,
        Word::default(),
        at(0),
    );
    assert_eq!(&o.targets[..2], ["a", "c"]);
}

// An abort returns every variant to the previous revision while it names the current one;
// taken back, the rollout starts again at its first step.
#[test]
fn an_abort_returns_everything_until_taken_back() {
    let p = policy(vec![step_of(&["lily-0"]), step_of(&["lily-*"])]);
    let mut revs = vec!["a".to_owned(); 10];
    revs[0] = "b".into();
    revs[1] = "b".into();
    let mut v = ten(&revs, &[Health::Available; 10]);
    v[9].idle = true;
    let mid = RolloutStatus {
        revision: "b".into(),
        previous_revision: Some("a".into()),
        step: 1,
        phase: RolloutPhase::Progressing,
        ..RolloutStatus::default()
    };
    let word = Word {
        aborted: Some("b"),
        ..Word::default()
    };
    let o = decide(&p, "b", &["a", "b"], Some(&mid), &v, word, at(0));
    assert_eq!(count(&o, "a"), 10);
    assert_eq!(o.status.phase, RolloutPhase::Degraded);
    assert!(o.status.message.as_deref().unwrap().starts_with("aborted"));
    let back: Vec<String> = o.targets.clone();
    let v = ten(&back, &[Health::Available; 10]);
    let again = decide(
        &p,
        "b",
        &["a", "b"],
        Some(&o.status),
        &v,
        Word::default(),
        at(5),
    );
    assert_eq!(
        (again.status.step, again.status.phase),
        (0, RolloutPhase::Progressing)
    );
    assert_eq!(count(&again, "b"), 1);
}

#[test]
fn a_revision_is_ten_hex_digits_of_the_base() {
    let r = revision_of(r#"{"metadata":{"name":"snap"}}"#);
    assert_eq!(r.len(), 10);
    assert!(r.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_ne!(r, revision_of(r#"{"metadata":{"name":"snap2"}}"#));
}

// A variant added mid-rollout (no Deployment yet, so no revision) starts on the newest base,
// whatever its step; one that is Idle too.
#[test]
fn a_variant_added_mid_rollout_starts_on_the_newest_base() {
    let p = policy(vec![step_of(&["lily-0"]), pause()]);
    let revs = vec!["a".to_owned(); 10];
    let mut v = ten(&revs, &[Health::Available; 10]);
    v[7].revision = None;
    v[7].health = Health::Progressing;
    let o = decide(
        &p,
        "b",
        &["a", "b"],
        Some(&complete("a")),
        &v,
        Word::default(),
        at(0),
    );
    assert_eq!(o.targets[7], "b", "{:?}", o.targets);
    assert_eq!(o.targets[8], "a");
    assert_eq!(count(&o, "b"), 2);
}
