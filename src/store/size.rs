//! The size bound every write of a Mutation is held to (R52), measured without keeping the
//! JSON it counts.

use crate::{crd::Mutation, http::ApiError};

/// The largest a Mutation may grow to, as JSON with its managedFields (R52): etcd refuses a
/// request of about 1.5 MiB, and a store whose writes were refused there could no longer
/// write the Mutation at all. An edit that would grow it past this is refused with 413; one
/// that shrinks it is taken even over the bound, so it stays writable.
pub const MAX_MUTATION_BYTES: usize = 512 * 1024;

/// The size of `m` as the API server stores it (JSON), or `usize::MAX` when it cannot be
/// serialized.
pub fn mutation_bytes(m: &Mutation) -> usize {
    json_bytes(m)
}

/// The size of `value` as JSON, or `usize::MAX` when it cannot be serialized.
fn json_bytes(value: &impl serde::Serialize) -> usize {
    let mut counted = Counted(0);
    serde_json::to_writer(&mut counted, value).map_or(usize::MAX, |()| counted.0)
}

/// A writer that only counts what it is given: a Mutation is measured after every edit, and
/// its JSON (up to [`MAX_MUTATION_BYTES`]) need not be kept to be counted.
struct Counted(usize);

impl std::io::Write for Counted {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 = self.0.saturating_add(bytes.len());
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Whether the edit of a part of Mutation `what` (`part` as it was `before`, as it is in
/// `after`) keeps it within [`MAX_MUTATION_BYTES`]: refused (413, naming the bound) when it
/// grows it past the bound. Only an edit that ends over the bound is measured against what
/// it was: the Mutation's size with the part's own JSON as it was instead of as it is.
pub fn mutation_fits<P: serde::Serialize>(
    what: &str,
    before: &P,
    part: &P,
    after: &Mutation,
) -> Result<(), ApiError> {
    let size = mutation_bytes(after);
    if size <= MAX_MUTATION_BYTES {
        return Ok(());
    }
    let was = size
        .saturating_sub(json_bytes(part))
        .saturating_add(json_bytes(before));
    within(what, size, was)
}

/// Whether Mutation `what`, `m`, is within [`MAX_MUTATION_BYTES`] or no larger than `was`
/// bytes (what it was before the change): else 413, naming the bound.
pub fn mutation_within(what: &str, m: &Mutation, was: usize) -> Result<(), ApiError> {
    within(what, mutation_bytes(m), was)
}

/// Whether a Mutation of `size` bytes, `was` bytes before the change, is within the bound.
fn within(what: &str, size: usize, was: usize) -> Result<(), ApiError> {
    if size <= MAX_MUTATION_BYTES || size <= was {
        return Ok(());
    }
    Err(ApiError::too_large(format!(
        "{what} would be {size} bytes with this change, over the bound of {MAX_MUTATION_BYTES} \
         bytes the operator keeps a Mutation to (the API server refuses objects of about \
         1.5 MiB); nothing was changed: remove variants or devices, or send smaller values"
    )))
}
