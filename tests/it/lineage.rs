//! `dsv audit --lineage`: a lineage record (what Python's `dsv.lineage` writes) is replayed
//! against the store: the version (here, or fetched from a remote the record names), its
//! root tree, the selection, and the samples a rank saw, recomputed from the loader's order.
//! Records are written here by hand, with the order and digests computed independently of
//! the library (path order, BLAKE3 of each id and a NUL byte).

use insta::assert_snapshot;
use serde_json::{Value, json};

use crate::common::{TestEnv, pseudo_random};

fn digest(ids: &[&str]) -> String {
    let mut hasher = blake3::Hasher::new();
    for id in ids {
        hasher.update(id.as_bytes());
        hasher.update(&[0]);
    }
    format!("blake3:{}", hasher.finalize().to_hex())
}

fn human(env: &TestEnv, args: &[&str]) -> String {
    let out = env.run(args);
    let text = format!(
        "exit: {}\n--- stdout\n{}--- stderr\n{}",
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    env.normalize(&text)
}

/// A store with dataset `ds` at tag v1: train/0.bin .. train/6.bin (sizes 100 + i) and
/// notes.txt; returns the lock entry of ds@v1 and the sorted train paths.
fn dataset(env: &TestEnv) -> (Value, Vec<String>) {
    let mut train = Vec::new();
    for i in 0..7 {
        let path = format!("data/train/{i}.bin");
        env.write(&path, pseudo_random(100 + i, i as u64));
        train.push(format!("train/{i}.bin"));
    }
    env.write("data/notes.txt", "notes\n");
    env.ok(&["commit", "data", "-d", "ds", "--tag", "v1"]);
    let lock: Value = serde_json::from_str(&env.ok(&["lock", "ds@v1"])).unwrap();
    (lock["datasets"]["ds"].clone(), train)
}

/// The record of rank 1 of 2, no shuffle, over train/**, having seen `seen` samples: its
/// order is train/1, train/3, train/5.
fn record(pinned: &Value, train: &[String], seen: usize) -> Value {
    let version = pinned["version"].as_str().unwrap();
    let ids: Vec<&str> = [1, 3, 5][..seen]
        .iter()
        .map(|i| train[*i].as_str())
        .collect();
    let all: Vec<&str> = train.iter().map(String::as_str).collect();
    json!({
        "schema": "dsv.lineage/1",
        "uri": format!("dsv://ds@{version}"),
        "dataset": "ds",
        "version": version,
        "tree": pinned["tree"],
        "tags": ["v1"],
        "remotes": pinned["remotes"],
        "loader": "IterableVersionDataset",
        "selection": {
            "include": ["train/**"], "paths": null, "files": 7,
            "bytes": (100..107).sum::<u64>(), "digest": digest(&all)
        },
        "order": {"shuffle": false, "seed": 0, "epoch": 0, "rank": 1, "world_size": 2, "workers": 2},
        "samples": {"seen": seen, "unit": "file", "digest": digest(&ids), "ids": ids},
        "run_id": "an MLflow run",
    })
}

/// `dsv --json audit --lineage FILE`, expecting exit 1 (a record that does not match): the report.
fn findings(env: &TestEnv, file: &str) -> Value {
    let out = env.run(&["--json", "audit", "--lineage", file]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("a JSON report")
}

fn failed(report: &Value) -> Vec<(String, String)> {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["ok"] == false)
        .map(|c| {
            (
                c["check"].as_str().unwrap().to_string(),
                c["detail"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn a_lineage_record_is_proven_and_a_tampered_one_is_named() {
    let env = TestEnv::new();
    let (pinned, train) = dataset(&env);
    let good = record(&pinned, &train, 2);
    env.write("dsv-lineage.json", good.to_string());
    let report = env.json(&["audit", "--lineage", "dsv-lineage.json"]);
    assert_eq!(report["proven"], true, "{report}");
    assert_eq!(report["samples_proven"], true);
    assert_eq!(report["samples_seen"], 2);
    assert_eq!(report["fetched_from"], Value::Null);
    let checks: Vec<&str> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["check"].as_str().unwrap())
        .collect();
    assert_eq!(
        checks,
        ["version", "dataset", "tree", "uri", "selection", "samples"]
    );

    insta::with_settings!({ filters => vec![(r"\d+\.\d\d s", "[SECONDS]"), (r"dsv \d+\.\d+\.\d+", "dsv [VERSION]")] }, {
        assert_snapshot!(human(&env, &["audit", "--lineage", "dsv-lineage.json"]), @"
        exit: 0
        --- stdout
        dsv-lineage.json is proven: ds@[SHORT] (IterableVersionDataset), 2 samples proven
        ok   version   [SHORT] is in this store
        ok   dataset   [SHORT] belongs to ds
        ok   tree      root tree [SHORT]
        ok   uri       dsv://ds@[ID]
        ok   selection 7 files, 721 bytes
        ok   samples   the first 2 of rank 1 of 2's 3 samples in epoch 0 (blake3:[ID])
          version [ID]; dsv [VERSION] at [TIME], [SECONDS]
        --- stderr
        ");
        let mut bad = good.clone();
        bad["samples"]["seen"] = json!(3);
        bad["samples"]["ids"] = Value::Null;
        env.write("bad.json", bad.to_string());
        assert_snapshot!(human(&env, &["audit", "--lineage", "bad.json"]), @"
        exit: 1
        --- stdout
        bad.json does not match: ds@[SHORT] (IterableVersionDataset), 1 check failed
        ok   version   [SHORT] is in this store
        ok   dataset   [SHORT] belongs to ds
        ok   tree      root tree [SHORT]
        ok   uri       dsv://ds@[ID]
        ok   selection 7 files, 721 bytes
        FAIL samples   the first 3 samples of rank 1 of 2 in epoch 0 have digest blake3:[ID], the record says blake3:[ID]
          version [ID]; dsv [VERSION] at [TIME], [SECONDS]
        --- stderr
        ");
    });

    // Rank 0's samples claimed as rank 1's.
    let mut bad = good.clone();
    bad["samples"]["ids"] = json!([train[0], train[2]]);
    env.write("bad.json", bad.to_string());
    let report = findings(&env, "bad.json");
    let failures = failed(&report);
    assert_eq!(failures.len(), 1, "{report}");
    assert_eq!(failures[0].0, "samples");
    assert!(
        failures[0].1.contains("differ from the order at sample 0"),
        "{report}"
    );

    // Another version of the dataset: its tree is not the one the record names.
    env.write("data/notes.txt", "edited\n");
    env.ok(&["commit", "data", "-d", "ds", "--tag", "v2"]);
    let v2: Value = serde_json::from_str(&env.ok(&["lock", "ds@v2"])).unwrap();
    let v2 = v2["datasets"]["ds"]["version"]
        .as_str()
        .unwrap()
        .to_string();
    let mut bad = good.clone();
    bad["version"] = json!(v2);
    bad["uri"] = json!(format!("dsv://ds@{v2}"));
    env.write("bad.json", bad.to_string());
    let report = findings(&env, "bad.json");
    assert_eq!(failed(&report)[0].0, "tree", "{report}");
    assert_eq!(report["checks"].as_array().unwrap().len(), 4);

    // A URI naming another version than the record.
    let mut bad = good.clone();
    bad["uri"] = json!(format!("dsv://ds@{v2}"));
    env.write("bad.json", bad.to_string());
    let report = findings(&env, "bad.json");
    assert_eq!(failed(&report)[0].0, "uri", "{report}");

    // A selection that is not what the globs select (one file's bytes more).
    let mut bad = good.clone();
    bad["selection"]["bytes"] = json!(722);
    env.write("bad.json", bad.to_string());
    let report = findings(&env, "bad.json");
    assert_eq!(failed(&report)[0].0, "selection", "{report}");
    assert!(
        failed(&report)[0]
            .1
            .contains("it selects 7 files, 721 bytes"),
        "{report}"
    );

    // More samples than the rank's order has.
    let mut bad = good.clone();
    bad["samples"]["seen"] = json!(4);
    env.write("bad.json", bad.to_string());
    let report = findings(&env, "bad.json");
    assert!(
        failed(&report)[0]
            .1
            .contains("saw 4 samples in epoch 0, but its order has 3"),
        "{report}"
    );
}

#[test]
fn a_record_that_cannot_be_read_is_an_error_and_an_unknown_version_names_its_remote() {
    let env = TestEnv::new();
    let (pinned, train) = dataset(&env);
    let good = record(&pinned, &train, 1);
    for (name, text, says) in [
        ("not-json.json", "{".to_string(), "it is not JSON"),
        (
            "schema.json",
            json!({"schema": "dsv.lineage/2"}).to_string(),
            "its schema is \"dsv.lineage/2\", not \"dsv.lineage/1\"",
        ),
        (
            "no-schema.json",
            json!({"version": "x"}).to_string(),
            "it has no \"schema\"",
        ),
        (
            "rank.json",
            {
                let mut bad = good.clone();
                bad["order"]["rank"] = json!(2);
                bad.to_string()
            },
            "rank 2 of world size 2",
        ),
        (
            "shape.json",
            {
                let mut bad = good.clone();
                bad["selection"]["files"] = json!("seven");
                bad.to_string()
            },
            "invalid type",
        ),
    ] {
        env.write(name, text);
        let error = env.json_error(&["audit", "--lineage", name], 3);
        let message = error["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!("invalid lineage record {name}: "))
                && message.contains(says),
            "{name}: {error}"
        );
    }
    env.fails(&["audit", "--lineage", "missing.json"], 6);
    // A FIFO is refused, never waited on.
    nix::unistd::mkfifo(&env.path("fifo.json"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let error = env.json_error(&["audit", "--lineage", "fifo.json"], 3);
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("not a regular file")
    );
    // --lineage takes no directory, and no --full.
    env.fails(&["audit", "--lineage", "x.json", "dir"], 2);
    env.fails(&["audit", "--lineage", "x.json", "--full"], 2);
    env.fails(&["audit"], 2);

    // A version neither here nor on a remote the record names: a failed check naming it.
    let mut unknown = good.clone();
    let id = "ab".repeat(32);
    unknown["version"] = json!(id);
    unknown["uri"] = json!(format!("dsv://ds@{id}"));
    unknown["remotes"] = json!([{"name": "team", "url": "file:///nowhere/remote"}]);
    env.write("unknown.json", unknown.to_string());
    let report = findings(&env, "unknown.json");
    let failures = failed(&report);
    assert_eq!(failures[0].0, "version");
    assert!(
        failures[0]
            .1
            .contains("`dsv remote add NAME file:///nowhere/remote`"),
        "{report}"
    );
}

#[test]
fn a_lineage_audit_fetches_the_version_from_a_remote_the_record_names() {
    let maker = TestEnv::new();
    let remote_home = TestEnv::bare();
    let url = format!("file://{}/remote", remote_home.root().display());
    maker.ok(&["remote", "add", "origin", &url]);
    let (_, train) = dataset(&maker);
    maker.ok(&["push", "ds"]);
    let lock: Value = serde_json::from_str(&maker.ok(&["lock", "ds@v1"])).unwrap();
    let pinned = &lock["datasets"]["ds"];
    assert_eq!(pinned["remotes"][0]["url"], url.as_str());
    let text = record(pinned, &train, 3).to_string();

    let reviewer = TestEnv::new();
    reviewer.write("dsv-lineage.json", &text);
    let report = findings(&reviewer, "dsv-lineage.json");
    assert!(failed(&report)[0].1.contains(&url), "{report}");
    reviewer.ok(&["remote", "add", "team", &url]);
    let report = reviewer.json(&["audit", "--lineage", "dsv-lineage.json"]);
    assert_eq!(report["proven"], true, "{report}");
    assert_eq!(report["fetched_from"], "team");
    assert_eq!(report["samples_proven"], true);
}
