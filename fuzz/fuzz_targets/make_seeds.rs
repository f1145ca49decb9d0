//! Writes the seed corpora under `$DSV_SEEDS_DIR/<target>/` (default `fuzz/seeds`) from real
//! objects: it imports one of the example archives (`examples/*.tar.gz`: trees, versions, a
//! provenance) and commits a small generated directory on top (a multi-chunk file, so a file
//! map; a symlink, an executable, a subdirectory) into a temporary store, then takes every
//! object, frame and pack tail out of the packs that wrote, a lock file of the result, and the
//! refs, revisions and archive member paths that name them.
//!
//! Not a fuzz target: a libFuzzer binary only because the fuzz crate builds nothing else
//! (so it costs no second build of dsv). Its work runs in the init hook, then it exits:
//! `scripts/fuzz --make-seeds` runs it.
#![no_main]
use std::path::{Path, PathBuf};

use dsv::object::ObjectKind;
use dsv::ops::commit::{CommitOptions, commit};
use dsv::ops::import::{Extract, ImportOptions, import};
use dsv::ops::lock_file;
use dsv::pack::format;
use dsv::pack::reader::{read_tail, verify_pack};
use dsv::progress::NoProgress;
use dsv::remote::RefName;
use dsv::{Revision, Store};
use libfuzzer_sys::fuzz_target;

/// Largest seed written, in bytes: seeds stay small so the committed corpora do.
const MAX_SEED: usize = 48 * 1024;
/// Seeds of one kind at most.
const MAX_PER_TARGET: usize = 12;

struct Seeds {
    root: PathBuf,
}

impl Seeds {
    fn add(&self, target: &str, bytes: &[u8]) {
        if bytes.len() > MAX_SEED {
            return;
        }
        let dir = self.root.join(target);
        std::fs::create_dir_all(&dir).unwrap();
        if std::fs::read_dir(&dir).unwrap().count() >= MAX_PER_TARGET {
            return;
        }
        let name = dsv::ObjectId::of(bytes).to_hex();
        std::fs::write(dir.join(&name[..16]), bytes).unwrap();
    }
}

