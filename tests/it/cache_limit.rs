//! The cache limit (`dsv cache limit`, issue 37): reads of a remote-only version keep the
//! store within the limit plus one fetch, evicting least-recently-used data a remote holds,
//! never data no remote holds, and a reader whose chunk was evicted fetches it again.

use std::path::Path;

use crate::common::{TestEnv, pseudo_random, push_to_file_remote};
use crate::remote::{unique_prefix, use_s3};

/// Bytes of the pack files in the store `.dsv` directory `root` (what is on disk).
fn pack_bytes(root: &Path) -> u64 {
    std::fs::read_dir(root.join("packs"))
        .unwrap()
        .map(|entry| entry.unwrap().metadata().unwrap().len())
        .sum()
}

/// One fetch of the read engine (its first window, a frame or two of the remote's packs,
/// each near 1 MiB), the most a store may hold past the limit.
const ONE_FETCH: u64 = 2 * 1024 * 1024 + 256 * 1024;

#[test]
fn cache_limit_is_a_store_setting_shown_set_and_cleared() {
    let env = TestEnv::new();
    insta::assert_snapshot!(env.ok(&["cache", "limit"]), @r"
    Cache limit: none
    Held: 0 B (0 B of it data a remote holds, evictable)
    ");
    insta::assert_snapshot!(env.ok(&["cache", "limit", "10GiB"]), @r"
    Cache limit: 10.00 GiB
    Held: 0 B (0 B of it data a remote holds, evictable)
    ");
    let shown = env.json(&["cache", "limit"]);
    assert_eq!(shown["limit"], 10u64 * 1024 * 1024 * 1024, "{shown}");
    assert_eq!(shown["held_bytes"], 0, "{shown}");
    let config = std::fs::read_to_string(env.path(".dsv/config.toml")).unwrap();
    assert!(config.contains("[cache]\nlimit = 10737418240"), "{config}");
    // 0 and nonsense are refused, and change nothing.
    env.fails(&["cache", "limit", "0"], 3);
    let error = env.fails(&["cache", "limit", "lots"], 3);
    assert!(error.contains("not a size"), "{error}");
    assert_eq!(env.json(&["cache", "limit"])["limit"], 10u64 << 30);
    let cleared = env.json(&["cache", "limit", "none"]);
    assert!(cleared["limit"].is_null(), "{cleared}");
    env.ok(&["cache", "limit", "1MB"]);
    let cleared = env.json(&["cache", "limit", "--clear"]);
    assert!(cleared["limit"].is_null(), "{cleared}");
}

#[test]
fn an_epoch_over_a_remote_only_version_five_times_the_limit_stays_within_it_on_s3() {
    // 10 MB of incompressible files on moto; the clone's limit is 2 MB.
    let env = TestEnv::new();
    use_s3(&env);
    let files: Vec<(String, Vec<u8>)> = (0..40u64)
        .map(|i| (format!("part/{i:02}.bin"), pseudo_random(250_000, 500 + i)))
        .collect();
    for (path, bytes) in &files {
        env.write(&format!("d/{path}"), bytes);
    }
    env.ok(&["commit", "d", "-d", "ds"]);
    let url = format!("s3://dsv-test/{}", unique_prefix());
    env.ok(&["remote", "add", "origin", &url]);
    env.ok(&["push", "ds"]);

    let clone = TestEnv::bare();
    use_s3(&clone);
    clone.ok(&["clone", &url, "c"]);
    let store = clone.path("c");
    let root = store.join(".dsv");
    let store_arg = store.to_str().unwrap();
    // Data no remote holds: a dataset committed in the clone and never pushed.
    let mine = pseudo_random(200_000, 77);
    clone.write("mine/only-here.bin", &mine);
    clone.ok(&["--store", store_arg, "commit", "mine", "-d", "mine"]);
    let limit: u64 = 2_000_000;
    let set = clone.json(&["--store", store_arg, "cache", "limit", "2MB"]);
    assert_eq!(set["limit"], limit, "{set}");

    let cat = |spec: &str| {
        let out = clone
            .dsv()
            .args(["--store", store_arg, "cat", spec])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{spec}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    let mut peak = 0;
    for (path, bytes) in &files {
        assert_eq!(&cat(&format!("ds:{path}")), bytes, "{path}");
        let held = pack_bytes(&root);
        peak = peak.max(held);
        assert!(
            held <= limit + ONE_FETCH,
            "after {path} the store holds {held} bytes of packs, over {limit} + one fetch"
        );
    }
    eprintln!("peak pack bytes over the epoch: {peak} (limit {limit})");
    // Evicted data is fetched again, byte for byte.
    assert_eq!(cat(&format!("ds:{}", files[0].0)), files[0].1);
    // The data no remote holds was never evicted: it is read with the remote gone.
    clone.ok(&["--store", store_arg, "remote", "rm", "origin"]);
    assert_eq!(cat("mine:only-here.bin"), mine);
    let status = clone.json(&["--store", store_arg, "cache", "limit"]);
    assert_eq!(status["evictable_bytes"], 0, "{status}");
}

#[test]
fn a_reader_whose_chunks_were_evicted_under_it_fetches_them_again() {
    let env = TestEnv::new();
    let big = pseudo_random(3_000_000, 5);
    env.write("d/big.bin", &big);
    env.ok(&["commit", "d", "-d", "ds"]);
    let (_, url) = push_to_file_remote(&env, "remote", "ds");
    let clone = TestEnv::bare();
    clone.ok(&["clone", &url, "c"]);
    let root = clone.path("c/.dsv");
    let mut options = dsv::read::ReadOptions::default();
    options.cache_bytes = 1;
    let engine = dsv::read::ReadEngine::open(&root, options).unwrap();
    let version = engine.version("ds").unwrap();
    let file = version.open("big.bin").unwrap();
    // Read on a thread of its own, which ends: a reading thread holds the packs of its
    // latest fetch until it fetches again (an eviction passes over them).
    let all = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let mut all = vec![0u8; big.len()];
                assert_eq!(file.read_at(0, &mut all).unwrap(), big.len());
                all
            })
            .join()
            .unwrap()
    });
    assert_eq!(all, big);
    assert!(pack_bytes(&root) > 2_000_000);
    // Another process's fetch brings the store over a limit of 1 byte: every pack of
    // fetched data goes while this reader holds its file open, its chunks located.
    let mut store = dsv::Store::open(&root).unwrap();
    let evicted = dsv::ops::cache::enforce_limit(&mut store, 1, &Default::default()).unwrap();
    assert!(evicted.packs > 0 && evicted.locked, "{evicted:?}");
    assert!(pack_bytes(&root) < 100_000, "{}", pack_bytes(&root));
    // A thread of its own (no pack open yet), a frame cache of one byte: the reader finds
    // the packs gone, locates and fetches again, and serves the right bytes.
    let again = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let mut again = vec![0u8; big.len()];
                let n = file.read_at(0, &mut again).unwrap();
                again.truncate(n);
                again
            })
            .join()
            .unwrap()
    });
    assert_eq!(again, big);
    assert!(pack_bytes(&root) > 2_000_000);
}

#[test]
fn an_eviction_passes_over_the_packs_a_reader_just_fetched() {
    let env = TestEnv::new();
    let big = pseudo_random(3_000_000, 6);
    env.write("d/big.bin", &big);
    env.ok(&["commit", "d", "-d", "ds"]);
    let (_, url) = push_to_file_remote(&env, "remote", "ds");
    let clone = TestEnv::bare();
    clone.ok(&["clone", &url, "c"]);
    let root = clone.path("c/.dsv");
    let engine = dsv::read::ReadEngine::open(&root, dsv::read::ReadOptions::default()).unwrap();
    let file = engine.version("ds").unwrap().open("big.bin").unwrap();
    // This thread reads the last bytes: one fetch, whose packs it now holds.
    let mut tail = vec![0u8; 1000];
    file.read_at(big.len() as u64 - 1000, &mut tail).unwrap();
    assert_eq!(tail, &big[big.len() - 1000..]);
    let held = pack_bytes(&root);
    let mut store = dsv::Store::open(&root).unwrap();
    let evicted = dsv::ops::cache::enforce_limit(&mut store, 1, &Default::default()).unwrap();
    assert_eq!(evicted.packs, 0, "{evicted:?}");
    assert_eq!(pack_bytes(&root), held);
}
