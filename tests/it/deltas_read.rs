//! Delta frames on a remote (issue 39), read and collected: a remote-only read (`dsv cat`,
//! `dsv checkout` in a clone, `dsv mount`) fetches a delta frame with its whole closure of
//! bases and decodes it byte-identical, fetching about what the plain data would cost; and
//! `dsv gc --remote` never frees a pack holding a base that a kept delta frame names.
//!
//! The remote is forged through the library, as a dsv that stores deltas would write it:
//! three datasets `old`, `new` and `newer` hold three versions of one growing table (every
//! 64 KiB block of it gains rows, so they share no chunk); the packs of `new` and `newer`
//! are rewritten so that each chunk is a delta frame against the chunk at the same place in
//! the previous dataset. So `newer`'s chunks form chains two deltas deep, reaching into
//! packs of datasets a test may remove.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use dsv::ObjectId;
use dsv::object::ObjectKind;
use serde_json::Value;

use crate::common::TestEnv;

/// Blocks of rows of the table (a country each): each gains one row a version.
const BLOCKS: usize = 64;

/// Rows per block of the table of most tests: about 530 KB (CI's budget: small data).
const DAYS: usize = 250;

/// Rows per block of the table whose 1 MiB read is measured: about 3.2 MB.
const DAYS_MEASURED: usize = 1500;

/// The table on day `extra` past `days`: [`BLOCKS`] blocks of rows, each `days + extra`
/// rows long (about 2.1 KB a row of every block).
fn table(days: usize, extra: usize) -> Vec<u8> {
    let mut out = String::from("country,day,cases,deaths\n");
    for country in 0..BLOCKS {
        for day in 0..days + extra {
            let cases = (country * 7919 + day * 104_729) % 100_003;
            let deaths = (country * 31 + day * 17) % 997;
            out.push_str(&format!(
                "country-{country:03},2020-{day:05},{cases},{deaths}\n"
            ));
        }
    }
    out.into_bytes()
}

/// The datasets of the forged remote, oldest first, with their table's bytes (blocks
/// `days` rows long at first).
fn versions(days: usize) -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("old", table(days, 0)),
        ("new", table(days, 1)),
        ("newer", table(days, 2)),
    ]
}

/// A store with remote `origin` (a file:// directory, `remote/`) holding `old`, `new` and
/// `newer` (see the module's documentation), `new`'s and `newer`'s chunks as delta frames;
/// and remote `plain` (`plain/`) holding the same datasets as pushed, for comparison.
/// Returns the store and the remote's URL. `days`: the tables' rows per block at first.
fn forged_remote(days: usize) -> (TestEnv, String) {
    let env = TestEnv::new();
    let url = format!("file://{}/remote", env.root().display());
    env.ok(&["remote", "add", "origin", &url]);
    let plain = format!("file://{}/plain", env.root().display());
    env.ok(&["remote", "add", "plain", &plain]);
    let mut chunks_before: Option<Vec<ObjectId>> = None;
    for (dataset, bytes) in versions(days) {
        env.write(&format!("{dataset}/data.csv"), &bytes);
        env.ok(&["commit", dataset, "-d", dataset, "-m", dataset, "-q"]);
        let before: Vec<PathBuf> = remote_packs(&env.path("remote"));
        env.ok(&["push", "-q", dataset]);
        env.ok(&["push", "-q", "--remote", "plain", dataset]);
        let pushed: Vec<PathBuf> = remote_packs(&env.path("remote"))
            .into_iter()
            .filter(|p| !before.contains(p))
            .collect();
        assert!(!pushed.is_empty(), "push of {dataset} sent no pack");
        let chunks = chunks_of(&pushed);
        if let Some(bases) = &chunks_before {
            for pack in &pushed {
                rewrite_as_deltas(&env, pack, &chunks, bases);
            }
        }
        chunks_before = Some(chunks);
    }
    (env, url)
}

/// The `.pack` files of the file:// remote at `remote` (the guard pack left out).
fn remote_packs(remote: &Path) -> Vec<PathBuf> {
    let mut packs: Vec<PathBuf> = std::fs::read_dir(remote.join("packs"))
        .map(|dir| {
            dir.map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|e| e == "pack"))
                .filter(|p| !p.file_name().unwrap().to_str().unwrap().starts_with("ffff"))
                .collect()
        })
        .unwrap_or_default();
    packs.sort();
    packs
}

