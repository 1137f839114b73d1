//! R39, R32: what a token may change of a variant is derived from who made it. A device changes
//! (scales) only the variant its own enrollment made while no other device holds it, and reads
//! variants without their env values; the enrollment key joins a variant that exists only with
//! the owner's consent (`enrollable: true`, or `spec.deviceAccess.labelPattern`); without
//! `spec.devices` the Mutation's token scales and removes only the token's variants. The owners
//! here are applied as kubectl applies them, with the owner's marks in their spec.

use serde_json::json;

use super::api_device::set_device_access;
use super::devices::{enroll, enrolled, refused};
use super::*;

/// Mutation `name` with `variants`, `spec.deviceAccess` `access` and devices enrolling freely.
fn fleet(name: &str, variants: Value, access: Value) -> Value {
    let mut m = mutation(name, base(name), variants);
    m["spec"]["deviceAccess"] = access;
    m["spec"]["devices"] = json!({"enrollment": "Open"});
    m
}

/// `method` of `.../variants/{label}` with device `token`: the status and the error.
async fn change(
    f: &Fixture,
    method: &str,
    label: &str,
    token: &str,
    instances: Option<i32>,
) -> (u16, String) {
    let body = instances.map(|n| json!({ "instances": n }));
    let path = format!("/mutations/web/variants/{label}");
    refused(&f.call(method, &path, Some(token), body.as_ref()).await)
}

/// R39: a board enrolled into a variant of the spec that the owner opened to enrollment reads
/// and polls it, without its env values, and never changes it: PATCH and DELETE answer 403
/// naming the variant, which stays as the owner declared it.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_board_in_the_owners_variant_reads_it_without_env_and_never_changes_it() {
    let f = Fixture::with_api("rights-joined").await;
    let lobby = json!({"label": "lobby", "instances": 1, "enrollable": true,
                       "env": {"SNAP_RES": "800x480", "API_KEY": "the-owners-secret"}});
    f.apply::<Mutation>(&fleet("web", json!([lobby]), json!({})))
        .await;
    let key = f.token("web").await;
    let board = enrolled(&f, "web", &key, json!({"id": "board-1", "label": "lobby"})).await;

    let (code, error) = change(&f, "PATCH", "lobby", &board, Some(0)).await;
    assert_eq!(code, 403, "{error}");
    assert!(
        error.contains("\"lobby\"") && error.contains("not made by this device's enrollment"),
        "{error}"
    );
    let (code, error) = change(&f, "DELETE", "lobby", &board, None).await;
    assert_eq!(code, 403, "{error}");
    assert!(error.contains("board-1"), "{error}");
    let m = f.mutations().get("web").await.unwrap();
    assert_eq!(f.spec_labels("web").await, ["lobby"]);
    assert_eq!(m.spec.variants[0].instances, 1, "the owner's instances");

    // It reads its variant and polls, and neither answer carries an env value.
    let read = f
        .call("GET", "/mutations/web/variants/lobby", Some(&board), None)
        .await;
    assert_eq!(read.status, 200, "{read:?}");
    let view = read.json();
    assert_eq!(
        (view["label"].as_str(), view["instances"].as_i64()),
        (Some("lobby"), Some(1))
    );
    assert!(view.get("env").is_none(), "{view}");
    assert!(!read.body.contains("the-owners-secret"), "{}", read.body);
    let poll = f
        .call(
            "GET",
            "/mutations/web/devices/board-1/poll",
            Some(&board),
            None,
        )
        .await;
    assert_eq!(poll.status, 200, "{poll:?}");
    assert_eq!(poll.json()["variant"], "lobby");
    assert!(!poll.body.contains("the-owners-secret"), "{}", poll.body);
    // The owner reads it whole.
    let admin = f
        .call("GET", "/mutations/web/variants/lobby", Some(ADMIN), None)
        .await;
    assert_eq!(admin.json()["env"]["API_KEY"], "the-owners-secret");
}

/// R39: the enrollment key joins a variant that exists only with the owner's consent. An
/// unmarked variant, without `spec.deviceAccess.labelPattern`, is 403 naming the label and
/// both ways to consent, and nothing is enrolled; the admin enrolls into it; a pattern its
/// label matches is consent; a board cannot mark the variant it makes itself.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn enrolling_into_a_variant_the_owner_did_not_open_is_403() {
    let f = Fixture::with_api("rights-consent").await;
    let variants = json!([{"label": "admin-only", "instances": 0}]);
    f.apply::<Mutation>(&fleet("web", variants, json!({})))
        .await;
    let key = f.token("web").await;
    let join = |id: &str| json!({"id": id, "label": "admin-only"});

    let (code, error) = refused(&enroll(&f, "web", &key, join("board-1")).await);
    assert_eq!(code, 403, "{error}");
    for words in [
        "\"admin-only\"",
        "enrollable: true",
        "spec.deviceAccess.labelPattern",
    ] {
        assert!(error.contains(words), "{words}: {error}");
    }
    let listed = f
        .call("GET", "/mutations/web/devices", Some(ADMIN), None)
        .await;
    assert_eq!(listed.json(), json!([]), "nothing enrolled: {listed:?}");

    // The admin, the owner, enrolls into any variant.
    enrolled(&f, "web", ADMIN, join("board-1")).await;
    // A pattern the label matches is the owner's consent.
    set_device_access(&f, "web", json!({"labelPattern": "admin-*"})).await;
    enrolled(&f, "web", &key, join("board-2")).await;
    // Only the owner marks a variant.
    let marked = json!({"id": "board-3", "variant":
                        {"label": "admin-3", "instances": 0, "enrollable": true}});
    let (code, error) = refused(&enroll(&f, "web", &key, marked).await);
    assert_eq!(code, 403, "{error}");
    assert!(error.contains("enrollable"), "{error}");
    assert_eq!(f.spec_labels("web").await, ["admin-only"]);
}

