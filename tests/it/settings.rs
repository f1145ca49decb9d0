//! Settings from files: the store's own (`dsv config`, `.dsv/config.toml`) and the AWS
//! profile files as the AWS CLI reads them (`AWS_PROFILE`, `~/.aws/config`,
//! `~/.aws/credentials`), against moto (started by `scripts/test-servers`).

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::common::{TestEnv, assert_same_tree, pseudo_random};
use crate::remote::{endpoint, unique_prefix};

/// Runs `dsv --json ARGS` expecting exit `code`; returns stdout parsed.
fn json_exit(env: &TestEnv, args: &[&str], code: i32) -> Value {
    let mut full = vec!["--json"];
    full.extend_from_slice(args);
    let out = env.run(&full);
    assert_eq!(
        out.status.code(),
        Some(code),
        "dsv {args:?}\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON output")
}

#[test]
fn config_set_get_list_unset_round_trip_through_the_file() {
    let env = TestEnv::new();
    assert_eq!(env.json(&["config", "list"])["settings"], json!({}));
    // Not set: exit 1 and a null value, as `git config --get`.
    let got = json_exit(&env, &["config", "get", "core.jobs"], 1);
    assert_eq!(got, json!({"key": "core.jobs", "value": null}));
    let out = env.run(&["config", "get", "core.jobs"]);
    assert_eq!((out.status.code(), out.stdout.len()), (Some(1), 0));

    let set = env.json(&["config", "set", "core.compression_level", "12"]);
    assert_eq!(
        set,
        json!({"key": "core.compression_level", "value": 12, "previous": null})
    );
    env.json(&["config", "set", "core.jobs", "3"]);
    let set = env.json(&["config", "set", "core.jobs", "2"]);
    assert_eq!(set["previous"], 2 + 1);
    assert_eq!(env.ok(&["config", "get", "core.jobs"]), "2\n");
    let listed = env.json(&["config", "list"]);
    assert_eq!(
        listed["settings"],
        json!({"core.compression_level": 12, "core.jobs": 2})
    );
    assert_eq!(
        listed["path"],
        env.path(".dsv/config.toml")
            .canonicalize()
            .unwrap()
            .to_str()
            .unwrap()
    );
    // The file is plain TOML a person can read and edit.
    let text = std::fs::read_to_string(env.path(".dsv/config.toml")).unwrap();
    assert!(
        text.contains("[core]\ncompression_level = 12\njobs = 2\n"),
        "{text}"
    );

    let unset = env.json(&["config", "unset", "core.jobs"]);
    assert_eq!(unset, json!({"key": "core.jobs", "previous": 2}));
    let unset = env.json(&["config", "unset", "core.jobs"]);
    assert_eq!(unset["previous"], Value::Null);
    assert_eq!(
        env.json(&["config", "list"])["settings"],
        json!({"core.compression_level": 12})
    );

    // Bad keys and values: exit 3, the file unchanged.
    let error = env.json_error(&["config", "set", "core.compresion_level", "3"], 3);
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("core.compression_level, core.jobs, core.deltas, remote.default"),
        "{error}"
    );
    env.json_error(&["config", "set", "core.compression_level", "20"], 3);
    env.json_error(&["config", "set", "core.deltas", "no"], 3);
    env.json_error(&["config", "set", "core.jobs", "0"], 3);
    env.json_error(&["config", "set", "core.jobs", "many"], 3);
    let error = env.json_error(&["config", "set", "remote.default", "nowhere"], 3);
    assert!(
        error["message"].as_str().unwrap().contains("nowhere"),
        "{error}"
    );
    assert_eq!(
        env.json(&["config", "list"])["settings"],
        json!({"core.compression_level": 12})
    );
}

/// Text that zstd level 19 packs noticeably tighter than level 1.
fn compressible(env: &TestEnv, dir: &str) {
    let mut text = String::new();
    for i in 0..60_000u64 {
        text.push_str(&format!(
            "{i},{},{},label-{}\n",
            i * 7919 % 10007,
            (i * i) % 977,
            i % 13
        ));
    }
    env.write(&format!("{dir}/table.csv"), text);
}

