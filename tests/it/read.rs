//! The read engine (`dsv::read`): random access without a checkout, from many threads, on
//! local and remote-only versions; `dsv cat` is its front end.

use crate::common::{TestEnv, pseudo_random, push_to_file_remote};

fn engine(env: &TestEnv, cache_bytes: u64) -> dsv::read::ReadEngine {
    let mut options = dsv::read::ReadOptions::default();
    options.cache_bytes = cache_bytes;
    dsv::read::ReadEngine::open(&env.path(".dsv"), options).unwrap()
}

#[test]
fn read_at_returns_the_bytes_at_any_offset_from_many_threads() {
    let env = TestEnv::new();
    let big = pseudo_random(5_000_000, 41);
    env.write("d/big.bin", &big);
    env.write("d/sub/small.txt", "hello\n");
    env.write("d/empty", "");
    env.ok(&["commit", "d", "-d", "ds"]);
    // A small cache: frames are evicted and read again while threads race.
    let engine = engine(&env, 2 * 1024 * 1024);
    let version = engine.version("ds").unwrap();
    assert_eq!(version.files().unwrap().count(), 3);
    assert!(version.stat("sub").unwrap().is_some());
    let listed: Vec<&str> = version
        .list("")
        .unwrap()
        .iter()
        .map(|e| e.path.as_str())
        .collect();
    assert_eq!(listed, ["big.bin", "empty", "sub"]);
    assert!(version.list("nope").is_err());
    let file = version.open("big.bin").unwrap();
    assert_eq!(file.size(), big.len() as u64);
    std::thread::scope(|scope| {
        for thread in 0..4u64 {
            let (file, big) = (&file, &big);
            scope.spawn(move || {
                let mut state = thread + 1;
                for _ in 0..200 {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let offset = state % (big.len() as u64 + 10);
                    let len = ((state >> 33) % 300_000) as usize;
                    let mut buf = vec![0u8; len];
                    let n = file.read_at(offset, &mut buf).unwrap();
                    let start = (offset as usize).min(big.len());
                    let end = (start + len).min(big.len());
                    assert_eq!(n, end - start);
                    assert_eq!(&buf[..n], &big[start..end]);
                }
            });
        }
    });
    assert!(engine.cached_bytes() <= 2 * 1024 * 1024 + 1024 * 1024 * 2);
    let empty = version.open("empty").unwrap();
    assert_eq!(empty.read_at(0, &mut [0u8; 4]).unwrap(), 0);
    assert!(matches!(
        version.open("sub"),
        Err(dsv::Error::NotAFile { .. })
    ));
}

