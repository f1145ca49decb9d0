//! Remote reads through a fault-injecting proxy (`scripts/fault-proxy.py`) in front of moto
//! (issue 25, part 2): transient faults (503, a reset or a cut mid-body, a stall past the
//! request timeout) are retried and the read succeeds; a corrupt or short answer fails the
//! read, naming the remote, stores nothing, and the same read succeeds once the fault is
//! gone. The assertions are on outcomes (exit code, bytes, message, store state, the
//! proxy's counters), never on how many requests a read makes: the read path that fetches
//! a remote-only file's frames may split and coalesce them as it likes.
//!
//! Needs the servers of `scripts/test-servers` (moto) and Python 3 for the proxy: the venv
//! python next to moto, else `python3` on `PATH`; without them the tests fail, as every
//! server test does, rather than pass without having run.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{TestEnv, assert_same_tree, pseudo_random, wait_until};
use crate::remote::{endpoint, unique_prefix};

/// A running `scripts/fault-proxy.py`, forwarding to `upstream`; killed on drop.
struct FaultProxy {
    child: Child,
    port: u16,
}

impl FaultProxy {
    fn start(upstream: &str) -> FaultProxy {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/fault-proxy.py");
        // The venv moto runs in has a python3 for sure; else the one on PATH.
        let venv_python = PathBuf::from(endpoint("DSV_TEST_MOTO_SERVER")).with_file_name("python3");
        let python = if venv_python.exists() {
            venv_python
        } else {
            PathBuf::from("python3")
        };
        let mut child = Command::new(&python)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .arg(&script)
            .arg(upstream)
            .args(["--port", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {} with {}: {e}; the fault tests need Python 3 (scripts/test-servers needs it too)",
                    script.display(),
                    python.display()
                )
            });
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().parse().unwrap_or_else(|_| {
            let _ = child.kill();
            panic!("fault-proxy.py printed {line:?}, not its port")
        });
        FaultProxy { child, port }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// One request to the control endpoint; its JSON answer.
    fn control(&self, method: &str, body: &str) -> Value {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        write!(
            stream,
            "{method} /__faults__ HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.port,
            body.len()
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200"), "{response}");
        serde_json::from_str(body).unwrap()
    }

    /// Replaces the fault rules (see the script's documentation).
    fn set(&self, rules: Value) {
        self.control("POST", &json!({ "rules": rules }).to_string());
    }

    fn clear(&self) {
        self.control("DELETE", "");
    }

    /// How many of rule `index`'s stalls the client hung up on before the stall ended.
    fn abandoned(&self, index: usize) -> u64 {
        self.control("GET", "")["rules"][index]["abandoned"]
            .as_u64()
            .unwrap()
    }

    /// Rule `index`'s counters: (faults injected, matching requests let through).
    fn rule(&self, index: usize) -> (u64, u64) {
        let rule = &self.control("GET", "")["rules"][index];
        (
            rule["injected"].as_u64().unwrap(),
            rule["passed"].as_u64().unwrap(),
        )
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Ranged GETs of pack data (not of `.idx` tails, not listings).
const PACK_RANGES: &str = r"/packs/[0-9a-f]+\.pack$";

/// A dataset pushed straight to moto, and a reader that reaches it through the proxy.
struct Setup {
    writer: TestEnv,
    reader: TestEnv,
    proxy: FaultProxy,
    url: String,
}

/// The files: `big.bin` spans several frames, the others are for the checkout.
fn files() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("big.bin", pseudo_random(6_000_000, 251)),
        ("medium.bin", pseudo_random(1_500_000, 252)),
        ("more/other.bin", pseudo_random(1_200_000, 253)),
        ("more/small.txt", b"small\n".repeat(300)),
    ]
}

impl Setup {
    fn new() -> Setup {
        let writer = TestEnv::new();
        crate::remote::use_s3(&writer);
        for (path, bytes) in files() {
            writer.write(&format!("data/{path}"), bytes);
        }
        writer.ok(&["commit", "data", "-d", "ds"]);
        let url = format!("s3://dsv-test/{}", unique_prefix());
        writer.ok(&["remote", "add", "origin", &url]);
        writer.ok(&["push"]);

        let proxy = FaultProxy::start(&endpoint("DSV_TEST_S3_ENDPOINT"));
        let reader = TestEnv::bare();
        reader.set_var("AWS_ENDPOINT_URL", &proxy.url());
        reader.set_var("AWS_ALLOW_HTTP", "true");
        reader.set_var("AWS_REGION", "us-east-1");
        reader.set_var("AWS_ACCESS_KEY_ID", "test-key-id");
        reader.set_var("AWS_SECRET_ACCESS_KEY", "test-secret");
        Setup {
            writer,
            reader,
            proxy,
            url,
        }
    }

