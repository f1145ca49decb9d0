//! `dsv import` and `dsv update` against real sources: moto's S3 server (bucket versioning
//! on) and a static HTTP server with ETags, both on loopback and started by
//! `scripts/test-servers`, plus local files. Archives are built here with the same crates
//! real tools use (tar, flate2, bzip2, liblzma, zip), malicious ones byte by byte.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use object_store::ObjectStoreExt;
use serde_json::Value;

use crate::common::{
    TestEnv, assert_same_tree, kill_after, make_executable, pseudo_random, write_file,
};
use crate::remote::{endpoint, unique_prefix, use_azure, use_s3, use_s3_anonymously};

/// The small tree every archive test expands: nested files, an executable, an empty file,
/// an empty directory and a relative symlink.
fn sample_tree(dir: &Path, seed: u64) {
    write_file(&dir.join("train/a.bin"), &pseudo_random(300_000, seed));
    write_file(&dir.join("train/b.txt"), b"label,value\n1,2\n");
    write_file(&dir.join("test/c.bin"), &pseudo_random(40_000, seed + 2));
    write_file(&dir.join("empty.txt"), b"");
    write_file(&dir.join("run.sh"), b"#!/bin/sh\necho hi\n");
    make_executable(&dir.join("run.sh"));
    std::fs::create_dir_all(dir.join("nothing-here")).unwrap();
    std::os::unix::fs::symlink("train/b.txt", dir.join("labels")).unwrap();
}

/// A tar of `dir` (members relative to it), as bytes.
fn tar_of(dir: &Path) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    builder.follow_symlinks(false);
    builder.append_dir_all(".", dir).unwrap();
    builder.into_inner().unwrap()
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

fn bzip2(data: &[u8]) -> Vec<u8> {
    let mut encoder = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::fast());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

fn xz(data: &[u8]) -> Vec<u8> {
    let mut encoder = liblzma::write::XzEncoder::new(Vec::new(), 1);
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

/// A zip of `dir` (deflated files, stored symlinks with their unix mode).
fn zip_of(dir: &Path) -> Vec<u8> {
    let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for entry in walkdir::WalkDir::new(dir).min_depth(1).sort_by_file_name() {
        let entry = entry.unwrap();
        let name = entry
            .path()
            .strip_prefix(dir)
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        let meta = entry.path().symlink_metadata().unwrap();
        let mode = std::os::unix::fs::PermissionsExt::mode(&meta.permissions());
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .unix_permissions(mode & 0o777);
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(entry.path()).unwrap();
            writer
                .add_symlink(name, target.to_str().unwrap(), options)
                .unwrap();
        } else if meta.is_dir() {
            writer.add_directory(name, options).unwrap();
        } else {
            writer.start_file(name, options).unwrap();
            writer
                .write_all(&std::fs::read(entry.path()).unwrap())
                .unwrap();
        }
    }
    writer.finish().unwrap().into_inner()
}

/// A tar with one member written byte for byte: `name` (and a link target) as given, so
/// names `tar::Builder` refuses (`../x`, `/etc/x`) can be made.
fn raw_tar(name: &str, kind: tar::EntryType, link: &str, data: &[u8]) -> Vec<u8> {
    let mut header = tar::Header::new_ustar();
    {
        let old = header.as_old_mut();
        old.name[..name.len()].copy_from_slice(name.as_bytes());
        old.linkname[..link.len()].copy_from_slice(link.as_bytes());
    }
    header.set_entry_type(kind);
    header.set_mode(0o644);
    header.set_size(data.len() as u64);
    header.set_cksum();
    let mut builder = tar::Builder::new(Vec::new());
    builder.append(&header, data).unwrap();
    builder.into_inner().unwrap()
}

/// A tar without its two closing zero blocks, so members can be appended.
fn without_end(tar: &[u8]) -> Vec<u8> {
    tar[..tar.len() - 1024].to_vec()
}

/// A tar holding one GNU sparse file of `real_size` bytes, all holes but its last 512.
fn sparse_tar(real_size: u64) -> Vec<u8> {
    fn octal(field: &mut [u8], value: u64) {
        let text = format!("{value:0width$o}\0", width = field.len() - 1);
        field.copy_from_slice(text.as_bytes());
    }
    let mut header = tar::Header::new_gnu();
    header.set_path("sparse.bin").unwrap();
    header.set_mode(0o644);
    header.set_size(512);
    header.set_entry_type(tar::EntryType::GNUSparse);
    let gnu = header.as_gnu_mut().unwrap();
    octal(&mut gnu.realsize, real_size);
    octal(&mut gnu.sparse[0].offset, real_size - 512);
    octal(&mut gnu.sparse[0].numbytes, 512);
    header.set_cksum();
    let mut builder = tar::Builder::new(Vec::new());
    builder.append(&header, &[7u8; 512][..]).unwrap();
    builder.into_inner().unwrap()
}

