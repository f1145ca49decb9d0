//! Property test: random trees (nested directories, empty files, large files, renames,
//! executable bits, symlinks, empty directories) commit → checkout → byte-identical, and an
//! incremental checkout between any two versions gives the target exactly.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;

use dsv::ops::checkout::{CheckoutOptions, checkout};
use dsv::ops::commit::{CommitOptions, commit};
use dsv::progress::NoProgress;
use dsv::tree::{FlatEntry, FlatKind};
use dsv::{Revision, Store};
use proptest::prelude::*;

use crate::common::{assert_same_tree, make_executable, pseudo_random};

#[derive(Debug, Clone)]
enum Node {
    File {
        size: usize,
        seed: u64,
        executable: bool,
    },
    Link(String),
    EmptyDir,
}

type Spec = BTreeMap<String, Node>;

fn node() -> impl Strategy<Value = Node> {
    prop_oneof![
        6 => (prop_oneof![Just(0usize), 1usize..2000, 60_000usize..400_000], any::<u64>(), any::<bool>())
            .prop_map(|(size, seed, executable)| Node::File { size, seed, executable }),
        1 => prop::sample::select(vec!["a", "b/c", "../a"]).prop_map(|t| Node::Link(t.to_string())),
        1 => Just(Node::EmptyDir),
    ]
}

fn path() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec!["a", "b", "c", "data.csv", "x y", "é"]),
        1..4,
    )
    .prop_map(|parts| parts.join("/"))
}

/// Drops entries that collide with another entry's directory prefix, and links that would
/// leave the tree.
fn sanitize(raw: Vec<(String, Node)>) -> Spec {
    let mut spec = Spec::new();
    for (path, node) in raw {
        let is_prefix_of_existing = spec.keys().any(|k| k.starts_with(&format!("{path}/")));
        let has_leaf_ancestor = spec.keys().any(|k| path.starts_with(&format!("{k}/")));
        if is_prefix_of_existing || has_leaf_ancestor {
            continue;
        }
        if let Node::Link(target) = &node
            && dsv::walk::check_symlink_target(&path, target).is_err()
        {
            continue;
        }
        spec.insert(path, node);
    }
    // Links that pass through other links are refused by dsv (they may escape): drop them.
    loop {
        let links: Vec<FlatEntry> = spec
            .iter()
            .filter_map(|(path, node)| match node {
                Node::Link(target) => Some(FlatEntry {
                    path: path.clone(),
                    kind: FlatKind::Symlink {
                        target: target.clone(),
                    },
                    size: target.len() as u64,
                    id: dsv::ObjectId::of(target.as_bytes()),
                }),
                _ => None,
            })
            .collect();
        match dsv::tree::symlink_through_symlink(&links) {
            Some(bad) => {
                spec.remove(&bad.path);
            }
            None => break,
        }
    }
    spec
}

fn tree_spec() -> impl Strategy<Value = Spec> {
    prop::collection::vec((path(), node()), 0..14).prop_map(sanitize)
}

/// A second version: some entries edited, some removed, some renamed, some added.
fn mutate(spec: &Spec, edits: &[(usize, u8)], added: Spec) -> Spec {
    let mut out = spec.clone();
    let keys: Vec<String> = spec.keys().cloned().collect();
    for (index, action) in edits {
        if keys.is_empty() {
            break;
        }
        let key = &keys[index % keys.len()];
        match action % 3 {
            0 => {
                out.remove(key);
            }
            1 => {
                if let Some(Node::File { seed, .. }) = out.get_mut(key) {
                    *seed = seed.wrapping_add(1);
                }
            }
            _ => {
                if let Some(node) = out.remove(key) {
                    out.insert(format!("{key}.renamed"), node);
                }
            }
        }
    }
    let mut merged: Vec<(String, Node)> = out.into_iter().collect();
    merged.extend(added);
    sanitize(merged)
}

fn materialize(spec: &Spec, dir: &Path) {
    if dir.exists() {
        fs::remove_dir_all(dir).unwrap();
    }
    fs::create_dir_all(dir).unwrap();
    for (path, node) in spec {
        let full = dir.join(path);
        fs::create_dir_all(full.parent().unwrap()).unwrap();
        match node {
            Node::File {
                size,
                seed,
                executable,
            } => {
                fs::write(&full, pseudo_random(*size, *seed)).unwrap();
                if *executable {
                    make_executable(&full);
                }
            }
            Node::Link(target) => symlink(target, &full).unwrap(),
            Node::EmptyDir => fs::create_dir_all(&full).unwrap(),
        }
    }
}

fn commit_dir(store: &mut Store, dir: &Path, tag: &str) {
    let mut options = CommitOptions::new("prop");
    options.tag = Some(tag.into());
    options.author = Some("proptest".into());
    options.allow_empty = true;
    commit(store, dir, &options, &NoProgress).unwrap();
}

fn checkout_to(store: &mut Store, tag: &str, dir: &Path) {
    let revision = Revision::parse(&format!("prop@{tag}")).unwrap();
    checkout(
        store,
        &revision,
        dir,
        &CheckoutOptions::default(),
        &NoProgress,
    )
    .unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn commit_checkout_round_trips_and_incremental_checkout_is_exact(
        first in tree_spec(),
        edits in prop::collection::vec((any::<usize>(), any::<u8>()), 0..6),
        added in tree_spec(),
    ) {
        let second = mutate(&first, &edits, added);
        let temp = tempfile::tempdir_in(crate::common::temp_base()).unwrap();
        let root = temp.path();
        let mut store = Store::init(root).unwrap();
        let (a, b) = (root.join("a"), root.join("b"));
        materialize(&first, &a);
        materialize(&second, &b);
        commit_dir(&mut store, &a, "one");
        commit_dir(&mut store, &b, "two");

        let work = root.join("work");
        checkout_to(&mut store, "one", &work);
        assert_same_tree(&a, &work);
        checkout_to(&mut store, "two", &work);
        assert_same_tree(&b, &work);
        checkout_to(&mut store, "one", &work);
        assert_same_tree(&a, &work);
        let fresh = root.join("fresh");
        checkout_to(&mut store, "two", &fresh);
        assert_same_tree(&b, &fresh);
    }
}