fn generate(root: &Path) -> dsv::Result<()> {
    let seeds = Seeds {
        root: root.to_path_buf(),
    };
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let work = tempfile::tempdir().unwrap();
    let mut store = Store::init(&work.path().join("store"))?;

    // 1. An import of a real archive (a version with a provenance).
    let archive = repo.join("examples/fivethirtyeight-sample-2022-05-04.tar.gz");
    let mut options = ImportOptions::new(archive.to_str().unwrap());
    options.dataset = Some("fivethirtyeight".into());
    options.extract = Extract::Auto;
    options.tag = Some("v1".into());
    options.settings.requests = 4;
    let imported = import(&mut store, &options, &NoProgress)?;

    // 2. Two commits of a small directory with every entry kind, the second a child.
    let data = work.path().join("data");
    std::fs::create_dir_all(data.join("sub/deeper")).unwrap();
    let noise: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(data.join("sub/big.bin"), &noise).unwrap();
    std::fs::write(data.join("a.csv"), "x,y\n1,2\n").unwrap();
    std::fs::write(data.join("sub/deeper/notes.txt"), "hello\n").unwrap();
    std::fs::write(data.join("run.sh"), "#!/bin/sh\necho hi\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(data.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("../a.csv", data.join("sub/link")).unwrap();
    let mut commit_options = CommitOptions::new("mnist-small");
    commit_options.message = "first\nwith a second line\n".into();
    commit_options.author = Some("ada@example".into());
    let first = commit(&mut store, &data, &commit_options, &NoProgress)?;
    std::fs::write(data.join("a.csv"), "x,y\n1,2\n3,4\n").unwrap();
    commit_options.message = "second".into();
    commit_options.tag = Some("v2".into());
    let second = commit(&mut store, &data, &commit_options, &NoProgress)?;

    // 3. Every pack: its tail, its small frames, and every object inside.
    for entry in std::fs::read_dir(store.packs_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "pack") {
            continue;
        }
        let id: dsv::ObjectId = path.file_stem().unwrap().to_str().unwrap().parse().unwrap();
        let dsv::pack::PackIndex {
            frames, objects, ..
        } = verify_pack(&path, &id, None)?;
        let tail = read_tail(&path)?;
        let pack = std::fs::read(&path).unwrap();
        let index_offset = pack.len() - tail.len();
        // fuzz_pack_tail: 8-byte index offset, then the index (the target builds the trailer).
        let index = &tail[..tail.len() - format::TRAILER_LEN as usize];
        let mut seed = (index_offset as u64).to_le_bytes().to_vec();
        seed.extend_from_slice(index);
        seeds.add("fuzz_pack_tail", &seed);
        for (number, frame) in frames.iter().enumerate() {
            let stored =
                &pack[frame.offset as usize..frame.offset as usize + frame.stored_length as usize];
            let raw = match frame.compression {
                dsv::pack::Compression::None => stored.to_vec(),
                dsv::pack::Compression::Zstd => {
                    zstd::bulk::decompress(stored, frame.raw_length as usize).unwrap()
                }
                // A delta frame's seed needs its bases: fuzz_delta_frame makes its own.
                dsv::pack::Compression::Delta => continue,
            };
            let inside: Vec<_> = objects
                .iter()
                .filter(|o| o.frame as usize == number)
                .collect();
            // fuzz_frame: record, object count, object records (frame renumbered 0), stored.
            let mut seed = Vec::new();
            frame.encode_into(&mut seed);
            let listed: Vec<_> = inside.iter().take(7).collect();
            seed.push(listed.len() as u8);
            for o in &listed {
                let mut o = ***o;
                o.frame = 0;
                o.encode_into(&mut seed);
            }
            seed.extend_from_slice(stored);
            seeds.add("fuzz_frame", &seed);
            for o in inside {
                let bytes = &raw[o.offset as usize..(o.offset + o.length) as usize];
                match o.kind {
                    ObjectKind::Tree => seeds.add("fuzz_tree", bytes),
                    ObjectKind::Version => seeds.add("fuzz_version", bytes),
                    ObjectKind::FileMap => seeds.add("fuzz_file_map", bytes),
                    ObjectKind::Provenance => seeds.add("fuzz_provenance", bytes),
                    ObjectKind::Outboard => {
                        seeds.add("fuzz_outboard", &[o.id.0.as_slice(), bytes].concat())
                    }
                    ObjectKind::Chunk => {}
                }
            }
        }
    }

    // 3b. fuzz_delta: small packs' data and index 2, each with a delta frame against bases
    // held in a stored-as-is frame of the same data (the target takes a base's bytes from
    // there), as a writer encodes them.
    delta_seeds(&seeds, &noise);

    // 4. A lock file of both datasets, as `dsv lock` prints it, and one naming a remote.
    let revisions = [
        Revision::parse("fivethirtyeight@v1").unwrap(),
        Revision::parse("mnist-small@latest~1").unwrap(),
    ];
    let mut lock = lock_file::lock(&store, &revisions)?;
    seeds.add(
        "fuzz_lock_file",
        serde_json::to_string_pretty(&lock).unwrap().as_bytes(),
    );
    for pinned in lock.datasets.values_mut() {
        pinned.remotes.push(lock_file::LockedRemote {
            name: "origin".into(),
            url: "s3://bucket/datasets".into(),
            options: [("endpoint".to_string(), "http://127.0.0.1:9000".to_string())].into(),
        });
    }
    seeds.add(
        "fuzz_lock_file",
        (serde_json::to_string_pretty(&lock).unwrap() + "\n").as_bytes(),
    );

    // 5. Refs as a remote holds them: values and keys.
    for version in [imported.version, first.version, second.version] {
        seeds.add("fuzz_ref", format!("{version}\n").as_bytes());
    }
    for (dataset, tag) in [
        ("fivethirtyeight", None),
        ("fivethirtyeight", Some("v1")),
        ("mnist-small", Some("v2")),
    ] {
        let name = RefName {
            dataset: dataset.into(),
            tag: tag.map(Into::into),
        };
        seeds.add("fuzz_ref", name.key().as_ref().as_bytes());
    }

    // 6. Revisions, every form.
    let short = second.version.short();
    for text in [
        "mnist-small".to_string(),
        "mnist-small@latest".into(),
        "mnist-small@v2".into(),
        format!("mnist-small@{short}"),
        format!("mnist-small@{short}~1"),
        "fivethirtyeight@latest~2".into(),
    ] {
        seeds.add("fuzz_revision", text.as_bytes());
    }

    // 7. Archive member paths from the import's provenance, and a link target.
    let mut reader = store.reader();
    let version = reader.version(&imported.version)?;
    let provenance = reader.provenance(&version.provenance.expect("an import has provenance"))?;
    for file in provenance.files.iter().take(8) {
        if let Some(member) = &file.member {
            seeds.add("fuzz_member_path", member.as_bytes());
        }
    }
    seeds.add("fuzz_member_path", b"./sub/link\0../a.csv");
    seeds.add("fuzz_member_path", b"data/train/0001.png");
    Ok(())
}

