//! Whom a request is from (R34, R44): the peer of its connection, or, when that peer is a
//! trusted proxy (`MUTANT_API_TRUSTED_PROXIES`), the client the proxy names. Shares, budgets
//! and logs key on this address, so that the boards behind one proxy (Traefik, k3s'
//! ServiceLB) are told apart, and a client cannot name itself: only a trusted peer's headers
//! are read at all.
//!
//! The proxy's word is `X-Forwarded-For` (what Traefik, ingress-nginx and Envoy write, and
//! what Traefik drops when an untrusted client sends it), else `Forwarded`'s `for=` (RFC
//! 7239). Each proxy appends the address it received the request from, so the list is read
//! from its right end: the right-most address that is not itself a trusted proxy is the
//! client; when every one is trusted (a pod of the cluster calling through Traefik), the
//! left-most. A header that does not parse (an obfuscated `for=_hidden`, `unknown`, garbage)
//! is never an error: the request is the peer's.

use std::net::IpAddr;

use hyper::HeaderMap;

use crate::config::TrustedProxies;

/// The client address of a request (the peer's, or the one a trusted proxy names), in every
/// request's extensions (set by `http::serve`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Client(pub IpAddr);

/// `X-Forwarded-For`.
const X_FORWARDED_FOR: &str = "x-forwarded-for";

/// The most addresses read from a proxy's headers: more hops than any real chain has, and a
/// bound on the work a request head can ask for.
const MAX_HOPS: usize = 32;

/// The client of a request that came from `peer` with `headers`, `trusted` naming the proxies.
pub fn client(peer: IpAddr, headers: &HeaderMap, trusted: &TrustedProxies) -> IpAddr {
    let peer = peer.to_canonical();
    if !trusted.trusts(peer) {
        return peer;
    }
    let hops = if headers.contains_key(X_FORWARDED_FOR) {
        x_forwarded_for(headers)
    } else if headers.contains_key(hyper::header::FORWARDED) {
        forwarded(headers)
    } else {
        return peer;
    };
    let Some(hops) = hops.filter(|hops| !hops.is_empty()) else {
        return peer;
    };
    hops.iter()
        .rev()
        .find(|hop| !trusted.trusts(**hop))
        .or(hops.first())
        .copied()
        .unwrap_or(peer)
}

/// Every address of every `X-Forwarded-For` line, in order; `None` if one is malformed.
fn x_forwarded_for(headers: &HeaderMap) -> Option<Vec<IpAddr>> {
    let mut hops = Vec::new();
    for line in headers.get_all(X_FORWARDED_FOR) {
        for item in line.to_str().ok()?.split(',') {
            if hops.len() == MAX_HOPS {
                return None;
            }
            hops.push(address(item.trim())?);
        }
    }
    Some(hops)
}

/// The `for=` of every element of every `Forwarded` line, in order; `None` if an element has
/// none or one is malformed.
fn forwarded(headers: &HeaderMap) -> Option<Vec<IpAddr>> {
    let mut hops = Vec::new();
    for line in headers.get_all(hyper::header::FORWARDED) {
        for element in split_outside_quotes(line.to_str().ok()?, ',') {
            if hops.len() == MAX_HOPS {
                return None;
            }
            let node = split_outside_quotes(element, ';').find_map(|pair| {
                let (key, value) = pair.split_once('=')?;
                key.trim().eq_ignore_ascii_case("for").then(|| value.trim())
            })?;
            let node = match node.strip_prefix('"') {
                Some(quoted) => quoted.strip_suffix('"')?,
                None => node,
            };
            hops.push(address(node)?);
        }
    }
    Some(hops)
}

/// `text` split at `separator` where it is not inside a quoted string.
fn split_outside_quotes(text: &str, separator: char) -> impl Iterator<Item = &str> {
    let mut quoted = false;
    text.split(move |c: char| {
        if c == '"' {
            quoted = !quoted;
        }
        c == separator && !quoted
    })
}

/// An address as proxies write one: `192.0.2.60`, `192.0.2.60:4711`, `2001:db8::17`,
/// `[2001:db8::17]` or `[2001:db8::17]:4711`.
fn address(text: &str) -> Option<IpAddr> {
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    let ip = match text.strip_prefix('[') {
        Some(rest) => {
            let (ip, port) = rest.split_once(']')?;
            if !port.is_empty() {
                port_of(port.strip_prefix(':')?)?;
            }
            ip.parse::<std::net::Ipv6Addr>().ok().map(IpAddr::V6)?
        }
        None => {
            let (ip, port) = text.split_once(':')?;
            port_of(port)?;
            ip.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)?
        }
    };
    Some(ip.to_canonical())
}

