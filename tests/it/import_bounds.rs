//! `dsv import` of outside input that would fill the disk or hold the import forever: a
//! declared length past the bound, a body longer than it declared (or endless), a server
//! that trickles bytes, a SIGTERM while a read waits, and what an interrupted or refused
//! import leaves behind (nothing). The servers are small `TcpListener` threads on loopback,
//! each misbehaving in one way.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::common::{PATIENCE, SmallDisk, TestEnv, wait_until};

/// How a test server misbehaves.
#[derive(Clone, Copy)]
enum Mode {
    /// No Content-Length; the GET body never ends (pseudo-random, so nothing deduplicates).
    Endless,
    /// HEAD and GET declare 1 PiB; the GET body never ends.
    Huge,
    /// HEAD declares 100,000 bytes; the GET declares nothing and never ends.
    Lying,
    /// HEAD and GET declare 10 MB; the body comes `bytes` at a time every 100 ms.
    Trickle { bytes: usize },
    /// No Content-Length; 80 MB at once (packs are sealed), then a byte every 100 ms.
    BurstThenStall,
}

/// What a test server has done so far: the events a test waits for or checks.
#[derive(Default)]
struct Seen {
    /// GET bodies it began to send.
    bodies: AtomicUsize,
    /// Whether a [`Mode::BurstThenStall`] body has sent its burst and stalls.
    stalled: AtomicBool,
}

/// Starts a server in `mode` on 127.0.0.1 and returns its base URL (`http://127.0.0.1:PORT`).
/// Its threads end when the test process does.
fn serve(mode: Mode) -> String {
    serve_seen(mode).0
}

/// [`serve`], and what the server does.
fn serve_seen(mode: Mode) -> (String, Arc<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Seen::default());
    let server_seen = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let seen = server_seen.clone();
            std::thread::spawn(move || {
                let _ = answer(stream, mode, &seen);
            });
        }
    });
    (format!("http://127.0.0.1:{port}"), seen)
}

/// Answers one connection (one request: every response closes it).
fn answer(stream: TcpStream, mode: Mode, seen: &Seen) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request = String::new();
    reader.read_line(&mut request)?;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" {
            break;
        }
    }
    let head = request.starts_with("HEAD");
    let length = match (mode, head) {
        (Mode::Endless | Mode::BurstThenStall, _) | (Mode::Lying, false) => None,
        (Mode::Huge, _) => Some(1u64 << 50),
        (Mode::Lying, true) => Some(100_000),
        (Mode::Trickle { .. }, _) => Some(10_000_000),
    };
    let mut out = stream;
    let mut headers = String::from("HTTP/1.1 200 OK\r\nConnection: close\r\n");
    if let Some(length) = length {
        headers.push_str(&format!("Content-Length: {length}\r\n"));
    }
    headers.push_str("\r\n");
    out.write_all(headers.as_bytes())?;
    if head {
        return Ok(());
    }
    seen.bodies.fetch_add(1, Ordering::SeqCst);
    match mode {
        Mode::Trickle { bytes } => loop {
            out.write_all(&vec![b'x'; bytes])?;
            out.flush()?;
            std::thread::sleep(Duration::from_millis(100));
        },
        _ => {
            let mut state = 0x9E37_79B9_7F4A_7C15u64;
            let mut block = vec![0u8; 64 * 1024];
            let mut sent = 0;
            loop {
                if matches!(mode, Mode::BurstThenStall) && sent >= 80_000_000 {
                    out.write_all(b"x")?;
                    out.flush()?;
                    seen.stalled.store(true, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
                sent += block.len();
                for word in block.chunks_mut(8) {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    word.copy_from_slice(&state.to_le_bytes());
                }
                out.write_all(&block)?;
            }
        }
    }
}

/// What a run of `dsv` did.
struct Outcome {
    /// The exit code; `None` when it was still running after [`PATIENCE`] (then killed):
    /// it would have run forever.
    code: Option<i32>,
    stdout: String,
    stderr: String,
    /// How long it ran, for the log only: no test asserts a duration.
    elapsed: Duration,
}

/// Runs `dsv ARGS` in `env`; sends it SIGTERM once `term_when` (if given) holds; kills it
/// after [`PATIENCE`].
fn run_bounded(env: &TestEnv, args: &[&str], term_when: Option<&dyn Fn() -> bool>) -> Outcome {
    let start = Instant::now();
    let mut child = env.spawn(args);
    let mut termed = false;
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if let Some(ready) = term_when
            && !termed
            && ready()
        {
            std::process::Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status()
                .unwrap();
            termed = true;
        }
        if start.elapsed() >= PATIENCE {
            child.kill().unwrap();
            child.wait().unwrap();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let elapsed = start.elapsed();
    let output = child.wait_with_output().unwrap();
    Outcome {
        code,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        elapsed,
    }
}

/// The files in `dir` (0 when it does not exist).
fn count(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| d.count())
}

/// Asserts the import left nothing: no dataset, no pack, no temporary file.
fn assert_nothing_left(env: &TestEnv, store: &Path, what: &Outcome) {
    assert_eq!(
        count(&store.join("packs")),
        0,
        "packs left: {}",
        what.stderr
    );
    assert_eq!(
        count(&store.join("tmp")),
        0,
        "tmp files left: {}",
        what.stderr
    );
    let root = store.parent().unwrap().to_str().unwrap();
    let datasets = env.json(&["--store", root, "ls"]);
    assert_eq!(datasets.as_array().unwrap().len(), 0, "{datasets}");
    let verify = env.json(&["--store", root, "verify"]);
    assert_eq!(verify["problems"].as_array().unwrap().len(), 0, "{verify}");
}

#[test]
fn a_declared_length_past_the_bound_is_refused_before_anything_is_read() {
    let env = TestEnv::new();
    let (base, seen) = serve_seen(Mode::Huge);
    let url = format!("{base}/huge.bin");
    // 1 PiB: more than the store's disk holds, so the default bound refuses it, from what
    // HEAD declares: no GET of the body was made.
    let outcome = run_bounded(&env, &["import", &url], None);
    assert_eq!(outcome.code, Some(3), "{}", outcome.stderr);
    assert_eq!(seen.bodies.load(Ordering::SeqCst), 0, "{}", outcome.stderr);
    assert!(
        outcome.stderr.contains("1125899906842624 bytes") && outcome.stderr.contains("--max-bytes"),
        "{}",
        outcome.stderr
    );
    assert_nothing_left(&env, &env.path(".dsv"), &outcome);
    // An explicit bound, --json: the same refusal, as valid JSON.
    let outcome = run_bounded(
        &env,
        &["--json", "import", &url, "--max-bytes", "10MB"],
        None,
    );
    assert_eq!(outcome.code, Some(3), "{}", outcome.stderr);
    let error: serde_json::Value = serde_json::from_str(&outcome.stdout).unwrap();
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("10000000"),
        "{error}"
    );
}

