//! `dsv mount`: real FUSE mounts of committed versions (skipped, and reported as skipped,
//! where `/dev/fuse` or `fusermount3` is missing; CI installs fuse3, runs as root and requires
//! them).

use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use crate::common::{
    TestEnv, assert_same_tree, lacks_fuse, lacks_root, make_executable, pseudo_random, skip_for,
    wait_until,
};

/// Whether FUSE mounts can be tried here; when not, the test is skipped and reported
/// (see `skip_for`: CI requires `fuse`).
fn fuse_available() -> bool {
    !skip_for("fuse", lacks_fuse())
}

/// Whether `/proc/mounts` lists a mount at `point`.
fn is_mounted(point: &Path) -> bool {
    let point = point.canonicalize().unwrap_or_else(|_| point.to_path_buf());
    std::fs::read_to_string("/proc/mounts")
        .unwrap()
        .lines()
        .any(|line| line.split(' ').nth(1) == point.to_str())
}

fn fusermount_u(point: &Path) -> bool {
    Command::new("fusermount3")
        .arg("-u")
        .arg(point)
        .status()
        .unwrap()
        .success()
}

/// A `dsv mount` running in the background; unmounted (lazily if need be) and reaped on drop.
struct Mounted {
    child: Child,
    point: PathBuf,
}

impl Mounted {
    /// Starts `dsv mount REV DIR ARGS...` (DIR is created) and waits until it answers.
    fn start(env: &TestEnv, revision: &str, dir: &str, extra: &[&str]) -> Mounted {
        let point = env.path(dir);
        std::fs::create_dir_all(&point).unwrap();
        let mut args = vec!["mount", revision, dir];
        args.extend_from_slice(extra);
        let child = env.spawn(&args);
        let mut mounted = Mounted {
            child,
            point: point.canonicalize().unwrap(),
        };
        wait_until("the mount to come up", || {
            if let Some(status) = mounted.child.try_wait().unwrap() {
                let out = mounted.child.stderr.take().map(std::io::read_to_string);
                panic!("dsv mount exited with {status}: {out:?}");
            }
            is_mounted(&mounted.point) && std::fs::read_dir(&mounted.point).is_ok()
        });
        mounted
    }

