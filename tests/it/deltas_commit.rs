//! Forward deltas at commit (issue 39): a new chunk of a file whose path the parent version
//! held is stored compressed against the parent's chunks at about the same offset, when that
//! saves at least half, in chains at most 4 deep; data that shares nothing is stored as
//! before. Every test runs the real binary and reads the catalog with SQLite.

use std::collections::HashMap;
use std::path::Path;

use crate::common::{TestEnv, chunk_depths_at, push_to_file_remote};

/// The deepest chain commit makes (`COMMIT_DELTA_DEPTH`).
const COMMIT_DELTA_DEPTH: usize = 4;

/// A small deterministic number generator (splitmix64).
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Version `version` (0-based) of a daily time series CSV of 120 "countries": each
/// country's block holds its rows in date order, and every version appends about 1% more
/// rows to every block (the case the issue describes: no chunk survives from one version
/// to the next). A row's text depends only on its country and its day, so the rows of a
/// version are the rows of the one before plus new ones. About 2 MB a version.
fn growing_csv(version: u64) -> Vec<u8> {
    let mut out = String::from("country,date,cases,deaths,tests,rate\n");
    for country in 0..120u64 {
        let base = 300 + mix(country) % 200;
        let rows = base + base * version / 100 + version;
        for day in 0..rows {
            let r = mix(country << 32 | day);
            let cases = 1000 + day * 13 + r % 500;
            let deaths = cases / 50 + (r >> 20) % 7;
            let tests = cases * 4 + (r >> 32) % 1000;
            out.push_str(&format!(
                "C{country:03},{}-{:02}-{:02},{cases},{deaths},{tests},{}.{:03}\n",
                2020 + day / 360,
                day / 30 % 12 + 1,
                day % 30 + 1,
                deaths * 100 / cases.max(1),
                r % 1000,
            ));
        }
    }
    out.into_bytes()
}

/// `length` bytes no compressor shrinks (as a PNG's), from `seed`.
fn incompressible(length: usize, seed: u64) -> Vec<u8> {
    let mut bytes = vec![0; length];
    blake3::Hasher::new()
        .update(&seed.to_le_bytes())
        .finalize_xof()
        .fill(&mut bytes);
    bytes
}

/// Total bytes of the store's pack files.
fn packs_size(env: &TestEnv) -> u64 {
    std::fs::read_dir(env.path(".dsv/packs"))
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".pack"))
        .map(|e| e.metadata().unwrap().len())
        .sum()
}

/// Each local chunk's chain depth (0 for a chunk in a plain frame), read from the catalog:
/// `frames.bases` holds a delta frame's base ids, 32 bytes each.
fn chunk_depths(env: &TestEnv) -> HashMap<Vec<u8>, usize> {
    chunk_depths_at(&env.path(".dsv/catalog.db"))
}

