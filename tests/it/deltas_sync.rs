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

use crate::common::TestEnv;
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
    env.ok(&["commit", "o", "-d", "other", "-t", "v1"]);
    files.push(("other", 1, "o.csv", o));
    for v in 1..=4u32 {
        // `t.csv` starts as `other`'s file with rows added, then grows by a few rows a version.
        let t = [csv(9, 150), csv(1, 20 + 5 * u64::from(v))].concat();
        let u = csv(2, 100 + if v >= 2 { 3 } else { 0 } + u64::from(v));
        env.write("d/t.csv", &t);
        env.write("d/u.csv", &u);
        env.ok(&["commit", "d", "-d", "ds", "-t", &format!("v{v}")]);
        files.push(("ds", v, "t.csv", t));
        files.push(("ds", v, "u.csv", u));
    }
    History { files }
}

/// Every object of every complete pack of the file remote at `remote`: (id, kind, raw bytes).
fn remote_objects(remote: &Path) -> Vec<(ObjectId, ObjectKind, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in fs::read_dir(remote.join("packs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "pack") {
            continue;
        }
        let file = fs::File::open(&path).unwrap();
        let index = dsv::pack::reader::read_index(&file, &path).unwrap();
        let bytes = fs::read(&path).unwrap();
        for (at, frame) in index.frames.iter().enumerate() {
            assert!(
                index.deltas.iter().all(|d| d.frame as usize != at),
                "the plain remote holds no delta frame"
            );
            let members: Vec<_> = index
                .objects
                .iter()
                .filter(|o| o.frame as usize == at)
                .map(|o| (o.id, o.kind, o.offset, o.length))
                .collect();
            let stored = bytes
                [frame.offset as usize..(frame.offset + u64::from(frame.stored_length)) as usize]
                .to_vec();
            let (_, raw) = dsv::pack::EncodedFrame::verified_with_raw(
                stored,
                frame.raw_length,
                frame.compression,
                members.clone(),
            )
            .unwrap();
            for (id, kind, offset, length) in members {
                out.push((
                    id,
                    kind,
                    raw[offset as usize..(offset + length) as usize].to_vec(),
                ));
            }
        }
    }
    out
}

