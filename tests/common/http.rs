//! The one raw HTTP/1.1 client of the tests (the crate's own unit tests of the server loop
//! include this file too), over a plain TCP stream: one request per connection
//! (`Connection: close`) with [`request`] or [`Request`], or any bytes with [`exchange`], and
//! the parsers of what comes back ([`parse`] for the first response, [`responses`] for every
//! response of a pipelined exchange), so the operator's API is tested exactly as bytes go over
//! the wire.

use std::time::Duration;

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

/// A response: status code, headers (lower-case names) and body.
#[derive(Debug, Clone)]
pub struct Reply {
    /// `HTTP/1.1` or `HTTP/1.0`.
    pub version: String,
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {:?}", self.body))
    }

    /// The string `field` of each element of the body, a JSON array: the names of a list of
    /// Mutations, the labels of a list of variants. Panics on an element without it.
    pub fn each(&self, field: &str) -> Vec<String> {
        let body = self.json();
        let items = body
            .as_array()
            .unwrap_or_else(|| panic!("body is not a JSON array: {:?}", self.body));
        items
            .iter()
            .map(|item| match item[field].as_str() {
                Some(value) => value.to_string(),
                None => panic!("no string {field:?} in {item}"),
            })
            .collect()
    }

    /// The `error` of the body, a JSON object (empty when it has none).
    pub fn error(&self) -> String {
        self.json()["error"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// Asserts that the answer is `status` and that its error names each of `words`.
    pub fn assert_refused(&self, status: u16, words: &[&str]) {
        assert_eq!(self.status, status, "{self:?}");
        let error = self.error();
        for word in words {
            assert!(
                error.contains(word),
                "{word:?} not in the error of {self:?}"
            );
        }
    }

    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Sends `method path` with an optional bearer token and JSON body to 127.0.0.1:`port`.
pub async fn request(
    port: u16,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> Reply {
    Request::new(method, path, token, body).send(port).await
}

/// One request: `method path`, an optional bearer token and JSON body, and extra headers;
/// [`Request::bytes`] writes it (`Connection: close`), [`Request::send`] sends it.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub token: Option<&'a str>,
    pub headers: &'a [(&'a str, &'a str)],
    pub body: Option<&'a str>,
}

impl<'a> Request<'a> {
    /// A request without extra headers.
    pub fn new(
        method: &'a str,
        path: &'a str,
        token: Option<&'a str>,
        body: Option<&'a str>,
    ) -> Self {
        Request {
            method,
            path,
            token,
            headers: &[],
            body,
        }
    }

    /// The same request with extra `headers`.
    pub fn headers(self, headers: &'a [(&'a str, &'a str)]) -> Self {
        Request { headers, ..self }
    }

    /// The bytes of the request to 127.0.0.1:`port`, as [`Request::send`] sends them.
    pub fn bytes(&self, port: u16) -> Vec<u8> {
        let method = self.method;
        let mut head = format!(
            "{method} {} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n",
            self.path
        );
        if let Some(token) = self.token {
            head.push_str(&format!("Authorization: Bearer {token}\r\n"));
        }
        for (name, value) in self.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        let body = self.body.unwrap_or("");
        if !body.is_empty() || matches!(method, "POST" | "PATCH" | "PUT") {
            head.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                body.len()
            ));
        }
        head.push_str("\r\n");
        let mut raw = head.into_bytes();
        raw.extend_from_slice(body.as_bytes());
        raw
    }

    /// Sends the request to 127.0.0.1:`port` and parses the response.
    pub async fn send(&self, port: u16) -> Reply {
        send_raw(port, &self.bytes(port)).await
    }

    /// [`Request::send`] from loopback address `source` (127.0.0.x), as another client
    /// machine would.
    pub async fn send_from(&self, source: std::net::Ipv4Addr, port: u16) -> Reply {
        send_raw_from(source, port, &self.bytes(port)).await
    }
}

/// Sends raw bytes and parses the (first) response.
pub async fn send_raw(port: u16, raw: &[u8]) -> Reply {
    let text = exchange(port, raw).await;
    parse(&text).unwrap_or_else(|| panic!("not an HTTP response: {text:?}"))
}

