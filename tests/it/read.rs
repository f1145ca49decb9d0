//! The read engine (`dsv::read`): random access without a checkout, from many threads, on
//! local and remote-only versions; `dsv cat` is its front end.

use crate::common::{TestEnv, pseudo_random};

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
    assert_eq!(version.files().count(), 3);
    assert!(version.stat("sub").is_some());
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
        Err(dsv::Error::PathNotFound { .. })
    ));
}

#[test]
fn cat_reads_a_remote_only_version_and_keeps_what_it_fetched() {
    let env = TestEnv::new();
    let big = pseudo_random(3_000_000, 42);
    env.write("d/big.bin", &big);
    env.write("d/other.bin", pseudo_random(2_000_000, 101));
    env.ok(&["commit", "d", "-d", "ds"]);
    let remote = env.path("remote");
    std::fs::create_dir_all(&remote).unwrap();
    let url = format!("file://{}", remote.display());
    env.ok(&["remote", "add", "origin", &url]);
    env.ok(&["push", "ds"]);
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
    // Only the file read was fetched: the other file is still on the remote only.
    let report = clone.json(&["--store", store.to_str().unwrap(), "verify"]);
    assert_eq!(report["files_on_remotes"], 1, "{report}");
    let out = cat(&["ds:big.bin"]);
    assert_eq!(out.stdout, big);
    // A range past the end names the size (HTTP 416); an end past it is clamped.
    let out = cat(&["ds:big.bin", "--range", "3000000..3000010"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("3000000 bytes"));
    let out = cat(&["ds:big.bin", "--range", "2999990..4000000"]);
    assert_eq!(out.stdout, &big[2_999_990..]);
}
