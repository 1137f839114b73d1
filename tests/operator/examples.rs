//! Two examples of deploy/examples/ (nginx-mutant, browser-snap), applied as written; the third,
//! browser-snap-screens, is applied by `screens.rs`.

use kube::api::DeleteParams;
use serde_json::json;

use super::*;

/// R4, R6, R7, R11: nginx-mutant gives nginx-deployment-canary (1 replica, NGINX_VERSION=1.22)
/// and nginx-deployment-experimental (3 replicas), whose pods become Ready; removing a
/// mutation deletes its Deployment; deleting the MutantDeployment deletes all of them.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn nginx_mutant_example() {
    let f = Fixture::new("ctl-nginx").await;
    let manifest = example("nginx-mutant.yaml");
    f.apply::<MutantDeployment>(&manifest).await;

    let canary = f
        .wait_deployment("nginx-deployment-canary", "1 ready replica", |d| {
            ready(d, 1)
        })
        .await;
    let experimental = f
        .wait_deployment("nginx-deployment-experimental", "3 ready replicas", |d| {
            ready(d, 3)
        })
        .await;
    assert!(env_of(&canary).contains(&("NGINX_VERSION".into(), "1.22".into())));
    assert!(env_of(&experimental).contains(&("NGINX_EXPERIMENTAL".into(), "true".into())));
    let owner = f.mutant_deployments().get("nginx-mutant").await.unwrap();
    for d in [&canary, &experimental] {
        // R4: labels on the Deployment, its selector and its pod template; controller reference.
        let spec = d.spec.as_ref().unwrap();
        let metadata = d.metadata.labels.clone().unwrap();
        let selector = spec.selector.match_labels.clone().unwrap();
        let template = template_labels(d);
        for labels in [&metadata, &selector, &template] {
            assert_eq!(labels["mutantops.neiam.org/owner"], "nginx-mutant");
            assert_eq!(labels["mutantops.neiam.org/kind"], "mutantdeployment");
        }
        assert_eq!(selector["app"], "nginx");
        assert_eq!(template["app"], "nginx");
        assert_eq!(
            selector["mutantops.neiam.org/variant"],
            template["mutantops.neiam.org/variant"]
        );
        assert_eq!(controller_of(d), controlled_by(&owner));
        let reference = &d.owner_references()[0];
        assert_eq!(reference.block_owner_deletion, Some(true));
    }
    assert_eq!(
        template_labels(&canary)["mutantops.neiam.org/variant"],
        "canary"
    );
    let status = f
        .wait_status::<MutantDeployment>("nginx-mutant", "2/2 ready", |s| {
            s.summary == "2/2 variants ready"
        })
        .await;
    assert_eq!(status.variants[0].deployment, "nginx-deployment-canary");
    assert_eq!(
        (
            status.variants[1].replicas,
            status.variants[1].ready_replicas
        ),
        (3, 3)
    );

    // R6: removing a mutation deletes its Deployment, and only that one.
    let mut fewer = manifest.clone();
    fewer["spec"]["mutations"] = json!([manifest["spec"]["mutations"][0]]);
    f.apply::<MutantDeployment>(&fewer).await;
    f.wait_gone("nginx-deployment-experimental").await;
    let still = f
        .deployments()
        .get("nginx-deployment-canary")
        .await
        .unwrap();
    assert_eq!(
        still.uid(),
        canary.uid(),
        "the remaining variant is kept as it is"
    );

    // R26: one Event for the Deployments the first reconcile created (naming both), one for
    // the one pruned, each published once.
    let created = events(&f, "VariantCreated", 1).await;
    assert_eq!(created.len(), 1, "{created:?}");
    assert_eq!(
        created[0].1,
        "created 2 Deployments: nginx-deployment-canary (variant canary), \
         nginx-deployment-experimental (variant experimental)"
    );
    let pruned = events(&f, "VariantPruned", 1).await;
    assert_eq!(pruned.len(), 1);
    assert_eq!(pruned[0].0, "nginx-deployment-experimental");
    assert!(
        created
            .iter()
            .chain(&pruned)
            .all(|(_, _, times)| *times == 1)
    );

    // R7: deleting the owner deletes every generated Deployment (garbage collection).
    f.mutant_deployments()
        .delete("nginx-mutant", &DeleteParams::foreground())
        .await
        .unwrap();
    f.wait_gone("nginx-deployment-canary").await;
}

/// R3, R11, R14: browser-snap reaches "2/2 variants ready" in its status and in
/// `kubectl get mutations`, and `kubectl wait --for=condition=Ready` returns.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn browser_snap_example() {
    let f = Fixture::new("ctl-snap").await;
    f.apply::<Mutation>(&example("browser-snap.yaml")).await;
    f.wait_deployment("browser-snap-radxa-8-hd", "3 ready", |d| ready(d, 3))
        .await;
    let lilygo = f
        .wait_deployment("browser-snap-lilygo47", "1 ready", |d| ready(d, 1))
        .await;
    // R4: the variant's value replaces the base's variable of the same name, in place.
    assert_eq!(
        env_of(&lilygo),
        vec![("SNAP_RES".to_string(), "960x540".to_string())]
    );

    let status = f
        .wait_status::<Mutation>("browser-snap", "2/2 ready", |s| {
            s.summary == "2/2 variants ready"
        })
        .await;
    assert_eq!(status.secret.as_deref(), Some("browser-snap-secret"));
    // R36: the example asks for a NodePort Service per variant.
    for v in &status.variants {
        let service = v.service.as_ref().unwrap();
        assert_eq!(service.name, format!("browser-snap-{}", v.label));
        assert!(service.ports[0].node_port.is_some(), "{service:?}");
    }
    assert!(
        status
            .variants
            .iter()
            .all(|v| v.state == VariantState::Ready && v.message.is_none())
    );
    let ready_condition = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready_condition.status, "True");

    let waited = kubectl(&[
        "-n",
        &f.ns.name,
        "wait",
        "--for=condition=Ready",
        "mutation/browser-snap",
        "--timeout=60s",
    ]);
    assert!(
        waited.status.success(),
        "kubectl wait: {}",
        String::from_utf8_lossy(&waited.stderr)
    );

    // R3: the CRD's field descriptions reach `kubectl explain`.
    let explained = kubectl(&["explain", "mutation.spec.variants"]);
    let text = String::from_utf8_lossy(&explained.stdout).to_string();
    assert!(
        text.contains("instances") && text.contains("HTTP API"),
        "{text}"
    );

    let table = kubectl(&["-n", &f.ns.name, "get", "mutations"]);
    let text = String::from_utf8_lossy(&table.stdout).to_string();
    assert!(
        table.status.success(),
        "{}",
        String::from_utf8_lossy(&table.stderr)
    );
    let lines: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0],
        ["NAME", "BASE", "READY", "SECRET", "AGE"],
        "{text}"
    );
    assert_eq!(
        &lines[1][..7],
        [
            "browser-snap",
            "browser-snap",
            "2/2",
            "variants",
            "ready",
            "browser-snap-secret",
            lines[1][6]
        ],
        "{text}"
    );
}
