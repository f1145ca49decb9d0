//! The hermetic test environment: a temp dir holding a store, the real `dsv` binary run with
//! a cleared environment, and helpers to build and compare real directory trees.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use assert_cmd::Command;
use serde_json::Value;

/// A temp dir with a store in `root/.dsv`; commands run with `root` as current directory.
pub struct TestEnv {
    pub temp: tempfile::TempDir,
    /// Extra environment variables for every `dsv` run (remote endpoints, credentials).
    pub vars: std::cell::RefCell<Vec<(String, String)>>,
}

impl TestEnv {
    /// A fresh environment with an initialized store.
    pub fn new() -> TestEnv {
        let env = TestEnv::bare();
        env.ok(&["init"]);
        env
    }

    /// A fresh environment without a store, in a new directory of [`temp_base`].
    pub fn bare() -> TestEnv {
        TestEnv {
            temp: tempfile::Builder::new()
                .prefix("dsv-test-")
                .tempdir_in(temp_base())
                .expect("temp dir"),
            vars: Default::default(),
        }
    }

    pub fn root(&self) -> &Path {
        self.temp.path()
    }

    pub fn path(&self, relative: &str) -> PathBuf {
        self.root().join(relative)
    }

    /// The `dsv` binary with a cleared, sandboxed environment (see [`TestEnv::command`]), as
    /// an `assert_cmd` command.
    pub fn dsv(&self) -> Command {
        Command::from_std(self.command())
    }

    /// The `dsv` binary as a plain [`std::process::Command`] (to spawn, pipe or kill it),
    /// in the sandbox of [`TestEnv::sandbox`].
    pub fn command(&self) -> std::process::Command {
        self.sandbox().command()
    }

    /// The environment every `dsv` run of this test gets (see [`Sandbox`]): a plain value,
    /// to start `dsv` from other threads.
    pub fn sandbox(&self) -> Sandbox {
        Sandbox {
            root: self.root().to_path_buf(),
            vars: self.vars.borrow().clone(),
        }
    }

    /// Sets an environment variable for every later `dsv` run.
    pub fn set_var(&self, key: &str, value: &str) {
        self.vars
            .borrow_mut()
            .push((key.to_string(), value.to_string()));
    }

    /// Starts `dsv ARGS` in the background (stdout and stderr piped), in the sandbox of
    /// [`TestEnv::command`].
    pub fn spawn(&self, args: &[&str]) -> std::process::Child {
        self.command()
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start dsv")
    }

    /// Runs `dsv ARGS`; returns the output whatever the exit code.
    pub fn run(&self, args: &[&str]) -> Output {
        self.dsv().args(args).output().expect("run dsv")
    }