/// The chunk ids of `packs`, in pack and index order (the order commit wrote them: the
/// file's order).
fn chunks_of(packs: &[PathBuf]) -> Vec<ObjectId> {
    crate::common::chunks_in_packs(packs)
}

/// Rewrites the remote pack at `path` (a copy of `env`'s own pack) with each chunk of
/// `chunks` in a delta frame of its own against the chunk of `bases` at the same place (or
/// the last), the other objects as they were (plain); the new pack and its `.idx` replace
/// the old ones on the remote.
fn rewrite_as_deltas(env: &TestEnv, path: &Path, chunks: &[ObjectId], bases: &[ObjectId]) {
    let store = dsv::Store::open(&env.path(".dsv")).unwrap();
    let mut reader = store.reader();
    let file = std::fs::File::open(path).unwrap();
    let index = dsv::pack::reader::read_index(&file, path).unwrap();
    let dir = env.path("forged");
    std::fs::create_dir_all(&dir).unwrap();
    let mut writer = dsv::pack::PackWriter::create(&dir, &env.path(".dsv/tmp")).unwrap();
    let mut compressor = dsv::pack::DeltaCompressor::default();
    let mut plain = dsv::pack::FrameBuilder::default();
    for object in &index.objects {
        let bytes = reader.bytes(&object.id, object.kind).unwrap();
        if object.kind != ObjectKind::Chunk {
            plain.push(object.id, object.kind, &bytes);
            continue;
        }
        let at = chunks.iter().position(|c| *c == object.id).unwrap();
        let base = bases[at.min(bases.len() - 1)];
        let prefix = reader.bytes(&base, ObjectKind::Chunk).unwrap();
        let mut frame = dsv::pack::FrameBuilder::default();
        frame.push(object.id, ObjectKind::Chunk, &bytes);
        let delta = frame
            .encode_delta(&mut compressor, 3, &prefix, vec![base])
            .unwrap();
        writer.add_frame(delta).unwrap();
    }
    if !plain.is_empty() {
        writer.add_frame(plain.encode(3)).unwrap();
    }
    let sealed = writer.finish().unwrap();
    let forged = dir.join(format!("{}.pack", sealed.id));
    let packs = path.parent().unwrap();
    std::fs::copy(&forged, packs.join(format!("{}.pack", sealed.id))).unwrap();
    std::fs::write(
        packs.join(format!("{}.idx", sealed.id)),
        dsv::pack::reader::read_tail(&forged).unwrap(),
    )
    .unwrap();
    std::fs::remove_file(path.with_extension("idx")).unwrap();
    std::fs::remove_file(path).unwrap();
}

/// A fresh clone of `url` (its store at `c/`), with `env`'s environment.
fn clone_of(env: &TestEnv, url: &str) -> TestEnv {
    let clone = TestEnv::bare();
    for (key, value) in env.vars.borrow().iter() {
        clone.set_var(key, value);
    }
    clone.ok(&["clone", url, "c"]);
    clone
}

/// Runs dsv in the clone's store `c/`; its output.
fn in_clone(clone: &TestEnv, args: &[&str]) -> std::process::Output {
    clone
        .command()
        .args(args)
        .current_dir(clone.path("c"))
        .output()
        .unwrap()
}

/// `dsv cat REV:data.csv [ARGS]` in the clone: the bytes written (the command must succeed).
fn cat(clone: &TestEnv, revision: &str, extra: &[&str]) -> Vec<u8> {
    let target = format!("{revision}:data.csv");
    let mut args = vec!["cat", target.as_str()];
    args.extend_from_slice(extra);
    let out = in_clone(clone, &args);
    assert!(
        out.status.success(),
        "dsv cat {target}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Bytes of the `.pack` files of the store at `store` (its `.dsv`).
fn packs_bytes(store: &Path) -> u64 {
    std::fs::read_dir(store.join("packs"))
        .map(|dir| {
            dir.map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|e| e == "pack"))
                .map(|p| std::fs::metadata(p).unwrap().len())
                .sum()
        })
        .unwrap_or(0)
}

