//! R36: who may reach a variant's Service. The owner's
//! `loadBalancerSourceRanges`, `externalTrafficPolicy`, `ipFamilies` and `ipFamilyPolicy` reach
//! every variant's Service (read back from the API server) and follow changes; a bad CIDR is
//! refused naming the field, by the API server (the CRD's rule) and by the HTTP API (400).

use k8s_openapi::api::core::v1::Service;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::*;

/// The reach fields of Service `name`, as the API server holds them.
fn reach_of(service: Service) -> Value {
    let spec = service.spec.unwrap_or_default();
    json!({
        "type": spec.type_,
        "loadBalancerSourceRanges": spec.load_balancer_source_ranges,
        "externalTrafficPolicy": spec.external_traffic_policy,
        "ipFamilies": spec.ip_families,
        "ipFamilyPolicy": spec.ip_family_policy,
    })
}

/// Waits until Service `name` has the reach fields `expected`.
async fn wait_reach(f: &Fixture, name: &str, expected: &Value) {
    let services: Api<Service> = f.ns.api();
    wait_for(&format!("Service {name}: {expected}"), CONVERGE, || async {
        let service = services.get_opt(name).await.map_err(|e| e.to_string())?;
        let got = reach_of(service.ok_or("not there yet")?);
        if &got == expected {
            Ok(())
        } else {
            Err(got.to_string())
        }
    })
    .await;
}

/// R36: a MutantDeployment's source ranges, traffic policy and IP families are on
/// each variant's Service, and a change of them is applied to the same Service; removing them
/// gives Kubernetes' defaults back. A bad CIDR is refused by the API server naming the entry,
/// and nothing changes.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn source_ranges_traffic_policy_and_families_reach_each_service() {
    let f = Fixture::new("svc-reach").await;
    let mut manifest = mutant_deployment(
        "kiosk",
        base("web"),
        json!([{ "label": "lobby" }, { "label": "hall" }]),
    );
    manifest["spec"]["service"] = json!({
        "type": "LoadBalancer",
        "ports": [{ "name": "http", "port": 8080, "targetPort": 80 }],
        "loadBalancerSourceRanges": ["192.168.1.0/24", "fd00::/64"],
        "externalTrafficPolicy": "Local",
        "ipFamilies": ["IPv4"],
        "ipFamilyPolicy": "SingleStack",
    });
    f.apply::<MutantDeployment>(&manifest).await;
    let expected = json!({
        "type": "LoadBalancer",
        "loadBalancerSourceRanges": ["192.168.1.0/24", "fd00::/64"],
        "externalTrafficPolicy": "Local",
        "ipFamilies": ["IPv4"],
        "ipFamilyPolicy": "SingleStack",
    });
    for name in ["web-lobby", "web-hall"] {
        wait_reach(&f, name, &expected).await;
    }
    f.wait_status::<MutantDeployment>("kiosk", "both served", |s| {
        s.variants.len() == 2 && s.variants.iter().all(|v| v.service.is_some())
    })
    .await;
    let services: Api<Service> = f.ns.api();
    let uid = services.get("web-lobby").await.unwrap().metadata.uid;

    // Changed: applied over the same Service.
    manifest["spec"]["service"]["loadBalancerSourceRanges"] = json!(["10.20.0.0/16"]);
    manifest["spec"]["service"]["externalTrafficPolicy"] = json!("Cluster");
    f.apply::<MutantDeployment>(&manifest).await;
    let changed = json!({
        "type": "LoadBalancer",
        "loadBalancerSourceRanges": ["10.20.0.0/16"],
        "externalTrafficPolicy": "Cluster",
        "ipFamilies": ["IPv4"],
        "ipFamilyPolicy": "SingleStack",
    });
    wait_reach(&f, "web-lobby", &changed).await;
    assert_eq!(services.get("web-lobby").await.unwrap().metadata.uid, uid);

    // A bad CIDR: the API server refuses the owner, naming the entry; nothing changes.
    let mut bad = manifest.clone();
    bad["spec"]["service"]["loadBalancerSourceRanges"] = json!(["10.20.0.0/16", "10.0.0.0/33"]);
    let refused = f
        .mutant_deployments()
        .patch(
            "kiosk",
            &PatchParams::apply("test-author").force(),
            &Patch::Apply(&bad),
        )
        .await
        .unwrap_err();
    let message = refused.to_string();
    assert!(
        message.contains("spec.service.loadBalancerSourceRanges[1]")
            && message.contains("must be a CIDR"),
        "{message}"
    );
    let stored = f.mutant_deployments().get("kiosk").await.unwrap();
    let ranges = &stored.spec.service.unwrap().load_balancer_source_ranges;
    assert_eq!(ranges, &["10.20.0.0/16"]);

    // Left out again: what the operator set goes, Kubernetes' defaults come back.
    manifest["spec"]["service"] = json!({
        "type": "LoadBalancer",
        "ports": [{ "name": "http", "port": 8080, "targetPort": 80 }],
    });
    f.apply::<MutantDeployment>(&manifest).await;
    let defaults = json!({
        "type": "LoadBalancer",
        "loadBalancerSourceRanges": null,
        "externalTrafficPolicy": "Cluster",
        "ipFamilies": ["IPv4"],
        "ipFamilyPolicy": "SingleStack",
    });
    wait_reach(&f, "web-lobby", &defaults).await;
}