    /// Runs `dsv ARGS`, asserting success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "dsv {args:?} failed with {:?}\nstdout: {}\nstderr: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8 stdout")
    }

    /// Runs `dsv --json ARGS`, asserting success; returns the parsed JSON.
    pub fn json(&self, args: &[&str]) -> Value {
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        serde_json::from_str(&self.ok(&full)).expect("JSON output")
    }

    /// Runs `dsv ARGS` expecting exit code `code`; returns stderr.
    pub fn fails(&self, args: &[&str], code: i32) -> String {
        let out = self.run(args);
        assert_eq!(
            out.status.code(),
            Some(code),
            "dsv {args:?}: expected exit {code}\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stderr).expect("utf-8 stderr")
    }

    /// Runs `dsv --json ARGS` expecting exit code `code`; returns the JSON error object.
    pub fn json_error(&self, args: &[&str], code: i32) -> Value {
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        let out = self.run(&full);
        assert_eq!(
            out.status.code(),
            Some(code),
            "dsv {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let value: Value = serde_json::from_slice(&out.stdout).expect("JSON error on stdout");
        value["error"].clone()
    }

    /// Writes a file (creating parent directories).
    pub fn write(&self, relative: &str, contents: impl AsRef<[u8]>) {
        write_file(&self.path(relative), contents.as_ref());
    }

    /// Replaces the temp dir path, ids and times so human output can be snapshotted.
    pub fn normalize(&self, text: &str) -> String {
        let root = fs::canonicalize(self.root()).unwrap();
        let mut text = text
            .replace(root.to_str().unwrap(), "[ROOT]")
            .replace(self.root().to_str().unwrap(), "[ROOT]");
        for (pattern, replacement) in [
            (r"\b[0-9a-f]{64}\b", "[ID]"),
            (r"\b[0-9a-f]{12}\b", "[SHORT]"),
            (r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "[TIME]"),
            // Pack sizes depend on how worker threads happened to group chunks into frames.
            (r"packs \([^)]*\)", "packs ([SIZE])"),
        ] {
            text = regex::Regex::new(pattern)
                .unwrap()
                .replace_all(&text, replacement)
                .into_owned();
        }
        text
    }
}

/// Free bytes a RAM-backed directory needs for the tests to put their directories there.
const RAM_BASE_MIN_FREE: u64 = 4 << 30;

/// Where the tests make their directories: `DSV_TEST_TMPDIR` when set; else `/dev/shm` when
/// it is a writable tmpfs with at least [`RAM_BASE_MIN_FREE`] bytes free; else the system's
/// temp dir (`TMPDIR`, `/tmp`). Real directories all the same (stores, workspaces, SQLite
/// files), in RAM where it can: dsv syncs what it writes (packs, the catalog, renames), and
/// on a slow disk those syncs, not dsv's work, were most of a run (a checkout of 20,000
/// files: 82 s on the disk, 4 s in RAM, on a 2-core machine). Tests that need a disk of
/// their own size mount one ([`SmallDisk`]).
pub fn temp_base() -> PathBuf {
    static BASE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BASE.get_or_init(|| {
        if let Some(dir) = std::env::var_os("DSV_TEST_TMPDIR") {
            return PathBuf::from(dir);
        }
        let shm = Path::new("/dev/shm");
        let roomy = nix::sys::statvfs::statvfs(shm).is_ok_and(|stat| {
            stat.blocks_available().saturating_mul(stat.fragment_size()) >= RAM_BASE_MIN_FREE
        });
        let writable = roomy && tempfile::tempdir_in(shm).is_ok();
        if writable {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        }
    })
    .clone()
}

/// The path of the `dsv` binary under test. Start it with [`TestEnv::command`] (or
/// [`TestEnv::sandbox`] for a wrapper), never with the test process's own environment.
pub fn dsv_binary() -> PathBuf {
    assert_cmd::cargo::cargo_bin("dsv")
}

/// How a test starts `dsv`: in `root` (the [`TestEnv`]'s), with a cleared environment
/// holding only `HOME` and `TMPDIR` (both `root`), `DSV_AUTHOR`, `PATH` and the variables
/// set with [`TestEnv::set_var`] (remote endpoints, credentials). Nothing of the developer's
/// environment (`AWS_*`, `DSV_*`, `XDG_*`, `HOME`) reaches `dsv`. Every test starts `dsv`
/// through this ([`TestEnv::dsv`], [`TestEnv::spawn`], [`TestEnv::command`], or
/// [`Sandbox::apply`] for a wrapper such as `bash` or `script`).
#[derive(Clone, Debug)]
pub struct Sandbox {
    root: PathBuf,
    vars: Vec<(String, String)>,
}

impl Sandbox {
    /// The `dsv` binary, in the sandbox.
    pub fn command(&self) -> std::process::Command {
        let mut command = std::process::Command::new(dsv_binary());
        self.apply(&mut command);
        command
    }

    /// Clears `command`'s environment and gives it the sandbox's, with `root` as its
    /// current directory: for a program that runs `dsv` in turn.
    pub fn apply(&self, command: &mut std::process::Command) {
        command
            .env_clear()
            .env("HOME", &self.root)
            .env("TMPDIR", &self.root)
            .env("DSV_AUTHOR", "tester")
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .current_dir(&self.root);
        command.envs(self.vars.iter().map(|(key, value)| (key, value)));
    }
}

pub fn write_file(path: &Path, contents: &[u8]) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, contents).unwrap();
}

/// How long a test waits for an event (a process ending, a file appearing, a server
/// answering) before it calls it a hang: generous, since a loaded machine is slow, not wrong.
pub const PATIENCE: std::time::Duration = std::time::Duration::from_secs(120);

/// Polls `done` until it holds; panics, naming `what`, after [`PATIENCE`]. For waiting on an
/// event, not for a duration: nothing asserts how long it took.
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(start.elapsed() < PATIENCE, "waited {PATIENCE:?} for {what}");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

impl AsRef<Path> for TestEnv {
    fn as_ref(&self) -> &Path {
        self.root()
    }
}

