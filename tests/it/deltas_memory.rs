//! What a download keeps to check delta frames is bounded (issue 39, open item 1): a remote
//! whose delta frames name many large, compressible bases (a few MiB stored, ~96 MiB raw)
//! is pulled, and checked with `verify --remote --full`, with `DSV_DELTA_MEMORY` set to
//! 8 MiB, and the process's peak RSS stays within a margin of the same command against a
//! plain remote of the same data. Before, every base's raw bytes were kept until the
//! download's end (the 4 MiB prefix cap was per delta, not a total). An honest pull still
//! brings every version byte-identical; a remote with one lying delta among them is refused
//! with exit 5, nothing of its data stored, in the same bounded memory.
//!
//! The remote is forged from a plain one through the library: every chunk of the `b*` files
//! stored plain (one frame each), and each `d*` file's chunk a delta frame naming 8 of those
//! chunks as its bases (what it decodes against, whatever its bytes).

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

use dsv::ObjectId;
use dsv::object::ObjectKind;

use crate::common::{
    TestEnv, chunks_in_packs, forge_pack_of_frames, plain_remote_objects, pseudo_random,
};

/// Files of bases: 24 of 4 MiB, so ~96 MiB of chunks (FastCDC: 16/64/256 KiB).
const BASE_FILES: usize = 24;
const BASE_FILE_LEN: usize = 4 * 1024 * 1024;
/// Files stored as delta frames: one chunk each (under the chunker's 16 KiB minimum).
const DELTA_FILES: usize = 320;
const DELTA_FILE_LEN: usize = 12_000;
/// The memory the commands under test may keep for delta checks.
const LIMIT: &str = "8MiB";
/// How much more than the plain command's peak RSS the delta command may take: well under
/// the ~96 MiB of bases the deltas name, well over the 8 MiB limit.
const MARGIN_KIB: u64 = 40 * 1024;

/// Bytes that compress well (about one random byte in 32) yet cut into distinct chunks.
fn sparse(len: usize, seed: u64) -> Vec<u8> {
    let mut out = vec![0u8; len];
    let noise = pseudo_random(len / 32 * 2, seed);
    for (block, pair) in noise.chunks(2).enumerate() {
        out[block * 32 + usize::from(pair[0] % 32)] = pair[1] | 1;
    }
    out
}

