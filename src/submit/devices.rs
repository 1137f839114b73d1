//! The one writer of a Mutation's `status.devices` and `status.deviceSummary` (R40), used by
//! whoever heard from a device: the HTTP API on any replica (enrollment, removal, heartbeats)
//! and the leader's controller (states that change with time alone).
//!
//! The write is a JSON merge patch of the status subresource under field manager
//! `mutantops-devices`, read-modify-write on the Mutation's resourceVersion and retried on a
//! conflict, so no replica's change of one device undoes another's change of another. The
//! controller's own status (server-side apply under `mutantops-operator`) never names these two
//! fields, so neither writer takes the other's.

use kube::{
    Api, Client,
    api::{Patch, PatchParams},
};
use serde_json::json;

use crate::{
    crd::{DeviceStatus, Mutation},
    variant::devices::summary,
};

/// The field manager of the device list.
pub const DEVICES_FIELD_MANAGER: &str = "mutantops-devices";

/// How many times a write is tried again after a resourceVersion conflict.
const ATTEMPTS: u32 = 10;

/// What [`write`] did.
#[derive(Debug)]
pub enum Written {
    /// The list was written; the Mutation as the server answered.
    Yes(Box<Mutation>),
    /// `change` found nothing to write.
    Unchanged,
    /// The Mutation does not exist.
    Absent,
}

/// Reads Mutation `ns/name` from the API server, lets `change` compute its new device list
/// from the one it has (`None`: nothing to write), and writes the list and its summary with
/// the resourceVersion it read; a conflict reads again. The list is kept in id order.
pub async fn write<F>(client: &Client, ns: &str, name: &str, change: F) -> kube::Result<Written>
where
    F: Fn(&Mutation) -> Option<Vec<DeviceStatus>>,
{
    let api: Api<Mutation> = Api::namespaced(client.clone(), ns);
    let mut last = None;
    for attempt in 0..ATTEMPTS {
        let Some(current) = api.get_opt(name).await? else {
            return Ok(Written::Absent);
        };
        let Some(mut devices) = change(&current) else {
            return Ok(Written::Unchanged);
        };
        devices.sort_by(|a, b| a.id.cmp(&b.id));
        let version = current.metadata.resource_version.as_deref();
        match crate::http::overdue::write(patch(&api, name, version, &devices)).await {
            Ok(updated) => return Ok(Written::Yes(Box::new(updated))),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                last = Some(kube::Error::Api(status));
                let pause = std::time::Duration::from_millis(5 * u64::from(attempt + 1));
                tokio::time::sleep(pause).await;
            }
            Err(err) => return Err(err),
        }
    }
    Err(last.unwrap_or_else(|| {
        kube::Error::Service(format!("{ns}/{name}: device status kept conflicting").into())
    }))
}

/// Writes `devices` (in id order) and their summary as Mutation `name`'s device list, guarded
/// by `resource_version`: the one patch of both fields, also for writers that batch edits.
pub async fn patch(
    api: &Api<Mutation>,
    name: &str,
    resource_version: Option<&str>,
    devices: &[DeviceStatus],
) -> kube::Result<Mutation> {
    let params = PatchParams {
        field_manager: Some(DEVICES_FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    let patch = json!({
        "metadata": { "resourceVersion": resource_version },
        "status": { "devices": devices, "deviceSummary": summary(devices) },
    });
    api.patch_status(name, &params, &Patch::Merge(&patch)).await
}