/// Waits until the stat cache would trust a stat taken now of every file below `dir` (a
/// [`TestEnv`]: its root): each was last changed (mtime or ctime) longer ago than its racy
/// margin, as `dsv::workspace::entry` decides. Files written just now are then cached by
/// the next status or commit, as they are on a user's machine a moment later.
pub fn settle(dir: impl AsRef<Path>) {
    let racy = || {
        walkdir::WalkDir::new(dir.as_ref())
            .follow_links(false)
            .into_iter()
            .filter_map(Result::ok)
            .filter(|e| !e.file_type().is_dir())
            .filter_map(|e| e.path().symlink_metadata().ok())
            .any(|meta| {
                let stat = dsv::walk::Stat::of(&meta);
                dsv::workspace::entry(&stat, dsv::workspace::now_ns()).is_none()
            })
    };
    wait_until("the files' racy margin to pass", || !racy());
}

/// The report of skipped cases: one `SKIPPED <test>: <reason>` line each, appended by
/// [`skip_for`]. `DSV_TEST_SKIPS`, else `test-skips.txt` in Cargo's target temp dir;
/// scripts/test empties it first and prints it last.
pub fn skips_report() -> PathBuf {
    std::env::var_os("DSV_TEST_SKIPS").map_or_else(
        || Path::new(env!("CARGO_TARGET_TMPDIR")).join("test-skips.txt"),
        PathBuf::from,
    )
}

/// Whether the calling test must skip (all of it, or the part it guards) because this
/// machine lacks `requirement` (`fuse`, `root`, `data`, or a tool's name): `lack` says what
/// is missing, `None` when nothing is. A requirement listed in `DSV_TEST_REQUIRE` (a comma
/// list; `.ci/run` sets `fuse,root`) is never skipped: the test fails, naming what is
/// missing. Otherwise the skip is printed to stderr and appended to [`skips_report`], so a
/// run says what it did not test instead of counting it as passed.
pub fn skip_for(requirement: &str, lack: Option<String>) -> bool {
    let Some(lack) = lack else {
        return false;
    };
    let required = std::env::var("DSV_TEST_REQUIRE").unwrap_or_default();
    assert!(
        !required.split(',').any(|r| r.trim() == requirement),
        "this machine lacks {requirement} ({lack}); DSV_TEST_REQUIRE={required} requires it"
    );
    let current = std::thread::current();
    let test = current.name().unwrap_or("?");
    let line = format!("SKIPPED {test}: {lack} ({requirement})");
    eprintln!("{line}");
    let report = skips_report();
    if let Some(dir) = report.parent() {
        let _ = fs::create_dir_all(dir);
    }
    // One short append per line: lines of tests running at once do not interleave.
    let appended = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&report)
        .and_then(|mut f| std::io::Write::write_all(&mut f, format!("{line}\n").as_bytes()));
    if let Err(e) = appended {
        eprintln!("cannot append to {}: {e}", report.display());
    }
    true
}

/// What this machine lacks for FUSE mounts (`fusermount3` on PATH and `/dev/fuse`), if any.
pub fn lacks_fuse() -> Option<String> {
    let helper = std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| dir.join("fusermount3").is_file())
    });
    if !Path::new("/dev/fuse").exists() {
        Some("/dev/fuse does not exist".into())
    } else if !helper {
        Some("fusermount3 is not installed (apt: fuse3)".into())
    } else {
        None
    }
}

/// What the test lacks when it does not run as root, if it does not.
pub fn lacks_root(why: &str) -> Option<String> {
    (!nix::unistd::geteuid().is_root()).then(|| format!("{why} needs root"))
}

/// What this machine lacks when `tool --version` does not run, if it does not.
pub fn lacks_tool(tool: &str) -> Option<String> {
    let runs = std::process::Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    (!runs).then(|| format!("`{tool}` is not installed"))
}

/// Makes `env/dir` a `file://` remote, adds it as `origin` and pushes `dataset` there;
/// returns its directory and URL.
pub fn push_to_file_remote(env: &TestEnv, dir: &str, dataset: &str) -> (PathBuf, String) {
    let remote = env.path(dir);
    fs::create_dir_all(&remote).unwrap();
    let url = format!("file://{}", remote.display());
    env.ok(&["remote", "add", "origin", &url]);
    env.ok(&["push", dataset]);
    (remote, url)
}

