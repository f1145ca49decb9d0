//! A remote's listings come in one order whatever its backend: a `file://` remote's
//! directory order (which differs between filesystems: ext4 hashes names, tmpfs lists the
//! newest first) never reaches dsv's output.

use serde_json::Value;

use crate::common::TestEnv;

/// `dsv fetch` lists a `file://` remote's refs in key order (heads by name, then tags), as
/// S3 and Azure list them (before the fix: in the directory's order, so the same fetch
/// printed its refs in another order on tmpfs than on ext4).
#[test]
fn fetch_lists_a_file_remotes_refs_in_key_order() {
    let env = TestEnv::new();
    for name in ["c", "a", "e", "b", "d"] {
        env.write(&format!("w{name}/f.txt"), name);
        env.ok(&["commit", &format!("w{name}"), "-d", name]);
        env.ok(&["tag", name, "v1"]);
    }
    std::fs::create_dir(env.path("remote")).unwrap();
    let url = format!("file://{}", env.path("remote").display());
    env.ok(&["remote", "add", "origin", &url]);
    env.ok(&["push"]);
    let fetched = env.json(&["fetch"]);
    let listed: Vec<String> = fetched["refs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r: &Value| match r["tag"].as_str() {
            Some(tag) => format!("{}@{tag}", r["dataset"].as_str().unwrap()),
            None => r["dataset"].as_str().unwrap().to_string(),
        })
        .collect();
    let expected = [
        "a", "b", "c", "d", "e", "a@v1", "b@v1", "c@v1", "d@v1", "e@v1",
    ];
    assert_eq!(listed, expected, "{fetched:#}");
}
