//! Promise 5: processes on one machine (one per GPU) share one store safely.

use std::process::Child;

use crate::common::{Sandbox, TestEnv, assert_same_tree, pseudo_random};

fn wait_ok(child: Child) -> String {
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn concurrent_commits_all_land_and_share_chunks() {
    let env = TestEnv::new();
    let shared = pseudo_random(2_000_000, 42);
    for i in 0..4 {
        env.write(&format!("d{i}/shared.bin"), &shared);
        env.write(&format!("d{i}/own.txt"), format!("worker {i}\n"));
    }
    // Four datasets at once, and two commits racing on one dataset.
    let mut children: Vec<Child> = (0..4)
        .map(|i| env.spawn(&["commit", &format!("d{i}"), "--dataset", &format!("set{i}")]))
        .collect();
    children.push(env.spawn(&["commit", "d0", "--dataset", "same", "-m", "a"]));
    children.push(env.spawn(&["commit", "d1", "--dataset", "same", "-m", "b"]));
    for child in children {
        wait_ok(child);
    }
    let datasets = env.json(&["ls"]);
    assert_eq!(datasets.as_array().unwrap().len(), 5);
    // Both racing commits are in the history, one the parent of the other.
    let log = env.json(&["log", "same"]);
    assert_eq!(log.as_array().unwrap().len(), 2);
    assert_eq!(log[0]["parent"], log[1]["id"]);
    let verify = env.json(&["verify"]);
    assert_eq!(verify["problems"].as_array().unwrap().len(), 0);
    for i in 0..4 {
        env.ok(&["checkout", &format!("set{i}"), &format!("out{i}")]);
        assert_same_tree(&env.path(&format!("d{i}")), &env.path(&format!("out{i}")));
    }
}

#[test]
fn concurrent_checkouts_of_one_version_do_not_tear_files() {
    let env = TestEnv::new();
    for i in 0..40 {
        env.write(&format!("data/f{i}.bin"), pseudo_random(100_000, i));
    }
    env.ok(&["commit", "data", "--dataset", "d"]);
    // Four ranks into their own directories, and three into one shared directory.
    let mut children: Vec<Child> = (0..4)
        .map(|i| env.spawn(&["checkout", "d", &format!("rank{i}")]))
        .collect();
    children.extend((0..3).map(|_| env.spawn(&["checkout", "d", "shared"])));
    for child in children {
        wait_ok(child);
    }
    for dir in ["rank0", "rank1", "rank2", "rank3", "shared"] {
        assert_same_tree(&env.path("data"), &env.path(dir));
    }
    env.ok(&["status", "shared", "--exit-code"]);
}

/// Runs `dsv ARGS` in `sandbox` `rounds` times (before each, `before(round)`), each run waited
/// for until `deadline`; any exit code is accepted (a checkout refused by uncommitted
/// changes, a status of a moving workspace). Err names a run still going at the deadline.
fn run_rounds(
    sandbox: &Sandbox,
    args: &[&str],
    rounds: usize,
    deadline: std::time::Instant,
    before: &dyn Fn(usize),
) -> Result<(), String> {
    for round in 0..rounds {
        before(round);
        let mut child = sandbox
            .command()
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start dsv");
        loop {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("dsv {args:?} (round {round}) still waiting"));
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    Ok(())
}

/// The store's locks have one order (data, workspace, downloads, head: see `dsv::store`):
/// commit, status and checkout of one workspace, and gc, racing in loops, all finish, and
/// the store they leave verifies. (Linux's flock grants a shared lock while an exclusive
/// one waits, so the old mixed order did not hang here either: this guards the order, the
/// types guard the call sites.)
#[test]
fn commit_status_checkout_and_gc_racing_on_one_workspace_all_finish() {
    let env = TestEnv::new();
    env.write("w/a.txt", "0\n");
    env.write("w/big.bin", pseudo_random(300_000, 7));
    env.ok(&["commit", "w", "--dataset", "d"]);
    let root = env.root().to_path_buf();
    let sandbox = &env.sandbox();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
    let rounds = 12;
    let nothing = |_: usize| {};
    let results: Vec<Result<(), String>> = std::thread::scope(|scope| {
        let root = &root;
        let handles = vec![
            scope.spawn(move || {
                let change = |round: usize| {
                    let _ = std::fs::write(root.join("w/a.txt"), format!("{round}\n"));
                };
                run_rounds(
                    sandbox,
                    &["commit", "w", "--dataset", "d"],
                    rounds,
                    deadline,
                    &change,
                )
            }),
            scope.spawn(move || run_rounds(sandbox, &["status", "w"], rounds, deadline, &nothing)),
            scope.spawn(move || {
                run_rounds(sandbox, &["checkout", "d", "w"], rounds, deadline, &nothing)
            }),
            scope.spawn(move || run_rounds(sandbox, &["gc"], rounds, deadline, &nothing)),
        ];
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for result in results {
        result.unwrap();
    }
    let verify = env.json(&["verify"]);
    assert_eq!(verify["problems"].as_array().unwrap().len(), 0);
    env.ok(&["status", "w"]);
}
