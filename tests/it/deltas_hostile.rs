//! Delta frames (issue 39) that lie: a base that is missing, a cycle of bases, a zstd frame
//! declaring a window over the reader's cap, a delta that decodes to other bytes than its
//! chunk, and version 2 indexes breaking their rules (too many bases, bases on a plain
//! frame, a delta frame holding a tree). Each is refused with exit 5 and nothing stored:
//! locally (`verify`, `checkout`) and from a file:// remote (`clone`, then `checkout`). Also:
//! a pack or a catalog newer than this dsv stops with "needs a newer dsv" / "made by a newer
//! dsv" before anything is written, and `repair` restores the bases so every delta still
//! reads.
//!
//! The packs are forged here byte by byte (`seal`): the library's writer would refuse to
//! write most of them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use dsv::ObjectId;
use dsv::object::ObjectKind;
use dsv::pack::format::{self, Compression, FrameBases, FrameRecord, ObjectRecord};

use crate::common::{TestEnv, pseudo_random, push_to_file_remote};

/// Bytes of each test file: under the chunker's 16 KiB minimum, so one chunk, whose id is
/// the file id.
const FILE_LEN: usize = 12_000;

/// One frame of a forged pack, as it goes into the file and its index.
struct ForgedFrame {
    compression: Compression,
    stored: Vec<u8>,
    raw_length: u32,
    /// id, kind, offset, length.
    objects: Vec<(ObjectId, ObjectKind, u32, u32)>,
    bases: Vec<ObjectId>,
}

/// Lays out a whole pack: header (`header_version`), the frames, an index (version 2 when a
/// frame lists bases), a trailer ending in `end_magic` (default: the one the index needs).
fn seal(frames: &[ForgedFrame], header_version: u32, end_magic: Option<&[u8; 8]>) -> Vec<u8> {
    let mut bytes = format::MAGIC.to_vec();
    bytes.extend_from_slice(&header_version.to_le_bytes());
    bytes.extend_from_slice(&[0; 4]);
    let (mut records, mut objects, mut deltas) = (Vec::new(), Vec::new(), Vec::new());
    for (number, frame) in frames.iter().enumerate() {
        records.push(FrameRecord {
            offset: bytes.len() as u64,
            stored_length: frame.stored.len() as u32,
            raw_length: frame.raw_length,
            compression: frame.compression,
        });
        bytes.extend_from_slice(&frame.stored);
        for &(id, kind, offset, length) in &frame.objects {
            objects.push(ObjectRecord {
                id,
                kind,
                frame: number as u32,
                offset,
                length,
            });
        }
        if !frame.bases.is_empty() {
            deltas.push(FrameBases {
                frame: number as u32,
                bases: frame.bases.clone(),
            });
        }
    }
    let index = format::encode_index(&records, &objects, &deltas);
    let index_offset = bytes.len() as u64;
    bytes.extend_from_slice(&index);
    bytes.extend_from_slice(&index_offset.to_le_bytes());
    bytes.extend_from_slice(&(index.len() as u64).to_le_bytes());
    bytes.extend_from_slice(blake3::hash(&index).as_bytes());
    let version = if deltas.is_empty() { 1 } else { 2 };
    bytes.extend_from_slice(end_magic.unwrap_or(format::end_magic(version)));
    bytes
}

/// A frame holding `objects` stored as is.
fn plain_frame(objects: &[(ObjectId, ObjectKind, Vec<u8>)]) -> ForgedFrame {
    let mut stored = Vec::new();
    let mut listed = Vec::new();
    for (id, kind, bytes) in objects {
        listed.push((*id, *kind, stored.len() as u32, bytes.len() as u32));
        stored.extend_from_slice(bytes);
    }
    ForgedFrame {
        compression: Compression::None,
        raw_length: stored.len() as u32,
        stored,
        objects: listed,
        bases: Vec::new(),
    }
}

/// One zstd frame of `raw` against `prefix`, as dsv's writer compresses a delta frame.
fn delta_compress(prefix: &[u8], raw: &[u8]) -> Vec<u8> {
    dsv::pack::DeltaCompressor::default()
        .compress(3, prefix, raw)
        .unwrap()
}

