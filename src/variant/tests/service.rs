//! Tests of a variant's Service (R36): building it, its ports (given, or the base's), the
//! checks of the owner's `service`, the apply decision, and what status reports of it.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Value, json};

use super::*;
use crate::crd::{
    ServicePortSpec, ServiceProtocol, ServiceSpec, ServiceType, VariantState,
    fixtures::variant_status,
};

/// The browser-snap base: one container with port 80 named http.
fn snap_base(name: &str, ports: Value) -> Base {
    let base = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": "browser-snap"}},
        "spec": {
            "selector": {"matchLabels": {"app": "browser-snap"}},
            "template": {
                "metadata": {"labels": {"app": "browser-snap"}},
                "spec": {"containers": [{"name": "snap", "image": "snap:1", "ports": ports}]}
            }
        }
    });
    Base::parse(&base).unwrap_or_else(|e| panic!("base should parse: {e}"))
}

fn http() -> Value {
    json!([{"name": "http", "containerPort": 80}])
}

fn port(port: i32) -> ServicePortSpec {
    ServicePortSpec {
        name: None,
        port,
        target_port: None,
        protocol: None,
        node_port: None,
        app_protocol: None,
    }
}

fn node_port_spec() -> ServiceSpec {
    ServiceSpec {
        type_: ServiceType::NodePort,
        ports: vec![],
    }
}

fn built(base: &Base, label: &str, spec: &ServiceSpec) -> Value {
    build_service(base, &owner(), label, spec).unwrap_or_else(|e| panic!("{e}"))
}

// R36: Service <base>-<label>, owned by the owner, selecting exactly the variant's pod labels
#[test]
fn the_service_selects_only_its_variants_pods() {
    let base = snap_base("browser-snap", http());
    let s = built(&base, "lilygo47", &node_port_spec());
    assert_eq!(at(&s, "/apiVersion"), "v1");
    assert_eq!(at(&s, "/kind"), "Service");
    assert_eq!(at(&s, "/metadata/name"), "browser-snap-lilygo47");
    assert_eq!(at(&s, "/metadata/namespace"), "team");
    let ours = json!({OWNER_LABEL: "snap", VARIANT_LABEL: "lilygo47", KIND_LABEL: "mutation"});
    assert_eq!(at(&s, "/spec/selector"), &ours);
    let mut labels = ours.clone();
    labels["app"] = json!("browser-snap");
    assert_eq!(at(&s, "/metadata/labels"), &labels);
    assert_eq!(
        at(&s, "/metadata/ownerReferences"),
        &json!([{"apiVersion": "neiam.org/v1", "kind": "Mutation", "name": "snap",
                 "uid": "uid-1", "controller": true, "blockOwnerDeletion": true}])
    );
    assert_eq!(at(&s, "/spec/type"), "NodePort");
    assert!(
        at(
            &s,
            &format!(
                "/metadata/annotations/{}",
                HASH_ANNOTATION.replace('/', "~1")
            )
        )
        .is_string()
    );

    // The variant's pods carry every label of the selector; another variant's do not.
    let selector = at(&s, "/spec/selector")
        .as_object()
        .cloned()
        .unwrap_or_default();
    let pods = |label: &str| {
        let d = build(&base, &owner(), &variant(label, &[], 1));
        at(&d, "/spec/template/metadata/labels").clone()
    };
    let (mine, other) = (pods("lilygo47"), pods("radxa-8-hd"));
    assert!(
        selector.iter().all(|(k, v)| mine.get(k) == Some(v)),
        "{mine}"
    );
    assert!(
        !selector.iter().all(|(k, v)| other.get(k) == Some(v)),
        "{other}"
    );
    // The Deployment's selector is not changed by asking for a Service.
    let d = build(&base, &owner(), &variant("lilygo47", &[], 1));
    assert_eq!(at(&d, "/spec/selector/matchLabels"), &labels);
}

