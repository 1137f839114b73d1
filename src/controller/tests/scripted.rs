//! A scripted API server for the controller's tests: a `kube::Client` whose every request is
//! noted (`METHOD path?query [content type]`, and its body) and answered from a script, with
//! no cluster. Either each request gets the next answer whatever it asks ([`Server::new`]),
//! or the first answer scripted for its method and path ([`Server::routed`]), so that a test
//! scripts what each kind of request gets and asserts the order of the requests separately.

use std::sync::{Arc, Mutex, PoisonError};

use http_body_util::{BodyExt as _, Full};
use hyper::{Request, Response, body::Bytes};
use kube::Client;
use serde_json::{Value, json};

/// One request as the server saw it.
#[derive(Clone, Debug)]
pub struct Asked {
    /// `METHOD path?query [content type]`.
    pub line: String,
    /// Its body, as JSON; `null` when it had none or not JSON.
    pub body: Value,
}

/// What an answer says.
#[derive(Clone, Debug)]
pub enum Reply {
    /// This status code and JSON body.
    Json(u16, Value),
    /// This status code and the request's own body, as the API server would store it: with a
    /// uid and a resourceVersion added to its metadata.
    Echo(u16),
}

/// An answer of the script: for the first request of `method` and `path` (of any, when
/// `None`; a path ending in `*`, of any path it begins) that comes, or for each of them
/// (`every`).
#[derive(Clone, Debug)]
pub struct Route {
    method: Option<String>,
    path: Option<String>,
    reply: Reply,
    every: bool,
}

/// The answer `reply` for the next request `method path` (the path without its query).
pub fn on(method: &str, path: impl Into<String>, reply: Reply) -> Route {
    Route {
        method: Some(method.to_owned()),
        path: Some(path.into()),
        reply,
        every: false,
    }
}

impl Route {
    /// The same answer for every such request, not only the next one.
    pub fn every(self) -> Route {
        Route {
            every: true,
            ..self
        }
    }

    fn fits(&self, method: &str, path: &str) -> bool {
        let fits_path = |p: &str| match p.strip_suffix('*') {
            Some(prefix) => path.starts_with(prefix),
            None => p == path,
        };
        self.method.as_deref().is_none_or(|m| m == method)
            && self.path.as_deref().is_none_or(fits_path)
    }
}

/// A scripted API server; clones share the script and what was asked.
#[derive(Clone, Default)]
pub struct Server {
    script: Arc<Mutex<Vec<Route>>>,
    asked: Arc<Mutex<Vec<Asked>>>,
}

impl Server {
    /// A server where each request gets the next of `answers` (status code and JSON body),
    /// whatever it asks.
    pub fn new(answers: Vec<(u16, Value)>) -> (Server, Client) {
        let script = answers.into_iter().map(|(code, body)| Route {
            method: None,
            path: None,
            reply: Reply::Json(code, body),
            every: false,
        });
        Server::routed(script.collect())
    }

    /// A server where each request gets the first of `routes` for its method and path; one
    /// that none fits gets 599.
    pub fn routed(routes: Vec<Route>) -> (Server, Client) {
        let server = Server::default();
        server.then(routes);
        let serving = server.clone();
        let service = tower::service_fn(move |request: Request<kube::client::Body>| {
            let serving = serving.clone();
            async move { serving.answer(request).await }
        });
        (server, Client::new(service, "team"))
    }

    /// Adds `routes` to the script, after those not used yet.
    pub fn then(&self, routes: Vec<Route>) {
        self.script
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(routes);
    }

    /// Forgets the answers scripted and not used yet.
    pub fn clear(&self) {
        self.script
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    async fn answer(
        &self,
        request: Request<kube::client::Body>,
    ) -> Result<Response<Full<Bytes>>, hyper::http::Error> {
        let (parts, body) = request.into_parts();
        let kind = parts
            .headers
            .get(hyper::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let line = format!("{} {} [{kind}]", parts.method, parts.uri);
        let bytes = body
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        let reply = {
            let mut script = self.script.lock().unwrap_or_else(PoisonError::into_inner);
            let method = parts.method.as_str();
            let found = script.iter().position(|r| r.fits(method, parts.uri.path()));
            match found {
                Some(at) if script[at].every => Some(script[at].reply.clone()),
                Some(at) => Some(script.remove(at).reply),
                None => None,
            }
        };
        let (code, answer) = match reply {
            Some(Reply::Json(code, answer)) => (code, answer),
            Some(Reply::Echo(code)) => (code, stored(&body)),
            None => (599, json!({"unscripted": line})),
        };
        self.asked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Asked { line, body });
        Response::builder()
            .status(code)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(answer.to_string())))
    }

    /// Every request so far, in order, as `METHOD path?query [content type]`.
    pub fn asked(&self) -> Vec<String> {
        self.requests().into_iter().map(|a| a.line).collect()
    }

    /// Every request so far, in order, with its body.
    pub fn requests(&self) -> Vec<Asked> {
        self.asked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The requests so far, forgotten: the next call starts from none.
    pub fn take(&self) -> Vec<Asked> {
        std::mem::take(&mut *self.asked.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Whether every answer scripted for one request was used (those for `every` request
    /// need not be).
    pub fn all_answered(&self) -> bool {
        let script = self.script.lock().unwrap_or_else(PoisonError::into_inner);
        script.iter().all(|r| r.every)
    }
}

/// `body` as the API server answers a write of it: with a uid and a resourceVersion.
fn stored(body: &Value) -> Value {
    let mut stored = body.clone();
    if let Some(meta) = stored.get_mut("metadata").and_then(Value::as_object_mut) {
        let name = meta.get("name").and_then(Value::as_str).unwrap_or("");
        meta.insert("uid".into(), format!("uid-of-{name}").into());
        meta.insert("resourceVersion".into(), "1".into());
    }
    stored
}

/// A `Status` answer of the API server: `code`, `reason` and the field `causes`, about
/// `web-a`.
pub fn status(code: u16, reason: &str, causes: Value) -> (u16, Value) {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("the server says {reason}"), "reason": reason, "code": code,
        "details": {"name": "web-a", "causes": causes},
    });
    (code, body)
}
