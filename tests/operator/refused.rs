//! R35: a variant the API server refuses for a policy of the cluster (a
//! ResourceQuota, a ValidatingAdmissionPolicy; 403 or 422) is that variant's `Invalid` state
//! with the server's message, while the other variants are applied, pruning runs and the
//! status is written; the HTTP API answers the refusal of its dry run (403 or 400) instead of
//! 201.

use k8s_openapi::api::core::v1::ResourceQuota;
use kube::api::PostParams;
use serde_json::json;

use super::*;

/// What the policy says of a variant whose label starts with `blocked` (answered 403).
const BLOCKED: &str = "variants named blocked are not allowed here";
/// What the policy says of the env value `forbidden` (answered 422, the default).
const FORBIDDEN: &str = "the value 'forbidden' is not allowed here";

/// Installs a ValidatingAdmissionPolicy and its binding, scoped to the fixture's namespace,
/// that deny Deployments of a variant labelled `blocked...` (with reason Forbidden: 403) and
/// Deployments with an env value `forbidden` (reason left out: 422), once it takes effect.
async fn install_policy(f: &Fixture) -> PolicyGuards {
    let validations = json!([
        {
            "expression": "!(has(object.metadata.labels) \
                && 'mutantops.neiam.org/variant' in object.metadata.labels \
                && object.metadata.labels['mutantops.neiam.org/variant']\
                   .startsWith('blocked'))",
            "message": BLOCKED,
            "reason": "Forbidden"
        },
        {
            "expression": "!object.spec.template.spec.containers.exists(c, has(c.env) \
                && c.env.exists(e, has(e.value) && e.value == 'forbidden'))",
            "message": FORBIDDEN
        }
    ]);
    let mut probe = base("probe");
    probe["metadata"]["labels"]["mutantops.neiam.org/variant"] = json!("blocked-probe");
    deny_deployments(f, "policy", validations, probe, 403).await
}

