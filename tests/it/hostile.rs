//! Hostile input: remotes and stores crafted to exhaust memory, time or the stack. Objects
//! are made with dsv's own writers (`Tree::encode`, `Version::encode`, `PackWriter`) and laid
//! out as push lays them out (`packs/<id>.pack`, `packs/<id>.idx`, `refs/heads/<dataset>`),
//! so only the hostile part differs from a genuine remote. Every command must fail (exit 5,
//! corrupt) in bounded memory, without reading what it refuses, and leave the store
//! consistent; one that runs past [`crate::common::PATIENCE`] counts as running forever.

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use dsv::ObjectId;
use dsv::object::{EntryKind, ObjectKind, Tree, TreeEntry, Version};
use dsv::pack::{FrameBuilder, PackWriter};

use crate::common::{PATIENCE, TestEnv, plant};

/// Exit code of corrupt data (src/error.rs).
const CORRUPT: i32 = 5;
/// Address space each hostile run may use: far below what the attacks asked for.
const MEMORY_LIMIT_KIB: u64 = 4 * 1024 * 1024;
/// CPU time each hostile run may use (`ulimit -t`; the kernel stops it with SIGXCPU, which
/// fails the exit code assertion). A resource bound, as the memory one, not a clock: load on
/// the machine does not count. Each run needs well under a second; a walk that lost its
/// memoization over a planted DAG (2^28 paths) needs hours.
const CPU_LIMIT_SECONDS: u64 = 30;

/// Bytes a run that refuses a 12 GiB file "without reading it" may read in all (its store
/// and the remote's other files: about 50 KB).
const READ_LIMIT: u64 = 4 << 20;

type Object = (ObjectId, ObjectKind, Vec<u8>);

/// A file:// remote directory of hostile objects.
struct HostileRemote {
    home: TestEnv,
}

impl HostileRemote {
    fn new() -> Self {
        let remote = HostileRemote {
            home: TestEnv::bare(),
        };
        fs::create_dir_all(remote.dir().join("packs")).unwrap();
        fs::create_dir_all(remote.dir().join("refs/heads")).unwrap();
        remote
    }

    fn dir(&self) -> PathBuf {
        self.home.path("remote")
    }

    fn url(&self) -> String {
        format!("file://{}", self.dir().display())
    }

    /// Writes `objects` as one pack of one frame, with its `.idx`, as push does.
    fn put_pack(&self, objects: &[Object]) {
        let scratch = tempfile::tempdir_in(crate::common::temp_base()).unwrap();
        let mut writer = PackWriter::create(scratch.path(), scratch.path()).unwrap();
        let mut frame = FrameBuilder::default();
        for (id, kind, bytes) in objects {
            frame.push(*id, *kind, bytes);
        }
        writer.add_frame(frame.encode(3)).unwrap();
        let sealed = writer.finish().unwrap();
        let path = dsv::pack::writer::pack_path(scratch.path(), &sealed.id);
        // The tail as the file holds it (read_tail would check it, and refuse the hostile).
        let bytes = fs::read(&path).unwrap();
        let trailer = &bytes[bytes.len() - 56..];
        let index_offset = u64::from_le_bytes(trailer[..8].try_into().unwrap()) as usize;
        let tail = bytes[index_offset..].to_vec();
        fs::copy(&path, self.dir().join(format!("packs/{}.pack", sealed.id))).unwrap();
        fs::write(self.dir().join(format!("packs/{}.idx", sealed.id)), tail).unwrap();
    }

    fn set_head(&self, dataset: &str, version: &ObjectId) {
        fs::write(
            self.dir().join(format!("refs/heads/{dataset}")),
            format!("{version}\n"),
        )
        .unwrap();
    }
}

fn version(tree: ObjectId, files: u64, bytes: u64, message: String) -> Version {
    Version {
        dataset: "ds".into(),
        tree,
        parent: None,
        author: "mallory".into(),
        time: 1_700_000_000,
        files,
        bytes,
        source: "/nowhere".into(),
        provenance: None,
        message,
    }
}

fn tree_object(tree: &Tree) -> Object {
    (tree.id(), ObjectKind::Tree, tree.encode())
}

fn version_object(version: &Version) -> Object {
    (version.id(), ObjectKind::Version, version.encode())
}

fn dir_entry(name: &str, id: ObjectId, files: u64, bytes: u64) -> TreeEntry {
    TreeEntry {
        name: name.into(),
        kind: EntryKind::Dir { files },
        size: bytes,
        id,
    }
}