/// A port number, as written after an address.
fn port_of(text: &str) -> Option<u16> {
    text.bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| text.parse().ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn headers(lines: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in lines {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    fn trusted() -> TrustedProxies {
        TrustedProxies::parse("10.42.0.0/16,127.0.0.7").unwrap()
    }

    // R34: an untrusted peer's headers are not read; a trusted proxy's name the client, the
    // right-most address that is not itself a trusted proxy.
    #[test]
    fn the_client_is_the_right_most_untrusted_address_a_trusted_proxy_names() {
        let t = trusted();
        let board = headers(&[("x-forwarded-for", "192.168.1.50")]);
        assert_eq!(client(ip("192.168.1.9"), &board, &t), ip("192.168.1.9"));
        assert_eq!(client(ip("10.42.0.12"), &board, &t), ip("192.168.1.50"));
        assert_eq!(
            client(ip("::ffff:10.42.0.12"), &board, &t),
            ip("192.168.1.50")
        );
        // What the client wrote itself is left of what the proxies appended: not believed.
        let spoofed = headers(&[("x-forwarded-for", "1.2.3.4, 192.168.1.50, 10.42.0.3")]);
        assert_eq!(client(ip("10.42.0.12"), &spoofed, &t), ip("192.168.1.50"));
        // Several lines are one list, in order.
        let lines = headers(&[
            ("x-forwarded-for", "1.2.3.4"),
            ("x-forwarded-for", "192.168.1.51"),
        ]);
        assert_eq!(client(ip("127.0.0.7"), &lines, &t), ip("192.168.1.51"));
        // Every hop trusted (a pod calling through Traefik): the left-most.
        let inside = headers(&[("x-forwarded-for", "10.42.1.5, 10.42.0.3")]);
        assert_eq!(client(ip("10.42.0.12"), &inside, &t), ip("10.42.1.5"));
        // No header: the proxy's own request.
        assert_eq!(
            client(ip("10.42.0.12"), &HeaderMap::new(), &t),
            ip("10.42.0.12")
        );
        // Trusting no one reads nothing.
        let none = TrustedProxies::default();
        assert_eq!(client(ip("10.42.0.12"), &board, &none), ip("10.42.0.12"));
    }

    #[test]
    fn addresses_with_ports_and_brackets() {
        let t = trusted();
        for (written, meant) in [
            ("192.168.1.50:4711", "192.168.1.50"),
            ("2001:db8::17", "2001:db8::17"),
            ("[2001:db8::17]", "2001:db8::17"),
            ("[2001:db8::17]:4711", "2001:db8::17"),
            ("::ffff:192.168.1.50", "192.168.1.50"),
        ] {
            let h = headers(&[("x-forwarded-for", written)]);
            assert_eq!(client(ip("10.42.0.12"), &h, &t), ip(meant), "{written}");
        }
    }

    // R34: RFC 7239's Forwarded, read only without X-Forwarded-For, which Traefik writes.
    #[test]
    fn forwarded_for() {
        let t = trusted();
        let h = headers(&[(
            "forwarded",
            "for=1.2.3.4, for=\"[2001:db8:cafe::17]:4711\";proto=https;by=10.42.0.12, \
             For=192.168.1.60;host=\"a;b,c\"",
        )]);
        assert_eq!(client(ip("10.42.0.12"), &h, &t), ip("192.168.1.60"));
        let h = headers(&[("forwarded", "proto=https;for=\"[2001:db8:cafe::17]:4711\"")]);
        assert_eq!(client(ip("10.42.0.12"), &h, &t), ip("2001:db8:cafe::17"));
        let both = headers(&[
            ("forwarded", "for=1.2.3.4"),
            ("x-forwarded-for", "192.168.1.50"),
        ]);
        assert_eq!(client(ip("10.42.0.12"), &both, &t), ip("192.168.1.50"));
    }

    // R34: a malformed header from a trusted proxy is the peer's request, never an error.
    #[test]
    fn malformed_headers_fall_back_to_the_peer() {
        let t = trusted();
        let peer = ip("10.42.0.12");
        for (name, value) in [
            ("x-forwarded-for", ""),
            ("x-forwarded-for", "unknown"),
            ("x-forwarded-for", "192.168.1.50,,"),
            ("x-forwarded-for", "192.168.1.50, garbage"),
            ("x-forwarded-for", "192.168.1.50:port"),
            ("x-forwarded-for", "[2001:db8::17"),
            ("x-forwarded-for", "2001:db8::17]:80"),
            ("forwarded", "for=_hidden"),
            ("forwarded", "for=unknown"),
            ("forwarded", "proto=https"),
            ("forwarded", "for=\"192.168.1.50"),
            ("forwarded", "for"),
        ] {
            let h = headers(&[(name, value)]);
            assert_eq!(client(peer, &h, &t), peer, "{name}: {value}");
        }
        let mut h = HeaderMap::new();
        h.insert(
            "x-forwarded-for",
            HeaderValue::from_bytes(b"192.168.1.\xff").unwrap(),
        );
        assert_eq!(client(peer, &h, &t), peer);
        let long = vec!["192.168.1.50"; MAX_HOPS + 1].join(",");
        let h = headers(&[("x-forwarded-for", &long)]);
        assert_eq!(client(peer, &h, &t), peer);
    }
}
