//! `service` of `POST .../mutations` (R36): [`ServiceSpec`] as a request, refusing unknown
//! fields so that a typo is a 400 rather than a setting silently ignored.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Deserialize;

use crate::crd::{ServicePortSpec, ServiceProtocol, ServiceSpec, ServiceType};

/// [`ServiceSpec`], refusing unknown fields.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct ServiceRequest {
    /// [`ServiceSpec::type_`].
    #[serde(default, rename = "type")]
    pub type_: ServiceType,
    /// [`ServiceSpec::ports`].
    #[serde(default)]
    pub ports: Vec<ServicePortRequest>,
}

/// [`ServicePortSpec`], refusing unknown fields.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ServicePortRequest {
    /// [`ServicePortSpec::name`].
    #[serde(default)]
    pub name: Option<String>,
    /// [`ServicePortSpec::port`].
    pub port: i32,
    /// [`ServicePortSpec::target_port`].
    #[serde(default)]
    pub target_port: Option<IntOrString>,
    /// [`ServicePortSpec::protocol`].
    #[serde(default)]
    pub protocol: Option<ServiceProtocol>,
    /// [`ServicePortSpec::node_port`].
    #[serde(default)]
    pub node_port: Option<i32>,
    /// [`ServicePortSpec::app_protocol`].
    #[serde(default)]
    pub app_protocol: Option<String>,
}

impl From<ServiceRequest> for ServiceSpec {
    fn from(r: ServiceRequest) -> Self {
        ServiceSpec {
            type_: r.type_,
            ports: r
                .ports
                .into_iter()
                .map(|p| ServicePortSpec {
                    name: p.name,
                    port: p.port,
                    target_port: p.target_port,
                    protocol: p.protocol,
                    node_port: p.node_port,
                    app_protocol: p.app_protocol,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // R36: the request spells the field as the CRD does; typos are refused
    #[test]
    fn a_service_request_is_the_crds_field() {
        let r: ServiceRequest = serde_json::from_str(
            r#"{"type":"NodePort","ports":[{"name":"http","port":80,"targetPort":"web"}]}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let spec = ServiceSpec::from(r);
        assert_eq!(spec.type_, ServiceType::NodePort);
        assert_eq!(
            spec.ports[0].target_port,
            Some(IntOrString::String("web".into()))
        );
        let typo = serde_json::from_str::<ServiceRequest>(r#"{"ports":[{"prot":80}]}"#);
        assert!(typo.is_err_and(|e| e.to_string().contains("unknown field `prot`")));
        let bad_type = serde_json::from_str::<ServiceRequest>(r#"{"type":"ExternalName"}"#);
        assert!(bad_type.is_err());
        let empty: ServiceRequest = serde_json::from_str("{}").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ServiceSpec::from(empty), ServiceSpec::default());
    }
}
