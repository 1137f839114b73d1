//! The per-object invariants the store checks after every edit (R52): what each target refuses,
//! and that an edit which removes is taken even over a bound.

use hyper::StatusCode;

use super::*;
use crate::{
    crd::{
        OwnerKind,
        fixtures::{mutation, variant},
        limits::MAX_VARIANTS,
    },
    variant::devices::DeviceRecord,
};

/// A client whose every request fails: checks never call the API server.
fn no_server() -> Client {
    let service = tower::service_fn(|_: hyper::Request<kube::client::Body>| async {
        Err::<hyper::Response<http_body_util::Full<hyper::body::Bytes>>, std::io::Error>(
            std::io::Error::other("no API server in this test"),
        )
    });
    Client::new(service, "team")
}

fn with_variants(count: usize) -> Mutation {
    let variants = (0..count)
        .map(|i| variant(&format!("v{i}"), &[], 1))
        .collect();
    mutation("web", variants)
}

/// R8, R52: no edit of the variants goes past the CRD's bound on their number, whoever asks
/// (the API's add, an enrollment that makes a variant); an edit that removes one is taken even
/// from a Mutation over the bound.
#[tokio::test]
async fn variants_stay_within_their_bound() {
    let target = Variants(OfMutation::new(
        &no_server(),
        "team",
        "web",
        API_MANAGER,
        None,
    ));
    let full = with_variants(MAX_VARIANTS);
    let over = with_variants(MAX_VARIANTS + 1);
    let refused = target.check(&full.spec.variants, &over);
    let Err(ApiError(code, message)) = refused else {
        panic!("{} variants were taken", MAX_VARIANTS + 1);
    };
    assert_eq!(code, StatusCode::BAD_REQUEST);
    assert!(
        message.contains(&format!("at most {MAX_VARIANTS}")),
        "{message}"
    );
    assert!(target.check(&with_variants(1).spec.variants, &full).is_ok());
    let further_over = with_variants(MAX_VARIANTS + 2);
    assert!(
        target.check(&further_over.spec.variants, &over).is_ok(),
        "a removal"
    );
}

fn listing(count: usize) -> Mutation {
    let mut m = mutation("web", Vec::new());
    let devices = (0..count)
        .map(|i| DeviceStatus {
            id: format!("d{i}"),
            variant: "v".into(),
            enrolled_at: "2026-12-06T00:00:00Z".into(),
            last_seen: "2026-12-06T00:00:00Z".into(),
            state: crate::crd::DeviceState::Online,
            reported: Default::default(),
            poll: None,
        })
        .collect();
    m.status.get_or_insert_default().devices = devices;
    m
}

/// R40, R52: the device list never lists more than `maxDevices` may allow; a list that
/// shrinks is taken.
#[tokio::test]
async fn the_device_list_stays_within_its_bound() {
    let target = Listed(OfMutation::new(
        &no_server(),
        "team",
        "web",
        DEVICES_MANAGER,
        None,
    ));
    let bound = usize::try_from(MAX_DEVICES).unwrap_or(0);
    let Err(ApiError(code, message)) =
        target.check(Listed::part(&listing(bound)), &listing(bound + 1))
    else {
        panic!("{} devices were listed", bound + 1);
    };
    assert_eq!(code, StatusCode::FORBIDDEN);
    assert!(
        message.contains(&format!("over the bound of {bound}")),
        "{message}"
    );
    assert!(
        target
            .check(Listed::part(&listing(0)), &listing(bound))
            .is_ok()
    );
    assert!(
        target
            .check(Listed::part(&listing(bound + 2)), &listing(bound + 1))
            .is_ok()
    );
}

fn registry(count: usize) -> Devices {
    let mut registry = Registry::default();
    for i in 0..count {
        let record = DeviceRecord {
            hash: [0; 32],
            variant: "v".into(),
            enrolled_at: "2026-12-06T00:00:00Z".into(),
        };
        registry.devices.insert(format!("d{i}"), record);
    }
    Devices {
        secret: None,
        registry,
    }
}

/// R39, R52: the devices Secret holds at most the Mutation's `maxDevices`, whatever edit
/// enrolls; removals are taken even when the bound was lowered below what it holds.
#[tokio::test]
async fn the_registry_stays_within_max_devices() {
    let owner = Owner {
        kind: OwnerKind::Mutation,
        name: "web".into(),
        namespace: "team".into(),
        uid: "u".into(),
    };
    let target = DevicesSecret::new(&no_server(), &owner, 3);
    let Err(ApiError(code, message)) = target.check(&registry(3).registry, &registry(4)) else {
        panic!("a fourth device enrolled");
    };
    assert_eq!(code, StatusCode::FORBIDDEN);
    assert!(message.contains("maxDevices"), "{message}");
    assert!(target.check(&registry(2).registry, &registry(3)).is_ok());
    assert!(
        target.check(&registry(5).registry, &registry(4)).is_ok(),
        "a removal"
    );
}
