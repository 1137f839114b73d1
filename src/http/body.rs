//! Request bodies: read whole, within the listener's size and time limits.

use http_body_util::{BodyExt as _, LengthLimitError, Limited};
use hyper::{
    Response, StatusCode,
    body::{Body as _, Bytes, Incoming},
};

use super::limits::ServerConfig;
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
}

impl BodyError {
    /// The status code that answers this error: 413, 408 or 400.
    pub fn status(&self) -> StatusCode {
        match self {
            BodyError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            BodyError::Timeout => StatusCode::REQUEST_TIMEOUT,
            BodyError::Read(_) => StatusCode::BAD_REQUEST,
        }
    }

    /// The error response for this error, with a JSON error body.
    pub fn response(&self) -> Response<Body> {
        error(self.status(), self.to_string())
    }
}

/// `1048576` → `1 MiB`, `16384` → `16 KiB`, `1000` → `1000 bytes`.
pub(super) fn human_size(bytes: usize) -> String {
    const KIB: usize = 1024;
    const MIB: usize = 1024 * KIB;
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else if bytes >= KIB && bytes.is_multiple_of(KIB) {
        format!("{} KiB", bytes / KIB)
    } else {
        format!("{bytes} bytes")
    }
}

/// Reads a whole request body, at most [`ServerConfig::body_limit`] bytes within
/// [`ServerConfig::body_timeout`].
///
/// A `Content-Length` over the limit is refused before anything is read (and before hyper
/// sends `100 Continue`); a chunked body is refused as soon as it passes the limit.
pub async fn read_body(body: Incoming, config: &ServerConfig) -> Result<Bytes, BodyError> {
    let limit = config.body_limit;
    // Hyper's size hint is exact when the request has a Content-Length.
    if body.size_hint().lower() > u64::try_from(limit).unwrap_or(u64::MAX) {
        return Err(BodyError::TooLarge { limit });
    }
    match tokio::time::timeout(config.body_timeout, Limited::new(body, limit).collect()).await {
        Err(_elapsed) => Err(BodyError::Timeout),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(err)) if err.downcast_ref::<LengthLimitError>().is_some() => {
            Err(BodyError::TooLarge { limit })
        }
        Ok(Err(err)) => Err(BodyError::Read(err.to_string())),
    }
}
