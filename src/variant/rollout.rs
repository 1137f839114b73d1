//! A base change reaching the variants in steps (R43), decided without I/O: which base
//! revision each variant is to run, and where the rollout stands.
//!
//! A base gets a revision ([`revision_of`], a hash of its text). When it changes, the variants
//! are taken in the steps of `spec.rollout` ([`RolloutPolicy::groups`]): a step's variants run
//! the new revision, and the next step starts once each of them is available with it; the
//! variants no step names come last, as one step. A variant outside the steps reached keeps
//! the revision it runs, byte for byte. An idle variant (no instances) takes the new revision
//! at once, and one already at it is skipped. A step fails when one of its variants stalls
//! (the Deployment's ProgressDeadlineExceeded) or is not available within
//! `progressDeadlineSeconds`; then the rollout holds (`Pause`), and with `Rollback` the step's
//! failed variants return to the previous revision. A pause step waits to be resumed, and
//! `spec.rollout.paused` holds the rollout wherever it is. An abort returns every variant to
//! the previous revision.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::crd::{
    OnFailure, RolloutPhase, RolloutSpec, RolloutStatus,
    rollout::{DEFAULT_PROGRESS_DEADLINE_SECONDS, MAX_STEP_PATTERNS, MAX_STEPS},
};

/// Label of a variant's Deployment and of a ControllerRevision: the base revision it holds.
pub const REVISION_LABEL: &str = "mutantops.neiam.org/revision";
/// Annotation of an owner: `<revision>/<step>/<anything new>` resumes that step once (a pause
/// step, or a failed one).
pub const RESUME_ANNOTATION: &str = "mutantops.neiam.org/rollout-resume";
/// Annotation of an owner: `<revision>` returns every variant to the previous revision while
/// that revision is the current one.
pub const ABORT_ANNOTATION: &str = "mutantops.neiam.org/rollout-abort";

/// The revision of a base: the first 10 hex digits of the SHA-256 of its compact text.
pub fn revision_of(base_text: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, base_text.as_bytes());
    digest.as_ref()[..5]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// One step, as checked.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Step {
    Variants(Vec<String>),
    Percent(u32),
    Pause,
}

/// `spec.rollout`, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RolloutPolicy {
    steps: Vec<Step>,
    /// Most variants of a step updated and not yet available at once.
    pub max_unavailable: Option<usize>,
    /// How long a step's variant may take to become available.
    pub deadline: Duration,
    /// What a failed step does.
    pub on_failure: OnFailure,
    /// Held by the owner.
    pub paused: bool,
}

impl RolloutPolicy {
    /// Checks `spec`: every step is exactly one of `variants`, `percent` and `pause: true`,
    /// and each pattern could match a label. The error names the step and what is wrong.
    pub fn of(spec: &RolloutSpec) -> Result<Self, String> {
        if spec.steps.len() > MAX_STEPS {
            return Err(format!("spec.rollout.steps: at most {MAX_STEPS} steps"));
        }
        let mut steps = Vec::with_capacity(spec.steps.len());
        for (i, s) in spec.steps.iter().enumerate() {
            let at = format!("spec.rollout.steps[{i}]");
            let step = match (&s.variants, s.percent, s.pause) {
                (Some(patterns), None, None) => {
                    check_patterns(&at, patterns)?;
                    Step::Variants(patterns.clone())
                }
                (None, Some(p), None) if (1..=100).contains(&p) => Step::Percent(p.unsigned_abs()),
                (None, Some(p), None) => {
                    return Err(format!("{at}.percent: {p} is not between 1 and 100"));
                }
                (None, None, Some(true)) => Step::Pause,
                _ => {
                    return Err(format!(
                        "{at}: a step is exactly one of variants, percent and pause: true"
                    ));
                }
            };
            steps.push(step);
        }
        let max_unavailable = match spec.max_unavailable_variants {
            None => None,
            Some(n) if n >= 1 => Some(n.unsigned_abs() as usize),
            Some(n) => {
                return Err(format!(
                    "spec.rollout.maxUnavailableVariants: {n} is not at least 1"
                ));
            }
        };
        let seconds = spec
            .progress_deadline_seconds
            .unwrap_or(DEFAULT_PROGRESS_DEADLINE_SECONDS);
        if seconds < 1 {
            return Err(format!(
                "spec.rollout.progressDeadlineSeconds: {seconds} is not at least 1"
            ));
        }
        Ok(RolloutPolicy {
            steps,
            max_unavailable,
            deadline: Duration::from_secs(u64::from(seconds.unsigned_abs())),
            on_failure: spec.on_failure.unwrap_or_default(),
            paused: spec.paused == Some(true),
        })
    }

