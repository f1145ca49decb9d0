//! Checkout's plan phase (steps 5-6 of [`super`]): one pass over the directory beside its
//! stat cache, merged with walks of the target and of the version checked out there before,
//! decides what to keep, delete and carry over, and which paths are conflicts. It changes
//! nothing: its result is a plain [`Decisions`].

use std::path::{Path, PathBuf};

use super::EntryWalk;
use crate::beneath::BeneathDir;
use crate::catalog::StatEntry;
use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::ops::disk::{DiskItem, DiskStream, hash_files};
use crate::progress::Progress;
use crate::store::Store;
use crate::tree::{self, FlatEntry, FlatKind};
use crate::walk::{ScanEntry, ScanKind};
use crate::workspace;

/// Room on disk that entries take: inodes, and bytes with each file rounded up to whole
/// 4 KiB blocks (the block of ext4, XFS and tmpfs by default) and a block a directory.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Room {
    pub(super) inodes: u64,
    pub(super) bytes: u64,
}

/// The bytes `kind` of `size` bytes takes on disk, by [`Room`]'s rule.
fn entry_blocks(kind: &FlatKind, size: u64) -> u64 {
    const BLOCK: u64 = 4096;
    match kind {
        FlatKind::File { .. } => size.div_ceil(BLOCK).saturating_mul(BLOCK),
        FlatKind::Dir => BLOCK,
        FlatKind::Symlink { .. } => 0,
    }
}

impl Room {
    /// Counts `entry` in.
    pub(super) fn add(&mut self, entry: &FlatEntry) {
        self.inodes += 1;
        self.bytes = self
            .bytes
            .saturating_add(entry_blocks(&entry.kind, entry.size));
    }

    fn remove(&mut self, bytes: u64) {
        self.inodes = self.inodes.saturating_sub(1);
        self.bytes = self.bytes.saturating_sub(bytes);
    }

    /// Checks that the file system of `root` has room for what `self` (the whole target)
    /// takes beyond what `plan` keeps.
    ///
    /// # Errors
    /// [`Error::NoSpace`]; [`Error::Io`] when the file system cannot be asked.
    pub(super) fn check(&self, root: &BeneathDir, plan: &Decisions) -> Result<()> {
        let needed_bytes = self.bytes.saturating_sub(plan.kept_room.bytes);
        let needed_inodes = self.inodes.saturating_sub(plan.kept_room.inodes);
        let stat = root.file_system()?;
        let free_bytes = stat.blocks_available().saturating_mul(stat.fragment_size());
        let free_inodes = stat.files_available();
        // A file system that counts no inodes at all (btrfs) has no inode limit to check.
        let inodes_counted = stat.files() > 0;
        if needed_bytes > free_bytes || (inodes_counted && needed_inodes > free_inodes) {
            return Err(Error::NoSpace {
                dir: root.path().to_path_buf(),
                needed_bytes,
                needed_inodes,
                free_bytes,
                free_inodes,
            });
        }
        Ok(())
    }
}

/// What a checkout does with one entry of the target (by its position in the target's walk),
/// decided by [`plan`]: one byte an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Decision {
    /// Not decided yet: [`Decisions::check_decided`] refuses a plan that leaves one.
    #[default]
    Undecided,
    /// Written where the disk has nothing (staged, then renamed into place).
    Write,
    /// Written over what the disk has there (a file or symlink renamed over, a file or a
    /// directory tree deleted first); a conflict unless recoverable (`conflicts` says).
    Replace,
    /// Already on disk as the target wants it: left untouched.
    Keep,
    /// The user's change carried over (the target has what the old version had there):
    /// left as the user has it.
    Carry,
}

impl Decision {
    /// Whether the entry is left as the disk has it (kept or carried over).
    pub(super) fn is_kept(self) -> bool {
        matches!(self, Decision::Keep | Decision::Carry)
    }
}

