//! The main job on real data: several real historical versions of a public dataset
//! (FiveThirtyEight's data repository) committed, checked out and compared byte for byte.
//! Uses the sample shipped in `examples/`, and the full versions in `../shared/data` (or
//! `$DSV_DATA`) when present.

use std::path::{Path, PathBuf};

use crate::common::{TestEnv, assert_same_tree};

fn unpack(archive: &Path, into: &Path) -> PathBuf {
    std::fs::create_dir_all(into).unwrap();
    let status = std::process::Command::new("tar")
        .arg("xzf")
        .arg(archive)
        .arg("-C")
        .arg(into)
        .status()
        .unwrap();
    assert!(status.success(), "tar failed on {}", archive.display());
    let mut entries = std::fs::read_dir(into).unwrap();
    let top = entries.next().unwrap().unwrap().path();
    assert!(
        entries.next().is_none(),
        "each archive unpacks to one folder"
    );
    top
}

/// Commits each archive as a version, then checks each version out into one workspace in
/// turn (and into a fresh directory), comparing byte for byte.
fn versions_round_trip(archives: &[PathBuf]) {
    let env = TestEnv::new();
    let mut sources = Vec::new();
    for (i, archive) in archives.iter().enumerate() {
        let source = unpack(archive, &env.path(&format!("src{i}")));
        let report = env.json(&[
            "commit",
            source.to_str().unwrap(),
            "--dataset",
            "fte",
            "--tag",
            &format!("v{i}"),
        ]);
        assert_eq!(report["created"], true);
        sources.push(source);
    }
    for (i, source) in sources.iter().enumerate() {
        let switch = env.json(&["checkout", &format!("fte@v{i}"), "work"]);
        assert_same_tree(source, &env.path("work"));
        if i > 0 {
            // Switching versions writes only what differs.
            let written = switch["written"].as_u64().unwrap();
            assert!(
                written < switch["files"].as_u64().unwrap(),
                "switch to v{i} rewrote every file"
            );
        }
        env.ok(&["checkout", &format!("fte@v{i}"), &format!("fresh{i}")]);
        assert_same_tree(source, &env.path(&format!("fresh{i}")));
    }
    let verify = env.json(&["verify"]);
    assert_eq!(verify["problems"].as_array().unwrap().len(), 0);
    assert_eq!(verify["versions"], archives.len());
}

#[test]
fn shipped_sample_versions_round_trip() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    versions_round_trip(&[
        examples.join("fivethirtyeight-sample-2022-05-04.tar.gz"),
        examples.join("fivethirtyeight-sample-2024-10-28.tar.gz"),
    ]);
}

#[test]
fn four_real_versions_round_trip() {
    let data = std::env::var_os("DSV_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data"));
    let mut archives: Vec<PathBuf> = match std::fs::read_dir(&data) {
        Ok(entries) => entries
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .starts_with("fivethirtyeight-v")
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    let lack = archives.is_empty().then(|| {
        format!(
            "no fivethirtyeight-v*.tar.gz in {} (set DSV_DATA)",
            data.display()
        )
    });
    if crate::common::skip_for("data", lack) {
        return;
    }
    archives.sort();
    versions_round_trip(&archives);
}
