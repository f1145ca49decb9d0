//! Large files from a remote (issue 25): any byte range is fetched and proven on its own,
//! against the file's outboard (the BLAKE3 chaining values of its 64 KiB blocks).

use crate::common::{TestEnv, pseudo_random, push_to_file_remote};
use dsv::object::ObjectKind;

/// Bytes of frames and index records in a store's packs (each pack's size less its fixed
/// header, index counts and trailer).
fn stored_bytes(store: &std::path::Path) -> u64 {
    std::fs::read_dir(store.join(".dsv/packs"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len() - (16 + 8 + 56))
        .sum()
}

/// The id of the first file `dsv ls ds` lists.
fn first_file_id(env: &TestEnv) -> dsv::ObjectId {
    env.json(&["ls", "ds"])[0]["id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

fn cat(env: &TestEnv, store: &str, args: &[&str]) -> std::process::Output {
    let mut full = vec!["--store", store, "cat"];
    full.extend_from_slice(args);
    env.dsv().args(&full).output().unwrap()
}

/// A remote-only clone of a version holding one large incompressible file.
fn remote_only(size: usize, seed: u64) -> (TestEnv, TestEnv, Vec<u8>) {
    let env = TestEnv::new();
    let big = pseudo_random(size, seed);
    env.write("d/big.bin", &big);
    env.ok(&["commit", "d", "-d", "ds"]);
    let (_, url) = push_to_file_remote(&env, "remote", "ds");
    let clone = TestEnv::bare();
    clone.ok(&["clone", &url, "c"]);
    (env, clone, big)
}

#[test]
fn a_mebibyte_at_a_random_offset_of_a_remote_only_file_fetches_at_most_three() {
    let (_env, clone, big) = remote_only(24_000_000, 7);
    let store = clone.path("c");
    let before = stored_bytes(&store);
    let store = store.to_str().unwrap();
    let (start, end) = (13_371_337usize, 13_371_337 + 1024 * 1024);
    let out = cat(
        &clone,
        store,
        &["ds:big.bin", "--range", &format!("{start}..{end}")],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout == big[start..end]);
    let fetched = stored_bytes(&clone.path("c")) - before;
    assert!(
        fetched <= 3 * 1024 * 1024,
        "fetched {fetched} bytes for 1 MiB"
    );
    // The file's map came from the remote: the range was proven by blocks, and the map is
    // not proven whole until every block has been read.
    let report = clone.json(&["--store", store, "verify"]);
    assert_eq!(report["files_on_remotes"], 1, "{report}");
    assert!(
        report["problems"].as_array().unwrap().is_empty(),
        "{report}"
    );
    // The whole file, read afterwards, is the file (and the rest is fetched once).
    let out = cat(&clone, store, &["ds:big.bin"]);
    assert!(out.stdout == big);
    let whole = stored_bytes(&clone.path("c")) - before;
    assert!(whole < 24_000_000 + 1_000_000, "stored {whole} bytes");
}

#[test]
fn an_outboard_changed_on_the_remote_is_refused_on_arrival_naming_the_remote() {
    let env = TestEnv::new();
    let big = pseudo_random(3_000_000, 9);
    env.write("d/big.bin", &big);
    env.ok(&["commit", "d", "-d", "ds"]);
    let (remote, url) = push_to_file_remote(&env, "remote", "ds");
    let file_id = first_file_id(&env);
    // A pack on the remote holding, under another file's id, the file's outboard with its
    // first value changed (the remote lists it; a clone fetches every outboard it lists).
    let store = dsv::Store::open(&env.path(".dsv")).unwrap();
    let mut outboard = store
        .reader()
        .bytes(&file_id, ObjectKind::Outboard)
        .unwrap();
    outboard[20] ^= 1;
    let forged = crate::common::forge_pack(
        &env,
        &remote,
        &[(
            dsv::ObjectId::of(b"another file"),
            ObjectKind::Outboard,
            outboard,
        )],
    );
    // Cloning fetches outboards with the metadata: the changed one fails its check there
    // (its values no longer merge to the file id), and the clone names the remote's pack.
    let clone = TestEnv::bare();
    let error = clone.json_error(&["clone", &url, "c"], 5);
    let text = error.to_string();
    assert!(text.contains(&format!("{forged}.pack")), "{error}");
    assert!(text.contains("outboard"), "{error}");
}

/// Rewrites every pack of the file remote at `remote` without its outboards, as a binary
/// from before outboards wrote them (same frames, same other objects).
fn strip_outboards(source: &TestEnv, remote: &std::path::Path) {
    let store = dsv::Store::open(&source.path(".dsv")).unwrap();
    let mut reader = store.reader();
    let packs = remote.join("packs");
    let names: Vec<std::path::PathBuf> = std::fs::read_dir(&packs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pack"))
        .collect();
    let temp = source.path("rewritten");
    std::fs::create_dir_all(&temp).unwrap();
    for path in names {
        let file = std::fs::File::open(&path).unwrap();
        let dsv::pack::PackIndex {
            frames, objects, ..
        } = dsv::pack::reader::read_index(&file, &path).unwrap();
        let mut writer = dsv::pack::PackWriter::create(&temp, &source.path(".dsv/tmp")).unwrap();
        for index in 0..frames.len() {
            let mut frame = dsv::pack::FrameBuilder::default();
            for object in objects.iter().filter(|o| o.frame as usize == index) {
                if object.kind != ObjectKind::Outboard {
                    let bytes = reader.bytes(&object.id, object.kind).unwrap();
                    frame.push(object.id, object.kind, &bytes);
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
}

/// Data pushed before outboards existed: a clone proves such a file whole when it reads it
/// (as before); `gc` in a store whose catalog lacks the outboard writes it; `push` sends it
/// although the remote already has the version; then a clone reads any range on its own.
#[test]
fn data_without_outboards_reads_whole_and_gets_them_from_gc_then_push() {
    let env = TestEnv::new();
    let big = pseudo_random(6_000_000, 5);
    env.write("d/big.bin", &big);
    env.ok(&["commit", "d", "-d", "ds"]);
    let (remote, url) = push_to_file_remote(&env, "remote", "ds");
    strip_outboards(&env, &remote);
    let clone = TestEnv::bare();
    clone.ok(&["clone", &url, "c"]);
    let c = clone.path("c");
    let before = stored_bytes(&c);
    let out = cat(
        &clone,
        c.to_str().unwrap(),
        &["ds:big.bin", "--range", "100..200"],
    );
    assert!(out.status.success());
    assert!(out.stdout == big[100..200]);
    assert!(
        stored_bytes(&c) - before >= 6_000_000,
        "proven whole: every chunk fetched"
    );
    // The source store as one made before outboards: none in its catalog. gc writes it.
    let db = rusqlite::Connection::open(env.path(".dsv/catalog.db")).unwrap();
    assert_eq!(
        db.execute("DELETE FROM objects WHERE kind = 6", [])
            .unwrap(),
        1
    );
    drop(db);
    // A dry run plans the same packs, and counts the live objects before the outboard is
    // written (the real run counts it too).
    let dry = env.json(&["gc", "--dry-run"]);
    let gc = env.json(&["gc"]);
    assert_eq!(gc["outboards_written"], 1, "{gc}");
    assert_eq!(dry["outboards_written"], 0, "{dry}");
    for field in [
        "delete",
        "repack",
        "kept_with_garbage",
        "bytes_freed",
        "packs_written",
    ] {
        assert_eq!(dry[field], gc[field], "{field}");
    }
    assert_eq!(
        dry["live_objects"].as_u64().unwrap() + 1,
        gc["live_objects"].as_u64().unwrap()
    );
    assert_eq!(env.json(&["gc"])["outboards_written"], 0);
    env.ok(&["verify"]);
    // push sends it, although the remote's head is already this version.
    // (The remote's packs were rewritten: the objects that moved to new packs are found
    // there, so only the outboard's pack travels.)
    let pushed = env.json(&["push", "ds"]);
    assert_eq!(pushed["transfer"]["packs"], 1, "{pushed}");
    assert_eq!(env.json(&["push", "ds"])["transfer"]["packs"], 0);
    let fresh = TestEnv::bare();
    fresh.ok(&["clone", &url, "c"]);
    let before = stored_bytes(&fresh.path("c"));
    let out = cat(
        &fresh,
        fresh.path("c").to_str().unwrap(),
        &["ds:big.bin", "--range", "3000000..3000100"],
    );
    assert!(out.stdout == big[3_000_000..3_000_100]);
    let fetched = stored_bytes(&fresh.path("c")) - before;
    assert!(fetched < 3 * 1024 * 1024, "fetched {fetched} bytes");
}

#[test]
fn many_threads_reading_a_remote_only_file_at_random_get_the_right_bytes() {
    let (_env, clone, big) = remote_only(12_000_000, 13);
    let engine =
        dsv::read::ReadEngine::open(&clone.path("c/.dsv"), dsv::read::ReadOptions::default())
            .unwrap();
    let version = engine.version("ds").unwrap();
    let file = std::sync::Arc::new(version.open("big.bin").unwrap());
    let big = std::sync::Arc::new(big);
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let (file, big) = (file.clone(), big.clone());
            std::thread::spawn(move || {
                let mut state = t * 7919 + 1;
                for _ in 0..40 {
                    state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
                    let offset = (state >> 20) % 12_000_000;
                    let mut buf = vec![0u8; 100_000];
                    let n = file.read_at(offset, &mut buf).unwrap();
                    let end = offset as usize + n;
                    assert!(buf[..n] == big[offset as usize..end]);
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    // Sequentially from the start: the prefetcher fetches ahead, and every byte is right.
    let mut position = 0u64;
    let mut buf = vec![0u8; 256 * 1024];
    while position < 12_000_000 {
        let n = file.read_at(position, &mut buf).unwrap();
        assert!(buf[..n] == big[position as usize..position as usize + n]);
        position += n as u64;
    }
}

/// A file map from a remote whose lengths disagree with the tree (a lie found before any
/// block is read) fails the read naming that remote, and is forgotten: the next fetch gets
/// the right one from another remote and the read succeeds.
#[test]
fn a_lying_map_from_a_remote_is_named_forgotten_and_fetched_again() {
    let honest = TestEnv::new();
    let content = pseudo_random(3_000_000, 77);
    honest.write("d/big.bin", &content);
    honest.write("d/small.txt", "small\n");
    honest.ok(&["commit", "d", "-d", "ds"]);
    let (origin, _) = push_to_file_remote(&honest, "origin-remote", "ds");
    let file_id = first_file_id(&honest);
    // The attacker's remote: a pack holding the file's map with its last length changed.
    let store = dsv::Store::open(&honest.path(".dsv")).unwrap();
    let map = store.reader().bytes(&file_id, ObjectKind::FileMap).unwrap();
    let mut decoded = dsv::object::FileMap::decode(&map).unwrap();
    let last = decoded.chunks.len() - 1;
    decoded.chunks[last].1 -= 1;
    let evil = honest.path("evil-remote");
    crate::common::forge_pack(
        &honest,
        &evil,
        &[(file_id, ObjectKind::FileMap, decoded.encode())],
    );
    let victim = TestEnv::new();
    victim.ok(&[
        "remote",
        "add",
        "evil",
        &format!("file://{}", evil.display()),
    ]);
    victim.ok(&[
        "remote",
        "add",
        "origin",
        &format!("file://{}", origin.display()),
    ]);
    victim.ok(&["fetch", "--remote", "evil"]);
    // The dataset's head here, with only the small file's data: big.bin stays remote-only.
    victim.ok(&["pull", "ds", "--remote", "origin", "--include", "small.txt"]);
    let error = victim.json_error(&["cat", "ds:big.bin", "--range", "0..100"], 5);
    assert!(error.to_string().contains("remote evil"), "{error}");
    // Forgotten: fetching again brings the right map, and the read succeeds.
    victim.ok(&["fetch", "--remote", "origin"]);
    let out = victim
        .dsv()
        .args(["cat", "ds:big.bin", "--range", "0..100"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout == content[..100]);
}

/// A prefetch of more frames than one fetch locks at once (`FETCH_BATCH_FRAMES`) fetches
/// them in batches: everything arrives, once, and reads then fetch nothing.
#[test]
fn a_prefetch_of_more_frames_than_one_batch_fetches_everything_once() {
    let frames = dsv::read::FETCH_BATCH_FRAMES + 16;
    let (_env, clone, big) = remote_only(frames * 1024 * 1024, 21);
    let engine =
        dsv::read::ReadEngine::open(&clone.path("c/.dsv"), dsv::read::ReadOptions::default())
            .unwrap();
    let version = engine.version("ds").unwrap();
    let downloaded = version.prefetch(&["big.bin"]).unwrap();
    assert!(downloaded >= big.len() as u64, "downloaded {downloaded}");
    let stored = stored_bytes(&clone.path("c"));
    let file = version.open("big.bin").unwrap();
    let mut buf = vec![0u8; 4 * 1024 * 1024];
    let mut position = 0;
    while position < big.len() {
        let n = file.read_at(position as u64, &mut buf).unwrap();
        assert!(buf[..n] == big[position..position + n]);
        position += n;
    }
    assert_eq!(
        stored_bytes(&clone.path("c")),
        stored,
        "the reads fetched nothing more"
    );
    assert_eq!(version.prefetch(&["big.bin"]).unwrap(), 0);
}

/// Promise 1 on the read engine: a reader killed (SIGKILL) at any moment of its fetches
/// leaves the store consistent (`verify` finds no problem: no pack recorded that is not
/// whole), and the next read finishes the job with the right bytes.
#[test]
fn a_read_killed_while_it_fetches_leaves_the_store_consistent() {
    let (_env, clone, big) = remote_only(24_000_000, 29);
    let store = clone.path("c");
    let store = store.to_str().unwrap();
    let mut killed = 0;
    for delay in [5u64, 20, 60, 150, 400] {
        if crate::common::kill_after(
            &clone,
            &["--store", store, "cat", "ds:big.bin"],
            std::time::Duration::from_millis(delay),
        ) {
            killed += 1;
        }
        let report = clone.json(&["--store", store, "verify"]);
        assert!(
            report["problems"].as_array().unwrap().is_empty(),
            "{report}"
        );
    }
    assert!(killed > 0, "no read was still running when killed");
    let out = cat(&clone, store, &["ds:big.bin"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout == big);
}