/// [`send_raw`] from loopback address `source` (127.0.0.x), as another client machine would.
pub async fn send_raw_from(source: std::net::Ipv4Addr, port: u16, raw: &[u8]) -> Reply {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind((source, 0).into()).unwrap();
    let stream = socket.connect(([127, 0, 0, 1], port).into()).await.unwrap();
    let text = exchange_on(stream, raw).await;
    parse(&text).unwrap_or_else(|| panic!("not an HTTP response: {text:?}"))
}

/// Sends raw bytes and returns everything the server sent until it closed the connection.
pub async fn exchange(port: u16, raw: &[u8]) -> String {
    let stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    exchange_on(stream, raw).await
}

/// [`exchange`] on a connected stream.
async fn exchange_on(mut stream: TcpStream, raw: &[u8]) -> String {
    // A server that refuses the request early (413 on Content-Length) answers and closes while
    // the rest is still being written: the write then fails, and the answer is still there to
    // read (up to a reset, which can cut it short: then what arrived is what counts).
    let written = stream.write_all(raw).await;
    let (out, read) = read_until_closed(&mut stream, Duration::from_secs(30)).await;
    if out.is_empty() {
        written.unwrap();
        read.unwrap();
    }
    String::from_utf8_lossy(&out).to_string()
}

/// Reads what arrives on `stream` until the server closes it: the bytes, and how the reading
/// ended (an error such as a reset after an early answer). Panics after `limit`.
pub async fn read_until_closed(
    stream: &mut TcpStream,
    limit: Duration,
) -> (Vec<u8>, std::io::Result<()>) {
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    let read = tokio::time::timeout(limit, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) => return Ok(()),
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) => return Err(e),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the server must answer and close within {limit:?}"));
    (out, read)
}

/// A response head: version, status, headers (lower-case names) and where the body starts.
type Head = (String, u16, Vec<(String, String)>, usize);

/// The response head at the front of `raw`.
fn head(raw: &[u8]) -> Option<Head> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..end]).ok()?;
    let mut lines = head.split("\r\n");
    let mut status_line = lines.next()?.splitn(3, ' ');
    let version = status_line.next()?.to_string();
    if !version.starts_with("HTTP/1.") {
        return None;
    }
    let status = status_line.next()?.parse().ok()?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Some((version, status, headers, end + 4))
}

fn content_length(headers: &[(String, String)]) -> Option<usize> {
    headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
}

/// Parses one response (head and a Content-Length body) off the front of `text`; a body cut
/// short (a reset after an early answer) is what arrived.
pub fn parse(text: &str) -> Option<Reply> {
    let (version, status, headers, start) = head(text.as_bytes())?;
    let rest = text.get(start..)?;
    let length = content_length(&headers).unwrap_or(rest.len());
    Some(Reply {
        version,
        status,
        body: rest.get(..length).unwrap_or(rest).to_string(),
        headers,
    })
}

/// Parses every complete response in `raw`, in order (bodies by Content-Length; 204 and 1xx
/// have none; without a length the body runs to the end). Panics on bytes that are not a
/// response, or a truncated one.
pub fn responses(raw: &[u8]) -> Vec<Reply> {
    let mut out = Vec::new();
    let mut rest = raw;
    while !rest.is_empty() {
        let shown = || {
            String::from_utf8_lossy(rest)
                .chars()
                .take(600)
                .collect::<String>()
        };
        let (version, status, headers, start) =
            head(rest).unwrap_or_else(|| panic!("not a complete response head: {:?}", shown()));
        let length = match (status, content_length(&headers)) {
            (204 | 100..=199, _) => 0,
            (_, Some(length)) => length,
            (_, None) => rest.len() - start,
        };
        assert!(
            rest.len() >= start + length,
            "truncated body: {:?}",
            shown()
        );
        out.push(Reply {
            version,
            status,
            headers,
            body: String::from_utf8_lossy(&rest[start..start + length]).to_string(),
        });
        rest = &rest[start + length..];
    }
    out
}
