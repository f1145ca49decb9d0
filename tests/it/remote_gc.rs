//! A remote's garbage: `dsv rm --remote`, `dsv tag -d --remote`, `dsv gc --remote` (mark,
//! grace, delete, rescue, repack; no lock) and `dsv verify --remote`, on a local directory and
//! on moto's S3 server; and the race of 8 pushers and 2 collectors killed at random points.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::Value;

use crate::common::{TestEnv, pseudo_random};
use crate::remote::{unique_prefix, use_azure, use_s3};

/// The grace the tests collect with: short, so that a collector that runs longer than half of
/// it (and so defers its deletions) is still rare on a busy machine, and a wait of two graces
/// written in the snapshots stays readable. No test waits for it to pass: [`backdate`] and
/// [`RemoteClock`] move the remote's time instead.
const GRACE: &str = "4s";

/// More than [`GRACE`] plus the second a Last-Modified may be rounded by: how much time
/// [`backdate`] and [`RemoteClock::pass_grace`] let pass.
const PAST_GRACE: Duration = Duration::from_millis(5100);

/// Lets `by` pass on the file:// remote at `remote` without waiting: every file under its
/// `packs/` and `marks/` (and their staging files) gets a modification time `by` earlier.
/// `gc --remote` measures each pack's and mark's age by its Last-Modified (the file's
/// modification time) against the `clock` key it writes now, so to it `by` has passed.
pub(crate) fn backdate(remote: &std::path::Path, by: Duration) {
    for dir in ["packs", "marks"] {
        let Ok(entries) = std::fs::read_dir(remote.join(dir)) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let file = std::fs::File::options().write(true).open(&path).unwrap();
            let modified = file.metadata().unwrap().modified().unwrap();
            file.set_modified(modified - by).unwrap();
        }
    }
}

/// A grace passes on `env`'s file:// remote `remote/` ([`backdate`]).
fn wait_grace(env: &TestEnv) {
    backdate(&env.path("remote"), PAST_GRACE);
}

#[derive(Clone, Copy)]
enum Backend {
    File,
    S3,
    Azure,
}

/// The azurite account's well-known key (the emulator's, public; moto takes any key).
const AZURITE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// Time on the remote of a test, as `gc --remote` sees it, moved forward without waiting: on
/// a file:// remote by [`backdate`] (and `dsv gc --remote` runs), on S3 and Azure, whose
/// Last-Modified no client sets, by the library's `RemoteGcOptions::clock_offset` (the
/// collection runs in this process, against the same moto or azurite server, through a
/// remote `direct` this store records with the endpoint and key in its options: the library
/// reads no environment). The offset is the time passed since the last collection that wrote
/// marks (a real run): each mark is dated by the server when written, so an offset kept
/// across a run would age the marks it writes too.
struct RemoteClock {
    backend: Backend,
    offset: std::cell::Cell<Duration>,
}

impl RemoteClock {
    /// For `env`'s remote `origin` at `url`: on S3 and Azure, records remote `direct`.
    fn new(env: &TestEnv, backend: Backend, url: &str) -> RemoteClock {
        let endpoint = |name| crate::remote::endpoint(name);
        let options: Vec<(&str, String)> = match backend {
            Backend::File => Vec::new(),
            Backend::S3 => vec![
                ("aws_endpoint", endpoint("DSV_TEST_S3_ENDPOINT")),
                ("aws_allow_http", "true".into()),
                ("aws_region", "us-east-1".into()),
                ("aws_access_key_id", "test-key-id".into()),
                ("aws_secret_access_key", "test-secret".into()),
            ],
            Backend::Azure => vec![
                ("azure_storage_account_name", "devstoreaccount1".into()),
                ("azure_storage_account_key", AZURITE_KEY.into()),
                (
                    "azure_storage_endpoint",
                    format!("{}/devstoreaccount1", endpoint("DSV_TEST_AZURE_ENDPOINT")),
                ),
                ("azure_allow_http", "true".into()),
            ],
        };
        if !options.is_empty() {
            let options = options
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
            // Written as the catalog records it: `dsv remote add` refuses a key in options
            // (these are the test servers' own), and the library reads no environment.
            let mut store = dsv::Store::open(&env.path(".dsv")).unwrap();
            let writer = store.catalog_mut().writer().unwrap();
            writer.add_remote("direct", url, &options).unwrap();
            writer.commit().unwrap();
        }
        RemoteClock {
            backend,
            offset: Default::default(),
        }
    }

