//! A remote whose file map of one file is replaced by another file's map of the same length
//! (issue 34, A2 and A3): a clone that catches it keeps naming the remote, never blames
//! itself, and fetches the map again as promised; `verify --remote --full` finds it, and
//! `copy` refuses to forward it.

use std::path::{Path, PathBuf};

use dsv::object::ObjectKind;

use crate::common::{TestEnv, pseudo_random, push_to_file_remote};

/// The honest store (dataset `ds`: `f.bin` and `g.bin`, 8 MB each, `g.bin` equal to `f.bin`
/// for its first MiB and different after), its remote `origin` at the returned URL
/// where every pack now lists `g.bin`'s map under `f.bin`'s id, `f.bin`'s content and id.
struct Forged {
    honest: TestEnv,
    url: String,
    content: Vec<u8>,
}

fn forged_remote() -> Forged {
    let honest = TestEnv::new();
    let content = pseudo_random(8_000_000, 41);
    let mut other = content[..1024 * 1024].to_vec();
    other.extend_from_slice(&pseudo_random(8_000_000 - 1024 * 1024, 42));
    honest.write("d/f.bin", &content);
    honest.write("d/g.bin", &other);
    honest.ok(&["commit", "d", "-d", "ds"]);
    let (remote, url) = push_to_file_remote(&honest, "origin-remote", "ds");
    let id_of = |name: &str| -> dsv::ObjectId {
        let listing = honest.json(&["ls", "ds"]);
        listing
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["path"] == name)
            .unwrap()["id"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    let (f, g) = (id_of("f.bin"), id_of("g.bin"));
    let store = dsv::Store::open(&honest.path(".dsv")).unwrap();
    let g_map = store.reader().bytes(&g, ObjectKind::FileMap).unwrap();
    replace_object(&honest, &remote, f, ObjectKind::FileMap, &g_map);
    Forged {
        honest,
        url,
        content,
    }
}

/// Rewrites every pack of the file remote at `remote` with object `id` of `kind` holding
/// `bytes` instead (every other object as `source`'s store holds it).
fn replace_object(
    source: &TestEnv,
    remote: &Path,
    id: dsv::ObjectId,
    kind: ObjectKind,
    bytes: &[u8],
) {
    let store = dsv::Store::open(&source.path(".dsv")).unwrap();
    let mut reader = store.reader();
    let packs = remote.join("packs");
    let names: Vec<PathBuf> = std::fs::read_dir(&packs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pack"))
        .collect();
    let temp = source.path("rewritten");
    std::fs::create_dir_all(&temp).unwrap();
    let mut replaced = 0;
    for path in names {
        let file = std::fs::File::open(&path).unwrap();
        let dsv::pack::PackIndex {
            frames, objects, ..
        } = dsv::pack::reader::read_index(&file, &path).unwrap();
        let mut writer = dsv::pack::PackWriter::create(&temp, &source.path(".dsv/tmp")).unwrap();
        for index in 0..frames.len() {
            let mut frame = dsv::pack::FrameBuilder::default();
            for object in objects.iter().filter(|o| o.frame as usize == index) {
                if object.id == id && object.kind == kind {
                    frame.push(object.id, object.kind, bytes);
                    replaced += 1;
                } else {
                    let stored = reader.bytes(&object.id, object.kind).unwrap();
                    frame.push(object.id, object.kind, &stored);
                }
            }
            if !frame.is_empty() {
                writer.add_frame(frame.encode(3)).unwrap();
            }
        }
        let sealed = writer.finish().unwrap();
        let new = temp.join(format!("{}.pack", sealed.id));
        std::fs::remove_file(&path).unwrap();
        std::fs::remove_file(path.with_extension("idx")).unwrap();
        std::fs::copy(&new, packs.join(format!("{}.pack", sealed.id))).unwrap();
        std::fs::write(
            packs.join(format!("{}.idx", sealed.id)),
            dsv::pack::reader::read_tail(&new).unwrap(),
        )
        .unwrap();
    }
    assert_eq!(replaced, 1, "the remote held the object once");
}

/// Bytes of the packs in the store at `store`.
fn stored_bytes(store: &Path) -> u64 {
    std::fs::read_dir(store.join(".dsv/packs"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

/// Runs `dsv --store c ARGS` in `env`.
fn in_clone(env: &TestEnv, args: &[&str]) -> std::process::Output {
    let store = env.path("c");
    let mut full = vec!["--store", store.to_str().unwrap()];
    full.extend_from_slice(args);
    env.run(&full)
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A2: the forged map, once caught and forgotten, is fetched again and caught again, each
/// time naming the remote; the clone never says its own data is missing, and its `verify`
/// finds nothing wrong (the map is not here, it is on the remote).
#[test]
fn a_forgotten_forged_map_keeps_naming_the_remote_and_verify_stays_clean() {
    let forged = forged_remote();
    let victim = TestEnv::bare();
    victim.ok(&["clone", &forged.url, "c"]);
    // The first MiB is the same in both files: its blocks pass.
    let out = in_clone(&victim, &["cat", "ds:f.bin", "--range", "0..100"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(out.stdout == forged.content[..100]);
    for attempt in 0..3 {
        let out = in_clone(&victim, &["cat", "ds:f.bin", "--range", "2000000..2000100"]);
        let text = stderr(&out);
        assert_eq!(out.status.code(), Some(5), "attempt {attempt}: {text}");
        assert!(text.contains("remote origin"), "attempt {attempt}: {text}");
        assert!(
            !text.contains("missing from the store"),
            "attempt {attempt}: {text}"
        );
        assert!(!text.contains("restored"), "attempt {attempt}: {text}");
        assert!(
            !out.stdout
                .windows(100)
                .any(|w| w == &forged.content[2_000_000..2_000_100])
        );
    }
    // The whole file: the same.
    let out = in_clone(&victim, &["cat", "ds:f.bin"]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(5), "{text}");
    assert!(text.contains("remote origin"), "{text}");
    assert!(!text.contains("missing from the store"), "{text}");
    // The local store is healthy: the map is on the remote, not lost here.
    let out = in_clone(&victim, &["--json", "verify"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert!(
        report["problems"].as_array().unwrap().is_empty(),
        "{report}"
    );
    assert!(
        report["files_on_remotes"].as_u64().unwrap() >= 1,
        "{report}"
    );
    // The honest file next to it reads.
    let out = in_clone(&victim, &["cat", "ds:g.bin", "--range", "0..10"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// A3: `verify --remote --full` proves every file map of every ref against its file id and
/// reports the forged one (the file, the remote), exit 5; the honest remote passes.
#[test]
fn verify_remote_full_finds_a_forged_file_map() {
    let forged = forged_remote();
    let out = forged
        .honest
        .run(&["--json", "verify", "--remote", "origin", "--full"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(5), "{report}");
    let problems = report["problems"].to_string();
    assert!(problems.contains("f.bin"), "{report}");
    assert!(!problems.contains("g.bin"), "{report}");
    assert_eq!(report["files"], 2, "{report}");
    let human = forged
        .honest
        .run(&["verify", "--remote", "origin", "--full"]);
    assert_eq!(human.status.code(), Some(5));
    // Sizes and frame counts depend on how commit's threads grouped chunks into frames.
    let text = forged
        .honest
        .normalize(&String::from_utf8_lossy(&human.stdout));
    let text = regex::Regex::new(r"\d+(\.\d+)? (B|KiB|MiB)")
        .unwrap()
        .replace_all(&text, "[SIZE]");
    let text = regex::Regex::new(r"\d+ frames?")
        .unwrap()
        .replace_all(&text, "[N] frames");
    insta::assert_snapshot!(text, @r"
    Checked remote origin: 1 ref, 191 objects they reach, 1 pack ([N] frames read whole, [SIZE])
    2 files proven
    problem: ds:f.bin: its file map lists chunks that do not reassemble file [SHORT] (the file map in packs/[ID].pack): a clone cannot read this file
    ");
    // A clone (no data here) checks the same way.
    let clone = TestEnv::bare();
    clone.ok(&["clone", &forged.url, "c"]);
    let out = in_clone(
        &clone,
        &["--json", "verify", "--remote", "origin", "--full"],
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(5), "{report}");
    assert!(report["problems"].to_string().contains("f.bin"), "{report}");

    // An honest remote of the same data passes, every file proven.
    let honest = TestEnv::new();
    honest.write("d/a.bin", pseudo_random(3_000_000, 43));
    honest.write("d/b.txt", "small\n");
    honest.ok(&["commit", "d", "-d", "ds"]);
    push_to_file_remote(&honest, "r", "ds");
    let report = honest.json(&["verify", "--remote", "origin", "--full"]);
    assert!(
        report["problems"].as_array().unwrap().is_empty(),
        "{report}"
    );
    assert_eq!(report["files"], 2, "{report}");
}

/// A3: `copy` proves the file maps it forwards: from the forged remote it refuses, naming
/// the source, and the destination's refs do not move.
#[test]
fn copy_refuses_to_forward_a_forged_file_map() {
    let forged = forged_remote();
    let env = &forged.honest;
    let dst = env.path("dst-remote");
    std::fs::create_dir_all(&dst).unwrap();
    env.ok(&["remote", "add", "dst", &format!("file://{}", dst.display())]);
    let out = env.run(&["copy", "ds", "--from", "origin", "--to", "dst"]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(5), "{text}");
    assert!(text.contains("remote origin"), "{text}");
    assert!(
        text.contains("f.bin") || text.contains("file map"),
        "{text}"
    );
    let refs = dst.join("refs");
    let moved: Vec<_> = walkdir::WalkDir::new(&refs)
        .into_iter()
        .flatten()
        .filter(|e| e.file_type().is_file())
        .collect();
    assert!(moved.is_empty(), "{moved:?}");
    // From a clone that holds no data, the same.
    let clone = TestEnv::bare();
    clone.ok(&["clone", &forged.url, "c"]);
    let dst2 = clone.path("dst2");
    std::fs::create_dir_all(&dst2).unwrap();
    let url2 = format!("file://{}", dst2.display());
    assert!(
        in_clone(&clone, &["remote", "add", "dst", &url2])
            .status
            .success()
    );
    let out = in_clone(&clone, &["copy", "ds", "--from", "origin", "--to", "dst"]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(5), "{text}");
    assert!(text.contains("remote origin"), "{text}");
}

/// A2: after the forged map from the first remote is forgotten, the next read fetches the
/// map from the next mirror (an honest one), and reads, `cat` whole and `verify` all pass.
#[test]
fn a_forgotten_forged_map_is_fetched_again_from_the_next_mirror_first() {
    let forged = forged_remote();
    let mirror = forged.honest.path("mirror-remote");
    std::fs::create_dir_all(&mirror).unwrap();
    let mirror_url = format!("file://{}", mirror.display());
    forged.honest.ok(&["remote", "add", "mirror", &mirror_url]);
    forged.honest.ok(&["push", "ds", "--remote", "mirror"]);
    let victim = TestEnv::bare();
    victim.ok(&["clone", &forged.url, "c"]);
    assert!(
        in_clone(&victim, &["remote", "add", "mirror", &mirror_url])
            .status
            .success()
    );
    assert!(
        in_clone(&victim, &["fetch", "--remote", "mirror"])
            .status
            .success()
    );
    // The clone read origin's map: caught, naming origin.
    let out = in_clone(&victim, &["cat", "ds:f.bin", "--range", "2000000..2000100"]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(5), "{text}");
    assert!(text.contains("remote origin"), "{text}");
    // The next read: the map alone from the mirror, proven block by block, the right bytes;
    // a range read fetches what it reads, not the whole file.
    let before = stored_bytes(&victim.path("c"));
    let out = in_clone(&victim, &["cat", "ds:f.bin", "--range", "7000000..7000100"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(out.stdout == forged.content[7_000_000..7_000_100]);
    let fetched = stored_bytes(&victim.path("c")) - before;
    assert!(fetched < 3_000_000, "fetched {fetched} bytes for 100");
    let out = in_clone(&victim, &["cat", "ds:f.bin", "--range", "2000000..2000100"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(out.stdout == forged.content[2_000_000..2_000_100]);
    let out = in_clone(&victim, &["cat", "ds:f.bin"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(out.stdout == forged.content);
    let out = in_clone(&victim, &["--json", "verify"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// The pack among `packs` (a directory of packs) that holds the file map of `file`, and its
/// bytes with that map's first two chunks swapped (so it no longer reassembles the file),
/// the frame's stored length and so the pack's size unchanged (a zstd frame is padded with
/// a skippable frame). The pack's index is left as it was.
fn pack_with_map_chunks_swapped(packs: &Path, file: dsv::ObjectId) -> (String, Vec<u8>) {
    for entry in std::fs::read_dir(packs).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "pack") {
            continue;
        }
        let handle = std::fs::File::open(&path).unwrap();
        let dsv::pack::PackIndex {
            frames, objects, ..
        } = dsv::pack::reader::read_index(&handle, &path).unwrap();
        drop(handle);
        let Some(object) = objects
            .iter()
            .find(|o| o.id == file && o.kind == ObjectKind::FileMap)
        else {
            continue;
        };
        let frame = frames[object.frame as usize];
        let mut pack = std::fs::read(&path).unwrap();
        let at = frame.offset as usize..frame.offset as usize + frame.stored_length as usize;
        let zstd = frame.compression != dsv::pack::Compression::None;
        let mut raw = if zstd {
            zstd::bulk::decompress(&pack[at.clone()], frame.raw_length as usize).unwrap()
        } else {
            pack[at.clone()].to_vec()
        };
        // Entries of 36 bytes (id, length) after a 12-byte header.
        let map = object.offset as usize;
        let (first, second) = (map + 12..map + 48, map + 48..map + 84);
        let saved = raw[first.clone()].to_vec();
        raw.copy_within(second.clone(), first.start);
        raw[second].copy_from_slice(&saved);
        let stored = if zstd {
            (1..=19)
                .find_map(|level| {
                    let mut out = zstd::bulk::compress(&raw, level).unwrap();
                    let pad = at.len().checked_sub(out.len())?;
                    if pad == 0 {
                        return Some(out);
                    }
                    if pad < 8 {
                        return None;
                    }
                    // A skippable frame: magic, length, that many bytes.
                    out.extend_from_slice(&0x184D_2A50u32.to_le_bytes());
                    out.extend_from_slice(&(pad as u32 - 8).to_le_bytes());
                    out.resize(at.len(), 0);
                    Some(out)
                })
                .expect("a level whose frame fits")
        } else {
            raw
        };
        assert_eq!(stored.len(), at.len());
        pack[at].copy_from_slice(&stored);
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        return (name, pack);
    }
    panic!("no pack holds the file map");
}

/// Uploads `body` to `key` of moto's bucket `dsv-test` (the test's own client).
fn s3_put(key: &str, body: Vec<u8>) {
    use object_store::ObjectStoreExt;
    let store = object_store::aws::AmazonS3Builder::new()
        .with_endpoint(crate::remote::endpoint("DSV_TEST_S3_ENDPOINT"))
        .with_allow_http(true)
        .with_bucket_name("dsv-test")
        .with_access_key_id("test-key-id")
        .with_secret_access_key("test-secret-never-stored")
        .with_region("us-east-1")
        .build()
        .unwrap();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(store.put(&object_store::path::Path::from(key), body.into()))
        .unwrap();
}

/// A3: a source remote that edited, in place, a pack this store pushed (same name, same
/// size: this store shares its own index for it) so that a file map no longer reassembles
/// its file. `copy` to a remote of the same S3 service copies server-side (no byte passes
/// here to be hashed): it proves the map the source holds, not this store's honest copy,
/// and refuses (exit 5, naming the source); the destination's refs do not move (before the
/// fix: the copy succeeded and the destination got the forged map).
#[test]
fn copy_proves_the_map_the_source_holds_not_this_stores_copy() {
    let env = TestEnv::new();
    crate::remote::use_s3(&env);
    env.write("d/f.bin", pseudo_random(8_000_000, 43));
    env.ok(&["commit", "d", "-d", "ds"]);
    let (origin, dst) = (
        crate::remote::unique_prefix(),
        crate::remote::unique_prefix(),
    );
    env.ok(&[
        "remote",
        "add",
        "origin",
        &format!("s3://dsv-test/{origin}"),
    ]);
    env.ok(&["remote", "add", "dst", &format!("s3://dsv-test/{dst}")]);
    env.ok(&["push", "--remote", "origin", "ds"]);
    let listing = env.json(&["ls", "ds"]);
    let file: dsv::ObjectId = listing[0]["id"].as_str().unwrap().parse().unwrap();
    let (name, forged) = pack_with_map_chunks_swapped(&env.path(".dsv/packs"), file);
    s3_put(&format!("{origin}/packs/{name}"), forged);

    let out = env.run(&["--json", "copy", "ds", "--from", "origin", "--to", "dst"]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(5), "{text}");
    assert!(text.contains("remote origin"), "{text}");
    // Nothing of the copy reached the destination: no ref there.
    let cloned = TestEnv::bare();
    crate::remote::use_s3(&cloned);
    let out = cloned.run(&["clone", &format!("s3://dsv-test/{dst}"), "c"]);
    assert!(
        !out.status.success()
            || cloned
                .json(&["--store", "c", "ls"])
                .as_array()
                .is_none_or(Vec::is_empty),
        "{}",
        stderr(&out)
    );
}