/// The ids of a dataset's versions, newest first (`dsv log --json`).
pub fn version_ids(env: &TestEnv, dataset: &str) -> Vec<String> {
    env.json(&["log", dataset])
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["id"].as_str().unwrap().to_string())
        .collect()
}

/// Damages the first `.pack` file in `packs` (a store's or a remote's `packs` directory):
/// flips one byte in its middle, inside a data frame. Returns the pack's path.
pub fn damage_first_pack(packs: &Path) -> PathBuf {
    let pack = fs::read_dir(packs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "pack"))
        .unwrap();
    let mut bytes = fs::read(&pack).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    fs::set_permissions(&pack, fs::Permissions::from_mode(0o644)).unwrap();
    fs::write(&pack, &bytes).unwrap();
    pack
}

/// Writes a pack holding `objects` (id, kind, bytes; one frame) into the file remote
/// `remote` (its `packs/` with the `.idx` beside), as an attacker or an old binary would;
/// returns the pack's id. `env` lends a temp directory.
pub fn forge_pack(
    env: &TestEnv,
    remote: &Path,
    objects: &[(dsv::ObjectId, dsv::object::ObjectKind, Vec<u8>)],
) -> dsv::ObjectId {
    let mut frame = dsv::pack::FrameBuilder::default();
    for (id, kind, bytes) in objects {
        frame.push(*id, *kind, bytes);
    }
    forge_pack_of_frames(env, remote, vec![frame.encode(3)])
}

/// Writes `frames` (plain or delta frames, as made by the library) as one pack, with its
/// `.idx`, straight into the `file://` remote at `remote`; returns the pack's id. `env` lends
/// a temp directory.
pub fn forge_pack_of_frames(
    env: &TestEnv,
    remote: &Path,
    frames: Vec<dsv::pack::EncodedFrame>,
) -> dsv::ObjectId {
    let dir = env.path("forged");
    fs::create_dir_all(&dir).unwrap();
    fs::create_dir_all(remote.join("packs")).unwrap();
    let mut writer = dsv::pack::PackWriter::create(&dir, &dir).unwrap();
    for frame in frames {
        writer.add_frame(frame).unwrap();
    }
    let sealed = writer.finish().unwrap();
    let forged = dir.join(format!("{}.pack", sealed.id));
    fs::copy(&forged, remote.join(format!("packs/{}.pack", sealed.id))).unwrap();
    fs::write(
        remote.join(format!("packs/{}.idx", sealed.id)),
        dsv::pack::reader::read_tail(&forged).unwrap(),
    )
    .unwrap();
    sealed.id
}

/// Deterministic pseudo-random bytes.
pub fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    (0..len)
        .map(|_| {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
        })
        .collect()
}

/// Every file below `dir` that holds one of `secrets`, as `PATH holds SECRET` lines: what the
/// tests that credentials are never written down assert is empty.
pub fn files_holding(dir: &Path, secrets: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for entry in walkdir::WalkDir::new(dir) {
        let entry = entry.unwrap();
        if !entry.file_type().is_file() {
            continue;
        }
        let bytes = fs::read(entry.path()).unwrap();
        for secret in secrets {
            if bytes.windows(secret.len()).any(|w| w == secret.as_bytes()) {
                found.push(format!("{} holds {secret}", entry.path().display()));
            }
        }
    }
    found
}

/// What a tree holds, for comparison: path → (kind, content or link target, executable).
pub fn snapshot_tree(dir: &Path) -> BTreeMap<String, (char, Vec<u8>, bool)> {
    let mut out = BTreeMap::new();
    for entry in walkdir::WalkDir::new(dir).min_depth(1).follow_links(false) {
        let entry = entry.unwrap();
        let relative = entry
            .path()
            .strip_prefix(dir)
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        if relative == ".dsv" || relative.starts_with(".dsv/") {
            continue;
        }
        let meta = entry.path().symlink_metadata().unwrap();
        let value = if meta.file_type().is_symlink() {
            (
                'l',
                fs::read_link(entry.path())
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .as_bytes()
                    .to_vec(),
                false,
            )
        } else if meta.is_dir() {
            ('d', Vec::new(), false)
        } else {
            (
                'f',
                fs::read(entry.path()).unwrap(),
                meta.permissions().mode() & 0o100 != 0,
            )
        };
        out.insert(relative, value);
    }
    out
}

