//! Issue 23, findings 1 and 2: checkout carries uncommitted work over or refuses, whatever
//! bytes it holds, and never writes outside its directory, not even when a directory is
//! swapped for a symlink while it runs.

use std::fs;
use std::time::Duration;

use crate::common::{TestEnv, pseudo_random, snapshot_tree};

/// `d@v1` and `d@v2`: `same.txt`, `same/a..c` and `moved.bin` are equal in both; `changes.txt`
/// differs; v2 adds `same/new.txt` only when `add_below_same`.
fn two_versions(env: &TestEnv, add_below_same: bool) {
    env.write("data/same.txt", "same in both\n");
    env.write("data/changes.txt", "v1\n");
    env.write("data/moved.bin", pseudo_random(50_000, 3));
    for name in ["a", "b", "c"] {
        env.write(&format!("data/same/{name}"), format!("{name}\n"));
    }
    env.ok(&["commit", "data", "-d", "d", "-t", "v1"]);
    env.write("data/changes.txt", "v2\n");
    if add_below_same {
        env.write("data/same/new.txt", "new in v2\n");
    }
    env.ok(&["commit", "data", "-d", "d", "-t", "v2"]);
}

#[test]
fn an_uncommitted_deletion_is_carried_over_where_the_target_keeps_the_file() {
    let env = TestEnv::new();
    two_versions(&env, false);
    env.ok(&["checkout", "d@v1", "work"]);
    fs::remove_file(env.path("work/same.txt")).unwrap();
    fs::remove_dir_all(env.path("work/same")).unwrap();
    let report = env.json(&["checkout", "d@v2", "work"]);
    assert_eq!(report["carried"], 4, "{report}");
    assert!(
        !env.path("work/same.txt").exists(),
        "the deletion was reverted"
    );
    assert!(
        !env.path("work/same").exists(),
        "the deleted directory came back"
    );
    assert_eq!(
        fs::read_to_string(env.path("work/changes.txt")).unwrap(),
        "v2\n"
    );
    // status lists the deletions against the version now checked out.
    let status = env.json(&["status", "work"]);
    let changed: Vec<&str> = status["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert!(changed.contains(&"same.txt"), "{status}");
    assert!(changed.contains(&"same/a"), "{status}");
}

#[test]
fn a_file_the_target_adds_in_a_deleted_directory_is_written_and_the_deletions_stay() {
    let env = TestEnv::new();
    two_versions(&env, true);
    env.ok(&["checkout", "d@v1", "work"]);
    fs::remove_dir_all(env.path("work/same")).unwrap();
    env.ok(&["checkout", "d@v2", "work"]);
    let left: Vec<String> = fs::read_dir(env.path("work/same"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(left, vec!["new.txt".to_string()]);
}

#[test]
fn an_uncommitted_deletion_the_target_would_undo_is_refused_with_exit_4() {
    let env = TestEnv::new();
    two_versions(&env, false);
    env.ok(&["checkout", "d@v1", "work"]);
    fs::remove_file(env.path("work/changes.txt")).unwrap();
    let error = env.json_error(&["checkout", "d@v2", "work"], 4);
    assert!(error.to_string().contains("changes.txt"), "{error}");
    assert!(!env.path("work/changes.txt").exists());
    // --force discards the deletion.
    env.ok(&["checkout", "d@v2", "work", "--force"]);
    assert_eq!(
        fs::read_to_string(env.path("work/changes.txt")).unwrap(),
        "v2\n"
    );
}

#[test]
fn a_file_replaced_by_content_the_store_holds_is_a_change() {
    let env = TestEnv::new();
    two_versions(&env, false);
    env.ok(&["checkout", "d@v1", "work"]);
    // A curator relabels: changes.txt now holds same.txt's bytes (which every version holds).
    fs::copy(env.path("work/same.txt"), env.path("work/changes.txt")).unwrap();
    let error = env.json_error(&["checkout", "d@v2", "work"], 4);
    assert!(error.to_string().contains("changes.txt"), "{error}");
    assert_eq!(
        fs::read_to_string(env.path("work/changes.txt")).unwrap(),
        "same in both\n"
    );
    // Where the target keeps the file as it was, the replacement is carried over.
    env.ok(&["checkout", "d@v1", "work", "--force"]);
    fs::copy(env.path("work/changes.txt"), env.path("work/same.txt")).unwrap();
    let report = env.json(&["checkout", "d@v2", "work"]);
    assert_eq!(report["carried"], 1, "{report}");
    assert_eq!(
        fs::read_to_string(env.path("work/same.txt")).unwrap(),
        "v1\n"
    );
    // And the stat cache does not vouch for it: status sees the change.
    let status = env.json(&["status", "work"]);
    assert!(status.to_string().contains("same.txt"), "{status}");
}

#[test]
fn a_move_is_carried_over_or_refused_like_a_deletion() {
    let env = TestEnv::new();
    two_versions(&env, false);
    env.ok(&["checkout", "d@v1", "work"]);
    fs::rename(env.path("work/moved.bin"), env.path("work/renamed.bin")).unwrap();
    env.ok(&["checkout", "d@v2", "work"]);
    assert!(!env.path("work/moved.bin").exists());
    assert!(env.path("work/renamed.bin").exists());
    // Moved onto a path the target changes: the user's file is not overwritten.
    env.ok(&["checkout", "d@v1", "work", "--force"]);
    fs::rename(env.path("work/moved.bin"), env.path("work/changes.txt")).unwrap();
    env.json_error(&["checkout", "d@v2", "work"], 4);
    assert_eq!(
        fs::read(env.path("work/changes.txt")).unwrap(),
        pseudo_random(50_000, 3)
    );
}

#[test]
fn an_untracked_file_in_the_way_is_refused_even_when_a_version_holds_its_bytes() {
    let env = TestEnv::new();
    two_versions(&env, false);
    // A plain directory (no workspace): changes.txt holds v1's bytes, v2 has others there.
    env.write("plain/changes.txt", "v1\n");
    env.json_error(&["checkout", "d@v2", "plain"], 4);
    assert_eq!(
        fs::read_to_string(env.path("plain/changes.txt")).unwrap(),
        "v1\n"
    );
}

/// A version of `dirs` directories of `files` small files each, committed as `d@v1`, and a
/// second version where every file differs, `d@v2`.
fn wide_versions(env: &TestEnv, dirs: usize, files: usize) {
    for version in ["v1", "v2"] {
        for d in 0..dirs {
            for f in 0..files {
                env.write(
                    &format!("data/d{d}/f{f}"),
                    format!("{version} {d} {f}\n").repeat(20),
                );
            }
        }
        env.ok(&["commit", "data", "-d", "d", "-t", version]);
    }
}

#[test]
fn a_directory_swapped_for_a_symlink_during_checkout_never_leads_outside() {
    let env = TestEnv::new();
    wide_versions(&env, 6, 800);
    let outside = env.path("outside");
    for round in 0..8u64 {
        // The victim: what a write through the symlink would overwrite or add to.
        let _ = fs::remove_dir_all(&outside);
        fs::create_dir_all(&outside).unwrap();
        fs::write(outside.join("f0"), "precious\n").unwrap();
        let before = snapshot_tree(&outside);
        let work = format!("work{round}");
        env.ok(&["checkout", "d@v1", &work]);
        let mut child = env.spawn(&["checkout", "d@v2", &work, "--jobs", "1"]);
        std::thread::sleep(Duration::from_millis(10 + 25 * round));
        let d3 = env.path(&format!("{work}/d3"));
        let aside = env.path(&format!("aside{round}"));
        let swapped =
            fs::rename(&d3, &aside).is_ok() && std::os::unix::fs::symlink(&outside, &d3).is_ok();
        let status = child.wait().unwrap();
        assert_eq!(
            snapshot_tree(&outside),
            before,
            "round {round}: checkout wrote outside its directory (exit {status}, swapped {swapped})"
        );
    }
}

#[test]
fn export_writes_whole_files_only_and_never_replaces_a_device_a_fifo_or_a_symlink() {
    let env = TestEnv::new();
    env.write("data/a.txt", "a\n");
    env.ok(&["commit", "data", "-d", "d"]);
    // A symlink is followed, as a shell's `>` does: the link stays, its target gets the tar.
    env.write("elsewhere.tar", "old\n");
    std::os::unix::fs::symlink(env.path("elsewhere.tar"), env.path("out.tar")).unwrap();
    env.ok(&["export", "d", "-o", "out.tar"]);
    assert!(
        fs::symlink_metadata(env.path("out.tar"))
            .unwrap()
            .is_symlink()
    );
    assert!(fs::read(env.path("elsewhere.tar")).unwrap().len() > 512);
    // A symlink into a store is refused, and the store's file is untouched.
    let catalog = env.path(".dsv/catalog.db");
    let before = fs::read(&catalog).unwrap();
    std::os::unix::fs::symlink(&catalog, env.path("sneaky.tar")).unwrap();
    assert!(
        !env.run(&["export", "d", "-o", "sneaky.tar"])
            .status
            .success()
    );
    assert_eq!(fs::read(&catalog).unwrap(), before);
    // A FIFO (as /dev/null, a device) is written to, never replaced by a file.
    let fifo = env.path("pipe");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let reading = {
        let fifo = fifo.clone();
        std::thread::spawn(move || fs::read(fifo).unwrap().len())
    };
    env.ok(&["export", "d", "-o", "pipe"]);
    assert!(reading.join().unwrap() > 512);
    use std::os::unix::fs::FileTypeExt;
    assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
    // A failed export leaves no archive and no temporary file behind.
    assert!(
        !env.run(&["export", "d@nosuchtag", "-o", "bad.tar"])
            .status
            .success()
    );
    assert!(!env.path("bad.tar").exists());
    let leftovers: Vec<_> = fs::read_dir(env.root())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".export-"))
        .collect();
    assert!(leftovers.is_empty());
}

/// Finding 3: checkout checks the bytes and inodes it will write against what the disk has,
/// before it writes anything.
#[test]
fn a_checkout_larger_than_its_disk_is_refused_before_anything_is_written() {
    let env = TestEnv::new();
    env.write("big/blob.bin", pseudo_random(6 << 20, 11));
    env.ok(&["commit", "big", "-d", "big"]);
    for i in 0..300 {
        env.write(&format!("many/f{i}"), format!("{i}\n"));
    }
    env.ok(&["commit", "many", "-d", "many"]);
    let Some(_disk) = crate::common::SmallDisk::mount(&env.path("small"), "2M") else {
        return; // skipped: SmallDisk::mount reported why
    };
    let error = env.json_error(&["checkout", "big", "small/out"], 6);
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("needs") && message.contains("free"),
        "{error}"
    );
    assert_eq!(fs::read_dir(env.path("small/out")).unwrap().count(), 0);
    drop(_disk);

    // Inodes: a tmpfs with room for bytes, but not for 300 files.
    let tiny = env.path("few");
    fs::create_dir_all(&tiny).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64M,nr_inodes=100", "tmpfs"])
        .arg(&tiny)
        .status()
        .unwrap();
    assert!(mounted.success());
    let error = env.json_error(&["checkout", "many", "few/out"], 6);
    let _ = std::process::Command::new("umount")
        .arg("-l")
        .arg(&tiny)
        .status();
    assert!(
        error["message"].as_str().unwrap().contains("inodes"),
        "{error}"
    );
}