    /// Waits for the dsv process to end; its exit code.
    fn wait(&mut self) -> Option<i32> {
        let mut status = None;
        wait_until("dsv mount to exit", || {
            status = self.child.try_wait().unwrap();
            status.is_some()
        });
        status.unwrap().code()
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if is_mounted(&self.point) {
            let _ = Command::new("fusermount3")
                .args(["-u", "-z"])
                .arg(&self.point)
                .status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A version with nested directories, a multi-chunk file, an executable, an empty file and
/// a symlink; returns the big file's bytes.
fn committed(env: &TestEnv) -> Vec<u8> {
    let big = pseudo_random(3_000_000, 7);
    env.write("data/big.bin", &big);
    env.write("data/a.txt", "hello\n");
    env.write("data/empty", "");
    env.write("data/train/x/1.txt", "one\n");
    env.write("data/train/x/2.txt", "two two\n");
    env.write("data/train/y/3.txt", pseudo_random(70_000, 3));
    env.write("data/run.sh", "#!/bin/sh\necho hi\n");
    make_executable(&env.path("data/run.sh"));
    std::os::unix::fs::symlink("a.txt", env.path("data/link")).unwrap();
    env.ok(&["commit", "data", "-d", "ds", "-m", "one"]);
    env.ok(&["checkout", "ds", "co"]);
    big
}

#[test]
fn mount_serves_the_version_read_only_and_fusermount_ends_it() {
    if !fuse_available() {
        return;
    }
    let env = TestEnv::new();
    let big = committed(&env);
    let mut mount = Mounted::start(&env, "ds", "mnt", &[]);
    let mnt = mount.point.clone();
    // The same tree as a checkout: paths, bytes, link targets, executable bits.
    assert_same_tree(&env.path("co"), &mnt);
    // Modes, sizes and owner.
    let meta = |p: &str| std::fs::symlink_metadata(mnt.join(p)).unwrap();
    assert_eq!(meta("a.txt").permissions().mode() & 0o7777, 0o444);
    assert_eq!(meta("run.sh").permissions().mode() & 0o7777, 0o555);
    assert_eq!(meta("train").permissions().mode() & 0o7777, 0o555);
    assert!(meta("link").file_type().is_symlink());
    assert_eq!(meta("big.bin").len(), big.len() as u64);
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&meta("a.txt")),
        std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(env.root()).unwrap())
    );
    let ls = Command::new("ls").arg("-l").arg(&mnt).output().unwrap();
    let ls = String::from_utf8(ls.stdout).unwrap();
    assert!(
        ls.lines().any(|l| l.starts_with("-r--r--r--")
            && l.contains(" 3000000 ")
            && l.ends_with("big.bin")),
        "{ls}"
    );
    assert!(
        ls.lines()
            .any(|l| l.starts_with("-r-xr-xr-x") && l.ends_with("run.sh")),
        "{ls}"
    );
    // find sees every path.
    let find = Command::new("find")
        .arg(".")
        .current_dir(&mnt)
        .output()
        .unwrap();
    let mut found: Vec<String> = String::from_utf8(find.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    found.sort();
    assert_eq!(
        found,
        [
            ".",
            "./a.txt",
            "./big.bin",
            "./empty",
            "./link",
            "./run.sh",
            "./train",
            "./train/x",
            "./train/x/1.txt",
            "./train/x/2.txt",
            "./train/y",
            "./train/y/3.txt"
        ]
    );
    let cat = Command::new("cat")
        .arg(mnt.join("train/x/2.txt"))
        .output()
        .unwrap();
    assert_eq!(cat.stdout, b"two two\n");
    // pread at pseudo-random offsets, through one open file.
    let file = std::fs::File::open(mnt.join("big.bin")).unwrap();
    let mut state = 12345u64;
    for _ in 0..100 {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let offset = (state % (big.len() as u64 + 100)) as usize;
        let mut buf = vec![0u8; ((state >> 35) % 200_000) as usize];
        let n = file.read_at(&mut buf, offset as u64).unwrap();
        let start = offset.min(big.len());
        let end = (start + buf.len()).min(big.len());
        assert_eq!(n, end - start);
        assert_eq!(&buf[..n], &big[start..end]);
    }
    drop(file);
    // Nothing writes.
    let erofs = |result: std::io::Result<()>| {
        assert_eq!(result.unwrap_err().raw_os_error(), Some(30), "EROFS");
    };
    erofs(std::fs::write(mnt.join("a.txt"), "changed"));
    erofs(std::fs::write(mnt.join("new.txt"), "new"));
    erofs(std::fs::create_dir(mnt.join("newdir")));
    erofs(std::fs::remove_file(mnt.join("a.txt")));
    erofs(std::fs::rename(mnt.join("a.txt"), mnt.join("b.txt")));
    erofs(
        std::fs::OpenOptions::new()
            .append(true)
            .open(mnt.join("a.txt"))
            .map(drop),
    );
    assert_eq!(std::fs::read(mnt.join("a.txt")).unwrap(), b"hello\n");
    // A second mount on a busy mount point is refused at once.
    let busy = env.fails(&["mount", "ds", "mnt"], 3);
    assert!(busy.contains("busy"), "{busy}");
    // Unmounted from outside: dsv ends by itself, successfully.
    assert!(fusermount_u(&mnt));
    assert_eq!(mount.wait(), Some(0));
    assert!(!is_mounted(&mnt));
    assert_eq!(std::fs::read_dir(&mnt).unwrap().count(), 0);
}

/// A version whose data is on two remotes, the first in read order of which vanished:
/// reads through the mount get every file from the second (issue 27, reading from the
/// nearest copy).
#[test]
fn mount_reads_fall_back_from_a_vanished_remote_to_the_next() {
    if !fuse_available() {
        return;
    }
    let writer = TestEnv::new();
    crate::nearest::dataset(&writer, "data", 4);
    let id = crate::nearest::commit(&writer);
    let (near, origin) = crate::nearest::two_copies(&writer);
    let reader = crate::nearest::reader_of(&near, &origin);
    crate::nearest::vanish(&near);
    let mount = Mounted::start(&reader, &format!("ds@{id}"), "mnt", &[]);
    assert_same_tree(&writer.path("data"), &mount.point);
}

#[test]
fn mount_of_a_shard_shows_only_its_files() {
    if !fuse_available() {
        return;
    }
    let env = TestEnv::new();
    committed(&env);
    let plans = env.json(&["shards", "ds", "2"]);
    let mut expected: Vec<String> = plans[0]["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect();
    expected.sort();
    assert!(!expected.is_empty());
    let mount = Mounted::start(&env, "ds", "mnt", &["--shard", "0/2"]);
    let mut files = Vec::new();
    for entry in walkdir::WalkDir::new(&mount.point).min_depth(1) {
        let entry = entry.unwrap();
        let relative = entry.path().strip_prefix(&mount.point).unwrap();
        if entry.file_type().is_file() {
            files.push(relative.to_str().unwrap().to_string());
            assert_eq!(
                std::fs::read(entry.path()).unwrap(),
                std::fs::read(env.path("co").join(relative)).unwrap()
            );
        } else {
            // Only the directories on the selected files' paths; no symlinks.
            assert!(entry.file_type().is_dir(), "{}", relative.display());
            let prefix = format!("{}/", relative.to_str().unwrap());
            assert!(expected.iter().any(|p| p.starts_with(&prefix)), "{prefix}");
        }
    }
    files.sort();
    assert_eq!(files, expected);
    // --include: only what matches.
    let include = Mounted::start(&env, "ds", "mnt2", &["--include", "train/x/**"]);
    let mut found: Vec<String> = walkdir::WalkDir::new(&include.point)
        .min_depth(1)
        .into_iter()
        .map(|e| {
            let e = e.unwrap();
            e.path()
                .strip_prefix(&include.point)
                .unwrap()
                .to_str()
                .unwrap()
                .to_string()
        })
        .collect();
    found.sort();
    assert_eq!(
        found,
        ["train", "train/x", "train/x/1.txt", "train/x/2.txt"]
    );
}

#[test]
fn mount_refuses_a_missing_mountpoint_and_a_file() {
    if !fuse_available() {
        return;
    }
    let env = TestEnv::new();
    env.write("data/a.txt", "a");
    env.ok(&["commit", "data", "-d", "ds"]);
    let missing = env.fails(&["mount", "ds", "nowhere"], 3);
    assert!(missing.contains("does not exist"), "{missing}");
    let file = env.fails(&["mount", "ds", "data/a.txt"], 3);
    assert!(file.contains("not a directory"), "{file}");
    std::fs::create_dir(env.path("mnt")).unwrap();
    let unknown = env.fails(&["mount", "nope", "mnt"], 3);
    assert!(unknown.contains("nope"), "{unknown}");
    assert!(!is_mounted(&env.path("mnt")));
}

#[test]
fn sigterm_unmounts_cleanly() {
    if !fuse_available() {
        return;
    }
    let env = TestEnv::new();
    committed(&env);
    let mut mount = Mounted::start(&env, "ds", "mnt", &[]);
    assert_eq!(
        std::fs::read(mount.point.join("a.txt")).unwrap(),
        b"hello\n"
    );
    let term = Command::new("kill")
        .args(["-TERM", &mount.child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    assert_eq!(mount.wait(), Some(0));
    assert!(!is_mounted(&mount.point));
}

#[test]
fn a_killed_mount_is_released_by_fusermount_and_the_store_stays_whole() {
    if !fuse_available() {
        return;
    }
    let env = TestEnv::new();
    committed(&env);
    let mut mount = Mounted::start(&env, "ds", "mnt", &[]);
    let mut file = std::fs::File::open(mount.point.join("big.bin")).unwrap();
    let mut head = [0u8; 1000];
    std::io::Read::read_exact(&mut file, &mut head).unwrap();
    drop(file);
    mount.child.kill().unwrap(); // SIGKILL
    mount.child.wait().unwrap();
    // A dead mount: still listed, refused as a mount point with a clear message.
    assert!(is_mounted(&mount.point));
    let dead = env.fails(&["mount", "ds", "mnt"], 3);
    assert!(dead.contains("fusermount3 -u"), "{dead}");
    assert!(fusermount_u(&mount.point));
    assert!(!is_mounted(&mount.point));
    env.ok(&["verify"]);
    // And it mounts again.
    let again = Mounted::start(&env, "ds", "mnt", &[]);
    assert_same_tree(&env.path("co"), &again.point);
}

/// A clone of a two-file version pushed to a `file://` remote, the clone's store at `c`:
/// (the origin env, the remote's directory, the clone env, the two files' bytes).
fn remote_only_clone() -> (TestEnv, PathBuf, TestEnv, Vec<u8>, Vec<u8>) {
    let env = TestEnv::new();
    let one = pseudo_random(3_000_000, 91);
    let two = pseudo_random(3_000_000, 93);
    env.write("d/one.bin", &one);
    env.write("d/two.bin", &two);
    env.ok(&["commit", "d", "-d", "ds"]);
    let (remote, url) = crate::common::push_to_file_remote(&env, "remote", "ds");
    let clone = TestEnv::bare();
    clone.ok(&["clone", &url, "c"]);
    (env, remote, clone, one, two)
}

const EIO: i32 = 5;

#[test]
fn a_remote_going_away_fails_only_what_it_must_serve_and_the_next_read_retries() {
    if !fuse_available() {
        return;
    }
    let (env, remote, clone, one, two) = remote_only_clone();
    let mount = Mounted::start(&clone, "ds", "mnt", &["--store", "c"]);
    assert!(std::fs::read(mount.point.join("one.bin")).unwrap() == one);
    // The remote goes away: the file only it holds cannot be read (EIO), the rest is served.
    let away = env.path("remote-away");
    std::fs::rename(&remote, &away).unwrap();
    let error = std::fs::read(mount.point.join("two.bin")).unwrap_err();
    assert_eq!(error.raw_os_error(), Some(EIO), "{error}");
    assert!(std::fs::read(mount.point.join("one.bin")).unwrap() == one);
    assert!(std::fs::read_dir(&mount.point).unwrap().count() == 2);
    // It is back: the next read fetches.
    let _ = std::fs::remove_dir(&remote);
    std::fs::rename(&away, &remote).unwrap();
    assert!(std::fs::read(mount.point.join("two.bin")).unwrap() == two);
}

#[test]
fn a_corrupt_frame_on_the_remote_is_eio_and_nothing_of_it_is_stored() {
    if !fuse_available() {
        return;
    }
    let (_env, remote, clone, _one, _two) = remote_only_clone();
    // Damage the remote's pack in the middle of its file data (after the clone, which read
    // only metadata).
    crate::common::damage_first_pack(&remote.join("packs"));
    let packs_here = |env: &TestEnv| std::fs::read_dir(env.path("c/.dsv/packs")).unwrap().count();
    let before = packs_here(&clone);
    let mount = Mounted::start(&clone, "ds", "mnt", &["--store", "c"]);
    let mut failed = 0;
    for name in ["one.bin", "two.bin"] {
        if let Err(error) = std::fs::read(mount.point.join(name)) {
            assert_eq!(error.raw_os_error(), Some(EIO), "{error}");
            failed += 1;
        }
    }
    assert_eq!(failed, 1, "the damaged file fails, the other reads");
    drop(mount);
    let verify = clone.json(&["--store", "c", "verify"]);
    assert_eq!(verify["files_on_remotes"], 1, "{verify}");
    assert!(
        verify["problems"].as_array().unwrap().is_empty(),
        "{verify}"
    );
    // The good file's frames were stored (in as many packs as the reads fetched spans);
    // nothing of the damaged frame was (verify finds every pack here sound, above).
    assert!(
        packs_here(&clone) > before,
        "the good file's data was stored"
    );
}

#[test]
fn mount_refuses_a_cache_size_that_is_not_a_size_or_out_of_bounds() {
    // clap checks --cache-size before the store or FUSE is touched: no FUSE needed here.
    let env = TestEnv::new();
    env.write("data/a.txt", "a");
    env.ok(&["commit", "data", "-d", "ds"]);
    std::fs::create_dir(env.path("mnt")).unwrap();
    let cases = [
        ("lots", "not a size"),
        ("12XB", "unknown size unit"),
        ("1MiB", "less than the smallest cache, 16MiB"),
        ("1000TB", "more than this machine's memory"),
    ];
    for (size, expected) in cases {
        let error = env.fails(&["mount", "ds", "mnt", "--cache-size", size], 2);
        assert!(error.contains("--cache-size"), "{size}: {error}");
        assert!(error.contains(expected), "{size}: {error}");
    }
    assert!(!is_mounted(&env.path("mnt")));
}

/// The read requests the mount's trace log (`DSV_LOG=dsv::mount=trace`) shows for `path`:
/// (offset, size).
fn read_requests(log: &str, path: &str) -> Vec<(u64, u64)> {
    let field = |line: &str, name: &str| -> Option<u64> {
        let start = line.find(&format!(" {name}="))? + name.len() + 2;
        let digits: String = line[start..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    };
    log.lines()
        .filter(|l| l.contains("mount: read") && l.contains(&format!("path={path} ")))
        .map(|l| (field(l, "offset").unwrap(), field(l, "size").unwrap()))
        .collect()
}

#[test]
fn a_file_read_again_through_the_mount_comes_from_the_page_cache() {
    if !fuse_available() {
        return;
    }
    let env = TestEnv::new();
    let big = committed(&env);
    env.set_var("DSV_LOG", "dsv::mount=trace");
    // Without passthrough: the page cache of the FUSE file is what serves the second read.
    let mut mount = Mounted::start(
        &env,
        "ds",
        "mnt",
        &["--cache-size", "64MiB", "--no-passthrough"],
    );
    let path = mount.point.join("big.bin");
    // Where dsv may set the mount's read-ahead window (root), the kernel asks in requests
    // larger than its default 128 KiB. dsv widens it just after the mount comes up, so it
    // is read here, before the first read: a window still at 128 KiB now (the reads below
    // may start before dsv widened it) asserts nothing about request sizes.
    use std::os::unix::fs::MetadataExt;
    let device = std::fs::metadata(&mount.point).unwrap().dev();
    let setting = format!(
        "/sys/class/bdi/{}:{}/read_ahead_kb",
        device >> 8 & 0xfff,
        device & 0xff | (device >> 12 & !0xff)
    );
    // Give dsv a moment to widen it (a busy machine may run this test first); where it
    // cannot (not root), the kernel's default stays and nothing is asserted of it.
    let mut window = std::fs::read_to_string(&setting);
    for _ in 0..100 {
        if window.as_ref().is_ok_and(|w| w.trim() == "1024") || lacks_root("").is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        window = std::fs::read_to_string(&setting);
    }
    // Read whole twice, each through its own open: the same bytes.
    assert!(std::fs::read(&path).unwrap() == big, "first read");
    assert!(std::fs::read(&path).unwrap() == big, "second read");
    // Two opens at once, read in turns at their own offsets: the same bytes again.
    let (one, two) = (
        std::fs::File::open(&path).unwrap(),
        std::fs::File::open(&path).unwrap(),
    );
    let half = big.len() / 2;
    let mut buffer = vec![0u8; 300_000];
    for step in 0..4 {
        let offset = step * 300_000;
        let n = one.read_at(&mut buffer, offset as u64).unwrap();
        assert_eq!(&buffer[..n], &big[offset..offset + n]);
        let n = two.read_at(&mut buffer, (half + offset) as u64).unwrap();
        assert_eq!(&buffer[..n], &big[half + offset..half + offset + n]);
    }
    drop((one, two));
    let point = mount.point.clone();
    assert!(fusermount_u(&point));
    assert_eq!(mount.wait(), Some(0));
    let log = std::io::read_to_string(mount.child.stderr.take().unwrap()).unwrap();
    let requests = read_requests(&log, "big.bin");
    // The kernel kept the file's pages across opens (FOPEN_KEEP_CACHE): every byte was
    // asked of dsv once, by the first read; the second read and the two later opens were
    // served by the page cache alone.
    let mut asked: Vec<(u64, u64)> = requests.clone();
    asked.sort();
    let mut covered = 0u64;
    for (offset, size) in &asked {
        assert_eq!(*offset, covered, "asked twice or out of order: {asked:?}");
        covered += size.min(&(big.len() as u64 - offset));
    }
    assert_eq!(covered, big.len() as u64, "{asked:?}");
    if window.is_ok_and(|w| w.trim() == "1024") {
        assert!(
            requests.iter().any(|(_, size)| *size > 128 * 1024),
            "{requests:?}"
        );
    }
}

/// What this machine lacks for FUSE passthrough (issue 36), if it does: root (the kernel
/// wants `CAP_SYS_ADMIN` for a backing file) and Linux 6.9+.
fn lacks_passthrough() -> Option<String> {
    if let Some(lack) = lacks_root("FUSE passthrough") {
        return Some(lack);
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut numbers = release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse::<u32>().ok());
    let version = (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0));
    (version < (6, 9)).then(|| format!("FUSE passthrough needs Linux 6.9+, this is {release}"))
}

/// Whether FUSE passthrough can be tried here; when not, the test is skipped and reported.
fn passthrough_available() -> bool {
    fuse_available() && !skip_for("fuse-passthrough", lacks_passthrough())
}

impl Mounted {
    /// The [MountInfo] a mount started with `--json` printed.
    fn info(&mut self) -> serde_json::Value {
        use std::io::BufRead;
        let mut lines = std::io::BufReader::new(self.child.stdout.take().unwrap()).lines();
        let mut text = String::new();
        for line in lines.by_ref() {
            let line = line.unwrap();
            text.push_str(&line);
            if line == "}" {
                break;
            }
        }
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    }

    /// Unmounts with `fusermount3 -u`, waits for dsv to end; its log (stderr). An unmount
    /// just after a file was closed may find the mount busy for a moment (seen 2 times in
    /// about 100 runs on a loaded machine): tried again until it is not.
    fn unmount(mut self) -> String {
        wait_until("fusermount3 -u to unmount", || fusermount_u(&self.point));
        assert_eq!(self.wait(), Some(0));
        std::io::read_to_string(self.child.stderr.take().unwrap()).unwrap()
    }
}

/// `path` read whole with `O_DIRECT` (`dd iflag=direct`): the kernel's page cache of the
/// FUSE file is bypassed, so each byte is either asked of dsv (a file served by dsv) or
/// read by the kernel from the backing file (passthrough).
fn read_direct(env: &TestEnv, path: &Path) -> Vec<u8> {
    let out = env.path("direct.out");
    let dd = Command::new("dd")
        .arg(format!("if={}", path.display()))
        .arg(format!("of={}", out.display()))
        .args(["bs=1M", "iflag=direct", "status=none"])
        .output()
        .unwrap();
    assert!(dd.status.success(), "{dd:?}");
    std::fs::read(out).unwrap()
}

/// The directories of passthrough copies in the store's `tmp/` (`mount-PID-N`).
fn backing_dirs(env: &TestEnv) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(env.path(".dsv/tmp"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("mount-")
        })
        .collect();
    dirs.sort();
    dirs
}

/// The files in `dir` (name, size).
fn files_in(dir: &Path) -> Vec<(String, u64)> {
    let mut files: Vec<(String, u64)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_str().unwrap().to_string(),
                e.metadata().unwrap().len(),
            )
        })
        .collect();
    files.sort();
    files
}

