//! Who may reach a variant's Service (R36): the owner's
//! `loadBalancerSourceRanges`, `externalTrafficPolicy`, `ipFamilies` and `ipFamilyPolicy`,
//! checked as the API server checks a Service's ([`check_reach`]) and copied into every
//! variant's Service ([`reach_fields`]).

use std::net::IpAddr;

use serde_json::{Map, Value};

use crate::crd::{IpFamilyPolicy, MAX_CIDR, MAX_SOURCE_RANGES, ServiceSpec, ServiceType};

/// Whether `s` is a CIDR as Kubernetes' CEL `isCIDR` (the CRD's rule) takes one: an IPv4 or
/// IPv6 address, `/`, and a prefix length of at most 32 or 128 without a leading zero; no
/// spaces, no zone, no IPv4-mapped IPv6 address. Bits set past the prefix are allowed
/// (`192.168.1.10/24` is `192.168.1.0/24`), as Kubernetes allows them.
pub(crate) fn is_cidr(s: &str) -> bool {
    let Some((address, bits)) = s.split_once('/') else {
        return false;
    };
    let digits = !bits.is_empty() && bits.len() <= 3 && bits.bytes().all(|b| b.is_ascii_digit());
    if !digits || (bits.len() > 1 && bits.starts_with('0')) {
        return false;
    }
    let Ok(bits) = bits.parse::<u8>() else {
        return false;
    };
    match address.parse::<IpAddr>() {
        Ok(IpAddr::V4(_)) => bits <= 32,
        Ok(IpAddr::V6(v6)) => bits <= 128 && v6.to_ipv4_mapped().is_none(),
        Err(_) => false,
    }
}

/// Adds to `problems` what is wrong with the reach fields of `spec`, each naming its field:
/// more than [`MAX_SOURCE_RANGES`] source ranges, one that is no CIDR, source ranges for a
/// type other than LoadBalancer, an external traffic policy for ClusterIP (Kubernetes: "may
/// only be set for externally-accessible services"), more than two IP families or one twice,
/// and two families with SingleStack.
pub(super) fn check_reach(spec: &ServiceSpec, problems: &mut Vec<String>) {
    let ranges = &spec.load_balancer_source_ranges;
    if ranges.len() > MAX_SOURCE_RANGES {
        problems.push(format!(
            "service.loadBalancerSourceRanges: {} entries, at most {MAX_SOURCE_RANGES} allowed",
            ranges.len()
        ));
    }
    for (i, range) in ranges.iter().enumerate() {
        if range.len() > MAX_CIDR || !is_cidr(range) {
            let shown: String = range.chars().take(MAX_CIDR + 1).collect();
            problems.push(format!(
                "service.loadBalancerSourceRanges[{i}] {shown:?}: must be a CIDR, an address \
                 and a prefix length such as 192.168.1.0/24 or fd00::/64"
            ));
        }
    }
    if !ranges.is_empty() && spec.type_ != ServiceType::LoadBalancer {
        problems.push(format!(
            "service.loadBalancerSourceRanges: only for type LoadBalancer, not {}",
            spec.type_.as_str()
        ));
    }
    if let Some(policy) = spec.external_traffic_policy
        && spec.type_ == ServiceType::ClusterIP
    {
        problems.push(format!(
            "service.externalTrafficPolicy {}: only for type NodePort or LoadBalancer",
            policy.as_str()
        ));
    }
    let families = &spec.ip_families;
    if families.len() > 2 {
        problems.push(format!(
            "service.ipFamilies: {} entries, at most 2 allowed (IPv4, IPv6)",
            families.len()
        ));
    }
    for (i, family) in families.iter().enumerate() {
        if families[..i].contains(family) {
            problems.push(format!(
                "service.ipFamilies[{i}] {}: given twice",
                family.as_str()
            ));
        }
    }
    if families.len() > 1 && spec.ip_family_policy == Some(IpFamilyPolicy::SingleStack) {
        problems.push(
            "service.ipFamilyPolicy SingleStack: two ipFamilies need PreferDualStack or \
             RequireDualStack"
                .to_owned(),
        );
    }
}

/// Adds the reach fields of `spec` that are set to a Service's `spec` object, as Kubernetes
/// names them.
pub(super) fn reach_fields(spec: &ServiceSpec, service: &mut Map<String, Value>) {
    if !spec.load_balancer_source_ranges.is_empty() {
        service.insert(
            "loadBalancerSourceRanges".into(),
            spec.load_balancer_source_ranges.clone().into(),
        );
    }
    if let Some(policy) = spec.external_traffic_policy {
        service.insert("externalTrafficPolicy".into(), policy.as_str().into());
    }
    if !spec.ip_families.is_empty() {
        let families: Vec<Value> = spec.ip_families.iter().map(|f| f.as_str().into()).collect();
        service.insert("ipFamilies".into(), families.into());
    }
    if let Some(policy) = spec.ip_family_policy {
        service.insert("ipFamilyPolicy".into(), policy.as_str().into());
    }
}