/// A tar holding one file of `size` random bytes and `links` hard links to it.
fn hard_links(size: usize, links: usize) -> Vec<u8> {
    let mut archive = raw_tar(
        "data.bin",
        tar::EntryType::Regular,
        "",
        &pseudo_random(size, 81),
    );
    for i in 0..links {
        archive = without_end(&archive);
        archive.extend(raw_tar(
            &format!("link{i}"),
            tar::EntryType::Link,
            "data.bin",
            b"",
        ));
    }
    archive
}

/// 40 MiB of random data in four files (more than a pack holds).
fn big_dir(env: &TestEnv) -> std::path::PathBuf {
    let dir = env.path("big-source");
    for i in 0..4u64 {
        write_file(
            &dir.join(format!("f{i}.bin")),
            &pseudo_random(10 << 20, 2 * i + 91),
        );
    }
    dir
}

/// The dataset names, and the pack files in the store (nothing may be left by a failure).
fn datasets_and_packs(env: &TestEnv) -> (Vec<String>, usize) {
    let names = env
        .json(&["ls"])
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap().to_string())
        .collect();
    let packs = std::fs::read_dir(env.path(".dsv/packs")).map_or(0, |d| d.count());
    (names, packs)
}

/// Checks out `revision` and compares it with `expected`.
fn assert_checkout(env: &TestEnv, revision: &str, expected: &Path) {
    let out = env.path(&format!("out-{}", unique_prefix()));
    env.ok(&["checkout", revision, out.to_str().unwrap()]);
    assert_same_tree(expected, &out);
}

#[test]
fn every_archive_format_expands_to_the_same_version_and_deduplicates() {
    let env = TestEnv::new();
    let source = env.path("source");
    sample_tree(&source, 11);
    let tar = tar_of(&source);
    let archives: Vec<(&str, Vec<u8>)> = vec![
        ("plain.tar", tar.clone()),
        ("gz.tar.gz", gzip(&tar)),
        ("tgz.tgz", gzip(&tar)),
        ("gz2.tar.gz2", gzip(&tar)),
        ("bz.tar.bz2", bzip2(&tar)),
        ("tbz.tbz", bzip2(&tar)),
        ("tbz2.tbz2", bzip2(&tar)),
        ("xz.tar.xz", xz(&tar)),
        ("txz.txz", xz(&tar)),
        ("zipped.zip", zip_of(&source)),
    ];
    let mut trees = Vec::new();
    for (index, (name, bytes)) in archives.iter().enumerate() {
        let path = env.path(&format!("archives/{name}"));
        write_file(&path, bytes);
        let report = env.json(&["import", path.to_str().unwrap()]);
        let dataset = name.split('.').next().unwrap();
        assert_eq!(
            report["dataset"], dataset,
            "{name}: the default name drops the extension"
        );
        assert_eq!(report["created"], true);
        assert_eq!(report["files"], 6, "{name}: {report}");
        if index > 0 {
            assert_eq!(
                report["new_chunks"], 0,
                "{name}: members deduplicate across archives"
            );
        }
        let shown = env.json(&["show", dataset, "--provenance"]);
        trees.push(shown["tree"].clone());
        let files = shown["provenance"]["files"].as_array().unwrap();
        assert_eq!(files.len(), 6, "{name}: one record per file and symlink");
        let a = files.iter().find(|f| f["path"] == "train/a.bin").unwrap();
        assert_eq!(a["member"], "train/a.bin");
        assert_eq!(a["size"], bytes.len() as u64, "the archive's size");
        assert!(a["url"].as_str().unwrap().ends_with(name));
        assert_checkout(&env, dataset, &source);
    }
    assert!(trees.windows(2).all(|w| w[0] == w[1]), "{trees:?}");
    // A tar hard link is the content of the member it names.
    let mut with_link = without_end(&tar);
    let link = raw_tar(
        "./train/copy.bin",
        tar::EntryType::Link,
        "./train/a.bin",
        b"",
    );
    with_link.extend_from_slice(&link);
    write_file(&env.path("archives/linked.tar"), &with_link);
    env.ok(&["import", "archives/linked.tar"]);
    let mut cat = env.dsv();
    let copy = cat
        .args(["cat", "linked:train/copy.bin"])
        .output()
        .unwrap()
        .stdout;
    assert_eq!(copy, std::fs::read(source.join("train/a.bin")).unwrap());
    // Members with nothing to version (a FIFO) are skipped and counted.
    write_file(
        &env.path("archives/fifo.tar"),
        &raw_tar("pipe", tar::EntryType::Fifo, "", b""),
    );
    let skipped = env.json(&["import", "archives/fifo.tar"]);
    assert_eq!(
        (
            skipped["members_skipped"].as_u64(),
            skipped["files"].as_u64()
        ),
        (Some(1), Some(0))
    );
    // --no-extract keeps the archive as one file.
    let kept = env.json(&["import", "archives/plain.tar", "--no-extract", "-d", "raw"]);
    assert_eq!(kept["files"], 1);
    assert_eq!(env.json(&["ls", "raw"])[0]["path"], "plain.tar");
    assert!(env.ok(&["verify"]).contains("consistent"));
}