/// A tree holding one file `f` of one byte (its content need not exist).
fn leaf() -> Tree {
    Tree {
        entries: vec![TreeEntry {
            name: "f".into(),
            kind: EntryKind::File { executable: false },
            size: 1,
            id: ObjectId::of(b"x"),
        }],
    }
}

/// `levels` trees, each naming the one below twice (`a` and `b`): 2^levels paths in about
/// 100 bytes a level. Each directory entry claims one file, the root's two entries two, and
/// the version claims what the root's entries add up to.
fn doubling_dag(levels: usize) -> (Vec<Object>, Version) {
    let mut objects = Vec::new();
    let mut below = leaf();
    for _ in 0..levels {
        objects.push(tree_object(&below));
        let id = below.id();
        below = Tree {
            entries: vec![dir_entry("a", id, 1, 1), dir_entry("b", id, 1, 1)],
        };
    }
    objects.push(tree_object(&below));
    let (bytes, files) = below.totals();
    let version = version(below.id(), files, bytes, "a DAG".into());
    objects.push(version_object(&version));
    (objects, version)
}

/// A chain of `depth` nested directories `d/d/…/d/f`, every claim true.
fn deep_chain(depth: usize) -> (Vec<Object>, Version) {
    let mut objects = Vec::new();
    let mut below = leaf();
    for _ in 0..depth {
        objects.push(tree_object(&below));
        below = Tree {
            entries: vec![dir_entry("d", below.id(), 1, 1)],
        };
    }
    objects.push(tree_object(&below));
    let version = version(below.id(), 1, 1, "a deep chain".into());
    objects.push(version_object(&version));
    (objects, version)
}

/// Runs `dsv ARGS` in `env` with its address space limited to [`MEMORY_LIMIT_KIB`] and its CPU
/// time to [`CPU_LIMIT_SECONDS`]; asserts it exits with `code` (stopped by either limit, or
/// killed after [`PATIENCE`], it does not). Returns stdout and stderr.
fn bounded(env: &TestEnv, args: &[&str], code: i32) -> String {
    bounded_any(env, args, &[code])
}

/// As [`bounded`], accepting any exit code of `codes`.
fn bounded_any(env: &TestEnv, args: &[&str], codes: &[i32]) -> String {
    bounded_reading(env, args, codes).0
}

/// As [`bounded_any`]; also returns how many bytes dsv read (`rchar`: every `read`, from a
/// file's hole too). The shell that runs dsv reports its own `/proc/PID/io` once dsv is
/// reaped, which then holds dsv's counts (and the shell's few bytes).
fn bounded_reading(env: &TestEnv, args: &[&str], codes: &[i32]) -> (String, u64) {
    let io = env.path("rchar.txt");
    let mut command = std::process::Command::new("bash");
    env.sandbox().apply(&mut command);
    command
        .arg("-c")
        .arg(format!(
            "ulimit -v {MEMORY_LIMIT_KIB} -t {CPU_LIMIT_SECONDS} || exit 99; io=$1; shift; \"$@\"; code=$?; \
             grep rchar /proc/$$/io > \"$io\"; exit $code"
        ))
        .arg("bash")
        .arg(&io)
        .arg(crate::common::dsv_binary())
        .args(args)
        .process_group(0)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let started = Instant::now();
    let mut child = command.spawn().unwrap();
    // Read as it comes: a listing streams, and a full pipe would stall it.
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr_pipe = child.stderr.take().unwrap();
    let readers = (
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut stdout, &mut bytes).unwrap();
            bytes
        }),
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut stderr_pipe, &mut bytes).unwrap();
            bytes
        }),
    );
    // A run that outlives PATIENCE runs forever: killed (the shell and dsv, its process
    // group), it fails the exit code assertion below.
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > PATIENCE {
            std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status()
                .unwrap();
            break child.wait().unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let elapsed = started.elapsed();
    let (stdout, stderr) = (readers.0.join().unwrap(), readers.1.join().unwrap());
    let stderr = format!(
        "{}{}",
        String::from_utf8_lossy(&stdout),
        String::from_utf8_lossy(&stderr)
    );
    assert!(
        status.code().is_some_and(|code| codes.contains(&code)),
        "dsv {args:?} exited with {status:?} after {elapsed:?}, not one of {codes:?}\nstderr: {stderr}"
    );
    let read = fs::read_to_string(&io).unwrap_or_default();
    let _ = fs::remove_file(&io);
    let read = read
        .trim()
        .strip_prefix("rchar: ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no rchar from the shell: {read:?}"));
    (stderr, read)
}

