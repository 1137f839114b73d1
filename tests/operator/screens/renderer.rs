//! A renderer stand-in for the screen tests: an HTTP/1.1 server on this host's own address
//! (not loopback: the operator never asks a loopback endpoint) answering each path as the test
//! sets it, and counting the requests it gets per path.

use std::{
    collections::BTreeMap,
    net::{IpAddr, UdpSocket},
    sync::{Arc, Mutex},
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpListener,
};

/// What a path answers: a status, a content type and a body.
#[derive(Clone, Debug)]
pub struct Answer {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

impl Answer {
    /// A 200 picture of type `image/bmp`.
    pub fn bmp(body: &[u8]) -> Answer {
        Answer {
            status: 200,
            content_type: "image/bmp",
            body: body.to_vec(),
        }
    }
}

#[derive(Default)]
struct Shared {
    answers: BTreeMap<String, Answer>,
    hits: BTreeMap<String, u64>,
}

/// The running stand-in; it stops with the test's runtime.
#[derive(Clone)]
pub struct Renderer {
    pub ip: IpAddr,
    pub port: u16,
    shared: Arc<Mutex<Shared>>,
}

/// This host's address on its default route: no packet is sent to find it.
fn own_address() -> IpAddr {
    let socket = UdpSocket::bind("0.0.0.0:0").unwrap();
    socket
        .connect("10.255.255.1:9")
        .expect("the screen tests need a route off this host (a non-loopback address)");
    let ip = socket.local_addr().unwrap().ip();
    assert!(!ip.is_loopback(), "no non-loopback address: {ip}");
    ip
}

impl Renderer {
    pub async fn start() -> Renderer {
        let ip = own_address();
        let listener = TcpListener::bind((ip, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Mutex::new(Shared::default()));
        let serving = Arc::clone(&shared);
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let shared = Arc::clone(&serving);
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let text = String::from_utf8_lossy(&head);
                    let path = text.split(' ').nth(1).unwrap_or("/").to_owned();
                    let answer = {
                        let mut s = shared.lock().unwrap();
                        *s.hits.entry(path.clone()).or_default() += 1;
                        s.answers.get(&path).cloned()
                    };
                    let answer = answer.unwrap_or(Answer {
                        status: 404,
                        content_type: "text/plain",
                        body: b"no such screen".to_vec(),
                    });
                    let mut out = format!(
                        "HTTP/1.1 {} X\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        answer.status,
                        answer.content_type,
                        answer.body.len()
                    )
                    .into_bytes();
                    out.extend_from_slice(&answer.body);
                    let _ = stream.write_all(&out).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        Renderer { ip, port, shared }
    }

    /// Has `path` answer `answer` from now on.
    pub fn set(&self, path: &str, answer: Answer) {
        self.shared
            .lock()
            .unwrap()
            .answers
            .insert(path.to_owned(), answer);
    }

    /// How many requests `path` got.
    pub fn hits(&self, path: &str) -> u64 {
        self.shared
            .lock()
            .unwrap()
            .hits
            .get(path)
            .copied()
            .unwrap_or(0)
    }
}