#[test]
fn an_endless_body_is_refused_at_the_bound_and_its_packs_are_deleted() {
    let env = TestEnv::new();
    let url = format!("{}/endless.bin", serve(Mode::Endless));
    // 80 MB: two packs are sealed before the bound is passed; both must go.
    let outcome = run_bounded(
        &env,
        &["import", &url, "--max-bytes", "80MB", "--jobs", "2"],
        None,
    );
    eprintln!("endless body refused after {:?}", outcome.elapsed);
    assert_eq!(outcome.code, Some(3), "{}", outcome.stderr);
    assert!(
        outcome.stderr.contains("80000000") && outcome.stderr.contains("--max-bytes"),
        "{}",
        outcome.stderr
    );
    assert_nothing_left(&env, &env.path(".dsv"), &outcome);
}

#[test]
fn an_endless_body_never_fills_a_small_disk() {
    let env = TestEnv::new();
    let Some((_disk, store)) = SmallDisk::with_store(&env, "96M") else {
        return; // skipped: SmallDisk::mount reported why
    };
    let url = format!("{}/endless.bin", serve(Mode::Endless));
    // No --max-bytes: the bound is what the store's disk can hold.
    let outcome = run_bounded(
        &env,
        &["--store", &store, "import", &url, "--jobs", "2"],
        None,
    );
    assert_eq!(outcome.code, Some(3), "{}", outcome.stderr);
    assert!(
        outcome.stderr.contains("--max-bytes") && outcome.stderr.contains("free"),
        "{}",
        outcome.stderr
    );
    assert_nothing_left(&env, &Path::new(&store).join(".dsv"), &outcome);
}