/// A store with remote `origin` at `remote`.
fn store_with(remote: &HostileRemote) -> TestEnv {
    let env = TestEnv::new();
    env.ok(&["remote", "add", "origin", &remote.url(), "--no-check"]);
    env
}

fn assert_verified(env: &TestEnv) {
    let verified = env.json(&["verify"]);
    assert_eq!(
        verified["problems"].as_array().unwrap().len(),
        0,
        "{verified}"
    );
}

#[test]
fn a_fetch_refuses_a_tree_dag_of_2_to_the_28_paths_and_keeps_the_store_consistent() {
    let remote = HostileRemote::new();
    let (objects, version) = doubling_dag(28);
    remote.put_pack(&objects);
    remote.set_head("ds", &version.id());
    let env = store_with(&remote);
    let stderr = bounded(&env, &["fetch"], CORRUPT);
    assert!(
        stderr.contains("tree"),
        "the error names the tree: {stderr}"
    );
    assert_verified(&env);
}

#[test]
fn a_fetch_refuses_a_chain_of_10000_trees() {
    let remote = HostileRemote::new();
    let (objects, version) = deep_chain(10_000);
    remote.put_pack(&objects);
    remote.set_head("ds", &version.id());
    let env = store_with(&remote);
    let stderr = bounded(&env, &["fetch"], CORRUPT);
    assert!(stderr.contains("4096 levels"), "{stderr}");
    assert_verified(&env);
}

#[test]
fn every_walk_of_a_planted_tree_dag_stops_at_once() {
    let env = TestEnv::new();
    let (objects, version) = doubling_dag(28);
    plant(&env, &objects, &version);
    for args in [
        &["ls", "ds"][..],
        &["ls", "ds:a"],
        &["diff", "ds"],
        &["checkout", "ds", "out"],
        &["verify"],
    ] {
        let stderr = bounded(&env, args, CORRUPT);
        assert!(stderr.contains("tree"), "dsv {args:?}: {stderr}");
    }
    assert!(!env.path("out").exists());
    // Walks that need only the set of objects visit each tree once: they finish at once (a
    // walk of every path, 2^28 of them, would run into the CPU limit).
    for args in [
        &["cache", "ls"][..],
        &["cache", "prune", "--keep-last", "0"],
        &["gc"],
    ] {
        bounded_any(&env, args, &[0, CORRUPT]);
    }
}

#[test]
fn every_walk_of_a_planted_chain_30000_deep_stops_without_overflowing_the_stack() {
    let env = TestEnv::new();
    let (objects, version) = deep_chain(30_000);
    plant(&env, &objects, &version);
    for args in [
        &["ls", "ds"][..],
        &["diff", "ds"],
        &["checkout", "ds", "out"],
        &["verify"],
        &["cache", "ls"],
        &["gc"],
    ] {
        let stderr = bounded(&env, args, CORRUPT);
        assert!(stderr.contains("4096 levels"), "dsv {args:?}: {stderr}");
    }
}

#[test]
fn a_ref_of_12_gib_is_refused_without_reading_it() {
    let remote = HostileRemote::new();
    let (objects, version) = deep_chain(1);
    remote.put_pack(&objects);
    let head = remote.dir().join("refs/heads/ds");
    let file = fs::File::create(&head).unwrap();
    // Sparse: 12 GiB on the listing, no block on disk.
    file.set_len(12 << 30).unwrap();
    drop(version);
    let env = store_with(&remote);
    let (stderr, read) = bounded_reading(&env, &["fetch"], &[CORRUPT]);
    assert!(stderr.contains("refs/heads/ds"), "{stderr}");
    assert!(read < READ_LIMIT, "dsv read {read} bytes: {stderr}");
    assert_verified(&env);
}