#[test]
fn real_archives_import_like_tar_extracts_them_and_versions_share_chunks() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data");
    let v1 = data.join("fivethirtyeight-v1-2022-05-04.tar.gz");
    let v2 = data.join("fivethirtyeight-v2-2023-04-03.tar.gz");
    let env = TestEnv::new();
    let first = env.json(&["import", v1.to_str().unwrap(), "-d", "fte", "-t", "v1"]);
    let second = env.json(&["import", v2.to_str().unwrap(), "-d", "fte", "-t", "v2"]);
    assert_eq!(second["parent"], first["version"]);
    // Unchanged CSVs are not stored again: the second version adds far less than it holds.
    assert!(
        second["new_bytes"].as_u64().unwrap() < second["bytes"].as_u64().unwrap() * 6 / 10,
        "{second}"
    );
    let extracted = env.path("tar-x");
    std::fs::create_dir_all(&extracted).unwrap();
    let status = std::process::Command::new("tar")
        .args([
            "xzf",
            v2.to_str().unwrap(),
            "-C",
            extracted.to_str().unwrap(),
        ])
        .status()
        .unwrap();
    assert!(status.success());
    assert_checkout(&env, "fte@v2", &extracted);
    // The same archive again: nothing read, nothing recorded.
    let again = env.json(&["import", v2.to_str().unwrap(), "-d", "fte"]);
    assert_eq!(again["created"], false);
    assert_eq!(again["objects_read"], 0);
    assert_eq!(again["version"], second["version"]);
}

#[test]
fn bad_archives_are_refused_and_leave_nothing() {
    let env = TestEnv::new();
    let zeros = vec![0u8; 100 * 1024 * 1024];
    let mut zeros_tar = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_size(zeros.len() as u64);
    header.set_mode(0o644);
    header.set_cksum();
    zeros_tar
        .append_data(&mut header, "zeros.bin", &zeros[..])
        .unwrap();
    // Deflate at its best turns zeros into about a thousandth of their size.
    let bomb_tar_gz = {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        encoder.write_all(&zeros_tar.into_inner().unwrap()).unwrap();
        encoder.finish().unwrap()
    };
    let bomb_zip = {
        let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        writer
            .start_file("zeros.bin", zip::write::SimpleFileOptions::default())
            .unwrap();
        writer.write_all(&zeros).unwrap();
        writer.finish().unwrap().into_inner()
    };
    let good = {
        let dir = env.path("good");
        sample_tree(&dir, 5);
        gzip(&tar_of(&dir))
    };
    let truncated = good[..good.len() / 2].to_vec();
    let mut garbage = good.clone();
    for byte in &mut garbage[100..600] {
        *byte ^= 0x5a;
    }
    let cases: Vec<(&str, Vec<u8>, Vec<&str>, &str)> = vec![
        (
            "dotdot.tar",
            raw_tar("../evil", tar::EntryType::Regular, "", b"x"),
            vec![],
            "'..'",
        ),
        (
            "deep.tar",
            raw_tar("a/../../evil", tar::EntryType::Regular, "", b"x"),
            vec![],
            "'..'",
        ),
        (
            "absolute.tar",
            raw_tar("/tmp/evil", tar::EntryType::Regular, "", b"x"),
            vec![],
            "absolute",
        ),
        (
            "link-out.tar",
            raw_tar("a/link", tar::EntryType::Symlink, "../../etc/passwd", b""),
            vec![],
            "outside",
        ),
        (
            "link-abs.tar",
            raw_tar("link", tar::EntryType::Symlink, "/etc/passwd", b""),
            vec![],
            "absolute",
        ),
        (
            "hard.tar",
            raw_tar("copy", tar::EntryType::Link, "../outside", b""),
            vec![],
            "'..'",
        ),
        (
            "hard-unseen.tar",
            raw_tar("copy", tar::EntryType::Link, "nowhere", b""),
            vec![],
            "not a file earlier",
        ),
        (
            "truncated.tar.gz",
            truncated,
            vec![],
            "truncated or corrupt",
        ),
        ("garbage.tar.gz", garbage, vec![], "truncated or corrupt"),
        (
            "notazip.zip",
            b"PK but not really a zip archive".to_vec(),
            vec![],
            "not a readable zip",
        ),
        ("bomb.tar.gz", bomb_tar_gz, vec![], "decompression bomb"),
        ("bomb.zip", bomb_zip, vec![], "decompression bomb"),
        (
            "big.tar.gz",
            good.clone(),
            vec!["--max-expanded-size", "100KB"],
            "--max-expanded-size",
        ),
        (
            "data.csv",
            b"a,b\n".to_vec(),
            vec!["--extract"],
            "archive extension",
        ),
        (
            // 512 stored bytes at the end of a 200 MiB GNU sparse file: the tar reader makes
            // up the zeros, and the limits count them.
            "sparse.tar",
            sparse_tar(200 << 20),
            vec![],
            "decompression bomb",
        ),
        (
            // 1 MB stored once, repeated by 30 hard links: 31 MB expanded.
            "links.tar",
            hard_links(1_000_000, 30),
            vec!["--max-expanded-size", "10MB"],
            "--max-expanded-size",
        ),
        (
            // Over 32 MiB of new data (sealed packs) before the refused member: those packs
            // must go too.
            "late.tar",
            [
                without_end(&tar_of(&big_dir(&env))),
                raw_tar("../evil", tar::EntryType::Regular, "", b"x"),
            ]
            .concat(),
            vec![],
            "'..'",
        ),
    ];
    for (name, bytes, extra, expected) in cases {
        let path = env.path(&format!("bad/{name}"));
        write_file(&path, &bytes);
        let mut args = vec!["import", path.to_str().unwrap(), "-d", "bad"];
        args.extend(extra);
        let error = env.json_error(&args, 3);
        let message = error["message"].as_str().unwrap();
        assert!(message.contains(expected), "{name}: {error}");
        assert_eq!(
            datasets_and_packs(&env),
            (vec![], 0),
            "{name} left something behind"
        );
    }
    // The sparse file is a genuine one: allowed to expand, it imports whole.
    let sparse = env.path("bad/sparse.tar");
    let allowed = env.json(&[
        "import",
        sparse.to_str().unwrap(),
        "--max-expansion-ratio",
        "1000000000",
    ]);
    assert_eq!(allowed["bytes"], 200 << 20);
    // A bomb within the configured ratio is an ordinary archive.
    let path = env.path("bad/bomb.tar.gz");
    let allowed = env.json(&[
        "import",
        path.to_str().unwrap(),
        "--max-expansion-ratio",
        "100000",
    ]);
    assert_eq!(allowed["bytes"], 100 * 1024 * 1024);
    assert!(env.ok(&["verify"]).contains("consistent"));
}