/// The bytes of `path` the mount's trace log shows dsv was asked for.
fn bytes_asked(log: &str, path: &str, size: u64) -> u64 {
    read_requests(log, path)
        .iter()
        .map(|(offset, asked)| (*asked).min(size.saturating_sub(*offset)))
        .sum()
}

#[test]
fn a_file_read_whole_once_is_then_read_by_the_kernel_through_passthrough() {
    if !passthrough_available() {
        return;
    }
    let env = TestEnv::new();
    let big = committed(&env);
    env.set_var("DSV_LOG", "dsv::mount=trace");
    let mut mount = Mounted::start(&env, "ds", "mnt", &["--json"]);
    let info = mount.info();
    assert_eq!(info["passthrough"], true, "{info}");
    assert!(
        info["passthrough_cache_bytes"].as_u64().unwrap() >= 1 << 20,
        "{info}"
    );
    let path = mount.point.join("big.bin");
    // The first read is served by dsv, which copies what it serves.
    assert!(std::fs::read(&path).unwrap() == big, "first read");
    let dirs = backing_dirs(&env);
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    let copies = files_in(&dirs[0]);
    assert_eq!(copies.len(), 1, "{copies:?}");
    assert_eq!(copies[0].1, big.len() as u64, "{copies:?}");
    assert!(!copies[0].0.ends_with(".partial"), "complete: {copies:?}");
    // The copies are the mounting user's alone.
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dirs[0]), 0o700);
    assert_eq!(mode(&dirs[0].join(&copies[0].0)), 0o600);
    // Read again, past the FUSE file's page cache (O_DIRECT): the kernel reads the copy,
    // dsv is asked for nothing; the bytes are the version's.
    assert!(read_direct(&env, &path) == big, "second read (O_DIRECT)");
    assert!(std::fs::read(&path).unwrap() == big, "third read");
    let file = std::fs::File::open(&path).unwrap();
    let mut buffer = vec![0u8; 100_000];
    for offset in [0usize, 1, 777_777, 2_950_000] {
        let n = file.read_at(&mut buffer, offset as u64).unwrap();
        assert_eq!(n, (big.len() - offset).min(buffer.len()));
        assert_eq!(&buffer[..n], &big[offset..offset + n]);
    }
    drop(file);
    // Small files are not copied, and read as before.
    assert_eq!(
        std::fs::read(mount.point.join("a.txt")).unwrap(),
        b"hello\n"
    );
    assert_eq!(files_in(&dirs[0]).len(), 1);
    let log = mount.unmount();
    // dsv served the file once, for the first read.
    assert_eq!(
        bytes_asked(&log, "big.bin", big.len() as u64),
        big.len() as u64,
        "{:?}",
        read_requests(&log, "big.bin")
    );
}