/// What a checkout will do to its directory, decided before anything changes. The files
/// and symlinks to write are the target's entries not kept (`decisions`): the target is walked
/// again by each later step rather than held here. Renames are implied: each written entry
/// is staged under a temporary name and renamed onto its path.
#[derive(Debug, Default)]
pub(super) struct Decisions {
    /// Files and symlinks to remove (not in the target, or where the target has a directory).
    pub(super) delete_files: Vec<String>,
    /// Directories to remove with their contents (the target has a file there).
    pub(super) delete_trees: Vec<String>,
    /// Directories of the old version to remove if they end up empty.
    pub(super) prune_dirs: Vec<String>,
    /// By position in the target's walk: what becomes of the entry. One byte a target entry.
    pub(super) decisions: Vec<Decision>,
    /// Files and symlinks kept.
    pub(super) unchanged: u64,
    /// What the kept entries take on disk: not written again.
    pub(super) kept_room: Room,
    /// Uncommitted changes carried over: paths where the disk differs from the old version
    /// and the target has what the old version had, left as they are.
    pub(super) carried: u64,
    /// Stat cache entries for the kept files that were hashed (they hold the target's
    /// content, which the store holds); `None`: the stat was racy, or the file read no longer
    /// had it, and the path's entry goes.
    pub(super) hashed: Vec<(String, Option<StatEntry>)>,
    /// Paths whose stat cache entry goes: the target has no file there.
    pub(super) uncache: Vec<String>,
    /// dsv's temporary files and directories found (`.dsv-tmp-<pid>-<n>`).
    pub(super) leftovers: Vec<PathBuf>,
    /// Paths where uncommitted changes (or what no version holds) would be overwritten or
    /// deleted, in path order, each once (for a directory, the directory itself): the
    /// checkout is refused unless this is empty ([`Decisions::refuse_conflicts`]).
    pub(super) conflicts: Vec<String>,
}

impl Decisions {
    /// The plan of a checkout into a directory that does not exist: each of the target's
    /// `entries` entries written, nothing else.
    pub(super) fn nothing_on_disk(entries: u64) -> Decisions {
        Decisions {
            decisions: vec![Decision::Write; entries as usize],
            ..Decisions::default()
        }
    }

    /// Decides the target's entry at position `index` of its walk: `decision`. An entry
    /// decided again (a directory kept, then written for what is written below it) takes
    /// the later decision.
    fn decide_entry(&mut self, index: usize, entry: &FlatEntry, decision: Decision) {
        if self.decisions.len() <= index {
            self.decisions.resize(index + 1, Decision::Undecided);
        }
        let was = std::mem::replace(&mut self.decisions[index], decision);
        match (was.is_kept(), decision.is_kept()) {
            (false, true) => self.kept_room.add(entry),
            (true, false) => self.kept_room.remove(entry_blocks(&entry.kind, entry.size)),
            _ => {}
        }
    }

    /// Keeps the target's entry `entry`, at position `index` of its walk, as the disk has it.
    fn keep_entry(&mut self, index: usize, entry: &FlatEntry) {
        self.decide_entry(index, entry, Decision::Keep);
    }

    /// Whether the target's entry at position `index` of its walk is left as the disk has
    /// it (kept or carried over).
    pub(super) fn kept(&self, index: usize) -> bool {
        self.decision(index).is_kept()
    }

    /// The decision on the target's entry at position `index` of its walk.
    pub(super) fn decision(&self, index: usize) -> Decision {
        self.decisions.get(index).copied().unwrap_or_default()
    }

    /// Checks that every one of the target's `entries` entries got a decision (and no entry
    /// past them did): the plan's pass met each entry of the target's walk exactly where the
    /// merge with the directory put it.
    ///
    /// # Errors
    /// [`Error::Corrupt`] naming the first entry left undecided (a bug, never the data's).
    pub(super) fn check_decided(&self, entries: u64, dir: &Path) -> Result<()> {
        let undecided = self
            .decisions
            .iter()
            .position(|d| *d == Decision::Undecided)
            .or_else(|| (self.decisions.len() as u64 != entries).then_some(self.decisions.len()));
        match undecided {
            None => Ok(()),
            Some(index) => Err(Error::corrupt(
                dir,
                format!(
                    "the checkout's plan decided {} of the target's {entries} entries (entry {index} undecided); nothing was changed",
                    self.decisions.len()
                ),
            )),
        }
    }

    /// The paths the plan removes (trees, then files and symlinks).
    pub(super) fn removed(&self) -> Vec<&str> {
        self.delete_trees
            .iter()
            .chain(&self.delete_files)
            .map(String::as_str)
            .collect()
    }

    /// The plan's conflicts as the error a checkout into `dir` stops with.
    ///
    /// # Errors
    /// [`Error::Conflict`] (up to 10 paths, in path order) when there are conflicts.
    pub(super) fn refuse_conflicts(&self, dir: &Path) -> Result<()> {
        if self.conflicts.is_empty() {
            return Ok(());
        }
        Err(Error::Conflict {
            dir: dir.to_path_buf(),
            paths: self.conflicts.iter().take(10).cloned().collect(),
            total: self.conflicts.len(),
        })
    }
}