/// Asserts two directories hold the same entries, bytes, link targets and executable bits.
pub fn assert_same_tree(expected: &Path, actual: &Path) {
    let (a, b) = (snapshot_tree(expected), snapshot_tree(actual));
    let keys_a: Vec<_> = a.keys().collect();
    let keys_b: Vec<_> = b.keys().collect();
    assert_eq!(
        keys_a,
        keys_b,
        "different paths in {} and {}",
        expected.display(),
        actual.display()
    );
    for (path, value) in &a {
        assert!(
            b[path] == *value,
            "{path} differs between {} and {}",
            expected.display(),
            actual.display()
        );
    }
}

/// Moves the mtime of every file below `dir` back by `by`, taking no time: what a `file://`
/// remote gives as a file's Last-Modified, so a test ages a remote's packs and gc marks past
/// a grace (`dsv gc --remote --grace`) without waiting for it, as a local gc's orphans.
pub fn backdate(dir: &Path, by: std::time::Duration) {
    for entry in walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(Result::ok)
    {
        if !entry.file_type().is_file() {
            continue;
        }
        let file = fs::File::options().write(true).open(entry.path()).unwrap();
        let modified = file.metadata().unwrap().modified().unwrap();
        file.set_modified(modified - by).unwrap();
    }
}

/// Makes a file executable.
pub fn make_executable(path: &Path) {
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
}