/// One zstd frame of `raw` against `prefix` whose header declares a window of
/// 2^`window_log` bytes: a frame without its content size (so its header has a window
/// descriptor), that descriptor then raised. Its blocks are as zstd wrote them, so a decoder
/// whose window cap allows it decodes it to `raw` (checked here).
fn delta_with_window(prefix: &[u8], raw: &[u8], window_log: u32) -> Vec<u8> {
    use zstd::zstd_safe::{CCtx, CParameter, DCtx, DParameter};
    let mut context = CCtx::create();
    context
        .set_parameter(CParameter::CompressionLevel(3))
        .unwrap();
    context
        .set_parameter(CParameter::ContentSizeFlag(false))
        .unwrap();
    context.ref_prefix(prefix).unwrap();
    let mut stored = Vec::with_capacity(zstd::zstd_safe::compress_bound(raw.len()));
    context.compress2(&mut stored, raw).unwrap();
    // Magic (4 bytes), then the frame header descriptor: no single segment, so byte 5 is the
    // window descriptor (exponent in the high 5 bits: window log = 10 + exponent).
    assert_eq!(
        stored[4] & 0x20,
        0,
        "a single-segment frame has no window byte"
    );
    stored[5] = ((window_log - 10) << 3) as u8;
    // Only the window's size stands between this frame and its bytes.
    let mut decoder = DCtx::create();
    decoder
        .set_parameter(DParameter::WindowLogMax(window_log))
        .unwrap();
    decoder.ref_prefix(prefix).unwrap();
    let mut out = Vec::with_capacity(raw.len());
    decoder.decompress(&mut out, &stored).unwrap();
    assert!(out == raw);
    stored
}

/// A delta frame holding chunk `id` (`raw` is what it decodes to: its own bytes, or others
/// for a forgery), listing `bases`, compressed against `prefix`.
fn delta_frame(id: ObjectId, raw: &[u8], bases: Vec<ObjectId>, prefix: &[u8]) -> ForgedFrame {
    ForgedFrame {
        compression: Compression::Delta,
        stored: delta_compress(prefix, raw),
        raw_length: raw.len() as u32,
        objects: vec![(id, ObjectKind::Chunk, 0, raw.len() as u32)],
        bases,
    }
}

/// What a forgery does to one object of an honest pack: `None` keeps it in a plain frame
/// with its neighbours; `Some(frame)` puts it in that frame of its own.
type Forge<'a> = &'a dyn Fn(&ObjectId, ObjectKind, &[u8]) -> Option<ForgedFrame>;

/// A forgery held (see [`Forge`]).
type Forger = Box<dyn Fn(&ObjectId, ObjectKind, &[u8]) -> Option<ForgedFrame>>;