/// What [`plan`] compares: the directory `dir` beside the stat cache of workspace
/// `cache_of`, the walks of the target and of the old version (the version checked out
/// there before; empty for none), and the options that change the decisions (`force`) or
/// the work (`jobs`, hashing threads).
pub(super) struct PlanInput<'w> {
    pub(super) dir: &'w Path,
    pub(super) cache_of: Option<i64>,
    pub(super) target: EntryWalk<'w>,
    pub(super) old: EntryWalk<'w>,
    pub(super) force: bool,
    pub(super) jobs: usize,
}

/// Decides what to delete and keep, noting (unless `force`) as conflicts what would lose
/// anything that exists nowhere else, in one pass over the directory `dir` beside the stat
/// cache of workspace `cache_of` ([`DiskStream`], every entry: checkout sees what
/// `.dsvignore` hides, so an ignored file in the way of one a version writes is protected
/// as any untracked file is), merged with walks of `target` and of `old` (the version
/// checked out here before), all in path order. Each batch of the walk hashes, on `jobs`
/// threads, the files whose content matters (the target or the old version names them)
/// that the cache does not vouch for. Reads the directory, the stat cache and the trees;
/// changes nothing.
///
/// A disk entry may be overwritten or deleted when it is "recoverable": it is what the old
/// (live) version had there, so no change of the user's is lost. Anything else is the user's
/// work, whatever bytes it holds (a file replaced by another file's content, moved or copied
/// is a change as much as an edit): where the target has at that path what the old version
/// had, the change is carried over (left as it is); where the target has something else, it
/// is a conflict unless `force`. The same holds for an entry of the old version the user
/// deleted: the deletion is carried over where the target has the same entry, and a
/// conflict where the target has another file or symlink there. This is git's rule for a
/// checkout that switches branches over uncommitted changes.
///
/// # Errors
/// Walking the directory, reading the cache or the trees, hashing; [`Error::Interrupted`].
pub(super) fn plan(
    store: &Store,
    input: PlanInput<'_>,
    progress: &dyn Progress,
) -> Result<Decisions> {
    let PlanInput {
        dir,
        cache_of,
        target,
        old,
        force,
        jobs,
    } = input;
    let started_ns = workspace::now_ns();
    progress.phase("scanning");
    let mut stream = DiskStream::start(dir, store.catalog().path(), cache_of, &[], false)?;
    let mut planner = Planner {
        force,
        target: tree::Cursor::new(target),
        old: tree::Cursor::new(old),
        plan: Decisions::default(),
        replacing: None,
        replaced: Vec::new(),
        absent: Absent {
            force,
            held: Vec::new(),
        },
    };
    while let Some(batch) = stream.next_batch()? {
        crate::interrupt::check()?;
        let named = planner.name(&batch)?;
        let (ids, fresh) = identify(dir, &batch, &named, started_ns, jobs, progress)?;
        for (i, (item, named)) in batch.iter().zip(&named).enumerate() {
            planner.decide(item, ids[i], fresh[i].as_ref(), named);
        }
    }
    planner.finish(dir, stream)
}

/// For a file hashed by the plan, its fresh stat cache entry (`None` inside: a racy stat,
/// or the file read no longer had the walk's stat); `None`: not hashed.
type Fresh = Option<Option<StatEntry>>;

/// What the target (with its position in the walk) and the old version have at a path.
type Named = (Option<(usize, FlatEntry)>, Option<FlatEntry>);

/// The state of [`plan`]'s pass.
struct Planner<'w> {
    force: bool,
    target: tree::Cursor<EntryWalk<'w>>,
    old: tree::Cursor<EntryWalk<'w>>,
    plan: Decisions,
    /// A directory where the target has a file, while the entries below it pass: its path,
    /// and whether one of them is not recoverable.
    replacing: Option<(String, bool)>,
    replaced: Vec<(String, bool)>,
    absent: Absent,
}

/// Whether the disk entry `entry`, of content `id`, is the listing entry `flat`.
fn same(entry: &ScanEntry, id: Option<ObjectId>, flat: &FlatEntry) -> bool {
    match (&entry.kind, &flat.kind) {
        (ScanKind::Dir, FlatKind::Dir) => true,
        (ScanKind::File { executable: a }, FlatKind::File { executable: b }) => {
            a == b && id == Some(flat.id)
        }
        (ScanKind::Symlink { target: a }, FlatKind::Symlink { target: b }) => a == b,
        _ => false,
    }
}