// R36: no ports given: one per container port of the base, the first of each number
#[test]
fn ports_come_from_the_base() {
    let base = snap_base(
        "web",
        json!([
            {"name": "http", "containerPort": 8080},
            {"containerPort": 9090},
            {"name": "http", "containerPort": 8443},
            {"name": "dns", "containerPort": 53, "protocol": "UDP"},
            {"name": "again", "containerPort": 8080}
        ]),
    );
    let ports = service_ports(&base, &ServiceSpec::default()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        Value::Array(ports),
        json!([
            {"name": "http", "port": 8080, "protocol": "TCP", "targetPort": 8080},
            {"name": "tcp-9090", "port": 9090, "protocol": "TCP", "targetPort": 9090},
            {"name": "tcp-8443", "port": 8443, "protocol": "TCP", "targetPort": 8443},
            {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53}
        ])
    );
    let none = service_ports(&snap_base("web", json!([])), &ServiceSpec::default());
    assert!(none.is_err_and(|e| e.contains("declare none")));
}

// R36: ports as given, with protocol and target port written out
#[test]
fn ports_as_given() {
    let base = snap_base("web", json!([]));
    let spec = ServiceSpec {
        type_: ServiceType::NodePort,
        ports: vec![
            ServicePortSpec {
                name: Some("http".into()),
                target_port: Some(IntOrString::String("web".into())),
                node_port: Some(30080),
                app_protocol: Some("http".into()),
                ..port(80)
            },
            ServicePortSpec {
                name: Some("stats".into()),
                protocol: Some(ServiceProtocol::UDP),
                ..port(9000)
            },
        ],
    };
    let s = built(&base, "a", &spec);
    assert_eq!(
        at(&s, "/spec/ports"),
        &json!([
            {"name": "http", "port": 80, "protocol": "TCP", "targetPort": "web",
             "nodePort": 30080, "appProtocol": "http"},
            {"name": "stats", "port": 9000, "protocol": "UDP", "targetPort": 9000}
        ])
    );
}

// R36: what the API server would refuse is found first, every problem named
#[test]
fn the_service_spec_is_checked() {
    let clusterip = ServiceSpec {
        type_: ServiceType::ClusterIP,
        ports: vec![ServicePortSpec {
            node_port: Some(30001),
            target_port: Some(IntOrString::String("Bad_Name".into())),
            ..port(80)
        }],
    };
    let e = validate_service(&clusterip).unwrap_err();
    assert!(e.contains("nodePort 30001: only for type NodePort"), "{e}");
    assert!(e.contains("targetPort \"Bad_Name\""), "{e}");

    let several = ServiceSpec {
        type_: ServiceType::NodePort,
        ports: vec![
            port(80),
            ServicePortSpec {
                name: Some("a".into()),
                ..port(80)
            },
            ServicePortSpec {
                name: Some("a".into()),
                target_port: Some(IntOrString::Int(70000)),
                ..port(0)
            },
        ],
    };
    let e = validate_service(&several).unwrap_err();
    for needle in [
        "ports[0].name: required",
        "ports[1]: port 80 TCP given twice",
        "ports[2].name \"a\": given twice",
        "ports[2].port 0",
        "ports[2].targetPort 70000",
    ] {
        assert!(e.contains(needle), "{needle} not in {e}");
    }
    let udp_beside_tcp = ServiceSpec {
        type_: ServiceType::ClusterIP,
        ports: vec![
            ServicePortSpec {
                name: Some("tcp".into()),
                ..port(53)
            },
            ServicePortSpec {
                name: Some("udp".into()),
                protocol: Some(ServiceProtocol::UDP),
                ..port(53)
            },
        ],
    };
    assert_eq!(validate_service(&udp_beside_tcp), Ok(()));
}

// R36: a Service name must be a DNS-1035 label, which a Deployment name need not be
#[test]
fn service_names_start_with_a_letter_and_have_no_dot() {
    let spec = ServiceSpec::default();
    for base_name in ["web.v2", "1web"] {
        let e = build_service(&snap_base(base_name, http()), &owner(), "a", &spec).unwrap_err();
        assert!(e.contains("DNS-1035"), "{e}");
    }
    let e = build_service(&snap_base("web", json!([])), &owner(), "a", &spec).unwrap_err();
    assert!(e.starts_with("Service \"web-a\": service.ports"), "{e}");
}