/// Starts `dsv ARGS`, kills it with SIGKILL after `delay`; true when it was still running.
pub fn kill_after(env: &TestEnv, args: &[&str], delay: std::time::Duration) -> bool {
    let mut child = env.spawn(args);
    let start = std::time::Instant::now();
    while start.elapsed() < delay {
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let running = child.try_wait().unwrap().is_none();
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    running
}

/// Puts `objects` (id, kind, encoded bytes) into `env`'s own store as a pack, records
/// `version` and makes it the dataset's head, without any check: a hostile or damaged store,
/// as a fetch without checks (or an older dsv) would have left it.
pub fn plant(
    env: &TestEnv,
    objects: &[(dsv::ObjectId, dsv::object::ObjectKind, Vec<u8>)],
    version: &dsv::object::Version,
) {
    let mut store = dsv::Store::discover(env.root()).unwrap();
    let mut writer = dsv::pack::PackWriter::create(&store.packs_dir(), &store.temp_dir()).unwrap();
    let mut frame = dsv::pack::FrameBuilder::default();
    for (id, kind, bytes) in objects {
        frame.push(*id, *kind, bytes);
    }
    writer.add_frame(frame.encode(3)).unwrap();
    let sealed = writer.finish().unwrap();
    let catalog = store.catalog_mut().writer().unwrap();
    catalog.add_pack(&sealed).unwrap();
    catalog.record_version(&version.id(), version).unwrap();
    catalog.set_head(&version.dataset, &version.id()).unwrap();
    catalog.commit().unwrap();
}

/// [`plant`]s a hand-made version of `dataset` whose root tree holds only `entry`.
pub fn plant_one_entry(env: &TestEnv, dataset: &str, entry: dsv::object::TreeEntry) {
    use dsv::object::{ObjectKind, Tree, Version};
    let size = entry.size;
    let tree = Tree {
        entries: vec![entry],
    };
    let version = Version {
        dataset: dataset.into(),
        tree: tree.id(),
        parent: None,
        author: "mallory".into(),
        time: 0,
        files: 1,
        bytes: size,
        source: "handmade".into(),
        provenance: None,
        message: String::new(),
    };
    let objects = [
        (tree.id(), ObjectKind::Tree, tree.encode()),
        (version.id(), ObjectKind::Version, version.encode()),
    ];
    plant(env, &objects, &version);
}

/// A tmpfs of a few MiB mounted for the test, unmounted on drop.
pub struct SmallDisk(PathBuf);

impl SmallDisk {
    /// Mounts a tmpfs of `size` at `path`; `None` when not root, the test then skipped (see
    /// [`skip_for`]: the suite runs as root in CI, where it requires `root`).
    pub fn mount(path: &Path, size: &str) -> Option<SmallDisk> {
        let root = nix::unistd::geteuid().is_root();
        fs::create_dir_all(path).unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(path)
            .status();
        match status {
            Ok(s) if s.success() => Some(SmallDisk(path.to_path_buf())),
            _ if root => panic!("running as root, yet mounting a tmpfs failed"),
            _ => {
                skip_for("root", lacks_root("mounting a tmpfs"));
                None
            }
        }
    }
}

impl SmallDisk {
    /// A store on a tmpfs of `size` mounted at `env`'s `small/`: the mount and the store
    /// path (for `--store`); `None` when not root (the test skipped).
    pub fn with_store(env: &TestEnv, size: &str) -> Option<(SmallDisk, String)> {
        let disk = SmallDisk::mount(&env.path("small"), size)?;
        let store = env.path("small").to_str().unwrap().to_string();
        // Beside (inside the tree of) `env`'s own store, when it has one: on purpose.
        env.ok(&["--store", &store, "init", "--force"]);
        Some((disk, store))
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// The chunk ids listed by the indexes of the packs at `packs`, in pack and index order.
pub fn chunks_in_packs(packs: &[PathBuf]) -> Vec<dsv::ObjectId> {
    let mut chunks = Vec::new();
    for path in packs {
        let file = fs::File::open(path).unwrap();
        let index = dsv::pack::reader::read_index(&file, path).unwrap();
        chunks.extend(
            index
                .objects
                .iter()
                .filter(|o| o.kind == dsv::object::ObjectKind::Chunk)
                .map(|o| o.id),
        );
    }
    chunks
}

/// Each local chunk's delta chain depth (0 for a chunk in a plain frame), read from the
/// catalog at `catalog`: `frames.bases` holds a delta frame's base ids, 32 bytes each.
/// Panics on a chain deeper than 16 (the format's limit), a cycle, or a base not held.
pub fn chunk_depths_at(catalog: &Path) -> std::collections::HashMap<Vec<u8>, usize> {
    use std::collections::HashMap;
    let db = rusqlite::Connection::open(catalog).unwrap();
    let mut statement = db
        .prepare(
            "SELECT o.id, f.bases FROM objects o JOIN frames f ON f.id = o.frame WHERE o.kind = 1",
        )
        .unwrap();
    let bases: HashMap<Vec<u8>, Vec<Vec<u8>>> = statement
        .query_map([], |row| {
            let id: Vec<u8> = row.get(0)?;
            let bases: Option<Vec<u8>> = row.get(1)?;
            Ok((
                id,
                bases
                    .unwrap_or_default()
                    .chunks(32)
                    .map(<[u8]>::to_vec)
                    .collect(),
            ))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    fn depth(
        id: &[u8],
        bases: &HashMap<Vec<u8>, Vec<Vec<u8>>>,
        memo: &mut HashMap<Vec<u8>, usize>,
        seen: usize,
    ) -> usize {
        assert!(seen <= 16, "a chain deeper than 16 (or a cycle)");
        if let Some(d) = memo.get(id) {
            return *d;
        }
        let listed = bases
            .get(id)
            .unwrap_or_else(|| panic!("a base that the store does not hold"));
        let d = listed
            .iter()
            .map(|b| depth(b, bases, memo, seen + 1) + 1)
            .max()
            .unwrap_or(0);
        memo.insert(id.to_vec(), d);
        d
    }
    let mut memo = HashMap::new();
    for id in bases.keys() {
        depth(id, &bases, &mut memo, 0);
    }
    memo
}

/// Every object of every pack of the file remote at `remote`, which holds no delta frame
/// (asserted): (id, kind, raw bytes), each frame checked as a received one is.
pub fn plain_remote_objects(
    remote: &Path,
) -> Vec<(dsv::ObjectId, dsv::object::ObjectKind, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(remote.join("packs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "pack") {
            continue;
        }
        let file = std::fs::File::open(&path).unwrap();
        let index = dsv::pack::reader::read_index(&file, &path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        for (at, frame) in index.frames.iter().enumerate() {
            assert!(
                index.deltas.iter().all(|d| d.frame as usize != at),
                "the plain remote holds no delta frame"
            );
            let members: Vec<_> = index
                .objects
                .iter()
                .filter(|o| o.frame as usize == at)
                .map(|o| (o.id, o.kind, o.offset, o.length))
                .collect();
            let stored = bytes
                [frame.offset as usize..(frame.offset + u64::from(frame.stored_length)) as usize]
                .to_vec();
            let (_, raw) = dsv::pack::EncodedFrame::verified_with_raw(
                stored,
                frame.raw_length,
                frame.compression,
                members.clone(),
            )
            .unwrap();
            for (id, kind, offset, length) in members {
                out.push((
                    id,
                    kind,
                    raw[offset as usize..(offset + length) as usize].to_vec(),
                ));
            }
        }
    }
    out
}