impl Planner<'_> {
    /// Whether the disk entry may be overwritten or deleted: it is the old version's entry
    /// (or `force`).
    fn recoverable(
        &self,
        entry: &ScanEntry,
        id: Option<ObjectId>,
        old: Option<&FlatEntry>,
    ) -> bool {
        self.force || old.is_some_and(|o| same(entry, id, o))
    }

    /// Whether the target keeps what the old version had at a path: a change the user made
    /// there is carried over.
    fn carries(&self, in_target: &FlatEntry, in_old: Option<&FlatEntry>) -> bool {
        !self.force && in_old.is_some_and(|o| same_entry(o, in_target))
    }

    /// What the target and the old version have at each path of `batch`; the target's
    /// entries the disk lacks are decided as they pass.
    fn name(&mut self, batch: &[DiskItem]) -> Result<Vec<Named>> {
        let mut named = Vec::with_capacity(batch.len());
        for item in batch {
            let path = item.entry.path.as_str();
            let (old, absent, plan) = (&mut self.old, &mut self.absent, &mut self.plan);
            let in_target = self
                .target
                .seek_passing(path, |index, entry| {
                    let in_old = old.seek(&entry.path)?.map(|(_, e)| e.clone());
                    absent.pass(plan, index, &entry, in_old.as_ref());
                    Ok(())
                })?
                .map(|(index, e)| (index, e.clone()));
            let in_old = self.old.seek(path)?.map(|(_, e)| e.clone());
            self.absent.leave(path);
            // A file or symlink where the target keeps the old version's directory: the
            // user's, carried over, so nothing the target adds below it can be written.
            if let Some((_, t)) = &in_target
                && t.kind == FlatKind::Dir
                && item.entry.kind != ScanKind::Dir
                && self.carries(t, in_old.as_ref())
            {
                self.absent.held.push((path.to_string(), None));
            }
            named.push((in_target, in_old));
        }
        Ok(named)
    }

    /// Decides the disk entry `item` of content `id` (`fresh`: it was hashed now, with its
    /// fresh cache entry), given what the target and the old version have at its path.
    fn decide(
        &mut self,
        item: &DiskItem,
        id: Option<ObjectId>,
        fresh: Option<&Option<StatEntry>>,
        (in_target, in_old): &Named,
    ) {
        let entry = &item.entry;
        let is_dir = entry.kind == ScanKind::Dir;
        self.note_replaced(entry, id, in_old.as_ref());
        match in_target {
            Some((index, t)) if same(entry, id, t) => {
                self.plan.keep_entry(*index, t);
                if !is_dir {
                    self.plan.unchanged += 1;
                }
                // A kept file holds the target's content, which is in the store.
                if let Some(cached) = fresh {
                    self.plan.hashed.push((entry.path.clone(), *cached));
                }
            }
            Some((index, t)) if self.carries(t, in_old.as_ref()) => {
                // The user's change, where the target keeps what the old version had.
                self.plan.decide_entry(*index, t, Decision::Carry);
                self.plan.carried += 1;
            }
            Some((index, t)) if is_dir => {
                debug_assert!(t.kind != FlatKind::Dir);
                self.plan.decide_entry(*index, t, Decision::Replace);
                // A directory where the target has a file: all it holds must be
                // recoverable (decided as its entries pass), and it must hold nothing
                // the walk does not see (decided at the end).
                self.plan.delete_trees.push(entry.path.clone());
                // A directory where the old version had a file or symlink is the user's
                // change, even an empty one (a deleted file hidden by a directory).
                let replaced_by_user =
                    !self.force && in_old.as_ref().is_some_and(|o| o.kind != FlatKind::Dir);
                self.replacing = Some((entry.path.clone(), replaced_by_user));
            }
            Some((index, t)) => {
                self.plan.decide_entry(*index, t, Decision::Replace);
                if !self.recoverable(entry, id, in_old.as_ref()) {
                    self.plan.conflicts.push(entry.path.clone());
                }
                // A file or symlink is replaced by renaming over it; only a directory
                // needs room.
                if t.kind == FlatKind::Dir {
                    self.plan.delete_files.push(entry.path.clone());
                }
            }
            None if is_dir => {
                if in_old.is_some() {
                    self.plan.prune_dirs.push(entry.path.clone());
                }
            }
            None => {
                if in_old.is_some() {
                    if !self.recoverable(entry, id, in_old.as_ref()) {
                        self.plan.conflicts.push(entry.path.clone());
                    }
                    self.plan.delete_files.push(entry.path.clone());
                }
            }
        }
        // The cache keeps entries only where the disk holds the target's file.
        if item.in_cache
            && !in_target.as_ref().is_some_and(|(index, t)| {
                matches!(t.kind, FlatKind::File { .. })
                    && !carried(&self.plan, *index, entry, id, t)
            })
        {
            self.plan.uncache.push(entry.path.clone());
        }
    }

    /// Closes the directory being replaced once `entry` is not below it, and notes whether
    /// `entry`, below it, is not recoverable.
    fn note_replaced(
        &mut self,
        entry: &ScanEntry,
        id: Option<ObjectId>,
        in_old: Option<&FlatEntry>,
    ) {
        let path = entry.path.as_str();
        if let Some((top, _)) = &self.replacing
            && !path
                .strip_prefix(top.as_str())
                .is_some_and(|rest| rest.starts_with('/'))
        {
            self.replaced.extend(self.replacing.take());
        }
        if entry.kind != ScanKind::Dir && self.replacing.as_ref().is_some_and(|(_, dirty)| !*dirty)
        {
            let dirty = !self.recoverable(entry, id, in_old);
            if let Some((_, was)) = &mut self.replacing {
                *was = dirty;
            }
        }
    }

    /// Decides the target's entries after the directory's last, notes what the walk found
    /// besides entries (leftovers, nested stores, cache rows without an entry), and checks
    /// that each directory the target replaces holds nothing the walk did not see (a nested
    /// store, a running checkout's temporary files: never deleted, not even with force).
    fn finish(mut self, dir: &Path, stream: DiskStream) -> Result<Decisions> {
        let (old, absent, plan) = (&mut self.old, &mut self.absent, &mut self.plan);
        self.target.drain(|index, entry| {
            let in_old = old.seek(&entry.path)?.map(|(_, e)| e.clone());
            absent.pass(plan, index, &entry, in_old.as_ref());
            Ok(())
        })?;
        self.replaced.extend(self.replacing.take());
        let (leftovers, stores, uncached_rows) = stream.finish();
        let mut plan = self.plan;
        plan.uncache.extend(uncached_rows);
        let live = |leftover: &PathBuf| {
            let owner = leftover
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(crate::walk::temp_owner);
            owner.is_some_and(crate::walk::process_alive)
        };
        for (path, dirty) in self.replaced {
            let prefix = format!("{path}/");
            let hidden = stores.iter().any(|s| s.starts_with(&prefix))
                || leftovers
                    .iter()
                    .any(|l| l.starts_with(dir.join(&path)) && live(l));
            if hidden || (dirty && !self.force) {
                plan.conflicts.push(path);
            }
        }
        plan.leftovers = leftovers;
        plan.conflicts.sort_by(|a, b| crate::walk::path_order(a, b));
        plan.conflicts.dedup();
        Ok(plan)
    }
}

