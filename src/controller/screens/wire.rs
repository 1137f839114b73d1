//! The renderer's answer as bytes on the wire (R53): its head, how its body is framed, and a
//! chunked body taken apart, each bounded. Pure: [`super::fetch`] reads the socket and hands the
//! bytes here. One GET per connection (`Connection: close`), so an answer framed by neither a
//! length nor chunks ends where the renderer closes.

/// The most bytes a head may take (status line and headers).
pub const HEAD_MAX: usize = 16 * 1024;

/// What a renderer's head says.
#[derive(Debug, PartialEq, Eq)]
pub struct Head {
    /// The status code.
    pub status: u16,
    /// `Content-Type`, if given.
    pub content_type: Option<String>,
    /// How the body is framed.
    pub framing: Framing,
    /// The head's length: the body starts here.
    pub len: usize,
}

/// How a body ends.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum Framing {
    /// After this many bytes (`Content-Length`).
    Length(usize),
    /// After the last chunk (`Transfer-Encoding: chunked`).
    Chunked,
    /// Where the renderer closes the connection.
    Close,
    /// Nothing follows the head (a 1xx, 204 or 304, RFC 9112 6.3).
    None,
}

/// Why bytes are not an answer.
#[derive(Debug, PartialEq, Eq)]
pub enum WireError {
    /// More than [`HEAD_MAX`] bytes without the end of a head.
    HeadTooLarge,
    /// Not an HTTP/1.x answer, in words.
    Malformed(String),
    /// A chunked body over the bound given.
    TooLarge,
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::HeadTooLarge => write!(f, "a head of more than {HEAD_MAX} bytes"),
            WireError::Malformed(why) => write!(f, "nothing valid as HTTP/1.x ({why})"),
            WireError::TooLarge => write!(f, "a body over the bound"),
        }
    }
}

/// The head at the start of `buf`: `Ok(None)` while it is incomplete.
pub fn head(buf: &[u8]) -> Result<Option<Head>, WireError> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut response = httparse::Response::new(&mut headers);
    let len = match response.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() > HEAD_MAX => {
            return Err(WireError::HeadTooLarge);
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(WireError::Malformed(e.to_string())),
    };
    let status = response.code.unwrap_or(0);
    let mut content_type = None;
    let mut length: Option<usize> = None;
    let mut chunked = false;
    for h in response.headers.iter() {
        let value = std::str::from_utf8(h.value)
            .map_err(|_| WireError::Malformed(format!("header {} is not text", h.name)))?
            .trim();
        if h.name.eq_ignore_ascii_case("content-type") {
            content_type = Some(value.to_string());
        } else if h.name.eq_ignore_ascii_case("content-length") {
            let n = value
                .parse::<usize>()
                .map_err(|_| WireError::Malformed(format!("Content-Length {value:?}")))?;
            if length.is_some_and(|l| l != n) {
                return Err(WireError::Malformed("two Content-Lengths".to_string()));
            }
            length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value
                .rsplit(',')
                .next()
                .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"));
            if !chunked {
                return Err(WireError::Malformed(format!("Transfer-Encoding {value:?}")));
            }
        }
    }
    let framing = if (100..200).contains(&status) || status == 204 || status == 304 {
        Framing::None
    } else if chunked {
        Framing::Chunked
    } else {
        length.map_or(Framing::Close, Framing::Length)
    };
    Ok(Some(Head {
        status,
        content_type,
        framing,
        len,
    }))
}

/// The body of a chunked answer in `raw` (the bytes after the head): `Ok(None)` while its last
/// chunk has not come; [`WireError::TooLarge`] as soon as its data is over `max` bytes.
/// Trailers after the last chunk are not read.
pub fn dechunk(raw: &[u8], max: usize) -> Result<Option<Vec<u8>>, WireError> {
    let mut spans = Vec::new();
    let (mut at, mut total) = (0, 0usize);
    loop {
        let Some(end) = raw[at..].windows(2).position(|w| w == b"\r\n") else {
            return if raw.len() - at > 1024 {
                Err(WireError::Malformed(
                    "a chunk size line over 1 KiB".to_string(),
                ))
            } else {
                Ok(None)
            };
        };
        let line = &raw[at..at + end];
        let digits = line.split(|b| *b == b';').next().unwrap_or_default();
        let size = std::str::from_utf8(digits)
            .ok()
            .map(str::trim)
            .filter(|d| !d.is_empty() && d.len() <= 16)
            .and_then(|d| usize::from_str_radix(d, 16).ok())
            .ok_or_else(|| {
                WireError::Malformed("a chunk size that is no hex number".to_string())
            })?;
        at += end + 2;
        if size == 0 {
            let mut body = Vec::with_capacity(total);
            for (from, to) in spans {
                body.extend_from_slice(&raw[from..to]);
            }
            return Ok(Some(body));
        }
        total = total.saturating_add(size);
        if total > max {
            return Err(WireError::TooLarge);
        }
        if raw.len() < at + size + 2 {
            return Ok(None);
        }
        if &raw[at + size..at + size + 2] != b"\r\n" {
            return Err(WireError::Malformed(
                "a chunk not ended by CRLF".to_string(),
            ));
        }
        spans.push((at, at + size));
        at += size + 2;
    }
}

#[cfg(test)]
mod tests;