/// The forged remote holds what the tests say it does: delta frames two levels deep, in
/// packs of format 2.
fn assert_forged(remote: &Path) {
    let mut deltas = 0;
    let mut format_2 = 0;
    for path in remote_packs(remote) {
        let file = std::fs::File::open(&path).unwrap();
        let index = dsv::pack::reader::read_index(&file, &path).unwrap();
        deltas += index.deltas.len();
        if std::fs::read(&path).unwrap().ends_with(b"DSVPEND2") {
            format_2 += 1;
        }
    }
    assert!(deltas >= 10, "only {deltas} delta frames forged");
    assert_eq!(format_2, 2, "the packs of new and newer are format 2");
}

/// A remote-only read of every dataset (each chunk of `newer` two deltas deep, its bases
/// in `new`'s and `old`'s packs, which this clone never fetched) is byte-identical, through
/// `cat` (the read engine) and `checkout`; and reading 1 MiB of the head table fetches at most
/// 3.5 MiB: the delta frames and their bases, not whole versions.
#[test]
fn a_remote_only_read_of_a_delta_chain_fetches_its_bases_and_is_byte_identical() {
    let (env, url) = forged_remote(DAYS_MEASURED);
    assert_forged(&env.path("remote"));
    let expected: BTreeMap<&str, Vec<u8>> = versions(DAYS_MEASURED).into_iter().collect();

    // 1 MiB of the head, remote-only: the frames covering it and their closures.
    let clone = clone_of(&env, &url);
    let before = packs_bytes(&clone.path("c/.dsv"));
    let head = cat(&clone, "newer", &["--range", "0..1048576"]);
    assert_eq!(head, expected["newer"][..1_048_576]);
    let fetched = packs_bytes(&clone.path("c/.dsv")) - before;
    // The same read of the same data stored plain, for comparison.
    let plain = clone_of(&env, &format!("file://{}/plain", env.root().display()));
    let before = packs_bytes(&plain.path("c/.dsv"));
    assert_eq!(cat(&plain, "newer", &["--range", "0..1048576"]), head);
    let fetched_plain = packs_bytes(&plain.path("c/.dsv")) - before;
    eprintln!(
        "bytes fetched to read 1 MiB of a remote-only head file of {} bytes: {fetched} as a delta chain, {fetched_plain} stored plain",
        expected["newer"].len()
    );
    assert!(
        fetched <= 3_670_016,
        "{fetched} bytes fetched to read 1 MiB of a remote-only head file"
    );

    // Every version whole, from the middle of the chain out and back.
    for dataset in ["newer", "old", "new"] {
        assert_eq!(
            cat(&clone, dataset, &[]),
            expected[dataset],
            "cat {dataset}"
        );
    }

    // A checkout in another clone fetches the same closures.
    let clone = clone_of(&env, &url);
    let out = in_clone(&clone, &["checkout", "newer", "out"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read(clone.path("c/out/data.csv")).unwrap(),
        expected["newer"]
    );
    let report = clone_json(&clone, &["verify"]);
    assert_eq!(
        report["problems"].as_array().map(Vec::len),
        Some(0),
        "{report:#}"
    );
}

/// Copies every pack of the file:// remote at `remote` into the store at `store` (its
/// `.dsv`) and records them in its catalog, as a pull would have stored them: the delta
/// frames are then local.
fn store_remote_packs_locally(remote: &Path, store: &Path) {
    let mut opened = dsv::Store::open(store).unwrap();
    let packs_dir = opened.packs_dir();
    let mut sealed = Vec::new();
    for path in remote_packs(remote) {
        let name = path.file_name().unwrap();
        let id: ObjectId = name
            .to_str()
            .unwrap()
            .trim_end_matches(".pack")
            .parse()
            .unwrap();
        std::fs::copy(&path, packs_dir.join(name)).unwrap();
        let size = std::fs::metadata(&path).unwrap().len();
        sealed.push(
            dsv::pack::PackFile { id, size }
                .read_index(&packs_dir)
                .unwrap(),
        );
    }
    let writer = opened.catalog_mut().writer().unwrap();
    for pack in &sealed {
        writer.add_pack(pack).unwrap();
    }
    writer.commit().unwrap();
}

/// The read engine decodes local delta chains: with the forged packs stored in a clone,
/// `cat` of each dataset (whole, and a range in the middle of the chain's last link) is
/// byte-identical, each base read once through the frame cache and checked; so is a
/// checkout (the object reader). A base whose bytes were damaged is refused (exit 5) and
/// nothing is written.
#[test]
fn local_delta_chains_read_byte_identical_through_the_read_engine() {
    let (env, url) = forged_remote(DAYS);
    let expected: BTreeMap<&str, Vec<u8>> = versions(DAYS).into_iter().collect();
    let clone = clone_of(&env, &url);
    store_remote_packs_locally(&env.path("remote"), &clone.path("c/.dsv"));
    for dataset in ["newer", "old", "new"] {
        assert_eq!(
            cat(&clone, dataset, &[]),
            expected[dataset],
            "cat {dataset}"
        );
    }
    let middle = cat(&clone, "newer", &["--range", "300000..400000"]);
    assert_eq!(middle, expected["newer"][300_000..400_000]);
    let out = in_clone(&clone, &["checkout", "newer", "out"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read(clone.path("c/out/data.csv")).unwrap(),
        expected["newer"]
    );
}

/// `dsv --json ARGS` in the clone's store/// `dsv --json ARGS` in the clone's store; its JSON (the command must succeed).
fn clone_json(clone: &TestEnv, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = in_clone(clone, &all);
    assert!(
        out.status.success(),
        "dsv {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The data the rule protects: `old` and `new` are removed from the remote, so nothing a
/// ref reaches lies in their packs but the bases of `newer`'s delta frames (and of their
/// bases). Two collections a grace apart delete what no kept delta needs; a fresh clone then
/// reads `newer` byte-identical. Without the closure rule the collections delete `old`'s and
/// `new`'s packs and the clone cannot read `newer` at all.
#[test]
fn remote_gc_keeps_every_pack_holding_a_base_of_a_kept_delta() {
    let (env, url) = forged_remote(DAYS);
    let expected = versions(DAYS).pop().unwrap().1;
    let packs_before = remote_packs(&env.path("remote"));
    env.json(&["rm", "--remote", "origin", "old"]);
    env.json(&["rm", "--remote", "origin", "new"]);
    let mut runs = Vec::new();
    for _ in 0..2 {
        crate::remote_gc::backdate(&env.path("remote"), std::time::Duration::from_secs(6));
        runs.push(env.json(&["gc", "--remote", "origin", "--grace", "4s"]));
    }
    // Nothing was marked or deleted: every pack holds a base of `newer`'s chain, or is it.
    for run in &runs {
        assert_eq!(run["marked"]["count"], 0, "{run:#}");
        assert_eq!(run["deleted"]["count"], 0, "{run:#}");
        assert_eq!(run["missing_objects"], 0, "{run:#}");
    }
    assert_eq!(remote_packs(&env.path("remote")), packs_before);
    // The collection wrote format 3: packs here hold delta frames.
    let format: Value =
        serde_json::from_slice(&std::fs::read(env.path("remote/format")).unwrap()).unwrap();
    assert_eq!(format["format"], 3, "{format}");

    // What is left on the remote reads whole (stored in a clone as a pull stores it)...
    let clone = clone_of(&env, &url);
    store_remote_packs_locally(&env.path("remote"), &clone.path("c/.dsv"));
    assert_eq!(cat(&clone, "newer", &[]), expected);
    // ... and a fresh clone checks it out, fetching the chains.
    let clone = clone_of(&env, &url);
    let out = in_clone(&clone, &["checkout", "newer", "out"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read(clone.path("c/out/data.csv")).unwrap(),
        expected
    );

    // With `newer` removed too, the same collections free everything.
    env.json(&["rm", "--remote", "origin", "newer"]);
    for _ in 0..2 {
        crate::remote_gc::backdate(&env.path("remote"), std::time::Duration::from_secs(6));
        env.json(&["gc", "--remote", "origin", "--grace", "4s"]);
    }
    assert_eq!(remote_packs(&env.path("remote")), Vec::<PathBuf>::new());
}

/// `verify --remote` checks the delta frames of a remote (structurally, and with `--full`
/// decoded against their bases): a sound forged remote has no problem.
#[test]
fn verify_remote_accepts_a_remote_of_delta_frames() {
    let (env, _) = forged_remote(DAYS);
    for full in [false, true] {
        let mut args = vec!["--json", "verify", "--remote", "origin"];
        if full {
            args.push("--full");
        }
        let out = env.run(&args);
        let report: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        assert_eq!(out.status.code(), Some(0), "{report:#}");
        assert_eq!(
            report["problems"].as_array().map(Vec::len),
            Some(0),
            "{report:#}"
        );
    }
}

/// Whether `/proc/mounts` lists a mount at `point`.
fn is_mounted(point: &Path) -> bool {
    std::fs::read_to_string("/proc/mounts")
        .unwrap()
        .lines()
        .any(|line| line.split(' ').nth(1) == point.to_str())
}

/// `dsv mount REV DIR --store c` of the clone, running; unmounted and reaped on drop.
struct Mount {
    child: std::process::Child,
    point: PathBuf,
}

impl Mount {
    fn start(clone: &TestEnv, revision: &str, dir: &str) -> Mount {
        let point = clone.path(dir);
        std::fs::create_dir_all(&point).unwrap();
        let child = clone.spawn(&["mount", revision, dir, "--store", "c"]);
        let mut mount = Mount {
            child,
            point: point.canonicalize().unwrap(),
        };
        crate::common::wait_until("the mount to come up", || {
            if let Some(status) = mount.child.try_wait().unwrap() {
                panic!("dsv mount exited with {status}");
            }
            is_mounted(&mount.point) && std::fs::read_dir(&mount.point).is_ok()
        });
        mount
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if is_mounted(&self.point) {
            let _ = std::process::Command::new("fusermount3")
                .args(["-u", "-z"])
                .arg(&self.point)
                .status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `dsv mount` of each dataset of a clone serves its table byte-identical: the mount's
/// reads (the read engine, several at once, out of order) decode the delta chains, read at
/// random offsets and then sequentially. `remote_only`: nothing of the data is here and the
/// reads fetch the chains; else the forged packs are stored in the clone first.
fn mount_reads_delta_chains(remote_only: bool) {
    if crate::common::skip_for("fuse", crate::common::lacks_fuse()) {
        return;
    }
    let (env, url) = forged_remote(DAYS);
    let clone = clone_of(&env, &url);
    if !remote_only {
        store_remote_packs_locally(&env.path("remote"), &clone.path("c/.dsv"));
    }
    for (dataset, expected) in versions(DAYS).into_iter().rev() {
        let mount = Mount::start(&clone, dataset, &format!("mnt-{dataset}"));
        let path = mount.point.join("data.csv");
        // Random reads first (a delta's closure fetched for a read in the middle).
        let file = std::fs::File::open(&path).unwrap();
        for offset in [400_000u64, 17, 250_000] {
            let mut buf = vec![0u8; 100_000];
            let n = std::os::unix::fs::FileExt::read_at(&file, &mut buf, offset).unwrap();
            assert_eq!(
                buf[..n],
                expected[offset as usize..offset as usize + n],
                "{dataset} at {offset}"
            );
        }
        assert!(std::fs::read(&path).unwrap() == expected, "{dataset}");
    }
}

#[test]
fn mount_reads_delta_chains_byte_identical_local_and_remote_only() {
    mount_reads_delta_chains(false);
    mount_reads_delta_chains(true);
}

/// A hostile store: each chunk of `newer` stored here as a delta frame whose base is another
/// chunk whose own delta frame names the first (cycles of two). `cat` (the read engine) and a
/// mount's concurrent reads refuse it as corrupt (exit 5, EIO), promptly: no read waits for
/// ever on another thread decoding the other half of a cycle.
#[test]
fn a_cycle_of_delta_bases_is_refused_by_the_read_engine() {
    let (env, url) = forged_remote(DAYS);
    let clone = clone_of(&env, &url);
    // `newer`'s chunks, from its forged pack on the remote (the one with delta frames whose
    // bases are not in it... any: the chunks of the last pack pushed).
    let newer_pack = remote_packs(&env.path("remote"))
        .into_iter()
        .filter(|path| {
            let file = std::fs::File::open(path).unwrap();
            let index = dsv::pack::reader::read_index(&file, path).unwrap();
            !index.deltas.is_empty()
        })
        .max_by_key(|path| std::fs::metadata(path).unwrap().modified().unwrap())
        .unwrap();
    let store = dsv::Store::open(&env.path(".dsv")).unwrap();
    let mut reader = store.reader();
    let chunks = chunks_of(std::slice::from_ref(&newer_pack));
    let mut store_clone = dsv::Store::open(&clone.path("c/.dsv")).unwrap();
    let packs_dir = store_clone.packs_dir();
    let mut writer = dsv::pack::PackWriter::create(&packs_dir, &clone.path("c/.dsv/tmp")).unwrap();
    let mut compressor = dsv::pack::DeltaCompressor::default();
    for pair in chunks.chunks(2) {
        let (a, b) = (pair[0], *pair.get(1).unwrap_or(&chunks[0]));
        for (id, base) in [(a, b), (b, a)] {
            let bytes = reader.bytes(&id, ObjectKind::Chunk).unwrap();
            let prefix = reader.bytes(&base, ObjectKind::Chunk).unwrap();
            let mut frame = dsv::pack::FrameBuilder::default();
            frame.push(id, ObjectKind::Chunk, &bytes);
            writer
                .add_frame(
                    frame
                        .encode_delta(&mut compressor, 3, &prefix, vec![base])
                        .unwrap(),
                )
                .unwrap();
        }
    }
    let sealed = writer.finish().unwrap();
    let catalog = store_clone.catalog_mut().writer().unwrap();
    catalog.add_pack(&sealed).unwrap();
    catalog.commit().unwrap();

    let started = std::time::Instant::now();
    let out = in_clone(&clone, &["cat", "newer:data.csv"]);
    assert_eq!(
        out.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cycle") || stderr.contains("levels"),
        "{stderr}"
    );
    assert!(
        out.stdout.is_empty(),
        "bytes of a refused chunk were served"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(20));

    if crate::common::skip_for("fuse", crate::common::lacks_fuse()) {
        return;
    }
    let mount = Mount::start(&clone, "newer", "mnt");
    let path = mount.point.join("data.csv");
    let readers: Vec<_> = (0..4u64)
        .map(|n| {
            let path = path.clone();
            std::thread::spawn(move || {
                let file = std::fs::File::open(&path).unwrap();
                let mut buf = vec![0u8; 65_536];
                std::os::unix::fs::FileExt::read_at(&file, &mut buf, n * 100_000)
            })
        })
        .collect();
    for reader in readers {
        let error = reader.join().unwrap().unwrap_err();
        assert_eq!(error.raw_os_error(), Some(5), "{error}");
    }
}

/// A remote-only read whose delta chains span more frames than one fetch batch
/// (`FETCH_BATCH_FRAMES`, 64): six committed versions of a 3.2 MB table, the newer five
/// stored as forward deltas (about 50 one-chunk frames each, chains 4 deep), read from a
/// clone that holds only metadata: a 1 MiB window of the head needs its 16 or so chunks
/// and 4 levels of bases under each. A base checked in one batch serves a delta of a later one (stored, not yet
/// recorded), and a delta may wait for a base of a later batch: both were lost before the
/// fetch's batches shared their check of deltas.
#[test]
fn a_remote_only_read_of_chains_longer_than_a_fetch_batch_is_byte_identical() {
    let env = TestEnv::new();
    for day in 0..6 {
        env.write("ws/data.csv", table(DAYS_MEASURED, day));
        let report = env.json(&["commit", "ws", "-d", "ds"]);
        if day > 0 {
            assert!(
                report["delta_chunks"].as_u64().unwrap() > 32,
                "day {day} is stored as deltas: {report}"
            );
        }
    }
    let (_, url) = crate::common::push_to_file_remote(&env, "remote", "ds");
    let clone = clone_of(&env, &url);
    assert!(cat(&clone, "ds", &[]) == table(DAYS_MEASURED, 5));
    assert!(cat(&clone, "ds@HEAD~3", &[]) == table(DAYS_MEASURED, 2));
}
