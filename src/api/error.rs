//! The handlers' error type: [`ApiError`] (an HTTP status and a message, `http::error`, which
//! the store refuses with too), and the handlers' result.

use hyper::{Response, StatusCode};

use super::auth::UNAUTHORIZED;
pub use crate::http::ApiError;
use crate::http::Body;

impl ApiError {
    /// 401, with the body every refused credential gets.
    pub(crate) fn unauthorized() -> Self {
        Self::new(StatusCode::UNAUTHORIZED, UNAUTHORIZED)
    }
}

/// The handler result.
pub type ApiResult = Result<Response<Body>, ApiError>;