/// The content ids of `batch`'s entries (by [`DiskItem::id`]: the cache vouches for the old
/// version's content, the version the workspace holds), hashing, on `jobs` threads, the
/// files the cache does not vouch for whose content matters (the target or the old version
/// names them); and for each file hashed, its fresh stat cache entry (`None` inside: a racy
/// stat, or the file read no longer had the walk's stat). Reads files; changes nothing.
fn identify(
    dir: &Path,
    batch: &[DiskItem],
    named: &[Named],
    started_ns: i64,
    jobs: usize,
    progress: &dyn Progress,
) -> Result<(Vec<Option<ObjectId>>, Vec<Fresh>)> {
    let mut ids: Vec<Option<ObjectId>> = batch
        .iter()
        .zip(named)
        .map(|(item, (_, in_old))| item.id(in_old.as_ref()))
        .collect();
    let to_hash: Vec<(usize, &ScanEntry)> = batch
        .iter()
        .enumerate()
        .filter(|(i, item)| {
            matches!(item.entry.kind, ScanKind::File { .. })
                && ids[*i].is_none()
                && (named[*i].0.is_some() || named[*i].1.is_some())
        })
        .map(|(i, item)| (i, &item.entry))
        .collect();
    let mut fresh: Vec<Fresh> = vec![None; batch.len()];
    if !to_hash.is_empty() {
        let hashed = hash_files(dir, &to_hash, started_ns, jobs, progress)?;
        for ((i, _), (id, cached)) in to_hash.iter().zip(hashed) {
            ids[*i] = Some(id);
            fresh[*i] = Some(cached);
        }
    }
    Ok((ids, fresh))
}

