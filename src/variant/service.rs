//! A Service per variant (R36), pure like the rest of `variant`: checking the owner's
//! `service` ([`validate_service`]), building each variant's Service ([`build_service`]),
//! deciding what to write ([`resolve_service`]), and reporting how to reach it
//! ([`service_status`], [`services_column`]).
//!
//! A variant's Service has the name of its Deployment, `<base name>-<label>`, and selects its
//! pods by the three mutantops labels that the Deployment puts on its pod template (owner,
//! kind, variant): exactly that variant's pods, never another variant's nor the base's. The
//! Deployment's own selector is not touched.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Map, Value, json};

use super::build::{fnv1a64, is_subset};
use super::names::{deployment_name, is_dns1123_label};
use super::owner::{HASH_ANNOTATION, Owner, may_prune};
use super::step::Step;
use super::validate::Base;
use crate::crd::{
    MAX_SERVICE_PORTS, ServiceProtocol, ServiceSpec, ServiceType, VariantService,
    VariantServicePort, VariantState, VariantStatus,
};

mod observed;
mod reach;

pub use observed::{ObservedService, PortView, ServiceView};

/// Whether `s` is a DNS-1035 label, what a Service name must be: `[a-z]([-a-z0-9]*[a-z0-9])?`,
/// at most 63 characters.
fn is_dns1035_label(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=63).contains(&b.len())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b.first().is_some_and(u8::is_ascii_lowercase)
        && b.last()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
}

/// Whether `s` is an IANA service name (a named container port): at most 15 lower-case
/// letters, digits and '-', with a letter, no '-' at either end and no "--".
fn is_port_name(s: &str) -> bool {
    (1..=15).contains(&s.len())
        && s.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && s.bytes().any(|c| c.is_ascii_lowercase())
        && !s.starts_with('-')
        && !s.ends_with('-')
        && !s.contains("--")
}

