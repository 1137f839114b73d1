//! The answer of a request that failed: [`ApiError`], an HTTP status and a message, and what
//! an error of the Kubernetes API becomes (R24): the one place a failure gets its status code
//! and its `Retry-After`. Below the store, which refuses with it, and the API, which answers
//! with it.

use hyper::{Response, StatusCode};

use super::response::{Body, error};

/// The `Retry-After` of every 503 and 429 (seconds): starting, shutting down, the Kubernetes
/// API unreachable or busy, edits that kept conflicting. A device waits this long, then asks
/// again (R34).
pub const RETRY_AFTER_SECONDS: &str = "1";

/// A request's failure, as an HTTP status and a message for the client.
#[derive(Debug, Clone)]
pub struct ApiError(pub StatusCode, pub String);

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError(status, message.into())
    }
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }
    pub(crate) fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, message)
    }
    pub(crate) fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, message)
    }
    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }
    pub(crate) fn too_large(message: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, message)
    }
    pub(crate) fn response(self) -> Response<Body> {
        let retry = matches!(
            self.0,
            StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS
        );
        let mut response = error(self.0, self.1);
        if retry {
            response.headers_mut().insert(
                hyper::header::RETRY_AFTER,
                hyper::header::HeaderValue::from_static(RETRY_AFTER_SECONDS),
            );
        }
        if self.0 == StatusCode::UNAUTHORIZED
            && let Ok(value) = hyper::header::HeaderValue::from_str("Bearer")
        {
            response
                .headers_mut()
                .insert(hyper::header::WWW_AUTHENTICATE, value);
        }
        response
    }
}

impl From<ApiError> for crate::Error {
    /// A write the store refused or could not make, for a controller's error policy.
    fn from(err: ApiError) -> Self {
        crate::Error::Refused {
            code: err.0.as_u16(),
            message: err.1,
        }
    }
}

impl From<kube::Error> for ApiError {
    /// An error of the Kubernetes API: what the client sent that the server rejects is 400;
    /// the server asking to slow down (429) is passed on as 429; the rest is the server's or
    /// the network's, 502/503.
    fn from(err: kube::Error) -> Self {
        // What a controller meets in normal operation (`expected_api_error`): past the 404,
        // matched first below, a namespace being deleted.
        let terminating = crate::expected_api_error(&err);
        let status = match err {
            kube::Error::Api(status) => status,
            other => {
                tracing::warn!(error = %crate::error_chain(&other), "kubernetes api unreachable");
                return ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the Kubernetes API is unreachable",
                );
            }
        };
        let kube::core::Status { code, message, .. } = *status;
        match code {
            400 | 422 => {
                ApiError::bad_request(format!("rejected by the Kubernetes API: {message}"))
            }
            404 => ApiError::not_found(message),
            409 => ApiError::conflict(message),
            429 => {
                tracing::info!(message = %message, "the kubernetes api asks to slow down");
                ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    format!("the Kubernetes API is busy: {message}"),
                )
            }
            // The request conflicts with the namespace's deletion, and it is no fault of the
            // operator's or the server's.
            _ if terminating => {
                tracing::info!(message, "the namespace is being deleted");
                ApiError::conflict(message)
            }
            _ => {
                tracing::warn!(code, message = %message, "kubernetes api error");
                ApiError::new(
                    StatusCode::BAD_GATEWAY,
                    format!("kubernetes api: {message}"),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server_says(code: u16) -> ApiError {
        ApiError::from(kube::Error::Api(Box::new(
            kube::core::Status::failure("message of the server", "Reason").with_code(code),
        )))
    }

    /// R34: the server's 429 is a 429 (not a 502), and every 503 and 429 says
    /// when to come back.
    #[test]
    fn busy_and_unavailable_answers_say_when_to_retry() {
        let busy = server_says(429);
        assert_eq!(busy.0, StatusCode::TOO_MANY_REQUESTS);
        assert!(busy.1.contains("message of the server"), "{}", busy.1);
        for err in [
            busy,
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "starting"),
        ] {
            let status = err.0;
            let response = err.response();
            assert_eq!(response.status(), status);
            assert_eq!(
                response.headers().get(hyper::header::RETRY_AFTER),
                Some(&hyper::header::HeaderValue::from_static(
                    RETRY_AFTER_SECONDS
                )),
                "{status}"
            );
        }
        for (code, want) in [
            (500, StatusCode::BAD_GATEWAY),
            (400, StatusCode::BAD_REQUEST),
        ] {
            let err = server_says(code);
            assert_eq!(err.0, want, "{code}");
            assert!(
                err.response()
                    .headers()
                    .get(hyper::header::RETRY_AFTER)
                    .is_none()
            );
        }
    }

    // R24: the API server's answers by their code, a namespace being deleted by its cause,
    // and no answer at all.
    #[test]
    fn answers_of_the_api_server_map_by_code() {
        for (code, want) in [
            (400, StatusCode::BAD_REQUEST),
            (422, StatusCode::BAD_REQUEST),
            (404, StatusCode::NOT_FOUND),
            (409, StatusCode::CONFLICT),
            (403, StatusCode::BAD_GATEWAY),
            (503, StatusCode::BAD_GATEWAY),
        ] {
            let err = server_says(code);
            assert_eq!(err.0, want, "{code}");
            assert!(err.1.contains("message of the server"), "{code}: {}", err.1);
        }
        let mut status = kube::core::Status::failure("namespace ends", "Forbidden").with_code(403);
        status.details = serde_json::from_value(serde_json::json!({
            "causes": [{"reason": "NamespaceTerminating"}]
        }))
        .ok();
        let terminating = ApiError::from(kube::Error::Api(Box::new(status)));
        assert_eq!(terminating.0, StatusCode::CONFLICT);
        let unreachable = kube::Error::Service(Box::new(std::io::Error::other("refused")));
        assert_eq!(
            ApiError::from(unreachable).0,
            StatusCode::SERVICE_UNAVAILABLE
        );
    }
}