    /// A grace passes on the remote.
    fn pass_grace(&self, env: &TestEnv) {
        match self.backend {
            Backend::File => wait_grace(env),
            Backend::S3 | Backend::Azure => self.offset.set(self.offset.get() + PAST_GRACE),
        }
    }

    /// `dsv gc --remote origin --grace GRACE [--dry-run] --json` at the remote's time now: the
    /// binary on a file:// remote, else the library with the clock offset, on `direct`.
    fn gc(&self, env: &TestEnv, dry_run: bool) -> Value {
        if let Backend::File = self.backend {
            return gc(env, dry_run);
        }
        let mut store = dsv::Store::open(&env.path(".dsv")).unwrap();
        let mut options = dsv::ops::sync::remote_gc::RemoteGcOptions::default();
        options.dry_run = dry_run;
        options.grace = humantime::parse_duration(GRACE).unwrap();
        options.clock_offset = self.offset.get();
        let report = dsv::ops::sync::remote_gc::gc_remote(
            &mut store,
            "direct",
            &options,
            &dsv::progress::NoProgress,
        )
        .unwrap();
        if !dry_run {
            self.offset.set(Duration::ZERO);
        }
        serde_json::to_value(report).unwrap()
    }
}

/// A store with remote `origin` (a directory or a fresh S3 prefix) and its URL.
fn store_with_remote(backend: Backend) -> (TestEnv, String) {
    let env = TestEnv::new();
    let url = match backend {
        Backend::File => format!("file://{}/remote", env.root().display()),
        Backend::S3 => {
            use_s3(&env);
            format!("s3://dsv-test/{}", unique_prefix())
        }
        Backend::Azure => {
            use_azure(&env);
            format!("az://dsv-test/{}", unique_prefix())
        }
    };
    env.ok(&["remote", "add", "origin", &url]);
    (env, url)
}

/// Commits `seed`'s files as a version of `dataset` (one file of ~200 KB of its own, one
/// shared by every seed).
fn commit(env: &TestEnv, dir: &str, dataset: &str, seed: u64) {
    env.write(&format!("{dir}/own.bin"), pseudo_random(200_000, seed));
    env.write(&format!("{dir}/shared.txt"), "the same in every version\n");
    env.ok(&["commit", dir, "-d", dataset, "-m", "v", "-q"]);
}