/// R39: a device changes the variant its enrollment made while it holds it alone: it scales it
/// (the answer without env). The enrollment key cannot put a second board into it (the
/// owner's labelPattern opens only the owner's variants); once the admin does, neither board
/// changes it (403 naming the other holder); when the second leaves, the first
/// scales it again, and removing itself takes the variant along.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_device_changes_its_own_variant_only_while_it_holds_it_alone() {
    let f = Fixture::with_api("rights-own").await;
    let access = json!({"env": ["SNAP_RES"], "maxInstances": 3, "labelPattern": "radxa*"});
    f.apply::<Mutation>(&fleet("web", json!([]), access)).await;
    let key = f.token("web").await;
    let own = json!({"id": "radxa-8", "variant": {"label": "radxa", "instances": 0,
                     "env": {"SNAP_RES": "1280x800"}}});
    let radxa = enrolled(&f, "web", &key, own).await;

    let path = "/mutations/web/variants/radxa";
    let scaled = f
        .call("PATCH", path, Some(&radxa), Some(&json!({"instances": 2})))
        .await;
    assert_eq!(scaled.status, 200, "{scaled:?}");
    assert_eq!(scaled.json()["instances"], 2);
    assert!(scaled.json().get("env").is_none(), "{}", scaled.body);

    // The key cannot put a second board into it, though its label matches labelPattern: a
    // lifted key would otherwise freeze every board's variant for its board.
    let joined = enroll(&f, "web", &key, json!({"id": "radxa-9", "label": "radxa"})).await;
    joined.assert_refused(403, &["\"radxa\"", "another board's enrollment"]);
    // The admin does: shared, neither board changes it.
    let other = enrolled(&f, "web", ADMIN, json!({"id": "radxa-9", "label": "radxa"})).await;
    for (who, token) in [("radxa-8", &radxa), ("radxa-9", &other)] {
        let (code, error) = change(&f, "PATCH", "radxa", token, Some(3)).await;
        assert_eq!(code, 403, "{who}: {error}");
        assert!(
            error.contains("\"radxa\"") && error.contains("held by 1 other device"),
            "{who}: {error}"
        );
    }
    // A device never removes a variant through the variant route: it removes itself.
    let (code, error) = change(&f, "DELETE", "radxa", &radxa, None).await;
    assert_eq!(code, 403, "{error}");
    let m = f.mutations().get("web").await.unwrap();
    assert_eq!(m.spec.variants[0].instances, 2);

    // The second leaves: the first holds it alone again.
    let left = f
        .call(
            "DELETE",
            "/mutations/web/devices/radxa-9",
            Some(&other),
            None,
        )
        .await;
    assert_eq!(left.status, 204, "{left:?}");
    let (code, error) = change(&f, "PATCH", "radxa", &radxa, Some(1)).await;
    assert_eq!(code, 200, "{error}");
    let gone = f
        .call(
            "DELETE",
            "/mutations/web/devices/radxa-8",
            Some(&radxa),
            None,
        )
        .await;
    assert_eq!(gone.status, 204, "{gone:?}");
    assert_eq!(f.spec_labels("web").await, Vec::<String>::new());
    f.wait_gone("web-radxa").await;
}

