//! Request bodies (R24): read within the limits, refused when nested too deeply, decoded.

use hyper::body::Incoming;
use serde::de::DeserializeOwned;

use super::{error::ApiError, state::ApiState};
use crate::{connect::depth::deepest, http, variant::MAX_BASE_DEPTH};

/// Reads and decodes a JSON body (R24) of at most `limit` bytes, held in `held`
/// (R44): over the limit 413, too slow 408, more than the caller's share or the replica's
/// budget of buffered bytes 503, malformed or of the wrong shape 400 with serde's message.
pub(crate) async fn read_json<T: DeserializeOwned>(
    state: &ApiState,
    body: Incoming,
    limit: usize,
    held: &mut http::Reservation,
) -> Result<T, ApiError> {
    let bytes = http::read_body(body, limit, state.server.body_timeout, held)
        .await
        .map_err(|e| {
            let response = e.response();
            ApiError::new(response.status(), e.to_string())
        })?;
    if deepest(&bytes) > MAX_JSON_DEPTH {
        return Err(ApiError::bad_request(format!(
            "invalid request body: nested deeper than {MAX_JSON_DEPTH} levels"
        )));
    }
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request(format!("invalid request body: {e}")))
}

/// The deepest nesting of arrays and objects a request body may have: the deepest base the
/// operator accepts (`variant::MAX_BASE_DEPTH`; a real Deployment is about a dozen levels
/// deep), so what the API stores is never cut by the client's guard (`connect::depth`).
const MAX_JSON_DEPTH: usize = MAX_BASE_DEPTH;
