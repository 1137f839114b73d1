//! R36: a Service per variant. Each variant's Service selects exactly its variant's pods (the
//! EndpointSlices of the fake node's pods, which get IPs, hold only those), is pruned with its
//! variant and when `service` leaves the spec, is never written over someone else's Service
//! (the variant is Conflict), and the variant's status and the HTTP API say how to reach it.

use std::collections::BTreeSet;

use k8s_openapi::api::{
    core::v1::{Pod, Service},
    discovery::v1::EndpointSlice,
};
use kube::api::{ListParams, PostParams};
use serde_json::json;

use super::*;

mod changes;
mod reach;

/// The browser-snap base: one container serving port 80, named http.
fn snap_base() -> Value {
    let mut b = base("browser-snap");
    b["spec"]["template"]["spec"]["containers"][0]["ports"] =
        json!([{ "name": "http", "containerPort": 80 }]);
    b
}

/// The IPs of the running pods of variant `label`.
async fn pod_ips(f: &Fixture, label: &str) -> BTreeSet<String> {
    let pods: Api<Pod> = f.ns.api();
    let selector = format!("mutantops.neiam.org/variant={label}");
    let list = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .unwrap();
    list.items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
        .collect()
}

/// The ready addresses of the EndpointSlices of Service `name`.
async fn endpoint_ips(f: &Fixture, name: &str) -> BTreeSet<String> {
    let slices: Api<EndpointSlice> = f.ns.api();
    let selector = format!("kubernetes.io/service-name={name}");
    let list = slices
        .list(&ListParams::default().labels(&selector))
        .await
        .unwrap();
    list.items
        .iter()
        .flat_map(|s| s.endpoints.iter())
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
        .flat_map(|e| e.addresses.iter().cloned())
        .collect()
}

/// Waits until Service `name` is gone.
async fn wait_service_gone(f: &Fixture, name: &str) {
    let services: Api<Service> = f.ns.api();
    wait_for(
        &format!("Service {name} to be deleted"),
        CONVERGE,
        || async {
            match services.get_opt(name).await.map_err(|e| e.to_string())? {
                None => Ok(()),
                Some(_) => Err("still there".to_string()),
            }
        },
    )
    .await;
}