/// R36, R24: the HTTP API refuses a create whose source ranges hold no CIDR, or that
/// gives them (or a traffic policy) to a type that cannot have them, with 400 naming the
/// field; a good one is stored as sent and its variants' Services carry it.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn the_api_refuses_a_bad_cidr_naming_the_field() {
    let f = Fixture::with_api("svc-reach-api").await;
    let body = |service: Value| {
        json!({ "name": "n", "deployment": base("news"), "variants": [{ "label": "a" }],
                "service": service })
    };
    let port = json!([{ "port": 80 }]);
    for (service, needle) in [
        (
            json!({ "type": "LoadBalancer", "ports": port,
                    "loadBalancerSourceRanges": ["192.168.1.0/24", "192.168.1.300/24"] }),
            "service.loadBalancerSourceRanges[1]",
        ),
        (
            json!({ "type": "NodePort", "ports": port,
                    "loadBalancerSourceRanges": ["192.168.1.0/24"] }),
            "service.loadBalancerSourceRanges: only for type LoadBalancer, not NodePort",
        ),
        (
            json!({ "ports": port, "externalTrafficPolicy": "Local" }),
            "service.externalTrafficPolicy Local: only for type NodePort or LoadBalancer",
        ),
    ] {
        let reply = f
            .call("POST", "/mutations", Some(ADMIN), Some(&body(service)))
            .await;
        assert_eq!(reply.status, 400, "{reply:?}");
        assert!(reply.body.contains(needle), "{needle} not in {reply:?}");
        assert!(!needle.ends_with(']') || reply.body.contains("must be a CIDR"));
    }
    assert!(f.mutations().get_opt("n").await.unwrap().is_none());

    let service = json!({ "type": "NodePort", "ports": port,
                          "externalTrafficPolicy": "Local", "ipFamilies": ["IPv4"] });
    let reply = f
        .call(
            "POST",
            "/mutations",
            Some(ADMIN),
            Some(&body(service.clone())),
        )
        .await;
    assert_eq!(reply.status, 201, "{reply:?}");
    let stored = f.mutations().get("n").await.unwrap();
    assert_eq!(serde_json::to_value(stored.spec.service).unwrap(), service);
    let expected = json!({
        "type": "NodePort",
        "loadBalancerSourceRanges": null,
        "externalTrafficPolicy": "Local",
        "ipFamilies": ["IPv4"],
        "ipFamilyPolicy": "SingleStack",
    });
    wait_reach(&f, "news-a", &expected).await;
}
