//! R3, R26: what kubectl shows a user. `kubectl get ... -o wide` adds the variants declared
//! and the owner's message; both kinds have the READY column; `kubectl describe` shows the
//! Events with their reasons and what they say. Runs the real kubectl (`$KUBECTL`, which
//! `scripts/cluster env` exports).

use std::collections::BTreeMap;

use serde_json::json;

use super::*;

/// `kubectl <args>` against the test cluster; its standard output.
fn kubectl(args: &[&str]) -> String {
    let program = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let out = std::process::Command::new(&program)
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!("{program} is needed (scripts/cluster env exports KUBECTL): {e}")
        });
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The rows of a `kubectl get` table as (header, value) pairs per row.
fn table(text: &str) -> Vec<BTreeMap<String, String>> {
    let mut lines = text.lines();
    let header = lines.next().unwrap_or_default();
    // Columns start where a header word starts after two or more spaces (or at 0).
    let mut starts = vec![0];
    let bytes = header.as_bytes();
    for i in 2..bytes.len() {
        if bytes[i] != b' ' && bytes[i - 1] == b' ' && bytes[i - 2] == b' ' {
            starts.push(i);
        }
    }
    let cell = |line: &str, k: usize| -> String {
        let from = starts[k].min(line.len());
        let to = starts.get(k + 1).map_or(line.len(), |&e| e.min(line.len()));
        line[from..to].trim().to_string()
    };
    lines
        .map(|line| {
            (0..starts.len())
                .map(|k| (cell(header, k), cell(line, k)))
                .collect()
        })
        .collect()
}

#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn kubectl_shows_variants_messages_and_events() {
    let f = Fixture::new("ctl-kubectl").await;
    let ns = f.ns.name.clone();
    let variants = json!([{ "label": "a", "instances": 0 }, { "label": "Bad", "instances": 0 }]);
    f.apply::<Mutation>(&mutation("m", base("web"), variants.clone()))
        .await;
    let mut broken = base("broken");
    broken["spec"]["template"]["spec"]["containers"] = json!([]);
    f.apply::<MutantDeployment>(&mutant_deployment("d", broken, variants))
        .await;
    f.wait_status::<Mutation>("m", "1/2", |s| s.summary == "1/2 variants ready")
        .await;
    f.wait_status::<MutantDeployment>("d", "invalid base reported", |s| s.message.is_some())
        .await;

    let mutations = table(&kubectl(&["-n", &ns, "get", "mutations", "-o", "wide"]));
    assert_eq!(mutations.len(), 1, "{mutations:?}");
    let row = &mutations[0];
    assert_eq!(row["NAME"], "m");
    assert_eq!(row["BASE"], "web");
    assert_eq!(row["READY"], "1/2 variants ready");
    assert_eq!(row["SECRET"], "m-secret");
    assert_eq!(row["VARIANTS"], "a,Bad", "{row:?}");
    // nothing wrong with the Mutation as a whole: the column is empty
    assert_eq!(row["MESSAGE"], "", "{row:?}");
    // Without -o wide, the columns a first look needs.
    let narrow = table(&kubectl(&["-n", &ns, "get", "mutations"]));
    assert!(!narrow[0].contains_key("VARIANTS"), "{narrow:?}");

    let mds = table(&kubectl(&[
        "-n",
        &ns,
        "get",
        "mutantdeployments",
        "-o",
        "wide",
    ]));
    let row = &mds[0];
    assert_eq!(row["NAME"], "d");
    assert!(row["READY"].contains("variants ready"), "{row:?}");
    assert_eq!(row["VARIANTS"], "a,Bad", "{row:?}");
    assert!(row["MESSAGE"].contains("containers"), "{row:?}");

    // describe: the Events, with reasons that say what happened and to which Deployment.
    events(&f, "VariantCreated", 1).await;
    events(&f, "VariantInvalid", 1).await;
    let described = kubectl(&["-n", &ns, "describe", "mutation", "m"]);
    let events_part = described
        .split("Events:")
        .nth(1)
        .unwrap_or_else(|| panic!("no Events in:\n{described}"));
    for needle in ["VariantCreated", "web-a", "VariantInvalid", "Bad"] {
        assert!(
            events_part.contains(needle),
            "{needle} not in the Events:\n{events_part}"
        );
    }
    let described = kubectl(&["-n", &ns, "describe", "mutantdeployment", "d"]);
    assert!(
        described
            .split("Events:")
            .nth(1)
            .is_some_and(|e| e.contains("InvalidObject") && e.contains("containers")),
        "{described}"
    );
}

/// R3, R39: `kubectl get mutations -o wide` shows how many devices are enrolled and
/// how many are Online; the narrow table does not.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn kubectl_shows_device_counts() {
    let f = Fixture::with_api("ctl-devices").await;
    let ns = f.ns.name.clone();
    let create = json!({"name": "fleet", "deployment": base("fleet"),
                        "variants": [{"label": "shared", "instances": 0}],
                        "devices": {"enrollment": "Closed"}});
    let created = f
        .call("POST", "/mutations", Some(ADMIN), Some(&create))
        .await;
    assert_eq!(created.status, 201, "{created:?}");
    for id in ["lilygo-1", "lilygo-2"] {
        let body = json!({"id": id, "label": "shared"});
        let enrolled = f
            .call("POST", "/mutations/fleet/devices", Some(ADMIN), Some(&body))
            .await;
        assert_eq!(enrolled.status, 201, "{enrolled:?}");
    }
    f.wait_status::<Mutation>("fleet", "two devices counted", |s| {
        s.device_summary.as_ref().is_some_and(|d| d.total == 2)
    })
    .await;
    let wide = table(&kubectl(&["-n", &ns, "get", "mutations", "-o", "wide"]));
    let row = &wide[0];
    assert_eq!(row["DEVICES"], "2", "{row:?}");
    assert_eq!(row["ONLINE"], "2", "{row:?}");
    let narrow = table(&kubectl(&["-n", &ns, "get", "mutations"]));
    assert!(!narrow[0].contains_key("DEVICES"), "{narrow:?}");
}