/// Writes one pack of `frames` into the file remote at `remote` (its `.pack` and `.idx`).
fn write_remote_pack(env: &TestEnv, remote: &Path, frames: Vec<dsv::pack::EncodedFrame>) {
    let dir = env.path("forged");
    fs::create_dir_all(&dir).unwrap();
    fs::create_dir_all(remote.join("packs")).unwrap();
    let mut writer = dsv::pack::PackWriter::create(&dir, &dir).unwrap();
    for frame in frames {
        writer.add_frame(frame).unwrap();
    }
    let sealed = writer.finish().unwrap();
    let forged = dir.join(format!("{}.pack", sealed.id));
    fs::copy(&forged, remote.join(format!("packs/{}.pack", sealed.id))).unwrap();
    fs::write(
        remote.join(format!("packs/{}.idx", sealed.id)),
        dsv::pack::reader::read_tail(&forged).unwrap(),
    )
    .unwrap();
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
    let objects = remote_objects(plain);
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
    write_remote_pack(env, forged, metadata);
    if !layout.drop_bases {
        write_remote_pack(env, forged, bases_pack);
    }
    write_remote_pack(env, forged, delta_pack);
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
fn a_clone_of_a_remote_with_delta_chains_checks_out_every_version_with_its_bases() {
    let (env, history, url) = delta_remote(false);
    let store = clone_into(&env, &url, "clone");
    check_every_version(&env, &store, &history);
    // The deltas were kept as deltas, and their bases came along: with the remote gone,
    // every version still checks out from this store alone.
    let (deltas, _) = delta_frames_and_chunks(&store);
    assert_eq!(deltas, 5, "every delta frame stored as it came");
    fs::remove_dir_all(env.path("forged-remote")).unwrap();
    for v in 1..=4 {
        fs::remove_dir_all(store.join(format!("out-v{v}"))).unwrap();
    }
    check_every_version(&env, &store, &history);
    ok_in(&env, &store, &["verify", "--full"]);
}

#[test]
fn a_delta_whose_base_the_remote_lacks_is_refused_with_exit_5_and_nothing_stored() {
    let (env, history, url) = delta_remote(true);
    let base = history.id("other", 1, "o.csv").short();
    let store = clone_into(&env, &url, "clone");
    let before = delta_frames_and_chunks(&store);
    let packs_before = fs::read_dir(store.join(".dsv/packs")).unwrap().count();
    let out = store.join("out");
    let stderr = fails_in(
        &env,
        &store,
        &["checkout", "ds@v1", out.to_str().unwrap()],
        5,
    );
    assert!(stderr.contains("origin"), "names the remote: {stderr}");
    assert!(
        stderr.contains(&base),
        "names the base the remote lacks: {stderr}"
    );
    let stderr = fails_in(&env, &store, &["pull", "ds"], 5);
    assert!(stderr.contains("origin"), "names the remote: {stderr}");
    assert!(stderr.contains(&base), "{stderr}");
    assert_eq!(delta_frames_and_chunks(&store), before, "nothing stored");
    assert_eq!(
        fs::read_dir(store.join(".dsv/packs")).unwrap().count(),
        packs_before,
        "no pack left behind"
    );
}

#[test]
fn deltas_whose_bases_make_a_cycle_are_refused_with_exit_5_and_nothing_stored() {
    // `t.csv` of v2 and v3 each a delta against the other: both decode, neither can be read.
    let (env, history, url) = delta_remote_with(false, &|history| {
        let (two, three) = (history.id("ds", 2, "t.csv"), history.id("ds", 3, "t.csv"));
        BTreeMap::from([(two, vec![three]), (three, vec![two])])
    });
    let store = clone_into(&env, &url, "clone");
    let before = delta_frames_and_chunks(&store);
    let packs_before = fs::read_dir(store.join(".dsv/packs")).unwrap().count();
    let out = store.join("out");
    let stderr = fails_in(
        &env,
        &store,
        &["checkout", "ds@v2", out.to_str().unwrap()],
        5,
    );
    assert!(stderr.contains("origin"), "names the remote: {stderr}");
    assert!(stderr.contains("cycle"), "{stderr}");
    assert_eq!(delta_frames_and_chunks(&store), before, "nothing stored");
    assert_eq!(
        fs::read_dir(store.join(".dsv/packs")).unwrap().count(),
        packs_before
    );
    // The versions outside the cycle still check out.
    check_versions(&env, &store, &history, [1]);
}

#[test]
fn pull_of_a_version_whose_delta_bases_no_version_reaches_brings_the_bases() {
    let (env, history, url) = delta_remote(false);
    let store = clone_into(&env, &url, "clone");
    // The head's `t.csv` is a chain 4 deep ending in `other`'s file: all of it comes.
    ok_in(&env, &store, &["pull", "ds"]);
    assert_eq!(delta_frames_and_chunks(&store), (4, 6));
    fs::remove_dir_all(env.path("forged-remote")).unwrap();
    check_versions(&env, &store, &history, [4]);
    ok_in(&env, &store, &["verify", "--full"]);
}

/// Pushes `ds` alone from a store holding its delta chains (whose first base is a chunk of
/// `other`, pulled first into a pack of its own) to `url`, then clones `url` afresh with
/// the source gone: every version checks out.
fn push_carries_the_closure(
    env: &TestEnv,
    history: &History,
    url: &str,
    format_file: Option<&Path>,
) {
    let store = clone_into(
        env,
        &format!("file://{}", env.path("forged-remote").display()),
        "source",
    );
    // `other` first: its chunk lands in a pack of its own, which `ds`'s walk never reaches.
    ok_in(env, &store, &["pull", "other"]);
    check_every_version(env, &store, history);
    let (deltas, _) = delta_frames_and_chunks(&store);
    assert_eq!(deltas, 5);
    ok_in(env, &store, &["remote", "add", "far", url]);
    ok_in(env, &store, &["push", "--remote", "far", "ds"]);
    if let Some(format_file) = format_file {
        let format: serde_json::Value =
            serde_json::from_slice(&fs::read(format_file).unwrap()).unwrap();
        assert_eq!(
            format["format"], 3,
            "a remote given delta frames says so: {format}"
        );
    }
    fs::remove_dir_all(&store).unwrap();
    fs::remove_dir_all(env.path("forged-remote")).unwrap();
    let copy = clone_into(env, url, "second");
    check_every_version(env, &copy, history);
    ok_in(env, &copy, &["verify", "--full"]);
}

#[test]
fn push_to_a_file_remote_carries_every_delta_base_and_marks_the_remote_format_3() {
    let (env, history, _) = delta_remote(false);
    let far = env.path("far");
    fs::create_dir_all(&far).unwrap();
    let url = format!("file://{}", far.display());
    push_carries_the_closure(&env, &history, &url, Some(&far.join("format")));
}

/// On a remote at format 3 already, the push sends in one round: the base's pack goes
/// because a pack it sends holds a delta naming it (on a fresh remote, the second round the
/// new format key causes finds the base missing under a delta the remote now holds).
#[test]
fn push_to_a_remote_at_format_3_sends_the_packs_of_the_bases_its_packs_name() {
    let (env, history, _) = delta_remote(false);
    let far = env.path("far");
    fs::create_dir_all(&far).unwrap();
    fs::write(far.join("format"), r#"{"format":3,"grace_seconds":86400}"#).unwrap();
    let url = format!("file://{}", far.display());
    push_carries_the_closure(&env, &history, &url, Some(&far.join("format")));
}

#[test]
fn push_to_s3_carries_every_delta_base() {
    let (env, history, _) = delta_remote(false);
    use_s3(&env);
    let url = format!("s3://dsv-test/{}", unique_prefix());
    push_carries_the_closure(&env, &history, &url, None);
}

#[test]
fn push_of_data_without_deltas_leaves_the_remote_format_alone() {
    let env = TestEnv::new();
    env.write("d/a.csv", csv(1, 50));
    env.ok(&["commit", "d", "-d", "ds"]);
    let far = env.path("far");
    fs::create_dir_all(&far).unwrap();
    env.ok(&["remote", "add", "far", &format!("file://{}", far.display())]);
    env.ok(&["push", "--remote", "far"]);
    assert!(!far.join("format").exists(), "no format key written");
}

/// `copy` of `ds` from the forged remote to `to_url` (with `to_format`, the destination's
/// format file when it is a directory), then a fresh clone of the destination with the
/// source gone: every version checks out.
fn copy_carries_the_closure(
    env: &TestEnv,
    history: &History,
    to_url: &str,
    to_format: Option<&Path>,
) {
    let store = clone_into(
        env,
        &format!("file://{}", env.path("forged-remote").display()),
        "hub",
    );
    ok_in(env, &store, &["remote", "add", "far", to_url]);
    ok_in(
        env,
        &store,
        &["copy", "ds", "--from", "origin", "--to", "far"],
    );
    if let Some(format_file) = to_format {
        let format: serde_json::Value =
            serde_json::from_slice(&fs::read(format_file).unwrap()).unwrap();
        assert_eq!(format["format"], 3, "{format}");
    }
    fs::remove_dir_all(&store).unwrap();
    fs::remove_dir_all(env.path("forged-remote")).unwrap();
    let copy = clone_into(env, to_url, "second");
    check_every_version(env, &copy, history);
    ok_in(env, &copy, &["verify", "--full"]);
}

#[test]
fn copy_between_file_remotes_carries_every_delta_base() {
    let (env, history, _) = delta_remote(false);
    let far = env.path("far");
    fs::create_dir_all(&far).unwrap();
    let url = format!("file://{}", far.display());
    copy_carries_the_closure(&env, &history, &url, Some(&far.join("format")));
}

#[test]
fn copy_to_s3_carries_every_delta_base() {
    let (env, history, _) = delta_remote(false);
    use_s3(&env);
    let url = format!("s3://dsv-test/{}", unique_prefix());
    copy_carries_the_closure(&env, &history, &url, None);
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
