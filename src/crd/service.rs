//! The Service an owner may ask for each of its variants (R36): [`ServiceSpec`], field
//! `service` of both kinds' spec, and [`VariantService`], what a variant's status says of how
//! to reach its Service.
//!
//! Like the rest of the spec, these decode leniently (unknown fields are ignored, the API
//! server prunes them anyway): the schema carries the bounds, and what it cannot say is checked
//! by `variant::validate_service` and reported on the variants.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Most ports a variant's Service may declare (`maxItems` in the schema).
pub const MAX_SERVICE_PORTS: usize = 32;

/// Most client ranges a LoadBalancer Service may admit (`maxItems` of
/// `loadBalancerSourceRanges`).
pub const MAX_SOURCE_RANGES: usize = 32;

/// Longest CIDR: a written-out IPv6 address (39 characters) and `/128`.
pub const MAX_CIDR: usize = 43;

/// How a variant's Service is reached, as Kubernetes names the Service types.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ServiceType {
    /// A cluster-internal address only (the default).
    #[default]
    ClusterIP,
    /// Also a port on every node (`nodePort`), which devices on the LAN can reach.
    NodePort,
    /// Also an external address from the cluster's load balancer (k3s: ServiceLB).
    LoadBalancer,
}

impl ServiceType {
    /// The type as Kubernetes writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceType::ClusterIP => "ClusterIP",
            ServiceType::NodePort => "NodePort",
            ServiceType::LoadBalancer => "LoadBalancer",
        }
    }
}

/// The transport protocol of a Service port: TCP (the default), UDP or SCTP.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ServiceProtocol {
    /// TCP (the default).
    #[default]
    TCP,
    /// UDP.
    UDP,
    /// SCTP.
    SCTP,
}

impl ServiceProtocol {
    /// The protocol as Kubernetes writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceProtocol::TCP => "TCP",
            ServiceProtocol::UDP => "UDP",
            ServiceProtocol::SCTP => "SCTP",
        }
    }
}

/// NodePort and LoadBalancer only: where traffic from outside the cluster goes, as Kubernetes'
/// `externalTrafficPolicy`. Cluster (Kubernetes' default): any node forwards it to any of the
/// variant's pods, hiding the client's address. Local: a node forwards it only to the
/// variant's pods on that node, keeping the client's address (which loadBalancerSourceRanges
/// and the pods then see).
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum TrafficPolicy {
    /// To any ready pod of the variant, on any node; the client's address is hidden behind the
    /// node's (Kubernetes' default).
    Cluster,
    /// Only to the variant's pods on the node the traffic arrived at, keeping the client's
    /// address; a node without one drops it.
    Local,
}

impl TrafficPolicy {
    /// The policy as Kubernetes writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            TrafficPolicy::Cluster => "Cluster",
            TrafficPolicy::Local => "Local",
        }
    }
}

/// An IP family of a Service's addresses, as Kubernetes' `ipFamilies` entries.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum IpFamily {
    /// IPv4.
    IPv4,
    /// IPv6.
    IPv6,
}

impl IpFamily {
    /// The family as Kubernetes writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            IpFamily::IPv4 => "IPv4",
            IpFamily::IPv6 => "IPv6",
        }
    }
}

/// How many IP families the Service gets, as Kubernetes' `ipFamilyPolicy`: SingleStack,
/// PreferDualStack or RequireDualStack (refused by a single-stack cluster). Left out,
/// SingleStack, or RequireDualStack when two ipFamilies are given.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum IpFamilyPolicy {
    /// One family (the cluster's first, or `ipFamilies[0]`).
    SingleStack,
    /// Both families where the cluster has both, one otherwise.
    PreferDualStack,
    /// Both families; refused by a single-stack cluster.
    RequireDualStack,
}

impl IpFamilyPolicy {
    /// The policy as Kubernetes writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            IpFamilyPolicy::SingleStack => "SingleStack",
            IpFamilyPolicy::PreferDualStack => "PreferDualStack",
            IpFamilyPolicy::RequireDualStack => "RequireDualStack",
        }
    }
}

