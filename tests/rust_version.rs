//! The workspace's declared `rust-version` is the oldest toolchain the
//! locked dependencies build with: the highest `rust-version` among them,
//! or the first release of a dependency's edition where that is higher.
//! (routerd's own code is held to it by clippy's `incompatible_msrv` lint,
//! which reads the same field.)

use std::path::Path;
use std::process::Command;

/// `1.89` or `1.89.0` as comparable numbers.
fn version(text: &str) -> Vec<u32> {
    let mut parts: Vec<u32> = text
        .split('.')
        .map(|part| part.parse().unwrap_or_else(|_| panic!("version {text}")))
        .collect();
    parts.resize(3, 0);
    parts
}

/// The first release that builds an edition.
fn edition_release(edition: &str) -> &'static str {
    match edition {
        "2015" => "1.0",
        "2018" => "1.31",
        "2021" => "1.56",
        "2024" => "1.85",
        other => panic!("unknown edition {other}"),
    }
}

/// The triple of the toolchain that builds the tests (`rustc -vV`).
fn host_triple() -> String {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let output = Command::new(rustc)
        .arg("-vV")
        .output()
        .expect("rustc -vV runs");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|line| line.strip_prefix("host: "))
        .expect("rustc -vV names the host")
        .to_string()
}

#[test]
fn declared_rust_version_is_what_the_lockfile_needs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest: toml::Table = std::fs::read_to_string(root.join("Cargo.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let declared = manifest["workspace"]["package"]["rust-version"]
        .as_str()
        .expect("workspace.package.rust-version");

    // The host's dependencies only: routerd builds for Linux alone, and a
    // fresh machine has downloaded nothing else (other platforms' crates
    // would make an offline `cargo metadata` fail).
    let host = host_triple();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let output = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked", "--offline"])
        .args(["--filter-platform", &host])
        .current_dir(root)
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let members: Vec<&str> = metadata["workspace_members"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|id| id.as_str())
        .collect();
    let (needed, by) = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|package| !members.contains(&package["id"].as_str().unwrap_or_default()))
        .map(|package| {
            let edition = version(edition_release(package["edition"].as_str().unwrap()));
            let declared = package["rust_version"].as_str().map(version);
            let needed = declared.map_or(edition.clone(), |declared| declared.max(edition));
            (
                needed,
                package["name"].as_str().unwrap_or_default().to_string(),
            )
        })
        .max()
        .expect("dependencies");
    assert_eq!(
        version(declared),
        needed,
        "Cargo.toml declares rust-version {declared}, the locked dependencies need {needed:?} \
         ({by})"
    );
}
