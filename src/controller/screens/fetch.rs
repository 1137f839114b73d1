//! One fetch of a variant's screen from its renderer (R53): the address from the EndpointSlices
//! of the variant's own Service (a ready endpoint, on the port the owner named), a plain GET of
//! the owner's path with the Service's name as Host, no redirect followed, the whole exchange
//! within the owner's timeout and the body read up to `maxBytes` and not a byte further.

use std::net::{IpAddr, SocketAddr};

use kube::Client;
use serde::Deserialize;
use tokio::net::TcpStream;

use super::wire::{self, Framing, WireError};
use crate::variant::screen::{Failure, ScreenPolicy, judge};

/// A picture the renderer answered, as kept.
pub struct Fetched {
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// Its media type, lower case, without parameters.
    pub media: String,
}

/// What a failed fetch says: why, and in words.
pub type Failed = (Failure, String);

/// Fetches `path` from a ready endpoint of Service `service` in `ns`, on its port named
/// `port_name`, under `policy`.
pub async fn fetch(
    client: &Client,
    ns: &str,
    service: &str,
    port_name: &str,
    path: &str,
    policy: &ScreenPolicy,
) -> Result<Fetched, Failed> {
    let at = endpoint(client, ns, service, port_name).await?;
    let host = format!("{service}.{ns}.svc");
    match tokio::time::timeout(policy.timeout, get(at, &host, path, policy)).await {
        Ok(answer) => answer,
        Err(_) => Err((
            Failure::Timeout,
            format!(
                "the renderer at {at} did not answer {path} within {}s (spec.screen.timeout)",
                policy.timeout.as_secs()
            ),
        )),
    }
}

/// The parts of a list of EndpointSlices the fetch reads: decoding these alone keeps the
/// decoder of the whole EndpointSlice type out of the binary. Go writes an empty list as
/// `null`, so every list is optional.
#[derive(Deserialize)]
struct Slices {
    items: Option<Vec<Slice>>,
}

#[derive(Deserialize)]
struct Slice {
    endpoints: Option<Vec<Endpoint>>,
    ports: Option<Vec<SlicePort>>,
}

#[derive(Deserialize)]
struct Endpoint {
    addresses: Option<Vec<String>>,
    conditions: Option<Conditions>,
}

#[derive(Deserialize)]
struct Conditions {
    ready: Option<bool>,
}

#[derive(Deserialize)]
struct SlicePort {
    name: Option<String>,
    port: Option<i32>,
}

/// A ready endpoint of `service` on port `port_name`, from its EndpointSlices.
async fn endpoint(
    client: &Client,
    ns: &str,
    service: &str,
    port_name: &str,
) -> Result<SocketAddr, Failed> {
    let unread = |e: &dyn std::fmt::Display| {
        (
            Failure::NoEndpoint,
            format!("the EndpointSlices of Service {service} could not be read: {e}"),
        )
    };
    // `service` is a Service's name, a DNS label: nothing in it needs escaping.
    let list = hyper::Request::get(format!(
        "/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3D{service}"
    ))
    .body(Vec::new())
    .map_err(|e| unread(&e))?;
    let slices: Slices = client.request(list).await.map_err(|e| unread(&e))?;
    for slice in slices.items.iter().flatten() {
        let port = slice
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref().unwrap_or_default() == port_name)
            .and_then(|p| p.port)
            .and_then(|p| u16::try_from(p).ok());
        let Some(port) = port else { continue };
        let address = slice
            .endpoints
            .iter()
            .flatten()
            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
            .flat_map(|e| e.addresses.iter().flatten())
            .filter_map(|a| a.parse::<IpAddr>().ok())
            .find(|ip| asked(*ip));
        if let Some(ip) = address {
            return Ok(SocketAddr::new(ip, port));
        }
    }
    Err((
        Failure::NoEndpoint,
        format!(
            "Service {service} has no ready endpoint on the screen's port (asleep, starting or failing)"
        ),
    ))
}

/// Whether the operator asks `ip` for a screen: a pod's address, never its own loopback, a
/// link-local address (a cloud's metadata service), an unspecified or a multicast one.
fn asked(ip: IpAddr) -> bool {
    let link_local = match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
    };
    !(ip.is_loopback() || ip.is_unspecified() || ip.is_multicast() || link_local)
}