fn stored_bytes(report: &Value) -> u64 {
    report["stored_bytes"]
        .as_u64()
        .unwrap_or_else(|| panic!("no stored_bytes in {report}"))
}

#[test]
fn the_compression_setting_is_the_default_below_the_flag() {
    let fast = TestEnv::new();
    compressible(&fast, "data");
    let level1 =
        stored_bytes(&fast.json(&["commit", "data", "-d", "t", "--compression-level", "1"]));

    let tight = TestEnv::new();
    compressible(&tight, "data");
    tight.ok(&["config", "set", "core.compression_level", "19"]);
    let level19 = stored_bytes(&tight.json(&["commit", "data", "-d", "t"]));
    assert!(
        level19 < level1,
        "level 19: {level19} B, level 1: {level1} B"
    );

    // The flag wins over the setting: the same bytes as level 1 elsewhere.
    let flagged = TestEnv::new();
    compressible(&flagged, "data");
    flagged.ok(&["config", "set", "core.compression_level", "19"]);
    let by_flag =
        stored_bytes(&flagged.json(&["commit", "data", "-d", "t", "--compression-level", "1"]));
    assert_eq!(by_flag, level1);

    // import reads it too, below its flag.
    let import = |flag: Option<&str>| {
        let env = TestEnv::new();
        compressible(&env, "data");
        env.ok(&["config", "set", "core.compression_level", "19"]);
        let mut args = vec!["import", "data", "-d", "t"];
        if let Some(level) = flag {
            args.extend(["--compression-level", level]);
        }
        stored_bytes(&env.json(&args))
    };
    let (by_setting, by_flag) = (import(None), import(Some("1")));
    assert!(
        by_setting < by_flag,
        "setting 19: {by_setting} B, flag 1: {by_flag} B"
    );
}

#[test]
fn a_broken_settings_file_is_an_error_naming_the_file_and_line() {
    let env = TestEnv::new();
    env.write("data/a.txt", "a\n");
    env.write(
        ".dsv/config.toml",
        "[core]\njobs = 4\ncompresion_level = 3\n",
    );
    let error = env.json_error(&["commit", "data", "-d", "d"], 3);
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains(".dsv/config.toml, line 3") && message.contains("compresion_level"),
        "{error}"
    );
    // Every command that takes its defaults from the file says so; nothing was committed.
    env.write(".dsv/config.toml", "[core]\njobs = 0\n");
    let error = env.json_error(&["status", "data"], 3);
    assert!(
        error["message"].as_str().unwrap().contains("line 2"),
        "{error}"
    );
    env.write(".dsv/config.toml", "");
    assert_eq!(env.json(&["ls"]), json!([]));
    env.ok(&["commit", "data", "-d", "d"]);
}

#[test]
fn the_default_remote_setting_picks_the_remote_of_push_pull_and_fetch() {
    let remotes = TestEnv::bare();
    let env = TestEnv::new();
    env.write("data/a.txt", "alpha\n");
    env.ok(&["commit", "data", "-d", "ds"]);
    for name in ["a", "b"] {
        let url = format!("file://{}/{name}", remotes.root().display());
        env.ok(&["remote", "add", name, &url]);
    }
    // Two remotes, neither called origin: ambiguous without a setting.
    env.json_error(&["push"], 3);
    env.ok(&["config", "set", "remote.default", "b"]);
    let pushed = env.json(&["push"]);
    assert_eq!(pushed["refs"][0]["status"], "created", "{pushed}");
    assert!(remotes.path("b/refs/heads/ds").is_file());
    assert!(!remotes.path("a/refs/heads/ds").exists());
    // --remote wins over the setting.
    env.json(&["push", "--remote", "a"]);
    assert!(remotes.path("a/refs/heads/ds").is_file());
    // fetch and pull use it as well: a setting naming a remote that is gone fails them.
    env.ok(&["fetch"]);
    env.ok(&["remote", "rm", "b"]);
    let error = env.json_error(&["fetch"], 3);
    assert!(
        error["message"].as_str().unwrap().contains("\"b\""),
        "{error}"
    );
    env.json_error(&["pull", "ds"], 3);
    env.ok(&["config", "unset", "remote.default"]);
    // One remote left: it is the default again.
    env.ok(&["pull", "ds"]);
}