/// Points `env`'s dsv runs at moto; returns an object_store client for the test's own
/// uploads to `bucket`.
fn s3(env: &TestEnv, bucket: &str) -> Arc<dyn object_store::ObjectStore> {
    use_s3(env);
    Arc::new(
        object_store::aws::AmazonS3Builder::new()
            .with_endpoint(endpoint("DSV_TEST_S3_ENDPOINT"))
            .with_allow_http(true)
            .with_bucket_name(bucket)
            .with_access_key_id("test-key-id")
            .with_secret_access_key("test-secret-never-stored")
            .with_region("us-east-1")
            .build()
            .unwrap(),
    )
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Uploads `bytes` to `key`; returns (ETag, VersionId).
fn put(
    store: &Arc<dyn object_store::ObjectStore>,
    key: &str,
    bytes: Vec<u8>,
) -> (String, Option<String>) {
    let result = runtime()
        .block_on(store.put(&object_store::path::Path::from(key), bytes.into()))
        .unwrap();
    (result.e_tag.unwrap(), result.version)
}

fn delete(store: &Arc<dyn object_store::ObjectStore>, key: &str) {
    runtime()
        .block_on(store.delete(&object_store::path::Path::from(key)))
        .unwrap();
}

#[test]
fn s3_imports_pin_etag_and_version_id_and_record_provenance() {
    let env = TestEnv::new();
    let store = s3(&env, "dsv-versioned");
    let prefix = unique_prefix();
    let key = format!("{prefix}/mnist.tar.gz");
    let url = format!("s3://dsv-versioned/{key}");
    let (one, two) = (env.path("one"), env.path("two"));
    sample_tree(&one, 21);
    sample_tree(&two, 23);
    let (etag1, version1) = put(&store, &key, gzip(&tar_of(&one)));
    let (etag2, version2) = put(&store, &key, gzip(&tar_of(&two)));
    let (version1, version2) = (version1.expect("versioned bucket"), version2.unwrap());
    assert_ne!(version1, version2);

    // Wrong ETag (the first one, now replaced): refused before anything is written.
    let error = env.json_error(&["import", &url, "--etag", &etag1], 3);
    assert!(
        error["message"].as_str().unwrap().contains("not the"),
        "{error}"
    );
    assert_eq!(datasets_and_packs(&env), (vec![], 0));
    // Unknown VersionId, missing object, and a pin on a prefix.
    let error = env.json_error(&["import", &url, "--version-id", "no-such-version"], 3);
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("no object version"),
        "{error}"
    );
    let error = env.json_error(&["import", &format!("{url}.missing")], 3);
    assert!(
        error["message"].as_str().unwrap().contains("no object"),
        "{error}"
    );
    let usage = env.fails(
        &[
            "import",
            &format!("s3://dsv-versioned/{prefix}/"),
            "--etag",
            &etag2,
        ],
        2,
    );
    assert!(usage.contains("single object"), "{usage}");
    assert_eq!(datasets_and_packs(&env), (vec![], 0));

    // The first version by its VersionId; its ETag without quotes is accepted as well.
    let bare_etag = etag1.trim_matches('"');
    let old = env.json(&[
        "import",
        &url,
        "--version-id",
        &version1,
        "--etag",
        bare_etag,
        "-t",
        "first",
    ]);
    assert_eq!(old["dataset"], "mnist");
    assert_checkout(&env, "mnist@first", &one);
    let shown = env.json(&["show", "mnist@first", "--provenance"]);
    let provenance = &shown["provenance"];
    assert_eq!(provenance["pinned_version_id"], version1.as_str());
    let file = provenance["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "train/a.bin")
        .unwrap();
    assert_eq!(file["url"], url.as_str());
    assert_eq!(file["etag"], etag1.as_str());
    assert_eq!(file["version_id"], version1.as_str());
    assert_eq!(file["member"], "train/a.bin");
    assert!(file["last_modified"].as_i64().unwrap() > 1_700_000_000);
    let human = env.ok(&["show", "mnist@first", "--provenance"]);
    assert!(human.contains(&format!("version {version1}")), "{human}");

    // Pinned to the current version, an update finds nothing new and records nothing.
    let pinned = env.json(&["import", &url, "--version-id", &version2, "-d", "pinned"]);
    let same = env.json(&["update", "pinned"]);
    assert_eq!(
        (same["created"].as_bool(), same["version"].clone()),
        (Some(false), pinned["version"].clone())
    );

    // The latest (no pin); then update finds nothing new, and after a new upload imports it.
    let latest = env.json(&["import", &url]);
    assert_eq!(latest["parent"], old["version"]);
    assert_checkout(&env, "mnist", &two);
    // A tag that names another version than the head is refused before anything is read.
    let packs = datasets_and_packs(&env).1;
    let other = env.path("other.tar");
    write_file(&other, &tar_of(&three_tree(&env)));
    let error = env.json_error(
        &[
            "import",
            other.to_str().unwrap(),
            "-d",
            "mnist",
            "-t",
            "first",
        ],
        3,
    );
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("already exists"),
        "{error}"
    );
    assert_eq!(
        datasets_and_packs(&env).1,
        packs,
        "the refused import wrote packs"
    );
    let none = env.json(&["update", "mnist"]);
    assert_eq!(
        (none["created"].clone(), none["objects_read"].clone()),
        (Value::from(false), Value::from(0))
    );
    let three = three_tree(&env);
    put(&store, &key, gzip(&tar_of(&three)));
    let updated = env.json(&["update", "mnist"]);
    assert_eq!(updated["created"], true);
    assert_eq!(updated["parent"], latest["version"]);
    assert_checkout(&env, "mnist", &three);
    // The version and its provenance travel together: a pushed import shows it in a clone.
    let remote = format!("s3://dsv-test/{}", unique_prefix());
    env.ok(&["remote", "add", "origin", &remote]);
    env.ok(&["push"]);
    let clone_dir = env.path("clone");
    env.ok(&["clone", &remote, clone_dir.to_str().unwrap()]);
    let mut show = env.dsv();
    let cloned = show
        .args([
            "--json",
            "--store",
            clone_dir.to_str().unwrap(),
            "show",
            "mnist",
            "--provenance",
        ])
        .output()
        .unwrap();
    let cloned: Value = serde_json::from_slice(&cloned.stdout).unwrap();
    assert_eq!(
        cloned["provenance"],
        env.json(&["show", "mnist", "--provenance"])["provenance"]
    );
}

