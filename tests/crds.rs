//! R2: the CRDs under `deploy/crds/` are exactly what `mutantops crd` prints, and the real API
//! server accepts them.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a failed step must fail the test"
)]

mod common;

use std::path::Path;

/// R2: a change to the Rust types that is not regenerated into deploy/ fails here.
/// Regenerate with: `cargo run -- crd` split per file, or `UPDATE_CRDS=1 cargo test --test crds`
/// (which writes the Helm chart's copies too).
#[test]
fn checked_in_crds_match_the_rust_types() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // deploy/crds/ and the Helm chart's copies (Helm installs what is in a chart's crds/).
    let dirs = [
        root.join("deploy/crds"),
        root.join("deploy/chart/mutantops/crds"),
    ];
    for (name, yaml) in mutantops::crd::crd_files().unwrap() {
        for path in dirs.iter().map(|dir| dir.join(&name)) {
            if std::env::var_os("UPDATE_CRDS").is_some() {
                std::fs::write(&path, &yaml).unwrap();
            }
            let checked_in = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(
                checked_in == yaml,
                "{} drifted from the Rust types: run `UPDATE_CRDS=1 cargo test --test crds`",
                path.display()
            );
        }
    }
}

/// `mutantops crd` prints the same CRDs as the files.
#[test]
fn the_binary_prints_the_crds() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_mutantops"))
        .arg("crd")
        .output()
        .unwrap();
    assert!(output.status.success());
    let printed = String::from_utf8(output.stdout).unwrap();
    assert_eq!(printed, mutantops::crd::crds_yaml().unwrap());
    assert!(printed.contains("name: mutations.neiam.org"));
    assert!(printed.contains("name: mutantdeployments.neiam.org"));
}

/// R2: the API server accepts the CRDs as structural schemas and serves both kinds.
#[tokio::test]
#[ignore = "needs a cluster: scripts/test runs them"]
async fn the_api_server_accepts_the_crds() {
    let client = common::client().await;
    common::install_crds(&client).await;
}