#[test]
fn sparse_content_is_checked_out_sparse() {
    use std::os::unix::fs::MetadataExt;
    let env = TestEnv::new();
    let mut content = vec![0u8; 24 << 20];
    content.extend_from_slice(&pseudo_random(100_000, 5));
    content.extend(vec![0u8; 8 << 20]);
    env.write("data/sparse.img", &content);
    env.ok(&["commit", "data", "-d", "d"]);
    env.ok(&["checkout", "d", "out"]);
    let written = env.path("out/sparse.img");
    assert_eq!(fs::read(&written).unwrap(), content);
    let allocated = fs::metadata(&written).unwrap().blocks() * 512;
    assert!(
        allocated < (content.len() as u64) / 4,
        "{allocated} bytes allocated for {} of mostly zeros",
        content.len()
    );
}

/// The hostile review of this round: a hard link (or a FIFO) planted at the temporary name a
/// checkout stages under, before it is created or while its segments are written, never
/// makes the checkout write into the linked file, hang, or finish with the wrong content.
#[test]
fn a_hard_link_planted_at_a_staging_name_never_receives_the_checkout() {
    use std::os::unix::fs::MetadataExt;
    let env = TestEnv::new();
    // One large file (staged in segments) and many small ones.
    env.write("data/big.bin", pseudo_random(48 << 20, 1));
    for i in 0..2000 {
        env.write(&format!("data/small/f{i:04}"), format!("one {i}\n"));
    }
    env.ok(&["commit", "data", "-d", "d", "-t", "v1"]);
    env.write("data/big.bin", pseudo_random(48 << 20, 2));
    for i in 0..2000 {
        env.write(&format!("data/small/f{i:04}"), format!("two {i}\n"));
    }
    env.ok(&["commit", "data", "-d", "d", "-t", "v2"]);
    let victim = env.path("victim");
    for round in 0..3 {
        fs::write(&victim, "precious\n").unwrap();
        let work = format!("work{round}");
        env.ok(&["checkout", "d@v1", &work]);
        let mut child = env.spawn(&["checkout", "d@v2", &work, "--jobs", "1"]);
        let pid = child.id();
        // Plant links at the names the small files will be staged under, and swap one over
        // each temporary name that appears (the large file's, while its segments are written).
        for n in 1..=2100u64 {
            let _ = fs::hard_link(
                &victim,
                env.path(&format!("{work}/small/.dsv-tmp-{pid}-{n}")),
            );
        }
        let started = std::time::Instant::now();
        while child.try_wait().unwrap().is_none() && started.elapsed() < Duration::from_secs(60) {
            for entry in fs::read_dir(env.path(&work)).unwrap().flatten() {
                let name = entry.file_name().into_string().unwrap();
                if name.starts_with(".dsv-tmp-") && entry.metadata().is_ok_and(|m| m.nlink() == 1) {
                    let planted = env.path(&format!("{work}/planted"));
                    if fs::hard_link(&victim, &planted).is_ok() {
                        let _ = fs::rename(&planted, entry.path());
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let status = child.wait().unwrap();
        assert_eq!(
            fs::read_to_string(&victim).unwrap(),
            "precious\n",
            "round {round}: the checkout wrote into a file outside (exit {status})"
        );
        if status.success() {
            // A checkout that says it succeeded holds exactly the version.
            let audit = env.run(&["audit", &work]);
            assert!(audit.status.success(), "round {round}: {audit:?}");
        }
        // Whatever was swapped in is never vouched for: status sees it.
        if fs::read(env.path(&format!("{work}/big.bin"))).is_ok_and(|b| b == b"precious\n") {
            let report = env.json(&["status", &work]);
            assert!(
                report.to_string().contains("big.bin"),
                "round {round}: {report}"
            );
        }
    }
}

#[test]
fn a_file_replaced_by_an_empty_directory_is_a_change() {
    let env = TestEnv::new();
    two_versions(&env, false);
    env.ok(&["checkout", "d@v1", "work"]);
    fs::remove_file(env.path("work/changes.txt")).unwrap();
    fs::create_dir_all(env.path("work/changes.txt/sub/deeper")).unwrap();
    let error = env.json_error(&["checkout", "d@v2", "work"], 4);
    assert!(error.to_string().contains("changes.txt"), "{error}");
    assert!(env.path("work/changes.txt/sub/deeper").is_dir());
}

#[test]
fn export_keeps_the_mode_a_new_file_gets() {
    use std::os::unix::fs::PermissionsExt;
    let env = TestEnv::new();
    env.write("data/a.txt", "a\n");
    env.ok(&["commit", "data", "-d", "d"]);
    env.ok(&["export", "d", "-o", "out.tar"]);
    let mode = fs::metadata(env.path("out.tar"))
        .unwrap()
        .permissions()
        .mode();
    // 0666 less the umask (022 here): readable by group and others, as `>` makes it.
    assert_eq!(mode & 0o077, 0o044 & mode & 0o077);
    assert_ne!(mode & 0o044, 0, "mode {mode:o}");
}