#[test]
fn no_passthrough_serves_every_read_through_dsv() {
    if !fuse_available() {
        return;
    }
    let env = TestEnv::new();
    let big = committed(&env);
    env.set_var("DSV_LOG", "dsv::mount=trace");
    let mut mount = Mounted::start(&env, "ds", "mnt", &["--json", "--no-passthrough"]);
    let info = mount.info();
    assert_eq!(info["passthrough"], false, "{info}");
    assert_eq!(info["passthrough_cache_bytes"], 0, "{info}");
    let path = mount.point.join("big.bin");
    assert!(std::fs::read(&path).unwrap() == big, "first read");
    assert!(read_direct(&env, &path) == big, "second read (O_DIRECT)");
    assert!(backing_dirs(&env).is_empty(), "nothing is copied");
    let log = mount.unmount();
    // Both reads were served by dsv.
    assert_eq!(
        bytes_asked(&log, "big.bin", big.len() as u64),
        2 * big.len() as u64,
        "{:?}",
        read_requests(&log, "big.bin")
    );
    // `--passthrough-cache 0` is the same.
    let mut zero = Mounted::start(&env, "ds", "mnt", &["--json", "--passthrough-cache", "0"]);
    assert_eq!(zero.info()["passthrough"], false);
    assert!(std::fs::read(&path).unwrap() == big);
    assert!(backing_dirs(&env).is_empty(), "nothing is copied");
}

