//! One fetch of a variant's screen from its renderer (R53): the address from the EndpointSlices
//! of the variant's own Service (a ready endpoint, on the port the owner named), a plain GET of
//! the owner's path with the Service's name as Host, no redirect followed, the whole exchange
//! within the owner's timeout and the body read up to `maxBytes` and not a byte further.

use std::net::{IpAddr, SocketAddr};

use http_body_util::{BodyExt, Empty};
use hyper::{Request, body::Bytes, header};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::{Api, Client, api::ListParams};

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

/// A ready endpoint of `service` on port `port_name`, from its EndpointSlices.
async fn endpoint(
    client: &Client,
    ns: &str,
    service: &str,
    port_name: &str,
) -> Result<SocketAddr, Failed> {
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
    let params = ListParams::default().labels(&format!("kubernetes.io/service-name={service}"));
    let slices = api.list(&params).await.map_err(|e| {
        (
            Failure::NoEndpoint,
            format!("the EndpointSlices of Service {service} could not be read: {e}"),
        )
    })?;
    for slice in &slices.items {
        let port = slice
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref().unwrap_or_default() == port_name)
            .and_then(|p| p.port)
            .and_then(|p| u16::try_from(p).ok());
        let Some(port) = port else { continue };
        let ready = slice
            .endpoints
            .iter()
            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false));
        let address = ready
            .flat_map(|e| e.addresses.iter())
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

/// GET `path` from `at`, read within `policy`'s bounds.
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
    let stream = tokio::net::TcpStream::connect(at)
        .await
        .map_err(|e| unreachable(&e))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| unreachable(&e))?;
    // The connection is driven here, and dropped with this future (the timeout).
    let driven = tokio::spawn(async move {
        let _ = connection.await;
    });
    let _abort = AbortOnDrop(driven);
    let request = Request::get(path)
        .header(header::HOST, host)
        .header(header::ACCEPT, policy.types.join(", "))
        .header(
            header::USER_AGENT,
            concat!("mutantops/", env!("CARGO_PKG_VERSION")),
        )
        .body(Empty::<Bytes>::new())
        .map_err(|e| unreachable(&e))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| unreachable(&e))?;
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let declared = response
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    // What the head says is judged before a byte of the body is read.
    let length = declared.unwrap_or(1).min(policy.max_bytes + 1);
    judge(policy, status, content_type.as_deref(), length)?;
    let mut body = response.into_body();
    let mut bytes = Vec::with_capacity(declared.unwrap_or(0).min(policy.max_bytes));
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| unreachable(&e))?;
        if let Ok(data) = frame.into_data() {
            if bytes.len() + data.len() > policy.max_bytes {
                judge(
                    policy,
                    status,
                    content_type.as_deref(),
                    policy.max_bytes + 1,
                )?;
            }
            bytes.extend_from_slice(&data);
        }
    }
    let media = judge(policy, status, content_type.as_deref(), bytes.len())?;
    Ok(Fetched { bytes, media })
}

/// Aborts the task driving a connection when the fetch ends, however it ends.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
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
