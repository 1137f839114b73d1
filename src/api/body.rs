//! Request bodies (R24): read within the limits, refused when nested too deeply, decoded.

use hyper::{Request, body::Incoming};
use serde::de::DeserializeOwned;

use super::state::{ApiError, ApiState};
use crate::http;

/// Reads and decodes a JSON body (R24): over the limit 413, too slow 408, malformed or of the
/// wrong shape 400 with serde's message.
pub(crate) async fn read_json<T: DeserializeOwned>(
    state: &ApiState,
    req: Request<Incoming>,
) -> Result<T, ApiError> {
    let bytes = http::read_body(req.into_body(), &state.server)
        .await
        .map_err(|e| {
            let response = e.response();
            ApiError::new(response.status(), e.to_string())
        })?;
    if json_depth(&bytes) > MAX_JSON_DEPTH {
        return Err(ApiError::bad_request(format!(
            "invalid request body: nested deeper than {MAX_JSON_DEPTH} levels"
        )));
    }
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request(format!("invalid request body: {e}")))
}

/// The deepest nesting of arrays and objects a request body may have. The operator's
/// Kubernetes client decodes objects with serde_json's limit of 128 levels, and a Mutation's
/// base sits deeper in a watch event or a list than in the request that made it: a body
/// nested close to that limit would be stored and then break every list of Mutations. A real
/// Deployment is about a dozen levels deep.
const MAX_JSON_DEPTH: usize = 64;

/// How deeply arrays and objects nest in JSON text (brackets inside strings do not count).
/// Malformed text gets a number too; the parser rejects it afterwards.
fn json_depth(bytes: &[u8]) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &b in bytes {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_depth_counts_brackets_outside_strings() {
        // R24
        assert_eq!(json_depth(b"1"), 0);
        assert_eq!(json_depth(br#"{"a":[1,{"b":[]}]}"#), 4);
        assert_eq!(json_depth(br#"{"a":"[[[{{{\"[["}"#), 1);
        assert_eq!(json_depth(br#"[[]][[[]]]"#), 3);
        assert_eq!(json_depth("[".repeat(100_000).as_bytes()), 100_000);
    }
}