/// The third upload's tree.
fn three_tree(env: &TestEnv) -> std::path::PathBuf {
    let three = env.path("three");
    if !three.exists() {
        sample_tree(&three, 25);
    }
    three
}

#[test]
fn s3_prefix_import_and_update_download_only_what_changed() {
    let env = TestEnv::new();
    let store = s3(&env, "dsv-test");
    let prefix = unique_prefix();
    let expected = env.path("expected");
    for (index, name) in ["a.bin", "b.bin", "sub/c.bin", "sub/deeper/d.bin", "e.bin"]
        .iter()
        .enumerate()
    {
        let bytes = pseudo_random(50_000 + index * 1000, 31 + 2 * index as u64);
        write_file(&expected.join(name), &bytes);
        put(&store, &format!("{prefix}/{name}"), bytes);
    }
    let url = format!("s3://dsv-test/{prefix}/");
    let first = env.json(&["import", &url, "-d", "shards"]);
    assert_eq!(
        (first["objects"].as_u64(), first["objects_read"].as_u64()),
        (Some(5), Some(5))
    );
    assert_checkout(&env, "shards", &expected);
    // One object changed, one added, one deleted.
    let changed = pseudo_random(70_000, 99);
    write_file(&expected.join("b.bin"), &changed);
    put(&store, &format!("{prefix}/b.bin"), changed);
    write_file(&expected.join("new/f.bin"), b"new file");
    put(&store, &format!("{prefix}/new/f.bin"), b"new file".to_vec());
    std::fs::remove_file(expected.join("e.bin")).unwrap();
    delete(&store, &format!("{prefix}/e.bin"));
    let second = env.json(&["update", "shards"]);
    assert_eq!(second["created"], true);
    assert_eq!(second["objects"], 5);
    assert_eq!(second["objects_read"], 2, "{second}");
    assert_eq!(second["objects_unchanged"], 3);
    assert_eq!(second["bytes_downloaded"], 70_000 + 8);
    assert_checkout(&env, "shards", &expected);
    let third = env.json(&["update", "shards"]);
    assert_eq!(
        (third["created"].as_bool(), third["objects_read"].as_u64()),
        (Some(false), Some(0))
    );
    // A dataset first imported from a deeper prefix: reused objects move to their paths
    // under the new prefix.
    let nested = env.json(&["import", &format!("{url}sub/"), "-d", "nested"]);
    assert_eq!(nested["files"], 2);
    let widened = env.json(&["import", &url, "-d", "nested"]);
    assert_eq!(widened["objects_unchanged"], 2, "{widened}");
    assert_checkout(&env, "nested", &expected);
    // A committed dataset has no source to update from.
    env.write("dir/x", "x");
    env.ok(&["commit", "dir", "-d", "handmade"]);
    let error = env.json_error(&["update", "handmade"], 3);
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("was not imported"),
        "{error}"
    );
}