#[test]
fn passthrough_copies_stay_within_their_budget_and_every_file_reads_right() {
    if !passthrough_available() {
        return;
    }
    let env = TestEnv::new();
    let files: Vec<(String, Vec<u8>)> = (0..5)
        .map(|i| (format!("f{i}.bin"), pseudo_random(3_000_000, 100 + i)))
        .chain([("huge.bin".to_string(), pseudo_random(8_000_000, 99))])
        .collect();
    for (name, bytes) in &files {
        env.write(&format!("data/{name}"), bytes);
    }
    env.ok(&["commit", "data", "-d", "ds"]);
    env.set_var("DSV_LOG", "dsv::mount=trace");
    // Room for two of the 3 MB files; the 8 MB one never fits.
    let budget = 7_000_000u64;
    let mut mount = Mounted::start(&env, "ds", "mnt", &["--json", "--passthrough-cache", "7MB"]);
    let info = mount.info();
    assert_eq!(info["passthrough"], true, "{info}");
    assert_eq!(info["passthrough_cache_bytes"], budget, "{info}");
    let dir = backing_dirs(&env).pop().unwrap();
    let copied = || files_in(&dir).iter().map(|(_, size)| size).sum::<u64>();
    for round in 0..2 {
        for (name, bytes) in &files {
            let path = mount.point.join(name);
            assert!(
                std::fs::read(&path).unwrap() == *bytes,
                "{name}, round {round}"
            );
            assert!(copied() <= budget, "{:?}", files_in(&dir));
            assert!(read_direct(&env, &path) == *bytes, "{name} (O_DIRECT)");
            assert!(copied() <= budget, "{:?}", files_in(&dir));
        }
    }
    // The last two 3 MB files read are the ones kept.
    assert_eq!(files_in(&dir).len(), 2, "{:?}", files_in(&dir));
    let log = mount.unmount();
    // A budget past the disk's free space is cut to half of it.
    let mut greedy = Mounted::start(
        &env,
        "ds",
        "mnt",
        &["--json", "--passthrough-cache", "1000000TB"],
    );
    let greedy_budget = greedy.info()["passthrough_cache_bytes"].as_u64().unwrap();
    let free = nix::sys::statvfs::statvfs(&env.path(".dsv/tmp")).unwrap();
    let free = free.blocks_available() * free.fragment_size();
    // (Half of the free space at mount; the disk is shared: compared with all of it now.)
    assert!(
        (1..=free).contains(&greedy_budget),
        "{greedy_budget} of {free}"
    );
    greedy.unmount();
    for (name, bytes) in &files {
        let size = bytes.len() as u64;
        let asked = bytes_asked(&log, name, size);
        if name == "huge.bin" {
            // Never copied: its reads were served by dsv (the second round's buffered read
            // may come from the page cache of the FUSE file).
            assert!(asked >= 3 * size, "{name}: {asked}");
        } else {
            // The first read of each round was served by dsv (the copy of round 1 was
            // evicted before round 2), the O_DIRECT read after it by the kernel from the
            // copy: served by dsv, the two O_DIRECT reads alone would be 2 * size.
            assert!(
                (size..=2 * size).contains(&asked),
                "{name}: {asked}: {:?}",
                read_requests(&log, name)
            );
        }
    }
}

