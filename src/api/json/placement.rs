//! The request forms of a variant's `tolerations` and `containers` (R37): the CRD's types,
//! refusing unknown fields, so that a typo is a 400 instead of a silently ignored setting.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::crd::{ContainerOverride, Quantity, Resources, Toleration};

/// One of `tolerations`: [`Toleration`].
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TolerationRequest {
    /// [`Toleration::key`].
    #[serde(default)]
    pub key: String,
    /// [`Toleration::operator`].
    #[serde(default)]
    pub operator: String,
    /// [`Toleration::value`].
    #[serde(default)]
    pub value: String,
    /// [`Toleration::effect`].
    #[serde(default)]
    pub effect: String,
    /// [`Toleration::toleration_seconds`].
    #[serde(default)]
    pub toleration_seconds: Option<i64>,
}

impl From<TolerationRequest> for Toleration {
    fn from(r: TolerationRequest) -> Self {
        Toleration {
            key: r.key,
            operator: r.operator,
            value: r.value,
            effect: r.effect,
            toleration_seconds: r.toleration_seconds,
        }
    }
}

/// One of `containers`: [`ContainerOverride`].
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct ContainerRequest {
    /// [`ContainerOverride::name`].
    pub name: String,
    /// [`ContainerOverride::image`].
    #[serde(default)]
    pub image: Option<String>,
    /// [`ContainerOverride::resources`].
    #[serde(default)]
    pub resources: Option<ResourcesRequest>,
}

/// `resources` of one of `containers`: [`Resources`].
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct ResourcesRequest {
    /// [`Resources::limits`].
    #[serde(default)]
    pub limits: BTreeMap<String, Quantity>,
    /// [`Resources::requests`].
    #[serde(default)]
    pub requests: BTreeMap<String, Quantity>,
}

impl From<ContainerRequest> for ContainerOverride {
    fn from(r: ContainerRequest) -> Self {
        ContainerOverride {
            name: r.name,
            image: r.image,
            resources: r.resources.map(|r| Resources {
                limits: r.limits,
                requests: r.requests,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::{VariantRequest, variant_view};
    use crate::crd::{Variant, fixtures};

    // R37, R24: the request's placement and containers are the CRD's fields, typos refused.
    #[test]
    fn a_request_carries_placement_and_refuses_typos() {
        let sent = json!({
            "label": "radxa-8-hd",
            "env": {"SNAP_RES": "1280x800"},
            "nodeSelector": {"kubernetes.io/arch": "arm64"},
            "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "snap", "image": "snap:2", "resources": {
                "limits": {"memory": "64Mi", "cpu": 1}}}]
        });
        let request: VariantRequest =
            serde_json::from_value(sent.clone()).unwrap_or_else(|e| panic!("{e}"));
        let v = Variant::from(request);
        assert_eq!(v.node_selector["kubernetes.io/arch"], "arm64");
        assert_eq!(v.tolerations[0].effect, "NoSchedule");
        assert_eq!(v.containers[0].image.as_deref(), Some("snap:2"));
        // the API answers the variant as it is stored, with the new fields
        let m = fixtures::mutation("browser-snap", vec![v]);
        let view = serde_json::to_value(variant_view(&m, 0)).unwrap_or_default();
        assert_eq!(view["nodeSelector"], sent["nodeSelector"]);
        assert_eq!(view["tolerations"], sent["tolerations"]);
        assert_eq!(
            view["containers"],
            json!([{"name": "snap", "image": "snap:2", "resources": {
                "limits": {"cpu": "1", "memory": "64Mi"}}}])
        );
        // and leaves them out when the variant sets none
        let plain = fixtures::mutation("web", vec![fixtures::variant("beta", &[], 1)]);
        let view = serde_json::to_value(variant_view(&plain, 0)).unwrap_or_default();
        for field in ["nodeSelector", "tolerations", "containers"] {
            assert!(view.get(field).is_none(), "{field}: {view}");
        }
        for (typo, field) in [
            (json!({"label": "a", "nodeselector": {}}), "nodeselector"),
            (
                json!({"label": "a", "tolerations": [{"keys": "x"}]}),
                "keys",
            ),
            (
                json!({"label": "a", "containers": [{"name": "x", "img": "y"}]}),
                "img",
            ),
            (
                json!({"label": "a", "containers": [{"name": "x", "resources": {"limit": {}}}]}),
                "limit",
            ),
        ] {
            let e = serde_json::from_value::<VariantRequest>(typo).unwrap_err();
            assert!(
                e.to_string().contains(&format!("unknown field `{field}`")),
                "{e}"
            );
        }
        let e = serde_json::from_value::<VariantRequest>(
            json!({"label": "a", "containers": [{"image": "y"}]}),
        )
        .unwrap_err();
        assert!(e.to_string().contains("missing field `name`"), "{e}");
    }
}
