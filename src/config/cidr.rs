//! Address ranges in CIDR notation (`10.42.0.0/16`, `fd00::/8`, or one address), parsed with
//! std's `IpAddr` alone, and the list of them that names the proxies the API trusts to say
//! whom they forward (`MUTANT_API_TRUSTED_PROXIES`, R34).

use std::{
    fmt,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    str::FromStr,
};

/// One range of addresses: an address and how many of its leading bits are the network's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    /// The network's address, its host bits zero.
    network: IpAddr,
    /// The length of the prefix: at most 32 for IPv4, 128 for IPv6.
    prefix: u8,
}

impl Cidr {
    /// Whether `ip` is in the range. An IPv4 address written as IPv6 (`::ffff:10.42.0.5`,
    /// as a dual-stack listener sees IPv4 peers) is taken as the IPv4 address it is.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                u32::from(ip) & v4_mask(self.prefix) == u32::from(net)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                u128::from(ip) & v6_mask(self.prefix) == u128::from(net)
            }
            _ => false,
        }
    }

    /// Whether the range holds every address of its family (`0.0.0.0/0`, `::/0`).
    pub fn is_everything(&self) -> bool {
        self.prefix == 0
    }
}

/// The mask of an IPv4 prefix of `prefix` bits (at most 32).
fn v4_mask(prefix: u8) -> u32 {
    u32::MAX
        .checked_shl(32 - u32::from(prefix.min(32)))
        .unwrap_or(0)
}

/// The mask of an IPv6 prefix of `prefix` bits (at most 128).
fn v6_mask(prefix: u8) -> u128 {
    u128::MAX
        .checked_shl(128 - u32::from(prefix.min(128)))
        .unwrap_or(0)
}

impl FromStr for Cidr {
    type Err = String;

    /// `ADDRESS/PREFIX` or a bare `ADDRESS` (the one address: /32, /128). Host bits set in
    /// the address are dropped (`10.42.1.7/16` is `10.42.0.0/16`), as Go's `ParseCIDR` does.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (addr, prefix) = match text.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (text, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("{addr:?} is not an IPv4 or IPv6 address"))?;
        let bits = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => bits,
            Some(prefix) => prefix
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= bits && prefix.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| {
                    format!("the prefix {prefix:?} is not a whole number from 0 to {bits}")
                })?,
        };
        let network = match addr {
            IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) & v4_mask(prefix))),
            IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a) & v6_mask(prefix))),
        };
        Ok(Cidr { network, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

/// The proxies whose word the API takes for the client's address (R34): the peers of a
/// connection in one of these ranges. Empty (the default) trusts no one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<Cidr>);

impl TrustedProxies {
    /// A comma-separated list of ranges (blank entries are skipped). An entry that is no
    /// range, or a range of every address (whoever connects could then name any address as
    /// its own), is an error naming it.
    pub fn parse(list: &str) -> Result<Self, String> {
        let mut ranges = Vec::new();
        for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let cidr: Cidr = entry.parse().map_err(|why| {
                format!("{entry:?} is not an address or a range like 10.42.0.0/16: {why}")
            })?;
            if cidr.is_everything() {
                return Err(format!(
                    "{entry:?} trusts every address: any client could then name its own \
                     address and take another's share; name the proxies' own range (k3s's pods: \
                     10.42.0.0/16)"
                ));
            }
            ranges.push(cidr);
        }
        Ok(TrustedProxies(ranges))
    }

    /// Whether `ip` is a trusted proxy's address.
    pub fn trusts(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|cidr| cidr.contains(ip))
    }

    /// Whether no proxy is trusted.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for TrustedProxies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, cidr) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{cidr}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    // R34: ranges parse as written, host bits dropped; matching is by the prefix's bits, and
    // an IPv4 peer seen through a dual-stack listener matches its IPv4 range.
    #[test]
    fn ranges_parse_and_match() {
        let pods: Cidr = "10.42.0.0/16".parse().unwrap();
        assert_eq!(pods.to_string(), "10.42.0.0/16");
        assert!(pods.contains(ip("10.42.0.0")));
        assert!(pods.contains(ip("10.42.255.255")));
        assert!(!pods.contains(ip("10.43.0.1")));
        assert!(!pods.contains(ip("10.41.255.255")));
        assert!(pods.contains(ip("::ffff:10.42.3.4")));
        assert!(!pods.contains(ip("fd00::1")));

        let sloppy: Cidr = "10.42.7.9/16".parse().unwrap();
        assert_eq!(sloppy, pods);
        let one: Cidr = "127.0.0.7".parse().unwrap();
        assert_eq!(one.to_string(), "127.0.0.7/32");
        assert!(one.contains(ip("127.0.0.7")) && !one.contains(ip("127.0.0.8")));
        let odd: Cidr = "192.168.1.64/26".parse().unwrap();
        assert!(odd.contains(ip("192.168.1.127")) && !odd.contains(ip("192.168.1.128")));

        let v6: Cidr = "fd00:10:42::/48".parse().unwrap();
        assert!(v6.contains(ip("fd00:10:42:ffff::1")));
        assert!(!v6.contains(ip("fd00:10:43::1")));
        assert!(!v6.contains(ip("10.42.0.1")));
        let host6: Cidr = "::1".parse().unwrap();
        assert_eq!(host6.to_string(), "::1/128");
        assert!(host6.contains(ip("::1")));

        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.is_everything() && all.contains(ip("203.0.113.9")));
    }

    #[test]
    fn malformed_ranges_are_refused_with_a_reason() {
        for bad in [
            "10.42.0.0/33",
            "10.42.0.0/",
            "10.42.0.0/+8",
            "10.42.0.0/16/8",
            "10.42.0/16",
            "fd00::/129",
            "pods",
            "",
            " 10.42.0.0/16",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad:?} parsed");
        }
        let why = "10.42.0.0/40".parse::<Cidr>().unwrap_err();
        assert!(why.contains("from 0 to 32"), "{why}");
    }

    // R34: the setting is a list; blank entries are skipped, a bad entry or a range of every
    // address is an error naming it; empty trusts no one.
    #[test]
    fn the_list_of_trusted_proxies() {
        let none = TrustedProxies::parse(" , ").unwrap();
        assert!(none.is_empty() && !none.trusts(ip("10.42.0.1")));
        let list = TrustedProxies::parse("10.42.0.0/16, 127.0.0.7/32 ,fd00::/8").unwrap();
        assert_eq!(list.to_string(), "10.42.0.0/16,127.0.0.7/32,fd00::/8");
        assert!(list.trusts(ip("10.42.9.9")) && list.trusts(ip("127.0.0.7")));
        assert!(list.trusts(ip("fd12::1")) && !list.trusts(ip("192.168.1.10")));
        let e = TrustedProxies::parse("10.42.0.0/16,traefik").unwrap_err();
        assert!(e.contains("\"traefik\""), "{e}");
        let e = TrustedProxies::parse("0.0.0.0/0").unwrap_err();
        assert!(e.contains("trusts every address"), "{e}");
        assert!(TrustedProxies::parse("::/0").is_err());
    }
}