/// Whether two entries of versions are the same: kind, executable bit and file id, or link
/// target.
fn same_entry(a: &FlatEntry, b: &FlatEntry) -> bool {
    a.kind == b.kind && (!matches!(a.kind, FlatKind::File { .. }) || a.id == b.id)
}

/// Whether the target's entry at `index`, kept, is a change of the user's carried over (the
/// disk entry differs from it).
fn carried(
    plan: &Decisions,
    index: usize,
    entry: &ScanEntry,
    id: Option<ObjectId>,
    t: &FlatEntry,
) -> bool {
    plan.kept(index)
        && !matches!((&entry.kind, &t.kind), (ScanKind::File { executable: a }, FlatKind::File { executable: b }) if a == b && id == Some(t.id))
}

/// The target's entries the disk lacks, decided in path order as the plan passes them.
struct Absent {
    force: bool,
    /// The open ancestors (in path order) of what passes that the user removed and the
    /// plan keeps removed: a directory of the target the disk lacks (with its position, kept
    /// unless something below it is written), or a file or symlink the user put where the
    /// target keeps the old version's directory (`None`: nothing can be written below it).
    held: Vec<(String, Option<usize>)>,
}

impl Absent {
    /// Closes the held ancestors that `path` is not below.
    fn leave(&mut self, path: &str) {
        while self.held.last().is_some_and(|(top, _)| {
            !path
                .strip_prefix(top.as_str())
                .is_some_and(|rest| rest.starts_with('/'))
        }) {
            self.held.pop();
        }
    }