#[test]
fn http_imports_check_etags_and_update_when_the_file_changes() {
    let env = TestEnv::new();
    let base = endpoint("DSV_TEST_HTTP_URL");
    let root = Path::new(&endpoint("DSV_TEST_HTTP_ROOT")).join(unique_prefix());
    let source = env.path("source");
    sample_tree(&source, 41);
    write_file(&root.join("files.zip"), &zip_of(&source));
    let url = format!(
        "{base}/{}/files.zip",
        root.file_name().unwrap().to_str().unwrap()
    );
    let error = env.json_error(&["import", &url, "--etag", "\"not-it\""], 3);
    assert!(
        error["message"].as_str().unwrap().contains("not the"),
        "{error}"
    );
    let missing = env.json_error(&["import", &format!("{url}.gone")], 3);
    assert!(
        missing["message"].as_str().unwrap().contains("404"),
        "{missing}"
    );
    assert_eq!(datasets_and_packs(&env), (vec![], 0));
    let first = env.json(&["import", &url]);
    assert_eq!(first["dataset"], "files");
    assert_eq!(first["archive"], "zip");
    assert_checkout(&env, "files", &source);
    let provenance = env.json(&["show", "files", "--provenance"])["provenance"].clone();
    let etag = provenance["files"][0]["etag"].as_str().unwrap().to_string();
    assert!(etag.starts_with('"'), "{provenance}");
    let none = env.json(&["update", "files"]);
    assert_eq!(none["created"], false);
    // The file is replaced (other bytes, an mtime two seconds on, set rather than waited
    // for, so its ETag and Last-Modified differ): update imports it.
    let zip = root.join("files.zip");
    let mtime = std::fs::metadata(&zip).unwrap().modified().unwrap();
    sample_tree(&env.path("source2"), 43);
    write_file(&zip, &zip_of(&env.path("source2")));
    std::fs::File::options()
        .write(true)
        .open(&zip)
        .unwrap()
        .set_modified(mtime + std::time::Duration::from_secs(2))
        .unwrap();
    let second = env.json(&["update", "files"]);
    assert_eq!(second["created"], true);
    assert_checkout(&env, "files", &env.path("source2"));
    assert_ne!(
        env.json(&["show", "files", "--provenance"])["provenance"]["files"][0]["etag"],
        etag.as_str()
    );
}

#[test]
fn local_directories_import_with_provenance_and_update_reads_only_changes() {
    let env = TestEnv::new();
    let dir = env.path("data");
    sample_tree(&dir, 51);
    let first = env.json(&["import", dir.to_str().unwrap()]);
    assert_eq!(first["dataset"], "data");
    assert_eq!(first["objects_read"], 6);
    std::fs::remove_dir(dir.join("nothing-here")).unwrap();
    assert_checkout(&env, "data", &dir);
    write_file(&dir.join("train/b.txt"), b"label,value\n1,3\n");
    let second = env.json(&["update", "data"]);
    assert_eq!(second["objects_read"], 1, "{second}");
    assert_eq!(second["created"], true);
    assert_checkout(&env, "data", &dir);
}

