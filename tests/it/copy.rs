//! `dsv copy`: versions between two remotes of any kinds (file://, moto's S3, azurite), with
//! no local copy of their data; only what the destination lacks moves, its refs move last,
//! and every byte streamed is checked.

use std::path::Path;

use serde_json::Value;

use crate::common::{TestEnv, assert_same_tree, kill_after, pseudo_random};
use crate::remote::{unique_prefix, use_azure, use_s3};

/// About 4.5 MB in three large random files and 40 small ones.
fn dataset(env: &TestEnv, dir: &str) {
    for i in 0..3u64 {
        env.write(
            &format!("{dir}/big{i}.bin"),
            pseudo_random(1_500_000, 41 + 2 * i),
        );
    }
    for i in 0..40u64 {
        env.write(
            &format!("{dir}/small/s{i}.txt"),
            format!("line {i}\n").repeat(30),
        );
    }
}

fn bytes_under(dir: &Path) -> u64 {
    walkdir(dir)
}

fn walkdir(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .map(|e| e.unwrap())
        .map(|e| {
            let meta = e.metadata().unwrap();
            if meta.is_dir() {
                walkdir(&e.path())
            } else {
                meta.len()
            }
        })
        .sum()
}

/// Clones `url` into a fresh store, checks `dataset` out and compares it with `expected`.
fn clone_and_compare(env: &TestEnv, url: &str, dataset: &str, expected: &Path) {
    let store = format!("clone-{}", unique_prefix());
    env.ok(&["clone", url, &store]);
    let out = env.path(&format!("{store}/out"));
    let mut cmd = env.dsv();
    cmd.current_dir(env.path(&store))
        .args(["checkout", dataset, out.to_str().unwrap()]);
    let status = cmd.output().unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    assert_same_tree(expected, &out);
}

fn statuses(report: &Value) -> Vec<String> {
    report["refs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{}{}:{}",
                r["dataset"].as_str().unwrap(),
                r["tag"]
                    .as_str()
                    .map(|t| format!("@{t}"))
                    .unwrap_or_default(),
                r["status"].as_str().unwrap()
            )
        })
        .collect()
}

#[test]
fn copies_between_every_kind_of_remote_without_a_local_copy_and_the_copy_checks_out() {
    let env = TestEnv::new();
    use_s3(&env);
    use_azure(&env);
    dataset(&env, "data");
    env.ok(&["commit", "data", "-d", "ds", "-t", "v1"]);
    env.write("data/more.txt", "v2\n");
    env.ok(&["commit", "data", "-d", "ds", "-t", "v2"]);
    let prefix = unique_prefix();
    let far = format!("s3://dsv-test/{prefix}/far");
    let near = format!("s3://dsv-test/{prefix}/near");
    let other_bucket = format!("s3://dsv-versioned/{prefix}");
    let azure = format!("az://dsv-test/{prefix}");
    let file = format!("file://{}", env.path("file-remote").display());
    for (name, url) in [
        ("far", &far),
        ("near", &near),
        ("other", &other_bucket),
        ("azure", &azure),
        ("file", &file),
    ] {
        env.ok(&["remote", "add", name, url]);
    }
    env.ok(&["push", "--remote", "far"]);
    // Only metadata lands here: the store's packs hold what it committed, no more.
    let local = bytes_under(&env.path(".dsv/packs"));

    // One bucket: the provider copies the packs itself.
    let same = env.json(&["copy", "ds", "--from", "far", "--to", "near"]);
    assert_eq!(
        statuses(&same),
        ["ds:created", "ds@v1:created", "ds@v2:created"],
        "{same}"
    );
    assert_eq!(same["planned"]["versions"], 2, "{same}");
    assert!(
        same["planned"]["whole_packs"].as_u64().unwrap() >= 1,
        "{same}"
    );
    assert_eq!(
        same["planned"]["server_side"], same["planned"]["whole_packs"],
        "{same}"
    );
    // Another bucket of the same S3 service: a CopyObject signed by dsv, still server-side.
    let across = env.json(&["copy", "ds", "--from", "near", "--to", "other"]);
    assert_eq!(
        across["planned"]["server_side"], across["planned"]["whole_packs"],
        "{across}"
    );
    // Another cloud, then a directory: streamed and checked in flight.
    let streamed = env.json(&["copy", "ds", "--from", "other", "--to", "azure"]);
    assert_eq!(streamed["planned"]["server_side"], 0, "{streamed}");
    assert!(
        streamed["transfer"]["bytes"].as_u64().unwrap() > 4_000_000,
        "{streamed}"
    );
    env.ok(&["copy", "ds@v1", "--from", "azure", "--to", "file"]);
    assert_eq!(bytes_under(&env.path(".dsv/packs")), local);

    let v1 = env.path("v1");
    std::fs::create_dir_all(&v1).unwrap();
    env.ok(&["checkout", "ds@v1", v1.to_str().unwrap()]);
    for url in [&near, &other_bucket, &azure] {
        clone_and_compare(&env, url, "ds", &env.path("data"));
    }
    // The directory got v1 alone: its head is v1, and v2's new file never went there.
    clone_and_compare(&env, &file, "ds", &v1);
}