#[test]
fn cat_reads_a_remote_only_version_and_keeps_what_it_fetched() {
    let env = TestEnv::new();
    let big = pseudo_random(3_000_000, 42);
    env.write("d/big.bin", &big);
    env.write("d/other.bin", pseudo_random(2_000_000, 101));
    env.ok(&["commit", "d", "-d", "ds"]);
    let (_, url) = push_to_file_remote(&env, "remote", "ds");
    let clone = TestEnv::bare();
    clone.ok(&["clone", &url, "c"]);
    let store = clone.path("c");
    let cat = |args: &[&str]| {
        let mut full = vec!["--store", store.to_str().unwrap(), "cat"];
        full.extend_from_slice(args);
        clone.dsv().args(&full).output().unwrap()
    };
    let out = cat(&["ds:big.bin", "--range", "1000..2000"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, &big[1000..2000]);
    // Only the frame holding the range read was fetched (about 1 MiB of the 3 MB file), not
    // the other file: both are still partly or wholly on the remote only.
    let report = clone.json(&["--store", store.to_str().unwrap(), "verify"]);
    assert_eq!(report["files_on_remotes"], 2, "{report}");
    assert!(
        report["pack_bytes"].as_u64().unwrap() < 1_500_000,
        "{report}"
    );
    let out = cat(&["ds:big.bin"]);
    assert_eq!(out.stdout, big);
    // A range past the end names the size (HTTP 416); an end past it is clamped.
    let out = cat(&["ds:big.bin", "--range", "3000000..3000010"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("3000000 bytes"));
    let out = cat(&["ds:big.bin", "--range", "2999990..4000000"]);
    assert_eq!(out.stdout, &big[2_999_990..]);
}

fn tar_paths(bytes: &[u8]) -> Vec<String> {
    let mut archive = tar::Archive::new(bytes);
    archive
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn export_writes_the_same_tar_every_time_and_it_extracts_to_the_checkout() {
    let env = TestEnv::new();
    env.write("d/a/one.bin", pseudo_random(700_000, 51));
    env.write("d/a/two.txt", "two\n");
    env.write("d/b/c/three.bin", pseudo_random(1_500_000, 53));
    env.write("d/top.txt", "top\n");
    crate::common::make_executable(&env.path("d/top.txt"));
    std::os::unix::fs::symlink("a/two.txt", env.path("d/link")).unwrap();
    env.ok(&["commit", "d", "-d", "ds"]);
    let first = env.dsv().args(["export", "ds"]).output().unwrap();
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let second = env
        .dsv()
        .args(["export", "ds", "-o", "out.tar"])
        .output()
        .unwrap();
    assert!(second.status.success());
    assert_eq!(std::fs::read(env.path("out.tar")).unwrap(), first.stdout);
    std::fs::create_dir(env.path("x")).unwrap();
    let status = std::process::Command::new("tar")
        .args(["-x", "-f", "out.tar", "-C", "x"])
        .current_dir(env.root())
        .status()
        .unwrap();
    assert!(status.success());
    env.ok(&["checkout", "ds", "co"]);
    crate::common::assert_same_tree(&env.path("co"), &env.path("x"));

    // Shards: disjoint, complete, and what export --shard writes.
    let plans = env.json(&["shards", "ds", "3"]);
    let mut all: Vec<String> = Vec::new();
    for (i, plan) in plans.as_array().unwrap().iter().enumerate() {
        let paths: Vec<String> = plan["paths"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap().to_string())
            .collect();
        let out = env
            .dsv()
            .args(["export", "ds", "--shard", &format!("{i}/3")])
            .output()
            .unwrap();
        let files: Vec<String> = tar_paths(&out.stdout)
            .into_iter()
            .filter(|p| !p.ends_with('/'))
            .collect();
        assert_eq!(files, paths);
        all.extend(paths);
    }
    all.sort();
    assert_eq!(all, ["a/one.bin", "a/two.txt", "b/c/three.bin", "top.txt"]);
    // A subset: globs and a manifest.
    let out = env
        .dsv()
        .args(["export", "ds", "--include", "a/**"])
        .output()
        .unwrap();
    assert_eq!(tar_paths(&out.stdout), ["a/", "a/one.bin", "a/two.txt"]);
    env.write("list.txt", "top.txt\nb/c/three.bin\n");
    let out = env
        .dsv()
        .args(["export", "ds", "--files-from", "list.txt"])
        .output()
        .unwrap();
    assert_eq!(
        tar_paths(&out.stdout),
        ["b/", "b/c/", "b/c/three.bin", "top.txt"]
    );
}

#[test]
fn export_and_shards_refuse_bad_input_and_end_quietly_on_a_closed_pipe() {
    let env = TestEnv::new();
    env.write("d/big.bin", pseudo_random(8_000_000, 61));
    env.ok(&["commit", "d", "-d", "ds"]);
    for spec in ["3/2", "0/0", "-1/4", "a/b"] {
        let error = env.json_error(&["export", "ds", "--shard", spec, "-o", "x.tar"], 3);
        assert!(error.to_string().contains("shard"), "{spec}: {error}");
    }
    env.write("list.txt", "big.bin\nnot/there.txt\n");
    let error = env.json_error(&["shards", "ds", "2", "--files-from", "list.txt"], 3);
    assert!(error.to_string().contains("not/there.txt"), "{error}");
    env.fails(&["shards", "ds", "0"], 2);
    // A reader that stops early: export ends quietly, exit 0.
    let mut child = env
        .command()
        .args(["export", "ds"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut head = [0u8; 1000];
    std::io::Read::read_exact(&mut stdout, &mut head).unwrap();
    drop(stdout);
    let output = child.wait_with_output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Promise 5 on the read engine: processes reading one remote-only file at once share one
/// store and download its chunks once (the download lock; later readers find them here).
#[test]
fn concurrent_readers_of_a_remote_only_file_download_it_once() {
    let env = TestEnv::new();
    let big = pseudo_random(6_000_000, 81);
    env.write("d/big.bin", &big);
    env.ok(&["commit", "d", "-d", "ds"]);
    let (_, url) = push_to_file_remote(&env, "remote", "ds");
    // Bytes of frames and index records in the packs: a pack's size less its fixed parts
    // (header, index counts, trailer), so that the same frames count alike however many
    // packs the fetches stored them in.
    let pack_bytes = |dir: &std::path::Path| -> u64 {
        std::fs::read_dir(dir.join(".dsv/packs"))
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len() - (16 + 8 + 56))
            .sum()
    };
    // One reader alone: what one download stores.
    let alone = TestEnv::bare();
    alone.ok(&["clone", &url, "c"]);
    let before = pack_bytes(&alone.path("c"));
    let out = alone
        .dsv()
        .args(["--store", "c", "cat", "ds:big.bin"])
        .output()
        .unwrap();
    assert_eq!(out.stdout, big);
    let once = pack_bytes(&alone.path("c")) - before;
    // Four at once.
    let four = TestEnv::bare();
    four.ok(&["clone", &url, "c"]);
    let before = pack_bytes(&four.path("c"));
    let children: Vec<_> = (0..4)
        .map(|_| {
            four.command()
                .args(["--store", "c", "cat", "ds:big.bin"])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let output = child.wait_with_output().unwrap();
        assert!(output.status.success());
        assert_eq!(output.stdout, big);
    }
    let stored = pack_bytes(&four.path("c")) - before;
    assert_eq!(
        stored, once,
        "four readers stored {stored} bytes, one stores {once}"
    );
    assert!(problems_free(&four));
}

fn problems_free(env: &TestEnv) -> bool {
    let out = env.run(&["--json", "--store", "c", "verify"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    report["problems"].as_array().unwrap().is_empty()
}

/// Runs `dsv ARGS --json` in `env`, failing the test if it has not finished within a minute
/// (a gc that waited on a reader would never finish while the reader holds on).
fn json_within_a_minute(env: &TestEnv, args: &[&str]) -> serde_json::Value {
    let mut full = vec!["--json"];
    full.extend_from_slice(args);
    let mut child = env.spawn(&full);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("`dsv {}` waited on a reader", args.join(" "));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "dsv {args:?} failed");
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn gc_keeps_a_leased_version_without_waiting_and_frees_it_once_the_reader_is_gone() {
    let env = TestEnv::new();
    let old = pseudo_random(3_000_000, 51);
    env.write("d/a.bin", &old);
    env.ok(&["commit", "d", "-d", "ds", "--tag", "v1"]);
    env.write("d/a.bin", pseudo_random(3_000_000, 53));
    env.ok(&["commit", "d", "-d", "ds"]);
    let engine = engine(&env, 1024 * 1024);
    let version = engine.version("ds@v1").unwrap();
    let file = version.open("a.bin").unwrap();
    env.ok(&["rm", "--force", "ds@v1"]);
    // gc runs to its end while the reader holds the version, and keeps it whole.
    let report = json_within_a_minute(&env, &["gc"]);
    assert_eq!(
        report["leased_versions"],
        serde_json::json!([version.id().to_hex()]),
        "{report}"
    );
    assert_eq!(report["bytes_freed"], 0, "{report}");
    let mut read = vec![0u8; old.len()];
    assert_eq!(file.read_at(0, &mut read).unwrap(), old.len());
    assert!(read == old, "the leased file reads back whole after gc");
    // The reader is gone: the next gc frees the removed version's data.
    drop(file);
    drop(version);
    let report = json_within_a_minute(&env, &["gc"]);
    assert_eq!(report["leased_versions"], serde_json::json!([]), "{report}");
    assert!(
        report["bytes_freed"].as_i64().unwrap() > 2_000_000,
        "{report}"
    );
    assert!(problems_free_here(&env));
}

#[test]
fn the_lease_of_a_killed_reader_expires() {
    let env = TestEnv::new();
    env.write("d/a.bin", pseudo_random(3_000_000, 55));
    env.ok(&["commit", "d", "-d", "ds", "--tag", "v1"]);
    env.write("d/a.bin", pseudo_random(3_000_000, 57));
    env.ok(&["commit", "d", "-d", "ds"]);
    // An export into a pipe nobody reads: it blocks mid-stream, holding its lease.
    let mut reader = env.spawn(&["export", "ds@v1"]);
    let leases = env.path(".dsv/leases");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::fs::read_dir(&leases).map_or(0, |d| d.count()) == 0 {
        assert!(std::time::Instant::now() < deadline, "no lease appeared");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    env.ok(&["rm", "--force", "ds@v1"]);
    let report = json_within_a_minute(&env, &["gc", "--dry-run"]);
    assert_eq!(report["leased_versions"].as_array().unwrap().len(), 1);
    reader.kill().unwrap();
    reader.wait().unwrap();
    // Its process is gone, so is its flock: gc drops the lease file and frees the data.
    let report = json_within_a_minute(&env, &["gc"]);
    assert_eq!(report["leased_versions"], serde_json::json!([]), "{report}");
    assert!(
        report["bytes_freed"].as_i64().unwrap() > 2_000_000,
        "{report}"
    );
    assert_eq!(std::fs::read_dir(&leases).unwrap().count(), 0);
    assert!(problems_free_here(&env));
}

fn problems_free_here(env: &TestEnv) -> bool {
    let report = env.json(&["verify"]);
    report["problems"].as_array().unwrap().is_empty()
}

#[test]
fn the_library_works_inside_a_callers_tokio_runtime() {
    let env = TestEnv::new();
    let big = pseudo_random(2_000_000, 59);
    env.write("d/big.bin", &big);
    env.ok(&["commit", "d", "-d", "ds"]);
    let (_, url) = push_to_file_remote(&env, "remote", "ds");
    let clone = TestEnv::bare();
    clone.ok(&["clone", &url, "c"]);
    let store = clone.path("c/.dsv");
    // An async program calls the blocking library from a task: the remote fetch runs on
    // dsv's own runtime, with no "runtime within a runtime" panic.
    let caller = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let read = caller.block_on(async move {
        let engine =
            dsv::read::ReadEngine::open(&store, dsv::read::ReadOptions::default()).unwrap();
        let version = engine.version("ds").unwrap();
        let file = version.open("big.bin").unwrap();
        let mut buf = vec![0u8; file.size() as usize];
        file.read_at(0, &mut buf).unwrap();
        buf
    });
    assert!(read == big);
}

#[test]
fn sequential_reads_load_the_next_frames_ahead_and_random_reads_do_not() {
    let env = TestEnv::new();
    let big = pseudo_random(24_000_000, 61);
    env.write("d/big.bin", &big);
    env.ok(&["commit", "d", "-d", "ds"]);
    // Random reads: only the frames read are cached.
    let engine = engine(&env, 256 * 1024 * 1024);
    let file = engine.version("ds").unwrap().open("big.bin").unwrap();
    let mut buf = vec![0u8; 4096];
    file.read_at(10_000_000, &mut buf).unwrap();
    file.read_at(3_000_000, &mut buf).unwrap();
    // Whatever the reads started in the background has ended (a read ahead they should not
    // have asked for would be counted now).
    engine.wait_for_background();
    let random = engine.cached_bytes();
    assert!(
        random <= 4 * 1024 * 1024,
        "random reads cached {random} bytes"
    );
    // Two sequential reads of 128 KiB: the next frames are loaded in the background.
    let engine = self::engine(&env, 256 * 1024 * 1024);
    let file = engine.version("ds").unwrap().open("big.bin").unwrap();
    let mut buf = vec![0u8; 128 * 1024];
    file.read_at(0, &mut buf).unwrap();
    file.read_at(128 * 1024, &mut buf).unwrap();
    assert_eq!(buf, big[128 * 1024..256 * 1024]);
    engine.wait_for_background();
    let ahead = engine.cached_bytes();
    assert!(ahead >= 6 * 1024 * 1024, "read-ahead cached {ahead} bytes");
    // What was read ahead reads back right.
    let mut rest = vec![0u8; 8 * 1024 * 1024];
    file.read_at(256 * 1024, &mut rest).unwrap();
    assert!(rest[..] == big[256 * 1024..256 * 1024 + rest.len()]);
}

/// The files under `dir`, as sorted relative paths.
fn files_under(dir: &std::path::Path) -> Vec<String> {
    let mut files: Vec<String> = walkdir::WalkDir::new(dir)
        .into_iter()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().is_file())
        .map(|e| {
            e.path()
                .strip_prefix(dir)
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    files.sort();
    files
}

#[test]
fn partial_checkouts_write_exactly_the_selected_files_and_fetch_only_those() {
    let env = TestEnv::new();
    for i in 0..12u64 {
        let dir = if i % 2 == 0 { "train" } else { "test" };
        env.write(
            &format!("d/{dir}/{i:02}.bin"),
            pseudo_random(1_100_000 + 50_000 * i as usize, 200 + 2 * i),
        );
    }
    env.write("d/labels.csv", "a,b\n");
    env.ok(&["commit", "d", "-d", "ds"]);
    let all = files_under(&env.path("d"));
    // --shard I/N: exactly what `dsv shards` assigns; the shards cover every file once.
    let plan = env.json(&["shards", "ds", "3"]);
    let mut union = Vec::new();
    for i in 0..3 {
        let out = format!("out{i}");
        let report = env.json(&["checkout", "ds", &out, "--shard", &format!("{i}/3")]);
        assert_eq!(report["partial"], true, "{report}");
        let mut expected: Vec<String> = plan[i]["paths"]
            .as_array()
            .unwrap_or_else(|| panic!("{plan}"))
            .iter()
            .map(|p| p.as_str().unwrap().to_string())
            .collect();
        expected.sort();
        let written = files_under(&env.path(&out));
        assert_eq!(written, expected);
        assert_eq!(report["files"], written.len(), "{report}");
        for path in &written {
            assert_eq!(
                std::fs::read(env.path(&out).join(path)).unwrap(),
                std::fs::read(env.path("d").join(path)).unwrap()
            );
        }
        union.extend(written);
    }
    union.sort();
    assert_eq!(union, all);
    // --include, and a partial checkout records no workspace.
    env.ok(&["checkout", "ds", "train", "--include", "train/**"]);
    assert!(
        files_under(&env.path("train"))
            .iter()
            .all(|p| p.starts_with("train/"))
    );
    assert_eq!(files_under(&env.path("train")).len(), 6);
    let workspaces = env.json(&["workspace", "ls"]);
    assert!(!workspaces.to_string().contains("/train\""), "{workspaces}");
    // A manifest naming a path the version lacks: an error naming it, nothing written.
    env.write("list.txt", "labels.csv\nnot/there.bin\n");
    let error = env.json_error(&["checkout", "ds", "listed", "--files-from", "list.txt"], 3);
    assert!(error.to_string().contains("not/there.bin"), "{error}");
    assert!(!env.path("listed").exists());
    // Into a workspace: refused, its files left alone.
    env.ok(&["checkout", "ds", "full"]);
    let error = env.json_error(&["checkout", "ds", "full", "--include", "test/**"], 4);
    assert!(error.to_string().contains("workspace"), "{error}");
    assert_eq!(files_under(&env.path("full")), all);
    // On a clone, only the selected files are fetched.
    let (_, url) = push_to_file_remote(&env, "remote", "ds");
    let clone = TestEnv::bare();
    clone.ok(&["clone", &url, "c"]);
    let report = clone.json(&["--store", "c", "checkout", "ds", "part", "--shard", "0/3"]);
    let fetched = report["files"].as_u64().unwrap();
    let verify = clone.json(&["--store", "c", "verify"]);
    // Data travels in ~1 MiB frames: a frame shared with a neighbouring file brings that
    // file's bytes too, so a few unselected files may come along, never most of them.
    let unselected = all.len() as u64 - fetched;
    let left = verify["files_on_remotes"].as_u64().unwrap();
    assert!(left <= unselected && left * 2 >= unselected, "{verify}");
    assert_eq!(files_under(&clone.path("part")).len() as u64, fetched);
}

#[test]
fn ctrl_c_during_an_export_stops_it_with_exit_130() {
    let env = TestEnv::new();
    env.write("d/big.bin", pseudo_random(30_000_000, 63));
    env.ok(&["commit", "d", "-d", "ds"]);
    let mut child = env.spawn(&["export", "ds"]);
    let mut stdout = child.stdout.take().unwrap();
    let mut head = [0u8; 4096];
    std::io::Read::read_exact(&mut stdout, &mut head).unwrap();
    let sent = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    // The reader keeps reading: the export sees the Ctrl-C at its next check and stops.
    let mut rest = Vec::new();
    std::io::Read::read_to_end(&mut stdout, &mut rest).unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(130));
    assert!(
        (rest.len() as u64) < 30_000_000,
        "the export stopped early ({} bytes)",
        rest.len()
    );
    assert!(String::from_utf8_lossy(&output.stderr).contains("interrupted"));
}

/// `stat` finds paths and `list` gives exactly a directory's children where path order and
/// byte order differ (`a/x` sorts before `a.txt`) and directories nest.
#[test]
fn stat_and_list_follow_path_order() {
    let env = TestEnv::new();
    for path in ["d/a/x", "d/a.txt", "d/a/b/c", "d/a/b/d", "d/b", "d/a-z/y"] {
        env.write(path, path);
    }
    env.ok(&["commit", "d", "-d", "ds"]);
    let engine = engine(&env, 1 << 20);
    let version = engine.version("ds").unwrap();
    let names = |dir: &str| -> Vec<String> {
        version
            .list(dir)
            .unwrap()
            .iter()
            .map(|e| e.path.clone())
            .collect()
    };
    assert_eq!(names(""), ["a", "a-z", "a.txt", "b"]);
    assert_eq!(names("a"), ["a/b", "a/x"]);
    assert_eq!(names("a/b/"), ["a/b/c", "a/b/d"]);
    assert!(version.is_listed());
    for path in ["a.txt", "a/b/c", "a-z/y", "b", "a/b"] {
        assert_eq!(version.stat(path).unwrap().unwrap().path, path);
    }
    assert!(version.stat("a/y").unwrap().is_none());
    assert!(version.list("a.txt").is_err());
    // Before a version is listed, stat and open read only the trees on their path; they
    // answer as the listing does, and the version stays unlisted.
    let fresh = engine.version("ds").unwrap();
    for path in [
        "a.txt", "a/b/c", "a-z/y", "b", "a/b", "a/b/", "/a/x", "a/y", "a.txt/x", "", "a//b",
        "a/b/c/d", "zzz",
    ] {
        assert_eq!(
            fresh.stat(path).unwrap(),
            version.stat(path).unwrap(),
            "{path:?}"
        );
    }
    let mut bytes = vec![0u8; 64];
    let read = fresh.open("a/b/c").unwrap().read_at(0, &mut bytes).unwrap();
    let listed = version
        .open("a/b/c")
        .unwrap()
        .read_at(0, &mut bytes)
        .unwrap();
    assert_eq!(read, listed);
    assert!(matches!(
        fresh.open("a/b"),
        Err(dsv::Error::NotAFile { .. })
    ));
    assert!(matches!(
        fresh.open("a/nope"),
        Err(dsv::Error::PathNotFound { .. })
    ));
    assert!(!fresh.is_listed());
}

#[test]
fn reopen_uses_the_listing_reads_no_tree_and_refuses_a_removed_version() {
    let env = TestEnv::new();
    env.write("d/a/one.txt", "one\n");
    env.write("d/a/two.txt", "two\n");
    env.write("d/b.bin", pseudo_random(100_000, 7));
    env.ok(&["commit", "d", "-d", "ds", "--tag", "v1"]);
    env.write("d/a/three.txt", "three\n");
    env.ok(&["commit", "d", "-d", "ds", "--tag", "v2"]);
    let first = engine(&env, 1 << 20);
    let listing_v1 = first.version("ds@v1").unwrap().listing().unwrap();
    let listing = first.version("ds@v2").unwrap().listing().unwrap();
    assert_eq!((listing_v1.len(), listing.len()), (4, 5));
    // A version removed since its listing was taken is refused, as `version` refuses it.
    env.ok(&["rm", "ds@v1", "--force"]);
    let fresh = engine(&env, 1 << 20);
    assert!(matches!(
        fresh.reopen(&listing_v1),
        Err(dsv::Error::VersionRemoved { .. })
    ));
    // Every tree gone from the catalog: a fresh open of the version cannot read its paths,
    // a reopen from the listing still can (what a forked DataLoader worker does).
    let catalog = rusqlite::Connection::open(env.path(".dsv/catalog.db")).unwrap();
    let trees = catalog
        .execute("DELETE FROM objects WHERE kind = 2", [])
        .unwrap();
    assert!(trees >= 2);
    assert!(fresh.version("ds@v2").unwrap().stat("a/one.txt").is_err());
    let again = fresh.reopen(&listing).unwrap();
    assert!(again.is_listed());
    assert_eq!(again.id(), listing.id());
    let file = again.open("a/three.txt").unwrap();
    let mut buf = [0u8; 6];
    assert_eq!(file.read_at(0, &mut buf).unwrap(), 6);
    assert_eq!(&buf, b"three\n");
    assert_eq!(again.files().unwrap().count(), 4);
}

#[test]
fn a_reopened_version_holds_its_own_lease_against_gc() {
    let env = TestEnv::new();
    let old = pseudo_random(2_000_000, 61);
    env.write("d/a.bin", &old);
    env.ok(&["commit", "d", "-d", "ds", "--tag", "v1"]);
    env.write("d/a.bin", pseudo_random(2_000_000, 63));
    env.ok(&["commit", "d", "-d", "ds"]);
    // The handle the listing came from is gone (as a parent's is to a forked child): only the
    // reopened one holds the version.
    let listing = engine(&env, 1 << 20)
        .version("ds@v1")
        .unwrap()
        .listing()
        .unwrap();
    let again = engine(&env, 1 << 20).reopen(&listing).unwrap();
    env.ok(&["rm", "--force", "ds@v1"]);
    let report = json_within_a_minute(&env, &["gc"]);
    assert_eq!(
        report["leased_versions"],
        serde_json::json!([listing.id().to_hex()]),
        "{report}"
    );
    assert_eq!(report["bytes_freed"], 0, "{report}");
    let file = again.open("a.bin").unwrap();
    let mut read = vec![0u8; old.len()];
    assert_eq!(file.read_at(0, &mut read).unwrap(), old.len());
    assert!(
        read == old,
        "the reopened version reads back whole after gc"
    );
}
