//! The limits and timeouts of one listener.

use std::time::Duration;

/// Limits and timeouts of one listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerConfig {
    /// How long a client may take to send a complete request head (request line and headers).
    /// Also bounds how long an idle keep-alive connection stays open. Default 5 s.
    pub header_read_timeout: Duration,
    /// The largest request head accepted, in bytes; larger ones get 431. This is hyper's
    /// read buffer size, so values below 8 KiB are raised to 8 KiB. Default 16 KiB.
    pub max_header_bytes: usize,
    /// The largest request body [`read_body`](super::body::read_body) accepts, in bytes, from
    /// a caller without a smaller bound of its own. Default 1 MiB.
    pub body_limit: usize,
    /// How long [`read_body`](super::body::read_body) waits for the whole body. Default 10 s.
    pub body_timeout: Duration,
    /// The bytes of request bodies and answers a listener that uses a
    /// [`Budget`](super::Budget) holds for its callers at once, beyond
    /// [`FREE_BYTES`](super::budget::FREE_BYTES) each. Default 8 MiB.
    pub buffer_bytes: usize,
    /// What one caller may hold of [`ServerConfig::buffer_bytes`]. Default 2 MiB.
    pub buffer_share: usize,
    /// How long a client may leave what it is sent untaken once its socket backs up (a slow
    /// reader of a large answer): it is disconnected after that. Default 10 s.
    pub write_timeout: Duration,
    /// How long shutdown waits for in-flight requests before closing their connections.
    /// Default 10 s.
    pub drain_timeout: Duration,
    /// Whether connections are kept open for further requests. Default true.
    pub keep_alive: bool,
    /// The most connections open at once (see `conns.rs`). Default 256.
    pub max_connections: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            header_read_timeout: Duration::from_secs(5),
            max_header_bytes: 16 * 1024,
            body_limit: 1024 * 1024,
            body_timeout: Duration::from_secs(10),
            buffer_bytes: 8 * 1024 * 1024,
            buffer_share: 2 * 1024 * 1024,
            write_timeout: Duration::from_secs(10),
            drain_timeout: Duration::from_secs(10),
            keep_alive: true,
            max_connections: 256,
        }
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
