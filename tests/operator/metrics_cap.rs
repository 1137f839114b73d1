//! R40: the cap on per-device metric series is one Mutation's: a Mutation with more devices
//! than `MUTANT_METRICS_MAX_DEVICES` (one board's fake ones, say) loses its own per-device
//! series, and another Mutation's devices keep theirs, so their battery alert still sees them.

use super::devices::{create, enrolled};
use super::sleep::poll;
use super::*;

/// R40: cap 2; Mutation `fake` has 3 devices, `real` 1 that reports its battery: real's
/// battery series is scraped, fake's per-device series are not, and each says so.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn one_mutations_devices_do_not_blind_anothers_series() {
    let f = Fixture::with_env(
        "metrics-cap",
        &[
            ("MUTANT_API_TOKEN", ADMIN),
            ("MUTANT_METRICS_MAX_DEVICES", "2"),
        ],
    )
    .await;
    wait_api(f.operator.api_port, &f.ns.name).await;
    let devices = json!({"enrollment": "Open"});
    let fake = create(&f, "fake", devices.clone(), json!({})).await;
    let real = create(&f, "real", devices, json!({})).await;
    for id in ["a", "b", "c"] {
        let body = json!({"id": id, "variant": {"label": format!("made-{id}"), "instances": 0}});
        enrolled(&f, "fake", &fake, body).await;
    }
    let body = json!({"id": "r", "variant": {"label": "made-r", "instances": 0}});
    let token = enrolled(&f, "real", &real, body).await;
    let reply = poll(&f, "real", "r", &token, &[("Battery-Voltage", "3.30")]).await;
    assert_eq!(reply.status, 200, "{reply:?}");

    let ns = f.ns.name.clone();
    let port = f.operator.metrics_port;
    let text = wait_for("real's battery series", CONVERGE, || async {
        let text = common::http::request(port, "GET", "/metrics", None, None).await.body;
        let battery = format!(
            "mutantops_device_battery_volts{{namespace=\"{ns}\",mutation=\"real\",device=\"r\"}} 3.3"
        );
        let counted = format!(
            "mutantops_devices{{namespace=\"{ns}\",mutation=\"fake\",state=\"Online\"}} 3"
        );
        if text.lines().any(|l| l == battery) && text.lines().any(|l| l == counted) {
            Ok(text)
        } else {
            Err("not yet".to_owned())
        }
    })
    .await;
    let capped = |m: &str, v: u8| {
        format!("mutantops_device_series_capped{{namespace=\"{ns}\",mutation=\"{m}\"}} {v}")
    };
    assert!(text.lines().any(|l| l == capped("fake", 1)), "{text}");
    assert!(text.lines().any(|l| l == capped("real", 0)), "{text}");
    assert!(
        !text.contains(&format!("namespace=\"{ns}\",mutation=\"fake\",device=")),
        "{text}"
    );
}
