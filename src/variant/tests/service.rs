//! Tests of a variant's Service (R36): building it, its ports (given, or the base's), the
//! checks of the owner's `service`, the apply decision, and what status reports of it.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Value, json};

use super::*;
use crate::crd::{
    IpFamily, IpFamilyPolicy, ServicePortSpec, ServiceProtocol, ServiceSpec, ServiceType,
    TrafficPolicy, VariantState, fixtures::variant_status,
};

/// The browser-snap base: one container with port 80 named http.
pub(super) fn snap_base(name: &str, ports: Value) -> Base {
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

pub(super) fn http() -> Value {
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

pub(super) fn node_port_spec() -> ServiceSpec {
    ServiceSpec {
        type_: ServiceType::NodePort,
        ports: vec![],
        ..ServiceSpec::default()
    }
}

pub(super) fn built(base: &Base, label: &str, spec: &ServiceSpec) -> Value {
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
        ..ServiceSpec::default()
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
        ..ServiceSpec::default()
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
        ..ServiceSpec::default()
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
        ..ServiceSpec::default()
    };
    assert_eq!(validate_service(&udp_beside_tcp), Ok(()));
}

// R36: who may reach the Service is copied into every variant's, as
// Kubernetes names it; left out, nothing is written (the server's defaults stay)
#[test]
fn source_ranges_traffic_policy_and_families_are_copied() {
    let spec = ServiceSpec {
        type_: ServiceType::LoadBalancer,
        load_balancer_source_ranges: vec!["192.168.1.0/24".into(), "fd00::/64".into()],
        external_traffic_policy: Some(TrafficPolicy::Local),
        ip_families: vec![IpFamily::IPv4],
        ip_family_policy: Some(IpFamilyPolicy::SingleStack),
        ..ServiceSpec::default()
    };
    let s = built(&snap_base("web", http()), "a", &spec);
    assert_eq!(
        at(&s, "/spec/loadBalancerSourceRanges"),
        &json!(["192.168.1.0/24", "fd00::/64"])
    );
    assert_eq!(at(&s, "/spec/externalTrafficPolicy"), &json!("Local"));
    assert_eq!(at(&s, "/spec/ipFamilies"), &json!(["IPv4"]));
    assert_eq!(at(&s, "/spec/ipFamilyPolicy"), &json!("SingleStack"));
    let plain = built(&snap_base("web", http()), "a", &node_port_spec());
    let fields: Vec<&String> = plain["spec"]
        .as_object()
        .map(|o| o.keys().collect())
        .unwrap_or_default();
    assert_eq!(fields.len(), 3, "{fields:?}");
    // A change of who may reach it is a change of the desired Service (its hash).
    let annotation = |v: &Value| at(v, "/metadata/annotations").clone();
    assert_ne!(
        annotation(&s),
        annotation(&built(
            &snap_base("web", http()),
            "a",
            &ServiceSpec {
                load_balancer_source_ranges: vec!["10.0.0.0/8".into()],
                ..spec.clone()
            }
        ))
    );
}

// R36: bad source ranges, and fields for the wrong type, are refused naming the
// field, as the API server would refuse the Service
#[test]
fn source_ranges_traffic_policy_and_families_are_checked() {
    let lb = |ranges: &[&str]| ServiceSpec {
        type_: ServiceType::LoadBalancer,
        ports: vec![port(80)],
        load_balancer_source_ranges: ranges.iter().map(|r| (*r).to_owned()).collect(),
        ..ServiceSpec::default()
    };
    for good in [
        "192.168.1.0/24",
        "0.0.0.0/0",
        "10.1.2.3/32",
        "192.168.1.10/24",
        "fd00::/64",
        "::/0",
        "2001:db8::1/128",
        "FD00::/64",
        "::1.2.3.4/128",
    ] {
        assert_eq!(validate_service(&lb(&[good])), Ok(()), "{good}");
    }
    for bad in [
        "192.168.1.0",
        "192.168.1.0/33",
        "192.168.1.0/08",
        "192.168.01.0/24",
        " 10.0.0.0/8",
        "10.0.0.0/8 ",
        "10.0.0.0/",
        "fd00::/129",
        "fe80::1%eth0/64",
        "::ffff:10.0.0.0/104",
        "any",
        "",
    ] {
        let e = validate_service(&lb(&["10.0.0.0/8", bad])).unwrap_err();
        assert!(
            e.starts_with("service.loadBalancerSourceRanges[1]") && e.contains("must be a CIDR"),
            "{bad:?}: {e}"
        );
    }
    let many: Vec<String> = (0..33).map(|i| format!("10.0.{i}.0/24")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let e = validate_service(&lb(&many)).unwrap_err();
    assert!(e.contains("33 entries, at most 32"), "{e}");

    let node_port = ServiceSpec {
        type_: ServiceType::NodePort,
        external_traffic_policy: Some(TrafficPolicy::Local),
        ..lb(&["10.0.0.0/8"])
    };
    let e = validate_service(&node_port).unwrap_err();
    assert_eq!(
        e,
        "service.loadBalancerSourceRanges: only for type LoadBalancer, not NodePort"
    );
    let cluster_ip = ServiceSpec {
        type_: ServiceType::ClusterIP,
        external_traffic_policy: Some(TrafficPolicy::Cluster),
        ..lb(&[])
    };
    let e = validate_service(&cluster_ip).unwrap_err();
    assert_eq!(
        e,
        "service.externalTrafficPolicy Cluster: only for type NodePort or LoadBalancer"
    );

    let families = |ip_families: Vec<IpFamily>, policy| ServiceSpec {
        ip_families,
        ip_family_policy: policy,
        ..lb(&[])
    };
    let dual = families(vec![IpFamily::IPv6, IpFamily::IPv4], None);
    assert_eq!(validate_service(&dual), Ok(()));
    let e = validate_service(&families(
        vec![IpFamily::IPv4, IpFamily::IPv4],
        Some(IpFamilyPolicy::SingleStack),
    ))
    .unwrap_err();
    assert!(e.contains("service.ipFamilies[1] IPv4: given twice"), "{e}");
    assert!(e.contains("service.ipFamilyPolicy SingleStack"), "{e}");
    let three = families(vec![IpFamily::IPv4, IpFamily::IPv6, IpFamily::IPv6], None);
    let e = validate_service(&three).unwrap_err();
    assert!(
        e.contains("service.ipFamilies: 3 entries, at most 2"),
        "{e}"
    );
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
pub(super) fn as_served(desired: &Value) -> ObservedService {
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
            ..ServiceSpec::default()
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
        ..ServiceSpec::default()
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
    lily.service = Some(Box::new(status));
    let mut radxa = variant_status("radxa-8-hd", VariantState::Ready, 1);
    radxa.service = Some(Box::new(balanced));
    let none = variant_status("plain", VariantState::Ready, 1);
    assert_eq!(
        services_column(&[lily, none, radxa]),
        "browser-snap-lilygo47 80:31234/TCP, \
         browser-snap-radxa-8-hd 192.168.1.50,snap.example.lan 80/TCP"
    );
    assert!(serves(VariantState::Progressing) && serves(VariantState::Ready));
    assert!(!serves(VariantState::Invalid) && !serves(VariantState::Conflict));
}