/// Writes `~/.aws/config` and `~/.aws/credentials` (under the test's HOME) with a profile
/// `name` holding `key_id`, `secret`, `region` and `endpoint`.
fn write_profile(
    env: &TestEnv,
    name: &str,
    key_id: &str,
    secret: &str,
    region: &str,
    endpoint: &str,
) {
    env.write(
        ".aws/config",
        format!(
            "[default]\nregion = us-east-2\n\n# the moto profile\n[profile {name}]\nregion = {region}\nendpoint_url = {endpoint}\ns3 =\n  addressing_style = path\n"
        ),
    );
    env.write(
        ".aws/credentials",
        format!("[{name}]\naws_access_key_id = {key_id}\naws_secret_access_key = {secret}\n"),
    );
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn an_aws_profile_file_reaches_moto_without_aws_variables() {
    const SECRET: &str = "profile-secret-never-stored";
    let moto = endpoint("DSV_TEST_S3_ENDPOINT");
    // No AWS_* variable at all: endpoint, region and keys come from the profile only
    // (without its endpoint_url, dsv would try the real AWS and fail).
    let a = TestEnv::new();
    write_profile(&a, "moto", "AKIAPROFILE", SECRET, "us-east-1", &moto);
    a.set_var("AWS_PROFILE", "moto");
    a.write("data/big.bin", pseudo_random(400_000, 3));
    a.write("data/notes.txt", "from a profile\n");
    a.ok(&["commit", "data", "-d", "ds", "-t", "v1"]);
    let url = format!("s3://dsv-test/{}", unique_prefix());
    a.ok(&["remote", "add", "origin", &url]);
    let pushed = a.json(&["push"]);
    assert_eq!(pushed["refs"][0]["status"], "created", "{pushed}");
    // A second push moves a ref: a signed overwrite, which moto refuses unsigned.
    a.write("data/notes.txt", "edited\n");
    a.ok(&["commit", "data", "-d", "ds"]);
    let pushed = a.json(&["push"]);
    assert_eq!(pushed["refs"][0]["status"], "updated", "{pushed}");

    let b = TestEnv::bare();
    write_profile(&b, "moto", "AKIAPROFILE", SECRET, "us-east-1", &moto);
    b.set_var("AWS_PROFILE", "moto");
    b.ok(&["clone", &url, "store"]);
    b.ok(&["--store", "store", "checkout", "ds", "out"]);
    assert_same_tree(&a.path("data"), &b.path("out"));

    // The profile's secret is nowhere in either store.
    for store in [a.path(".dsv"), b.path("store/.dsv")] {
        for entry in walkdir::WalkDir::new(&store) {
            let entry = entry.unwrap();
            if entry.file_type().is_file() {
                let bytes = std::fs::read(entry.path()).unwrap();
                assert!(
                    !contains(&bytes, SECRET.as_bytes()),
                    "{}",
                    entry.path().display()
                );
            }
        }
    }
}

#[test]
fn a_missing_aws_profile_is_an_error_naming_it_and_the_files() {
    let env = TestEnv::new();
    env.write(".aws/config", "[profile other]\nregion = us-east-1\n");
    env.set_var("AWS_PROFILE", "nope");
    let error = env.json_error(&["remote", "add", "origin", "s3://dsv-test/x"], 3);
    let message = error["message"].as_str().unwrap();
    let config = env.path(".aws/config");
    let credentials = env.path(".aws/credentials");
    assert!(message.contains("\"nope\""), "{error}");
    assert!(message.contains(config.to_str().unwrap()), "{error}");
    assert!(
        message.contains(&format!("{} (not found)", credentials.display())),
        "{error}"
    );
    assert!(
        error["hints"][0]
            .as_str()
            .unwrap()
            .contains("[profile nope]"),
        "{error}"
    );
    // Nothing was added.
    assert_eq!(env.json(&["remote", "ls"]), json!([]));
    // AWS_CONFIG_FILE points elsewhere, where the profile is.
    env.write(
        "elsewhere/aws-config",
        "[profile nope]\nregion = us-east-1\n",
    );
    env.set_var(
        "AWS_CONFIG_FILE",
        env.path("elsewhere/aws-config").to_str().unwrap(),
    );
    env.ok(&["remote", "add", "origin", "s3://dsv-test/x", "--no-check"]);
}

/// A server on loopback that answers every request with 403 and keeps each request's head,
/// to see which key id, region and endpoint a client used. It serves at most 16
/// connections, then stops.
struct Recorder {
    port: u16,
    heads: Arc<Mutex<Vec<String>>>,
}

impl Recorder {
    fn start() -> Recorder {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let heads = Arc::new(Mutex::new(Vec::new()));
        let kept = heads.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().take(16) {
                let Ok(mut stream) = stream else { continue };
                let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(5)));
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && head.len() < 64 * 1024 {
                    match stream.read(&mut byte) {
                        Ok(1) => head.push(byte[0]),
                        _ => break,
                    }
                }
                kept.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&head).into_owned());
                let body = "<Error><Code>AccessDenied</Code><Message>recorded</Message></Error>";
                let _ = write!(
                    stream,
                    "HTTP/1.1 403 Forbidden\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        Recorder { port, heads }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The Authorization header of the last request, lower-cased.
    fn last_authorization(&self) -> String {
        let heads = self.heads.lock().unwrap();
        let head = heads.last().expect("no request arrived");
        head.lines()
            .find(|l| l.to_ascii_lowercase().starts_with("authorization:"))
            .unwrap_or_else(|| panic!("unsigned request: {head}"))
            .to_ascii_lowercase()
    }
}