#[test]
fn kill_during_import_leaves_a_consistent_store_and_the_rerun_succeeds() {
    let env = TestEnv::new();
    let dir = env.path("big");
    for i in 0..24u64 {
        write_file(
            &dir.join(format!("part{}/f{i}.bin", i % 3)),
            &pseudo_random(1 << 20, 2 * i + 1),
        );
    }
    write_file(&env.path("big.tar.gz"), &gzip(&tar_of(&dir)));
    // One thread at zstd level 19: seconds on any machine, so the kills land mid-import.
    let slow = [
        "import",
        "big.tar.gz",
        "--jobs",
        "1",
        "--compression-level",
        "19",
    ];
    let mut killed = 0;
    for delay in [40, 150, 400, 900] {
        if kill_after(&env, &slow, std::time::Duration::from_millis(delay)) {
            killed += 1;
        }
        let verify = env.json(&["verify"]);
        assert_eq!(verify["problems"].as_array().unwrap().len(), 0, "{verify}");
        // Nothing half-done is visible: no dataset, or a whole version.
        if !datasets_and_packs(&env).0.is_empty() {
            assert_checkout(&env, "big", &dir);
        }
    }
    assert!(
        killed >= 3,
        "only {killed} of 4 kills landed while the import ran"
    );
    let done = env.json(&["import", "big.tar.gz"]);
    assert_eq!(done["files"], 24);
    assert_checkout(&env, "big", &dir);
}

#[test]
fn a_public_bucket_imports_without_credentials() {
    let env = TestEnv::new();
    let uploader = s3(&env, "dsv-public");
    let key = format!("{}/public.tar.gz", unique_prefix());
    let source = env.path("source");
    sample_tree(&source, 61);
    put(&uploader, &key, gzip(&tar_of(&source)));
    // A reader with no credentials at all, as for a public dataset bucket.
    let reader = TestEnv::new();
    use_s3_anonymously(&reader);
    let url = format!("s3://dsv-public/{key}");
    let report = reader.json(&["import", &url, "--option", "aws_skip_signature=true"]);
    assert_eq!(report["dataset"], "public");
    assert_checkout(&reader, "public", &source);
    // Credentials are refused as options: they belong in the environment.
    let error = reader.json_error(&["import", &url, "--option", "aws_secret_access_key=x"], 3);
    assert!(
        error["message"].as_str().unwrap().contains("credentials"),
        "{error}"
    );
}

#[test]
fn an_azure_prefix_imports_like_an_s3_one() {
    let env = TestEnv::new();
    let azure = endpoint("DSV_TEST_AZURE_ENDPOINT");
    use_azure(&env);
    // The test's own uploads: Azurite's documented account and key.
    let uploader: Arc<dyn object_store::ObjectStore> = Arc::new(
        object_store::azure::MicrosoftAzureBuilder::new()
            .with_endpoint(format!("{azure}/devstoreaccount1"))
            .with_allow_http(true)
            .with_account("devstoreaccount1")
            .with_access_key("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==")
            .with_container_name("dsv-test")
            .build()
            .unwrap(),
    );
    let prefix = unique_prefix();
    let expected = env.path("expected");
    for (index, name) in ["x.bin", "d/y.bin"].iter().enumerate() {
        let bytes = pseudo_random(80_000, 71 + 2 * index as u64);
        write_file(&expected.join(name), &bytes);
        put(&uploader, &format!("{prefix}/{name}"), bytes);
    }
    let report = env.json(&["import", &format!("az://dsv-test/{prefix}/"), "-d", "blobs"]);
    assert_eq!(report["objects_read"], 2);
    assert_checkout(&env, "blobs", &expected);
    let files = env.json(&["show", "blobs", "--provenance"])["provenance"]["files"].clone();
    assert_eq!(files[0]["url"], format!("az://dsv-test/{prefix}/d/y.bin"));
    assert!(files[0]["etag"].as_str().is_some(), "{files}");
    assert_eq!(env.json(&["update", "blobs"])["created"], false);
}

/// The library's source layer: a read is pinned to what the listing saw.
mod source_reads {
    use std::collections::BTreeMap;

    use dsv::source::{Pin, Source};

    use super::*;

    fn expect_changed(source: &Source, objects: &[dsv::source::SourceObject]) {
        match source.read(&objects[0]).map(|_| ()) {
            Err(dsv::Error::SourceChanged { url }) => assert_eq!(url, objects[0].url),
            other => panic!("expected SourceChanged, got {other:?}"),
        }
    }

    #[test]
    fn an_http_file_replaced_after_its_listing_is_not_read() {
        let root = Path::new(&endpoint("DSV_TEST_HTTP_ROOT")).join(unique_prefix());
        write_file(&root.join("data.bin"), b"first contents");
        let url = format!(
            "{}/{}/data.bin",
            endpoint("DSV_TEST_HTTP_URL"),
            root.file_name().unwrap().to_str().unwrap()
        );
        let source = Source::open(&url, &BTreeMap::new()).unwrap();
        let listing = source.list(&Pin::default()).unwrap();
        // Another size, so another ETag, whatever the clock says.
        write_file(&root.join("data.bin"), b"second, longer contents");
        expect_changed(&source, &listing.objects);
    }