/// Checks the owner's `service` as the API server would check each variant's Service, so that
/// the HTTP API answers 400 and the controller reports it rather than sending it: at most
/// [`MAX_SERVICE_PORTS`] ports; each port and node port in 1-65535, a target port a number in
/// 1-65535 or a container port's name; port names DNS-1123 labels, required when there are
/// several and unique; no two ports with the same number and protocol; node ports only for
/// NodePort and LoadBalancer; and who may reach it (`reach::check_reach`: source ranges
/// CIDRs, and only for LoadBalancer; an external traffic policy only for NodePort and
/// LoadBalancer; at most two distinct IP families). All problems are reported, joined with
/// `"; "`.
pub fn validate_service(spec: &ServiceSpec) -> Result<(), String> {
    let mut problems = Vec::new();
    if spec.ports.len() > MAX_SERVICE_PORTS {
        problems.push(format!(
            "service.ports: {} entries, at most {MAX_SERVICE_PORTS} allowed",
            spec.ports.len()
        ));
    }
    let (mut names, mut numbers) = (BTreeSet::new(), BTreeSet::new());
    for (i, p) in spec.ports.iter().enumerate() {
        let at = format!("service.ports[{i}]");
        let valid_port = |n: i32| (1..=65535).contains(&n);
        if !valid_port(p.port) {
            problems.push(format!("{at}.port {}: must be 1 to 65535", p.port));
        }
        match &p.target_port {
            Some(IntOrString::Int(n)) if !valid_port(*n) => {
                problems.push(format!("{at}.targetPort {n}: must be 1 to 65535"));
            }
            Some(IntOrString::String(s)) if !is_port_name(s) => problems.push(format!(
                "{at}.targetPort {s:?}: must be a number or a container port's name (at most 15 \
                 lower-case letters, digits and '-', with a letter)"
            )),
            _ => {}
        }
        match p.node_port {
            Some(n) if spec.type_ == ServiceType::ClusterIP => problems.push(format!(
                "{at}.nodePort {n}: only for type NodePort or LoadBalancer"
            )),
            Some(n) if !valid_port(n) => {
                problems.push(format!("{at}.nodePort {n}: must be 1 to 65535"));
            }
            _ => {}
        }
        match &p.name {
            Some(name) if !is_dns1123_label(name) => problems.push(format!(
                "{at}.name {name:?}: must be a DNS-1123 label (lower-case letters, digits and \
                 '-', at most 63 characters)"
            )),
            Some(name) if !names.insert(name.as_str()) => {
                problems.push(format!("{at}.name {name:?}: given twice"));
            }
            None if spec.ports.len() > 1 => {
                problems.push(format!("{at}.name: required when there are several ports"));
            }
            _ => {}
        }
        let protocol = p.protocol.unwrap_or_default();
        if !numbers.insert((p.port, protocol.as_str())) {
            problems.push(format!(
                "{at}: port {} {} given twice",
                p.port,
                protocol.as_str()
            ));
        }
    }
    reach::check_reach(spec, &mut problems);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// The `spec.ports` of every variant's Service: those of `spec`, each with its protocol and
/// target port written out (TCP, and the port, when left out); or, when `spec` gives none, one
/// for each container port of the base (its number, protocol and name, or `<protocol>-<port>`
/// when it has none or the name is taken), the first of each number and protocol. Fails when
/// `spec` is invalid ([`validate_service`]) or there is no port at all.
pub fn service_ports(base: &Base, spec: &ServiceSpec) -> Result<Vec<Value>, String> {
    validate_service(spec)?;
    if !spec.ports.is_empty() {
        return Ok(spec
            .ports
            .iter()
            .map(|p| {
                let mut port = Map::new();
                if let Some(name) = &p.name {
                    port.insert("name".into(), name.clone().into());
                }
                port.insert("port".into(), p.port.into());
                port.insert(
                    "protocol".into(),
                    p.protocol.unwrap_or_default().as_str().into(),
                );
                let target = match &p.target_port {
                    Some(IntOrString::String(name)) => Value::from(name.clone()),
                    Some(IntOrString::Int(n)) => Value::from(*n),
                    None => Value::from(p.port),
                };
                port.insert("targetPort".into(), target);
                if let Some(node_port) = p.node_port {
                    port.insert("nodePort".into(), node_port.into());
                }
                if let Some(app) = &p.app_protocol {
                    port.insert("appProtocol".into(), app.clone().into());
                }
                Value::Object(port)
            })
            .collect());
    }
    let containers = base
        .value()
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let (mut ports, mut names, mut numbers) = (Vec::new(), BTreeSet::new(), BTreeSet::new());
    let declared = containers
        .iter()
        .filter_map(|c| c.get("ports").and_then(Value::as_array))
        .flatten();
    for p in declared {
        let Some(number) = p
            .get("containerPort")
            .and_then(Value::as_i64)
            .and_then(|n| i32::try_from(n).ok())
            .filter(|n| (1..=65535).contains(n))
        else {
            continue;
        };
        let protocol = match p.get("protocol").and_then(Value::as_str) {
            Some("UDP") => ServiceProtocol::UDP,
            Some("SCTP") => ServiceProtocol::SCTP,
            _ => ServiceProtocol::TCP,
        };
        if !numbers.insert((number, protocol.as_str())) {
            continue;
        }
        let fallback = format!("{}-{number}", protocol.as_str().to_ascii_lowercase());
        let name = p
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| is_dns1123_label(n) && !names.contains(*n))
            .map_or(fallback, str::to_owned);
        names.insert(name.clone());
        ports.push(json!({
            "name": name,
            "port": number,
            "protocol": protocol.as_str(),
            "targetPort": number,
        }));
    }
    if ports.is_empty() {
        return Err(
            "service.ports: none given, and the base's containers declare none \
                    (spec.template.spec.containers[].ports)"
                .to_owned(),
        );
    }
    Ok(ports)
}