/// Rewrites every pack in `packs` (a store's or a file remote's `packs/`) as a forger would:
/// every object as the honest store `source` (its `.dsv`) reads it, in one stored-as-is frame
/// per original frame, except those `forge` takes, each in the frame it makes; with
/// `header_version` and `end_magic` (default: 1 and the index's own). On a remote the `.idx`
/// goes beside. Returns how many objects `forge` took.
fn rewrite_packs(
    source: &Path,
    packs: &Path,
    remote: bool,
    forge: Forge<'_>,
    header_version: u32,
    end_magic: Option<&[u8; 8]>,
) -> usize {
    let store = dsv::Store::open(source).unwrap();
    let mut reader = store.reader();
    let names: Vec<PathBuf> = std::fs::read_dir(packs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pack"))
        .collect();
    let mut forged = 0;
    for path in names {
        let file = std::fs::File::open(&path).unwrap();
        let index = dsv::pack::reader::read_index(&file, &path).unwrap();
        let mut frames = Vec::new();
        for number in 0..index.frames.len() {
            let mut kept = Vec::new();
            for object in index.objects.iter().filter(|o| o.frame as usize == number) {
                let bytes = reader.bytes(&object.id, object.kind).unwrap();
                match forge(&object.id, object.kind, &bytes) {
                    Some(frame) => {
                        forged += 1;
                        frames.push(frame);
                    }
                    None => kept.push((object.id, object.kind, bytes)),
                }
            }
            if !kept.is_empty() {
                frames.push(plain_frame(&kept));
            }
        }
        let bytes = seal(&frames, header_version, end_magic);
        let id = ObjectId::of(&bytes);
        std::fs::remove_file(&path).unwrap();
        std::fs::write(packs.join(format!("{id}.pack")), &bytes).unwrap();
        if remote {
            std::fs::remove_file(path.with_extension("idx")).unwrap();
            let file = std::fs::File::open(packs.join(format!("{id}.pack"))).unwrap();
            let index_offset = {
                use std::os::unix::fs::FileExt;
                let mut trailer = [0u8; 8];
                file.read_exact_at(&mut trailer, bytes.len() as u64 - format::TRAILER_LEN)
                    .unwrap();
                u64::from_le_bytes(trailer) as usize
            };
            std::fs::write(packs.join(format!("{id}.idx")), &bytes[index_offset..]).unwrap();
        }
    }
    forged
}

/// An honest store with dataset `ds`: version 1 holds `a.bin`; version 2 `a.bin` edited a
/// little and `b.bin`, itself `a.bin` edited another way. Each file is one chunk.
struct Honest {
    env: TestEnv,
    /// File (and chunk) ids by name: `a1` (version 1's `a.bin`), `a2`, `b2`.
    ids: HashMap<&'static str, ObjectId>,
    bytes: HashMap<&'static str, Vec<u8>>,
}

fn edited(base: &[u8], seed: u64) -> Vec<u8> {
    let mut out = base.to_vec();
    for (n, at) in [100usize, 4000, 9000].into_iter().enumerate() {
        out[at..at + 8].copy_from_slice(&pseudo_random(8, seed + n as u64));
    }
    out
}

fn honest_store() -> Honest {
    let env = TestEnv::new();
    let a1 = pseudo_random(FILE_LEN, 39);
    let a2 = edited(&a1, 1);
    let b2 = edited(&a1, 7);
    env.write("d/a.bin", &a1);
    env.ok(&["commit", "d", "-d", "ds", "-m", "one", "--no-deltas"]);
    env.write("d/a.bin", &a2);
    env.write("d/b.bin", &b2);
    env.ok(&["commit", "d", "-d", "ds", "-m", "two", "--no-deltas"]);
    let mut ids = HashMap::new();
    let mut bytes = HashMap::new();
    for (name, content) in [("a1", a1), ("a2", a2), ("b2", b2)] {
        ids.insert(name, ObjectId::of(&content));
        bytes.insert(name, content);
    }
    Honest { env, ids, bytes }
}

impl Honest {
    fn id(&self, name: &str) -> ObjectId {
        self.ids[name]
    }

    fn bytes(&self, name: &str) -> &[u8] {
        &self.bytes[name]
    }

    /// Rewrites this store's own packs with `forge`, then rebuilds the catalog from them
    /// (`dsv repair`, which checks delta frames from the index only).
    fn forge_locally(&self, forge: Forge<'_>) -> serde_json::Value {
        let store = self.env.path(".dsv");
        let forged = rewrite_packs(&store, &store.join("packs"), false, forge, 1, None);
        assert!(forged > 0, "the forgery found its objects");
        self.env.json(&["repair"])
    }

    /// Pushes `ds` to a file remote, rewrites the remote's packs with `forge` (objects read
    /// from this honest store), and returns the remote's URL.
    fn forge_remote(
        &self,
        forge: Forge<'_>,
        header_version: u32,
        end_magic: Option<&[u8; 8]>,
    ) -> String {
        let (remote, url) = push_to_file_remote(&self.env, "remote", "ds");
        let forged = rewrite_packs(
            &self.env.path(".dsv"),
            &remote.join("packs"),
            true,
            forge,
            header_version,
            end_magic,
        );
        assert!(forged > 0 || end_magic.is_some() || header_version != 1);
        url
    }
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The chunk ids the packs of the store at `store` (its `.dsv`) index.
fn chunks_stored(store: &Path) -> Vec<ObjectId> {
    let Ok(dir) = std::fs::read_dir(store.join("packs")) else {
        return Vec::new();
    };
    let packs: Vec<std::path::PathBuf> = dir
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "pack"))
        .collect();
    crate::common::chunks_in_packs(&packs)
}