/// Seeds of `fuzz_delta` (2 bytes data length, the data, an index 2) from slices of `noise`:
/// a chunk edited in a few places as a delta against the original (one base), against two
/// bases, and against a base the data does not hold (the target then uses its id bytes).
fn delta_seeds(seeds: &Seeds, noise: &[u8]) {
    use dsv::pack::format::{FrameBases, FrameRecord, HEADER_LEN, ObjectRecord, encode_index};
    use dsv::pack::{Compression, DeltaCompressor, FrameBuilder};
    let base = &noise[..12_000];
    let other = &noise[12_000..20_000];
    let mut chunk = base.to_vec();
    for at in [10, 5_000, 11_000] {
        chunk[at] ^= 0x5a;
    }
    let ghost = dsv::ObjectId::of(b"a base no pack holds");
    let cases: [(Vec<&[u8]>, bool); 3] = [
        (vec![base], true),
        (vec![other, base], true),
        (vec![base], false),
    ];
    let mut compressor = DeltaCompressor::default();
    for (bases, held) in cases {
        let prefix: Vec<u8> = bases.concat();
        let mut ids: Vec<dsv::ObjectId> = bases.iter().map(|b| dsv::ObjectId::of(b)).collect();
        if !held {
            ids = vec![ghost];
        }
        let mut builder = FrameBuilder::default();
        builder.push(dsv::ObjectId::of(&chunk), ObjectKind::Chunk, &chunk);
        let Ok(delta) = builder.encode_delta(&mut compressor, 3, &prefix, ids.clone()) else {
            continue;
        };
        let delta_stored = compressor_output(&mut compressor, &prefix, &chunk);
        // Frame 0: the bases as is (when held); frame 1: the delta.
        let mut data = Vec::new();
        let mut frames = Vec::new();
        let mut objects = Vec::new();
        if held {
            let mut offset = 0u32;
            for b in &bases {
                objects.push(ObjectRecord {
                    id: dsv::ObjectId::of(b),
                    kind: ObjectKind::Chunk,
                    frame: 0,
                    offset,
                    length: b.len() as u32,
                });
                offset += b.len() as u32;
            }
            frames.push(FrameRecord {
                offset: HEADER_LEN,
                stored_length: prefix.len() as u32,
                raw_length: prefix.len() as u32,
                compression: Compression::None,
            });
            data.extend_from_slice(&prefix);
        }
        assert_eq!(delta.stored_len(), delta_stored.len());
        let frame = frames.len() as u32;
        frames.push(FrameRecord {
            offset: HEADER_LEN + data.len() as u64,
            stored_length: delta_stored.len() as u32,
            raw_length: chunk.len() as u32,
            compression: Compression::Delta,
        });
        objects.push(ObjectRecord {
            id: dsv::ObjectId::of(&chunk),
            kind: ObjectKind::Chunk,
            frame,
            offset: 0,
            length: chunk.len() as u32,
        });
        data.extend_from_slice(&delta_stored);
        let index = encode_index(&frames, &objects, &[FrameBases { frame, bases: ids }]);
        let mut seed = (data.len() as u16).to_le_bytes().to_vec();
        seed.extend_from_slice(&data);
        seed.extend_from_slice(&index);
        seeds.add("fuzz_delta", &seed);
    }
}

/// The stored bytes of `raw` compressed against `prefix` at level 3, as
/// `FrameBuilder::encode_delta` stores them (its frame keeps them private).
fn compressor_output(
    compressor: &mut dsv::pack::DeltaCompressor,
    prefix: &[u8],
    raw: &[u8],
) -> Vec<u8> {
    compressor.compress(3, prefix, raw).unwrap()
}

/// Ends the process before libFuzzer starts fuzzing (a plain function, so the code after the
/// init hook does not read as unreachable).
fn exit(code: i32) {
    std::process::exit(code)
}

fuzz_target!(
    init: {
        let root = std::env::var_os("DSV_SEEDS_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds"));
        let code = match generate(&root) {
            Ok(()) => {
                eprintln!("make_seeds: seeds written under {}", root.display());
                0
            }
            Err(e) => {
                eprintln!("make_seeds: {e}");
                1
            }
        };
        exit(code);
    },
    |_data: &[u8]| {}
);