fn delta_file(n: usize) -> Vec<u8> {
    pseudo_random(DELTA_FILE_LEN, 2 * (1_000 + n as u64) + 1)
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// The two remotes of a test, and what they hold.
struct Remotes {
    /// The environment: its own store is removed, only the remotes are left.
    env: TestEnv,
    /// The plain remote's URL.
    plain: String,
    /// The forged remote's URL.
    forged: String,
    /// The files of `ds`: name, bytes.
    files: Vec<(String, Vec<u8>)>,
    /// The raw bytes of the bases the deltas name, together.
    base_bytes: u64,
}

/// A dataset `ds` (the base files and the delta files) pushed to a plain file remote, and a
/// remote forged from it whose `d*` chunks are delta frames naming 8 `b*` chunks each (with
/// `lie`, the last of them decodes to other bytes than its chunk).
fn remotes(lie: bool) -> Remotes {
    let env = TestEnv::new();
    let mut files = Vec::new();
    for n in 0..BASE_FILES {
        files.push((
            format!("b{n:02}.bin"),
            sparse(BASE_FILE_LEN, 2 * (7 + n as u64) + 1),
        ));
    }
    for n in 0..DELTA_FILES {
        files.push((format!("d{n:03}.bin"), delta_file(n)));
    }
    for (name, bytes) in &files {
        env.write(&format!("data/{name}"), bytes);
    }
    env.ok(&["commit", "data", "-d", "ds", "-m", "one", "--no-deltas"]);
    let plain_dir = env.path("plain");
    fs::create_dir_all(&plain_dir).unwrap();
    let plain = format!("file://{}", plain_dir.display());
    env.ok(&["remote", "add", "plain", &plain]);
    env.ok(&["push", "--remote", "plain"]);

    let delta_ids: HashSet<ObjectId> = (0..DELTA_FILES)
        .map(|n| ObjectId::of(&delta_file(n)))
        .collect();
    let objects = plain_remote_objects(&plain_dir);
    let base_chunks: Vec<&(ObjectId, ObjectKind, Vec<u8>)> = objects
        .iter()
        .filter(|(id, kind, _)| *kind == ObjectKind::Chunk && !delta_ids.contains(id))
        .collect();
    let groups: Vec<&[&(ObjectId, ObjectKind, Vec<u8>)]> = base_chunks.chunks(8).collect();
    assert!(
        groups.len() <= DELTA_FILES,
        "{} groups of bases for {DELTA_FILES} deltas",
        groups.len()
    );
    let mut compressor = dsv::pack::DeltaCompressor::default();
    let (mut metadata, mut bases, mut deltas) = (Vec::new(), Vec::new(), Vec::new());
    let mut base_bytes = 0;
    let mut next_group = 0;
    for (id, kind, bytes) in &objects {
        let mut frame = dsv::pack::FrameBuilder::default();
        if delta_ids.contains(id) && next_group < groups.len() {
            let group = groups[next_group];
            next_group += 1;
            let prefix: Vec<u8> = group.iter().flat_map(|(_, _, b)| b.clone()).collect();
            base_bytes += prefix.len() as u64;
            let lying = lie && next_group == groups.len();
            let raw = if lying {
                pseudo_random(bytes.len(), 99)
            } else {
                bytes.clone()
            };
            frame.push(*id, *kind, &raw);
            let ids = group.iter().map(|(id, ..)| *id).collect();
            deltas.push(
                frame
                    .encode_delta(&mut compressor, 3, &prefix, ids)
                    .unwrap(),
            );
        } else if *kind == ObjectKind::Chunk && !delta_ids.contains(id) {
            frame.push(*id, *kind, bytes);
            bases.push(frame.encode(3));
        } else {
            frame.push(*id, *kind, bytes);
            metadata.push(frame.encode(3));
        }
    }
    assert_eq!(next_group, groups.len(), "every base is named by a delta");
    let forged_dir = env.path("forged-remote");
    fs::create_dir_all(&forged_dir).unwrap();
    forge_pack_of_frames(&env, &forged_dir, metadata);
    forge_pack_of_frames(&env, &forged_dir, bases);
    forge_pack_of_frames(&env, &forged_dir, deltas);
    copy_dir(&plain_dir.join("refs"), &forged_dir.join("refs"));
    fs::remove_dir_all(env.path(".dsv")).unwrap();
    fs::remove_dir_all(env.path("data")).unwrap();
    let forged = format!("file://{}", forged_dir.display());
    Remotes {
        env,
        plain,
        forged,
        files,
        base_bytes,
    }
}

/// Peak RSS in KiB of `dsv ARGS` run in `dir` with `DSV_DELTA_MEMORY` at [`LIMIT`]
/// (`/usr/bin/time -f %M`), with its exit code, stderr and stdout.
fn peak_rss_kib(env: &TestEnv, dir: &Path, args: &[&str]) -> (u64, Option<i32>, String, String) {
    let mut time = std::process::Command::new("/usr/bin/time");
    env.sandbox().apply(&mut time);
    let out = time
        .current_dir(dir)
        .env("DSV_DELTA_MEMORY", LIMIT)
        .args(["-f", "%M"])
        .arg(crate::common::dsv_binary())
        .args(args)
        .output()
        .expect("/usr/bin/time (apt: time)");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("dsv {args:?} in {}: {stderr}", dir.display());
    let rss = stderr
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("no RSS from /usr/bin/time: {stderr}"));
    (rss, out.status.code(), stderr, stdout)
}

/// Clones `url` into `env/NAME` (metadata only); returns the store's directory.
fn clone_into(env: &TestEnv, url: &str, name: &str) -> PathBuf {
    env.ok(&["clone", url, name]);
    env.path(name)
}

fn packs_of(store: &Path) -> Vec<PathBuf> {
    fs::read_dir(store.join(".dsv/packs"))
        .map(|dir| {
            dir.map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|e| e == "pack"))
                .collect()
        })
        .unwrap_or_default()
}

fn tmp_is_empty(store: &Path) -> bool {
    fs::read_dir(store.join(".dsv/tmp")).map_or(true, |mut dir| dir.next().is_none())
}

