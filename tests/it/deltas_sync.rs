//! Delta chains across remotes (issue 39): push, clone, pull, checkout of remote data and
//! `copy` move a delta frame only with its bases (transitively), every delta received is
//! decoded against its bases and hashed before it is kept, and a remote that holds a delta
//! without its base is refused (exit 5) with nothing stored.
//!
//! The remote with delta chains is forged from a plain one through the library
//! (`forge_delta_remote`): every object of its packs rewritten into new packs, the chosen
//! chunks as delta frames against the chosen bases. Chains cross datasets on purpose: the
//! base of a chunk of `ds` is a chunk of `other`, which nothing of `ds` reaches, so only a
//! transfer that follows the closure brings it.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

use dsv::ObjectId;
use dsv::object::ObjectKind;

use crate::common::{TestEnv, plain_remote_objects};
use crate::remote::{unique_prefix, use_s3};

/// The CSV of `rows` rows of block `block` (a few KB: one chunk each).
fn csv(block: u64, rows: u64) -> Vec<u8> {
    let mut text = String::from("day,block,value,comment\n");
    for row in 0..rows {
        text.push_str(&format!(
            "{row},{block},{},\"reading {row} of block {block}\"\n",
            (row * 7919 + block * 104_729) % 100_003
        ));
    }
    text.into_bytes()
}

/// The versions committed: `ds` grows `t.csv` and `u.csv` over four versions; `other`'s one
/// version holds `o.csv`. Each entry: (dataset, version number, path, bytes).
struct History {
    files: Vec<(&'static str, u32, &'static str, Vec<u8>)>,
}

impl History {
    fn bytes(&self, dataset: &str, version: u32, path: &str) -> &[u8] {
        &self
            .files
            .iter()
            .find(|(d, v, p, _)| *d == dataset && *v == version && *p == path)
            .unwrap()
            .3
    }

    fn id(&self, dataset: &str, version: u32, path: &str) -> ObjectId {
        ObjectId::of(self.bytes(dataset, version, path))
    }

    /// What every delta is made against: `ds`'s `t.csv` of version 1 against `other`'s
    /// `o.csv` (a base no version of `ds` reaches), each later `t.csv` against the one
    /// before (a chain 4 deep), `u.csv` of version 2 against two bases.
    fn deltas(&self) -> BTreeMap<ObjectId, Vec<ObjectId>> {
        let mut deltas = BTreeMap::new();
        deltas.insert(
            self.id("ds", 1, "t.csv"),
            vec![self.id("other", 1, "o.csv")],
        );
        for v in 2..=4 {
            deltas.insert(
                self.id("ds", v, "t.csv"),
                vec![self.id("ds", v - 1, "t.csv")],
            );
        }
        deltas.insert(
            self.id("ds", 2, "u.csv"),
            vec![self.id("ds", 1, "u.csv"), self.id("ds", 1, "t.csv")],
        );
        deltas
    }
}

/// Commits `other` (one version) and `ds` (four versions, tagged v1..v4) in `env`.
fn commit_history(env: &TestEnv) -> History {
    let mut files = Vec::new();
    let o = csv(9, 150);
    env.write("o/o.csv", &o);
    env.ok(&["commit", "o", "-d", "other", "-t", "v1", "--no-deltas"]);
    files.push(("other", 1, "o.csv", o));
    for v in 1..=4u32 {
        // `t.csv` starts as `other`'s file with rows added, then grows by a few rows a version.
        let t = [csv(9, 150), csv(1, 20 + 5 * u64::from(v))].concat();
        let u = csv(2, 100 + if v >= 2 { 3 } else { 0 } + u64::from(v));
        env.write("d/t.csv", &t);
        env.write("d/u.csv", &u);
        env.ok(&[
            "commit",
            "d",
            "-d",
            "ds",
            "-t",
            &format!("v{v}"),
            "--no-deltas",
        ]);
        files.push(("ds", v, "t.csv", t));
        files.push(("ds", v, "u.csv", u));
    }
    History { files }
}

