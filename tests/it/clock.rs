//! Graces without waiting: a `file://` remote's Last-Modified is its files' mtime, so a test
//! moves it back ([`crate::common::backdate`]) instead of sleeping through `--grace`.

use std::time::Duration;

use crate::common::{TestEnv, backdate, pseudo_random, push_to_file_remote};

/// A pack no ref names, younger than the grace, waits; backdated past it, a run marks it;
/// the mark backdated past it too, the next run frees it. No step waits for the clock.
#[test]
fn a_file_remotes_garbage_ages_past_the_grace_by_backdating_not_waiting() {
    let env = TestEnv::new();
    env.write("w/a.bin", pseudo_random(300_000, 3));
    env.ok(&["commit", "w", "-d", "ds"]);
    let (remote, _) = push_to_file_remote(&env, "remote", "ds");
    env.ok(&["rm", "ds", "--remote", "origin"]);
    let grace = ["gc", "--remote", "origin", "--grace", "1h"];
    let young = env.json(&grace);
    assert_eq!(young["young"]["count"], 1, "{young:#}");
    assert_eq!(young["marked"]["count"], 0, "{young:#}");

    backdate(&remote, Duration::from_secs(2 * 3600));
    let marked = env.json(&grace);
    assert_eq!(marked["marked"]["count"], 1, "{marked:#}");
    assert_eq!(marked["deleted"]["count"], 0, "{marked:#}");

    backdate(&remote, Duration::from_secs(2 * 3600));
    let freed = env.json(&grace);
    assert_eq!(freed["deleted"]["count"], 1, "{freed:#}");
    assert!(
        freed["freed_bytes"].as_u64().unwrap() > 200_000,
        "{freed:#}"
    );
}
