//! R37: placement (`nodeSelector`, `tolerations`) and image and resources per container, per
//! variant. They land in the Deployments of both kinds (docs/behaviour.md's browser-snap example
//! among them), the admin token sets them through the API, and a device token sets only what its
//! Mutation's `spec.deviceAccess` allows: node labels and taints by key, never a container's
//! image or resources (R32's 403 naming what was refused).

use k8s_openapi::api::core::v1::PodSpec;
use serde_json::json;

use super::*;

/// The pod spec of a Deployment's template.
fn pod(d: &Deployment) -> PodSpec {
    d.spec.clone().unwrap().template.spec.unwrap()
}

/// The `(image, resources as JSON)` of container `name` of a Deployment.
fn container(d: &Deployment, name: &str) -> (String, Value) {
    let pod = pod(d);
    let c = pod.containers.iter().find(|c| c.name == name).unwrap();
    let resources = serde_json::to_value(&c.resources).unwrap();
    (c.image.clone().unwrap_or_default(), resources)
}

/// A base like docs/behaviour.md's browser-snap: container `snap` with resources, and a toleration.
fn snap_base(name: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": { "name": name },
        "spec": {
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name } },
                "spec": {
                    "tolerations": [{ "key": "kiosk", "operator": "Exists" }],
                    "containers": [{
                        "name": "snap",
                        "image": "ghcr.io/neiam/browser-snap:latest",
                        "resources": {
                            "requests": { "cpu": "200m", "memory": "256Mi" },
                            "limits": { "memory": "512Mi" }
                        }
                    }]
                }
            }
        }
    })
}

/// R37, R4: docs/behaviour.md's browser-snap example as written (a Mutation from kubectl) and the same
/// variants in a MutantDeployment: radxa-8-hd's node labels and toleration, lilygo47's smaller
/// image and resources land in their Deployments, merged over the base's; a quantity written
/// as a YAML number is taken; a container name the base does not have makes that variant
/// Invalid, naming it, while the others are applied; the CRD's schema refuses what no pod spec
/// can hold.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn placement_and_images_land_in_the_deployments_of_both_kinds() {
    let f = Fixture::new("ctl-placement").await;
    let block = markdown_block("docs/behaviour.md", "<!-- placement-example -->", "yaml");
    let example: Value = serde_saphyr::from_str(&block).unwrap();
    assert_eq!(example["metadata"]["name"], "browser-snap");
    f.apply::<Mutation>(&example).await;
    let mut variants = example["spec"]["variants"].clone();
    variants[1]["containers"][0]["resources"]["limits"]["cpu"] = json!(1);
    variants
        .as_array_mut()
        .unwrap()
        .push(json!({ "label": "ghost", "containers": [{ "name": "browser", "image": "x:1" }] }));
    let md = mutant_deployment("snap-md", snap_base("snap-git"), variants);
    f.apply::<MutantDeployment>(&md).await;

    for base in ["browser-snap", "snap-git"] {
        let radxa = f
            .wait_deployment(&format!("{base}-radxa-8-hd"), "created", |_| true)
            .await;
        let placed = pod(&radxa);
        let selector = placed.node_selector.unwrap();
        assert_eq!(selector["kubernetes.io/arch"], "arm64", "{base}");
        let tolerations = serde_json::to_value(placed.tolerations.unwrap()).unwrap();
        assert_eq!(
            tolerations,
            json!([
                { "key": "kiosk", "operator": "Exists" },
                { "key": "neiam.org/board", "operator": "Equal", "value": "radxa",
                  "effect": "NoSchedule" }
            ]),
            "{base}: the base's toleration and the variant's"
        );
        assert!(env_of(&radxa).contains(&("SNAP_RES".into(), "1280x800".into())));
        let (image, _) = container(&radxa, "snap");
        assert_eq!(image, "ghcr.io/neiam/browser-snap:latest", "{base}");

        let lilygo = f
            .wait_deployment(&format!("{base}-lilygo47"), "created", |_| true)
            .await;
        assert!(env_of(&lilygo).contains(&("SNAP_RES".into(), "960x540".into())));
        let (image, resources) = container(&lilygo, "snap");
        assert_eq!(image, "ghcr.io/neiam/browser-snap:slim", "{base}");
        let cpu = if base == "snap-git" { "1" } else { "100m" };
        assert_eq!(
            resources,
            json!({
                "requests": { "cpu": "50m", "memory": "64Mi" },
                "limits": { "cpu": cpu, "memory": "128Mi" }
            }),
            "{base}: the variant's values over the base's"
        );
        assert!(pod(&lilygo).node_selector.is_none(), "{base}");
    }

    let status = f
        .wait_status::<MutantDeployment>("snap-md", "ghost invalid", |s| {
            s.variants.len() == 3 && s.variants[2].state == VariantState::Invalid
        })
        .await;
    let message = status.variants[2].message.clone().unwrap_or_default();
    assert!(
        message.contains("containers \"browser\"") && message.contains("snap"),
        "{message}"
    );
    let ghost = f.deployments().get_opt("snap-git-ghost").await.unwrap();
    assert!(ghost.is_none(), "an Invalid variant has no Deployment");

    // The schema refuses a toleration operator and a nodeSelector no pod spec can hold.
    let refused = async |patch: Value| {
        f.mutant_deployments()
            .patch("snap-md", &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap_err()
            .to_string()
    };
    let operator = json!([{ "label": "a", "tolerations": [{ "key": "x", "operator": "Near" }] }]);
    let e = refused(json!({ "spec": { "mutations": operator } })).await;
    assert!(e.contains("operator") && e.contains("Near"), "{e}");
    let many: serde_json::Map<String, Value> =
        (0..65).map(|i| (format!("k{i}"), json!("v"))).collect();
    let selector = json!([{ "label": "a", "nodeSelector": many }]);
    let e = refused(json!({ "spec": { "mutations": selector } })).await;
    assert!(e.contains("nodeSelector") && e.contains("64"), "{e}");
}

