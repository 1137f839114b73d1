//! R16, R17: Argo CD synced Mutations through the API.

use serde_json::json;

use super::*;

/// Its variant `a` is handed to the Mutation's token (`byToken: true`, R32), so that only
/// whether the variants belong in git decides what the token may do with it.
fn manifest(name: &str, annotations: Value, labels: Value) -> Value {
    json!({ "apiVersion": "neiam.org/v1", "kind": "Mutation",
            "metadata": { "name": name, "annotations": annotations, "labels": labels },
            "spec": { "deployment": base(name),
                      "variants": [{ "label": "a", "instances": 0, "byToken": true }] } })
}

#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn argo_synced_mutations_are_protected() {
    let f = Fixture::with_api("api-argo").await;
    // Synced by annotation, without runtime variants: read-only.
    f.apply::<Mutation>(&manifest(
        "tracked",
        json!({"argocd.argoproj.io/tracking-id": "app:neiam.org/Mutation:x/tracked"}),
        json!({}),
    ))
    .await;
    // Synced by label, with runtime variants: variants belong to the API.
    f.apply::<Mutation>(&manifest(
        "runtime",
        json!({"mutantops.neiam.org/runtime-variants": "true"}),
        json!({"app.kubernetes.io/instance": "edge-apps"}),
    ))
    .await;
    for name in ["tracked", "runtime"] {
        f.wait_status::<Mutation>(name, "reported", |s| s.secret.is_some())
            .await;
    }

    let variant = json!({"label": "b", "instances": 0});
    let scale = json!({"instances": 1});
    // R17: read-only, and says so.
    let got = f
        .call("GET", "/mutations/tracked", Some(ADMIN), None)
        .await
        .json();
    assert_eq!(got["readOnly"], true);
    assert_eq!(got["variants"][0]["readOnly"], true);
    let token = f.token("tracked").await;
    for t in [ADMIN, token.as_str()] {
        assert_eq!(
            f.call(
                "POST",
                "/mutations/tracked/variants",
                Some(t),
                Some(&variant)
            )
            .await
            .status,
            409
        );
        assert_eq!(
            f.call(
                "PATCH",
                "/mutations/tracked/variants/a",
                Some(t),
                Some(&scale)
            )
            .await
            .status,
            409
        );
        assert_eq!(
            f.call("DELETE", "/mutations/tracked/variants/a", Some(t), None)
                .await
                .status,
            409
        );
    }
    let unchanged = f.mutations().get("tracked").await.unwrap();
    assert_eq!(unchanged.spec.variants.len(), 1);
    assert_eq!(unchanged.spec.variants[0].instances, 0);

    // With the annotation, variant changes work.
    let got = f
        .call("GET", "/mutations/runtime", Some(ADMIN), None)
        .await
        .json();
    assert_eq!(got["readOnly"], false);
    let token = f.token("runtime").await;
    assert_eq!(
        f.call(
            "POST",
            "/mutations/runtime/variants",
            Some(&token),
            Some(&variant)
        )
        .await
        .status,
        201
    );
    assert_eq!(
        f.call(
            "PATCH",
            "/mutations/runtime/variants/b",
            Some(&token),
            Some(&scale)
        )
        .await
        .status,
        200
    );
    assert_eq!(
        f.call(
            "DELETE",
            "/mutations/runtime/variants/a",
            Some(&token),
            None
        )
        .await
        .status,
        204
    );

    // R16: neither is ever deleted through the API.
    for name in ["tracked", "runtime"] {
        let reply = f
            .call("DELETE", &format!("/mutations/{name}"), Some(ADMIN), None)
            .await;
        assert_eq!(reply.status, 409, "{reply:?}");
        assert!(reply.json()["error"].as_str().unwrap().contains("Argo CD"));
        assert!(f.mutations().get_opt(name).await.unwrap().is_some());
    }
}
