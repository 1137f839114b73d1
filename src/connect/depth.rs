//! Nesting limits for JSON from the API server: a guard that keeps one deeply nested object
//! from breaking the decoding of every object listed or watched with it.
//!
//! kube decodes each response (a whole list page, or one watch event) with serde_json, which
//! refuses more than 128 levels of nested arrays and objects. A Mutation's base is
//! `x-kubernetes-preserve-unknown-fields`: the API server stores whatever nests up to 10,000
//! levels deep. One such object made the list page holding it undecodable, so the cache of
//! every owner stopped filling, for every namespace.
//!
//! [`Guard`] wraps the client's responses about the operator's own resources
//! (`/apis/neiam.org/...`) and replaces each array or object that opens deeper than
//! [`MAX_DEPTH`] with the string [`CUT`], as the bytes stream in: the page decodes, the other
//! objects are untouched, and the cut object's base is reported invalid in its own status
//! (`variant::MAX_BASE_DEPTH` lies well below this limit). Nothing is buffered: a body that
//! never nests that deeply passes through as it came.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll, ready},
};

use hyper::{
    Request, Response,
    body::{Body, Bytes, Frame, SizeHint},
};
use tower::{Layer, Service};

/// The deepest nesting of arrays and objects passed on in a response about the operator's
/// resources: below serde_json's 128 levels, above any base the operator accepts
/// (`variant::MAX_BASE_DEPTH`) wherever the base sits in a response (a list page adds four
/// levels).
pub const MAX_DEPTH: usize = 100;

/// What replaces an array or object that opens deeper than [`MAX_DEPTH`]: a JSON string.
pub const CUT: &str = "\"mutantops: cut here, nested deeper than 100 levels\"";

/// The path of every request about the operator's own resources.
const GUARDED_PATHS: &str = "/apis/neiam.org/";

/// Where JSON text stands, byte by byte: how deeply arrays and objects nest (brackets inside
/// strings do not count). Malformed text gets a depth too; its parser rejects it afterwards.
#[derive(Clone, Copy, Debug, Default)]
pub struct Nesting {
    depth: usize,
    in_string: bool,
    escaped: bool,
}

impl Nesting {
    /// Takes one byte; returns the depth of the array or object it opens, if it opens one.
    fn step(&mut self, b: u8) -> Option<usize> {
        if self.in_string {
            match (self.escaped, b) {
                (true, _) => self.escaped = false,
                (false, b'\\') => self.escaped = true,
                (false, b'"') => self.in_string = false,
                _ => {}
            }
            return None;
        }
        match b {
            b'"' => self.in_string = true,
            b'[' | b'{' => {
                self.depth += 1;
                return Some(self.depth);
            }
            b']' | b'}' => self.depth = self.depth.saturating_sub(1),
            _ => {}
        }
        None
    }
}

/// How deeply arrays and objects nest in JSON text.
pub fn deepest(bytes: &[u8]) -> usize {
    let mut nesting = Nesting::default();
    bytes
        .iter()
        .filter_map(|&b| nesting.step(b))
        .max()
        .unwrap_or(0)
}

/// Cuts every array or object that opens deeper than its limit out of a stream of JSON text
/// (one document, or one per line), chunk by chunk.
#[derive(Debug)]
pub struct Cutter {
    limit: usize,
    nesting: Nesting,
    /// The depth of the array or object being cut out, while one is.
    cutting: Option<usize>,
    /// How many arrays and objects were cut out.
    cuts: u64,
}

impl Cutter {
    /// A cutter of everything that opens deeper than `limit`.
    pub fn new(limit: usize) -> Self {
        Cutter {
            limit,
            nesting: Nesting::default(),
            cutting: None,
            cuts: 0,
        }
    }

    /// How many arrays and objects were cut out so far.
    pub fn cuts(&self) -> u64 {
        self.cuts
    }

    /// The next chunk of text, with what nests too deeply replaced by [`CUT`]; the chunk
    /// itself (no copy) when nothing in it is cut.
    pub fn cut(&mut self, chunk: Bytes) -> Bytes {
        let mut out: Option<Vec<u8>> = None;
        for (at, &b) in chunk.iter().enumerate() {
            let opened = self.nesting.step(b);
            let keep = match (self.cutting, opened) {
                (None, Some(depth)) if depth > self.limit => {
                    self.cutting = Some(depth);
                    self.cuts += 1;
                    out.get_or_insert_with(|| chunk[..at].to_vec())
                        .extend_from_slice(CUT.as_bytes());
                    false
                }
                (None, _) => true,
                (Some(depth), _) => {
                    if self.nesting.depth < depth && !self.nesting.in_string {
                        self.cutting = None; // this byte closed the cut array or object
                    }
                    false
                }
            };
            match (&mut out, keep) {
                (Some(out), true) => out.push(b),
                (None, false) => out = Some(chunk[..at].to_vec()),
                _ => {}
            }
        }
        out.map_or(chunk, Bytes::from)
    }
}

/// A response body with every array or object nested deeper than [`MAX_DEPTH`] cut out (when
/// guarded).
pub struct Guarded<B> {
    inner: B,
    cutter: Option<Cutter>,
}

