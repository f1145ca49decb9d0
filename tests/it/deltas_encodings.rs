//! One chunk, two encodings (issue 39, round 2): a store or a remote can hold a chunk twice,
//! plain and as a delta frame, and a delta copy may not read (its base gone, or two deltas
//! naming each other). Whatever order the packs come in, `repair` indexes a copy that reads,
//! and a store recording a remote's pack indexes records the plain copy, so every fetch path
//! (clone, pull, checkout of remote-only data, `cat`, `copy`) reads a decodable one.
//!
//! Pack ids are the hash of their bytes and packs are indexed in id order, so each forged
//! pack is made again (another missing base, another unused chunk beside it) until its id
//! comes before every other pack holding a copy of its chunks: the order in which the first
//! copy recorded was the unreadable one.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use dsv::ObjectId;
use dsv::object::ObjectKind;

use crate::common::{TestEnv, pseudo_random};

/// Bytes of each file: under the chunker's 16 KiB minimum, so one chunk, whose id is the
/// file id.
const FILE_LEN: usize = 12_000;

/// `base` with a few bytes changed (a delta against it is small).
fn edited(base: &[u8], seed: u64) -> Vec<u8> {
    let mut out = base.to_vec();
    for (n, at) in [100usize, 4000, 9000].into_iter().enumerate() {
        out[at..at + 8].copy_from_slice(&pseudo_random(8, seed + n as u64));
    }
    out
}

/// Three versions of `a.bin`, each an edit of the one before.
fn versions() -> [Vec<u8>; 3] {
    let one = pseudo_random(FILE_LEN, 39);
    let two = edited(&one, 1);
    let three = edited(&two, 11);
    [one, two, three]
}

/// Commits `versions` as `dataset` (tags v1..v3) in `env`, with deltas or `--no-deltas`.
fn commit_versions(env: &TestEnv, dataset: &str, deltas: bool) {
    for (n, bytes) in versions().iter().enumerate() {
        env.write("d/a.bin", bytes);
        let tag = format!("v{}", n + 1);
        let mut args = vec!["commit", "d", "-d", dataset, "-t", tag.as_str()];
        if !deltas {
            args.push("--no-deltas");
        }
        env.ok(&args);
    }
}

/// The `.pack` files in `dir`, but a remote's guard pack (`ff…ff.pack`, not a pack: what
/// stops a dsv that knows only an older remote format).
fn packs_in(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pack"))
        .filter(|p| pack_id(p).bytes().any(|b| b != b'f'))
        .collect()
}

fn pack_id(path: &Path) -> String {
    path.file_stem().unwrap().to_string_lossy().into_owned()
}

/// Every copy of every chunk in the packs at `dir`: chunk -> (pack id, its bases; empty for
/// a plain copy), in pack id order.
fn copies(dir: &Path) -> HashMap<ObjectId, Vec<(String, Vec<ObjectId>)>> {
    let mut packs = packs_in(dir);
    packs.sort();
    let mut out: HashMap<ObjectId, Vec<(String, Vec<ObjectId>)>> = HashMap::new();
    for path in packs {
        let file = fs::File::open(&path).unwrap();
        let index = dsv::pack::reader::read_index(&file, &path).unwrap();
        for object in index.objects.iter().filter(|o| o.kind == ObjectKind::Chunk) {
            out.entry(object.id)
                .or_default()
                .push((pack_id(&path), index.bases_of(object.frame).to_vec()));
        }
    }
    out
}

/// A delta frame holding `bytes` (chunk `id`) against `bases`, whose bytes end to end are
/// `prefix`.
fn delta(
    id: ObjectId,
    bytes: &[u8],
    bases: Vec<ObjectId>,
    prefix: &[u8],
) -> dsv::pack::EncodedFrame {
    let mut frame = dsv::pack::FrameBuilder::default();
    frame.push(id, ObjectKind::Chunk, bytes);
    frame
        .encode_delta(&mut dsv::pack::DeltaCompressor::default(), 3, prefix, bases)
        .unwrap()
}

