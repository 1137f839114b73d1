//! R36, continued: a LoadBalancer's address, hand edits and changes of type on a
//! MutantDeployment; a Service that cannot be made; no request in a steady state.

use k8s_openapi::api::core::v1::Service;
use serde_json::json;

use super::*;

/// R36 for a MutantDeployment: a LoadBalancer Service reports the address its load balancer
/// assigns (written here as a load balancer controller would), a hand edit is put back, and a
/// change of type is applied (the node ports go with NodePort).
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn load_balancer_addresses_hand_edits_and_type_changes() {
    let f = Fixture::new("svc-lb").await;
    let mut manifest = mutant_deployment("kiosk", base("web"), json!([{ "label": "lobby" }]));
    manifest["spec"]["service"] = json!({
        "type": "LoadBalancer",
        "ports": [{ "name": "http", "port": 8080, "targetPort": 80 }]
    });
    f.apply::<MutantDeployment>(&manifest).await;
    f.wait_status::<MutantDeployment>("kiosk", "Service reported", |s| {
        s.variants[0]
            .service
            .as_ref()
            .is_some_and(|v| v.type_ == "LoadBalancer")
    })
    .await;
    let services: Api<Service> = f.ns.api();
    let svc = services.get("web-lobby").await.unwrap();
    let uid = svc.uid();
    let port = &svc.spec.as_ref().unwrap().ports.as_ref().unwrap()[0];
    assert_eq!((port.port, port.name.as_deref()), (8080, Some("http")));
    assert!(port.node_port.is_some());

    // The load balancer assigns an address: status and the column show it.
    services
        .patch_status(
            "web-lobby",
            &PatchParams::default(),
            &Patch::Merge(
                json!({ "status": { "loadBalancer": { "ingress": [{ "ip": "192.0.2.10" }] } } }),
            ),
        )
        .await
        .unwrap();
    let status = f
        .wait_status::<MutantDeployment>("kiosk", "the address reported", |s| {
            s.variants[0]
                .service
                .as_ref()
                .is_some_and(|v| v.ingress == ["192.0.2.10"])
        })
        .await;
    assert!(
        status
            .variant_services
            .starts_with("web-lobby 192.0.2.10 8080:"),
        "{}",
        status.variant_services
    );

    // A hand edit of the selector is put back.
    services
        .patch(
            "web-lobby",
            &PatchParams::default(),
            &Patch::Merge(
                json!({ "spec": { "selector": { "mutantops.neiam.org/variant": "x" } } }),
            ),
        )
        .await
        .unwrap();
    wait_for("the selector put back", CONVERGE, || async {
        let s = services.get("web-lobby").await.map_err(|e| e.to_string())?;
        let selector = s.spec.and_then(|s| s.selector).unwrap_or_default();
        if selector
            .get("mutantops.neiam.org/variant")
            .map(String::as_str)
            == Some("lobby")
        {
            Ok(())
        } else {
            Err(format!("{selector:?}"))
        }
    })
    .await;

    // ClusterIP: applied over the Service the operator created, node ports gone.
    manifest["spec"]["service"] =
        json!({ "ports": [{ "name": "http", "port": 8080, "targetPort": 80 }] });
    f.apply::<MutantDeployment>(&manifest).await;
    f.wait_status::<MutantDeployment>("kiosk", "ClusterIP reported", |s| {
        s.variants[0].service.as_ref().is_some_and(|v| {
            v.type_ == "ClusterIP" && v.ports.iter().all(|p| p.node_port.is_none())
        })
    })
    .await;
    let svc = services.get("web-lobby").await.unwrap();
    assert_eq!(svc.uid(), uid, "the same Service, changed in place");
    let spec = svc.spec.unwrap();
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
    assert_eq!(spec.ports.unwrap()[0].node_port, None);
}

