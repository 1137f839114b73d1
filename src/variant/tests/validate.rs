//! Tests of variant and base validation (R8, R10).

use serde_json::{Value, json};

use super::*;
use crate::variant::{MAX_BASE_DEPTH, names::LABEL_RULE};

// R8
#[test]
fn labels_are_dns1123_labels() {
    for ok in ["canary", "a", "a-1", "0x", &"a".repeat(63)] {
        assert_eq!(validate_label(ok), Ok(()), "{ok}");
    }
    for bad in ["", "Canary", "-a", "a-", "a_b", "a.b", "é", &"a".repeat(64)] {
        assert!(validate_label(bad).is_err(), "{bad}");
    }
    assert_eq!(
        validate_label("Canary"),
        Err(
            "label \"Canary\": must be a DNS-1123 label: lower-case letters, digits and '-', \
             starting and ending with a letter or digit, at most 63 characters"
                .into()
        )
    );
}

// R8
#[test]
fn env_names_follow_the_classic_rule() {
    for ok in ["FOO", "_x", "a.b", "-x", "x1", "A-B_c.D"] {
        assert_eq!(validate_env_name(ok), Ok(()), "{ok}");
    }
    for bad in ["1X", "A=B", "A B", "Ä", "$X"] {
        assert!(
            validate_env_name(bad).is_err_and(|e| e.contains(&format!("{bad:?}"))),
            "{bad}"
        );
    }
    assert_eq!(
        validate_env_name(""),
        Err("env name \"\": must not be empty".into())
    );
}

// R8
#[test]
fn variant_validation_reports_every_problem() {
    assert_eq!(
        validate_variant("web", &variant("canary", &[("X", "1")], 0)),
        Ok(())
    );
    let e = validate_variant("web", &variant("Bad", &[("1X", "1"), ("OK", "")], -1));
    assert_eq!(
        e.map_err(|e| e
            .split("; ")
            .map(|p| p.split(':').next().unwrap_or("").to_owned())
            .collect::<Vec<_>>()),
        Err(vec![
            "label \"Bad\"".into(),
            "env name \"1X\"".into(),
            "instances -1".into()
        ])
    );
}

// R8
#[test]
fn deployment_name_must_fit_63_characters() {
    let base = "b".repeat(50);
    assert_eq!(deployment_name(&base, "x"), format!("{base}-x"));
    assert_eq!(
        validate_variant(&base, &variant(&"l".repeat(12), &[], 1)),
        Ok(())
    );
    let e = validate_variant(&base, &variant(&"l".repeat(13), &[], 1));
    assert!(e.is_err_and(|e| e.contains("64 characters, at most 63")));
}

// R10
#[test]
fn base_parses_and_keeps_the_raw_json() {
    let b = base();
    assert_eq!(b.name(), "web");
    assert_eq!(b.value(), &base_json());
}

// R10
#[test]
fn base_structure_is_checked() {
    assert!(parse_err(json!("x")).starts_with("deployment: must be an object"));
    let e = parse_err(json!({"apiVersion": "apps/v2", "metadata": {}, "spec": {}}));
    assert_eq!(
        e,
        "deployment.apiVersion: must be \"apps/v1\", not \"apps/v2\"; \
         deployment.kind: required, must be \"Deployment\"; \
         deployment.metadata.name: required; \
         deployment.spec.selector: required; \
         deployment.spec.template.spec.containers: required, at least one container"
    );
    let mut v = base_json();
    v["metadata"]["name"] = json!("Web_1");
    assert!(
        parse_err(v)
            .starts_with("deployment.metadata.name \"Web_1\": must be a DNS-1123 subdomain")
    );
    let mut v = base_json();
    v["metadata"]["name"] = json!("a.b-c");
    assert!(Base::parse(&v).is_ok());
    let mut v = base_json();
    v["spec"] = Value::Null;
    assert_eq!(parse_err(v), "deployment.spec: required, must be an object");
    let mut v = base_json();
    v["spec"]["template"]["spec"]["containers"] = json!([]);
    assert!(parse_err(v).contains("containers: required, at least one"));
}