/// `dsv verify` finds a problem naming every one of `names` (exit 5); `dsv checkout ds` is
/// refused with exit 5 and writes no file.
fn refused_locally(env: &TestEnv, names: &[String]) {
    let out = env.run(&["--json", "verify"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(5), "{report}");
    let problems = report["problems"].to_string();
    for name in names {
        assert!(problems.contains(name.as_str()), "{name} not in {problems}");
    }
    let out = env.run(&["checkout", "ds", "out"]);
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    assert!(
        !env.path("out/a.bin").exists() && !env.path("out/b.bin").exists(),
        "a refused checkout wrote a file"
    );
}

/// A clone of `url` is made (metadata only), and its checkout of `ds` is refused with exit 5
/// for `reason` (a part of its message): no file written, and no pack of the clone holds a
/// chunk of version 2. Returns the message.
fn refused_from_remote(honest: &Honest, url: &str, reason: &str) -> String {
    let victim = TestEnv::bare();
    let out = victim.run(&["clone", url, "c"]);
    let mut text = stderr(&out);
    if out.status.success() {
        let store = victim.path("c");
        let out = victim.run(&["--store", store.to_str().unwrap(), "checkout", "ds", "out"]);
        text = stderr(&out);
        assert_eq!(out.status.code(), Some(5), "{text}");
        assert!(!victim.path("out/a.bin").exists() && !victim.path("out/b.bin").exists());
    } else {
        assert_eq!(out.status.code(), Some(5), "{text}");
    }
    assert!(
        text.contains(reason),
        "refused, but not for {reason:?}: {text}"
    );
    let stored = chunks_stored(&victim.path("c/.dsv"));
    for name in ["a2", "b2"] {
        assert!(
            !stored.contains(&honest.id(name)),
            "the clone stored chunk {name} from a forged remote"
        );
    }
    text
}

/// The four hostile delta frames: what each is called, and how it is forged into an honest
/// store (chunk a2, version 2's `a.bin`, is the one forged).
#[derive(Clone, Copy, Debug)]
enum Hostile {
    /// a2 as a delta against a chunk no store holds.
    MissingBase,
    /// a2's base is b2 and b2's base is a2.
    Cycle,
    /// a2 against a1, its zstd header declaring a 1 GiB window (the cap is 16 MiB,
    /// `DELTA_WINDOW_LOG_MAX`): a frame zstd would decode, refused before it is decoded.
    OversizedWindow,
    /// a2 against a1, decoding to b2's bytes (the result is hashed).
    WrongResult,
}

const HOSTILE: [Hostile; 4] = [
    Hostile::MissingBase,
    Hostile::Cycle,
    Hostile::OversizedWindow,
    Hostile::WrongResult,
];

/// A chunk that no store holds, and its id.
fn ghost() -> (Vec<u8>, ObjectId) {
    let ghost = pseudo_random(FILE_LEN, 99);
    let id = ObjectId::of(&ghost);
    (ghost, id)
}

impl Hostile {
    /// The forgery, made from `honest`'s contents.
    fn forge(self, honest: &Honest) -> Forger {
        let (a1, a2, b2) = (honest.id("a1"), honest.id("a2"), honest.id("b2"));
        let (a1_bytes, a2_bytes) = (honest.bytes("a1").to_vec(), honest.bytes("a2").to_vec());
        let b2_bytes = honest.bytes("b2").to_vec();
        let chunk = move |id: &ObjectId, kind: ObjectKind, wanted: ObjectId| {
            *id == wanted && kind == ObjectKind::Chunk
        };
        match self {
            Hostile::MissingBase => {
                let (ghost, ghost_id) = ghost();
                Box::new(move |id, kind, bytes| {
                    chunk(id, kind, a2).then(|| delta_frame(a2, bytes, vec![ghost_id], &ghost))
                })
            }
            Hostile::Cycle => Box::new(move |id, kind, bytes| {
                if chunk(id, kind, a2) {
                    Some(delta_frame(a2, bytes, vec![b2], &b2_bytes))
                } else if chunk(id, kind, b2) {
                    Some(delta_frame(b2, bytes, vec![a2], &a2_bytes))
                } else {
                    None
                }
            }),
            Hostile::OversizedWindow => {
                const { assert!(30 > format::DELTA_WINDOW_LOG_MAX) };
                Box::new(move |id, kind, bytes| {
                    chunk(id, kind, a2).then(|| ForgedFrame {
                        compression: Compression::Delta,
                        stored: delta_with_window(&a1_bytes, bytes, 30),
                        raw_length: bytes.len() as u32,
                        objects: vec![(a2, ObjectKind::Chunk, 0, bytes.len() as u32)],
                        bases: vec![a1],
                    })
                })
            }
            Hostile::WrongResult => Box::new(move |id, kind, _| {
                chunk(id, kind, a2).then(|| delta_frame(a2, &b2_bytes, vec![a1], &a1_bytes))
            }),
        }
    }

    /// What verify's problem names besides the chunk, and what a clone's checkout says.
    fn named(self) -> (String, String) {
        match self {
            Hostile::MissingBase => (ghost().1.short(), ghost().1.short()),
            Hostile::Cycle => ("cycle".into(), "cycle".into()),
            Hostile::OversizedWindow => ("window".into(), "window".into()),
            Hostile::WrongResult => ("hash".into(), "does not match its hash".into()),
        }
    }
}

/// Each hostile delta frame in a local store: `verify` names the chunk and what is wrong
/// (the missing base by id), exit 5; `checkout` refuses with exit 5 and writes no file.
#[test]
fn hostile_delta_frames_are_refused_locally() {
    for hostile in HOSTILE {
        let honest = honest_store();
        honest.forge_locally(&*hostile.forge(&honest));
        let (named, _) = hostile.named();
        refused_locally(&honest.env, &[honest.id("a2").short(), named]);
    }
}

/// Each hostile delta frame on a file remote: the checkout of a clone is refused for its
/// reason, exit 5, and no pack of the clone holds the forged chunk (nor b2).
#[test]
fn hostile_delta_frames_are_refused_from_a_remote() {
    for hostile in HOSTILE {
        let honest = honest_store();
        let url = honest.forge_remote(&*hostile.forge(&honest), 1, None);
        let (_, reason) = hostile.named();
        refused_from_remote(&honest, &url, &reason);
    }
}

/// Version 2 indexes that break their rules: nine bases, bases listed on a plain frame, a
/// delta frame holding a tree. A remote's `.idx` is refused before anything is stored; a
/// local pack is not indexed by `repair` (its data then missing: verify and checkout exit 5).
#[test]
fn a_version_2_index_breaking_its_rules_is_refused() {
    type Case = (&'static str, Box<dyn Fn(&Honest) -> Forger>);
    let cases: Vec<Case> = vec![
        (
            "more than 8 bases",
            Box::new(|h: &Honest| {
                let (a1, a2) = (h.id("a1"), h.id("a2"));
                let prefix = h.bytes("a1").repeat(9);
                Box::new(move |id: &ObjectId, kind: ObjectKind, bytes: &[u8]| {
                    (*id == a2 && kind == ObjectKind::Chunk)
                        .then(|| delta_frame(a2, bytes, vec![a1; 9], &prefix))
                })
            }),
        ),
        (
            "not a delta frame",
            Box::new(|h: &Honest| {
                let (a1, a2) = (h.id("a1"), h.id("a2"));
                Box::new(move |id: &ObjectId, kind: ObjectKind, bytes: &[u8]| {
                    (*id == a2 && kind == ObjectKind::Chunk).then(|| ForgedFrame {
                        bases: vec![a1],
                        ..plain_frame(&[(a2, ObjectKind::Chunk, bytes.to_vec())])
                    })
                })
            }),
        ),
        (
            "holds chunks only",
            Box::new(|h: &Honest| {
                let (a1, prefix) = (h.id("a1"), h.bytes("a1").to_vec());
                Box::new(move |id: &ObjectId, kind: ObjectKind, bytes: &[u8]| {
                    (kind == ObjectKind::Tree).then(|| ForgedFrame {
                        objects: vec![(*id, ObjectKind::Tree, 0, bytes.len() as u32)],
                        ..delta_frame(*id, bytes, vec![a1], &prefix)
                    })
                })
            }),
        ),
    ];
    for (expected, make) in cases {
        // From a remote: the .idx is refused, the clone stores nothing of it.
        let honest = honest_store();
        let forge = make(&honest);
        let url = honest.forge_remote(&*forge, 1, None);
        refused_from_remote(&honest, &url, expected);
        // Locally: repair leaves the pack unindexed, naming why, and restores no name of the
        // version only it held.
        let honest = honest_store();
        let version_2 = crate::common::version_ids(&honest.env, "ds")[0].clone();
        let forge = make(&honest);
        let report = honest.forge_locally(&*forge);
        assert!(
            report["damaged_packs"].to_string().contains(expected),
            "{expected}: {report}"
        );
        let missing = report["missing_versions"].as_array().unwrap();
        assert!(missing.contains(&version_2.as_str().into()), "{report}");
    }
}

/// A pack of a format newer than this dsv (end magic `DSVPEND3`; locally also header version
/// 3): from a remote, the clone stops with "needs a newer dsv" (exit 3, not a corrupt remote)
/// before it stores anything; locally, repair leaves such a pack unindexed, naming why.
#[test]
fn a_pack_or_a_catalog_newer_than_this_dsv_is_refused() {
    a_pack_newer_than_this_dsv_needs_a_newer_dsv();
    a_catalog_newer_than_this_dsv_is_store_too_new();
}

fn a_pack_newer_than_this_dsv_needs_a_newer_dsv() {
    let keep = |_: &ObjectId, _: ObjectKind, _: &[u8]| None;
    let honest = honest_store();
    let url = honest.forge_remote(&keep, 1, Some(b"DSVPEND3"));
    let victim = TestEnv::bare();
    let out = victim.run(&["clone", &url, "c"]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(text.contains("needs a newer dsv"), "{text}");
    assert!(text.contains("pack index version 3"), "{text}");
    assert!(!text.contains("corrupt"), "{text}");
    assert!(
        !victim.path("c").exists(),
        "a refused clone left {:?}",
        victim.path("c")
    );

    for (header_version, end_magic, what) in [
        (1, Some(b"DSVPEND3"), "pack index version 3"),
        (3, None, "pack format version 3"),
    ] {
        let honest = honest_store();
        let store = honest.env.path(".dsv");
        rewrite_packs(
            &store,
            &store.join("packs"),
            false,
            &keep,
            header_version,
            end_magic,
        );
        let report = honest.env.json(&["repair"]);
        let damaged = report["damaged_packs"].to_string();
        assert!(damaged.contains("needs a newer dsv"), "{report}");
        assert!(damaged.contains(what), "{report}");
        assert_eq!(report["packs"], 0, "{report}");
    }
}

/// A catalog at a schema newer than this dsv knows (15: one past deltas' 14) stops every
/// command with StoreTooNew before anything is written.
fn a_catalog_newer_than_this_dsv_is_store_too_new() {
    let honest = honest_store();
    let catalog = honest.env.path(".dsv/catalog.db");
    let connection = rusqlite::Connection::open(&catalog).unwrap();
    let schema: u32 = connection
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    assert_eq!(schema, 14, "deltas are schema 14");
    connection.pragma_update(None, "user_version", 15).unwrap();
    drop(connection);
    let before = std::fs::read(honest.env.path(".dsv/reflog")).unwrap();
    for args in [&["log", "ds"][..], &["checkout", "ds", "out"], &["verify"]] {
        let error = honest.env.json_error(args, 3);
        assert_eq!(error["kind"], "user", "{args:?}: {error}");
        let message = error["message"].as_str().unwrap();
        assert!(message.contains("made by a newer dsv"), "{error}");
        assert!(message.contains("catalog schema 15"), "{error}");
        assert_eq!(
            error["hints"][0], "upgrade dsv to open this store",
            "{error}"
        );
    }
    assert!(!honest.env.path("out").exists());
    assert_eq!(
        std::fs::read(honest.env.path(".dsv/reflog")).unwrap(),
        before
    );
}

/// Repair restores each delta frame's bases from the packs' version 2 indexes: with the
/// catalog deleted, `dsv repair` rebuilds it, every version checks out byte for byte, and
/// verify decodes every delta against its bases. First with deltas forged here (a chain two
/// deep, a frame with two bases), then with the deltas `dsv commit` writes.
#[test]
fn repair_restores_the_bases_and_every_delta_still_reads() {
    let honest = honest_store();
    let (a1, a2, b2) = (honest.id("a1"), honest.id("a2"), honest.id("b2"));
    let (a1_bytes, a2_bytes) = (honest.bytes("a1").to_vec(), honest.bytes("a2").to_vec());
    // a2 against a1; b2 against a2 and a1 (two bases, a chain two deep).
    let forge = |id: &ObjectId, kind: ObjectKind, bytes: &[u8]| {
        if kind != ObjectKind::Chunk {
            None
        } else if *id == a2 {
            Some(delta_frame(a2, bytes, vec![a1], &a1_bytes))
        } else if *id == b2 {
            Some(delta_frame(
                b2,
                bytes,
                vec![a2, a1],
                &[a2_bytes.as_slice(), &a1_bytes].concat(),
            ))
        } else {
            None
        }
    };
    honest.forge_locally(&forge);
    let check = |env: &TestEnv| {
        let report = env.json(&["verify", "--full"]);
        assert!(
            report["problems"].as_array().unwrap().is_empty(),
            "{report}"
        );
        let catalog = rusqlite::Connection::open(env.path(".dsv/catalog.db")).unwrap();
        let deltas: i64 = catalog
            .query_row(
                "SELECT count(*) FROM frames WHERE bases IS NOT NULL",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(deltas, 2);
        for (revision, files) in [("ds@latest~1", &["a1"][..]), ("ds", &["a2", "b2"])] {
            let dir = format!("out-{}", revision.replace(['@', '~'], "-"));
            env.ok(&["checkout", revision, &dir, "--force"]);
            for name in files {
                let file = if name.starts_with('a') {
                    "a.bin"
                } else {
                    "b.bin"
                };
                assert!(
                    std::fs::read(env.path(&format!("{dir}/{file}"))).unwrap()
                        == honest.bytes(name)
                );
            }
        }
    };
    check(&honest.env);
    std::fs::remove_file(honest.env.path(".dsv/catalog.db")).unwrap();
    let report = honest.env.json(&["repair"]);
    assert!(
        report["damaged_packs"].as_array().unwrap().is_empty(),
        "{report}"
    );
    check(&honest.env);

    // The deltas a commit writes (forward, against the parent's chunks): the same.
    let env = TestEnv::new();
    for version in 0..3 {
        env.write("d/series.csv", series(version));
        env.ok(&["commit", "d", "-d", "ts", "-m", &format!("v{version}")]);
    }
    let deltas = |env: &TestEnv| -> i64 {
        rusqlite::Connection::open(env.path(".dsv/catalog.db"))
            .unwrap()
            .query_row(
                "SELECT count(*) FROM frames WHERE bases IS NOT NULL",
                [],
                |r| r.get(0),
            )
            .unwrap()
    };
    let written = deltas(&env);
    assert!(written > 0, "the commits wrote no delta");
    std::fs::remove_file(env.path(".dsv/catalog.db")).unwrap();
    let report = env.json(&["repair"]);
    assert!(
        report["unreadable_deltas"].as_array().unwrap().is_empty(),
        "{report}"
    );
    assert_eq!(deltas(&env), written);
    let versions = crate::common::version_ids(&env, "ts");
    for (age, id) in versions.iter().enumerate() {
        let dir = format!("out-{age}");
        env.ok(&["checkout", &format!("ts@{}", &id[..12]), &dir]);
        let expected = series(versions.len() as u64 - 1 - age as u64);
        assert!(std::fs::read(env.path(&format!("{dir}/series.csv"))).unwrap() == expected);
    }
    let verified = env.json(&["verify", "--full"]);
    assert!(
        verified["problems"].as_array().unwrap().is_empty(),
        "{verified}"
    );
}

/// A daily-growing CSV series, `version` days in: 40 blocks of rows, each block a few rows
/// longer every day, so every chunk changes and shares nothing with the day before.
fn series(version: u64) -> Vec<u8> {
    let mut out = String::from("block,day,value\n");
    for block in 0..40u64 {
        let rows = 200 + block * 3 + version * 4;
        for day in 0..rows {
            let value = (block * 7919 + day * 104_729) % 100_003;
            out.push_str(&format!("B{block:02},{day},{value}\n"));
        }
    }
    out.into_bytes()
}