fn ids(set: &Value) -> BTreeSet<String> {
    set["packs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect()
}

fn gc(env: &TestEnv, dry_run: bool) -> Value {
    let mut args = vec!["gc", "--remote", "origin", "--grace", GRACE];
    if dry_run {
        args.push("--dry-run");
    }
    env.json(&args)
}

fn verify_full(env: &TestEnv) -> Value {
    let out = env.run(&["--json", "verify", "--remote", "origin", "--full"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    assert_eq!(
        out.status.code(),
        Some(0),
        "verify --remote --full: {report:#}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    report
}

/// Dry runs list exactly what the real runs then mark and delete, and change nothing; a
/// removed ref's data is gone after two graces while the other ref's stays whole.
fn dry_run_then_reclaim(backend: Backend) {
    let (env, url) = store_with_remote(backend);
    let clock = RemoteClock::new(&env, backend, &url);
    let gc = |_: &TestEnv, dry_run| clock.gc(&env, dry_run);
    let wait_grace = |_: &TestEnv| clock.pass_grace(&env);
    commit(&env, "a", "keep", 1);
    commit(&env, "b", "drop", 2);
    env.ok(&["push", "-q"]);
    let before = verify_full(&env);
    assert_eq!(before["packs"], 2, "{before:#}");
    let removed = env.json(&["rm", "--remote", "origin", "drop"]);
    assert_eq!(removed["refs"][0]["status"], "deleted", "{removed:#}");
    wait_grace(&env);
    let planned = gc(&env, true);
    assert_eq!(planned["marked"]["count"], 1, "{planned:#}");
    assert_eq!(verify_full(&env)["marked"], 0, "a dry run marked a pack");
    let marked = gc(&env, false);
    assert_eq!(ids(&marked["marked"]), ids(&planned["marked"]));
    assert_eq!(marked["deleted"]["count"], 0);
    // Before the grace is over, nothing is deleted.
    let early = gc(&env, true);
    assert_eq!(ids(&early["waiting"]), ids(&planned["marked"]), "{early:#}");
    wait_grace(&env);
    let planned_delete = gc(&env, true);
    assert_eq!(ids(&planned_delete["deleted"]), ids(&planned["marked"]));
    assert_eq!(verify_full(&env)["packs"], 2, "a dry run deleted a pack");
    let deleted = gc(&env, false);
    assert_eq!(ids(&deleted["deleted"]), ids(&planned["marked"]));
    let after = verify_full(&env);
    assert_eq!(
        (after["packs"].clone(), after["marked"].clone()),
        (1.into(), 0.into())
    );
    // The kept dataset reads back whole from a fresh clone.
    let clone = TestEnv::bare();
    for (key, value) in env.vars.borrow().iter() {
        clone.set_var(key, value);
    }
    clone.ok(&["clone", &url, "c"]);
    let out = clone
        .command()
        .args(["checkout", "keep", "out"])
        .current_dir(clone.path("c"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read(clone.path("c/out/own.bin")).unwrap(),
        pseudo_random(200_000, 1)
    );
}

#[test]
fn dry_run_lists_what_a_run_does_and_a_removed_ref_is_reclaimed_file() {
    dry_run_then_reclaim(Backend::File);
}

#[test]
fn dry_run_lists_what_a_run_does_and_a_removed_ref_is_reclaimed_s3() {
    dry_run_then_reclaim(Backend::S3);
}

#[test]
fn dry_run_lists_what_a_run_does_and_a_removed_ref_is_reclaimed_azure() {
    dry_run_then_reclaim(Backend::Azure);
}

/// A marked pack that a ref names again (a writer whose last check came before the mark)
/// is rescued, not deleted.
#[test]
fn a_pack_a_ref_names_again_is_rescued() {
    let (env, _) = store_with_remote(Backend::File);
    commit(&env, "a", "ds", 1);
    commit(&env, "a", "ds", 2);
    env.ok(&["push", "-q"]);
    env.ok(&["tag", "ds~1", "old"]);
    env.ok(&["push", "-q"]);
    let tag = env.path("remote/refs/tags/ds/old");
    let named = std::fs::read(&tag).unwrap();
    // Only the tag reaches the first version's own file (its pack holds the first version
    // alone: the head is ds's second version, whose parent it is, so the history keeps it).
    // So remove the head too, and keep the tag aside.
    env.json(&["tag", "-d", "--remote", "origin", "ds@old"]);
    env.json(&["rm", "--remote", "origin", "ds"]);
    wait_grace(&env);
    let marked = gc(&env, false);
    assert!(
        marked["marked"]["count"].as_u64().unwrap() >= 1,
        "{marked:#}"
    );
    // The ref comes back, written as a writer whose last check preceded the marks would.
    std::fs::create_dir_all(tag.parent().unwrap()).unwrap();
    std::fs::write(&tag, named).unwrap();
    wait_grace(&env);
    let rescued = gc(&env, false);
    assert!(
        rescued["rescued"]["count"].as_u64().unwrap() >= 1,
        "{rescued:#}"
    );
    // The second version's own pack is still garbage; the first version's is not.
    assert!(ids(&rescued["rescued"]).is_disjoint(&ids(&rescued["deleted"])));
    wait_grace(&env);
    let again = gc(&env, false);
    assert!(
        ids(&again["deleted"]).is_disjoint(&ids(&rescued["rescued"])),
        "{again:#}"
    );
    assert_eq!(verify_full(&env)["refs"], 1);
}

/// A push of objects that live only in marked packs sends them again, in a pack of another
/// id, so the marked pack's deletion loses nothing.
fn push_after_mark(backend: Backend) {
    let (env, url) = store_with_remote(backend);
    let clock = RemoteClock::new(&env, backend, &url);
    let gc = |_: &TestEnv, dry_run| clock.gc(&env, dry_run);
    let wait_grace = |_: &TestEnv| clock.pass_grace(&env);
    commit(&env, "a", "ds", 1);
    env.ok(&["push", "-q"]);
    env.json(&["rm", "--remote", "origin", "ds"]);
    wait_grace(&env);
    let marked = gc(&env, false);
    assert_eq!(marked["marked"]["count"], 1, "{marked:#}");
    let pushed = env.json(&["push"]);
    assert_eq!(pushed["transfer"]["packs"], 1, "{pushed:#}");
    wait_grace(&env);
    let collected = gc(&env, false);
    assert_eq!(
        ids(&collected["deleted"]),
        ids(&marked["marked"]),
        "{collected:#}"
    );
    let report = verify_full(&env);
    assert_eq!(
        (report["refs"].clone(), report["packs"].clone()),
        (1.into(), 1.into())
    );
}

#[test]
fn push_after_a_mark_sends_the_objects_again_file() {
    push_after_mark(Backend::File);
}

#[test]
fn push_after_a_mark_sends_the_objects_again_s3() {
    push_after_mark(Backend::S3);
}

/// A pack mostly dead is repacked: its live frames go into a new pack, the old one is marked
/// and, after the grace, deleted.
#[test]
fn a_mostly_dead_pack_is_repacked() {
    let (env, _) = store_with_remote(Backend::File);
    // One commit of two datasets' files would share packs; a pack per push instead, with
    // a small file of "keep" beside a large one of "drop" in one commit.
    env.write("a/keep/small.bin", pseudo_random(20_000, 7));
    env.write("a/drop/large.bin", pseudo_random(3_000_000, 8));
    env.ok(&["commit", "a", "-d", "both", "-m", "v", "-q"]);
    env.write("k/small.bin", pseudo_random(20_000, 7));
    env.ok(&["commit", "k", "-d", "keep", "-m", "v", "-q"]);
    env.ok(&["push", "-q", "both"]);
    env.ok(&["push", "-q", "keep"]);
    env.json(&["rm", "--remote", "origin", "both"]);
    wait_grace(&env);
    let run = gc(&env, false);
    assert_eq!(run["repacked"]["count"], 1, "{run:#}");
    assert_eq!(run["written"]["count"], 1, "{run:#}");
    assert!(
        ids(&run["marked"]).is_superset(&ids(&run["repacked"])),
        "{run:#}"
    );
    wait_grace(&env);
    let deleted = gc(&env, false);
    assert_eq!(ids(&deleted["deleted"]), ids(&run["marked"]), "{deleted:#}");
    verify_full(&env);
}

/// A remote whose format is newer than this dsv knows is refused by push and gc.
#[test]
fn a_newer_remote_format_is_refused() {
    let (env, _) = store_with_remote(Backend::File);
    commit(&env, "a", "ds", 1);
    env.ok(&["push", "-q"]);
    env.ok(&["gc", "--remote", "origin", "-q"]);
    let format: Value =
        serde_json::from_slice(&std::fs::read(env.path("remote/format")).unwrap()).unwrap();
    // No pack holds a delta frame: format 2, which a dsv before deltas still writes to.
    assert_eq!(format["format"], 2, "{format}");
    // Format 3 (packs may hold delta frames) is this dsv's own.
    std::fs::write(
        env.path("remote/format"),
        r#"{"format":3,"grace_seconds":86400}"#,
    )
    .unwrap();
    commit(&env, "a", "ds", 2);
    env.ok(&["push", "-q"]);
    env.ok(&["gc", "--remote", "origin", "-q"]);
    let format: Value =
        serde_json::from_slice(&std::fs::read(env.path("remote/format")).unwrap()).unwrap();
    assert_eq!(
        format["format"], 3,
        "a collection lowered the format: {format}"
    );
    std::fs::write(
        env.path("remote/format"),
        r#"{"format":4,"grace_seconds":86400}"#,
    )
    .unwrap();
    commit(&env, "a", "ds", 3);
    let error = env.json_error(&["push"], 3);
    assert!(error.to_string().contains("format 4"), "{error:#}");
    env.json_error(&["gc", "--remote", "origin"], 3);
}

/// `rm --remote` of a ref another writer moved after it was read leaves it (exit 4); `verify
/// --remote` reports a ref whose data is gone (exit 5).
#[test]
fn verify_remote_reports_a_ref_whose_data_is_gone() {
    let (env, _) = store_with_remote(Backend::File);
    commit(&env, "a", "ds", 1);
    env.ok(&["push", "-q"]);
    for entry in std::fs::read_dir(env.path("remote/packs")).unwrap() {
        let path = entry.unwrap().path();
        if !path
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("ffff")
        {
            std::fs::remove_file(path).unwrap();
        }
    }
    let out = env.run(&["--json", "verify", "--remote", "origin"]);
    assert_eq!(out.status.code(), Some(5));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["problems"][0]["what"], "ds", "{report:#}");
}

/// Runs `dsv push` in every pusher and `dsv gc --remote` in every collector, all at once,
/// until all end; with `kill`, about half of them (chosen by `random`) are killed with
/// SIGKILL 5 to 65 ms after the start if still running. Returns how many were killed.
fn wave(pushers: &[TestEnv], collectors: &[TestEnv], random: &mut Lcg, kill: bool) -> u32 {
    let mut children = Vec::new();
    for env in pushers {
        children.push(env.spawn(&["push", "-q"]));
    }
    for env in collectors {
        children.push(env.spawn(&["gc", "--remote", "origin", "--grace", GRACE, "-q"]));
    }
    let mut points: Vec<Option<u64>> = children
        .iter()
        .map(|_| (kill && random.below(2) == 0).then(|| 5 + random.below(60)))
        .collect();
    let start = std::time::Instant::now();
    let mut kills = 0;
    loop {
        let mut running = false;
        for (child, point) in children.iter_mut().zip(&mut points) {
            if child.try_wait().unwrap().is_some() {
                continue;
            }
            running = true;
            if point.is_some_and(|at| start.elapsed() >= Duration::from_millis(at)) {
                child.kill().unwrap(); // SIGKILL
                child.wait().unwrap();
                *point = None;
                kills += 1;
            }
        }
        if !running {
            return kills;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A small deterministic generator for the race's random points.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

/// 8 pushers and 2 collectors (grace 4 s) on one remote, three rounds. Each round: a crash
/// wave (all at once, about half killed with SIGKILL at a random point); pushers remove their
/// own remote refs at random; the collectors mark what that leaves unreferenced; a grace
/// later, a race wave (nobody killed) in which those pushers push again, relying on the
/// marked packs, while the collectors delete marked packs. Then every ref's data is whole (`verify --remote --full`), and after two graces
/// with no writer, everything no ref reaches is gone.
#[test]
fn pushers_and_collectors_racing_lose_nothing_and_leave_no_garbage() {
    let remote_dir = TestEnv::bare();
    let url = format!("file://{}/remote", remote_dir.root().display());
    let pushers: Vec<TestEnv> = (0..8)
        .map(|_| {
            let env = TestEnv::new();
            env.ok(&["remote", "add", "origin", &url]);
            env
        })
        .collect();
    let collectors: Vec<TestEnv> = (0..2)
        .map(|_| {
            let env = TestEnv::new();
            env.ok(&["remote", "add", "origin", &url]);
            env
        })
        .collect();
    let mut random = Lcg(0x5eed);
    let mut kills = 0;
    for round in 0..3u64 {
        for (i, env) in pushers.iter().enumerate() {
            env.write(
                &format!("d/{round}.bin"),
                pseudo_random(30_000, round * 100 + i as u64),
            );
            env.ok(&["commit", "d", "-d", &format!("p{i}"), "-m", "v", "-q"]);
        }
        // The crash wave: every pusher pushes and both collectors run, all at once; about
        // half of them are killed with SIGKILL at a random point (a push or a collection
        // here takes 60 ms or more).
        kills += wave(&pushers, &collectors, &mut random, true);
        // Some datasets' remote refs go: their packs become garbage, marked by the
        // collectors after a grace, old marks by the race wave.
        for (i, env) in pushers.iter().enumerate() {
            if random.below(2) == 0 {
                env.run(&["rm", "--remote", "origin", &format!("p{i}")]);
            }
        }
        wait_grace(&remote_dir);
        for env in &collectors {
            env.run(&["gc", "--remote", "origin", "--grace", GRACE, "-q"]);
        }
        wait_grace(&remote_dir);
        // The race wave, nobody killed: the pushers whose refs went push again, relying on
        // their older versions' packs, which the collectors marked a grace ago and, running
        // at the same time, delete unless they see a ref naming them.
        wave(&pushers, &collectors, &mut random, false);
    }
    assert!(kills > 0, "no process was killed mid-run");
    let checker = &collectors[0];
    // Nothing lost: every ref's closure is in the remote's packs, every pack checks.
    let report = verify_full(checker);
    assert!(report["refs"].as_u64().unwrap() > 0, "{report:#}");
    // Reclaimed: with no writer, three runs a grace apart mark, then delete, what is left.
    for _ in 0..3 {
        wait_grace(&remote_dir);
        checker.json(&["gc", "--remote", "origin", "--grace", GRACE]);
    }
    let last = checker.json(&["gc", "--remote", "origin", "--grace", GRACE, "--dry-run"]);
    for set in [
        "marked", "waiting", "young", "deleted", "rescued", "repacked",
    ] {
        assert_eq!(last[set]["count"], 0, "{set}: {last:#}");
    }
    let packs: BTreeSet<String> = std::fs::read_dir(remote_dir.path("remote/packs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_str().unwrap().to_string())
        .filter(|name| !name.starts_with("ffff"))
        .collect();
    let live = ids(&last["live"]);
    let expected: BTreeSet<String> = live
        .iter()
        .flat_map(|id| [format!("{id}.idx"), format!("{id}.pack")])
        .collect();
    assert_eq!(packs, expected, "unreachable packs left after two graces");
    let marks = std::fs::read_dir(remote_dir.path("remote/marks"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(marks, 0, "marks left");
    verify_full(checker);
}

/// `Remote::delete_ref` deletes a ref only while it is as read: a stale ETag leaves the ref
/// (another writer moved it), the current one deletes it, on a directory and on S3.
#[test]
fn deleting_a_ref_is_a_compare_and_swap() {
    use dsv::catalog::RemoteRecord;
    use dsv::remote::{RefName, Remote};
    let dir = TestEnv::bare();
    let s3 = std::collections::BTreeMap::from(
        [
            (
                "aws_endpoint",
                crate::remote::endpoint("DSV_TEST_S3_ENDPOINT"),
            ),
            ("aws_allow_http", "true".to_string()),
            ("aws_region", "us-east-1".to_string()),
            ("aws_access_key_id", "test-key-id".to_string()),
            ("aws_secret_access_key", "test-secret".to_string()),
        ]
        .map(|(k, v)| (k.to_string(), v)),
    );
    for (url, options) in [
        (
            format!("file://{}/remote", dir.root().display()),
            Default::default(),
        ),
        (format!("s3://dsv-test/{}", unique_prefix()), s3),
    ] {
        let remote = Remote::open(&RemoteRecord {
            id: 0,
            name: "r".into(),
            url: url.clone(),
            options,
            position: 0,
        })
        .unwrap();
        let name = RefName {
            dataset: "ds".into(),
            tag: Some("t".into()),
        };
        let (one, two) = (dsv::ObjectId::of(b"one"), dsv::ObjectId::of(b"two"));
        let first = remote.update_ref(&name, &one, None).unwrap();
        let second = remote.update_ref(&name, &two, Some(&first)).unwrap();
        assert!(
            !remote.delete_ref(&name, &first).unwrap(),
            "{url}: stale ETag"
        );
        assert_eq!(remote.get_ref(&name).unwrap().unwrap().0, two, "{url}");
        assert!(remote.delete_ref(&name, &second).unwrap(), "{url}");
        assert!(remote.get_ref(&name).unwrap().is_none(), "{url}");
        assert!(
            !remote.delete_ref(&name, &second).unwrap(),
            "{url}: already gone"
        );
        // Created again afresh, as a writer would after the deletion.
        remote.update_ref(&name, &one, None).unwrap();
    }
}

/// The human output of the remote commands, ids, paths and sizes normalized.
#[test]
fn remote_collection_in_text() {
    let (env, _) = store_with_remote(Backend::File);
    commit(&env, "a", "keep", 1);
    commit(&env, "b", "drop", 2);
    env.ok(&["tag", "drop", "v1"]);
    env.ok(&["push", "-q"]);
    let human = |args: &[&str]| {
        let out = env.run(args);
        let text = format!(
            "exit: {}\n--- stdout\n{}--- stderr\n{}",
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let text = regex::Regex::new(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC")
            .unwrap()
            .replace_all(&env.normalize(&text), "[TIME]")
            .into_owned();
        regex::Regex::new(r"\d+(\.\d+)? (B|KiB|MiB)")
            .unwrap()
            .replace_all(&text, "[SIZE]")
            .into_owned()
    };
    insta::assert_snapshot!(human(&["rm", "--remote", "origin", "drop"]), @r"
    exit: 0
    --- stdout
    Deleted origin/drop@v1 (was [SHORT])
    Deleted origin/drop (was [SHORT])
    run `dsv gc --remote origin` to free the space
    --- stderr
    ");
    insta::assert_snapshot!(human(&["tag", "-d", "--remote", "origin", "keep@nope"]), @r#"
    exit: 3
    --- stdout
    --- stderr
    error: unknown revision "origin/keep@nope"

    hint: `dsv fetch --remote origin` lists the datasets and tags origin has; then `dsv pull NAME --remote origin` (or `dsv checkout origin/NAME DIR`). A dataset of this store: `dsv log keep`
    "#);
    insta::assert_snapshot!(human(&["gc", "--remote", "origin", "--grace", "0s", "--dry-run"]), @r"
    exit: 0
    --- stdout
    Would mark 1 pack ([SIZE]), would delete 0 packs ([SIZE]), would rescue 0 packs, would repack 0 packs on remote origin; kept 1 pack ([SIZE]) for 1 ref
      mark [SHORT]
    grace 0s; the remote's clock: [TIME]
    frees nothing (--dry-run)
    [SIZE] in 1 pack: a run now marks it, a run after [TIME] frees it
    --- stderr
    ");
    insta::assert_snapshot!(human(&["gc", "--remote", "origin", "--grace", "0s"]), @r"
    exit: 0
    --- stdout
    Marked 1 pack ([SIZE]), deleted 0 packs ([SIZE]), rescued 0 packs, repacked 0 packs on remote origin; kept 1 pack ([SIZE]) for 1 ref
      mark [SHORT]
    grace 0s; the remote's clock: [TIME]
    freed [SIZE] now
    [SIZE] in 1 pack: a run after [TIME] frees it
    --- stderr
    ");
    insta::assert_snapshot!(human(&["verify", "--remote", "origin"]), @r"
    exit: 0
    --- stdout
    Checked remote origin: 1 ref, 8 objects they reach, 2 packs ([SIZE])
    1 pack marked by gc
    --- stderr
    ");
    // The mark a second old (a mark is deleted a whole second past the grace).
    backdate(&env.path("remote"), Duration::from_millis(1100));
    insta::assert_snapshot!(human(&["gc", "--remote", "origin", "--grace", "0s"]), @r"
    exit: 0
    --- stdout
    Marked 0 packs ([SIZE]), deleted 1 pack ([SIZE]), rescued 0 packs, repacked 0 packs on remote origin; kept 1 pack ([SIZE]) for 1 ref
      delete [SHORT]
    grace 0s; the remote's clock: [TIME]
    freed [SIZE] now
    --- stderr
    ");
}

/// `dsv copy` follows the writers' rule too: objects only in packs the destination's gc
/// marked are sent again, under another pack name, and the marked pack's deletion loses
/// nothing.
#[test]
fn copy_after_a_mark_sends_the_objects_again() {
    let (env, _) = store_with_remote(Backend::File);
    let src = format!("file://{}/src", env.root().display());
    env.ok(&["remote", "add", "src", &src]);
    commit(&env, "a", "ds", 1);
    env.ok(&["push", "-q", "--remote", "src"]);
    env.ok(&["push", "-q"]);
    env.json(&["rm", "--remote", "origin", "ds"]);
    wait_grace(&env);
    let marked = gc(&env, false);
    assert_eq!(marked["marked"]["count"], 1, "{marked:#}");
    let copied = env.json(&["copy", "ds", "--from", "src", "--to", "origin"]);
    assert!(
        copied["transfer"]["packs"].as_u64().unwrap() >= 1,
        "{copied:#}"
    );
    wait_grace(&env);
    let collected = gc(&env, false);
    assert_eq!(
        ids(&collected["deleted"]),
        ids(&marked["marked"]),
        "{collected:#}"
    );
    let report = verify_full(&env);
    assert_eq!(report["refs"], 1, "{report:#}");
}