/// `desired` as the API server returns it: defaults and allocations added, decoded as cached.
fn as_served(desired: &Value) -> ObservedService {
    let mut v = desired.clone();
    v["metadata"]["uid"] = json!("s-uid");
    v["metadata"]["resourceVersion"] = json!("7");
    v["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = json!("{}");
    v["spec"]["clusterIP"] = json!("10.43.0.12");
    v["spec"]["sessionAffinity"] = json!("None");
    v["spec"]["ports"][0]["nodePort"] = json!(31234);
    v["status"] = json!({"loadBalancer": {}});
    serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
}

// R5, R12, R36: nothing to write when what is served holds what is declared; a change is
// written; the cache's miss is created; someone else's is looked up, never written blind
#[test]
fn the_apply_decision() {
    let base = snap_base("web", http());
    let spec = node_port_spec();
    let desired = built(&base, "a", &spec);
    let served = as_served(&desired);
    assert_eq!(
        served.metadata.annotations.as_ref().map(|a| a.len()),
        Some(1)
    );
    assert_eq!(
        resolve_service(&desired, Some(&served), &owner(), false),
        Step::Keep
    );
    assert_eq!(
        resolve_service(&desired, None, &owner(), false),
        Step::Create
    );
    let other = built(
        &base,
        "a",
        &ServiceSpec {
            type_: ServiceType::LoadBalancer,
            ports: vec![],
        },
    );
    assert_eq!(
        resolve_service(&other, Some(&served), &owner(), false),
        Step::Write
    );
    let mut lookalike = served.clone();
    lookalike.metadata.owner_references = None;
    assert_eq!(
        resolve_service(&desired, Some(&lookalike), &owner(), false),
        Step::LookUp
    );
    assert!(foreign(&lookalike.metadata, &owner()).is_some());
}

// R36: a POST's field ownership is noted, to be handed over before the first apply
#[test]
fn a_created_service_is_handed_over() {
    let mut v = built(&snap_base("web", http()), "a", &ServiceSpec::default());
    v["metadata"]["managedFields"] = json!([
        {"manager": "kube-controller-manager", "operation": "Update"},
        {"manager": FIELD_MANAGER, "operation": "Update"}
    ]);
    let created: ObservedService = serde_json::from_value(v.clone()).unwrap_or_default();
    assert_eq!(
        created.created_entry(),
        Some(CreatedEntry {
            index: 1,
            applied_too: false
        })
    );
    v["metadata"]["managedFields"] = json!([{"manager": FIELD_MANAGER, "operation": "Apply"}]);
    let applied: ObservedService = serde_json::from_value(v).unwrap_or_default();
    assert_eq!(applied.created_entry(), None);
}

// R36: status names the Service, its type, DNS name, ports and node ports, and the load
// balancer's addresses once assigned; kubectl's column shows them as kubectl shows ports
#[test]
fn status_says_how_to_reach_the_service() {
    let base = snap_base("browser-snap", http());
    let served = as_served(&built(&base, "lilygo47", &node_port_spec()));
    let status = service_status(&served);
    assert_eq!(
        serde_json::to_value(&status).unwrap_or_default(),
        json!({
            "name": "browser-snap-lilygo47",
            "type": "NodePort",
            "dns": "browser-snap-lilygo47.team.svc",
            "clusterIP": "10.43.0.12",
            "ports": [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 31234}]
        })
    );

    let lb = ServiceSpec {
        type_: ServiceType::LoadBalancer,
        ports: vec![],
    };
    let mut v = built(&base, "radxa-8-hd", &lb);
    v["spec"]["clusterIP"] = json!("None");
    v["status"] = json!({"loadBalancer": {"ingress": [
        {"ip": "192.168.1.50"}, {"hostname": "snap.example.lan"}
    ]}});
    let balanced = service_status(&serde_json::from_value(v).unwrap_or_default());
    assert_eq!(balanced.cluster_ip, None);
    assert_eq!(balanced.ingress, ["192.168.1.50", "snap.example.lan"]);
    assert_eq!(balanced.ports[0].node_port, None);

    let mut lily = variant_status("lilygo47", VariantState::Ready, 1);
    lily.service = Some(status);
    let mut radxa = variant_status("radxa-8-hd", VariantState::Ready, 1);
    radxa.service = Some(balanced);
    let none = variant_status("plain", VariantState::Ready, 1);
    assert_eq!(
        services_column(&[lily, none, radxa]),
        "browser-snap-lilygo47 80:31234/TCP, \
         browser-snap-radxa-8-hd 192.168.1.50,snap.example.lan 80/TCP"
    );
    assert!(serves(VariantState::Progressing) && serves(VariantState::Ready));
    assert!(!serves(VariantState::Invalid) && !serves(VariantState::Conflict));
}
