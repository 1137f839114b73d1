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
}

/// Schema of a field that is a number or a string, as Kubernetes' IntOrString.
fn int_or_string(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
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