/// R36: a Service that cannot be made (no port given and none in the base) makes each variant
/// Invalid, saying why, while its Deployment runs; the HTTP API refuses such a Mutation, and a
/// `service` it does not know, with 400.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_service_that_cannot_be_made_is_reported() {
    let f = Fixture::with_api("svc-invalid").await;
    let mut manifest = mutation("m", base("web"), json!([{ "label": "a" }]));
    manifest["spec"]["service"] = json!({ "type": "NodePort" });
    f.apply::<Mutation>(&manifest).await;
    let status = f
        .wait_status::<Mutation>("m", "a invalid", |s| {
            s.variants
                .first()
                .is_some_and(|v| v.state == VariantState::Invalid)
        })
        .await;
    let message = status.variants[0].message.clone().unwrap_or_default();
    assert!(message.contains("declare none"), "{message}");
    f.wait_deployment("web-a", "ready", |d| ready(d, 1)).await;

    let body = |service: Value| {
        json!({ "name": "n", "deployment": base("news"), "variants": [{ "label": "a" }],
                "service": service })
    };
    let reply = f
        .call("POST", "/mutations", Some(ADMIN), Some(&body(json!({}))))
        .await;
    assert_eq!(reply.status, 400, "{reply:?}");
    assert!(reply.body.contains("declare none"), "{reply:?}");
    let reply = f
        .call(
            "POST",
            "/mutations",
            Some(ADMIN),
            Some(&body(json!({ "type": "NodePort", "portz": [] }))),
        )
        .await;
    assert_eq!(reply.status, 400, "{reply:?}");
    let reply = f
        .call(
            "POST",
            "/mutations",
            Some(ADMIN),
            Some(&body(
                json!({ "ports": [{ "port": 80, "nodePort": 30080 }] }),
            )),
        )
        .await;
    assert_eq!(reply.status, 400, "{reply:?}");
    assert!(reply.body.contains("only for type NodePort"), "{reply:?}");
    let good = body(json!({ "type": "NodePort", "ports": [{ "port": 80 }] }));
    let reply = f.call("POST", "/mutations", Some(ADMIN), Some(&good)).await;
    assert_eq!(reply.status, 201, "{reply:?}");
    let stored = f.mutations().get("n").await.unwrap();
    assert_eq!(
        serde_json::to_value(stored.spec.service).unwrap(),
        json!({ "type": "NodePort", "ports": [{ "port": 80 }] })
    );
}

/// R12 with R36: once converged, a reconcile makes no request for the Services either (the
/// server's additions, cluster IP, node ports and defaults, do not count as a difference).
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn services_in_a_steady_state_cost_no_request() {
    let audit = audit_log();
    let f = Fixture::new("svc-steady").await;
    let mut m = mutation(
        "m",
        snap_base(),
        json!([{ "label": "a" }, { "label": "b" }]),
    );
    m["spec"]["service"] = json!({ "type": "NodePort" });
    f.apply::<Mutation>(&m).await;
    let mut d = mutant_deployment("d", base("md"), json!([{ "label": "a" }]));
    d["spec"]["service"] = json!({ "type": "LoadBalancer", "ports": [
        { "name": "http", "port": 80, "targetPort": "http", "appProtocol": "http" },
        { "name": "dns", "port": 53, "protocol": "UDP" }
    ] });
    f.apply::<MutantDeployment>(&d).await;
    let served = |s: &OwnerStatus| {
        s.summary.starts_with(&format!("{0}/{0}", s.variants.len()))
            && s.variants.iter().all(|v| v.service.is_some())
    };
    f.wait_status::<Mutation>("m", "served", served).await;
    f.wait_status::<MutantDeployment>("d", "served", served)
        .await;

    let offset = quiet_offset(&f, &audit).await;
    // Touch every Service: each watch event makes its owner reconcile again. Counted from
    // before the first touch: a reconcile may end before the last touch is answered.
    let before = reconciles(&f.operator);
    let services: Api<Service> = f.ns.api();
    let touch = json!({ "metadata": { "labels": { "test.neiam.org/touched": "yes" } } });
    for name in ["browser-snap-a", "browser-snap-b", "md-a"] {
        services
            .patch(name, &PatchParams::default(), &Patch::Merge(&touch))
            .await
            .unwrap();
    }
    assert_steady(&f, &audit, offset, before).await;
}