/// Forges, with `frames(attempt)`, packs in a scratch directory until one's id sorts before
/// every pack of `packs` (a store's or a remote's `packs/`) that holds a copy of one of
/// `chunks`, then moves it there (with its `.idx` when `with_index`: a remote's). Returns
/// its id. (With k such packs, the chance that 5,000 attempts all fail is k / (5,000 + k).)
fn forge_first(
    env: &TestEnv,
    packs: &Path,
    chunks: &[ObjectId],
    with_index: bool,
    frames: &dyn Fn(u64) -> Vec<dsv::pack::EncodedFrame>,
) -> String {
    let held = copies(packs);
    let first = chunks
        .iter()
        .flat_map(|id| held[id].iter().map(|(pack, _)| pack.clone()))
        .min()
        .unwrap();
    for attempt in 0..5_000 {
        let scratch = env.path(&format!("scratch-{attempt}"));
        let id = crate::common::forge_pack_of_frames(env, &scratch, frames(attempt)).to_hex();
        if id < first {
            fs::rename(
                scratch.join(format!("packs/{id}.pack")),
                packs.join(format!("{id}.pack")),
            )
            .unwrap();
            if with_index {
                fs::rename(
                    scratch.join(format!("packs/{id}.idx")),
                    packs.join(format!("{id}.idx")),
                )
                .unwrap();
            }
            fs::remove_dir_all(&scratch).unwrap();
            return id;
        }
        fs::remove_dir_all(&scratch).unwrap();
    }
    panic!("no forged pack sorted first in 5,000 attempts");
}

/// Runs `dsv --store STORE ARGS` in `env`: its output.
fn in_store(env: &TestEnv, store: &Path, args: &[&str]) -> std::process::Output {
    env.command()
        .arg("--store")
        .arg(store)
        .args(args)
        .output()
        .unwrap()
}