/// Builds the Service of variant `label` (R36), the whole object to server-side-apply: name
/// `<base name>-<label>` in the owner's namespace, the base's labels and the three mutantops
/// labels, [`HASH_ANNOTATION`], the controller ownerReference; `spec.type` from `spec`, the
/// ports of [`service_ports`], a selector of the variant's three labels, and the owner's
/// `loadBalancerSourceRanges`, `externalTrafficPolicy`, `ipFamilies` and `ipFamilyPolicy` when
/// it gives them. Fails, saying why,
/// when the name is no DNS-1035 label (a Service name must start with a letter and cannot hold
/// a dot) or the ports cannot be made.
pub fn build_service(
    base: &Base,
    owner: &Owner,
    label: &str,
    spec: &ServiceSpec,
) -> Result<Value, String> {
    let name = deployment_name(base.name(), label);
    if !is_dns1035_label(&name) {
        return Err(format!(
            "Service {name:?}: a Service name must be a DNS-1035 label (lower-case letters, \
             digits and '-', starting with a letter, at most 63 characters)"
        ));
    }
    let ports = service_ports(base, spec).map_err(|e| format!("Service {name:?}: {e}"))?;
    let ours = owner.labels(label);
    let mut labels = base
        .value()
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut selector = Map::new();
    for (k, v) in ours {
        labels.insert(k.to_owned(), v.into());
        selector.insert(k.to_owned(), v.into());
    }
    let mut service = Map::new();
    service.insert("type".into(), spec.type_.as_str().into());
    service.insert("selector".into(), selector.into());
    service.insert("ports".into(), ports.into());
    reach::reach_fields(spec, &mut service);
    let mut object = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": owner.namespace,
            "labels": labels,
            "ownerReferences": owner.owner_references_json(),
        },
        "spec": service,
    });
    let hash = format!("{:016x}", fnv1a64(object.to_string().as_bytes()));
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("annotations".into(), json!({ HASH_ANNOTATION: hash }));
    }
    Ok(object)
}

/// Whether `desired` (from [`build_service`]) must be applied over `observed` (R5, R12): false
/// only when every field of `desired` is in `observed` with the same value. The server's
/// additions (cluster IP, node ports, defaults) do not count; a changed desired state always
/// differs through [`HASH_ANNOTATION`].
pub fn service_needs_apply(desired: &Value, observed: Option<&ObservedService>) -> bool {
    observed.is_none_or(|observed| !is_subset(desired, &observed.comparable()))
}

/// Decides the [`Step`] for a variant's Service given the one of that name as known: from the
/// cache (`from_server` false: a miss is created, one that `owner` does not control is looked
/// up) or from the API server (run [`super::foreign`] on it first: someone else's is a
/// Conflict, never written).
pub fn resolve_service(
    desired: &Value,
    observed: Option<&ObservedService>,
    owner: &Owner,
    from_server: bool,
) -> Step {
    let ours = observed.is_some_and(|s| may_prune(&s.metadata, owner));
    super::step::step_for(observed.is_some(), ours, from_server, || {
        service_needs_apply(desired, observed)
    })
}

/// What a variant's status says of its Service (R36): name, type, in-cluster DNS name, cluster
/// IP, ports with their node ports, and the load balancer's addresses once assigned.
pub fn service_status(service: &ObservedService) -> VariantService {
    let view = service.view();
    let name = service.metadata.name.clone().unwrap_or_default();
    let namespace = service.metadata.namespace.as_deref().unwrap_or_default();
    VariantService {
        dns: format!("{name}.{namespace}.svc"),
        name,
        type_: view.type_.unwrap_or_else(|| "ClusterIP".to_owned()),
        cluster_ip: view.cluster_ip.filter(|ip| !ip.is_empty() && ip != "None"),
        ports: view
            .ports
            .into_iter()
            .map(|p| VariantServicePort {
                name: p.name.filter(|n| !n.is_empty()),
                port: p.port,
                protocol: p.protocol.unwrap_or_else(|| "TCP".to_owned()),
                node_port: p.node_port.filter(|n| *n != 0),
            })
            .collect(),
        ingress: service.ingress.clone(),
    }
}

/// kubectl's `SERVICES` column (`status.variantServices`): each variant's Service with its
/// ports as kubectl shows a Service's (`80/TCP`, `80:30080/TCP`), the load balancer's
/// addresses before them once assigned; comma-separated, in spec order.
pub fn services_column(variants: &[VariantStatus]) -> String {
    variants
        .iter()
        .filter_map(|v| v.service.as_ref())
        .map(|s| {
            let ports: Vec<String> = s
                .ports
                .iter()
                .map(|p| match p.node_port {
                    Some(node) => format!("{}:{node}/{}", p.port, p.protocol),
                    None => format!("{}/{}", p.port, p.protocol),
                })
                .collect();
            let mut entry = s.name.clone();
            if !s.ingress.is_empty() {
                entry.push(' ');
                entry.push_str(&s.ingress.join(","));
            }
            entry.push(' ');
            entry.push_str(&ports.join(","));
            entry
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether a variant in this state gets its Service: its Deployment is applied.
pub fn serves(state: VariantState) -> bool {
    matches!(state, VariantState::Ready | VariantState::Progressing)
}
