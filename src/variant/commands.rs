//! What a token's variant may not pass to a command line once the base changes
//! (R41). The HTTP API refuses a token's env name whose value the base expands into a
//! command line, a probe, a hook, a sub-path or a start-up variable (`base_env::reaching`)
//! unless the owner lists it in `spec.deviceAccess.env`; a base edited later to expand such a
//! name would still run what a board sent. So a variant added by a token (`byToken`) that sets
//! a name the base now expands so, unlisted, is held back as Invalid, and its Deployment keeps
//! what it had.

use super::{
    access::env_targets,
    base_env::{Reach, reaching},
    build::Planned,
    validate::Base,
};
use crate::crd::{Variant, limits::DeviceAccess};

/// Why the token's variant `v` may not be applied over a base whose expansion closure is
/// `reaches` ([`reaching`]): the first name it sets (in its env or a container's) that reaches
/// an expanded field and `access` does not list.
pub fn command_line_problem(
    reaches: &[Reach],
    access: Option<&DeviceAccess>,
    v: &Variant,
) -> Option<String> {
    if v.by_token != Some(true) {
        return None;
    }
    let listed = access.and_then(|a| a.env.as_deref()).unwrap_or_default();
    let set = v.env.iter().map(|(name, _)| name).chain(
        v.containers
            .iter()
            .flat_map(|c| c.env.iter().map(|(name, _)| name)),
    );
    for name in set {
        if env_targets(listed, name).is_some() {
            continue;
        }
        if let Some(reach) = reaches.iter().find(|r| r.name == *name) {
            return Some(format!(
                "env {name:?}: set by a Mutation's token, and now {}, so the value would run \
                 as part of it; the owner may list it in spec.deviceAccess.env, or remove it \
                 from the variant",
                reach.describe()
            ));
        }
    }
    None
}

/// `planned` with each of `variants` (in the same order) that [`command_line_problem`] finds
/// made Invalid. The base's closure is computed once, and only when a token's variant is there.
pub fn hold_command_lines(
    planned: Vec<Planned>,
    base: &Base,
    access: Option<&DeviceAccess>,
    variants: &[Variant],
) -> Vec<Planned> {
    if variants.iter().all(|v| v.by_token != Some(true)) {
        return planned;
    }
    let reaches = reaching(base.value());
    planned
        .into_iter()
        .zip(variants)
        .map(
            |(p, v)| match (p, command_line_problem(&reaches, access, v)) {
                (Planned::Apply { label, name, .. }, Some(message)) => Planned::Invalid {
                    label,
                    name,
                    message,
                },
                (p, _) => p,
            },
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    // R41: only a token's variant is held, only for an unlisted name the base
    // passes to a command line, whether in its env or a container's.
    #[test]
    fn a_tokens_name_on_a_later_command_line_is_held() {
        let mut value = json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "image": "x",
                                         "args": ["--title", "$(TITLE)"]}]}}}
        });
        let base = Base::parse(&value).unwrap_or_else(|e| panic!("{e}"));
        let mut v = Variant {
            label: "a".into(),
            env: [("TITLE", "x; reboot")].into_iter().collect(),
            ..Variant::default()
        };
        assert_eq!(
            command_line_problem(&reaching(base.value()), None, &v),
            None,
            "the admin's"
        );
        v.by_token = Some(true);
        let problem = command_line_problem(&reaching(base.value()), None, &v).unwrap_or_default();
        assert!(
            problem.contains("$(TITLE)") && problem.contains("\"app\""),
            "{problem}"
        );
        let listed = DeviceAccess {
            env: Some(vec!["app/TITLE".into()]),
            ..DeviceAccess::default()
        };
        assert_eq!(
            command_line_problem(&reaching(base.value()), Some(&listed), &v),
            None
        );
        value["spec"]["template"]["spec"]["containers"][0]["args"] =
            json!(["--title", "$$(TITLE)"]);
        let escaped = Base::parse(&value).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            command_line_problem(&reaching(escaped.value()), None, &v),
            None
        );
    }
}
