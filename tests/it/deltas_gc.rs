//! Cross-version deltas and cleanup (issue 39): `dsv gc` keeps the head of each dataset
//! whole and stores older versions as deltas against newer ones (reverse deltas), its
//! liveness follows delta closures (a base reachable only as a base stays), a kill -9 during
//! the rewrite loses nothing, and `cache prune` never frees a base a kept delta names.

use std::path::Path;
use std::time::Duration;

use crate::common::{TestEnv, assert_same_tree, chunk_depths_at, version_ids};

/// A day's rows of a growing CSV time series, as a public daily series is published: `files`
/// files of `entities` blocks each (one block per country), every block one row per day up
/// to `days`, and about 1% of the older rows revised in each version (a row's value changes
/// once, in the version its hash picks).
fn series(files: usize, entities: usize, days: usize, version: usize) -> Vec<(String, Vec<u8>)> {
    (0..files)
        .map(|file| {
            let mut out = b"entity,date,cases,deaths,rate\n".to_vec();
            for entity in 0..entities {
                for day in 0..days {
                    let h = mix(((file * 1_000 + entity) * 100_000 + day) as u64);
                    // Revised in version 1..=99 chosen by the hash (about 1% per version).
                    let revised_in = (h >> 40) % 100;
                    let revision = u64::from(revised_in != 0 && revised_in as usize <= version);
                    let cases = (h % 100_000) + revision * 17;
                    let deaths = (h >> 20) % 1_000;
                    let rate = ((h >> 30) % 100_000) as f64 / 97.0;
                    out.extend_from_slice(
                        format!(
                            "region{file}-{entity:03},2020-{:02}-{:02},{cases},{deaths},{rate:.3}\n",
                            1 + day / 28,
                            1 + day % 28
                        )
                        .as_bytes(),
                    );
                }
            }
            (format!("region{file}.csv"), out)
        })
        .collect()
}

fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Writes version `version` of the series into `env/dir` (replacing what was there) and
/// into `env/expected/v{version}` (kept, to compare checkouts with).
fn write_version(env: &TestEnv, dir: &str, shape: (usize, usize, usize), version: usize) {
    let (files, entities, days) = shape;
    let _ = std::fs::remove_dir_all(env.path(dir));
    for (name, bytes) in series(files, entities, days + version, version) {
        env.write(&format!("{dir}/{name}"), &bytes);
        env.write(&format!("expected/v{version}/{name}"), &bytes);
    }
}

/// Commits `versions` versions of the series to dataset `ds`, each from `data/`, which is
/// then deleted (no workspace holds a version); returns the version ids, oldest first.
fn commit_series(env: &TestEnv, shape: (usize, usize, usize), versions: usize) -> Vec<String> {
    for version in 0..versions {
        write_version(env, "data", shape, version);
        env.ok(&["commit", "data", "-d", "ds"]);
    }
    std::fs::remove_dir_all(env.path("data")).unwrap();
    let mut ids = version_ids(env, "ds");
    ids.reverse();
    ids
}

