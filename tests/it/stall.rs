//! A stalled mirror and the read order of a mirror added after a clone (issue 34, A5, B1
//! and B2). The near copy is a moto S3 server of the test's own, frozen with SIGSTOP (it
//! still accepts connections, as a hung server does, and never answers); the far copy is a
//! `file://` directory.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{TestEnv, assert_same_tree, wait_until};
use crate::nearest::{commit, dataset};
use crate::remote::{endpoint, unique_prefix, use_s3};

/// How long a read may take with the first mirror frozen: well under the 30 s of one
/// `object_store` request timeout (before the fix: about 3 minutes).
const WITHIN: Duration = Duration::from_secs(20);

/// A moto server of the test's own, on a free port: frozen (SIGSTOP) and thawed at will.
struct OwnS3 {
    port: u16,
    log: std::path::PathBuf,
    child: std::process::Child,
}

impl OwnS3 {
    fn start(log: std::path::PathBuf) -> OwnS3 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let file = std::fs::File::create(&log).unwrap();
        let child = std::process::Command::new(endpoint("DSV_TEST_MOTO_SERVER"))
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap();
        wait_until(&format!("moto to start on port {port}"), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        let server = OwnS3 { port, log, child };
        server.create_bucket();
        server
    }

    /// `PUT /dsv-test`, unsigned (moto accepts any credentials, and none).
    fn create_bucket(&self) {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        write!(
            stream,
            "PUT /dsv-test HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.port
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    }

    fn signal(&self, signal: &str) {
        let status = std::process::Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill {signal}");
    }

    /// Freezes the server: connections are still accepted (by the kernel), never answered.
    fn freeze(&self) {
        self.signal("-STOP");
    }

    /// Ranged GETs of pack data the server answered so far.
    fn pack_reads(&self) -> usize {
        std::fs::read_to_string(&self.log)
            .unwrap()
            .lines()
            // (moto colours some lines: the method may follow an escape sequence)
            .filter(|line| line.contains("GET /") && line.contains(".pack HTTP"))
            .count()
    }

    /// Adds it to `env` (store `store`, or the default) as remote `name` at `prefix`.
    fn add(&self, env: &TestEnv, store: &[&str], name: &str, prefix: &str, first: bool) {
        let url = format!("s3://dsv-test/{prefix}");
        let endpoint = format!("aws_endpoint=http://127.0.0.1:{}", self.port);
        let mut args: Vec<&str> = store.to_vec();
        args.extend([
            "remote",
            "add",
            name,
            &url,
            "--option",
            &endpoint,
            "--option",
            "aws_allow_http=true",
        ]);
        if first {
            args.push("--first");
        }
        env.ok(&args);
    }
}

impl Drop for OwnS3 {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-CONT", &self.child.id().to_string()])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A writer whose dataset `ds` is pushed to `near` (moto) and `far` (a directory); the
/// version, near's prefix and far's URL.
fn pushed_to_both(writer: &TestEnv, near: &OwnS3, seed: u64) -> (String, String, String) {
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
/// stderr names the frozen remote and the one that served.
#[test]
fn a_frozen_first_mirror_is_passed_over_in_seconds_and_named() {
    let writer = TestEnv::new();
    let near = OwnS3::start(writer.path("near-moto.log"));
    let (id, prefix, far) = pushed_to_both(&writer, &near, 31);
    let reader = || {
        let reader = TestEnv::new();
        use_s3(&reader);
        reader.ok(&["remote", "add", "far", &far]);
        reader.ok(&["fetch"]);
        near.add(&reader, &[], "near", &prefix, true);
        reader.ok(&["fetch", "--remote", "near"]);
        reader
    };
    let (checkout, cat) = (reader(), reader());
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
            .is_some_and(|e| e.contains("stalled")),
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
        stderr(&out).contains("warning: remote \"near\" failed, read from \"far\" instead"),
        "{}",
        stderr(&out)
    );
}

/// `remote add near URL --first` on a fresh clone from far: the first read asks near (its
/// pack listing is read on first use), with no `dsv fetch --remote near` before.
#[test]
fn a_mirror_added_first_after_a_clone_serves_the_first_read() {
    let writer = TestEnv::new();
    let near = OwnS3::start(writer.path("near-moto.log"));
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
