//! Issue 34, part A: what an attacker's round 4 found, each refused at its rule. Planted
//! FIFOs inside a store (lock files, the catalog, settings), a version too large for the
//! process's `ulimit -v`, URLs with passwords in every argument form, an ignore rule that
//! does not parse, and file names holding control characters.

use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use insta::assert_snapshot;

use crate::common::{TestEnv, plant, push_to_file_remote, settle};

/// What a run that must end promptly did: its exit code (`None`: still running after
/// `patience`, then killed), stdout and stderr.
struct Ended {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `dsv ARGS` in `env`, killing it after `patience` (a run that waits on a FIFO would
/// wait forever).
fn run_within(env: &TestEnv, args: &[&str], patience: Duration) -> Ended {
    let start = Instant::now();
    let mut child = env.spawn(args);
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if start.elapsed() >= patience {
            child.kill().unwrap();
            child.wait().unwrap();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let output = child.wait_with_output().unwrap();
    Ended {
        code,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn mkfifo(path: &Path) {
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::S_IRWXU).unwrap();
    assert!(
        std::fs::symlink_metadata(path)
            .unwrap()
            .file_type()
            .is_fifo()
    );
}

/// Asserts `run` ended (not killed) with `code`, its stderr naming `path` as a FIFO and
/// saying to remove it.
fn assert_refused_fifo(run: &Ended, code: i32, path: &Path, what: &str) {
    assert_eq!(run.code, Some(code), "{what}: {}{}", run.stdout, run.stderr);
    let name = path.file_name().unwrap().to_str().unwrap();
    assert!(
        run.stderr.contains(name)
            && run.stderr.contains("a FIFO")
            && run.stderr.contains("remove it"),
        "{what}: {}",
        run.stderr
    );
}


/// Issue 34, A1: FIFOs planted as every fetch stripe lock of a remote-only clone made every
/// remote read wait forever in `openat`, deaf to SIGTERM. Now each lock file (and every other
/// file dsv opens inside a store) is opened without following or waiting, and anything but
/// a regular file is refused, naming it.
#[test]
fn fifos_planted_inside_a_store_are_refused_at_once_not_waited_on() {
    let env = TestEnv::new();
    env.write("d/big.bin", crate::common::pseudo_random(300_000, 7));
    env.ok(&["commit", "d", "-d", "big"]);
    let (_remote, url) = push_to_file_remote(&env, "remote", "big");
    env.ok(&["clone", &url, "cl"]);
    let locks = env.path("cl/.dsv/locks");
    std::fs::create_dir_all(&locks).unwrap();
    for stripe in 0..4096 {
        let path = locks.join(format!("fetch-{stripe:03x}.lock"));
        if !path.exists() {
            mkfifo(&path);
        }
    }
    let patience = Duration::from_secs(20);
    let cat = run_within(&env, &["--store", "cl", "cat", "big:big.bin"], patience);
    assert_refused_fifo(
        &cat,
        6,
        Path::new("fetch-"),
        "cat through planted stripe locks",
    );
    assert!(cat.stderr.contains("locks/fetch-"), "{}", cat.stderr);

    // The download lock: pull.
    std::fs::remove_dir_all(&locks).unwrap();
    std::fs::create_dir_all(&locks).unwrap();
    let downloads = locks.join("downloads.lock");
    mkfifo(&downloads);
    let pull = run_within(&env, &["--store", "cl", "pull", "big"], patience);
    assert_refused_fifo(&pull, 6, &downloads, "pull through a planted download lock");
    std::fs::remove_file(&downloads).unwrap();
    env.ok(&["--store", "cl", "pull", "big"]);

    // The head lock, the settings and the catalog's journal of the store itself.
    for (name, args) in [
        ("lock", &["tag", "big", "v1"][..]),
        ("config.toml", &["config", "list"]),
        ("catalog.db-wal", &["tag", "big", "v1"]),
    ] {
        let planted = env.path(&format!(".dsv/{name}"));
        let _ = std::fs::remove_file(&planted);
        mkfifo(&planted);
        let run = run_within(&env, args, patience);
        assert_refused_fifo(&run, 6, &planted, name);
        std::fs::remove_file(&planted).unwrap();
    }
    env.ok(&["tag", "big", "v1"]);
    env.ok(&["verify"]);
}