/// R37, R19: the admin token creates a Mutation with a placed variant and adds one with its
/// own image and resources; the answers show them and the Deployments hold them. A container
/// the base does not have, and a toleration Kubernetes would refuse, answer 400 naming them;
/// so do resources that, merged over the base's, the API server refuses (its dry run, R35).
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn the_admin_token_sets_placement_and_images_through_the_api() {
    let f = Fixture::with_api("api-placement").await;
    let radxa = json!({
        "label": "radxa-8-hd",
        "env": { "SNAP_RES": "1280x800" },
        "nodeSelector": { "kubernetes.io/arch": "arm64" },
        "tolerations": [{ "key": "neiam.org/board", "operator": "Exists", "effect": "NoSchedule" }]
    });
    let create = json!({ "name": "snap", "deployment": snap_base("snap"), "variants": [radxa] });
    let created = f
        .call("POST", "/mutations", Some(ADMIN), Some(&create))
        .await;
    assert_eq!(created.status, 201, "{created:?}");
    let shown = &created.json()["variants"][0];
    assert_eq!(shown["nodeSelector"], radxa["nodeSelector"]);
    assert_eq!(shown["tolerations"], radxa["tolerations"]);

    // A limit under the base's request of 256Mi: merged, the pod spec is one Kubernetes refuses.
    let mut lilygo = json!({
        "label": "lilygo47",
        "env": { "SNAP_RES": "960x540" },
        "containers": [{ "name": "snap", "image": "ghcr.io/neiam/browser-snap:slim",
                         "resources": { "limits": { "memory": "128Mi" } } }]
    });
    let refused = f.add_variant("snap", ADMIN, &lilygo).await;
    refused.assert_refused(400, &["memory limit of 128Mi"]);
    lilygo["containers"][0]["resources"]["requests"] = json!({ "memory": "64Mi" });
    let added = f.add_variant("snap", ADMIN, &lilygo).await;
    assert_eq!(added.status, 201, "{added:?}");
    assert_eq!(added.json()["containers"], lilygo["containers"]);
    let read = f
        .call(
            "GET",
            "/mutations/snap/variants/lilygo47",
            Some(ADMIN),
            None,
        )
        .await;
    assert_eq!(read.json()["containers"], lilygo["containers"], "{read:?}");

    let d = f
        .wait_deployment("snap-radxa-8-hd", "created", |_| true)
        .await;
    assert_eq!(
        pod(&d).node_selector.unwrap()["kubernetes.io/arch"],
        "arm64"
    );
    assert_eq!(pod(&d).tolerations.unwrap().len(), 2);
    let d = f
        .wait_deployment("snap-lilygo47", "created", |_| true)
        .await;
    let (image, resources) = container(&d, "snap");
    assert_eq!(image, "ghcr.io/neiam/browser-snap:slim");
    assert_eq!(resources["limits"]["memory"], "128Mi");
    assert_eq!(resources["requests"]["memory"], "64Mi");
    assert_eq!(
        resources["requests"]["cpu"], "200m",
        "the base's request is kept"
    );

    let ghost = json!({ "label": "ghost", "containers": [{ "name": "browser", "image": "x:1" }] });
    let reply = f.add_variant("snap", ADMIN, &ghost).await;
    reply.assert_refused(400, &["containers \"browser\""]);
    let create = json!({ "name": "ghost", "deployment": snap_base("ghost"), "variants": [ghost] });
    let reply = f
        .call("POST", "/mutations", Some(ADMIN), Some(&create))
        .await;
    reply.assert_refused(400, &["\"browser\""]);
    let bad = json!({ "label": "bad", "tolerations": [{ "operator": "Equal", "value": "x" }] });
    let reply = f.add_variant("snap", ADMIN, &bad).await;
    reply.assert_refused(400, &["tolerations[0]"]);
    assert_eq!(f.spec_labels("snap").await, ["radxa-8-hd", "lilygo47"]);
}