impl<B> Guarded<B> {
    fn new(inner: B, guarded: bool) -> Self {
        Guarded {
            inner,
            cutter: guarded.then(|| Cutter::new(MAX_DEPTH)),
        }
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for Guarded<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        let frame = ready!(Pin::new(&mut this.inner).poll_frame(cx));
        let Some(cutter) = &mut this.cutter else {
            return Poll::Ready(frame);
        };
        Poll::Ready(frame.map(|frame| {
            frame.map(|frame| {
                frame.map_data(|data| {
                    let before = cutter.cuts();
                    let data = cutter.cut(data);
                    if cutter.cuts() > before {
                        tracing::debug!(
                            cuts = cutter.cuts(),
                            "cut JSON nested deeper than {MAX_DEPTH} levels from a response"
                        );
                    }
                    data
                })
            })
        }))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        match self.cutter {
            // a cut can make the body shorter or longer
            Some(_) => SizeHint::default(),
            None => self.inner.size_hint(),
        }
    }
}

/// The [`Layer`] of [`Guard`].
#[derive(Clone, Copy, Debug, Default)]
pub struct GuardLayer;

impl<S> Layer<S> for GuardLayer {
    type Service = Guard<S>;

    fn layer(&self, inner: S) -> Guard<S> {
        Guard { inner }
    }
}

/// Guards the bodies of responses about the operator's own resources (see the module docs).
#[derive(Clone, Debug)]
pub struct Guard<S> {
    inner: S,
}

impl<S, Req, Res> Service<Request<Req>> for Guard<S>
where
    S: Service<Request<Req>, Response = Response<Res>>,
    S::Future: Unpin,
{
    type Response = Response<Guarded<Res>>;
    type Error = S::Error;
    type Future = Guarding<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Req>) -> Self::Future {
        let guarded = request.uri().path().starts_with(GUARDED_PATHS);
        Guarding {
            inner: self.inner.call(request),
            guarded,
        }
    }
}

/// The response future of [`Guard`].
pub struct Guarding<F> {
    inner: F,
    guarded: bool,
}

impl<F, Res, E> Future for Guarding<F>
where
    F: Future<Output = Result<Response<Res>, E>> + Unpin,
{
    type Output = Result<Response<Guarded<Res>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let guarded = this.guarded;
        Pin::new(&mut this.inner)
            .poll(cx)
            .map_ok(|response| response.map(|body| Guarded::new(body, guarded)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut_all(limit: usize, chunks: &[&str]) -> (String, u64) {
        let mut cutter = Cutter::new(limit);
        let text: Vec<u8> = chunks
            .iter()
            .flat_map(|c| cutter.cut(Bytes::copy_from_slice(c.as_bytes())).to_vec())
            .collect();
        (String::from_utf8_lossy(&text).into_owned(), cutter.cuts())
    }

    // R46: the depth counts brackets outside strings only.
    #[test]
    fn depth_counts_brackets_outside_strings() {
        assert_eq!(deepest(b"1"), 0);
        assert_eq!(deepest(br#"{"a":[1,{"b":[]}]}"#), 4);
        assert_eq!(deepest(br#"{"a":"[[[{{{\"[["}"#), 1);
        assert_eq!(deepest(br#"{"a":"\\"}"#), 1);
        assert_eq!(deepest(br#"[[]][[[]]]"#), 3);
        assert_eq!(deepest("[".repeat(100_000).as_bytes()), 100_000);
    }

    // R46: text within the limit passes as it came, without a copy.
    #[test]
    fn text_within_the_limit_is_not_copied() {
        let mut cutter = Cutter::new(3);
        let chunk = Bytes::from_static(br#"{"a":[{"b":"[[[[[["}]}"#);
        let out = cutter.cut(chunk.clone());
        assert_eq!(out, chunk);
        assert_eq!(out.as_ptr(), chunk.as_ptr());
        assert_eq!(cutter.cuts(), 0);
    }

    // R46: what opens deeper than the limit becomes one string, the rest is kept, and
    // the result is JSON that decodes.
    #[test]
    fn what_nests_too_deeply_is_cut_out() {
        let (text, cuts) = cut_all(
            2,
            &[r#"{"a":{"b":{"c":[1,"]}",{"d":[]}]},"e":[[]]},"f":1}"#],
        );
        assert_eq!(text, format!(r#"{{"a":{{"b":{CUT},"e":{CUT}}},"f":1}}"#));
        assert_eq!(cuts, 2);
        let value: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert_eq!(value["f"], 1);
    }

    // R46: the state carries over chunk boundaries (inside strings, escapes and cuts),
    // and each line of a watch stream is cut on its own.
    #[test]
    fn cuts_carry_over_chunks_and_lines() {
        let deep = format!("{}{}", "[".repeat(150), "]".repeat(150));
        let line = format!(r#"{{"type":"ADDED","object":{{"x":"\"[","deep":{deep}}}}}"#);
        let stream = format!("{line}\n{line}\n{{\"ok\":[1]}}\n");
        let whole = cut_all(MAX_DEPTH, &[&stream]);
        for size in [1, 2, 7, 64] {
            let chunks: Vec<String> = stream
                .as_bytes()
                .chunks(size)
                .map(|c| String::from_utf8_lossy(c).into_owned())
                .collect();
            let refs: Vec<&str> = chunks.iter().map(String::as_str).collect();
            assert_eq!(cut_all(MAX_DEPTH, &refs), whole, "chunks of {size}");
        }
        let (text, cuts) = whole;
        assert_eq!(cuts, 2);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        for line in &lines {
            let value: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
            assert!(deepest(line.as_bytes()) <= MAX_DEPTH, "{value}");
        }
        assert_eq!(lines[2], r#"{"ok":[1]}"#);
        assert!(lines[0].contains(r#""x":"\"[""#), "{}", lines[0]);
    }
}