#[test]
fn a_copy_the_destination_already_has_moves_nothing_in_at_most_three_requests() {
    let env = TestEnv::new();
    use_s3(&env);
    dataset(&env, "data");
    env.ok(&["commit", "data", "-d", "ds", "-t", "v1"]);
    let prefix = unique_prefix();
    env.ok(&["remote", "add", "a", &format!("s3://dsv-test/{prefix}/a")]);
    env.ok(&[
        "remote",
        "add",
        "b",
        &format!("s3://dsv-versioned/{prefix}/b"),
    ]);
    env.ok(&["push", "--remote", "a"]);
    env.ok(&["copy", "ds", "--from", "a", "--to", "b"]);
    let again = env.json(&["copy", "ds", "--from", "a", "--to", "b"]);
    assert_eq!(
        statuses(&again),
        ["ds:up-to-date", "ds@v1:up-to-date"],
        "{again}"
    );
    assert_eq!(again["transfer"]["bytes"], 0, "{again}");
    assert_eq!(again["planned"]["objects"], 0, "{again}");
    let requests = again["transfer"]["requests"].as_u64().unwrap()
        + again["source_requests"].as_u64().unwrap();
    assert!(requests <= 3, "{requests} requests: {again}");
    // A store that never saw either remote's refs reads each ref once more, no more.
    let fresh = TestEnv::bare();
    use_s3(&fresh);
    fresh.ok(&["init", "."]);
    fresh.ok(&["remote", "add", "a", &format!("s3://dsv-test/{prefix}/a")]);
    fresh.ok(&[
        "remote",
        "add",
        "b",
        &format!("s3://dsv-versioned/{prefix}/b"),
    ]);
    let cold = fresh.json(&["copy", "ds", "--from", "a", "--to", "b"]);
    assert_eq!(cold["transfer"]["bytes"], 0, "{cold}");
    let requests =
        cold["transfer"]["requests"].as_u64().unwrap() + cold["source_requests"].as_u64().unwrap();
    // Two LISTs, plus one GET per ref read (a head and a tag on each side).
    assert!(requests <= 3 + 4, "{requests} requests: {cold}");
}

#[test]
fn from_a_pack_partly_needed_only_the_needed_frames_travel() {
    let env = TestEnv::new();
    // Dataset `all` has 12 files of 1 MB (a frame each, or so); `one` holds 2 of them
    // (deduplicated into `all`'s packs), so copying `one` needs a small part of its packs.
    for i in 0..12u64 {
        env.write(
            &format!("data/f{i}.bin"),
            pseudo_random(1_000_000, 201 + 2 * i),
        );
    }
    env.ok(&["commit", "data", "-d", "all"]);
    for i in [3, 10] {
        env.write(
            &format!("one/f{i}.bin"),
            std::fs::read(env.path(&format!("data/f{i}.bin"))).unwrap(),
        );
    }
    env.ok(&["commit", "one", "-d", "one"]);
    for name in ["src", "dst"] {
        std::fs::create_dir_all(env.path(name)).unwrap();
        let url = format!("file://{}", env.path(name).display());
        env.ok(&["remote", "add", name, &url]);
    }
    env.ok(&["push", "--remote", "src"]);
    let copied = env.json(&["copy", "one", "--from", "src", "--to", "dst"]);
    assert!(
        copied["planned"]["partial_packs"].as_u64().unwrap() >= 1,
        "{copied}"
    );
    let bytes = copied["transfer"]["bytes"].as_u64().unwrap();
    assert!(
        (2_000_000..4_500_000).contains(&bytes),
        "two files of 1 MB (incompressible), the frames around them, metadata: {copied}"
    );
    let url = format!("file://{}", env.path("dst").display());
    clone_and_compare(&env, &url, "one", &env.path("one"));
    // And the rest of the pack comes when asked for: the whole of `all`.
    let rest = env.json(&["copy", "all", "--from", "src", "--to", "dst"]);
    assert_eq!(statuses(&rest), ["all:created"], "{rest}");
    clone_and_compare(&env, &url, "all", &env.path("data"));
}