fn pack_bytes(env: &TestEnv) -> u64 {
    std::fs::read_dir(env.path(".dsv/packs"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

/// Frames the store's catalog records with bases (delta frames), and the deepest chain.
fn delta_frames(env: &TestEnv) -> u64 {
    let catalog = rusqlite::Connection::open(env.path(".dsv/catalog.db")).unwrap();
    catalog
        .query_row(
            "SELECT count(*) FROM frames WHERE bases IS NOT NULL",
            [],
            |row| row.get::<_, i64>(0),
        )
        .unwrap() as u64
}

/// Checks out `ids[i]` for each listed version and compares it with `expected/v{i}`.
fn assert_versions_whole(env: &TestEnv, ids: &[String], which: &[usize]) {
    for &i in which {
        let out = env.path(&format!("out-{i}"));
        let _ = std::fs::remove_dir_all(&out);
        env.ok(&[
            "checkout",
            &format!("ds@{}", &ids[i][..16]),
            out.to_str().unwrap(),
        ]);
        assert_same_tree(&env.path(&format!("expected/v{i}")), &out);
        std::fs::remove_dir_all(&out).unwrap();
        // The checkout recorded the directory; it is gone, so nothing holds the version.
    }
}

fn assert_consistent(env: &TestEnv) {
    let report = env.json(&["verify", "--full"]);
    assert_eq!(
        report["problems"].as_array().unwrap().len(),
        0,
        "{report:#}"
    );
}

const SMALL: (usize, usize, usize) = (3, 40, 100);

#[test]
fn gc_stores_older_versions_as_deltas_against_newer_ones_and_every_version_reads_back() {
    let env = TestEnv::new();
    let ids = commit_series(&env, SMALL, 6);
    let before = pack_bytes(&env);
    let one_version: u64 = std::fs::read_dir(env.path("expected/v5"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();

    let planned = env.json(&["gc", "--dry-run", "--grace", "0s"]);
    assert!(planned["dry_run"].as_bool().unwrap());
    assert_eq!(pack_bytes(&env), before, "a dry run writes nothing");
    let done = env.json(&["gc", "--grace", "0s"]);
    // The dry run states what the run does.
    for key in [
        "bytes_freed",
        "packs_written",
        "pack_files_deleted",
        "deltas",
    ] {
        assert_eq!(planned[key], done[key], "{key}: {planned:#} vs {done:#}");
    }
    let after = pack_bytes(&env);
    assert!(
        done["deltas"]["rewritten_as_deltas"].as_u64().unwrap() > 0,
        "{done:#}"
    );
    assert!(delta_frames(&env) > 0);
    // Five older versions cost far less than a version each: the deltas of all five take
    // under a twentieth of one version's raw bytes, and the whole store less than a third of
    // them (the head, whole, compresses to about a quarter).
    let deltas = done["deltas"]["delta_stored_bytes"].as_u64().unwrap();
    assert!(
        deltas * 20 < one_version && after < before && after * 3 < one_version,
        "store {before} -> {after} bytes, one version {one_version} raw: {done:#}"
    );
    assert_consistent(&env);
    assert_versions_whole(&env, &ids, &[0, 1, 2, 3, 4, 5]);
    // Carried out, the plan leaves nothing to do: a second gc rewrites nothing.
    let again = env.json(&["gc", "--grace", "0s"]);
    assert_eq!(again["packs_written"], 0, "{again:#}");
    assert_eq!(again["bytes_freed"], 0, "{again:#}");
    assert_eq!(again["deltas"]["rewritten_as_deltas"], 0, "{again:#}");
    assert_eq!(again["deltas"]["rewritten_whole"], 0, "{again:#}");

    // A new head: the old head becomes a delta against it, the new head stays whole.
    write_version(&env, "data", SMALL, 6);
    env.ok(&["commit", "data", "-d", "ds"]);
    std::fs::remove_dir_all(env.path("data")).unwrap();
    let mut ids = version_ids(&env, "ds");
    ids.reverse();
    let grown = env.json(&["gc", "--grace", "0s"]);
    assert!(
        grown["deltas"]["rewritten_as_deltas"].as_u64().unwrap() > 0,
        "{grown:#}"
    );
    assert!(
        pack_bytes(&env) < after + one_version / 10,
        "a new version costs its change, {after} -> {}",
        pack_bytes(&env)
    );
    assert_consistent(&env);
    assert_versions_whole(&env, &ids, &[0, 3, 5, 6]);
}

#[test]
fn rm_of_a_version_whose_chunks_are_bases_then_gc_keeps_every_other_version_whole() {
    // A -> B -> C, gc: C whole, B a delta against C, A a delta against B. `rm B` leaves B's
    // chunks reachable only as bases of A's deltas: gc must not free them before A is
    // stored without them.
    let env = TestEnv::new();
    let ids = commit_series(&env, SMALL, 3);
    env.ok(&["gc", "--grace", "0s"]);
    assert!(delta_frames(&env) > 0);
    env.ok(&["rm", &format!("ds@{}", &ids[1][..16])]);
    let done = env.json(&["gc", "--grace", "0s"]);
    // A is stored anew against C; B's chunks go.
    assert!(
        done["deltas"]["rewritten_as_deltas"].as_u64().unwrap() > 0,
        "{done:#}"
    );
    assert_consistent(&env);
    assert_versions_whole(&env, &ids, &[0, 2]);
    let again = env.json(&["gc", "--grace", "0s"]);
    assert_eq!(again["packs_written"], 0, "{again:#}");
}

#[test]
fn rm_of_the_version_a_commit_based_its_deltas_on_then_gc_keeps_the_head_whole() {
    // The case: A committed, B committed (as forward deltas against A's chunks
    // when commit makes deltas), `rm A`, gc: B still reads back byte for byte.
    let env = TestEnv::new();
    let ids = commit_series(&env, SMALL, 2);
    env.ok(&["rm", &format!("ds@{}", &ids[0][..16])]);
    env.ok(&["gc", "--grace", "0s"]);
    assert_consistent(&env);
    assert_versions_whole(&env, &ids, &[1]);
    // Nothing of A is left: the head alone, whole.
    assert_eq!(delta_frames(&env), 0);
}

/// A table (one file of the series) and a second file of the same rows less their last
/// column, as a table and its aggregate are published side by side.
fn table_and_aggregate() -> (Vec<u8>, Vec<u8>) {
    let (_, detail) = series(1, 60, 200, 0).remove(0);
    let totals: Vec<u8> = String::from_utf8(detail.clone())
        .unwrap()
        .lines()
        .map(|line| format!("{}\n", &line[..line.rfind(',').unwrap()]))
        .collect::<String>()
        .into_bytes();
    (detail, totals)
}

#[test]
fn gc_stores_a_head_file_that_aggregates_another_as_deltas_against_it_and_both_read_back() {
    // One version (no parent, so no same-path delta anywhere): `detail.csv` and
    // `totals.csv`, the same rows less one column, as a table and its aggregate are
    // published side by side. `gc --aggressive` finds the chunks of the larger that hold the
    // smaller's content and stores the smaller's chunks as deltas against them, one level
    // deep; a plain gc leaves chunks stored whole as they are (it compares only what it
    // stores anew).
    let env = TestEnv::new();
    let (detail, totals) = table_and_aggregate();
    for dir in ["data", "expected/v0"] {
        env.write(&format!("{dir}/detail.csv"), &detail);
        env.write(&format!("{dir}/totals.csv"), &totals);
    }
    env.ok(&["commit", "data", "-d", "ds"]);
    std::fs::remove_dir_all(env.path("data")).unwrap();
    let ids = version_ids(&env, "ds");
    let before = pack_bytes(&env);
    let plain = env.json(&["gc", "--grace", "0s"]);
    assert_eq!(plain["packs_written"], 0, "{plain:#}");
    assert_eq!(pack_bytes(&env), before);
    let done = env.json(&["gc", "--grace", "0s", "--aggressive"]);
    let rewritten = done["deltas"]["rewritten_as_deltas"].as_u64().unwrap();
    assert!(rewritten > 0, "{done:#}");
    let after = pack_bytes(&env);
    // The aggregate's chunks cost less than half of what they cost alone (a store holding
    // totals.csv only is the measure of that), and the store shrinks although the commit's
    // frames already held both files side by side (zstd saw one beside the other).
    let alone = TestEnv::new();
    alone.write("data/totals.csv", &totals);
    alone.ok(&["commit", "data", "-d", "ds"]);
    let totals_alone = pack_bytes(&alone);
    let deltas = done["deltas"]["delta_stored_bytes"].as_u64().unwrap();
    assert!(
        deltas * 2 < totals_alone && after + deltas * 2 / 3 < before,
        "store {before} -> {after} bytes, totals.csv alone {totals_alone}: {done:#}"
    );
    assert_consistent(&env);
    // A head is at most one level deep: its deltas' bases are stored whole.
    let depths = chunk_depths_at(&env.path(".dsv/catalog.db"));
    assert_eq!(depths.values().max(), Some(&1), "{depths:?}");
    assert_versions_whole(&env, &ids, &[0]);
    for args in [
        &["gc", "--grace", "0s"][..],
        &["gc", "--grace", "0s", "--aggressive"],
    ] {
        let again = env.json(args);
        assert_eq!(again["packs_written"], 0, "{again:#}");
        assert_eq!(again["deltas"]["rewritten_as_deltas"], 0, "{again:#}");
    }

    // A new version without detail.csv: its chunks are then only in the older version, so
    // a plain gc stores the head's totals.csv whole again (its bases are no longer the
    // head's). Both versions read back.
    env.write("data/totals.csv", &totals);
    env.write("expected/v1/totals.csv", &totals);
    env.ok(&["commit", "data", "-d", "ds"]);
    std::fs::remove_dir_all(env.path("data")).unwrap();
    let mut ids = version_ids(&env, "ds");
    ids.reverse();
    let moved = env.json(&["gc", "--grace", "0s"]);
    assert!(
        moved["deltas"]["rewritten_whole"].as_u64().unwrap() > 0,
        "{moved:#}"
    );
    assert_consistent(&env);
    assert_versions_whole(&env, &ids, &[0, 1]);
    let again = env.json(&["gc", "--grace", "0s"]);
    assert_eq!(again["packs_written"], 0, "{again:#}");
}

/// (stored, raw) lengths of every plain compressed frame the catalog records, with its pack.
fn zstd_frames(env: &TestEnv) -> Vec<(i64, i64, Vec<u8>)> {
    let catalog = rusqlite::Connection::open(env.path(".dsv/catalog.db")).unwrap();
    let mut query = catalog
        .prepare(
            "SELECT f.stored_length, f.raw_length, p.pack_id FROM frames f
             JOIN packs p ON p.id = f.pack WHERE f.compression = 1 ORDER BY f.raw_length",
        )
        .unwrap();
    query
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[test]
fn a_repack_copies_a_frame_whose_every_object_it_keeps_byte_for_byte() {
    // v1: an unchanging file (its frames at level 19) and a growing one, committed by one
    // reader so each file fills frames of its own; v2: the growing file grows. gc stores
    // v1's copy of the growing file as deltas, so v1's pack is repacked: the unchanging
    // file's full frames are copied as they are, still at level 19, not compressed again.
    let env = TestEnv::new();
    let (_, fixed) = series(1, 150, 300, 0).remove(0);
    let write = |version: usize| {
        let (_, growing) = series(1, 100, 300 + version, version).remove(0);
        env.write("data/fixed.csv", &fixed);
        env.write("data/growing.csv", &growing);
        env.write(&format!("expected/v{version}/fixed.csv"), &fixed);
        env.write(&format!("expected/v{version}/growing.csv"), &growing);
    };
    write(0);
    env.ok(&[
        "commit",
        "data",
        "-d",
        "ds",
        "-j",
        "1",
        "--compression-level",
        "19",
    ]);
    let (first_pack, before) = {
        let frames = zstd_frames(&env);
        (frames[0].2.clone(), frames)
    };
    write(1);
    env.ok(&["commit", "data", "-d", "ds", "-j", "1"]);
    std::fs::remove_dir_all(env.path("data")).unwrap();
    let done = env.json(&["gc", "--grace", "0s"]);
    assert!(
        done["deltas"]["rewritten_as_deltas"].as_u64().unwrap() > 0,
        "{done:#}"
    );
    let after = zstd_frames(&env);
    assert!(
        after.iter().all(|(_, _, pack)| *pack != first_pack),
        "v1's pack was repacked"
    );
    // A frame of a MiB or more of fixed.csv, the same bytes before and after.
    let big: Vec<&(i64, i64, Vec<u8>)> = before.iter().filter(|f| f.1 >= 1 << 20).collect();
    assert!(!big.is_empty(), "{before:?}");
    let kept = big
        .iter()
        .filter(|(stored, raw, _)| after.iter().any(|f| f.0 == *stored && f.1 == *raw))
        .count();
    assert!(kept >= 1, "before {before:?}\nafter {after:?}");
    assert_consistent(&env);
    let mut ids = version_ids(&env, "ds");
    ids.reverse();
    assert_versions_whole(&env, &ids, &[0, 1]);
}

/// One file of ~14 KB (a single chunk): 700 seeded rows, `tag` "A" as they are, any other
/// tag with 3 rows changed (which ones and how by the tag).
fn one_chunk_file(tag: &str) -> Vec<u8> {
    let mut rows: Vec<String> = (0..700u64)
        .map(|i| {
            format!(
                "{},{}",
                mix(i) % 1_000_000_000,
                mix(i + 10_000) % 1_000_000_000
            )
        })
        .collect();
    if tag != "A" {
        let seed = tag.bytes().fold(7u64, |h, b| mix(h ^ u64::from(b)));
        for k in 0..3u64 {
            let row = (mix(seed + k) % 700) as usize;
            rows[row] = format!("{},{tag}", mix(seed + k + 100) % 1_000_000_000);
        }
    }
    (rows.join("\n") + "\n").into_bytes()
}

#[test]
fn versions_left_off_the_heads_line_keep_their_chains_within_the_format_through_later_gcs() {
    // A, v1..v9, A again; gc chains v9..v1 under the head. `reset` to the first A and
    // eight commits on top; gc. `rm` the first A, nine more commits; gc. The v1..v9 line is
    // off the head's line of parents, so no pass meets it; gc must not re-encode the bases
    // under its chains (they would grow past the 16 levels readers follow), and every one
    // of its versions still reads back.
    let env = TestEnv::new();
    let commit = |tag: &str| -> String {
        env.write("dat/f.csv", one_chunk_file(tag));
        let report = env.json(&["commit", "dat", "-d", "a"]);
        std::fs::remove_dir_all(env.path("dat")).unwrap();
        report["version"].as_str().unwrap().to_string()
    };
    let first = commit("A");
    let line: Vec<(String, String)> = (1..=9)
        .map(|i| {
            let tag = format!("v{i}");
            (commit(&tag), tag)
        })
        .collect();
    commit("A");
    env.ok(&["gc", "--grace", "0s"]);
    env.ok(&["reset", "a", &first[..16]]);
    for i in 1..=8 {
        commit(&format!("w{i}"));
    }
    env.ok(&["gc", "--grace", "0s"]);
    env.ok(&["rm", &format!("a@{}", &first[..16])]);
    for i in 9..=17 {
        commit(&format!("w{i}"));
    }
    env.ok(&["gc", "--grace", "0s"]);
    for (id, tag) in &line {
        let out = env.path(&format!("out-{tag}"));
        env.ok(&[
            "checkout",
            &format!("a@{}", &id[..16]),
            out.to_str().unwrap(),
        ]);
        assert!(
            std::fs::read(out.join("f.csv")).unwrap() == one_chunk_file(tag),
            "{tag}"
        );
        std::fs::remove_dir_all(&out).unwrap();
    }
    // Every chain within the format's 16 levels (this panics past them).
    chunk_depths_at(&env.path(".dsv/catalog.db"));
    assert_consistent(&env);
}

#[test]
fn deltas_stay_within_a_dataset_so_a_push_of_one_carries_nothing_of_another() {
    // Dataset a holds detail.csv, dataset b totals.csv (the same rows less a column): gc
    // (even --aggressive) stores neither against the other, so a push of b alone leaves no
    // version, tree or chunk of a on the remote.
    let env = TestEnv::new();
    let (detail, totals) = table_and_aggregate();
    env.write("da/detail.csv", &detail);
    let a = env.json(&["commit", "da", "-d", "a"])["version"]
        .as_str()
        .unwrap()
        .to_string();
    env.write("db/totals.csv", &totals);
    env.ok(&["commit", "db", "-d", "b"]);
    let done = env.json(&["gc", "--grace", "0s", "--aggressive"]);
    assert_eq!(done["deltas"]["rewritten_as_deltas"], 0, "{done:#}");
    let remote = env.path("remote");
    env.ok(&[
        "remote",
        "add",
        "origin",
        &format!("file://{}", remote.display()),
    ]);
    env.ok(&["push", "b"]);
    let clone = TestEnv::new();
    let dir = clone.path("c");
    clone.ok(&[
        "clone",
        &format!("file://{}", remote.display()),
        dir.to_str().unwrap(),
    ]);
    let known = clone.run(&["--store", dir.to_str().unwrap(), "show", &a[..16]]);
    assert!(!known.status.success(), "the clone knows a's version");
    let ours = clone.run(&["--store", dir.to_str().unwrap(), "ls", "b"]);
    assert!(ours.status.success(), "{ours:?}");
    assert_consistent(&env);
}

/// A reader's lease on version `id` (the library's read engine opens it; the lease holds
/// while the handle lives), as a mount or a training job holds one.
fn lease(env: &TestEnv, id: &str) -> (dsv::read::ReadEngine, dsv::read::VersionHandle) {
    let engine =
        dsv::read::ReadEngine::open(&env.path(".dsv"), dsv::read::ReadOptions::default()).unwrap();
    let version = engine.version(&format!("ds@{}", &id[..16])).unwrap();
    (engine, version)
}

#[test]
fn a_leased_delta_keeps_its_bases_although_no_live_version_holds_them() {
    // A -> B, gc: A is stored as deltas against B's chunks. A reader leases A (its packs
    // stay where they are, its chunks as they are); a new head C replaces every file; B is
    // removed. B's chunks are then reachable only as bases of A's deltas: gc keeps them.
    // (Without the closure rule, they would be freed and A would not read back.)
    let env = TestEnv::new();
    let shape = (2, 30, 100);
    let ids = commit_series(&env, shape, 2);
    env.ok(&["gc", "--grace", "0s"]);
    assert!(delta_frames(&env) > 0);
    let reader = lease(&env, &ids[0]);
    let other = series(2, 30, 100, 0)
        .into_iter()
        .map(|(name, bytes)| (name, bytes.iter().map(|b| b.to_ascii_uppercase()).collect()))
        .collect::<Vec<(String, Vec<u8>)>>();
    for (name, bytes) in &other {
        env.write(&format!("data/{name}"), bytes);
    }
    env.ok(&["commit", "data", "-d", "ds"]);
    std::fs::remove_dir_all(env.path("data")).unwrap();
    env.ok(&["rm", &format!("ds@{}", &ids[1][..16])]);
    let done = env.json(&["gc", "--grace", "0s"]);
    assert_eq!(
        done["leased_versions"].as_array().unwrap().len(),
        1,
        "{done:#}"
    );
    drop(reader);
    assert_consistent(&env);
    assert_versions_whole(&env, &ids, &[0]);
    // The reader gone, the next gc stores A without B's chunks and frees them.
    let freed = env.json(&["gc", "--grace", "0s"]);
    assert!(freed["bytes_freed"].as_i64().unwrap() > 0, "{freed:#}");
    assert_consistent(&env);
    assert_versions_whole(&env, &ids, &[0]);
}

#[test]
fn kill_9_during_a_gc_rewrite_leaves_every_version_whole_and_the_next_gc_finishes() {
    let env = TestEnv::new();
    let shape = (4, 60, 120);
    let ids = commit_series(&env, shape, 5);
    let all: Vec<usize> = (0..ids.len()).collect();
    let packs = env.path(".dsv/packs");
    let temp = env.path(".dsv/tmp");
    let names = |dir: &Path| -> std::collections::BTreeSet<String> {
        std::fs::read_dir(dir)
            .map(|d| {
                d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut landed = 0;
    // Kill once a new pack is being written (a file in tmp/), then once a new pack is sealed
    // into packs/ (before or during the catalog swap).
    for watch in [&temp, &packs] {
        let before = names(watch);
        let mut child = env.spawn(&["gc", "--grace", "0s"]);
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        loop {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            if names(watch).difference(&before).next().is_some() {
                child.kill().unwrap(); // SIGKILL
                landed += 1;
                break;
            }
            assert!(std::time::Instant::now() < deadline, "gc did not finish");
            std::thread::sleep(Duration::from_millis(1));
        }
        child.wait().unwrap();
        assert_versions_whole(&env, &ids, &all);
        let report = env.json(&["verify"]);
        assert_eq!(
            report["problems"].as_array().unwrap().len(),
            0,
            "{report:#}"
        );
    }
    assert!(landed >= 1, "no kill landed while gc rewrote");
    let finished = env.json(&["gc", "--grace", "0s"]);
    assert_eq!(finished["dry_run"], false);
    assert!(delta_frames(&env) > 0, "{finished:#}");
    assert_consistent(&env);
    let report = env.json(&["verify"]);
    assert_eq!(
        report["unreferenced_packs"].as_array().unwrap().len(),
        0,
        "the rerun removed what the kills left: {report:#}"
    );
    assert_versions_whole(&env, &ids, &all);
}

#[test]
fn cache_prune_evicts_a_version_whose_chunks_are_bases_and_the_kept_versions_read_back() {
    // A -> B -> C pushed, gc: B a delta against C, A against B. A stays in use (a directory
    // holds it); prune evicts B (a remote holds it and its bases). B's chunks are bases of
    // A's deltas: A reads back whole after the prune's gc, and so does B (fetched back).
    let env = TestEnv::new();
    let ids = commit_series(&env, SMALL, 3);
    env.ok(&["gc", "--grace", "0s"]);
    let remote = env.path("remote");
    std::fs::create_dir_all(&remote).unwrap();
    env.ok(&[
        "remote",
        "add",
        "origin",
        &format!("file://{}", remote.display()),
    ]);
    env.ok(&["push", "ds"]);
    env.ok(&["checkout", &format!("ds@{}", &ids[0][..16]), "held-a"]);
    assert_same_tree(&env.path("expected/v0"), &env.path("held-a"));
    let pruned = env.json(&["cache", "prune", "--keep-last", "1"]);
    let evicted: Vec<&str> = pruned["actions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["action"] == "evicted")
        .map(|a| a["version"].as_str().unwrap())
        .collect();
    assert_eq!(evicted, [ids[1].as_str()], "{pruned:#}");
    assert_consistent(&env);
    std::fs::remove_dir_all(env.path("held-a")).unwrap();
    assert_versions_whole(&env, &ids, &[0, 2]);
    // B, evicted, is fetched back with its closure.
    assert_versions_whole(&env, &ids, &[1]);
}

/// A dead delta whose row stays (its pack is mostly live, so gc keeps the pack whole) keeps
/// its bases: a later commit of the same bytes finds the chunk held and stores nothing, so
/// the row must still decode. Without the rule the bases' pack went (no live chunk in it)
/// and the new version could not be read.
#[test]
fn a_dead_delta_in_a_kept_pack_keeps_its_bases_for_a_later_commit_of_the_same_bytes() {
    let env = TestEnv::new();
    let table = |version: usize| series(1, 40, 100 + version, version).remove(0).1;
    let noise: Vec<u8> = (0..(1u64 << 18))
        .flat_map(|i| mix(i).to_le_bytes())
        .collect();
    env.write("data/t.csv", table(0));
    env.ok(&["commit", "data", "-d", "ds"]);
    env.write("data/t.csv", table(1));
    env.write("data/big.bin", &noise);
    let report = env.json(&["commit", "data", "-d", "ds"]);
    assert!(
        report["delta_chunks"].as_u64().unwrap() > 0,
        "the grown table is stored as deltas: {report}"
    );
    std::fs::remove_file(env.path("data/t.csv")).unwrap();
    env.ok(&["commit", "data", "-d", "ds"]);
    let ids = version_ids(&env, "ds");
    env.ok(&["rm", &format!("ds@{}", &ids[1][..16])]);
    env.ok(&["rm", &format!("ds@{}", &ids[2][..16])]);
    env.ok(&["gc", "--grace", "0s"]);
    env.write("data/t.csv", table(1));
    env.ok(&["commit", "data", "-d", "ds"]);
    let out = env.path("out");
    env.ok(&["checkout", "ds", out.to_str().unwrap()]);
    assert!(std::fs::read(out.join("t.csv")).unwrap() == table(1));
    assert_consistent(&env);
}