/// Issue 34, A10: without `--max-bytes`, an endless body that declares no length was held
/// only to the disk's free space less 5%: it could fill a shared disk. Such a body is now
/// held to `--max-undeclared-bytes` (default 10GiB); `--max-bytes` replaces that bound.
#[test]
fn a_body_without_a_length_is_held_to_the_undeclared_bound_by_default() {
    let env = TestEnv::new();
    let url = format!("{}/endless.bin", serve(Mode::Endless));
    let outcome = run_bounded(
        &env,
        &[
            "import",
            &url,
            "--max-undeclared-bytes",
            "40MB",
            "--jobs",
            "2",
        ],
        None,
    );
    assert_eq!(outcome.code, Some(3), "{}", outcome.stderr);
    assert!(
        outcome.stderr.contains("declared no length")
            && outcome.stderr.contains("40000000")
            && outcome.stderr.contains("--max-undeclared-bytes"),
        "{}",
        outcome.stderr
    );
    assert_nothing_left(&env, &env.path(".dsv"), &outcome);
    // An explicit --max-bytes is the bound instead.
    let outcome = run_bounded(
        &env,
        &[
            "import",
            &url,
            "--max-bytes",
            "60MB",
            "--max-undeclared-bytes",
            "40MB",
            "--jobs",
            "2",
        ],
        None,
    );
    assert_eq!(outcome.code, Some(3), "{}", outcome.stderr);
    assert!(
        outcome.stderr.contains("60000000") && !outcome.stderr.contains("declared no length"),
        "{}",
        outcome.stderr
    );
    // The default, as the library and the CLI state it.
    assert_eq!(
        dsv::ops::import::SourceSettings::default().max_undeclared_bytes,
        10 << 30
    );
    let help = env.ok(&["import", "--help"]);
    assert!(
        help.contains("--max-undeclared-bytes") && help.contains("10GiB"),
        "{help}"
    );
}

#[test]
fn a_body_longer_than_its_declared_length_is_refused() {
    let env = TestEnv::new();
    let url = format!("{}/lying.bin", serve(Mode::Lying));
    let outcome = run_bounded(&env, &["import", &url], None);
    assert_eq!(outcome.code, Some(3), "{}", outcome.stderr);
    assert!(outcome.stderr.contains("100000"), "{}", outcome.stderr);
    assert_nothing_left(&env, &env.path(".dsv"), &outcome);
}

#[test]
fn a_trickling_server_fails_at_the_stall_timeout_or_the_deadline() {
    let env = TestEnv::new();
    // One byte each 100 ms: under 1 KiB in any second.
    let url = format!("{}/slow.bin", serve(Mode::Trickle { bytes: 1 }));
    let outcome = run_bounded(&env, &["import", &url, "--stall-timeout", "1s"], None);
    eprintln!("trickle refused after {:?}", outcome.elapsed);
    // Exit 6 naming the option: the stall timeout ended it (10 MB at 10 bytes a second
    // would outlast PATIENCE).
    assert_eq!(outcome.code, Some(6), "{}", outcome.stderr);
    assert!(
        outcome.stderr.contains("--stall-timeout"),
        "{}",
        outcome.stderr
    );
    assert_nothing_left(&env, &env.path(".dsv"), &outcome);
    // 4 KiB each 100 ms is no stall (in any 2 s), but the whole import has 1 s.
    let url = format!("{}/slow.bin", serve(Mode::Trickle { bytes: 4096 }));
    let outcome = run_bounded(
        &env,
        &["import", &url, "--stall-timeout", "2s", "--timeout", "1s"],
        None,
    );
    // The deadline ended it (10 MB at 40 KB/s takes 250 s, past PATIENCE).
    assert_eq!(outcome.code, Some(6), "{}", outcome.stderr);
    assert!(outcome.stderr.contains("--timeout"), "{}", outcome.stderr);
    assert_nothing_left(&env, &env.path(".dsv"), &outcome);
}

#[test]
fn one_sigterm_stops_an_import_waiting_on_a_stalled_server() {
    let env = TestEnv::new();
    // A plain file (read on a worker thread) and a tar (read ahead on a thread of its own).
    for name in ["slow.bin", "slow.tar"] {
        let (base, seen) = serve_seen(Mode::Trickle { bytes: 1 });
        let url = format!("{base}/{name}");
        // SIGTERM once the body trickles: the import waits on the read. Exit 130 well within
        // the test's patience, with a stall timeout of an hour: only the stop can end it, not
        // a stall timeout noticed late and reported as an interruption.
        let trickling = || seen.bodies.load(Ordering::SeqCst) > 0;
        let outcome = run_bounded(
            &env,
            &["import", &url, "--stall-timeout", "1h"],
            Some(&trickling),
        );
        eprintln!("{name}: stopped {:?} after start", outcome.elapsed);
        assert_eq!(outcome.code, Some(130), "{name}: {}", outcome.stderr);
        assert!(outcome.stderr.contains("interrupted"), "{}", outcome.stderr);
        assert_nothing_left(&env, &env.path(".dsv"), &outcome);
    }
}

#[test]
fn an_interrupted_import_deletes_the_packs_it_sealed() {
    // Interrupted while bytes flow, and while the server stalls after packs were sealed.
    for mode in [Mode::Endless, Mode::BurstThenStall] {
        interrupt_after_a_sealed_pack(mode);
    }
}