/// R35, R26: variants refused by an admission policy (its 403 and its 422)
/// and by a ResourceQuota (`count/deployments.apps`, 403) are each Invalid with the server's
/// message, while a variant declared after them is created, a removed one is pruned, the
/// status is written with a Ready condition naming the refused variants, each refusal is one
/// Event, no reconcile fails, and a variant over the quota is tried again within a minute once
/// the quota allows it. Through the HTTP API, a device adding such a variant, or
/// the admin creating a Mutation with one, gets the server's refusal of the dry run (403 for
/// its 403, 400 for its 422), and nothing is written.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_variant_refused_by_a_quota_or_a_policy_is_invalid_and_the_rest_converges() {
    let f = Fixture::with_api("ctl-policy").await;
    let _policy = install_policy(&f).await;

    // Two variants run.
    let two = json!([{ "label": "a", "instances": 0 }, { "label": "old", "instances": 0 }]);
    f.apply::<Mutation>(&mutation("m", base("web"), two)).await;
    f.wait_status::<Mutation>("m", "a and old ready", |s| {
        s.summary == "2/2 variants ready"
    })
    .await;

    // Two refused variants first (the policy's 403 on the label, its 422 on the env value),
    // then a, then a new c; old removed.
    let refused = json!([
        { "label": "blocked-1", "instances": 0 },
        { "label": "b", "env": { "X": "forbidden" }, "instances": 0 },
        { "label": "a", "instances": 0 },
        { "label": "c", "instances": 0 }
    ]);
    f.apply::<Mutation>(&mutation("m", base("web"), refused))
        .await;
    let status = f
        .wait_status::<Mutation>("m", "blocked-1 and b refused, a and c ready", |s| {
            states(s)
                == [
                    ("blocked-1".to_string(), VariantState::Invalid),
                    ("b".to_string(), VariantState::Invalid),
                    ("a".to_string(), VariantState::Ready),
                    ("c".to_string(), VariantState::Ready),
                ]
        })
        .await;
    f.wait_gone("web-old").await;
    let message = |i: usize| status.variants[i].message.clone().unwrap_or_default();
    assert!(
        message(0).contains("rejected by the API server") && message(0).contains(BLOCKED),
        "{status:?}"
    );
    assert!(message(1).contains(FORBIDDEN), "{status:?}");
    // The base is not at fault, and the condition says which variants are not applied.
    assert_eq!(status.message, None, "{status:?}");
    let ready = &status.conditions[0];
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "VariantsNotApplied")
    );
    assert!(
        ready.message.contains("blocked-1") && ready.message.contains(", b"),
        "{ready:?}"
    );
    assert_eq!(status.summary, "2/4 variants ready");
    for name in ["web-blocked-1", "web-b"] {
        assert!(f.deployments().get_opt(name).await.unwrap().is_none());
    }

    // Through the API: the device's token and the admin get the dry run's refusal.
    let token = f.token("m").await;
    let blocked = json!({ "label": "blocked-2", "instances": 0 });
    let reply = f.add_variant("m", &token, &blocked).await;
    reply.assert_refused(403, &[BLOCKED]);
    let forbidden = json!({ "label": "x", "env": { "X": "forbidden" }, "instances": 0 });
    let reply = f.add_variant("m", ADMIN, &forbidden).await;
    reply.assert_refused(400, &[FORBIDDEN]);
    let create = json!({
        "name": "n", "deployment": base("other"),
        "variants": [{ "label": "fine", "instances": 0 }, { "label": "blocked-3", "instances": 0 }]
    });
    let reply = f
        .call("POST", "/mutations", Some(ADMIN), Some(&create))
        .await;
    reply.assert_refused(403, &[BLOCKED]);
    assert!(f.mutations().get_opt("n").await.unwrap().is_none());
    assert_eq!(f.spec_labels("m").await, ["blocked-1", "b", "a", "c"]);

    // A ResourceQuota: the namespace holds web-a and web-c, and may hold no more Deployments.
    let quotas: Api<ResourceQuota> = f.ns.api();
    let quota: ResourceQuota = common::from_json(json!({
        "metadata": { "name": "deployments" },
        "spec": { "hard": { "count/deployments.apps": "2" } }
    }));
    quotas.create(&PostParams::default(), &quota).await.unwrap();
    wait_for("the quota to count the Deployments", CONVERGE, || async {
        let q = quotas.get("deployments").await.map_err(|e| e.to_string())?;
        let used = q
            .status
            .as_ref()
            .and_then(|s| s.used.as_ref())
            .and_then(|u| u.get("count/deployments.apps"))
            .map(|q| q.0.clone());
        if used.as_deref() == Some("2") {
            Ok(())
        } else {
            Err(format!("{:?}", q.status))
        }
    })
    .await;
    // The API server's quota admission reads the quota from a cache of its own: wait until a
    // dry run of another Deployment is refused for it, as d's will be.
    wait_for("the quota to refuse a dry run", CONVERGE, || async {
        let probe = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                           "metadata": {"name": "quota-probe"}, "spec": base("probe")["spec"]});
        let probe: Deployment = common::from_json(probe);
        let dry = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        match f.deployments().create(&dry, &probe).await {
            Err(kube::Error::Api(e)) if e.message.contains("exceeded quota") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let over = json!({ "label": "d", "instances": 0 });
    let reply = f.add_variant("m", &token, &over).await;
    reply.assert_refused(403, &["exceeded quota"]);
    assert_eq!(f.spec_labels("m").await, ["blocked-1", "b", "a", "c"]);

    // Declared with kubectl instead: d is Invalid with the quota's message, the rest stays.
    let over_quota = json!([
        { "label": "blocked-1", "instances": 0 },
        { "label": "b", "env": { "X": "forbidden" }, "instances": 0 },
        { "label": "a", "instances": 0 },
        { "label": "c", "instances": 0 },
        { "label": "d", "instances": 0 }
    ]);
    f.apply::<Mutation>(&mutation("m", base("web"), over_quota))
        .await;
    let status = f
        .wait_status::<Mutation>("m", "d refused by the quota", |s| {
            s.variants.len() == 5 && s.variants[4].state == VariantState::Invalid
        })
        .await;
    let d = status.variants[4].message.clone().unwrap_or_default();
    assert!(d.contains("exceeded quota") && d.len() < 600, "{status:?}");
    assert_eq!(status.summary, "2/5 variants ready", "{status:?}");
    assert!(status.conditions[0].message.contains(", d"), "{status:?}");
    assert!(f.deployments().get_opt("web-d").await.unwrap().is_none());

    // R26: each refusal is one Event, published once; no reconcile failed over them.
    let found = events(&f, "VariantInvalid", 3).await;
    let related: Vec<&str> = found.iter().map(|(name, _, _)| name.as_str()).collect();
    assert_eq!(related, ["web-b", "web-blocked-1", "web-d"], "{found:?}");
    assert!(found.iter().all(|(_, _, times)| *times == 1), "{found:?}");
    assert!(
        found[2].1.contains("exceeded quota"),
        "the Event names the refusal: {found:?}"
    );
    // Freeing the quota is no event of the Mutation's: d is tried again within a minute.
    quotas
        .patch(
            "deployments",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "hard": { "count/deployments.apps": "3" } } })),
        )
        .await
        .unwrap();
    wait_for(
        "d to be tried again once the quota allows it",
        Duration::from_secs(90),
        || async {
            match f.deployments().get_opt("web-d").await {
                Ok(Some(_)) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    f.wait_status::<Mutation>("m", "d ready", |s| s.summary == "3/5 variants ready")
        .await;

    let log = f.operator.log_text();
    let failed: Vec<&str> = log
        .lines()
        .filter(|l| {
            l.contains("reconcile failed")
                && (l.contains("denied request") || l.contains("exceeded quota"))
        })
        .collect();
    assert!(failed.is_empty(), "{failed:#?}");
}