/// GET `path` from `at`, read within `policy`'s bounds: one request on a connection of its
/// own, the answer taken apart by [`wire`] (HTTP/1.x: a length, chunks, or to the close).
async fn get(
    at: SocketAddr,
    host: &str,
    path: &str,
    policy: &ScreenPolicy,
) -> Result<Fetched, Failed> {
    let unreachable = |e: &dyn std::fmt::Display| {
        (
            Failure::Unreachable,
            format!("the renderer at {at} could not be reached: {e}"),
        )
    };
    let malformed = |e: &dyn std::fmt::Display| {
        (
            Failure::Status,
            format!("the renderer at {at} answered {e}"),
        )
    };
    let stream = TcpStream::connect(at).await.map_err(|e| unreachable(&e))?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: {}\r\nUser-Agent: mutantops/{}\r\n\
         Connection: close\r\n\r\n",
        policy.types.join(", "),
        env!("CARGO_PKG_VERSION")
    );
    write_all(&stream, request.as_bytes())
        .await
        .map_err(|e| unreachable(&e))?;
    let mut buf = Vec::with_capacity(8 * 1024);
    let head = loop {
        if let Some(head) = wire::head(&buf).map_err(|e| malformed(&e))? {
            break head;
        }
        if read_some(&stream, &mut buf, wire::HEAD_MAX + 1)
            .await
            .map_err(|e| unreachable(&e))?
            == 0
        {
            return Err(malformed(&"no head before it closed"));
        }
    };
    let content_type = head.content_type.as_deref();
    // What the head says is judged before a byte of the body is read.
    let declared = match head.framing {
        Framing::Length(n) => n.min(policy.max_bytes + 1),
        Framing::None => 0,
        Framing::Chunked | Framing::Close => 1,
    };
    judge(policy, head.status, content_type, declared)?;
    let max = policy.max_bytes;
    let too_large = || judge(policy, head.status, content_type, max + 1).map(|_| Vec::new());
    buf.drain(..head.len);
    let bytes = match head.framing {
        Framing::None => Vec::new(),
        Framing::Length(n) => {
            while buf.len() < n {
                if read_some(&stream, &mut buf, n)
                    .await
                    .map_err(|e| unreachable(&e))?
                    == 0
                {
                    return Err(malformed(&format!("{} of its {n} bytes", buf.len())));
                }
            }
            buf.truncate(n);
            buf
        }
        Framing::Close => loop {
            if buf.len() > max {
                break too_large()?;
            }
            if read_some(&stream, &mut buf, max + 1)
                .await
                .map_err(|e| unreachable(&e))?
                == 0
            {
                break buf;
            }
        },
        Framing::Chunked => loop {
            match wire::dechunk(&buf, max) {
                Ok(Some(body)) => break body,
                Err(WireError::TooLarge) => break too_large()?,
                Err(e) => return Err(malformed(&e)),
                // The chunks' own lines cost at most 1 KiB each beside their data.
                Ok(None) if buf.len() > 2 * max + 64 * 1024 => break too_large()?,
                Ok(None) => {}
            }
            if read_some(&stream, &mut buf, 2 * max + 64 * 1024 + 1)
                .await
                .map_err(|e| unreachable(&e))?
                == 0
            {
                return Err(malformed(&"a chunked body cut short"));
            }
        },
    };
    let media = judge(policy, head.status, content_type, bytes.len())?;
    Ok(Fetched { bytes, media })
}

/// Reads what has come into `buf`, never past `limit` bytes in all: how many were read (0 at
/// the end of the stream).
async fn read_some(stream: &TcpStream, buf: &mut Vec<u8>, limit: usize) -> std::io::Result<usize> {
    let room = limit.saturating_sub(buf.len()).clamp(1, 64 * 1024);
    let from = buf.len();
    buf.resize(from + room, 0);
    let read = loop {
        stream.readable().await?;
        match stream.try_read(&mut buf[from..]) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            read => break read,
        }
    };
    buf.truncate(from + *read.as_ref().unwrap_or(&0));
    read
}

/// Writes all of `bytes`.
async fn write_all(stream: &TcpStream, mut bytes: &[u8]) -> std::io::Result<()> {
    while !bytes.is_empty() {
        stream.writable().await?;
        match stream.try_write(bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_pod_addresses_are_asked() {
        for ip in ["10.42.0.7", "192.168.1.20", "fd00::7"] {
            assert!(asked(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "127.0.0.1",
            "::1",
            "169.254.169.254",
            "fe80::1",
            "0.0.0.0",
            "224.0.0.1",
        ] {
            assert!(!asked(ip.parse().unwrap()), "{ip}");
        }
    }
}