#[test]
fn a_pull_of_deltas_naming_96_mib_of_bases_keeps_what_the_memory_limit_allows() {
    let remotes = remotes(false);
    let env = &remotes.env;
    assert!(
        remotes.base_bytes > 80 * 1024 * 1024,
        "the deltas name {} bytes of bases",
        remotes.base_bytes
    );
    let plain = clone_into(env, &remotes.plain, "plain-clone");
    let (plain_rss, code, stderr, _) = peak_rss_kib(env, &plain, &["pull", "ds"]);
    assert_eq!(code, Some(0), "{stderr}");
    let store = clone_into(env, &remotes.forged, "clone");
    let (rss, code, stderr, _) = peak_rss_kib(env, &store, &["pull", "ds"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        rss <= plain_rss + MARGIN_KIB,
        "pull of the deltas took {rss} KiB at peak, the plain pull {plain_rss} KiB: more \
         than {MARGIN_KIB} KiB over, with {} KiB of bases named and a limit of {LIMIT}",
        remotes.base_bytes / 1024
    );
    // Nothing is left of what was kept past the limit.
    assert!(tmp_is_empty(&store));
    // Every file is what was committed, and the deltas were kept as deltas.
    let out = store.join("out");
    let mut cmd = env.dsv();
    cmd.current_dir(&store)
        .args(["checkout", "ds", out.to_str().unwrap()]);
    assert!(cmd.output().unwrap().status.success());
    for (name, bytes) in &remotes.files {
        assert!(
            fs::read(out.join(name)).unwrap() == *bytes,
            "{name} differs"
        );
    }
    let mut verify = env.dsv();
    verify.current_dir(&store).args(["verify"]);
    assert!(verify.output().unwrap().status.success());
}

#[test]
fn a_pull_of_deltas_whose_96_mib_of_bases_this_store_holds_keeps_what_the_memory_limit_allows() {
    let remotes = remotes(false);
    let env = &remotes.env;
    // The base files first (their chunks, plain), then the deltas against them.
    let first = ["pull", "ds", "--include", "b*"];
    let plain = clone_into(env, &remotes.plain, "plain-clone");
    let (_, code, stderr, _) = peak_rss_kib(env, &plain, &first);
    assert_eq!(code, Some(0), "{stderr}");
    let (plain_rss, code, stderr, _) = peak_rss_kib(env, &plain, &["pull", "ds"]);
    assert_eq!(code, Some(0), "{stderr}");
    let store = clone_into(env, &remotes.forged, "clone");
    let (_, code, stderr, _) = peak_rss_kib(env, &store, &first);
    assert_eq!(code, Some(0), "{stderr}");
    let (rss, code, stderr, _) = peak_rss_kib(env, &store, &["pull", "ds"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        rss <= plain_rss + MARGIN_KIB,
        "pull of deltas against this store's bases took {rss} KiB at peak, the plain pull \
         {plain_rss} KiB"
    );
    assert!(tmp_is_empty(&store));
    let out = store.join("out");
    let mut cmd = env.dsv();
    cmd.current_dir(&store)
        .args(["checkout", "ds", out.to_str().unwrap()]);
    assert!(cmd.output().unwrap().status.success());
    for (name, bytes) in &remotes.files {
        assert!(
            fs::read(out.join(name)).unwrap() == *bytes,
            "{name} differs"
        );
    }
}

#[test]
fn a_remote_with_one_lying_delta_among_them_is_refused_with_exit_5_in_bounded_memory() {
    let remotes = remotes(true);
    let env = &remotes.env;
    let plain = clone_into(env, &remotes.plain, "plain-clone");
    let (plain_rss, code, stderr, _) = peak_rss_kib(env, &plain, &["pull", "ds"]);
    assert_eq!(code, Some(0), "{stderr}");
    let store = clone_into(env, &remotes.forged, "clone");
    let before = chunks_in_packs(&packs_of(&store));
    let (rss, code, stderr, _) = peak_rss_kib(env, &store, &["pull", "ds"]);
    assert_eq!(code, Some(5), "{stderr}");
    assert!(stderr.contains("delta frame"), "{stderr}");
    assert!(
        rss <= plain_rss + MARGIN_KIB,
        "the refused pull took {rss} KiB at peak, the plain pull {plain_rss} KiB"
    );
    // Nothing of the remote's data was stored, and nothing is left of what was kept.
    assert_eq!(chunks_in_packs(&packs_of(&store)), before);
    assert!(tmp_is_empty(&store));
}

#[test]
fn verify_remote_full_of_deltas_naming_96_mib_of_bases_keeps_what_the_memory_limit_allows() {
    let remotes = remotes(false);
    let env = &remotes.env;
    let plain = clone_into(env, &remotes.plain, "plain-clone");
    let args = ["--json", "verify", "--remote", "origin", "--full"];
    let (plain_rss, code, stderr, _) = peak_rss_kib(env, &plain, &args);
    assert_eq!(code, Some(0), "{stderr}");
    let store = clone_into(env, &remotes.forged, "clone");
    let (rss, code, stderr, stdout) = peak_rss_kib(env, &store, &args);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        rss <= plain_rss + MARGIN_KIB,
        "verify --remote --full of the deltas took {rss} KiB at peak, of the plain remote \
         {plain_rss} KiB"
    );
    assert!(tmp_is_empty(&store));
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["problems"], serde_json::json!([]), "{report}");
}

#[test]
fn a_delta_memory_that_is_not_a_size_is_a_usage_error() {
    let env = TestEnv::new();
    env.set_var("DSV_DELTA_MEMORY", "lots");
    let stderr = env.fails(&["ls"], 2);
    assert!(stderr.contains("DSV_DELTA_MEMORY"), "{stderr}");
    env.set_var("DSV_DELTA_MEMORY", "64 MiB");
    env.ok(&["ls"]);
}
