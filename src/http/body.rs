//! Request bodies: read whole, within the listener's size and time limits.

use std::time::Duration;

use http_body_util::BodyExt as _;
use hyper::{
    Response, StatusCode,
    body::{Body as _, Bytes, Incoming},
};

use super::budget::{Refused, Reservation};
use super::limits::human_size;
use super::response::{Body, error};

/// Why [`read_body`] gave no body.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// The body (or its `Content-Length`) is larger than the limit, in bytes.
    #[error("request body is larger than {}", human_size(*.limit))]
    TooLarge {
        /// The limit that was exceeded, in bytes.
        limit: usize,
    },
    /// The body did not arrive completely within the body timeout.
    #[error("request body was not received in time")]
    Timeout,
    /// The body could not be read (for example a malformed chunked encoding).
    #[error("cannot read request body: {0}")]
    Read(String),
    /// The body does not fit the listener's budget of buffered bytes now.
    #[error("request body not read: {0}")]
    Busy(Refused),
}

impl BodyError {
    /// The status code that answers this error: 413, 408, 400 or 503.
    pub fn status(&self) -> StatusCode {
        match self {
            BodyError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            BodyError::Timeout => StatusCode::REQUEST_TIMEOUT,
            BodyError::Read(_) => StatusCode::BAD_REQUEST,
            BodyError::Busy(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The error response for this error, with a JSON error body.
    pub fn response(&self) -> Response<Body> {
        error(self.status(), self.to_string())
    }
}

/// Reads a whole request body, at most `limit` bytes within `timeout`, holding what it reads
/// in `held` (R44): the caller keeps that reservation while it handles the body.
///
/// A `Content-Length` over the limit is refused before anything is read (and before hyper
/// sends `100 Continue`), and so is one the budget cannot hold; a chunked body is refused as
/// soon as it passes the limit or the budget.
pub async fn read_body(
    body: Incoming,
    limit: usize,
    timeout: Duration,
    held: &mut Reservation,
) -> Result<Bytes, BodyError> {
    // Hyper's size hint is exact when the request has a Content-Length.
    let announced = usize::try_from(body.size_hint().lower()).unwrap_or(usize::MAX);
    if announced > limit {
        return Err(BodyError::TooLarge { limit });
    }
    held.cover(announced).map_err(BodyError::Busy)?;
    match tokio::time::timeout(timeout, collect(body, limit, announced, held)).await {
        Err(_elapsed) => Err(BodyError::Timeout),
        Ok(read) => read,
    }
}

/// The frames of `body` in one buffer whose capacity `held` always covers.
async fn collect(
    mut body: Incoming,
    limit: usize,
    announced: usize,
    held: &mut Reservation,
) -> Result<Bytes, BodyError> {
    let mut buf: Vec<u8> = Vec::with_capacity(announced);
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| BodyError::Read(e.to_string()))?;
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        let len = buf.len().saturating_add(data.len());
        if len > limit {
            return Err(BodyError::TooLarge { limit });
        }
        if len > buf.capacity() {
            let capacity = len.max(buf.capacity().saturating_mul(2)).min(limit);
            held.cover(capacity).map_err(BodyError::Busy)?;
            buf.reserve_exact(capacity - buf.len());
        }
        buf.extend_from_slice(&data);
    }
    Ok(Bytes::from(buf))
}