#[test]
fn unmount_removes_the_passthrough_copies_and_a_killed_mounts_go_later() {
    if !passthrough_available() {
        return;
    }
    let env = TestEnv::new();
    let big = committed(&env);
    let mount = Mounted::start(&env, "ds", "mnt", &[]);
    assert!(std::fs::read(mount.point.join("big.bin")).unwrap() == big);
    let dirs = backing_dirs(&env);
    assert_eq!(dirs.len(), 1);
    assert_eq!(files_in(&dirs[0]).len(), 1);
    mount.unmount();
    assert!(backing_dirs(&env).is_empty(), "{:?}", backing_dirs(&env));
    // A killed mount leaves its copies behind; the next mount removes them.
    let kill_after_a_read = || {
        let mut mount = Mounted::start(&env, "ds", "mnt", &[]);
        assert!(std::fs::read(mount.point.join("big.bin")).unwrap() == big);
        mount.child.kill().unwrap(); // SIGKILL
        mount.child.wait().unwrap();
        assert!(fusermount_u(&mount.point));
        let dirs = backing_dirs(&env);
        assert_eq!(dirs.len(), 1);
        dirs[0].clone()
    };
    let left = kill_after_a_read();
    let again = Mounted::start(&env, "ds", "mnt", &[]);
    assert!(!left.exists(), "the next mount removed {}", left.display());
    assert_eq!(backing_dirs(&env).len(), 1, "its own");
    again.unmount();
    // And so does the store's cleanup of temporary files (a commit's).
    let left = kill_after_a_read();
    env.write("more/b.txt", "b\n");
    env.ok(&["commit", "more", "-d", "more"]);
    assert!(!left.exists(), "a commit removed {}", left.display());
}