    /// The step of each of `labels` (in spec order): the first step that names it, or
    /// `steps.len()` for those no step names.
    pub fn groups(&self, labels: &[&str]) -> Vec<usize> {
        let rest = self.steps.len();
        let mut group = vec![rest; labels.len()];
        for (g, step) in self.steps.iter().enumerate() {
            match step {
                Step::Variants(patterns) => {
                    for (i, label) in labels.iter().enumerate() {
                        if group[i] == rest && patterns.iter().any(|p| matches(p, label)) {
                            group[i] = g;
                        }
                    }
                }
                Step::Percent(p) => {
                    let upto = (labels.len() * *p as usize).div_ceil(100);
                    for slot in group.iter_mut().take(upto) {
                        if *slot == rest {
                            *slot = g;
                        }
                    }
                }
                Step::Pause => {}
            }
        }
        group
    }

    fn is_pause(&self, step: usize) -> bool {
        self.steps.get(step) == Some(&Step::Pause)
    }
}

/// A pattern is a label in which `*` may stand for any run of characters.
fn check_patterns(at: &str, patterns: &[String]) -> Result<(), String> {
    if patterns.is_empty() || patterns.len() > MAX_STEP_PATTERNS {
        return Err(format!(
            "{at}.variants: between 1 and {MAX_STEP_PATTERNS} patterns"
        ));
    }
    for p in patterns {
        let fits = !p.is_empty()
            && p.len() <= 63
            && p.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'*');
        if !fits {
            return Err(format!(
                "{at}.variants: {p:?} is not a label pattern (lower-case letters, digits, '-' \
                 and '*', at most 63 characters)"
            ));
        }
    }
    Ok(())
}

/// Whether `label` matches `pattern`, whose `*` stands for any run of characters.
pub fn matches(pattern: &str, label: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = label.strip_prefix(first) else {
        return false;
    };
    let tail: Vec<&str> = parts.collect();
    let Some((last, middle)) = tail.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// How a variant's Deployment is doing with the revision it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    /// Its spec observed, every replica updated and available.
    Available,
    /// Not yet.
    Progressing,
    /// The Deployment gave up: its condition Progressing is False, ProgressDeadlineExceeded.
    Stalled,
}

/// What is known of one variant.
#[derive(Clone, Copy, Debug)]
pub struct Running<'a> {
    /// Its label.
    pub label: &'a str,
    /// The revision its Deployment was applied with, when it has a Deployment that says.
    pub revision: Option<&'a str>,
    /// At zero instances (or asleep): it takes the new revision at once.
    pub idle: bool,
    /// How its Deployment is doing.
    pub health: Health,
}

/// The owner's word on a rollout, from its annotations.
#[derive(Clone, Copy, Debug, Default)]
pub struct Word<'a> {
    /// `<revision>/<step>/<when>`: that step of that revision's rollout is resumed, once.
    pub resumed: Option<&'a str>,
    /// `<revision>`: that revision's rollout is aborted, while it says so.
    pub aborted: Option<&'a str>,
}

impl Word<'_> {
    /// The resume, if it is one of `step` of `revision` not taken yet (`taken`).
    fn resumes(&self, revision: &str, step: usize, taken: Option<&str>) -> Option<String> {
        let value = self.resumed?;
        let mut parts = value.splitn(3, '/');
        let fits = parts.next() == Some(revision)
            && parts.next().and_then(|s| s.parse::<usize>().ok()) == Some(step)
            && taken != Some(value);
        fits.then(|| value.to_owned())
    }
}

/// What [`decide`] decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The revision each variant is to run, in the order given.
    pub targets: Vec<String>,
    /// Where the rollout stands.
    pub status: RolloutStatus,
    /// How long until the current step's deadline, while one runs.
    pub next: Option<Duration>,
}