    /// `dsv clone URL DIR` through the proxy, with `--option`s: a store where every file
    /// is on the remote only (each case reads from a fresh clone, so that what an earlier
    /// read fetched, or prefetched, cannot hide a fault).
    fn clone(&self, dir: &str, options: &[&str]) -> Clone<'_> {
        let mut args = vec!["clone", &self.url, dir];
        for option in options {
            args.extend(["--option", option]);
        }
        self.reader.ok(&args);
        Clone {
            env: &self.reader,
            dir: dir.to_string(),
            store: self.reader.path(dir).to_str().unwrap().to_string(),
        }
    }
}

/// A clone made by [`Setup::clone`].
struct Clone<'a> {
    env: &'a TestEnv,
    dir: String,
    store: String,
}

impl Clone<'_> {
    /// `ARGS` run in the clone.
    fn args<'a>(&'a self, args: &[&'a str]) -> Vec<&'a str> {
        let mut full = vec!["--store", self.store.as_str()];
        full.extend_from_slice(args);
        full
    }

    /// `dsv cat ds:PATH`, asserting success and the file's bytes.
    fn cat(&self, path: &str) {
        let spec = format!("ds:{path}");
        let out = self.env.run(&self.args(&["cat", &spec]));
        assert!(
            out.status.success(),
            "cat {spec}: {:?}\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.stdout == expected(path), "cat {spec}: wrong bytes");
    }

    /// `dsv cat ds:PATH`, asserting exit `code` (within two minutes: no hang) and that
    /// whatever it wrote before failing is the file's beginning; its stderr.
    fn cat_fails(&self, path: &str, code: i32) -> String {
        let spec = format!("ds:{path}");
        let out = self
            .env
            .dsv()
            .args(self.args(&["cat", &spec]))
            .timeout(Duration::from_secs(120))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(code), "cat {spec}: {stderr}");
        assert!(
            expected(path).starts_with(&out.stdout),
            "cat {spec} wrote bytes that are not the file's"
        );
        stderr
    }

    /// What a failed read must leave as it was: the pack files and `dsv verify`'s report
    /// (packs, objects, versions, files still on the remote, temporary files, problems).
    fn state(&self) -> (Vec<String>, Value) {
        let packs_dir = self.env.path(&format!("{}/.dsv/packs", self.dir));
        let mut packs: Vec<String> = std::fs::read_dir(packs_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        packs.sort();
        let verified = self.env.json(&self.args(&["verify"]));
        assert_eq!(verified["problems"], json!([]), "{verified}");
        (packs, verified)
    }
}

fn expected(path: &str) -> Vec<u8> {
    files().into_iter().find(|(p, _)| *p == path).unwrap().1
}

/// Asserts the failure names the remote (by name) and is not a panic or a hang.
fn assert_names_origin(stderr: &str) {
    assert!(
        stderr.contains("origin"),
        "the error names the remote: {stderr}"
    );
}

#[test]
fn transient_503s_on_pack_requests_are_retried_by_clone_cat_and_checkout() {
    let setup = Setup::new();
    let proxy = &setup.proxy;
    // Every request under packs/: the clone's `.idx` tails and metadata ranges.
    proxy.set(json!([{ "fault": "status", "status": 503, "path": "/packs/", "times": 3 }]));
    let store = setup.clone("store", &[]);
    let (injected, passed) = proxy.rule(0);
    assert_eq!(injected, 3, "the clone met the 503s");
    assert!(passed >= 1, "and asked again until answered");

    proxy.set(json!([
        { "fault": "status", "status": 503, "path": PACK_RANGES, "ranged": true, "times": 3 }
    ]));
    store.cat("big.bin");
    let (injected, passed) = proxy.rule(0);
    assert_eq!(injected, 3, "cat met the 503s");
    assert!(passed >= 1, "and its ranges were asked for again");

    let other = setup.clone("other", &[]);
    proxy.set(json!([
        { "fault": "status", "status": 500, "path": PACK_RANGES, "ranged": true, "times": 3 }
    ]));
    setup.reader.ok(&other.args(&["checkout", "ds", "out"]));
    assert_same_tree(&setup.writer.path("data"), &setup.reader.path("out"));
    let (injected, passed) = proxy.rule(0);
    assert_eq!(injected, 3, "checkout met the 500s");
    assert!(passed >= 1, "and its ranges were asked for again");
    assert_eq!(other.state().1["files_on_remotes"], 0);
}

#[test]
fn a_reset_or_a_cut_mid_body_is_retried_and_the_read_succeeds() {
    let setup = Setup::new();
    let proxy = &setup.proxy;

    // The connection is reset half-way through the body, twice.
    let store = setup.clone("store", &[]);
    proxy.set(json!([{ "fault": "reset", "path": PACK_RANGES, "ranged": true, "times": 2 }]));
    store.cat("big.bin");
    let (injected, passed) = proxy.rule(0);
    assert_eq!(injected, 2);
    assert!(passed >= 1, "the rest was asked for again");

    // The server closes after half of the declared Content-Length, twice.
    let store = setup.clone("other", &[]);
    proxy.set(json!([{ "fault": "truncate", "path": PACK_RANGES, "ranged": true, "times": 2 }]));
    store.cat("big.bin");
    let (injected, passed) = proxy.rule(0);
    assert_eq!(injected, 2);
    assert!(passed >= 1, "the rest was asked for again");
    store.state();
}

#[test]
fn a_corrupt_pack_range_fails_the_read_stores_nothing_and_the_next_read_succeeds() {
    let setup = Setup::new();
    let proxy = &setup.proxy;
    let store = setup.clone("store", &[]);
    let before = store.state();

    // One byte flipped in the middle of every pack range: no retry can help.
    proxy.set(json!([{ "fault": "corrupt", "path": PACK_RANGES, "ranged": true }]));
    let stderr = store.cat_fails("big.bin", 5);
    assert_names_origin(&stderr);
    assert!(proxy.rule(0).0 >= 1);
    assert_eq!(
        store.state(),
        before,
        "nothing of the corrupt answer was kept"
    );

    proxy.clear();
    store.cat("big.bin");
    assert_ne!(store.state(), before, "the good answer was kept");
}

#[test]
fn a_short_or_truncated_pack_range_fails_the_read_stores_nothing_and_the_next_read_succeeds() {
    let setup = Setup::new();
    let proxy = &setup.proxy;
    // Few retries, so a fault that never goes away fails the read soon.
    let options = ["max_retries=2", "retry_timeout=20s"];

    // A complete answer (its Content-Length says so) of half the bytes asked for.
    let store = setup.clone("store", &options);
    let before = store.state();
    proxy.set(json!([{ "fault": "short", "path": PACK_RANGES, "ranged": true }]));
    let stderr = store.cat_fails("big.bin", 5);
    assert_names_origin(&stderr);
    assert!(proxy.rule(0).0 >= 1);
    assert_eq!(
        store.state(),
        before,
        "nothing of the short answer was kept"
    );
    proxy.clear();
    store.cat("big.bin");

    // Every answer is cut off half-way through its declared length. object_store takes
    // that for a dropped connection and retries, so once the retries are spent it is a
    // network error: exit 6, not the 5 issue 25 names for "a truncated response" (in
    // docs/cli.md, "Exit codes", `Remote` after retries is I/O).
    let store = setup.clone("other", &options);
    let before = store.state();
    proxy.set(json!([{ "fault": "truncate", "path": PACK_RANGES, "ranged": true }]));
    let stderr = store.cat_fails("big.bin", 6);
    assert_names_origin(&stderr);
    let (injected, _) = proxy.rule(0);
    assert!(injected >= 3, "tried, then retried twice: {injected}");
    assert_eq!(store.state(), before, "nothing of the cut answers was kept");
    proxy.clear();
    store.cat("big.bin");
}

#[test]
fn a_stalled_pack_range_is_retried_after_the_timeout_and_never_hangs() {
    let setup = Setup::new();
    let proxy = &setup.proxy;
    // object_store's `timeout` bounds one try, from connecting to the body's last byte.
    let options = ["timeout=2s", "max_retries=2", "retry_timeout=30s"];

    // Headers, then nothing for a minute, once: the try times out (dsv hangs up before the
    // stall ends), the retry is answered.
    let store = setup.clone("store", &options);
    proxy.set(json!([
        { "fault": "stall", "path": PACK_RANGES, "ranged": true, "times": 1, "seconds": 60 }
    ]));
    store.cat("big.bin");
    assert_eq!(proxy.rule(0).0, 1);
    // (The proxy sees the hang-up within a poll of the socket: waited for.)
    wait_until("the stall to be cut short by the timeout", || {
        proxy.abandoned(0) == 1
    });

    // Every answer stalls: the read fails after its retries, naming the remote.
    let store = setup.clone("other", &options);
    let before = store.state();
    proxy.set(json!([
        { "fault": "stall", "path": PACK_RANGES, "ranged": true, "seconds": 60 }
    ]));
    let stderr = store.cat_fails("big.bin", 6);
    // Each try was given up on at its timeout, not waited out: bounded time.
    let (injected, _) = proxy.rule(0);
    assert!(injected >= 1);
    wait_until("every stalled try to be given up on", || {
        proxy.abandoned(0) == injected
    });
    assert_names_origin(&stderr);
    assert_eq!(store.state(), before, "nothing was kept");
    proxy.clear();
    store.cat("big.bin");
}