/// R32: without `spec.devices` the Mutation's token (on every board) scales and removes only
/// the token's variants. The spec's and the admin's (one that tolerates every taint) answer
/// 403 naming the variant, and stay as they were; a spec variant the owner hands over with
/// `byToken: true` is the token's, but one placed where a token may not place it is only
/// removed, never scaled; a token cannot mark a variant itself; the walk-through's `beta`
/// (added, scaled to 4, removed) works as before, and the admin changes any.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn without_devices_a_token_changes_only_the_tokens_variants() {
    let f = Fixture::with_api("rights-token").await;
    let everywhere = json!([{"operator": "Exists"}]);
    let variants = json!([
        {"label": "owner", "instances": 0},
        {"label": "handed", "instances": 0, "byToken": true},
        {"label": "anywhere", "instances": 0, "byToken": true, "tolerations": everywhere},
    ]);
    f.apply::<Mutation>(&mutation("web", base("web"), variants))
        .await;
    let token = f.token("web").await;
    let placed = json!({"label": "placed", "instances": 0, "tolerations": everywhere});
    assert_eq!(f.add_variant("web", ADMIN, &placed).await.status, 201);

    for label in ["owner", "placed"] {
        for (method, instances) in [("PATCH", Some(10)), ("DELETE", None)] {
            let (code, error) = change(&f, method, label, &token, instances).await;
            assert_eq!(code, 403, "{method} {label}: {error}");
            assert!(
                error.contains(&format!("{label:?}"))
                    && error.contains("not made by a token")
                    && error.contains("byToken: true"),
                "{method} {label}: {error}"
            );
        }
    }
    let (code, error) = change(&f, "PATCH", "handed", &token, Some(2)).await;
    assert_eq!(code, 200, "{error}");
    let (code, error) = change(&f, "PATCH", "anywhere", &token, Some(1)).await;
    assert_eq!(code, 403, "{error}");
    assert!(
        error.contains("\"anywhere\"") && error.contains("every taint"),
        "{error}"
    );
    let (code, error) = change(&f, "DELETE", "anywhere", &token, None).await;
    assert_eq!(code, 204, "{error}");
    let marked = json!({"label": "mine", "instances": 0, "byToken": true});
    f.add_variant("web", &token, &marked)
        .await
        .assert_refused(403, &["byToken"]);

    // docs/api.md's walk-through: the token's own beta.
    let beta = json!({"label": "beta", "env": {"FEATURE_X": "on"}, "instances": 2});
    let added = f.add_variant("web", &token, &beta).await;
    assert_eq!(added.status, 201, "{added:?}");
    assert_eq!(added.json()["env"]["FEATURE_X"], "on");
    let (code, error) = change(&f, "PATCH", "beta", &token, Some(4)).await;
    assert_eq!(code, 200, "{error}");
    let (code, error) = change(&f, "DELETE", "beta", &token, None).await;
    assert_eq!(code, 204, "{error}");
    // The admin is held to none of it.
    let (code, error) = change(&f, "PATCH", "owner", ADMIN, Some(1)).await;
    assert_eq!(code, 200, "{error}");

    let m = f.mutations().get("web").await.unwrap();
    let kept: Vec<(&str, i32)> = m
        .spec
        .variants
        .iter()
        .map(|v| (v.label.as_str(), v.instances))
        .collect();
    assert_eq!(kept, [("owner", 1), ("handed", 2), ("placed", 0)]);
}

/// R32, R22: a token's answer holds for the Mutation as it is when the answer is given, not as
/// this replica's cache last saw it. Each round the owner's spec gains variant `x` and the
/// token's PATCH and DELETE right after are refused (403, not the token's); then the spec drops
/// it and the same requests right after answer 404 (gone), never the 403 of the variant the
/// cache may still show. Twelve rounds: 48 writes stay within the token's burst (R34).
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn a_tokens_answer_holds_for_what_the_spec_holds_when_it_is_given() {
    let f = Fixture::with_api("rights-now").await;
    f.apply::<Mutation>(&mutation("web", base("web"), json!([])))
        .await;
    let token = f.token("web").await;
    for round in 0..12 {
        let owners = json!([{"label": "x", "instances": 0}]);
        f.apply::<Mutation>(&mutation("web", base("web"), owners))
            .await;
        for (method, instances) in [("PATCH", Some(1)), ("DELETE", None)] {
            let (code, error) = change(&f, method, "x", &token, instances).await;
            assert_eq!(
                code, 403,
                "round {round}, {method} of the spec's x: {error}"
            );
        }
        f.apply::<Mutation>(&mutation("web", base("web"), json!([])))
            .await;
        for (method, instances) in [("PATCH", Some(1)), ("DELETE", None)] {
            let (code, error) = change(&f, method, "x", &token, instances).await;
            assert_eq!(
                code, 404,
                "round {round}, {method} after the spec dropped x: {error}"
            );
            assert!(error.contains("\"x\" not found"), "{error}");
        }
    }
}

/// R39: with `spec.devices.ids` the enrollment key enrolls only the ids the owner lists (a
/// lifted key cannot take the id of a board not listed), and the admin enrolls any id, which
/// is how an id is bound to its board.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn the_owner_may_list_the_ids_the_key_enrolls() {
    let f = Fixture::with_api("rights-ids").await;
    let mut m = fleet("web", json!([]), json!({"labelPattern": "board-*"}));
    m["spec"]["devices"]["ids"] = json!(["aa-01"]);
    f.apply::<Mutation>(&m).await;
    let key = f.token("web").await;
    let own =
        |id: &str| json!({"id": id, "variant": {"label": format!("board-{id}"), "instances": 0}});
    enrolled(&f, "web", &key, own("aa-01")).await;
    let refused = enroll(&f, "web", &key, own("zz-99")).await;
    refused.assert_refused(403, &["\"zz-99\"", "spec.devices.ids"]);
    enrolled(&f, "web", ADMIN, own("zz-99")).await;
    let m = f.mutations().get("web").await.unwrap();
    let mut ids: Vec<String> = m
        .status
        .unwrap()
        .devices
        .into_iter()
        .map(|d| d.id)
        .collect();
    ids.sort();
    assert_eq!(ids, ["aa-01", "zz-99"]);
}
