//! The read engine's fetch pipeline (issue 36): readers use a fetched pack's chunks as soon as
//! it is sealed, while it is recorded (a group commit: `dsv::read`'s landing and recorder),
//! and a process killed at any point leaves a store whose every byte checks.

use std::time::Duration;

use crate::common::{TestEnv, pseudo_random, push_to_file_remote};

/// A remote-only clone `c` (in a new bare env) of dataset `ds` holding `big.bin` (`bytes`),
/// pushed from `env` to a `file://` remote; returns the clone's env and the remote's URL.
fn remote_only_clone(env: &TestEnv, bytes: &[u8]) -> (TestEnv, String) {
    env.write("d/big.bin", bytes);
    env.ok(&["commit", "d", "-d", "ds"]);
    let (_, url) = push_to_file_remote(env, "remote", "ds");
    let clone = TestEnv::bare();
    clone.ok(&["clone", &url, "c"]);
    (clone, url)
}

/// `dsv cat ds:big.bin` in the clone `c` of `clone`: its bytes, or a failure naming `what`
/// with the command's stderr.
fn cat_big(clone: &TestEnv, what: &str) -> Vec<u8> {
    let out = clone
        .dsv()
        .args(["--store", "c", "cat", "ds:big.bin"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn verify_clean(clone: &TestEnv) {
    let out = clone.run(&["--json", "--store", "c", "verify"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert_eq!(
        out.status.code(),
        Some(0),
        "verify: {report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        report["problems"].as_array().unwrap().is_empty(),
        "{report}"
    );
}

/// What a reader fetched is recorded by the time its process exits (a fetch returns only
/// once its pack is recorded, however it shares the transaction): with the remote gone, a
/// second `cat` reads it all from the store.
#[test]
fn what_a_cat_fetched_is_recorded_before_it_exits() {
    let env = TestEnv::new();
    let big = pseudo_random(40_000_000, 361);
    let (clone, _) = remote_only_clone(&env, &big);
    assert!(
        cat_big(&clone, "the first cat") == big,
        "the first cat's bytes differ"
    );
    clone.ok(&["--store", "c", "remote", "rm", "origin"]);
    assert!(
        cat_big(&clone, "a second cat needed the remote") == big,
        "the second cat's bytes differ"
    );
    verify_clean(&clone);
}

/// Threads of one engine reading one remote-only file at once download each frame once:
/// a thread that wants chunks another thread's fetch is downloading waits for that fetch
/// (and reads them landed, before they are recorded) instead of fetching them again.
#[test]
fn threads_of_one_engine_download_each_frame_once() {
    let env = TestEnv::new();
    let big = pseudo_random(24_000_000, 367);
    let (alone, url) = remote_only_clone(&env, &big);
    let engine = |env: &TestEnv| {
        dsv::read::ReadEngine::open(&env.path("c/.dsv"), dsv::read::ReadOptions::default()).unwrap()
    };
    // The whole file, from `from` to the end and then from the start, in 1 MiB reads.
    let read_all = |file: &dsv::read::FileHandle, from: u64| {
        let size = big.len() as u64;
        let mut out = vec![0u8; big.len()];
        for (start, end) in [(from, size), (0, from)] {
            let mut position = start;
            while position < end {
                let length = (1 << 20).min((end - position) as usize);
                let at = position as usize;
                let n = file.read_at(position, &mut out[at..at + length]).unwrap();
                assert!(n > 0, "a read at {position} gave nothing");
                position += n as u64;
            }
        }
        out
    };
    let downloaded = |env: &TestEnv| -> u64 {
        std::fs::read_dir(env.path("c/.dsv/packs"))
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len() - (16 + 8 + 56))
            .sum()
    };
    // One reader alone.
    let before = downloaded(&alone);
    {
        let engine = engine(&alone);
        let version = engine.version("ds").unwrap();
        let file = version.open("big.bin").unwrap();
        assert!(read_all(&file, 0) == big);
    }
    let once = downloaded(&alone) - before;
    // Four threads of one engine, starting at four places.
    let four = TestEnv::bare();
    four.ok(&["clone", &url, "c"]);
    let before = downloaded(&four);
    {
        let engine = engine(&four);
        let version = engine.version("ds").unwrap();
        std::thread::scope(|scope| {
            for quarter in 0..4u64 {
                let version = &version;
                let read_all = &read_all;
                let big = &big;
                scope.spawn(move || {
                    let file = version.open("big.bin").unwrap();
                    let from = quarter * big.len() as u64 / 4;
                    assert!(
                        read_all(&file, from) == *big,
                        "thread {quarter} read other bytes"
                    );
                });
            }
        });
    }
    let stored = downloaded(&four) - before;
    assert_eq!(
        stored, once,
        "four threads stored {stored} bytes of packs, one reader {once}"
    );
    verify_clean(&four);
}

/// Promise 1 for reads: a `dsv cat` of a remote-only file killed (SIGKILL) at points spread
/// over its fetches and their background recording leaves a store that verifies clean; the
/// next `cat` gives the exact bytes, and `repair` rebuilds a catalog that holds them all.
#[test]
fn a_reader_killed_while_fetching_and_recording_leaves_a_store_that_checks() {
    let env = TestEnv::new();
    let big = pseudo_random(48_000_000, 373);
    let (clone, _) = remote_only_clone(&env, &big);
    let mut killed_midway = 0;
    for delay_ms in [40u64, 90, 160, 250, 400] {
        let mut child = clone
            .command()
            .args(["--store", "c", "cat", "ds:big.bin"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        if child.try_wait().unwrap().is_none() {
            killed_midway += 1;
        }
        child.kill().unwrap();
        child.wait().unwrap();
        verify_clean(&clone);
    }
    assert!(killed_midway > 0, "every cat finished before it was killed");
    assert!(
        cat_big(&clone, "the cat after the kills") == big,
        "the cat after the kills gave other bytes"
    );
    verify_clean(&clone);
    // A lost catalog is rebuilt from the packs, the ones fetched (and perhaps recorded
    // late) included: the file reads from the store alone.
    clone.ok(&["--store", "c", "repair"]);
    clone.ok(&["--store", "c", "remote", "rm", "origin"]);
    assert!(cat_big(&clone, "after repair, a cat needed the remote") == big);
}

/// A checkout hashes each file of several chunks once, as it writes it, not each chunk as
/// well; a stored chunk whose bytes changed still fails it, the error naming the pack that
/// holds the chunk (found by hashing the chunks one by one only then), and nothing is put
/// in place.
#[test]
fn a_checkout_from_a_damaged_pack_fails_naming_the_pack_and_writes_nothing() {
    for size in [600_000usize, 40_000_000] {
        let env = TestEnv::new();
        // Incompressible: stored as is, so a flipped byte still decompresses and only a
        // hash can tell.
        env.write("d/big.bin", pseudo_random(size, 379));
        env.ok(&["commit", "d", "-d", "ds"]);
        let pack = crate::common::damage_first_pack(&env.path(".dsv/packs"));
        let out = env.run(&["checkout", "ds", "out"]);
        assert!(
            !out.status.success(),
            "a checkout of damaged bytes succeeded ({size} bytes)"
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        let name = pack.file_name().unwrap().to_string_lossy();
        assert!(
            stderr.contains(name.as_ref()),
            "the error should name the damaged pack {name} ({size} bytes): {stderr}"
        );
        assert!(
            !env.path("out/big.bin").exists(),
            "a damaged file was put in place ({size} bytes)"
        );
    }
}