#[test]
fn a_damaged_source_pack_is_refused_and_nothing_of_it_reaches_the_destination() {
    let env = TestEnv::new();
    dataset(&env, "data");
    env.ok(&["commit", "data", "-d", "ds"]);
    for name in ["src", "dst"] {
        std::fs::create_dir_all(env.path(name)).unwrap();
        let url = format!("file://{}", env.path(name).display());
        env.ok(&["remote", "add", name, &url]);
    }
    env.ok(&["push", "--remote", "src"]);
    // Fetch the metadata first, so the damage hits a data frame that only the copy reads.
    env.ok(&["fetch", "--remote", "src"]);
    let packs = env.path("src/packs");
    let mut largest = None;
    for entry in std::fs::read_dir(&packs).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "pack") {
            let len = std::fs::metadata(&path).unwrap().len();
            if largest.as_ref().is_none_or(|(l, _)| len > *l) {
                largest = Some((len, path));
            }
        }
    }
    let (_, pack) = largest.unwrap();
    let mut bytes = std::fs::read(&pack).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&pack, &bytes).unwrap();
    let error = env.json_error(&["copy", "ds", "--from", "src", "--to", "dst"], 5);
    assert_eq!(error["kind"], "corrupt", "{error}");
    let name = pack.file_name().unwrap();
    assert!(
        !env.path("dst/packs").join(name).exists(),
        "the damaged pack must not appear under its name on the destination"
    );
    assert!(!env.path("dst/refs").exists(), "no ref moved");
}

#[test]
fn a_copy_killed_part_way_leaves_no_ref_on_missing_data_and_a_rerun_finishes_it() {
    let env = TestEnv::new();
    use_s3(&env);
    for i in 0..8u64 {
        env.write(
            &format!("data/f{i}.bin"),
            pseudo_random(2_000_000, 91 + 2 * i),
        );
    }
    env.ok(&["commit", "data", "-d", "ds"]);
    let prefix = unique_prefix();
    // A directory as DST: every pack streams through this process (a server-side copy between
    // buckets could finish before the first kill).
    std::fs::create_dir_all(env.path("dst")).unwrap();
    let dst_url = format!("file://{}", env.path("dst").display());
    env.ok(&[
        "remote",
        "add",
        "src",
        &format!("s3://dsv-test/{prefix}/src"),
    ]);
    env.ok(&["remote", "add", "dst", &dst_url]);
    env.ok(&["push", "--remote", "src"]);
    env.ok(&["fetch", "--remote", "src"]);
    let mut killed = 0;
    for delay_ms in [40u64, 150, 300, 600] {
        if kill_after(
            &env,
            &["copy", "ds", "--from", "src", "--to", "dst", "--jobs", "2"],
            std::time::Duration::from_millis(delay_ms),
        ) {
            killed += 1;
        }
        // Whatever moved, DST never names a version whose data it lacks.
        let fresh = TestEnv::bare();
        use_s3(&fresh);
        fresh.ok(&["init", "."]);
        fresh.ok(&["remote", "add", "dst", &dst_url]);
        let fetched = fresh.json(&["fetch", "--remote", "dst"]);
        if !fetched["refs"].as_array().unwrap().is_empty() {
            let out = fresh.path("out");
            fresh.ok(&["checkout", "dst/ds", out.to_str().unwrap()]);
            assert_same_tree(&env.path("data"), &out);
        }
    }
    // At 40 ms the copy has not even listed both remotes: at least that run was cut.
    assert!(killed > 0, "no copy was killed part-way");
    let finished = env.json(&["copy", "ds", "--from", "src", "--to", "dst"]);
    if killed > 0 {
        // The re-run sent at most what was still missing.
        assert!(finished["transfer"]["bytes"].as_u64().unwrap() <= 16_200_000);
    }
    clone_and_compare(&env, &dst_url, "ds", &env.path("data"));
}