/// R36: the browser-snap example of docs/behaviour.md: each display kind's variant gets Service
/// `browser-snap-<label>`, whose endpoints are exactly that variant's pods; status, the API's
/// variant answer (with the Mutation's own token) and `kubectl get -o wide` say how to reach
/// it; removing a variant removes its Service, removing `service` removes them all.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn each_variant_gets_a_service_of_its_own_pods() {
    let f = Fixture::with_api("svc-each").await;
    let mut manifest = mutation(
        "browser-snap",
        snap_base(),
        json!([
            { "label": "radxa-8-hd", "env": { "SNAP_RES": "1280x800" }, "instances": 2 },
            { "label": "lilygo47", "env": { "SNAP_RES": "960x540" }, "instances": 1 }
        ]),
    );
    manifest["spec"]["service"] = json!({ "type": "NodePort" });
    f.apply::<Mutation>(&manifest).await;
    let status = f
        .wait_status::<Mutation>("browser-snap", "2/2 with Services", |s| {
            s.summary == "2/2 variants ready" && s.variants.iter().all(|v| v.service.is_some())
        })
        .await;
    let owner = f.mutations().get("browser-snap").await.unwrap();
    let services: Api<Service> = f.ns.api();
    let mut node_ports = Vec::new();
    for (label, other) in [("radxa-8-hd", "lilygo47"), ("lilygo47", "radxa-8-hd")] {
        let name = format!("browser-snap-{label}");
        let svc = services.get(&name).await.unwrap();
        assert_eq!(controller_of(&svc), controlled_by(&owner));
        let spec = svc.spec.clone().unwrap();
        assert_eq!(spec.type_.as_deref(), Some("NodePort"));
        // The selector is the variant's three labels, all on its pod template and not all on
        // the other variant's.
        let selector = spec.selector.clone().unwrap();
        assert_eq!(selector.len(), 3, "{selector:?}");
        assert_eq!(selector["mutantops.neiam.org/variant"], label);
        let mine = template_labels(&f.deployments().get(&name).await.unwrap());
        let theirs = template_labels(
            &f.deployments()
                .get(&format!("browser-snap-{other}"))
                .await
                .unwrap(),
        );
        assert!(selector.iter().all(|(k, v)| mine.get(k) == Some(v)));
        assert!(!selector.iter().all(|(k, v)| theirs.get(k) == Some(v)));
        // The Deployment's selector is the one it always had.
        let deployment = f.deployments().get(&name).await.unwrap();
        let match_labels = deployment.spec.unwrap().selector.match_labels.unwrap();
        assert_eq!(match_labels.len(), 4, "{match_labels:?}");
        // Its endpoints are exactly its variant's pods (the fake node gives pods IPs).
        let want = pod_ips(&f, label).await;
        let instances = if label == "radxa-8-hd" { 2 } else { 1 };
        assert_eq!(want.len(), instances, "{want:?}");
        let got = wait_for(&format!("endpoints of {name}"), CONVERGE, || async {
            let got = endpoint_ips(&f, &name).await;
            if got == want {
                Ok(got)
            } else {
                Err(format!("{got:?}, want {want:?}"))
            }
        })
        .await;
        assert!(got.is_disjoint(&pod_ips(&f, other).await));

        // Status: name, type, DNS name, port and node port, as the Service has them.
        let node_port = spec.ports.unwrap()[0].node_port.unwrap();
        node_ports.push((label, node_port));
        let reported = status.variants.iter().find(|v| v.label == label).unwrap();
        let reported = serde_json::to_value(reported.service.as_ref().unwrap()).unwrap();
        assert_eq!(reported["name"], name.as_str());
        assert_eq!(reported["type"], "NodePort");
        assert_eq!(reported["dns"], format!("{name}.{}.svc", f.ns.name));
        assert_eq!(reported["clusterIP"], spec.cluster_ip.unwrap().as_str());
        assert_eq!(
            reported["ports"],
            json!([{ "name": "http", "port": 80, "protocol": "TCP", "nodePort": node_port }])
        );
    }

    // The API's variant answer, with the Mutation's own token: what a device reads.
    let token = f.token("browser-snap").await;
    let reply = f
        .call(
            "GET",
            "/mutations/browser-snap/variants/lilygo47",
            Some(&token),
            None,
        )
        .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let answer = reply.json();
    assert_eq!(answer["status"]["service"]["name"], "browser-snap-lilygo47");
    assert_eq!(
        answer["status"]["service"]["ports"][0]["nodePort"],
        node_ports[1].1
    );
    let listed = f
        .call(
            "GET",
            "/mutations/browser-snap/variants",
            Some(&token),
            None,
        )
        .await
        .json();
    assert_eq!(
        listed[0]["status"]["service"]["ports"][0]["nodePort"],
        node_ports[0].1
    );

    // kubectl get -o wide: the SERVICES column; the default columns are unchanged.
    let wide = kubectl(&[
        "-n",
        &f.ns.name,
        "get",
        "mutation",
        "browser-snap",
        "-o",
        "wide",
    ]);
    let text = String::from_utf8_lossy(&wide.stdout).to_string();
    assert!(text.lines().next().unwrap().contains("SERVICES"), "{text}");
    let column = format!(
        "browser-snap-radxa-8-hd 80:{}/TCP, browser-snap-lilygo47 80:{}/TCP",
        node_ports[0].1, node_ports[1].1
    );
    assert!(text.contains(&column), "{column} not in\n{text}");
    let narrow = kubectl(&["-n", &f.ns.name, "get", "mutation", "browser-snap"]);
    let header = String::from_utf8_lossy(&narrow.stdout)
        .lines()
        .next()
        .unwrap()
        .to_string();
    assert_eq!(
        header.split_whitespace().collect::<Vec<_>>(),
        ["NAME", "BASE", "READY", "SECRET", "AGE"]
    );

    // Removing a variant (through the API) removes its Service, and only that one. The
    // variant is the owner's, so the admin removes it (R32: the token removes only its own).
    let radxa_uid = services.get("browser-snap-radxa-8-hd").await.unwrap().uid();
    let reply = f
        .call(
            "DELETE",
            "/mutations/browser-snap/variants/lilygo47",
            Some(ADMIN),
            None,
        )
        .await;
    assert_eq!(reply.status, 204, "{reply:?}");
    wait_service_gone(&f, "browser-snap-lilygo47").await;
    assert_eq!(
        services.get("browser-snap-radxa-8-hd").await.unwrap().uid(),
        radxa_uid
    );
    let pruned = events(&f, "ServicePruned", 1).await;
    assert_eq!(pruned[0].0, "browser-snap-lilygo47");

    // Removing `service` from the spec removes the rest; the Deployment stays.
    let mut without = manifest.clone();
    without["spec"]["variants"] = json!([manifest["spec"]["variants"][0]]);
    without["spec"].as_object_mut().unwrap().remove("service");
    f.apply::<Mutation>(&without).await;
    wait_service_gone(&f, "browser-snap-radxa-8-hd").await;
    f.wait_status::<Mutation>("browser-snap", "no Service reported", |s| {
        s.variants.len() == 1 && s.variants[0].service.is_none() && s.variant_services.is_empty()
    })
    .await;
    assert!(
        f.deployments()
            .get_opt("browser-snap-radxa-8-hd")
            .await
            .unwrap()
            .is_some()
    );
}