    #[test]
    fn an_s3_object_replaced_after_its_listing_is_not_read() {
        let env = TestEnv::new();
        // The public bucket: read without credentials, so the settings fit in options.
        let store = s3(&env, "dsv-public");
        let key = format!("{}/data.bin", unique_prefix());
        put(&store, &key, b"first contents".to_vec());
        let options: BTreeMap<String, String> = [
            ("aws_endpoint", endpoint("DSV_TEST_S3_ENDPOINT")),
            ("aws_allow_http", "true".into()),
            ("aws_skip_signature", "true".into()),
            ("aws_region", "us-east-1".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let source = Source::open(&format!("s3://dsv-public/{key}"), &options).unwrap();
        let listing = source.list(&Pin::default()).unwrap();
        put(&store, &key, b"second, longer contents".to_vec());
        expect_changed(&source, &listing.objects);
    }
}

#[test]
fn a_key_that_cannot_be_a_path_fails_the_listing_clearly() {
    let env = TestEnv::new();
    s3(&env, "dsv-test");
    let prefix = unique_prefix();
    // object_store cannot write `a//b`: an unsigned PUT, which moto accepts, can.
    let runtime = runtime();
    let status = runtime.block_on(async {
        reqwest::Client::new()
            .put(format!(
                "{}/dsv-test/{prefix}/a//b",
                endpoint("DSV_TEST_S3_ENDPOINT")
            ))
            .body("x")
            .send()
            .await
            .unwrap()
            .status()
    });
    assert!(status.is_success(), "{status}");
    let error = env.json_error(
        &["import", &format!("s3://dsv-test/{prefix}/"), "-d", "odd"],
        3,
    );
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("cannot be a path"),
        "{error}"
    );
    assert_eq!(datasets_and_packs(&env), (vec![], 0));
}

#[test]
fn concurrent_imports_of_one_archive_record_one_version() {
    let env = TestEnv::new();
    let dir = env.path("source");
    for i in 0..6u64 {
        write_file(
            &dir.join(format!("f{i}.bin")),
            &pseudo_random(3 << 20, 2 * i + 101),
        );
    }
    write_file(&env.path("same.tar"), &tar_of(&dir));
    // One compressor each, so both write byte-identical packs (named by their content, so
    // the same files); the second to record finds the head already holds the same import.
    let args = ["--json", "import", "same.tar", "--jobs", "1"];
    let children: Vec<_> = (0..2).map(|_| env.spawn(&args)).collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(env.json(&["log", "same"]).as_array().unwrap().len(), 1);
    let verify = env.json(&["verify"]);
    assert_eq!(verify["problems"].as_array().unwrap().len(), 0, "{verify}");
    assert_checkout(&env, "same", &dir);
}

#[test]
fn a_corrupt_provenance_is_detected_and_nothing_is_recorded() {
    let env = TestEnv::new();
    let source = env.path("source");
    sample_tree(&source, 111);
    write_file(&env.path("data.tar"), &tar_of(&source));
    let imported = env.json(&["import", "data.tar"]);
    // Flip a byte inside the provenance object: in its bytes when its frame is stored raw;
    // near the end of a compressed frame, whose last sequences make the last object written
    // to it (the trees of the version come first, the provenance last).
    let (pack, position): (Vec<u8>, i64) = {
        let catalog = rusqlite::Connection::open(env.path(".dsv/catalog.db")).unwrap();
        catalog
            .query_row(
                "SELECT p.pack_id, f.offset + CASE f.compression
                     WHEN 0 THEN o.offset + o.length / 2 ELSE f.stored_length - 16 END
                 FROM objects o JOIN frames f ON f.id = o.frame JOIN packs p ON p.id = f.pack
                 WHERE o.kind = 5",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .unwrap()
    };
    let hex: String = pack.iter().map(|b| format!("{b:02x}")).collect();
    let path = env.path(&format!(".dsv/packs/{hex}.pack"));
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[position as usize] ^= 0x55;
    let mut permissions = std::fs::metadata(&path).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    permissions.set_readonly(false);
    std::fs::set_permissions(&path, permissions).unwrap();
    std::fs::write(&path, bytes).unwrap();

    assert_eq!(
        env.json_error(&["show", "data", "--provenance"], 5)["kind"],
        "corrupt"
    );
    env.json_error(&["update", "data"], 5);
    assert_eq!(env.json(&["log", "data"]).as_array().unwrap().len(), 1);
    assert_eq!(env.json(&["show", "data"])["id"], imported["version"]);
    let out = env.run(&["--json", "verify"]);
    assert_eq!(out.status.code(), Some(5));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        !report["problems"].as_array().unwrap().is_empty(),
        "{report}"
    );
}