/// Decides, for base revision `current`, what each of `variants` runs and where the rollout
/// stands, from `previous` (the last status written; `None` the first time: everything runs
/// `current`, Complete). `kept` are the revisions whose base is at hand: a variant is kept on
/// its own revision only if it is kept, and falls back to the previous one otherwise.
pub fn decide(
    policy: &RolloutPolicy,
    current: &str,
    kept: &[&str],
    previous: Option<&RolloutStatus>,
    variants: &[Running],
    word: Word,
    now: Timestamp,
) -> Outcome {
    let labels: Vec<&str> = variants.iter().map(|v| v.label).collect();
    let groups = policy.groups(&labels);
    let last = policy.steps.len() + 1;
    let started = now.to_string();
    let mut st = match previous {
        Some(p) if p.revision == current => p.clone(),
        Some(p) => RolloutStatus {
            revision: current.to_owned(),
            previous_revision: if p.phase == RolloutPhase::Complete {
                Some(p.revision.clone())
            } else {
                p.previous_revision.clone()
            },
            step: 0,
            step_started: Some(started.clone()),
            phase: RolloutPhase::Progressing,
            ..RolloutStatus::default()
        },
        None => RolloutStatus {
            revision: current.to_owned(),
            step: i32::try_from(last).unwrap_or(i32::MAX),
            phase: RolloutPhase::Complete,
            ..RolloutStatus::default()
        },
    };
    let fallback = st
        .previous_revision
        .clone()
        .filter(|p| kept.contains(&p.as_str()));
    let at_current = |v: &Running| v.revision.is_none_or(|r| r == current);
    let done = |v: &Running| at_current(v) && (v.idle || v.health == Health::Available);

    // The owner's word: an abort holds every variant on the previous revision; a resume
    // lets a pause step pass, or retries a failed step.
    let aborted = word.aborted == Some(current) && fallback.is_some();
    let step = usize::try_from(st.step).unwrap_or(last);
    let retried = (st.phase == RolloutPhase::Degraded)
        .then(|| word.resumes(current, step, st.resumed.as_deref()))
        .flatten();
    // A failed step resumed, or an abort taken back: the step again, with a new deadline.
    if retried.is_some() || (!aborted && st.phase == RolloutPhase::Degraded && st.failed.is_empty())
    {
        st.resumed = retried.or(st.resumed.take());
        st.failed.clear();
        st.phase = RolloutPhase::Progressing;
        st.step_started = Some(started.clone());
    }
    let mut next = None;
    let mut admitted: Vec<bool> = variants.iter().map(&at_current).collect();
    if aborted {
        // Taken back, the rollout starts again at its first step.
        st.step = 0;
        st.phase = RolloutPhase::Degraded;
        st.message = Some(format!(
            "aborted: every variant runs revision {} again",
            fallback.as_deref().unwrap_or_default()
        ));
    } else if fallback.is_none() {
        // Nothing to hold a variant on: every one takes the current base, as without steps.
        st.step = i32::try_from(last).unwrap_or(i32::MAX);
        admitted.fill(true);
    }
    while !aborted && st.phase != RolloutPhase::Degraded {
        let step = usize::try_from(st.step).unwrap_or(last);
        if step >= last {
            st.phase = RolloutPhase::Complete;
            st.message = None;
            st.step_started = None;
            break;
        }
        if policy.is_pause(step) {
            if let Some(value) = word.resumes(current, step, st.resumed.as_deref()) {
                st.resumed = Some(value);
                st.step += 1;
                st.step_started = Some(started.clone());
                continue;
            }
            st.phase = RolloutPhase::Paused;
            st.message = Some(format!(
                "at pause step {step}: resume it with annotation \
                 {RESUME_ANNOTATION}={current}/{step}/<a new word>"
            ));
            break;
        }
        let members: Vec<usize> = (0..variants.len()).filter(|i| groups[*i] == step).collect();
        if policy.paused {
            st.phase = RolloutPhase::Paused;
            st.message = Some("held by spec.rollout.paused".to_owned());
            break;
        }
        // The step's variants in spec order: those done, and up to maxUnavailable more.
        let mut room = policy.max_unavailable.unwrap_or(usize::MAX);
        for &i in &members {
            if done(&variants[i]) {
                admitted[i] = true;
            } else if room > 0 {
                admitted[i] = true;
                room -= 1;
            }
        }
        if members.iter().all(|&i| done(&variants[i])) {
            st.step += 1;
            st.step_started = Some(started.clone());
            continue;
        }
        st.phase = RolloutPhase::Progressing;
        st.message = None;
        let since = st
            .step_started
            .as_deref()
            .and_then(|s| s.parse::<Timestamp>().ok())
            .unwrap_or(now);
        let elapsed = Duration::from_secs(
            now.as_second()
                .saturating_sub(since.as_second())
                .max(0)
                .unsigned_abs(),
        );
        let late = elapsed >= policy.deadline;
        let failed: Vec<String> = members
            .iter()
            .map(|&i| &variants[i])
            .filter(|v| at_current(v) && !done(v))
            .filter(|v| late || v.health == Health::Stalled)
            .map(|v| v.label.to_owned())
            .collect();
        if failed.is_empty() {
            next = Some(policy.deadline.saturating_sub(elapsed));
            break;
        }
        st.message = Some(format!(
            "step {step} failed: {} not available with revision {current} within {} s{}",
            failed.join(", "),
            policy.deadline.as_secs(),
            match policy.on_failure {
                OnFailure::Pause => "; held there",
                OnFailure::Rollback => "; back on the previous revision",
            }
        ));
        st.failed = failed;
        st.phase = RolloutPhase::Degraded;
    }
    let step = usize::try_from(st.step).unwrap_or(last);
    let targets = variants
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let back = fallback.clone().unwrap_or_else(|| current.to_owned());
            let rolled_back =
                policy.on_failure == OnFailure::Rollback && st.failed.iter().any(|f| f == v.label);
            if aborted || rolled_back {
                back
            } else if v.idle || groups[i] < step || admitted[i] {
                current.to_owned()
            } else {
                match v.revision {
                    Some(own) if kept.contains(&own) => own.to_owned(),
                    _ => back,
                }
            }
        })
        .collect::<Vec<_>>();
    st.updated = i32::try_from(targets.iter().filter(|t| *t == current).count()).unwrap_or(0);
    Outcome {
        targets,
        status: st,
        next,
    }
}