/// R36 (as R9): a Service of a variant's name that the owner does not control, made by hand or
/// merely carrying the owner's labels, is never written over: the variant is Conflict, its
/// Deployment still runs, the foreign Services are left exactly as they were.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_foreign_service_is_a_conflict_and_left_alone() {
    let audit = audit_log();
    let f = Fixture::new("svc-foreign").await;
    let services: Api<Service> = f.ns.api();
    let mut nobodys: Service = common::from_json(json!({
        "metadata": { "name": "web-b" },
        "spec": { "selector": { "app": "elsewhere" }, "ports": [{ "port": 8080 }] }
    }));
    nobodys = services
        .create(&PostParams::default(), &nobodys)
        .await
        .unwrap();
    let lookalike: Service = common::from_json(json!({
        "metadata": { "name": "web-c", "labels": {
            "mutantops.neiam.org/owner": "mine",
            "mutantops.neiam.org/kind": "mutation",
            "mutantops.neiam.org/variant": "c"
        } },
        "spec": { "selector": { "app": "elsewhere" }, "ports": [{ "port": 9090 }] }
    }));
    let lookalike = services
        .create(&PostParams::default(), &lookalike)
        .await
        .unwrap();

    let start = log_size(&audit);
    let mut b = base("web");
    b["spec"]["template"]["spec"]["containers"][0]["ports"] = json!([{ "containerPort": 80 }]);
    let mut manifest = mutation(
        "mine",
        b,
        json!([{ "label": "a" }, { "label": "b" }, { "label": "c" }]),
    );
    manifest["spec"]["service"] = json!({});
    f.apply::<Mutation>(&manifest).await;
    let status = f
        .wait_status::<Mutation>("mine", "a served, b and c in conflict", |s| {
            s.variants.len() == 3
                && s.variants[0].service.is_some()
                && s.variants[1].state == VariantState::Conflict
                && s.variants[2].state == VariantState::Conflict
        })
        .await;
    for (i, name) in [(1, "web-b"), (2, "web-c")] {
        let message = status.variants[i].message.clone().unwrap_or_default();
        assert!(
            message.contains(&format!("Service \"{name}\" already exists")),
            "{message}"
        );
        assert!(status.variants[i].service.is_none());
        // The variant's Deployment is this owner's and runs.
        f.wait_deployment(name, "ready", |d| ready(d, 1)).await;
    }
    let a = services.get("web-a").await.unwrap();
    assert_eq!(a.spec.unwrap().type_.as_deref(), Some("ClusterIP"));
    let ready_condition = &status.conditions[0];
    assert_eq!(ready_condition.status, "False");
    assert!(
        ready_condition.message.contains("2 in conflict: b, c"),
        "{ready_condition:?}"
    );
    // R26: one VariantConflict Event for each.
    let found = events(&f, "VariantConflict", 2).await;
    assert!(found.iter().all(|(_, _, times)| *times == 1), "{found:?}");

    // Left alone: no write of the operator to either, and both as they were.
    for (name, before) in [("web-b", &nobodys), ("web-c", &lookalike)] {
        let now = services.get(name).await.unwrap();
        assert_eq!(controller_of(&now), None);
        assert_eq!(
            now.metadata.resource_version,
            before.metadata.resource_version
        );
        assert_eq!(
            now.spec.unwrap().selector,
            before.spec.clone().unwrap().selector
        );
    }
    let writes: Vec<String> = operator_requests(&audit, start, &f.ns.name)
        .into_iter()
        .filter(|r| !r.starts_with("get ") && r.contains("/services/"))
        .filter(|r| r.contains("/web-b") || r.contains("/web-c"))
        .collect();
    assert_eq!(
        writes,
        Vec::<String>::new(),
        "the operator wrote to a foreign Service"
    );

    // Deleting the owner leaves them too (only its own Service goes, with its ownerReference).
    f.mutations()
        .delete("mine", &Default::default())
        .await
        .unwrap();
    wait_service_gone(&f, "web-a").await;
    assert!(services.get_opt("web-b").await.unwrap().is_some());
    assert!(services.get_opt("web-c").await.unwrap().is_some());
}