/// R37, R32: a device token may set node labels and tolerations only by the keys the owner
/// lists in `spec.deviceAccess` (none by default), never a toleration without a key, and never
/// a container's image or resources, whatever the owner lists; each refusal is a 403 naming
/// what was refused, and what is allowed lands in the Deployment.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn device_tokens_set_only_the_placement_their_owner_allows() {
    let f = Fixture::with_api("api-device-placement").await;
    let create = json!({ "name": "snap", "deployment": snap_base("snap"), "variants": [] });
    let created = f
        .call("POST", "/mutations", Some(ADMIN), Some(&create))
        .await;
    assert_eq!(created.status, 201, "{created:?}");
    let token = f.token("snap").await;
    let add = async |body: Value| f.add_variant("snap", &token, &body).await;
    let refused = |reply: &common::http::Reply, words: &[&str]| reply.assert_refused(403, words);
    let arch = json!({ "kubernetes.io/arch": "arm64" });
    let board = json!([{ "key": "neiam.org/board", "operator": "Exists" }]);
    let image = json!([{ "name": "snap", "image": "ghcr.io/neiam/browser-snap:slim" }]);
    let resources = json!([{ "name": "snap", "resources": { "limits": { "memory": "1Gi" } } }]);

    // By default: env as ever, no node labels, no tolerations, no containers.
    let r = add(json!({ "label": "plain", "env": { "SNAP_RES": "1280x800" } })).await;
    assert_eq!(r.status, 201, "{r:?}");
    let r = add(json!({ "label": "a", "nodeSelector": arch })).await;
    refused(
        &r,
        &[
            "nodeSelector \"kubernetes.io/arch\"",
            "spec.deviceAccess.nodeSelector",
        ],
    );
    let r = add(json!({ "label": "a", "tolerations": board })).await;
    refused(
        &r,
        &[
            "tolerations[0]",
            "\"neiam.org/board\"",
            "spec.deviceAccess.tolerations",
        ],
    );
    let r = add(json!({ "label": "a", "containers": image })).await;
    refused(&r, &["containers", "image or resources"]);

    // The owner lets devices choose the architecture and tolerate the boards' taint.
    let access = json!({
        "nodeSelector": ["kubernetes.io/arch"], "tolerations": ["neiam.org/board"]
    });
    super::api_device::set_device_access(&f, "snap", access).await;

    let placed = json!({ "label": "board-7", "env": { "SNAP_RES": "960x540" },
                         "nodeSelector": arch, "tolerations": board });
    let r = add(placed).await;
    assert_eq!(r.status, 201, "{r:?}");
    let d = f.wait_deployment("snap-board-7", "created", |_| true).await;
    assert_eq!(
        pod(&d).node_selector.unwrap()["kubernetes.io/arch"],
        "arm64"
    );
    let tolerations = serde_json::to_value(pod(&d).tolerations.unwrap()).unwrap();
    assert_eq!(tolerations[1], board[0]);

    // Still not: another node label, a keyless toleration, an image, resources.
    let hostname = json!({ "kubernetes.io/hostname": "b7" });
    let r = add(json!({ "label": "a", "nodeSelector": hostname })).await;
    refused(&r, &["nodeSelector \"kubernetes.io/hostname\""]);
    let r = add(json!({ "label": "a", "tolerations": [{ "operator": "Exists" }] })).await;
    refused(&r, &["tolerations[0]", "every taint"]);
    let r = add(json!({ "label": "a", "nodeSelector": arch, "containers": image })).await;
    refused(&r, &["containers (\"snap\")"]);
    let r = add(json!({ "label": "a", "containers": resources })).await;
    refused(&r, &["containers (\"snap\")", "image or resources"]);
    // The admin is not held to deviceAccess.
    let admin = json!({ "label": "admin", "containers": image, "nodeSelector": hostname });
    let r = f.add_variant("snap", ADMIN, &admin).await;
    assert_eq!(r.status, 201, "{r:?}");

    assert_eq!(f.spec_labels("snap").await, ["plain", "board-7", "admin"]);
}