// R10
#[test]
fn container_names_are_required_and_unique() {
    let mut v = base_json();
    v["spec"]["template"]["spec"]["containers"] =
        json!([{"image": "x"}, {"name": "a"}, {"name": "a"}, {"name": "B"}]);
    assert_eq!(
        parse_err(v),
        format!(
            "deployment.spec.template.spec.containers[0].name: required; \
             deployment.spec.template.spec.containers[2].name \"a\": must be unique; \
             deployment.spec.template.spec.containers[3].name \"B\": {LABEL_RULE}"
        )
    );
}

// R10: what the operator reads of a base typed, its selector and its pod template's labels,
// must decode; any other field is the API server's to judge (its dry runs and the probe of a
// refused apply, tested against the control plane), not a second, partial judge here
#[test]
fn a_base_must_decode_where_the_operator_reads_it() {
    let mut v = base_json();
    v["spec"]["selector"] = json!("app=web");
    assert_eq!(
        parse_err(v),
        "deployment: invalid type: string \"app=web\", expected LabelSelector"
    );
    let mut v = base_json();
    v["spec"]["template"]["metadata"]["labels"] = json!(["app", "web"]);
    assert!(parse_err(v).starts_with("deployment: invalid type: sequence"));
    let mut v = base_json();
    v["spec"]["replicas"] = json!("3");
    v["spec"]["template"]["spec"]["containers"][0]["env"] = json!({"A": "1"});
    assert!(
        Base::parse(&v).is_ok(),
        "left to the API server, which names the field in its own words"
    );
}

// R10, R46: a base nested deeper than MAX_BASE_DEPTH is invalid (such an object cut
// by the client's depth guard is too), one exactly that deep is checked as usual.
#[test]
fn a_base_nested_too_deeply_is_invalid() {
    let nested = |levels: usize| {
        let mut v = base_json();
        // the base is 6 levels deep down to the container object
        let inner = serde_json::from_str::<Value>(&format!(
            "{}{}",
            "[".repeat(levels - 6),
            "]".repeat(levels - 6)
        ))
        .unwrap_or_else(|e| panic!("{e}"));
        v["spec"]["template"]["spec"]["containers"][0]["x"] = inner;
        v
    };
    let e = parse_err(nested(MAX_BASE_DEPTH + 1));
    assert_eq!(
        e,
        "deployment: nests arrays and objects deeper than 64 levels"
    );
    // exactly at the limit, the base is checked as usual (its typed decoding ignores `x`;
    // the API server's strict validation refuses it later)
    assert!(Base::parse(&nested(MAX_BASE_DEPTH)).is_ok());
}

// R10
#[test]
fn template_labels_must_match_the_selector() {
    let mut v = base_json();
    v["spec"]["template"]["metadata"]["labels"]["app"] = json!("other");
    assert!(parse_err(v).contains("(needs app=nginx)"));
    let mut v = base_json();
    v["spec"]["template"]["metadata"]["labels"]["tier"] = json!("db");
    assert!(parse_err(v).contains("(tier In [\"web\"])"));
    let mut v = base_json();
    v["spec"]["selector"]["matchExpressions"] = json!([
        {"key": "tier", "operator": "Exists"},
        {"key": "gone", "operator": "DoesNotExist"},
        {"key": "tier", "operator": "NotIn", "values": ["db"]}
    ]);
    assert!(Base::parse(&v).is_ok());
    v["spec"]["selector"]["matchExpressions"][0]["operator"] = json!("Near");
    assert!(parse_err(v).contains("unknown operator \"Near\""));
}

// R8, R21: what the HTTP API accepts of a list of variants
#[test]
fn a_list_of_variants_is_refused_at_its_first_problem() {
    let ok = [variant("a", &[], 1), variant("b", &[("X", "1")], 0)];
    assert_eq!(validate_variants("web", &ok), Ok(()));
    let twice = [variant("a", &[], 1), variant("a", &[], 2)];
    assert_eq!(
        validate_variants("web", &twice),
        Err("variant \"a\": label given twice".to_string())
    );
    let bad = [variant("a", &[], 1), variant("B", &[], 1)];
    let err = validate_variants("web", &bad).err().unwrap_or_default();
    assert!(err.starts_with("variant \"B\": "), "{err}");
}
