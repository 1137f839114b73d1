//! Tests of the operator's own Secrets (R33): every way a pod template can
//! reference a Secret is found, in the operator's namespace only, and a review refuses them
//! whatever the namespace's labels say.

use serde_json::{Value, json};

use super::*;

const AT: &str = "deployment.spec.template";

/// The operator's Secrets in namespace `mutants`: the defaults and `regcred`.
fn own() -> OwnSecrets {
    OwnSecrets::new("mutants", ["regcred".to_owned(), "regcred".to_owned()])
}

/// A pod template with `spec` as its pod spec.
fn template(spec: Value) -> Value {
    json!({ "metadata": { "labels": { "app": "web" } }, "spec": spec })
}

fn fields(t: &Value, namespace: &str) -> Vec<String> {
    own_secret_findings(t, AT, namespace, &own())
        .into_iter()
        .map(|f| f.field)
        .collect()
}

#[test]
fn the_defaults_are_the_admin_token_and_the_tls_key() {
    assert_eq!(
        own().names,
        ["mutantops-api", "mutantops-api-tls", "regcred"]
    );
}

#[test]
fn every_way_of_referencing_one_is_found() {
    let env = json!([
        { "name": "PLAIN", "value": "mutantops-api" },
        { "name": "TOKEN", "valueFrom": { "secretKeyRef": { "name": "mutantops-api", "key": "token" } } },
        { "name": "OTHER", "valueFrom": { "secretKeyRef": { "name": "web-db", "key": "password" } } }
    ]);
    let t = template(json!({
        "imagePullSecrets": [{ "name": "other" }, { "name": "regcred" }],
        "initContainers": [{ "name": "init", "image": "i", "env": env }],
        "containers": [{
            "name": "app", "image": "a",
            "envFrom": [{ "secretRef": { "name": "mutantops-api-tls" } }, { "configMapRef": { "name": "mutantops-api" } }]
        }],
        "volumes": [
            { "name": "token", "secret": { "secretName": "mutantops-api" } },
            { "name": "all", "projected": { "sources": [
                { "configMap": { "name": "mutantops-api" } },
                { "secret": { "name": "mutantops-api-tls", "items": [{ "key": "tls.key", "path": "k" }] } }
            ] } },
            { "name": "csi", "csi": { "driver": "d", "nodePublishSecretRef": { "name": "regcred" } } },
            { "name": "azure", "azureFile": { "secretName": "mutantops-api", "shareName": "s" } },
            { "name": "flex", "flexVolume": { "driver": "d", "secretRef": { "name": "regcred" } } },
            { "name": "mine", "secret": { "secretName": "web-certs" } }
        ]
    }));
    let mut found = fields(&t, "mutants");
    found.sort();
    let spec = format!("{AT}.spec");
    let mut want: Vec<String> = [
        "imagePullSecrets[1].name",
        "initContainers[init].env[TOKEN].valueFrom.secretKeyRef.name",
        "containers[app].envFrom[0].secretRef.name",
        "volumes[token].secret.secretName",
        "volumes[all].projected.sources[1].secret.name",
        "volumes[csi].csi.nodePublishSecretRef.name",
        "volumes[azure].azureFile.secretName",
        "volumes[flex].flexVolume.secretRef.name",
    ]
    .iter()
    .map(|f| format!("{spec}.{f}"))
    .collect();
    want.sort();
    assert_eq!(found, want);
    // Every reference is listed, the operator's or not.
    let all = secret_references(&t, AT);
    assert!(all.iter().any(|(_, name)| name == "web-db"), "{all:?}");
    assert!(all.iter().any(|(_, name)| name == "web-certs"), "{all:?}");
    // A Secret's name is local to its namespace: elsewhere these are someone else's.
    assert!(fields(&t, "team").is_empty());
    let token = own_secret_findings(&t, AT, "mutants", &own())
        .into_iter()
        .find(|f| f.field.ends_with("volumes[token].secret.secretName"))
        .map(|f| f.to_string())
        .unwrap_or_default();
    assert!(
        token.ends_with(
            ".secretName: Secret \"mutantops-api\" holds the operator's own credentials, which \
             nothing the operator makes may reference"
        ),
        "{token}"
    );
}

#[test]
fn a_template_without_them_is_fine() {
    let t = template(json!({
        "containers": [{ "name": "app", "image": "a", "env": [{ "name": "X", "value": "mutantops-api" }] }],
        "volumes": [{ "name": "v", "secret": { "secretName": "web-certs" } }]
    }));
    assert!(fields(&t, "mutants").is_empty());
    assert!(fields(&json!({}), "mutants").is_empty());
}

#[test]
fn a_review_refuses_them_whatever_the_labels_say() {
    let deployment = json!({ "spec": { "template": template(json!({
        "hostPID": true,
        "containers": [{ "name": "app", "image": "a" }],
        "volumes": [{ "name": "token", "secret": { "secretName": "mutantops-api" } }]
    })) } });
    let known = PodSecurity {
        own_secrets: Some(own()),
        ..PodSecurity::default()
    };
    let review = Review::of([&deployment], "mutants", &known, Policy::At(Version(34)));
    assert!(!review.needs_namespace(), "no label changes the answer");
    let privileged = NamespaceLabel::Read {
        level: Some(PRIVILEGED.into()),
        version: None,
    };
    let message = review
        .refusal("mutants", Some(&privileged))
        .unwrap_or_default();
    assert!(
        message.starts_with(&format!(
            "{AT}.spec.volumes[token].secret.secretName: Secret \"mutantops-api\""
        )),
        "{message}"
    );
    assert!(
        message.ends_with("whatever the namespace's labels say"),
        "{message}"
    );
    // In another namespace only baseline is left, which the label allows.
    let review = Review::of([&deployment], "team", &known, Policy::At(Version(34)));
    assert!(review.own_secrets.is_empty());
    assert_eq!(review.refusal("team", Some(&privileged)), None);
}