    /// Decides the target's entry at position `index`, which the disk lacks: the user's
    /// deletion is carried over where the target has what the old version had there
    /// (`in_old`), a conflict where the target has another file or symlink there, and
    /// otherwise the entry is written (its held ancestors with it).
    fn pass(
        &mut self,
        plan: &mut Decisions,
        index: usize,
        entry: &FlatEntry,
        in_old: Option<&FlatEntry>,
    ) {
        self.leave(&entry.path);
        if let Some(old) = in_old
            && !self.force
        {
            if same_entry(old, entry) {
                if entry.kind == FlatKind::Dir {
                    plan.keep_entry(index, entry);
                    self.held.push((entry.path.clone(), Some(index)));
                } else {
                    plan.decide_entry(index, entry, Decision::Carry);
                    plan.carried += 1;
                }
                return;
            }
            if old.kind != FlatKind::Dir && entry.kind != FlatKind::Dir {
                plan.conflicts.push(entry.path.clone());
            }
        }
        plan.decide_entry(index, entry, Decision::Write);
        // Written: every held ancestor must exist.
        for (path, kept) in &self.held {
            match kept {
                Some(position) => {
                    if plan.kept(*position) {
                        let dir = FlatEntry {
                            path: path.clone(),
                            kind: FlatKind::Dir,
                            size: 0,
                            id: ObjectId([0; 32]),
                        };
                        plan.decide_entry(*position, &dir, Decision::Write);
                    }
                }
                None => plan.conflicts.push(path.clone()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::progress::NoProgress;

    /// Writes `files` (path, content) into `dir`, made empty first.
    fn write(dir: &Path, files: &[(&str, &str)]) {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).unwrap();
        for (path, content) in files {
            let path = dir.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        }
    }

    /// A version of dataset `d` holding `files`, committed from a scratch directory; its
    /// listing in path order.
    fn version(store: &mut Store, scratch: &Path, files: &[(&str, &str)]) -> Vec<FlatEntry> {
        write(scratch, files);
        let options = crate::ops::commit::CommitOptions::new("d");
        let report = crate::ops::commit::commit(store, scratch, &options, &NoProgress).unwrap();
        let version = store.reader().version(&report.version).unwrap();
        tree::flatten_version(&mut store.reader(), &version).unwrap()
    }

    /// The plan of a checkout of `target` into `dir`, which held `old` (no stat cache: every
    /// file named is hashed).
    fn plan_of(
        store: &Store,
        dir: &Path,
        target: &[FlatEntry],
        old: &[FlatEntry],
        force: bool,
    ) -> Decisions {
        fn walk(entries: &[FlatEntry]) -> EntryWalk<'_> {
            Box::new(entries.iter().cloned().map(Ok))
        }
        let input = PlanInput {
            dir,
            cache_of: None,
            target: walk(target),
            old: walk(old),
            force,
            jobs: 2,
        };
        let plan = plan(store, input, &NoProgress).unwrap();
        plan.check_decided(target.len() as u64, dir).unwrap();
        plan
    }

    /// Whether the plan keeps the target's entry at `path` (else it is written).
    fn kept(plan: &Decisions, target: &[FlatEntry], path: &str) -> bool {
        let index = target.iter().position(|e| e.path == path).unwrap();
        plan.kept(index)
    }

    /// A store, the old version, the target, and the checkout directory holding the old
    /// version.
    struct Scene {
        _temp: tempfile::TempDir,
        store: Store,
        old: Vec<FlatEntry>,
        target: Vec<FlatEntry>,
        dir: PathBuf,
    }

    const OLD: &[(&str, &str)] = &[
        ("a", "1"),
        ("b", "2"),
        ("c", "3"),
        ("d", "4"),
        ("sub/e", "5"),
        ("x", "6"),
    ];

    fn scene(target: &[(&str, &str)]) -> Scene {
        let temp = tempfile::tempdir().unwrap();
        let mut store = Store::init(&temp.path().join("store")).unwrap();
        let scratch = temp.path().join("scratch");
        let old = version(&mut store, &scratch, OLD);
        let target = version(&mut store, &scratch, target);
        let dir = temp.path().join("work");
        write(&dir, OLD);
        Scene {
            _temp: temp,
            store,
            old,
            target,
            dir,
        }
    }

    #[test]
    fn a_modified_file_the_target_changes_is_a_conflict_and_the_rest_is_decided() {
        let s = scene(&[
            ("a", "1"),
            ("b", "2 new"),
            ("c", "3"),
            ("d", "4 new"),
            ("sub/e", "5"),
        ]);
        // The user edits d, deletes c, and adds an untracked file.
        std::fs::write(s.dir.join("d"), "mine").unwrap();
        std::fs::remove_file(s.dir.join("c")).unwrap();
        std::fs::write(s.dir.join("untracked"), "u").unwrap();
        let plan = plan_of(&s.store, &s.dir, &s.target, &s.old, false);
        assert_eq!(plan.conflicts, ["d"]);
        // Unchanged: kept. Unchanged on disk but changed by the target: written.
        assert!(kept(&plan, &s.target, "a") && kept(&plan, &s.target, "sub/e"));
        assert!(kept(&plan, &s.target, "sub"));
        assert!(!kept(&plan, &s.target, "b") && !kept(&plan, &s.target, "d"));
        assert_eq!(plan.unchanged, 2);
        // Deleted on purpose, and the target has what the old version had: stays deleted.
        assert!(kept(&plan, &s.target, "c"));
        assert_eq!(plan.carried, 1);
        // x is the old version's, gone from the target: deleted; the untracked file stays.
        assert_eq!(plan.delete_files, ["x"]);
        assert!(plan.delete_trees.is_empty() && plan.prune_dirs.is_empty());
        let error = plan.refuse_conflicts(&s.dir).unwrap_err();
        assert!(
            matches!(&error, Error::Conflict { paths, total: 1, .. } if paths == &["d"]),
            "{error:?}"
        );
    }

    #[test]
    fn a_deleted_file_is_written_back_only_when_the_target_changes_it() {
        let s = scene(&[
            ("a", "1 new"),
            ("b", "2"),
            ("c", "3"),
            ("d", "4"),
            ("x", "6"),
        ]);
        std::fs::remove_file(s.dir.join("a")).unwrap();
        std::fs::remove_file(s.dir.join("c")).unwrap();
        let plan = plan_of(&s.store, &s.dir, &s.target, &s.old, false);
        // c: deleted where the target keeps it, carried over. a: deleted where the target
        // has another file, a conflict (the deletion would be lost).
        assert_eq!(plan.conflicts, ["a"]);
        assert!(kept(&plan, &s.target, "c") && !kept(&plan, &s.target, "a"));
        assert_eq!(plan.carried, 1);
        // sub/ is the old version's and the target lacks it: pruned if left empty.
        assert_eq!(plan.delete_files, ["sub/e"]);
        assert_eq!(plan.prune_dirs, ["sub"]);
        assert!(plan.refuse_conflicts(&s.dir).is_err());
    }

    #[test]
    fn force_overwrites_and_writes_back_everything() {
        let s = scene(&[("a", "1 new"), ("c", "3"), ("d", "4 new")]);
        std::fs::write(s.dir.join("d"), "mine").unwrap();
        std::fs::remove_file(s.dir.join("c")).unwrap();
        let plan = plan_of(&s.store, &s.dir, &s.target, &s.old, true);
        assert!(plan.conflicts.is_empty());
        plan.refuse_conflicts(&s.dir).unwrap();
        // Nothing is carried over with force: c is written back, d overwritten.
        assert_eq!(plan.carried, 0);
        assert!(!kept(&plan, &s.target, "c") && !kept(&plan, &s.target, "d"));
        assert_eq!(plan.delete_files, ["b", "sub/e", "x"]);
    }

    #[test]
    fn a_file_deleted_from_the_target_but_edited_is_a_conflict() {
        let s = scene(&[("a", "1")]);
        std::fs::write(s.dir.join("b"), "mine").unwrap();
        let plan = plan_of(&s.store, &s.dir, &s.target, &s.old, false);
        assert_eq!(plan.conflicts, ["b"]);
        assert!(kept(&plan, &s.target, "a"));
        assert_eq!(plan.unchanged, 1);
    }

    #[test]
    fn a_directory_where_the_target_has_a_file_is_replaced_only_when_recoverable() {
        let s = scene(&[("a", "1"), ("sub", "now a file")]);
        let clean = plan_of(&s.store, &s.dir, &s.target, &s.old, false);
        assert!(clean.conflicts.is_empty());
        assert_eq!(clean.delete_trees, ["sub"]);
        std::fs::write(s.dir.join("sub/new"), "untracked").unwrap();
        let dirty = plan_of(&s.store, &s.dir, &s.target, &s.old, false);
        assert_eq!(dirty.conflicts, ["sub"]);
    }

    /// The decision on the target's entry at `path`.
    fn decision_at(plan: &Decisions, target: &[FlatEntry], path: &str) -> Decision {
        let index = target.iter().position(|e| e.path == path).unwrap();
        plan.decision(index)
    }

    #[test]
    fn every_entry_of_the_target_gets_its_own_decision() {
        let s = scene(&[
            ("a", "1"),
            ("b", "2 new"),
            ("c", "3"),
            ("new/f", "7"),
            ("sub/e", "5"),
        ]);
        std::fs::remove_file(s.dir.join("c")).unwrap();
        let plan = plan_of(&s.store, &s.dir, &s.target, &s.old, false);
        let decided: Vec<(&str, Decision)> = s
            .target
            .iter()
            .map(|e| (e.path.as_str(), decision_at(&plan, &s.target, &e.path)))
            .collect();
        assert_eq!(
            decided,
            [
                ("a", Decision::Keep),
                ("b", Decision::Replace),
                ("c", Decision::Carry),
                ("new", Decision::Write),
                ("new/f", Decision::Write),
                ("sub", Decision::Keep),
                ("sub/e", Decision::Keep),
            ]
        );
        assert_eq!(plan.delete_files, ["d", "x"]);
        // An entry left undecided (here: one more than the plan met) is refused.
        let error = plan
            .check_decided(s.target.len() as u64 + 1, &s.dir)
            .unwrap_err();
        assert!(matches!(error, Error::Corrupt { .. }), "{error:?}");
        let mut holed = Decisions::nothing_on_disk(3);
        holed.decisions[1] = Decision::Undecided;
        assert!(holed.check_decided(3, &s.dir).is_err());
        Decisions::nothing_on_disk(3)
            .check_decided(3, &s.dir)
            .unwrap();
    }

    #[test]
    fn a_directory_written_below_a_deleted_one_is_written_again() {
        // The user deleted sub/ (and sub/e); the target keeps sub/e and adds sub/g: the
        // deletion of sub/e is carried over, but sub/ must exist again for sub/g.
        let s = scene(&[("a", "1"), ("sub/e", "5"), ("sub/g", "8")]);
        std::fs::remove_dir_all(s.dir.join("sub")).unwrap();
        let plan = plan_of(&s.store, &s.dir, &s.target, &s.old, false);
        assert_eq!(decision_at(&plan, &s.target, "sub"), Decision::Write);
        assert_eq!(decision_at(&plan, &s.target, "sub/e"), Decision::Carry);
        assert_eq!(decision_at(&plan, &s.target, "sub/g"), Decision::Write);
        assert!(plan.conflicts.is_empty());
    }
}