/// The chunks whose closure (the chunk and every base it needs, recursively, each once)
/// stores more than twice the chunk's length, as `id: stored / length` lines. A chunk's
/// stored bytes are its frame's, shared among the frame's objects by raw length.
fn closures_over_twice(env: &TestEnv) -> Vec<String> {
    let db = rusqlite::Connection::open(env.path(".dsv/catalog.db")).unwrap();
    let mut statement = db
        .prepare(
            "SELECT o.id, o.length, f.stored_length, f.raw_length, f.bases
             FROM objects o JOIN frames f ON f.id = o.frame WHERE o.kind = 1",
        )
        .unwrap();
    type Row = (u64, u64, Vec<Vec<u8>>);
    let chunks: HashMap<Vec<u8>, Row> = statement
        .query_map([], |row| {
            let number = |column: usize| row.get::<_, i64>(column).map(|n| n as u64);
            let (length, stored, raw) = (number(1)?, number(2)?, number(3)?);
            let bases: Option<Vec<u8>> = row.get(4)?;
            let bases = bases
                .unwrap_or_default()
                .chunks(32)
                .map(<[u8]>::to_vec)
                .collect();
            Ok((row.get(0)?, (length, stored * length / raw.max(1), bases)))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut over = Vec::new();
    for (id, (length, _, _)) in &chunks {
        let mut closure = std::collections::HashSet::new();
        let mut next = vec![id.clone()];
        while let Some(chunk) = next.pop() {
            if closure.insert(chunk.clone()) {
                next.extend(chunks[&chunk].2.iter().cloned());
            }
        }
        let stored: u64 = closure.iter().map(|c| chunks[c].1).sum();
        if stored > 2 * length {
            over.push(format!("{id:02x?}: {stored} / {length}"));
        }
    }
    over
}

/// Commits `bytes` as `ws/series.csv` to dataset `d` with `extra` flags; the JSON report.
fn commit_csv(env: &TestEnv, bytes: &[u8], extra: &[&str]) -> serde_json::Value {
    env.write("ws/series.csv", bytes);
    let mut args = vec!["commit", "ws", "-d", "d"];
    args.extend_from_slice(extra);
    env.json(&args)
}

/// Ten versions of a CSV that grows by 1% in every block: with forward deltas the store
/// holds far less than ten copies (without them, each version costs whole: every chunk
/// changed); every version checks out byte-identical; no chain is deeper than 4.
#[test]
fn ten_growing_csv_versions_cost_far_less_than_ten_copies() {
    let env = TestEnv::new();
    let mut versions = Vec::new();
    let mut first_stored = 0;
    for v in 0..10 {
        let report = commit_csv(&env, &growing_csv(v), &[]);
        assert_eq!(report["created"], true);
        if v == 0 {
            first_stored = report["stored_bytes"].as_u64().unwrap();
            assert_eq!(report["delta_chunks"], 0, "a first version has no parent");
        } else if v == 1 {
            // Every chunk of the second version is new, and nearly all go as deltas.
            let new_chunks = report["new_chunks"].as_u64().unwrap();
            let deltas = report["delta_chunks"].as_u64().unwrap();
            assert!(
                deltas * 10 >= new_chunks * 8,
                "{deltas} deltas of {new_chunks} new chunks: {report:#}"
            );
            assert!(report["delta_bytes_saved"].as_u64().unwrap() > first_stored / 2);
            assert!(
                report["stored_bytes"].as_u64().unwrap() * 5 < first_stored,
                "{report:#}"
            );
        }
        versions.push(report["version"].as_str().unwrap().to_string());
    }
    let stored = packs_size(&env);
    // Without deltas: about 10.5 copies of the first version. With chains of at most 4
    // deltas: two whole versions and eight small ones.
    assert!(
        stored < first_stored * 3,
        "the store holds {stored} bytes after 10 versions; one version alone is {first_stored}"
    );
    let depths = chunk_depths(&env);
    let deepest = depths.values().copied().max().unwrap();
    assert_eq!(deepest, COMMIT_DELTA_DEPTH, "{depths:?}");
    // Reading any chunk decodes at most twice its length of stored bytes.
    assert_eq!(closures_over_twice(&env), Vec::<String>::new());
    for (v, version) in versions.iter().enumerate() {
        let dir = format!("out{v}");
        env.ok(&["checkout", &format!("d@{version}"), &dir]);
        let read = std::fs::read(env.path(&format!("{dir}/series.csv"))).unwrap();
        assert!(
            read == growing_csv(v as u64),
            "version {v} does not read back"
        );
    }
    // And everything the store holds decodes and checks.
    env.ok(&["verify"]);
}

/// `--no-deltas` stores every new chunk whole, as before this change; the same commit
/// without it stores deltas. Both read back the same.
#[test]
fn no_deltas_stores_whole_chunks() {
    let with = TestEnv::new();
    let without = TestEnv::new();
    for env in [&with, &without] {
        commit_csv(env, &growing_csv(0), &[]);
    }
    let delta = commit_csv(&with, &growing_csv(1), &[]);
    let whole = commit_csv(&without, &growing_csv(1), &["--no-deltas"]);
    assert_eq!(whole["delta_chunks"], 0, "{whole:#}");
    assert_eq!(whole["delta_bytes_saved"], 0, "{whole:#}");
    assert!(delta["delta_chunks"].as_u64().unwrap() > 0, "{delta:#}");
    assert!(
        delta["stored_bytes"].as_u64().unwrap() * 4 < whole["stored_bytes"].as_u64().unwrap(),
        "with deltas {delta:#}\nwithout {whole:#}"
    );
    assert!(chunk_depths(&without).values().all(|d| *d == 0));
    for env in [&with, &without] {
        env.ok(&["checkout", "d", "back"]);
        assert!(std::fs::read(env.path("back/series.csv")).unwrap() == growing_csv(1));
    }
}

/// Incompressible data (PNG-like) replaced at the same path shares nothing with its
/// parent: no delta is kept, and the store grows by what it grows without deltas.
#[test]
fn incompressible_data_at_a_changed_path_is_stored_as_before() {
    let with = TestEnv::new();
    let without = TestEnv::new();
    let images = |seed: u64, env: &TestEnv| {
        for n in 0..4u64 {
            env.write(
                &format!("ws/img{n}.png"),
                incompressible(300_000 + n as usize * 1000, seed * 10 + n),
            );
        }
    };
    // One thread each, so both stores cut their frames alike.
    for env in [&with, &without] {
        images(1, env);
        env.json(&["commit", "ws", "-d", "d", "-j", "1"]);
        images(2, env);
    }
    // (The stores differ by a byte or so already: the versions name their directories.)
    let before = (packs_size(&with), packs_size(&without));
    let delta = with.json(&["commit", "ws", "-d", "d", "-j", "1"]);
    let whole = without.json(&["commit", "ws", "-d", "d", "-j", "1", "--no-deltas"]);
    assert_eq!(delta["delta_chunks"], 0, "{delta:#}");
    assert_eq!(delta["new_chunks"], whole["new_chunks"]);
    // The chunks go in plain frames, as before (a frame may be cut elsewhere).
    let grown = (
        packs_size(&with) - before.0,
        packs_size(&without) - before.1,
    );
    assert!(
        grown.0 <= grown.1 + grown.1 / 100,
        "with deltas the store grew {} bytes, without {}",
        grown.0,
        grown.1
    );
    assert!(chunk_depths(&with).values().all(|d| *d == 0));
}

/// A file at a new path shares nothing with the parent: it takes the plain path even when
/// its content is close to a file the parent has at another path.
#[test]
fn a_new_path_takes_no_delta() {
    let env = TestEnv::new();
    commit_csv(&env, &growing_csv(0), &[]);
    env.write("ws/other.csv", growing_csv(1));
    let report = env.json(&["commit", "ws", "-d", "d"]);
    assert_eq!(report["delta_chunks"], 0, "{report:#}");
    assert!(report["new_chunks"].as_u64().unwrap() > 0);
}

/// A parent chunk the store does not hold (a clone's head, whose data stays on the remote
/// until read) is no base: the commit stores its chunks whole without fetching anything,
/// and the new version reads back.
#[test]
fn a_parent_chunk_held_only_by_a_remote_is_no_base() {
    let env = TestEnv::new();
    commit_csv(&env, &growing_csv(0), &[]);
    let (_, url) = push_to_file_remote(&env, "remote", "d");
    env.ok(&["clone", &url, "clone"]);
    env.write("ws2/series.csv", growing_csv(1));
    let report = env.json(&["--store", "clone", "commit", "ws2", "-d", "d"]);
    assert_eq!(report["delta_chunks"], 0, "{report:#}");
    assert_eq!(
        report["parent"],
        env.json(&["log", "d"])[0]["id"],
        "{report:#}"
    );
    assert!(
        chunk_depths_at(&env.path("clone/.dsv/catalog.db"))
            .values()
            .all(|d| *d == 0)
    );
    env.ok(&["--store", "clone", "checkout", "d", "back"]);
    assert!(std::fs::read(env.path("back/series.csv")).unwrap() == growing_csv(1));
}

/// Each version of a chain two deep reads back, and the oldest after the newer ones (a
/// checkout reads a delta's bases first).
#[test]
fn each_version_of_a_chain_reads_back_newest_first() {
    let env = TestEnv::new();
    let mut versions = Vec::new();
    for v in [0u64, 2, 4] {
        versions.push((v, commit_csv(&env, &growing_csv(v), &[])["version"].clone()));
    }
    assert!(chunk_depths(&env).values().any(|d| *d == 2));
    for (v, version) in versions.into_iter().rev() {
        let version = version.as_str().unwrap();
        env.ok(&["checkout", &format!("d@{version}"), "out", "--force"]);
        let read = std::fs::read(env.path("out/series.csv")).unwrap();
        assert!(read == growing_csv(v), "version {v}");
    }
}

/// An import (and an update) of a file the head already has at the same path stores its
/// new chunks as deltas against the head's, as commit does; the version reads back.
#[test]
fn an_update_of_a_growing_file_stores_deltas() {
    let env = TestEnv::new();
    env.write("source/series.csv", growing_csv(0));
    let source = env.path("source/series.csv");
    let first = env.json(&["import", source.to_str().unwrap(), "-d", "imp"]);
    assert_eq!(first["delta_chunks"], 0, "{first:#}");
    env.write("source/series.csv", growing_csv(1));
    let update = env.json(&["update", "imp"]);
    assert_eq!(update["created"], true, "{update:#}");
    assert!(
        update["delta_chunks"].as_u64().unwrap() * 10 >= update["new_chunks"].as_u64().unwrap() * 8,
        "{update:#}"
    );
    assert!(
        update["stored_bytes"].as_u64().unwrap() * 5 < first["stored_bytes"].as_u64().unwrap(),
        "first {first:#}\nupdate {update:#}"
    );
    env.ok(&["checkout", "imp", "out"]);
    assert!(std::fs::read(env.path("out/series.csv")).unwrap() == growing_csv(1));
}

/// `--no-deltas` on import and update, and the store's `core.deltas = false` for commit,
/// import and update, store every new chunk whole; unset, deltas come back.
#[test]
fn no_deltas_on_import_and_update_and_the_core_deltas_setting_store_whole_chunks() {
    let env = TestEnv::new();
    env.write("source/series.csv", growing_csv(0));
    let source = env.path("source/series.csv");
    env.json(&["import", source.to_str().unwrap(), "-d", "imp"]);
    env.write("source/series.csv", growing_csv(1));
    let update = env.json(&["update", "imp", "--no-deltas"]);
    assert_eq!(update["created"], true, "{update:#}");
    assert_eq!(update["delta_chunks"], 0, "{update:#}");
    commit_csv(&env, &growing_csv(0), &[]);

    env.ok(&["config", "set", "core.deltas", "false"]);
    assert_eq!(env.ok(&["config", "get", "core.deltas"]).trim(), "false");
    env.write("source/series.csv", growing_csv(2));
    let update = env.json(&["update", "imp"]);
    assert_eq!(update["created"], true, "{update:#}");
    assert_eq!(update["delta_chunks"], 0, "{update:#}");
    let commit = commit_csv(&env, &growing_csv(5), &[]);
    assert!(commit["new_chunks"].as_u64().unwrap() > 0, "{commit:#}");
    assert_eq!(commit["delta_chunks"], 0, "{commit:#}");
    let again = env.json(&["import", source.to_str().unwrap(), "-d", "imp2"]);
    env.write("source/series.csv", growing_csv(3));
    let import = env.json(&["import", source.to_str().unwrap(), "-d", "imp2"]);
    assert_eq!(
        import["delta_chunks"], 0,
        "first {again:#}\nsecond {import:#}"
    );

    env.ok(&["config", "unset", "core.deltas"]);
    env.write("source/series.csv", growing_csv(4));
    let update = env.json(&["update", "imp"]);
    assert!(update["delta_chunks"].as_u64().unwrap() > 0, "{update:#}");
    let commit = commit_csv(&env, &growing_csv(6), &[]);
    assert!(commit["delta_chunks"].as_u64().unwrap() > 0, "{commit:#}");
    env.ok(&["verify"]);
}

/// Writes `bytes` as `TOP/series.csv` into a gzipped tar at `path`.
fn release_archive(path: &Path, top: &str, bytes: &[u8]) {
    let file = std::fs::File::create(path).unwrap();
    let mut archive = tar::Builder::new(flate2::write::GzEncoder::new(
        file,
        flate2::Compression::fast(),
    ));
    let mut header = tar::Header::new_gnu();
    header.set_size(bytes.len() as u64);
    header.set_mode(0o644);
    header.set_cksum();
    archive
        .append_data(&mut header, format!("{top}/series.csv"), bytes)
        .unwrap();
    archive.into_inner().unwrap().finish().unwrap();
}

/// A new release of an archive whose top directory is renamed (`data-1/` becomes
/// `data-2/`, as a dated tarball's does) still finds its files' parents by the rest of
/// their paths, and reads back.
#[test]
fn an_archive_whose_top_directory_is_renamed_stores_deltas() {
    let env = TestEnv::new();
    std::fs::create_dir_all(env.path("releases")).unwrap();
    let (first, second) = (
        env.path("releases/v1.tar.gz"),
        env.path("releases/v2.tar.gz"),
    );
    release_archive(&first, "data-1", &growing_csv(0));
    release_archive(&second, "data-2", &growing_csv(1));
    let one = env.json(&["import", first.to_str().unwrap(), "-d", "rel"]);
    let two = env.json(&["import", second.to_str().unwrap(), "-d", "rel"]);
    assert!(
        two["delta_chunks"].as_u64().unwrap() * 10 >= two["new_chunks"].as_u64().unwrap() * 8,
        "{two:#}"
    );
    assert!(
        two["stored_bytes"].as_u64().unwrap() * 5 < one["stored_bytes"].as_u64().unwrap(),
        "first {one:#}\nsecond {two:#}"
    );
    env.ok(&["checkout", "rel", "out"]);
    assert!(std::fs::read(env.path("out/data-2/series.csv")).unwrap() == growing_csv(1));
}

/// A workspace whose one top directory is renamed between versions (a dated release
/// unpacked as it comes) still stores deltas against the files below the old name.
#[test]
fn a_renamed_top_directory_keeps_its_parents() {
    let env = TestEnv::new();
    env.write("ws/data-1/series.csv", growing_csv(0));
    let first = env.json(&["commit", "ws", "-d", "d"]);
    std::fs::remove_dir_all(env.path("ws/data-1")).unwrap();
    env.write("ws/data-2/series.csv", growing_csv(1));
    let second = env.json(&["commit", "ws", "-d", "d"]);
    assert!(
        second["delta_chunks"].as_u64().unwrap() * 10 >= second["new_chunks"].as_u64().unwrap() * 8,
        "{second:#}"
    );
    assert!(
        second["stored_bytes"].as_u64().unwrap() * 5 < first["stored_bytes"].as_u64().unwrap(),
        "first {first:#}\nsecond {second:#}"
    );
    env.ok(&["checkout", "d", "out"]);
    assert!(std::fs::read(env.path("out/data-2/series.csv")).unwrap() == growing_csv(1));
}