fn interrupt_after_a_sealed_pack(mode: Mode) {
    let env = TestEnv::new();
    let (base, seen) = serve_seen(mode);
    let url = format!("{base}/endless.bin");
    let packs = env.path(".dsv/packs");
    let mut child = env.spawn(&["import", &url, "--jobs", "2"]);
    // Wait for a sealed pack (and for the burst to end: the server stalls), then SIGTERM once.
    wait_until("a sealed pack", || {
        assert!(child.try_wait().unwrap().is_none(), "the import ended");
        count(&packs) >= 2
    });
    if matches!(mode, Mode::BurstThenStall) {
        wait_until("the server to stall", || {
            seen.stalled.load(Ordering::SeqCst)
        });
    }
    let term = Instant::now();
    std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if term.elapsed() > PATIENCE {
            child.kill().unwrap();
            panic!("one SIGTERM did not stop the import");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let output = child.wait_with_output().unwrap();
    let outcome = Outcome {
        code,
        stdout: String::new(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        elapsed: term.elapsed(),
    };
    eprintln!("stopped {:?} after SIGTERM", outcome.elapsed);
    assert_eq!(outcome.code, Some(130), "{}", outcome.stderr);
    assert_nothing_left(&env, &env.path(".dsv"), &outcome);
}

/// Uploads `objects` (key, bytes) to moto's `dsv-test` bucket and points `env` at it.
fn upload(env: &TestEnv, objects: &[(String, Vec<u8>)]) {
    crate::remote::use_s3(env);
    let store = object_store::aws::AmazonS3Builder::new()
        .with_endpoint(crate::remote::endpoint("DSV_TEST_S3_ENDPOINT"))
        .with_allow_http(true)
        .with_bucket_name("dsv-test")
        .with_access_key_id("test-key-id")
        .with_secret_access_key("test-secret-never-stored")
        .with_region("us-east-1")
        .build()
        .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for (key, bytes) in objects {
        runtime
            .block_on(object_store::ObjectStoreExt::put(
                &store,
                &object_store::path::Path::from(key.as_str()),
                bytes.clone().into(),
            ))
            .unwrap();
    }
}

#[test]
fn the_bound_holds_for_object_storage_local_files_and_archives() {
    let env = TestEnv::new();
    let store = env.path(".dsv");
    // Object storage: the listed sizes of a prefix add up past the bound; nothing is read.
    let prefix = crate::remote::unique_prefix();
    let objects: Vec<(String, Vec<u8>)> = (0..3u64)
        .map(|i| {
            (
                format!("{prefix}/f{i}.bin"),
                crate::common::pseudo_random(50_000, 7 + i),
            )
        })
        .collect();
    upload(&env, &objects);
    let url = format!("s3://dsv-test/{prefix}/");
    let refused = run_bounded(&env, &["import", &url, "--max-bytes", "100KB"], None);
    assert_eq!(refused.code, Some(3), "{}", refused.stderr);
    assert!(
        refused.stderr.contains("declares 150000 bytes"),
        "{}",
        refused.stderr
    );
    assert_nothing_left(&env, &store, &refused);
    // Within the bound (and with the default one) it imports.
    env.ok(&["import", &url, "--max-bytes", "150KB", "-d", "s3"]);
    let single = format!("s3://dsv-test/{prefix}/f0.bin");
    env.ok(&["import", &single, "-d", "one"]);
    // A local device has no size to hold its reads to.
    let device = run_bounded(&env, &["import", "/dev/urandom"], None);
    assert_eq!(device.code, Some(3), "{}", device.stderr);
    assert!(
        device.stderr.contains("not a regular file"),
        "{}",
        device.stderr
    );
    // An archive that expands past the bound (its compressed size is within it).
    let mut tar = tar::Builder::new(Vec::new());
    let zeros = vec![0u8; 300_000];
    let mut header = tar::Header::new_gnu();
    header.set_size(zeros.len() as u64);
    header.set_mode(0o644);
    tar.append_data(&mut header, "zeros.bin", zeros.as_slice())
        .unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&tar.into_inner().unwrap()).unwrap();
    crate::common::write_file(&env.path("zeros.tar.gz"), &gz.finish().unwrap());
    let bomb = run_bounded(
        &env,
        &["import", "zeros.tar.gz", "--max-bytes", "100KB"],
        None,
    );
    assert_eq!(bomb.code, Some(3), "{}", bomb.stderr);
    assert!(
        bomb.stderr
            .contains("expands to more than 100000 bytes, the import's bound"),
        "{}",
        bomb.stderr
    );
}