/// Which objects go where in a forged remote.
struct Layout {
    /// Leave out the pack of the bases that no delta is: a remote holding deltas whose
    /// base is missing.
    drop_bases: bool,
}

/// Makes `forged`, a file remote holding what the plain file remote `plain` holds (its refs
/// too), with the chunks of `deltas` stored as delta frames against their bases. Packs: the
/// metadata and plain chunks; the chunks that are bases only (not deltas themselves, and
/// needed by no delta of `ds` alone: `other`'s file); the delta frames, one pack.
fn forge_delta_remote(
    env: &TestEnv,
    plain: &Path,
    forged: &Path,
    deltas: &BTreeMap<ObjectId, Vec<ObjectId>>,
    layout: &Layout,
    base_only: &[ObjectId],
) {
    let objects = plain_remote_objects(plain);
    let raw: HashMap<ObjectId, Vec<u8>> = objects
        .iter()
        .filter(|(_, kind, _)| *kind == ObjectKind::Chunk)
        .map(|(id, _, bytes)| (*id, bytes.clone()))
        .collect();
    let mut metadata = Vec::new();
    let mut bases_pack = Vec::new();
    let mut delta_pack = Vec::new();
    let mut compressor = dsv::pack::DeltaCompressor::default();
    for (id, kind, bytes) in &objects {
        let mut frame = dsv::pack::FrameBuilder::default();
        frame.push(*id, *kind, bytes);
        if let Some(bases) = deltas.get(id) {
            let prefix: Vec<u8> = bases.iter().flat_map(|b| raw[b].clone()).collect();
            let encoded = frame
                .encode_delta(&mut compressor, 3, &prefix, bases.clone())
                .unwrap();
            assert!(!encoded.bases().is_empty());
            delta_pack.push(encoded);
        } else if base_only.contains(id) {
            bases_pack.push(frame.encode(3));
        } else {
            metadata.push(frame.encode(3));
        }
    }
    crate::common::forge_pack_of_frames(env, forged, metadata);
    if !layout.drop_bases {
        crate::common::forge_pack_of_frames(env, forged, bases_pack);
    }
    crate::common::forge_pack_of_frames(env, forged, delta_pack);
    copy_dir(&plain.join("refs"), &forged.join("refs"));
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

/// A history committed in a store of its own, pushed to a plain file remote, and a remote
/// forged from it with delta chains (`drop_bases`: without the pack of `other`'s file).
/// Returns the environment (the source store, removed: only the remotes are left), the
/// history, and the forged remote's URL.
fn delta_remote(drop_bases: bool) -> (TestEnv, History, String) {
    delta_remote_with(drop_bases, &|history| history.deltas())
}

/// [`delta_remote`] with the deltas `deltas` gives.
fn delta_remote_with(
    drop_bases: bool,
    deltas: &dyn Fn(&History) -> BTreeMap<ObjectId, Vec<ObjectId>>,
) -> (TestEnv, History, String) {
    let env = TestEnv::new();
    let history = commit_history(&env);
    let plain = env.path("plain");
    fs::create_dir_all(&plain).unwrap();
    env.ok(&[
        "remote",
        "add",
        "plain",
        &format!("file://{}", plain.display()),
    ]);
    env.ok(&["push", "--remote", "plain"]);
    let forged = env.path("forged-remote");
    fs::create_dir_all(&forged).unwrap();
    forge_delta_remote(
        &env,
        &plain,
        &forged,
        &deltas(&history),
        &Layout { drop_bases },
        &[history.id("other", 1, "o.csv")],
    );
    // Only the remotes are left: what a clone gets must come from them.
    fs::remove_dir_all(env.path(".dsv")).unwrap();
    fs::remove_dir_all(env.path("d")).unwrap();
    fs::remove_dir_all(env.path("o")).unwrap();
    fs::remove_dir_all(&plain).unwrap();
    let url = format!("file://{}", forged.display());
    (env, history, url)
}

/// Checks out every version of `ds` (tags v1..v4) in the store at `store` and compares each
/// file with what was committed.
fn check_every_version(env: &TestEnv, store: &Path, history: &History) {
    check_versions(env, store, history, 1..=4);
}

/// Checks out `versions` of `ds` (tags vN) in the store at `store` and compares each file
/// with what was committed.
fn check_versions(
    env: &TestEnv,
    store: &Path,
    history: &History,
    versions: impl IntoIterator<Item = u32>,
) {
    for v in versions {
        let out = store.join(format!("out-v{v}"));
        let mut cmd = env.dsv();
        cmd.current_dir(store)
            .args(["checkout", &format!("ds@v{v}"), out.to_str().unwrap()]);
        let done = cmd.output().unwrap();
        assert!(
            done.status.success(),
            "checkout ds@v{v}: {}",
            String::from_utf8_lossy(&done.stderr)
        );
        for path in ["t.csv", "u.csv"] {
            assert!(
                fs::read(out.join(path)).unwrap() == history.bytes("ds", v, path),
                "ds@v{v}/{path} is not what was committed"
            );
        }
    }
}

/// Runs `dsv ARGS` in the store at `store`, asserting success; returns stdout.
fn ok_in(env: &TestEnv, store: &Path, args: &[&str]) -> String {
    let mut cmd = env.dsv();
    cmd.current_dir(store).args(args);
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "dsv {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs `dsv ARGS` in the store at `store`, expecting exit `code`; returns stderr.
fn fails_in(env: &TestEnv, store: &Path, args: &[&str], code: i32) -> String {
    let mut cmd = env.dsv();
    cmd.current_dir(store).args(args);
    let out = cmd.output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(code),
        "dsv {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stderr).unwrap()
}

/// (frames stored as deltas, chunks catalogued) in the store at `store`.
fn delta_frames_and_chunks(store: &Path) -> (i64, i64) {
    let catalog = rusqlite::Connection::open(store.join(".dsv/catalog.db")).unwrap();
    let deltas = catalog
        .query_row(
            "SELECT count(*) FROM frames WHERE bases IS NOT NULL",
            [],
            |row| row.get(0),
        )
        .unwrap();
    let chunks = catalog
        .query_row(
            "SELECT count(*) FROM objects WHERE kind = ?1",
            [ObjectKind::Chunk as u8],
            |row| row.get(0),
        )
        .unwrap();
    (deltas, chunks)
}

/// Clones `url` into `env/NAME`; returns the store's directory.
fn clone_into(env: &TestEnv, url: &str, name: &str) -> PathBuf {
    env.ok(&["clone", url, name]);
    env.path(name)
}

#[test]
fn clone_and_pull_of_a_remote_with_delta_chains_bring_every_base() {
    let (env, history, url) = delta_remote(false);
    let store = clone_into(&env, &url, "clone");
    // The head's `t.csv` is a chain 4 deep ending in `other`'s file, which no version of
    // `ds` reaches: all of it comes with the pull, and stays a chain of deltas here. A dry
    // run counts the bases' frames too (the pull's GETs add only the gaps between frames).
    let planned: serde_json::Value =
        serde_json::from_str(&ok_in(&env, &store, &["--json", "pull", "ds", "--dry-run"])).unwrap();
    let pulled: serde_json::Value =
        serde_json::from_str(&ok_in(&env, &store, &["--json", "pull", "ds"])).unwrap();
    let planned_bytes = planned["plan"]["missing_bytes"].as_u64().unwrap();
    let pulled_bytes = pulled["transfer"]["bytes"].as_u64().unwrap();
    assert!(
        planned_bytes <= pulled_bytes && pulled_bytes - planned_bytes < 512,
        "planned {planned_bytes}, pulled {pulled_bytes}"
    );
    assert_eq!(delta_frames_and_chunks(&store), (4, 6));
    // A checkout of each version fetches what it lacks (the last delta and its bases).
    check_every_version(&env, &store, &history);
    assert_eq!(
        delta_frames_and_chunks(&store).0,
        5,
        "every delta kept as it came"
    );
    // With the remote gone, every version still checks out from this store alone.
    fs::remove_dir_all(env.path("forged-remote")).unwrap();
    for v in 1..=4 {
        fs::remove_dir_all(store.join(format!("out-v{v}"))).unwrap();
    }
    check_every_version(&env, &store, &history);
    ok_in(&env, &store, &["verify", "--full"]);
}

/// Clones `url` (a forged remote) and expects `checkout ds@vN` and `pull ds` to fail with
/// exit 5 naming the remote and saying `says`, storing nothing.
fn refused_with_nothing_stored(env: &TestEnv, url: &str, version: u32, says: &str) {
    let store = clone_into(env, url, &format!("clone-{}", unique_prefix()));
    let before = delta_frames_and_chunks(&store);
    let packs_before = fs::read_dir(store.join(".dsv/packs")).unwrap().count();
    let out = store.join("out");
    let revision = format!("ds@v{version}");
    for args in [
        vec!["checkout", revision.as_str(), out.to_str().unwrap()],
        vec!["pull", "ds"],
    ] {
        let stderr = fails_in(env, &store, &args, 5);
        assert!(stderr.contains("origin"), "names the remote: {stderr}");
        assert!(stderr.contains(says), "says {says:?}: {stderr}");
    }
    assert_eq!(delta_frames_and_chunks(&store), before, "nothing stored");
    assert_eq!(
        fs::read_dir(store.join(".dsv/packs")).unwrap().count(),
        packs_before,
        "no pack left behind"
    );
}

#[test]
fn deltas_whose_bases_the_remote_lacks_or_that_make_a_cycle_are_refused_with_exit_5() {
    let (env, history, url) = delta_remote(true);
    let base = history.id("other", 1, "o.csv").short();
    refused_with_nothing_stored(&env, &url, 1, &base);
    // `t.csv` of v3 and v4 each a delta against the other: both decode, neither can be read.
    let (env, history, url) = delta_remote_with(false, &|history| {
        let (three, four) = (history.id("ds", 3, "t.csv"), history.id("ds", 4, "t.csv"));
        BTreeMap::from([(three, vec![four]), (four, vec![three])])
    });
    refused_with_nothing_stored(&env, &url, 3, "cycle");
    // The versions outside the cycle still check out.
    let store = clone_into(&env, &url, "whole");
    check_versions(&env, &store, &history, [1, 2]);
}

/// Adds remote `name` at `url` to `store` and pushes `dataset` there.
fn push_to(env: &TestEnv, store: &Path, (name, url): (&str, &str), dataset: &str) {
    ok_in(env, store, &["remote", "add", name, url]);
    ok_in(env, store, &["push", "--remote", name, dataset]);
}

/// The format object of the file remote at `remote`, if it has one.
fn format_of(remote: &Path) -> Option<serde_json::Value> {
    fs::read(remote.join("format"))
        .ok()
        .map(|bytes| serde_json::from_slice(&bytes).unwrap())
}

#[test]
fn push_sends_every_base_of_what_it_sends_and_raises_the_remote_format_to_3() {
    let (env, history, _) = delta_remote(false);
    let store = clone_into(
        &env,
        &format!("file://{}", env.path("forged-remote").display()),
        "source",
    );
    // `other` first: its chunk lands in a pack of its own, which `ds`'s walk never reaches.
    ok_in(&env, &store, &["pull", "other"]);
    check_every_version(&env, &store, &history);
    assert_eq!(delta_frames_and_chunks(&store).0, 5);
    // A dataset without deltas pushed alone leaves a remote's format as it was.
    env.write("source/p/a.csv", csv(3, 40));
    ok_in(&env, &store, &["commit", "p", "-d", "plain"]);
    let plain = env.path("plain-only");
    fs::create_dir_all(&plain).unwrap();
    push_to(
        &env,
        &store,
        ("plain", &format!("file://{}", plain.display())),
        "plain",
    );
    assert_eq!(
        format_of(&plain),
        None,
        "no format key for data without deltas"
    );
    // A remote at format 3 already: one round, the base's pack goes because a pack sent
    // holds a delta naming it.
    let at3 = env.path("at3");
    fs::create_dir_all(&at3).unwrap();
    fs::write(at3.join("format"), r#"{"format":3,"grace_seconds":86400}"#).unwrap();
    push_to(
        &env,
        &store,
        ("at3", &format!("file://{}", at3.display())),
        "ds",
    );
    // A fresh remote gets format 3 before the first delta pack (then a second round finds
    // the base missing under a delta the remote holds now, and sends it).
    let fresh = env.path("fresh");
    fs::create_dir_all(&fresh).unwrap();
    push_to(
        &env,
        &store,
        ("fresh", &format!("file://{}", fresh.display())),
        "ds",
    );
    assert_eq!(format_of(&fresh).unwrap()["format"], 3);
    use_s3(&env);
    let s3 = format!("s3://dsv-test/{}", unique_prefix());
    push_to(&env, &store, ("s3", &s3), "ds");
    // Every remote, cloned afresh with the sources gone, checks out every version.
    fs::remove_dir_all(&store).unwrap();
    fs::remove_dir_all(env.path("forged-remote")).unwrap();
    for url in [
        format!("file://{}", at3.display()),
        format!("file://{}", fresh.display()),
        s3,
    ] {
        let copy = clone_into(&env, &url, &format!("second-{}", unique_prefix()));
        check_every_version(&env, &copy, &history);
        ok_in(&env, &copy, &["verify", "--full"]);
    }
}

#[test]
fn copy_carries_every_delta_base_to_file_and_s3_remotes() {
    let (env, history, _) = delta_remote(false);
    let store = clone_into(
        &env,
        &format!("file://{}", env.path("forged-remote").display()),
        "hub",
    );
    let far = env.path("far");
    fs::create_dir_all(&far).unwrap();
    let file_url = format!("file://{}", far.display());
    ok_in(&env, &store, &["remote", "add", "far", &file_url]);
    use_s3(&env);
    let s3_url = format!("s3://dsv-test/{}", unique_prefix());
    ok_in(&env, &store, &["remote", "add", "s3", &s3_url]);
    for to in ["far", "s3"] {
        ok_in(
            &env,
            &store,
            &["copy", "ds", "--from", "origin", "--to", to],
        );
    }
    assert_eq!(format_of(&far).unwrap()["format"], 3);
    fs::remove_dir_all(&store).unwrap();
    fs::remove_dir_all(env.path("forged-remote")).unwrap();
    for url in [file_url, s3_url] {
        let copy = clone_into(&env, &url, &format!("second-{}", unique_prefix()));
        check_every_version(&env, &copy, &history);
        ok_in(&env, &copy, &["verify", "--full"]);
    }
}

#[test]
fn copy_of_deltas_whose_bases_the_destination_holds_checks_them_and_sends_only_the_deltas() {
    let (env, history, _) = delta_remote(false);
    let far = env.path("far");
    fs::create_dir_all(&far).unwrap();
    let to_url = format!("file://{}", far.display());
    let store = clone_into(
        &env,
        &format!("file://{}", env.path("forged-remote").display()),
        "hub",
    );
    ok_in(&env, &store, &["remote", "add", "far", &to_url]);
    // The first copy brings v2's closure (`other`'s file included); the second only the
    // later deltas, from the delta pack's frames: their bases are on DST already, and the
    // copy reads them from SRC only to check the deltas against them.
    ok_in(
        &env,
        &store,
        &["copy", "ds@v2", "--from", "origin", "--to", "far"],
    );
    let second: serde_json::Value = serde_json::from_str(&ok_in(
        &env,
        &store,
        &["--json", "copy", "ds", "--from", "origin", "--to", "far"],
    ))
    .unwrap();
    let frames = second["packs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["action"] == "frames")
        .count();
    assert!(
        frames > 0,
        "frames copied from a pack partly needed: {second}"
    );
    let (deltas, chunks) = delta_frames_and_chunks(&store);
    assert_eq!(
        (deltas, chunks),
        (0, 0),
        "nothing landed in the hub's store"
    );
    fs::remove_dir_all(&store).unwrap();
    fs::remove_dir_all(env.path("forged-remote")).unwrap();
    let copy = clone_into(&env, &to_url, "second");
    check_every_version(&env, &copy, &history);
    ok_in(&env, &copy, &["verify", "--full"]);
}

/// A table of `rows` rows, every 50th followed by one added row per version up to `version`
/// (each version's change spread over every chunk of the file).
fn growing_table(rows: u64, version: u64) -> Vec<u8> {
    let mut text = String::new();
    for row in 0..rows {
        text.push_str(&format!(
            "{row},{},value {row} of the table\n",
            (row * 2_654_435_761) % 1_000_003
        ));
        if row % 50 == 0 {
            for v in 1..=version {
                text.push_str(&format!("{row}.{v},added in version {v}\n"));
            }
        }
    }
    text.into_bytes()
}

#[test]
fn a_committed_delta_history_pushed_and_copied_checks_out_byte_identical() {
    let env = TestEnv::new();
    let mut versions = Vec::new();
    for v in 1..=3u64 {
        let table = growing_table(5000, v);
        env.write("d/table.csv", &table);
        let report = env.json(&["commit", "d", "-d", "ds", "-t", &format!("v{v}")]);
        if v > 1 {
            assert!(report["delta_chunks"].as_u64().unwrap() > 0, "{report}");
        }
        versions.push(table);
    }
    let (a, b) = (env.path("a"), env.path("b"));
    fs::create_dir_all(&a).unwrap();
    fs::create_dir_all(&b).unwrap();
    let (a_url, b_url) = (
        format!("file://{}", a.display()),
        format!("file://{}", b.display()),
    );
    env.ok(&["remote", "add", "a", &a_url]);
    env.ok(&["push", "--remote", "a"]);
    assert_eq!(format_of(&a).unwrap()["format"], 3);
    // A store holding only metadata copies A to B: the file maps it forwards are proven
    // against chunks read from A, deltas decoded with their bases.
    let hub = clone_into(&env, &a_url, "hub");
    ok_in(&env, &hub, &["remote", "add", "b", &b_url]);
    let copied: serde_json::Value = serde_json::from_str(&ok_in(
        &env,
        &hub,
        &["--json", "copy", "ds", "--from", "origin", "--to", "b"],
    ))
    .unwrap();
    assert!(copied["proof_bytes"].as_u64().unwrap() > 0, "{copied}");
    fs::remove_dir_all(env.path(".dsv")).unwrap();
    fs::remove_dir_all(&a).unwrap();
    let store = clone_into(&env, &b_url, "from-b");
    for (v, table) in versions.iter().enumerate() {
        let out = store.join(format!("out{v}"));
        ok_in(
            &env,
            &store,
            &["checkout", &format!("ds@v{}", v + 1), out.to_str().unwrap()],
        );
        assert!(
            fs::read(out.join("table.csv")).unwrap() == *table,
            "v{}",
            v + 1
        );
    }
    assert!(
        delta_frames_and_chunks(&store).0 > 0,
        "the deltas came as deltas"
    );
}
