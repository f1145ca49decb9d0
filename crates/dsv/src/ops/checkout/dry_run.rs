//! The public plan of a checkout ([`CheckoutPlan`], `dsv checkout --dry-run`): the decisions
//! of [`super::plan::plan`], path by path, built without changing anything (no directory
//! made, no lock taken, nothing fetched, nothing recorded).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::plan::{Decision, Decisions};
use super::{CheckoutOptions, EntryWalk, Target};
use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::progress::Progress;
use crate::revision::Revision;
use crate::store::Store;
use crate::tree::{FlatEntry, FlatKind};

/// What a checkout does with one path ([`PlannedPath`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// The target's entry is written where the directory has nothing.
    Write,
    /// The target's entry is written over what the directory has there (what the version
    /// checked out before had, or anything with `force`).
    Replace,
    /// A file or symlink the target lacks (the version checked out before had it), or where
    /// the target has a directory, is deleted.
    Delete,
    /// A directory where the target has a file is deleted with what it holds.
    DeleteTree,
    /// A directory of the version checked out before that the target lacks is removed if it
    /// ends up empty.
    Prune,
    /// The user's change (an edit, an addition, a deletion) where the target has what the
    /// version checked out before had: left as the user has it.
    Carry,
    /// Uncommitted changes (or what no version holds) would be overwritten or deleted: the
    /// checkout is refused unless `force`.
    Conflict,
}

/// One path and what the checkout does there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlannedPath {
    /// The path, relative to the directory.
    pub path: String,
    /// What happens there.
    pub action: Action,
}

/// What a checkout of a version into a directory would do, decided as the checkout decides
/// it, before anything changes: [`plan_checkout`], `dsv checkout --dry-run`. Every entry of
/// the target got a decision (checked).
#[derive(Debug, Clone, Serialize)]
pub struct CheckoutPlan {
    /// The dataset.
    pub dataset: String,
    /// The version the directory would hold.
    pub version: ObjectId,
    /// The directory (canonical when it exists; it is not made).
    pub dir: PathBuf,
    /// True for a partial checkout (a selection).
    pub partial: bool,
    /// Files and symlinks in the version (in the selection, for a partial checkout).
    pub files: u64,
    /// Total file bytes in the version (in the selection, for a partial checkout).
    pub bytes: u64,
    /// Files and symlinks that would be written (new, or over what is there).
    pub write: u64,
    /// Bytes that would be written.
    pub bytes_to_write: u64,
    /// Files and symlinks already right, left untouched.
    pub unchanged: u64,
    /// Uncommitted changes that would be carried over.
    pub carried: u64,
    /// Files, symlinks and directory trees that would be deleted.
    pub delete: u64,
    /// Paths where uncommitted changes are in the way.
    pub conflicts: u64,
    /// True when the checkout would be refused (conflicts, without `force`): it would
    /// change nothing.
    pub refused: bool,
    /// Every path the checkout would change, carry over or refuse at, in path order (the
    /// paths it leaves untouched are not listed: `unchanged`).
    pub paths: Vec<PlannedPath>,
}

/// Plans a checkout of `revision` into `dir` with `options` and changes nothing: the
/// version's trees are read (and checked) as a checkout reads them, the directory compared
/// beside its stat cache and hashed where the cache cannot vouch, as a checkout compares it.
/// A directory that does not exist is planned as an empty one (and not made). No lock is
/// taken (a checkout or gc running meanwhile can make the plan stale, or fail it) and
/// nothing is fetched: a version whose trees are not in this store is an error
/// ([`Error::MissingObject`]).
///
/// # Errors
/// As [`super::checkout`] before it changes anything: revision errors,
/// [`Error::VersionRemoved`], [`Error::UnsafePath`], [`Error::NotADirectory`],
/// [`Error::PartialCheckoutIntoWorkspace`], [`Error::Io`] (`ENAMETOOLONG`) for a path longer
/// than the system opens, [`Error::NoSpace`] when the directory's file system lacks the room
/// the checkout needs, reading the trees, the directory and its files; conflicts are no
/// error (the plan lists them).
pub fn plan_checkout(
    store: &Store,
    revision: &Revision,
    dir: &Path,
    options: &CheckoutOptions,
    progress: &dyn Progress,
) -> Result<CheckoutPlan> {
    crate::walk::check_workspace_dir(dir)?;
    progress.phase("reading the version");
    let (version_id, record) = super::resolve(store, revision)?;
    let tree_catalog = crate::catalog::Catalog::open_reader(store.catalog().path())?;
    let trees = &mut store.reader_through(&tree_catalog);
    let target = Target::new(trees, &record.version, options, revision)?;
    let shape = super::check_target(trees, &target, &record.version)?;
    let (dir, decisions) = if dir.exists() {
        if !dir.is_dir() {
            return Err(Error::NotADirectory {
                path: dir.to_path_buf(),
            });
        }
        let (dir, key) = crate::workspace::canonical_dir(dir)?;
        // Refused as the checkout refuses them, before its plan: paths too long for the
        // system, and a target larger than the room the file system has (below).
        super::refuse_too_long(&dir, &shape.longest)?;
        let decisions =
            super::decide(store, &tree_catalog, &target, &dir, &key, options, progress)?;
        (dir, decisions)
    } else {
        (
            dir.to_path_buf(),
            Decisions::nothing_on_disk(shape.room.inodes),
        )
    };
    decisions.check_decided(shape.room.inodes, &dir)?;
    // The checkout stops at its conflicts first, then at the room it lacks: in the
    // directory, or for one it would create, in the nearest directory above it that exists
    // (the file system the checkout would write to).
    // (A relative path's last ancestor is empty: the current directory.)
    let room_dir = dir
        .ancestors()
        .map(|p| {
            if p.as_os_str().is_empty() {
                Path::new(".")
            } else {
                p
            }
        })
        .find(|p| p.is_dir());
    if decisions.conflicts.is_empty()
        && let Some(room_dir) = room_dir
    {
        shape
            .room
            .check(&crate::beneath::BeneathDir::open(room_dir)?, &decisions)?;
    }
    let (files, bytes) = target.counts();
    let mut plan = CheckoutPlan {
        dataset: revision.dataset.clone(),
        version: version_id,
        dir,
        partial: target.is_partial(),
        files,
        bytes,
        write: 0,
        bytes_to_write: 0,
        unchanged: decisions.unchanged,
        carried: decisions.carried,
        delete: (decisions.delete_files.len() + decisions.delete_trees.len()) as u64,
        conflicts: decisions.conflicts.len() as u64,
        refused: !decisions.conflicts.is_empty(),
        paths: Vec::new(),
    };
    plan.paths = planned_paths(target.walk(trees)?, &decisions, &mut plan)?;
    Ok(plan)
}

