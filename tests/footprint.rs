//! What one cached object costs: bytes and allocations held per object by a cache of many,
//! counted by a counting global allocator (this test binary's own; the library's allocator is
//! untouched). Each object is decoded from the JSON the API server sends (`tests/footprint/`:
//! objects of the 1000 x 5 scale run, as a watch brings them, `managedFields` and all), slimmed
//! as the caches' watches slim it, and applied to a kube reflector store as the caches do, so
//! the figure includes the store's key and its slot. `cargo test --test footprint --
//! --nocapture` prints the figures.
//!
//! The bounds guard the gain of the compact representations: a change that makes a cached
//! object larger again fails here, long before a benchmark at scale would show it.

use std::{alloc::System, sync::Arc};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::ObjectRef;

use kube::runtime::{reflector::store::Writer, watcher};
use mutantops::{
    crd::Mutation,
    variant::{CachedSecret, DeploymentWire, ObservedService},
};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Objects per measurement: the per-object figure is the total over these, divided.
const OBJECTS: usize = 1000;

/// A fixture with its placeholders filled for object `i`: `{NAME}` (the owner, `m0421`),
/// `{VARIANT}` (`v3`), `{UID}` and `{OWNERUID}`, `{RV}` (resourceVersion).
/// `per_owner` objects share an owner (5 variants' Deployments; 1 for Mutations, Secrets).
fn fill(template: &str, i: usize, per_owner: usize) -> String {
    let owner = i / per_owner;
    template
        .replace(
            "{OWNERUID}",
            &format!("0b9e8c7d-6a5f-4e3d-2c1b-{owner:012x}"),
        )
        .replace("{UID}", &format!("6f1c2a4e-8b1d-4c55-9a0e-{i:012x}"))
        .replace("{NAME}", &format!("m{owner:04}"))
        .replace("{VARIANT}", &format!("v{}", i % 5))
        .replace("{RV}", &format!("{}", 184_467 + i))
}

/// What `n` objects decoded from `template` cost, held as `keep` makes them (the cache's form),
/// in a reflector store: (bytes, allocations) per object, and the JSON's length.
fn measure<W, K>(
    template: &str,
    n: usize,
    per_owner: usize,
    decode: impl Fn(&str) -> W,
    keep: impl Fn(W) -> K,
) -> (usize, usize, usize)
where
    K: kube::runtime::reflector::Lookup + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let texts: Vec<String> = (0..n).map(|i| fill(template, i, per_owner)).collect();
    let mut writer = Writer::<K>::default();
    let store = writer.as_reader();
    let region = Region::new(GLOBAL);
    for text in &texts {
        let object = keep(decode(text));
        writer.apply_watcher_event(&watcher::Event::Apply(object));
    }
    let change = region.change();
    assert_eq!(store.len(), n);
    // (a realloc's growth or shrinking is already in bytes_allocated or bytes_deallocated)
    let bytes = change.bytes_allocated as isize - change.bytes_deallocated as isize;
    let allocations = change.allocations as isize - change.deallocations as isize;
    let per = |total: isize| usize::try_from(total).unwrap_or(0) / n;
    let json = texts.first().map_or(0, String::len);
    drop(store);
    (per(bytes), per(allocations), json)
}

fn decode<W: serde::de::DeserializeOwned>(text: &str) -> W {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}"))
}

/// What the caches' watches drop from every object before it is stored (`cache::slim`).
fn slim<K: kube::Resource>(mut obj: K) -> K {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
    obj
}

struct Row {
    what: &'static str,
    json: usize,
    bytes: usize,
    allocations: usize,
    max_bytes: usize,
    max_allocations: usize,
}

fn row(what: &'static str, (bytes, allocations, json): (usize, usize, usize)) -> Row {
    Row {
        what,
        json,
        bytes,
        allocations,
        max_bytes: 0,
        max_allocations: 0,
    }
}

/// One test, so that nothing else allocates while it counts.
#[test]
fn each_cached_object_stays_small() {
    let deployment = include_str!("footprint/deployment.json");
    let mutation = include_str!("footprint/mutation.json");
    let secret = include_str!("footprint/secret.json");
    let service = include_str!("footprint/service.json");
    let bounds = [
        // (bytes, allocations) per object, store key and slot included. The name, namespace,
        // uid and resourceVersion in one text, and the labels' lengths inside their text:
        // 983 bytes in 12 allocations -> 926 in 8; the Deployment controller's revision
        // annotation one byte of the packed text: 890; five phrases more (the bytes UTF-8
        // never holds name them): 839.
        (845, 8),
        // spec.devices (boxed) and status.devices and deviceSummary (R39) cost a Mutation
        // without devices 40 bytes of its inline size: 3,523 -> 3,563. A variant status's sleep
        // (R42) is boxed: 8 bytes each while absent (3,555 with the status's own slack).
        // spec.screen and each variant status's screen (R53) are boxed too: 8 bytes each
        // while absent, 48 for this Mutation (3,619); a variant's own path lives in
        // spec.screen.paths, not in every variant. A variant status's Service (R36) is boxed
        // (144 bytes each while absent) and each variant's env is one text: 2,834 in 41.
        (2_840, 41),
        // A devices Secret's index of token hashes (R39) costs every Secret 16 bytes while
        // empty: 666 -> 682; its names in one text and its labels as one: 625 in 8.
        (630, 8),
        (2_300, 25),
    ];
    let rows = [
        row(
            "Deployment (ObservedDeployment)",
            measure(deployment, OBJECTS, 5, decode::<DeploymentWire>, |d| {
                d.split().0
            }),
        ),
        row(
            "Mutation, 5 variants and status",
            measure(mutation, OBJECTS / 5, 1, decode::<Mutation>, slim),
        ),
        row(
            "Secret",
            measure(
                secret,
                OBJECTS / 5,
                1,
                decode::<k8s_openapi::api::core::v1::Secret>,
                |s| CachedSecret::split(slim(s)).0,
            ),
        ),
        row(
            "Service (ObservedService)",
            measure(service, OBJECTS, 5, decode::<ObservedService>, slim),
        ),
    ];
    let rows: Vec<Row> = rows
        .into_iter()
        .zip(bounds)
        .map(|(r, (max_bytes, max_allocations))| Row {
            max_bytes,
            max_allocations,
            ..r
        })
        .collect();
    println!(
        "{:<34} {:>6} {:>8} {:>7}",
        "cached object", "JSON", "bytes", "allocs"
    );
    for r in &rows {
        println!(
            "{:<34} {:>6} {:>8} {:>7}",
            r.what, r.json, r.bytes, r.allocations
        );
    }
    println!(
        "inline sizes: ObservedDeployment {}, Mutation {}, CachedSecret {}, ObservedService {}, \
         a store slot {}",
        std::mem::size_of::<DeploymentWire>() - std::mem::size_of::<ObjectMeta>(),
        std::mem::size_of::<Mutation>(),
        std::mem::size_of::<CachedSecret>(),
        std::mem::size_of::<ObservedService>(),
        std::mem::size_of::<(ObjectRef<ObservedService>, Arc<ObservedService>)>(),
    );
    for r in &rows {
        assert!(
            r.bytes <= r.max_bytes && r.allocations <= r.max_allocations,
            "{}: {} bytes in {} allocations, at most {} in {} allowed",
            r.what,
            r.bytes,
            r.allocations,
            r.max_bytes,
            r.max_allocations
        );
    }
}