#[test]
fn a_pack_index_of_12_gib_is_refused_without_reading_it() {
    let remote = HostileRemote::new();
    let (objects, version) = deep_chain(1);
    remote.put_pack(&objects);
    remote.set_head("ds", &version.id());
    let idx = fs::read_dir(remote.dir().join("packs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "idx"))
        .unwrap();
    fs::File::create(&idx).unwrap().set_len(12 << 30).unwrap();
    let env = store_with(&remote);
    let (stderr, read) = bounded_reading(&env, &["fetch"], &[CORRUPT]);
    assert!(stderr.contains(".idx"), "{stderr}");
    assert!(read < READ_LIMIT, "dsv read {read} bytes: {stderr}");
    assert_verified(&env);
}

/// A pack whose one frame claims `stored` bytes for `raw` (16) raw bytes, the frame's
/// region a sparse hole so that the claim lies inside the pack.
fn write_lying_pack(packs: &Path, stored: u32) -> ObjectId {
    use dsv::pack::format::{self, Compression, FrameRecord, ObjectRecord};
    let raw = b"sixteen raw byte".to_vec();
    let frames = [FrameRecord {
        offset: format::HEADER_LEN,
        stored_length: stored,
        raw_length: raw.len() as u32,
        compression: Compression::Zstd,
    }];
    let objects = [ObjectRecord {
        id: ObjectId::of(&raw),
        kind: ObjectKind::Tree,
        frame: 0,
        offset: 0,
        length: raw.len() as u32,
    }];
    let index = format::encode_index(&frames, &objects, &[]);
    let index_offset = format::HEADER_LEN + u64::from(stored);
    let mut tail = index.clone();
    tail.extend_from_slice(&index_offset.to_le_bytes());
    tail.extend_from_slice(&(index.len() as u64).to_le_bytes());
    tail.extend_from_slice(blake3::hash(&index).as_bytes());
    tail.extend_from_slice(format::END_MAGIC);
    let mut header = format::MAGIC.to_vec();
    header.extend_from_slice(&format::FORMAT_VERSION.to_le_bytes());
    header.extend_from_slice(&[0; 4]);
    // The id only has to be a well-formed name: the listing is what a client trusts first.
    let id = ObjectId::of(&tail);
    let pack = packs.join(format!("{id}.pack"));
    {
        use std::os::unix::fs::FileExt;
        let file = fs::File::create(&pack).unwrap();
        file.write_all_at(&header, 0).unwrap();
        file.write_all_at(&tail, index_offset).unwrap();
    }
    fs::write(packs.join(format!("{id}.idx")), &tail).unwrap();
    id
}

#[test]
fn a_frame_claiming_4_gib_stored_for_16_raw_bytes_is_refused_from_the_index() {
    let remote = HostileRemote::new();
    let (objects, version) = deep_chain(1);
    remote.put_pack(&objects);
    remote.set_head("ds", &version.id());
    write_lying_pack(&remote.dir().join("packs"), u32::MAX - 64);
    let env = store_with(&remote);
    let stderr = bounded(&env, &["fetch"], CORRUPT);
    assert!(stderr.contains("stored bytes"), "{stderr}");
    assert_verified(&env);
}

#[test]
fn versions_with_huge_messages_are_refused_from_a_tiny_remote() {
    let remote = HostileRemote::new();
    let mut parent = None;
    let mut head = ObjectId::of(b"");
    let empty = Tree::default();
    remote.put_pack(&[tree_object(&empty)]);
    // 64 MiB each keeps the test fast; the finding used 250 MiB (anything past the 2 MiB
    // version limit is refused the same way, from the index, before a byte is fetched).
    for i in 0..4u8 {
        let mut v = version(
            empty.id(),
            0,
            0,
            String::from_utf8(vec![b'a' + i; 64 << 20]).unwrap(),
        );
        v.parent = parent;
        let bytes = v.encode();
        head = ObjectId::of(&bytes);
        parent = Some(head);
        remote.put_pack(&[(head, ObjectKind::Version, bytes)]);
    }
    remote.set_head("ds", &head);
    let remote_bytes: u64 = fs::read_dir(remote.dir().join("packs"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert!(remote_bytes < 200_000, "the remote is tiny: {remote_bytes}");
    let env = store_with(&remote);
    let stderr = bounded(&env, &["fetch"], CORRUPT);
    assert!(stderr.contains("version"), "{stderr}");
    assert_verified(&env);
    let catalog = fs::metadata(env.path(".dsv/catalog.db")).unwrap().len();
    assert!(catalog < 10 << 20, "the catalog stays small: {catalog}");
}

#[test]
fn a_message_just_over_the_limit_is_refused_by_fetch_and_by_commit_alike() {
    let limit = dsv::object::MAX_MESSAGE_LEN;
    let long = "m".repeat(limit + 1);
    let remote = HostileRemote::new();
    let empty = Tree::default();
    let v = version(empty.id(), 0, 0, long.clone());
    remote.put_pack(&[tree_object(&empty), version_object(&v)]);
    remote.set_head("ds", &v.id());
    let env = store_with(&remote);
    let stderr = bounded(&env, &["fetch"], CORRUPT);
    assert!(stderr.contains("message"), "{stderr}");
    assert_verified(&env);

    // Commit applies the same rule (through the library: an argument of 1 MiB is more than
    // a command line may carry).
    env.write("data/a.txt", "a");
    let mut store = dsv::Store::discover(env.root()).unwrap();
    let options = |message: &str| {
        let mut options = dsv::ops::commit::CommitOptions::new("ds");
        options.message = message.into();
        options
    };
    let progress = dsv::progress::NoProgress;
    let refused =
        dsv::ops::commit::commit(&mut store, &env.path("data"), &options(&long), &progress);
    assert!(
        matches!(&refused, Err(dsv::Error::Unsupported { reason, .. }) if reason.contains("message")),
        "{refused:?}"
    );
    // Exactly at the limit is fine.
    dsv::ops::commit::commit(
        &mut store,
        &env.path("data"),
        &options(&long[..limit]),
        &progress,
    )
    .unwrap();
    drop(store);
    assert_verified(&env);
}

/// [`doubling_dag`] with every claim true: 2^levels files in a few KB of trees, which every
/// check passes (a remote may honestly hold that much).
fn honest_doubling_dag(levels: usize) -> (Vec<Object>, Version) {
    let mut objects = Vec::new();
    let mut below = leaf();
    let mut files = 1u64;
    for _ in 0..levels {
        objects.push(tree_object(&below));
        let id = below.id();
        below = Tree {
            entries: vec![
                dir_entry("a", id, files, files),
                dir_entry("b", id, files, files),
            ],
        };
        files *= 2;
    }
    objects.push(tree_object(&below));
    let (bytes, files) = below.totals();
    let version = version(below.id(), files, bytes, "an honest DAG".into());
    objects.push(version_object(&version));
    (objects, version)
}

/// Peak RSS in KiB of `dsv ARGS` in `env`, its stdout thrown away (`/usr/bin/time -f %M`).
fn peak_rss_kib(env: &TestEnv, args: &[&str]) -> u64 {
    let mut time = std::process::Command::new("/usr/bin/time");
    env.sandbox().apply(&mut time);
    let out = time
        .args(["-f", "%M"])
        .arg(crate::common::dsv_binary())
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("/usr/bin/time (apt: time)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "dsv {args:?}: {stderr}");
    stderr.lines().last().unwrap().trim().parse().unwrap()
}

/// Issue 23, finding 3: listings of an honest version of 131,072 files (a few KB of
/// shared trees) stream in bounded memory instead of holding every entry (a 28 KB remote
/// claiming 2^25 files made `ls` take 23 GB).
#[test]
fn listings_of_a_version_of_131072_files_stream_in_bounded_memory() {
    let env = TestEnv::new();
    let (objects, version) = honest_doubling_dag(17);
    plant(&env, &objects, &version);
    let baseline = peak_rss_kib(&env, &["ls"]);
    for args in [
        &["ls", "ds"][..],
        &["ls", "ds", "--json"],
        &["diff", "ds"],
        &["diff", "ds", "--json"],
        &["diff", "ds", "--stat"],
    ] {
        // Held whole, the entries alone take ~20 MB.
        let peak = peak_rss_kib(&env, args);
        eprintln!("dsv {args:?}: {peak} KiB peak, {baseline} KiB for `ls`");
        assert!(
            peak < baseline + 8 * 1024,
            "dsv {args:?} peaked at {peak} KiB ({baseline} KiB for `ls` of the datasets)"
        );
    }
    // What streams is the whole listing, in path order.
    let listed = env.json(&["ls", "ds:a/a/a/a/a/a/a/a/a/a/a/a/a"]);
    let paths: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    // Four levels of directories below it, and a file in each of the last.
    assert_eq!(paths.len(), 2 + 4 + 8 + 16 + 16);
    assert_eq!(paths[0], "a/a/a/a/a/a/a/a/a/a/a/a/a/a");
    assert_eq!(paths[1], "a/a/a/a/a/a/a/a/a/a/a/a/a/a/a");
    assert_eq!(paths[4], "a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/f");
}