/// As [`in_store`], asserting success; stdout.
fn ok_in(env: &TestEnv, store: &Path, args: &[&str]) -> Vec<u8> {
    let out = in_store(env, store, args);
    assert!(
        out.status.success(),
        "dsv {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Checks out every version of each of `datasets` (tags v1..v3) in the store at `store` and
/// compares `a.bin` with what was committed.
fn check_every_version(env: &TestEnv, store: &Path, datasets: &[&str]) {
    for dataset in datasets {
        for (n, bytes) in versions().iter().enumerate() {
            let revision = format!("{dataset}@v{}", n + 1);
            let out = env.path(&format!("out-{}", crate::remote::unique_prefix()));
            ok_in(env, store, &["checkout", &revision, out.to_str().unwrap()]);
            assert!(
                fs::read(out.join("a.bin")).unwrap() == *bytes,
                "{revision}: a.bin is not what was committed"
            );
        }
    }
}

/// A store holding chunk v2 plain (written by a `--no-deltas` commit) and chunk v3 as a
/// forward delta against it, plus a pack listed before both (a gc's old one, killed before it
/// was deleted) holding both again as deltas against a chunk no pack holds, and with `other`,
/// a chunk of its own too; its catalog lost. Returns the store, the forged pack's id, and the
/// ids of v2 and v3.
fn store_with_unreadable_copies(other: bool) -> (TestEnv, String, ObjectId, ObjectId) {
    let env = TestEnv::new();
    let [one, two, three] = versions();
    for (tag, bytes, deltas) in [
        ("v1", &one, false),
        ("v2", &two, false),
        ("v3", &three, true),
    ] {
        env.write("d/a.bin", bytes);
        let mut args = vec!["commit", "d", "-d", "ds", "-t", tag];
        if !deltas {
            args.push("--no-deltas");
        }
        env.ok(&args);
    }
    let packs = env.path(".dsv/packs");
    let (id_two, id_three) = (ObjectId::of(&two), ObjectId::of(&three));
    let before = copies(&packs);
    assert_eq!(before[&id_two].len(), 1);
    assert!(before[&id_two][0].1.is_empty(), "v2 is stored plain");
    assert_eq!(
        before[&id_three],
        [(before[&id_three][0].0.clone(), vec![id_two])],
        "v3 is a delta against v2"
    );
    let forged = forge_first(&env, &packs, &[id_two, id_three], false, &|attempt| {
        let ghost = pseudo_random(FILE_LEN, 1_000 + attempt);
        let ghost_id = ObjectId::of(&ghost);
        let mut frames = vec![
            delta(id_two, &two, vec![ghost_id], &ghost),
            delta(id_three, &three, vec![ghost_id], &ghost),
        ];
        if other {
            let own = pseudo_random(64, 7);
            let mut frame = dsv::pack::FrameBuilder::default();
            frame.push(ObjectId::of(&own), ObjectKind::Chunk, &own);
            frames.push(frame.encode(3));
        }
        frames
    });
    fs::remove_file(env.path(".dsv/catalog.db")).unwrap();
    (env, forged, id_two, id_three)
}

/// `dsv repair` of [`store_with_unreadable_copies`]: reports that it indexed v2's plain copy
/// and v3's delta against v2 (its base reads), passing over the forged copies; the
/// catalog's rows are those (`verify --full` passes, every version reads back).
fn repaired(env: &TestEnv, forged: &str, ids: [ObjectId; 2]) -> serde_json::Value {
    let [id_two, id_three] = ids;
    let report = env.json(&["repair"]);
    assert!(
        report["unreadable_deltas"].as_array().unwrap().is_empty(),
        "{report}"
    );
    let chosen = report["copies_passed_over"].as_array().unwrap();
    assert_eq!(chosen.len(), 2, "{report}");
    let line = |id: &ObjectId| {
        chosen
            .iter()
            .map(|l| l.as_str().unwrap())
            .find(|l| l.contains(&id.to_hex()))
            .unwrap_or_else(|| panic!("{id} not in {report}"))
            .to_string()
    };
    assert!(
        line(&id_two).contains("(plain); passed over pack"),
        "{report}"
    );
    assert!(
        line(&id_three).contains(&format!("(a delta against {})", id_two.short())),
        "{report}"
    );
    for id in [id_two, id_three] {
        assert!(line(&id).contains(forged), "{report}");
    }
    // Nothing deleted: the forged pack is in place.
    assert!(env.path(&format!(".dsv/packs/{forged}.pack")).exists());
    let verified = env.json(&["verify", "--full"]);
    assert!(
        verified["problems"].as_array().unwrap().is_empty(),
        "{verified}"
    );
    check_every_version(env, &env.path(".dsv"), &["ds"]);
    verified
}

/// The forged pack holds only copies: `repair` leaves it unindexed (`verify` lists it among
/// the unreferenced packs). On main, it came first and both chunks were indexed from it:
/// unreadable (`unreadable_deltas`), and verify failed.
#[test]
fn repair_indexes_the_copy_of_a_chunk_that_reads_and_passes_over_a_delta_whose_base_is_gone() {
    let (env, forged, id_two, id_three) = store_with_unreadable_copies(false);
    let verified = repaired(&env, &forged, [id_two, id_three]);
    assert!(
        verified["unreferenced_packs"].to_string().contains(&forged),
        "{verified}"
    );
    // The same choices in words, from a second repair (nothing else changed).
    let text = env.normalize(&env.ok(&["repair"]));
    let text = regex::Regex::new(r"before-repair-\d+-\d+")
        .unwrap()
        .replace_all(&text, "before-repair-[STAMP]");
    // Where a commit's frames land in its pack depends on its worker threads.
    let text = regex::Regex::new(r"at offset \d+")
        .unwrap()
        .replace_all(&text, "at offset [N]");
    insta::assert_snapshot!(text, @r"
    Rebuilt the catalog of [ROOT]/.dsv: 3 packs, 9 objects, 3 versions; restored 1 head, 3 tags, 0 remotes, 0 pins, 0 removals from the ref log
    The old catalog is kept as [ROOT]/.dsv/catalog.db.before-repair-[STAMP]
    note: several copies of chunk [ID]: indexed its copy in pack [ID] at offset [N] (a delta against [SHORT]); passed over pack [ID] at offset [N] (a delta against [SHORT])
    note: several copies of chunk [ID]: indexed its copy in pack [ID] at offset [N] (plain); passed over pack [ID] at offset [N] (a delta against [SHORT])
    note: pack not indexed, every object it holds is indexed from another copy: [ROOT]/.dsv/packs/[ID].pack
    ");
}

/// The forged pack holds a chunk of its own too: `repair` indexes it, but not its copies of
/// v2 and v3, and `verify` does not count those frames, which no read decodes, as problems
/// (`unused_unreadable_deltas`). On main, repair indexed v2 and v3 from them.
#[test]
fn verify_lists_the_delta_frames_repair_passed_over_in_an_indexed_pack_without_failing() {
    let (env, forged, id_two, id_three) = store_with_unreadable_copies(true);
    let verified = repaired(&env, &forged, [id_two, id_three]);
    let unused = verified["unused_unreadable_deltas"].as_array().unwrap();
    assert_eq!(unused.len(), 2, "{verified}");
    for id in [id_two, id_three] {
        assert!(
            unused.iter().any(|l| {
                let l = l.as_str().unwrap();
                l.contains(&forged) && l.contains(&id.to_hex()) && l.contains("not in the store")
            }),
            "{verified}"
        );
    }
    let text = env.ok(&["verify"]);
    assert!(
        text.contains("unused and unreadable: 2 delta frames") && text.contains("consistent"),
        "{text}"
    );
}

/// Two stores push the same versions to one file remote, one with `--no-deltas` (every
/// chunk plain) and one with forward deltas; then a pair of packs listing before every
/// other holds v2 as a delta against v3 and v3 as a delta against v2 (a cycle). A fresh
/// clone reads every version of both datasets byte for byte (checkout, `cat` of data
/// only the remote holds, pull), its store verifies, a `copy` to another remote carries
/// readable copies, and `verify --remote --full` finds nothing wrong (each delta of the
/// remote decodes against the plain copies of its bases). On main the clone recorded the
/// cycle's copies, listed first, and every read of v2 or v3 failed with exit 5.
#[test]
fn a_chunk_a_remote_holds_plain_and_in_a_cycle_of_deltas_is_read_plain_by_every_fetch() {
    let env = TestEnv::new();
    commit_versions(&env, "ds", false);
    let remote = env.path("remote");
    fs::create_dir_all(&remote).unwrap();
    let url = format!("file://{}", remote.display());
    env.ok(&["remote", "add", "origin", &url]);
    env.ok(&["push", "ds"]);
    // The second store: the same content, with deltas, as another dataset.
    let second = TestEnv::new();
    commit_versions(&second, "ds2", true);
    second.ok(&["remote", "add", "origin", &url]);
    second.ok(&["push", "ds2"]);
    let [_, two, three] = versions();
    let (id_two, id_three) = (ObjectId::of(&two), ObjectId::of(&three));
    let held = copies(&remote.join("packs"));
    for id in [id_two, id_three] {
        let encodings = &held[&id];
        assert!(
            encodings.iter().any(|(_, bases)| bases.is_empty())
                && encodings.iter().any(|(_, bases)| !bases.is_empty()),
            "the remote holds {id} plain and as a delta: {encodings:?}"
        );
    }
    // The cycle: two packs, each listed before every other copy of its chunk, each with an
    // unused chunk of its own.
    let packs = remote.join("packs");
    let mut forged = Vec::new();
    for (id, bytes, base, base_bytes) in [
        (id_three, &three, id_two, &two),
        (id_two, &two, id_three, &three),
    ] {
        forged.push(forge_first(&env, &packs, &[id], true, &|attempt| {
            let unused = pseudo_random(64, 5_000 + attempt);
            let mut filler = dsv::pack::FrameBuilder::default();
            filler.push(ObjectId::of(&unused), ObjectKind::Chunk, &unused);
            vec![delta(id, bytes, vec![base], base_bytes), filler.encode(3)]
        }));
    }

    let reader = TestEnv::bare();
    reader.ok(&["clone", &url, "c"]);
    let store = reader.path("c");
    // Data only the remote holds, read by the read engine.
    for (n, bytes) in versions().iter().enumerate() {
        let read = ok_in(&reader, &store, &["cat", &format!("ds2@v{}:a.bin", n + 1)]);
        assert!(read == *bytes, "cat ds2@v{}", n + 1);
    }
    check_every_version(&reader, &store, &["ds", "ds2"]);
    ok_in(&reader, &store, &["pull", "ds"]);
    ok_in(&reader, &store, &["pull", "ds2"]);
    let verified: serde_json::Value =
        serde_json::from_slice(&ok_in(&reader, &store, &["--json", "verify", "--full"])).unwrap();
    assert!(
        verified["problems"].as_array().unwrap().is_empty(),
        "{verified}"
    );
    // The clone's store holds v2 and v3 as they read: no copy of the cycle.
    let local = copies(&store.join(".dsv/packs"));
    for id in [id_two, id_three] {
        for (pack, _) in &local[&id] {
            assert!(
                !forged.contains(pack),
                "the clone stored a copy of the cycle"
            );
        }
    }

    // A copy to another remote carries copies that read: a clone of it reads every version.
    let far = env.path("far");
    fs::create_dir_all(&far).unwrap();
    let far_url = format!("file://{}", far.display());
    ok_in(&reader, &store, &["remote", "add", "far", &far_url]);
    ok_in(
        &reader,
        &store,
        &["copy", "ds", "ds2", "--from", "origin", "--to", "far"],
    );
    let far_reader = TestEnv::bare();
    far_reader.ok(&["clone", &far_url, "c"]);
    check_every_version(&far_reader, &far_reader.path("c"), &["ds", "ds2"]);

    // The remote itself: every delta decodes against a copy of its bases that reads.
    let report: serde_json::Value = serde_json::from_slice(&ok_in(
        &reader,
        &store,
        &["--json", "verify", "--remote", "origin", "--full"],
    ))
    .unwrap();
    assert!(
        report["problems"].as_array().unwrap().is_empty(),
        "{report}"
    );
}