/// The paths of the plan, in path order, from the target's walk and `decisions`; counts the
/// files and bytes to write into `plan`.
fn planned_paths(
    target: EntryWalk<'_>,
    decisions: &Decisions,
    plan: &mut CheckoutPlan,
) -> Result<Vec<PlannedPath>> {
    let conflicts: std::collections::HashSet<&str> =
        decisions.conflicts.iter().map(String::as_str).collect();
    let mut paths: BTreeMap<String, Action> = BTreeMap::new();
    let mut note = |path: &str, action: Action| {
        let action = if conflicts.contains(path) {
            Action::Conflict
        } else {
            action
        };
        // The target's decision comes first (a directory written over a file is a
        // replacement, not a deletion); a conflict anywhere wins.
        paths
            .entry(path.to_string())
            .and_modify(|a| {
                if action == Action::Conflict {
                    *a = action;
                }
            })
            .or_insert(action);
    };
    for (index, entry) in target.enumerate() {
        let entry: FlatEntry = entry?;
        let is_dir = entry.kind == FlatKind::Dir;
        let action = match decisions.decision(index) {
            Decision::Keep | Decision::Undecided => continue,
            Decision::Carry => Action::Carry,
            Decision::Write => Action::Write,
            Decision::Replace => Action::Replace,
        };
        if !is_dir && matches!(action, Action::Write | Action::Replace) {
            plan.write += 1;
            plan.bytes_to_write += entry.size;
        }
        // A directory written where nothing is goes without saying: its files are listed.
        if !(is_dir && action == Action::Write) {
            note(&entry.path, action);
        }
    }
    for path in &decisions.delete_files {
        note(path, Action::Delete);
    }
    for path in &decisions.delete_trees {
        note(path, Action::DeleteTree);
    }
    for path in &decisions.prune_dirs {
        note(path, Action::Prune);
    }
    for path in &decisions.conflicts {
        note(path, Action::Conflict);
    }
    let mut paths: Vec<PlannedPath> = paths
        .into_iter()
        .map(|(path, action)| PlannedPath { path, action })
        .collect();
    paths.sort_by(|a, b| crate::walk::path_order(&a.path, &b.path));
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::progress::NoProgress;

    /// Every file under `dir`, path -> content.
    fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
        let mut out = BTreeMap::new();
        let mut pending = vec![dir.to_path_buf()];
        while let Some(next) = pending.pop() {
            for entry in std::fs::read_dir(&next).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    pending.push(path);
                } else {
                    out.insert(path.clone(), std::fs::read(&path).unwrap());
                }
            }
        }
        out
    }

    #[test]
    fn the_plan_lists_each_path_and_leaves_the_directory_as_it_was() {
        let temp = tempfile::tempdir().unwrap();
        let mut store = Store::init(&temp.path().join("store")).unwrap();
        let work = temp.path().join("work");
        let write = |path: &str, content: &str| {
            let path = work.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        };
        write("a", "1");
        write("b", "2");
        let commit = |store: &mut Store| {
            let options = crate::ops::commit::CommitOptions::new("d");
            crate::ops::commit::commit(store, &work, &options, &NoProgress)
                .unwrap()
                .version
        };
        let first = commit(&mut store);
        write("a", "1 new");
        std::fs::remove_file(work.join("b")).unwrap();
        write("c/d", "3");
        commit(&mut store);
        // The user edits c/d; back to the first version, which lacks it: a conflict.
        write("c/d", "mine");
        // The directory, byte for byte (the store's own files are the CLI test's: a catalog
        // read by a second connection of this process may be checkpointed meanwhile).
        let before = files(&work);
        let revision = Revision::parse(&format!("d@{}", first.to_hex())).unwrap();
        let options = CheckoutOptions::default();
        let plan = plan_checkout(&store, &revision, &work, &options, &NoProgress).unwrap();
        let paths: Vec<(&str, Action)> = plan
            .paths
            .iter()
            .map(|p| (p.path.as_str(), p.action))
            .collect();
        assert_eq!(
            paths,
            [
                ("a", Action::Replace),
                ("b", Action::Write),
                ("c", Action::Prune),
                ("c/d", Action::Conflict),
            ]
        );
        assert!(plan.refused);
        assert_eq!((plan.write, plan.bytes_to_write, plan.delete), (2, 2, 1));
        assert!(files(&work) == before, "the directory changed");
        // Into a directory that does not exist: everything written, nothing made.
        let fresh = temp.path().join("fresh");
        let plan = plan_checkout(&store, &revision, &fresh, &options, &NoProgress).unwrap();
        assert_eq!(plan.write, 2);
        assert!(!plan.refused && !fresh.exists());
    }
}
