//! A stalled mirror and the read order of a mirror added after a clone (issue 34, A5, B1
//! and B2). The near copy is a moto S3 server of the test's own ([`PrivateS3`]), frozen
//! with SIGSTOP (it still accepts connections, as a hung server does, and never answers);
//! the far copy is a `file://` directory.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{TestEnv, assert_same_tree, wait_until};
use crate::nearest::{commit, dataset};
use crate::remote::{PrivateS3, unique_prefix, use_s3};

/// How long a read may take with the first mirror frozen: well under the 30 s of one
/// `object_store` request timeout (before the fix: about 3 minutes).
const WITHIN: Duration = Duration::from_secs(20);

/// A writer whose dataset `ds` is pushed to `near` (moto) and `far` (a directory); the
/// version, near's prefix and far's URL.
fn pushed_to_both(writer: &TestEnv, near: &PrivateS3, seed: u64) -> (String, String, String) {
    use_s3(writer);
    dataset(writer, "data", seed);
    let id = commit(writer);
    let prefix = unique_prefix();
    near.add(writer, &[], "near", &prefix, false);
    let far = format!("file://{}", writer.path("far").display());
    writer.ok(&["remote", "add", "far", &far]);
    writer.ok(&["push", "--remote", "near"]);
    writer.ok(&["push", "--remote", "far"]);
    (id, prefix, far)
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The first mirror's server frozen: a checkout (`transfer.remotes`) and `cat` (the read
/// engine) of a version whose data is only on the remotes finish in seconds from far, and
/// stderr names the frozen remote and the one that served. The checkout's near has the
/// default stall timeout (5 s), the cat's its `stall_timeout` option (1 s).
#[test]
fn a_frozen_first_mirror_is_passed_over_in_seconds_and_named() {
    let writer = TestEnv::new();
    let near = PrivateS3::start(writer.path("near-moto.log"));
    let (id, prefix, far) = pushed_to_both(&writer, &near, 31);
    let reader = |options: &[&str]| {
        let reader = TestEnv::new();
        use_s3(&reader);
        reader.ok(&["remote", "add", "far", &far]);
        reader.ok(&["fetch"]);
        near.add_with(&reader, &[], "near", &prefix, true, options);
        reader.ok(&["fetch", "--remote", "near"]);
        reader
    };
    let (checkout, cat) = (reader(&[]), reader(&["stall_timeout=1s"]));
    near.freeze();

    let start = Instant::now();
    let out = checkout.run(&["--json", "checkout", &format!("ds@{id}"), "out"]);
    let took = start.elapsed();
    assert!(out.status.success(), "{out:?}");
    assert!(took < WITHIN, "checkout took {took:?}: {}", stderr(&out));
    assert_same_tree(&writer.path("data"), &checkout.path("out"));
    let warned = stderr(&out);
    assert!(
        warned.contains("warning: remote \"near\" failed, read from \"far\" instead")
            && warned.contains("stalled"),
        "{warned}"
    );
    assert_eq!(
        warned.matches("warning: remote \"near\"").count(),
        1,
        "{warned}"
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let remotes = report["transfer"]["remotes"].as_array().unwrap();
    assert_eq!(remotes.len(), 2, "{report}");
    assert_eq!(remotes[0]["remote"], "near", "{report}");
    assert!(
        remotes[0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("stalled") && e.contains(" in 5s ")),
        "{report}"
    );
    assert_eq!(remotes[1]["remote"], "far", "{report}");
    assert!(remotes[1]["objects"].as_u64().unwrap() > 0, "{report}");

    let start = Instant::now();
    let out = cat.run(&["cat", &format!("ds@{id}:big.bin")]);
    let took = start.elapsed();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(took < WITHIN, "cat took {took:?}: {}", stderr(&out));
    assert_eq!(
        out.stdout,
        std::fs::read(writer.path("data/big.bin")).unwrap()
    );
    assert!(
        stderr(&out).contains("warning: remote \"near\" failed, read from \"far\" instead")
            && stderr(&out).contains(" in 1s "),
        "{}",
        stderr(&out)
    );
}

/// `remote add near URL --first` on a fresh clone from far: the first read asks near (its
/// pack listing is read on first use), with no `dsv fetch --remote near` before.
#[test]
fn a_mirror_added_first_after_a_clone_serves_the_first_read() {
    let writer = TestEnv::new();
    let near = PrivateS3::start(writer.path("near-moto.log"));
    let (id, prefix, far) = pushed_to_both(&writer, &near, 32);
    let reader = TestEnv::bare();
    use_s3(&reader);
    reader.ok(&["clone", &far, "cl"]);
    near.add(&reader, &["--store", "cl"], "near", &prefix, true);
    let before = near.pack_reads();
    let out = reader.run(&["--store", "cl", "cat", &format!("ds@{id}:big.bin")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        out.stdout,
        std::fs::read(writer.path("data/big.bin")).unwrap()
    );
    assert!(
        near.pack_reads() > before,
        "near, read first, was not asked for the data"
    );
    // A checkout of a local revision says which remote served, in read order.
    let checkout = reader.json(&["--store", "cl", "checkout", &format!("ds@{id}"), "out"]);
    assert_same_tree(&writer.path("data"), &reader.path("out"));
    let remotes = checkout["transfer"]["remotes"].as_array().unwrap();
    assert_eq!(remotes[0]["remote"], "near", "{checkout}");
    assert_eq!(remotes[0]["error"], Value::Null, "{checkout}");
}

/// The only remote slow to answer (its `stall_timeout` option 1 s; frozen until the
/// checkout's request has waited on it for twice that, then thawed): a checkout waits for
/// it rather than fail it as stalled, as there is no other remote to read from (before the
/// fix: "stalled: 0 bytes ... in 1s", exit 1). Also the `stall_timeout` option through the
/// CLI: `0s` is accepted, a value without a unit is refused (exit 3).
#[test]
fn the_only_remote_slow_to_answer_is_waited_for() {
    let writer = TestEnv::new();
    let near = PrivateS3::start(writer.path("near-moto.log"));
    use_s3(&writer);
    dataset(&writer, "data", 33);
    let id = commit(&writer);
    let prefix = unique_prefix();
    near.add(&writer, &[], "near", &prefix, false);
    writer.ok(&["push", "--remote", "near"]);
    let url = format!("s3://dsv-test/{prefix}");
    let with = |option| {
        [
            "remote",
            "add",
            "other",
            &url,
            "--no-check",
            "--option",
            option,
        ]
    };
    let refused = writer.fails(&with("stall_timeout=5"), 3);
    assert!(refused.contains("stall_timeout"), "{refused}");
    writer.ok(&with("stall_timeout=0s"));

    let reader = TestEnv::new();
    use_s3(&reader);
    let stall = Duration::from_secs(1);
    near.add_with(&reader, &[], "near", &prefix, false, &["stall_timeout=1s"]);
    reader.ok(&["fetch"]);
    near.freeze();
    let ended = AtomicBool::new(false);
    let out = std::thread::scope(|scope| {
        scope.spawn(|| {
            // Frozen from the moment the checkout's request reaches it, for twice the stall
            // timeout (the checkout's start, however slow, does not count).
            wait_until("the checkout to ask near", || {
                near.has_a_client() || ended.load(Ordering::SeqCst)
            });
            std::thread::sleep(2 * stall);
            near.thaw();
        });
        let out = reader.run(&["--json", "checkout", &format!("ds@{id}"), "out"]);
        ended.store(true, Ordering::SeqCst);
        out
    });
    assert!(out.status.success(), "{}", stderr(&out));
    assert_same_tree(&writer.path("data"), &reader.path("out"));
}

/// Read order near, middle, far: near fails (its directory is a file), middle answers but
/// lacks the data, far serves it. The warning names far as the remote read from, not
/// middle (before the fix: "read from \"middle\"", which served nothing).
#[test]
fn the_fallback_warning_names_the_remote_that_served() {
    let writer = TestEnv::new();
    dataset(&writer, "data", 34);
    let id = commit(&writer);
    let far = format!("file://{}", writer.path("far").display());
    writer.ok(&["remote", "add", "far", &far]);
    writer.ok(&["push", "--remote", "far"]);

    let reader = TestEnv::new();
    reader.ok(&["remote", "add", "far", &far]);
    reader.ok(&["fetch"]);
    let middle = format!("file://{}", reader.path("middle").display());
    reader.ok(&["remote", "add", "middle", &middle, "--first"]);
    let near_dir = reader.path("near");
    let near = format!("file://{}", near_dir.display());
    reader.ok(&["remote", "add", "near", &near, "--first", "--no-check"]);
    let _ = std::fs::remove_dir_all(&near_dir);
    std::fs::write(&near_dir, "not a directory").unwrap();

    let out = reader.run(&["checkout", &format!("ds@{id}"), "out"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_same_tree(&writer.path("data"), &reader.path("out"));
    let warned = stderr(&out);
    assert!(
        warned.contains("warning: remote \"near\" failed, read from \"far\" instead"),
        "{warned}"
    );
}

/// Reads file `path` of version `id` whole through `engine`.
fn read_whole(engine: &dsv::read::ReadEngine, id: &str, path: &str) -> Vec<u8> {
    let file = engine
        .version(&format!("ds@{id}"))
        .unwrap()
        .open(path)
        .unwrap();
    let mut bytes = vec![0; file.size() as usize];
    let mut at = 0;
    while at < bytes.len() {
        let read = file.read_at(at as u64, &mut bytes[at..]).unwrap();
        assert!(read > 0, "{path} ended early");
        at += read;
    }
    bytes
}

/// A mirror (read first) whose pack listing failed on its first use by a read engine (it
/// could not even be opened: its directory was a file) is listed on a later read of the
/// same engine, once it works and is no longer held as failed (before the fix: never
/// again, so that engine read everything from the next remote).
#[test]
fn a_read_engine_lists_again_a_mirror_whose_first_listing_failed() {
    let writer = TestEnv::new();
    dataset(&writer, "data", 35);
    let id = commit(&writer);
    let (far_dir, near_dir) = (writer.path("far"), writer.path("near"));
    let far = format!("file://{}", far_dir.display());
    let near = format!("file://{}", near_dir.display());
    for (name, url) in [("far", &far), ("near", &near)] {
        writer.ok(&["remote", "add", name, url]);
        writer.ok(&["push", "--remote", name]);
    }
    let reader = TestEnv::bare();
    reader.ok(&["clone", &far, "cl"]);
    let away = writer.path("near-away");
    std::fs::rename(&near_dir, &away).unwrap();
    reader.ok(&[
        "--store",
        "cl",
        "remote",
        "add",
        "near",
        &near,
        "--first",
        "--no-check",
    ]);
    let _ = std::fs::remove_dir_all(&near_dir);
    std::fs::write(&near_dir, "not a directory").unwrap();

    let dot_dsv = reader.path("cl/.dsv");
    let engine = dsv::read::ReadEngine::open(&dot_dsv, Default::default()).unwrap();
    let big = read_whole(&engine, &id, "big.bin");
    assert_eq!(big, std::fs::read(writer.path("data/big.bin")).unwrap());

    // Near works again; a success puts it back in its place in the read order.
    std::fs::remove_file(&near_dir).unwrap();
    std::fs::rename(&away, &near_dir).unwrap();
    let store = dsv::Store::open(&dot_dsv).unwrap();
    let records = store.catalog().remotes().unwrap();
    let near_id = records.iter().find(|r| r.name == "near").unwrap().id;
    let mut attempts = dsv::transfer::fallback::Attempts::new();
    for record in attempts.order(records) {
        attempts.attempt(&record.name, || Ok(())).unwrap();
    }
    assert!(store.catalog().remote_packs(near_id).unwrap().is_empty());

    let small = read_whole(&engine, &id, "small/0.txt");
    assert_eq!(
        small,
        std::fs::read(writer.path("data/small/0.txt")).unwrap()
    );
    assert!(
        !store.catalog().remote_packs(near_id).unwrap().is_empty(),
        "the engine did not list near again"
    );
}
