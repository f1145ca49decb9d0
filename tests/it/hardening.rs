//! Findings of a security review, each reproduced here: paths SQLite reads as URIs, store
//! directories used as workspaces or clone targets, `--jobs` without a bound, and
//! credentials kept in options, sources and provenance.

use crate::common::{TestEnv, files_holding};

/// The dataset names a store lists.
fn datasets(env: &TestEnv, store: &str) -> Vec<String> {
    env.json(&["--store", store, "ls"])
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_store_directory_named_file_colon_is_a_plain_directory() {
    let env = TestEnv::bare();
    env.write("data/a.txt", "a");
    env.ok(&["init", "x"]);
    env.ok(&["--store", "x", "commit", "data", "-d", "original"]);
    // SQLite would read "file:x/.dsv/catalog.db" as a URI naming x/.dsv/catalog.db.
    env.ok(&["init", "file:x"]);
    assert!(env.path("file:x/.dsv/catalog.db").is_file());
    env.ok(&["--store", "file:x", "commit", "data", "-d", "other"]);
    assert_eq!(datasets(&env, "x"), ["original"]);
    assert_eq!(datasets(&env, "file:x"), ["other"]);
    // `clone URL file:y` next to a store y creates its own store too.
    let remote = env.path("remote");
    let url = format!("file://{}", remote.display());
    env.ok(&["--store", "x", "remote", "add", "origin", &url]);
    env.ok(&["--store", "x", "push"]);
    env.ok(&["init", "y"]);
    env.ok(&["clone", &url, "file:y"]);
    assert!(env.path("file:y/.dsv/catalog.db").is_file());
    assert_eq!(datasets(&env, "file:y"), ["original"]);
    assert!(datasets(&env, "y").is_empty());
}

#[test]
fn jobs_outside_1_to_256_are_usage_errors_for_every_command() {
    let env = TestEnv::new();
    env.write("data/a.txt", "a");
    let commands: [&[&str]; 10] = [
        &["commit", "data", "-d", "ds"],
        &["checkout", "ds", "out"],
        &["status", "data"],
        &["audit", "data"],
        &["import", "data"],
        &["update", "ds"],
        &["push"],
        &["pull", "ds"],
        &["fetch"],
        &["clone", "file:///nowhere", "c"],
    ];
    for command in commands {
        for jobs in ["0", "257", "50000", "18446744073709551615"] {
            let mut args = command.to_vec();
            args.extend(["--jobs", jobs]);
            let stderr = env.fails(&args, 2);
            assert!(stderr.contains("1..=256"), "{args:?}: {stderr}");
        }
    }
    assert!(!env.path("c").exists());
    env.ok(&["commit", "data", "-d", "ds", "-j", "256"]);
    env.ok(&["checkout", "ds", "out", "-j", "256"]);
    assert_eq!(std::fs::read(env.path("out/a.txt")).unwrap(), b"a");
}

#[test]
fn the_library_clamps_any_job_count() {
    use dsv::ops::checkout::{CheckoutOptions, checkout};
    use dsv::ops::commit::{CommitOptions, commit};
    use dsv::progress::NoProgress;

    let env = TestEnv::new();
    for i in 0..20 {
        env.write(&format!("data/{i}.txt"), format!("file {i}"));
    }
    let mut store = dsv::Store::open(&env.path(".dsv")).unwrap();
    let mut options = CommitOptions::new("ds");
    options.ingest.jobs = usize::MAX;
    commit(&mut store, &env.path("data"), &options, &NoProgress).unwrap();
    let revision = dsv::Revision::parse("ds").unwrap();
    let mut options = CheckoutOptions::default();
    options.jobs = usize::MAX;
    checkout(
        &mut store,
        &revision,
        &env.path("out"),
        &options,
        &NoProgress,
    )
    .unwrap();
    assert_eq!(std::fs::read(env.path("out/7.txt")).unwrap(), b"file 7");
}

#[test]
fn credentials_in_an_import_url_are_never_recorded_or_pushed() {
    use crate::remote::{endpoint, unique_prefix};
    let env = TestEnv::new();
    let base = endpoint("DSV_TEST_HTTP_URL");
    let prefix = unique_prefix();
    let root = std::path::Path::new(&endpoint("DSV_TEST_HTTP_ROOT")).join(&prefix);
    crate::common::write_file(&root.join("labels.csv"), b"id,label\n1,cat\n");
    let secrets = [
        "hunter2pw",
        "SIGSECRET0123",
        "TOKSECRET0123",
        "CREDSECRET0123",
        "AZSIGSECRET",
        "GOOGSECRET0123",
    ];
    let public = format!("{base}/{prefix}/labels.csv");
    let (scheme, host) = public.split_once("://").unwrap();
    let url = format!(
        "{scheme}://reader:hunter2pw@{host}?X-Amz-Algorithm=AWS4-HMAC-SHA256\
         &X-Amz-Credential=CREDSECRET0123&X-Amz-Security-Token=TOKSECRET0123\
         &X-Amz-Signature=SIGSECRET0123&sig=AZSIGSECRET&X-Goog-Signature=GOOGSECRET0123&v=2"
    );
    let report = env.json(&["import", &url, "-d", "labels"]);
    assert_eq!(report["redacted_url"], true, "{report}");
    let recorded = format!("{public}?X-Amz-Algorithm=AWS4-HMAC-SHA256&v=2");
    assert_eq!(report["source"], recorded.as_str(), "{report}");
    let show = env.json(&["show", "labels", "--provenance"]);
    assert_eq!(
        show["provenance"]["files"][0]["url"],
        recorded.as_str(),
        "{show}"
    );
    // Human output says so on stderr.
    let out = env.run(&["import", &url, "-d", "labels2"]);
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("credentials"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A public URL still updates (nothing changed).
    assert_eq!(env.json(&["update", "labels"])["created"], false);
    let remote = env.path("remote");
    env.ok(&[
        "remote",
        "add",
        "origin",
        &format!("file://{}", remote.display()),
    ]);
    env.ok(&["push"]);
    let text = format!(
        "{}{}",
        env.ok(&["--json", "log", "labels"]),
        env.ok(&["--json", "show", "labels2", "--provenance"])
    );
    for secret in secrets {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
    assert_eq!(
        files_holding(&env.path(".dsv"), &secrets),
        Vec::<String>::new()
    );
    assert_eq!(files_holding(&remote, &secrets), Vec::<String>::new());
    // A plain public URL is recorded as given.
    let plain = env.json(&["import", &public, "-d", "plain"]);
    assert_eq!(plain["redacted_url"], false);
    assert_eq!(plain["source"], public.as_str());
}

#[test]
fn credentials_in_options_and_remote_urls_are_refused_under_every_alias() {
    let env = TestEnv::new();
    for option in [
        "master_key=abc",
        "azure_storage_master_key=abc",
        "aws_sse_customer_key_base64=abc",
        "aws_endpoint=http://user:pw@127.0.0.1:9",
        "proxy_url=http://user:pw@proxy:3128",
    ] {
        let error = env.json_error(
            &["remote", "add", "o", "s3://bucket/p", "--option", option],
            3,
        );
        assert!(
            error["message"].as_str().unwrap().contains("credentials"),
            "{option}: {error}"
        );
        env.json_error(&["import", "s3://bucket/key", "--option", option], 3);
        env.json_error(&["clone", "s3://bucket/p", "c", "--option", option], 3);
    }
    env.json_error(&["remote", "add", "o", "s3://user:pw@bucket/p"], 3);
    assert!(env.json(&["remote", "ls"]).as_array().unwrap().is_empty());
    assert!(!env.path("c").exists());
}

#[test]
fn clone_without_dir_never_lands_in_the_current_or_parent_directory() {
    let env = TestEnv::bare();
    env.write("data/a.txt", "a");
    env.ok(&["init", "src"]);
    env.ok(&["--store", "src", "commit", "data", "-d", "ds"]);
    let remote = env.path("remote");
    std::fs::create_dir_all(remote.join("sub")).unwrap();
    let url = format!("file://{}", remote.display());
    env.ok(&["--store", "src", "remote", "add", "origin", &url]);
    env.ok(&["--store", "src", "push"]);
    std::fs::create_dir_all(env.path("work/inner")).unwrap();
    for bad in [
        format!("{url}/sub/.."),
        format!("{url}/."),
        format!("{url}/sub/../"),
    ] {
        let out = env
            .dsv()
            .current_dir(env.path("work/inner"))
            .args(["clone", &bad])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(3), "{bad}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("DIR"),
            "{out:?}"
        );
    }
    assert!(!env.path("work/.dsv").exists());
    assert!(!env.path("work/inner/.dsv").exists());
    // A clone into a store's .dsv is refused too.
    env.fails(&["clone", &url, "src/.dsv/packs/c"], 3);
    assert!(!env.path("src/.dsv/packs/c").exists());
    // A name from the URL still works.
    let out = env
        .dsv()
        .current_dir(env.path("work"))
        .args(["clone", &url])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(env.path("work/remote/.dsv/catalog.db").is_file());
}

#[test]
fn no_workspace_lies_inside_a_store_directory() {
    let env = TestEnv::new();
    env.write("data/a.txt", "a");
    env.ok(&["commit", "data", "-d", "ds"]);
    let packs_before: Vec<_> = std::fs::read_dir(env.path(".dsv/packs"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    for dir in [".dsv/packs", ".dsv", ".dsv/new/dir", "data/../.dsv/tmp"] {
        let stderr = env.fails(&["checkout", "ds", dir], 3);
        assert!(stderr.contains(".dsv"), "{dir}: {stderr}");
    }
    assert!(!env.path(".dsv/new").exists());
    std::os::unix::fs::symlink(".dsv/packs", env.path("link")).unwrap();
    env.fails(&["checkout", "ds", "link"], 3);
    env.fails(&["checkout", "ds", "link/sub"], 3);
    env.fails(&["commit", ".dsv/packs", "-d", "packs"], 3);
    env.fails(&["commit", "link", "-d", "packs"], 3);
    env.fails(&["audit", ".dsv/packs", "--against", "ds"], 3);
    env.fails(&["status", ".dsv"], 3);
    let packs_after: Vec<_> = std::fs::read_dir(env.path(".dsv/packs"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(packs_before, packs_after);
    assert_eq!(datasets(&env, ".dsv"), ["ds"]);
    env.ok(&["verify"]);
    // The store's parent is the normal place for a checkout.
    env.ok(&["checkout", "ds", "."]);
    assert_eq!(std::fs::read(env.path("a.txt")).unwrap(), b"a");
}

/// A tar with one file member `name`.
fn tar_with(name: &str) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut ok = tar::Header::new_gnu();
    ok.set_size(4);
    ok.set_mode(0o644);
    builder
        .append_data(&mut ok, "ok.txt", &b"fine"[..])
        .unwrap();
    let mut header = tar::Header::new_gnu();
    header.set_size(1);
    header.set_mode(0o644);
    header.set_entry_type(tar::EntryType::Regular);
    // The name is written as given (set_path would check it).
    header.as_gnu_mut().unwrap().name[..name.len()].copy_from_slice(name.as_bytes());
    header.set_cksum();
    builder.append(&header, &b"x"[..]).unwrap();
    builder.into_inner().unwrap()
}

#[test]
fn a_reserved_name_in_an_archive_is_refused_at_import() {
    let env = TestEnv::new();
    for (i, name) in [".dsv/catalog.db", "a/.dsv/x", "b/.dsv-tmp-1-2", ".dsv"]
        .iter()
        .enumerate()
    {
        let archive = env.path(&format!("bad{i}.tar"));
        std::fs::write(&archive, tar_with(name)).unwrap();
        let error = env.json_error(&["import", archive.to_str().unwrap(), "-d", "bad"], 3);
        assert!(
            error["message"].as_str().unwrap().contains(".dsv"),
            "{name}: {error}"
        );
    }
    assert!(datasets(&env, ".dsv").is_empty());
    // The commit walk skips a nested store as before.
    env.write("data/a.txt", "a");
    env.ok(&["init", "--force", "data/nested"]);
    let report = env.json(&["commit", "data", "-d", "ds"]);
    assert_eq!(report["files"], 1, "{report}");
}