#[test]
fn a_destination_head_elsewhere_is_refused_unless_forced_and_one_ahead_is_kept() {
    let env = TestEnv::new();
    env.write("data/a.txt", "one\n");
    env.ok(&["commit", "data", "-d", "ds", "-t", "v1"]);
    env.write("data/a.txt", "two\n");
    env.ok(&["commit", "data", "-d", "ds", "-t", "v2"]);
    for name in ["src", "dst"] {
        std::fs::create_dir_all(env.path(name)).unwrap();
        let url = format!("file://{}", env.path(name).display());
        env.ok(&["remote", "add", name, &url]);
    }
    env.ok(&["push", "--remote", "src"]);
    env.ok(&["push", "--remote", "dst"]);
    // DST ahead: copying v1 keeps its head.
    let kept = env.json(&["copy", "ds@v1", "--from", "src", "--to", "dst"]);
    assert_eq!(statuses(&kept)[0], "ds:ahead", "{kept}");
    // DST diverged: a version of its own.
    let other = TestEnv::new();
    other.write("data/b.txt", "elsewhere\n");
    other.ok(&["commit", "data", "-d", "ds"]);
    let url = format!("file://{}", env.path("dst").display());
    other.ok(&["remote", "add", "dst", &url]);
    other.ok(&["push", "--remote", "dst", "--force"]);
    let error = env.json_error(&["copy", "ds", "--from", "src", "--to", "dst"], 4);
    assert_eq!(error["kind"], "conflict", "{error}");
    let forced = env.json(&["copy", "ds", "--from", "src", "--to", "dst", "--force"]);
    assert_eq!(statuses(&forced)[0], "ds:forced", "{forced}");
    // One remote on both sides is refused before anything is asked.
    env.fails(&["copy", "ds", "--from", "src", "--to", "src"], 3);
}

#[test]
fn a_store_that_never_saw_the_destination_places_its_head_in_history() {
    let env = TestEnv::new();
    env.write("data/a.txt", "one\n");
    env.ok(&["commit", "data", "-d", "ds"]);
    env.write("data/a.txt", "two\n");
    env.ok(&["commit", "data", "-d", "ds"]);
    for name in ["src", "dst"] {
        std::fs::create_dir_all(env.path(name)).unwrap();
        let url = format!("file://{}", env.path(name).display());
        env.ok(&["remote", "add", name, &url]);
    }
    // SRC holds the first version, DST the second (which descends from it).
    env.ok(&["push", "ds~1", "--remote", "src"]);
    env.ok(&["push", "--remote", "dst"]);
    // Another machine, which knows neither remote: DST's head is placed in history from DST's
    // own metadata, so it is kept as ahead, not refused as diverged.
    let other = TestEnv::new();
    for name in ["src", "dst"] {
        let url = format!("file://{}", env.path(name).display());
        other.ok(&["remote", "add", name, &url]);
    }
    let copied = other.json(&["copy", "ds", "--from", "src", "--to", "dst"]);
    assert_eq!(statuses(&copied), ["ds:ahead"], "{copied}");
}

/// The report says what proving the forwarded file maps read from SRC (`proof_bytes`):
/// from the store that holds the data and its proven maps, only the maps' frames; from a
/// fresh clone, which holds neither, the data of the multi-chunk file once (read ahead,
/// several ranged GETs at a time).
#[test]
fn copy_reports_the_bytes_read_to_prove_the_maps() {
    let env = TestEnv::new();
    let size = 8_000_000;
    env.write("data/big.bin", pseudo_random(size, 61));
    env.ok(&["commit", "data", "-d", "ds"]);
    let (src, near, nearer) = (env.path("src"), env.path("near"), env.path("nearer"));
    let url = |dir: &Path| format!("file://{}", dir.display());
    env.ok(&["remote", "add", "src", &url(&src)]);
    env.ok(&["remote", "add", "near", &url(&near)]);
    env.ok(&["push", "--remote", "src"]);
    let here = env.json(&["copy", "ds", "--from", "src", "--to", "near"]);
    let proof = here["proof_bytes"].as_u64().unwrap();
    assert!(proof > 0 && proof < 1024 * 1024, "{here}");

    let clone = TestEnv::bare();
    clone.ok(&["clone", &url(&src), "c"]);
    clone.ok(&["--store", "c", "remote", "add", "nearer", &url(&nearer)]);
    let fresh = clone.json(&[
        "--store", "c", "copy", "ds", "--from", "origin", "--to", "nearer",
    ]);
    let proof = fresh["proof_bytes"].as_u64().unwrap();
    assert!(proof >= size as u64, "{fresh}");
    assert!(proof < 2 * size as u64, "{fresh}");
}