/// One port of a variant's Service, as a Service's `spec.ports` entry.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServicePortSpec {
    /// Name of the port, a DNS-1123 label; required when there are several ports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub name: Option<String>,

    /// The port the Service listens on (1-65535).
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,

    /// The pods' port: a number, or the name of a container port. Defaults to `port`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "int_or_string")]
    pub target_port: Option<IntOrString>,

    /// TCP (default), UDP or SCTP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<ServiceProtocol>,

    /// NodePort and LoadBalancer only: the node port to ask for. Left out, the cluster picks
    /// one for each variant; a node port given here can serve only one variant, so leave it
    /// out when there are several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub node_port: Option<i32>,

    /// The application protocol (e.g. `http`, `kubernetes.io/h2c`), a hint for proxies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub app_protocol: Option<String>,
}

/// A Service per variant (R36): each variant gets Service `<base name>-<label>` (the name of
/// its Deployment) selecting only that variant's pods.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceSpec {
    /// ClusterIP (default), NodePort or LoadBalancer.
    #[serde(default, rename = "type")]
    pub type_: ServiceType,

    /// The Service's ports, as in a Service's spec.ports. Left out or empty: one port for each
    /// container port of the base (spec.template.spec.containers[].ports).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))] // MAX_SERVICE_PORTS
    pub ports: Vec<ServicePortSpec>,

    /// LoadBalancer only: the client address ranges (CIDRs such as `192.168.1.0/24` or
    /// `fd00::/64`, at most 32) the load balancer admits; left out, any address. The load
    /// balancer enforces it (k3s' ServiceLB does, and kube-proxy for the load balancer's
    /// address), for that address only: the Service's node ports stay open to whoever reaches
    /// a node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "source_ranges")]
    pub load_balancer_source_ranges: Vec<String>,

    /// NodePort and LoadBalancer only: Cluster or Local ([`TrafficPolicy`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_traffic_policy: Option<TrafficPolicy>,

    /// The IP families of the Service's addresses, at most two (IPv4, IPv6), the first being
    /// the cluster IP's; left out, the cluster's default. A family the cluster does not have
    /// is refused by the API server.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 2))]
    pub ip_families: Vec<IpFamily>,

    /// SingleStack, PreferDualStack or RequireDualStack ([`IpFamilyPolicy`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_family_policy: Option<IpFamilyPolicy>,
}

/// Schema of `loadBalancerSourceRanges`: at most [`MAX_SOURCE_RANGES`] CIDRs of at most
/// [`MAX_CIDR`] characters each, checked by the API server with Kubernetes' CEL `isCIDR`
/// (available since 1.31), so `kubectl apply` of a bad one is refused naming the entry.
fn source_ranges(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "maxItems": MAX_SOURCE_RANGES,
        "items": {
            "type": "string",
            "maxLength": MAX_CIDR,
            "x-kubernetes-validations": [{
                "rule": "isCIDR(self)",
                "message": "must be a CIDR, an address and a prefix length such as \
                            192.168.1.0/24 or fd00::/64"
            }]
        }
    })
}

/// Schema of a field that is a number or a string, as Kubernetes' IntOrString.
pub(super) fn int_or_string(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "x-kubernetes-int-or-string": true })
}

/// One port of a variant's Service, as reported in its status.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VariantServicePort {
    /// The port's name, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The port the Service listens on, at its cluster address and DNS name.
    pub port: i32,
    /// TCP, UDP or SCTP.
    pub protocol: String,
    /// The port every node listens on for it (NodePort and LoadBalancer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_port: Option<i32>,
}

/// How to reach a variant's Service (R36), from the Service itself.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VariantService {
    /// The Service's name: `<base name>-<label>`, the name of the variant's Deployment.
    pub name: String,
    /// ClusterIP, NodePort or LoadBalancer.
    #[serde(rename = "type")]
    pub type_: String,
    /// Its DNS name inside the cluster: `<name>.<namespace>.svc`.
    pub dns: String,
    /// Its cluster-internal address, once assigned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "clusterIP")]
    pub cluster_ip: Option<String>,
    /// Its ports, with their node ports (NodePort and LoadBalancer).
    pub ports: Vec<VariantServicePort>,
    /// LoadBalancer only: the external addresses (IP or host name) once the load balancer has
    /// assigned them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ingress: Vec<String>,
}
