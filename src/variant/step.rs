//! What to do with an object the operator writes (a variant's Deployment or Service), given
//! what is known of it: the one decision both share.

/// What a reconcile does about one planned variant (R5, R9), from `resolve` (build.rs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Server-side apply the variant's Deployment: missing, or not as declared.
    Write,
    /// The cache knows no Deployment of that name: create it. When the API server answers
    /// that one exists (409), it may be someone else's (R9) or this owner's not cached yet:
    /// look it up then.
    Create,
    /// The cache has a Deployment of that name that this owner does not control: ask the API
    /// server, as it may be someone else's (R9), or this owner's cached before it took it.
    LookUp,
    /// Nothing to write: the Deployment matches, or the variant cannot be applied.
    Keep,
}

/// The step for an object the operator writes (a variant's Deployment or Service), as known
/// from the cache (`from_server` false) or from the API server: one the cache does not know is
/// created, one it knows as someone else's is looked up; otherwise it is written when it
/// `differs` from what is declared.
pub fn step_for(
    exists: bool,
    ours: bool,
    from_server: bool,
    differs: impl FnOnce() -> bool,
) -> Step {
    if !ours && !from_server {
        if exists { Step::LookUp } else { Step::Create }
    } else if differs() {
        Step::Write
    } else {
        Step::Keep
    }
}