#[test]
fn environment_variables_win_over_the_profile_as_for_the_aws_cli() {
    let by_profile = Recorder::start();
    let env = TestEnv::new();
    write_profile(
        &env,
        "p",
        "AKIAPROFILEKEY",
        "profile-secret",
        "eu-west-3",
        &by_profile.url(),
    );
    env.set_var("AWS_PROFILE", "p");
    env.ok(&[
        "remote",
        "add",
        "origin",
        "s3://dsv-test/recorded",
        "--no-check",
    ]);
    env.json_error(&["fetch"], 3);
    let auth = by_profile.last_authorization();
    assert!(
        auth.contains("credential=akiaprofilekey/") && auth.contains("/eu-west-3/s3/"),
        "{auth}"
    );

    // The environment's key, region and endpoint win, each on its own.
    let by_env = Recorder::start();
    env.set_var("AWS_ACCESS_KEY_ID", "AKIAENVKEY");
    env.set_var("AWS_SECRET_ACCESS_KEY", "env-secret");
    env.set_var("AWS_REGION", "ap-southeast-2");
    env.json_error(&["fetch"], 3);
    let auth = by_profile.last_authorization();
    assert!(
        auth.contains("credential=akiaenvkey/") && auth.contains("/ap-southeast-2/s3/"),
        "{auth}"
    );
    env.set_var("AWS_ENDPOINT_URL", &by_env.url());
    env.set_var("AWS_ALLOW_HTTP", "true");
    let before = by_profile.heads.lock().unwrap().len();
    env.json_error(&["fetch"], 3);
    assert!(
        by_env
            .last_authorization()
            .contains("credential=akiaenvkey/")
    );
    assert_eq!(by_profile.heads.lock().unwrap().len(), before);

    // Without AWS_PROFILE, the default profile applies (its region, no endpoint, no keys):
    // the environment's endpoint and keys with the default profile's region.
    let env = TestEnv::new();
    write_profile(
        &env,
        "p",
        "AKIAPROFILEKEY",
        "profile-secret",
        "eu-west-3",
        &by_profile.url(),
    );
    env.set_var("AWS_ENDPOINT_URL", &by_env.url());
    env.set_var("AWS_ALLOW_HTTP", "true");
    env.set_var("AWS_ACCESS_KEY_ID", "AKIAENVKEY");
    env.set_var("AWS_SECRET_ACCESS_KEY", "env-secret");
    env.ok(&[
        "remote",
        "add",
        "origin",
        "s3://dsv-test/recorded",
        "--no-check",
    ]);
    env.json_error(&["fetch"], 3);
    assert!(by_env.last_authorization().contains("/us-east-2/s3/"));
}
