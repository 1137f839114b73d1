//! A base change reaching the variants in steps (R43): [`RolloutSpec`], what an owner
//! asks, and [`RolloutStatus`], where its rollout stands.
//!
//! Like the rest of the spec these decode leniently; the schema carries the bounds, and what
//! it cannot say (one kind of step per entry, patterns that can match a label) is checked by
//! `variant::rollout` and reported in the owner's status message.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Default of [`RolloutSpec::progress_deadline_seconds`]: Kubernetes' own default for a
/// Deployment's progress deadline.
pub const DEFAULT_PROGRESS_DEADLINE_SECONDS: i32 = 600;
/// Most steps of a rollout.
pub const MAX_STEPS: usize = 32;
/// Most label patterns of one step.
pub const MAX_STEP_PATTERNS: usize = 64;

/// How a change of the base reaches the variants: step by step, each step's Deployments
/// available before the next starts. Absent: every variant at once.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutSpec {
    /// The steps, in order. A variant belongs to the first step that names it; the variants
    /// no step names come last, as one step. At most 32.
    #[serde(default)]
    #[schemars(length(max = 32))]
    pub steps: Vec<RolloutStep>,

    /// Most variants of a step that are updated and not yet available at once (default: the
    /// whole step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 500))]
    pub max_unavailable_variants: Option<i32>,

    /// How long a step's variant may take to become available with the new base before the
    /// step has failed (default 600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 86400))]
    pub progress_deadline_seconds: Option<i32>,

    /// What a failed step does: `Pause` (the default) holds the rollout where it is;
    /// `Rollback` also returns the step's variants to the previous base.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<OnFailure>,

    /// `true`: no further variant is updated until it is `false` again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
}

/// One step of a rollout: exactly one of `variants`, `percent` and `pause`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStep {
    /// Label patterns (`*` stands for any run of characters): the variants of this step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub variants: Option<Vec<String>>,

    /// Up to this percentage of all variants, in spec order, rounded up: those of them no
    /// earlier step took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub percent: Option<i32>,

    /// `true`: wait here until resumed: annotation mutantops.neiam.org/rollout-resume set to
    /// `<revision>/<step>/<a new word>` (status.rollout names both).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause: Option<bool>,
}

/// What a failed step does.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum OnFailure {
    /// Hold the rollout where it is; the failed variants stay as they are.
    #[default]
    Pause,
    /// Return the step's variants to the previous base, and hold the rollout.
    Rollback,
}

/// Where a rollout stands.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RolloutPhase {
    /// A step is being rolled out.
    Progressing,
    /// Waiting at a pause step, or held by `spec.rollout.paused`.
    Paused,
    /// A step failed (or the rollout was aborted): held until resumed or the base changes.
    Degraded,
    /// Every variant runs the current base.
    #[default]
    Complete,
}

impl RolloutPhase {
    /// The phase as written in status.
    pub fn as_str(self) -> &'static str {
        match self {
            RolloutPhase::Progressing => "Progressing",
            RolloutPhase::Paused => "Paused",
            RolloutPhase::Degraded => "Degraded",
            RolloutPhase::Complete => "Complete",
        }
    }
}

/// Where an owner's rollout stands (`status.rollout`).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// The current base's revision (a hash of it).
    pub revision: String,
    /// The last revision every variant ran, kept to fall back to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_revision: Option<String>,
    /// The step the rollout is at, from 0; the variants no step names are step
    /// `len(spec.rollout.steps)`, and one more is past every step.
    pub step: i32,
    /// When the current step started (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_started: Option<String>,
    /// Variants that run the current revision.
    pub updated: i32,
    /// Variants whose step failed, by label.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 500))]
    pub failed: Vec<String>,
    /// Progressing, Paused, Degraded or Complete.
    pub phase: RolloutPhase,
    /// Why it is Paused or Degraded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The last resume taken: the value of annotation mutantops.neiam.org/rollout-resume
    /// (`<revision>/<step>/<a new word>`), so that each is taken once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed: Option<String>,
}
