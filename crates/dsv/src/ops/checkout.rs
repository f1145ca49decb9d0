//! `checkout`: materialize a version into a directory, writing only what differs.
//!
//! 1. Plan: resolve → flatten the target tree → compare with what the directory holds (its
//!    previous version and stat cache, hashing only what the cache cannot vouch for) → refuse,
//!    listing them, if changes that exist nowhere else would be overwritten or deleted
//!    (unless `force`).
//! 2. Stage: write every file and symlink to write into a temporary name, in parallel, each
//!    checked against its file id: beside its destination when that directory exists and
//!    stays; inside a temporary directory under its own name when its directory is new (the
//!    topmost new directory of each new subtree is made under a temporary name beside its
//!    destination, and the subtree is written inside it). Nothing the user sees has changed
//!    yet: if stored data is corrupt, or the operation is interrupted, the temporaries are
//!    removed and the directory is as it was. A killed checkout leaves only temporary names,
//!    which the next checkout removes.
//! 3. Apply: delete what the target lacks, rename each staged subtree into place (one rename
//!    for all its files), create the remaining directories, rename the other staged files into
//!    place (stat each right after), remove directories left empty.
//! 4. Record: wait out the racy-timestamp margin once, re-stat what was written, and record
//!    the workspace's version and stat cache in one transaction. A file changed by someone
//!    else meanwhile is left out of the cache, so it is hashed next time.
//!
//! Untracked files (never committed, not in the target) are left alone.
//!
//! # Phases, step by step
//!
//! `ops/checkout.rs`, `checkout()`. Four phases: **plan** (decide everything, refuse
//! conflicts), **stage** (write every file and symlink to a temporary name and verify it),
//! **apply** (change the directory), **record** (one catalog transaction). Apply starts only
//! once every file is staged and verified; before it, the only visible changes are creating
//! DIR if it was missing, removing dead processes' temporary files, and the temporary
//! (`.dsv-tmp-<pid>-<n>`) names of what is being staged.
//!
//! The target version is never held whole: each step walks its trees again
//! (`tree::walk_version`, through a second catalog connection, `Catalog::open_reader`, so the
//! record step can walk while the store's connection writes), in path order
//! (`walk::path_order`), and keeps only what it decides (paths to delete, one keep byte per
//! target entry up to the last kept, one per file staged under a numbered name). The directory and the version checked out there before are not held either (steps 4-6 are
//! one pass).
//! Only a partial checkout holds its selection (`Target::Selected`), since a selection is
//! chosen from the whole listing.
//!
//! ## Plan
//!
//! 1. **Resolve** the revision (`revision.rs`) to a version id. A version marked removed
//!    (`removed_at`) is refused (`Error::VersionRemoved`). Load its catalog row.
//! 2. **Walk** the target's trees once to check them. This reads every tree through
//!    `ObjectReader`, which checks hashes and decodes (decoding refuses unsafe names). It also
//!    refuses symlinks whose targets are absolute or leave the tree (`Error::UnsafePath`).
//!    Any path with a component named `.dsv` or starting with `.dsv-tmp-` is refused too, and
//!    so is a symlink whose target passes through another symlink of the version
//!    (`tree::symlink_through_symlink` over the version's symlinks, see commit step 10). The
//!    walk keeps the symlinks and the longest path.
//! 3. **Create the directory** if missing (a path that exists but is not a directory is
//!    `NotADirectory`). Canonicalize it. If the longest path, joined to it, is longer than
//!    the system opens (PATH_MAX), stop with "File name too long" before anything is made.
//!    **Take the data lock** shared, then from it the workspace lock
//!    (`Store::lock_workspace`); both are held until the checkout returns.
//! 4. **Old state.** If the directory is a known workspace (the same directory as recorded:
//!    device, inode, birth time) and the version it holds is not removed, that version is
//!    walked beside the target (a reader of its own). A removed version's files are
//!    compared as untracked files: `gc` does not keep its content.
//! 5. **Disk state** (`plan()`). Walk the directory beside its stat cache (`DiskStream`,
//!    every entry: no `.dsvignore` is obeyed), a batch at a time, merged with the walks of
//!    the target and the old version (`tree::Cursor`, all in path order). The walk also gives
//!    the `.dsv-tmp-<pid>-<n>` files (`leftovers`) and the nested `.dsv` stores it did not
//!    enter (`stores`). Take file ids from the stat cache where it can be trusted. Hash, in
//!    parallel on `jobs` threads, a batch at a time, only files that are not trusted *and*
//!    are named by the target or the old version. Other untracked files are not hashed, and
//!    `Unsupported` entries get no id.
//! 6. **Plan** (`plan()`, in the same pass, entry by entry). The user's work is the tree, not
//!    the bytes (git's rule): a disk entry is *recoverable*, so it may be overwritten or
//!    deleted without `--force`, only when it equals the old version's entry at its path (same
//!    executable bit and id for a file, same link target for a symlink; the old version counts
//!    only when it is live). A file replaced by another file's content, moved or copied is a
//!    change even when the store holds its bytes. Where the disk differs from the old version
//!    and the target has what the old version had (`same_entry`), the change is *carried
//!    over*: the target's entry is kept as the user left it (`Plan::carried`), and its stat
//!    cache entry goes. The target's entries the disk lacks come from the same merge
//!    (`tree::Cursor::seek_passing`, `drain`) and are decided by `Absent::pass`: a deletion is
//!    carried over where the target has the old version's entry (a deleted directory stays
//!    deleted unless the target writes something below it), and is a conflict where the target
//!    has another file or symlink there. So a checkout that was interrupted and is run again
//!    finds the files it already wrote equal to the target. With `--force` everything is
//!    recoverable and nothing is carried over, except as noted for directories below. For
//!    each entry on disk:
//!
//!    | on disk | in target | action |
//!    | --- | --- | --- |
//!    | dir | dir | keep |
//!    | dir | file or symlink | remove the whole directory; conflict if any non-directory under it is not recoverable (files no version names are not hashed, so they are not). A directory that holds a nested `.dsv` store or a running process's `.dsv-tmp-<pid>-<n>` file (which the walk does not list) is a conflict even with `--force`. |
//!    | dir | absent | remove later, only if it was in the old version and ends up empty |
//!    | file equal to target (same executable bit and id) or symlink equal to target (same link target) | — | keep |
//!    | other file, symlink or `Unsupported` entry | file or symlink | replace by renaming over it; conflict unless recoverable |
//!    | file, symlink or `Unsupported` entry | dir | delete, then create the directory; conflict unless recoverable |
//!    | file, symlink or `Unsupported` entry | absent, but in the old version | delete; conflict unless recoverable |
//!    | anything other than the target's entry | what the old version has there | carried over: left alone |
//!    | file, symlink or `Unsupported` entry | absent, not in the old version | untracked: leave alone |
//!
//!    Every entry of the target gets a decision (`plan::Decision`: write where nothing is,
//!    replace what is there, keep, carry over the user's change), one byte an entry; a plan
//!    that left an entry undecided is refused before anything changes
//!    (`Decisions::check_decided`). `dsv checkout --dry-run` prints these decisions path by
//!    path ([`plan_checkout`]) and stops here.
//!
//!    If there are conflicts and `--force` was not given (or a directory holds a store or a
//!    temporary file), stop with `Error::Conflict`. It lists up to 10 paths in path order
//!    (for a directory, the directory itself). No file has been changed at that point. The
//!    same pass notes the stat cache entries to drop (paths where the target has no file) and
//!    the kept files it hashed (cached in step 11).
//! 7. **Make directories, count.** A walk of the target makes the staged subtrees' tops and
//!    the directories inside them (below), lists the target's directories that are not kept,
//!    and counts the files and bytes to write (the progress bar's totals). Where each file
//!    and symlink is staged (`Staging`):
//!    - **Inside a staged subtree** when its directory is new. Every directory the target adds
//!      where nothing is now, whose parent exists and stays, is the top of a new subtree: it is
//!      made under a temporary name `.dsv-tmp-<pid>-<n>` beside its destination, the
//!      directories below it are made inside it under their own names, and its files are
//!      written inside it under their own names. One rename in step 10 puts the whole subtree
//!      in place. (Renamed file by file, a checkout of 300,000 small files into an empty
//!      directory took 1.7x `cp -r`; staged at the top of the checkout directory, as before
//!      that, all files passed through one directory: 4x at 100,000. See docs/scale.md.)
//!      A subtree whose temporary name could make a path below it longer than the system
//!      opens (PATH_MAX; bounded by the version's longest path) is made in place instead, its
//!      files staged beside their destinations.
//!    - **Beside its destination**, under a temporary name, when the destination's directory
//!      exists now and the plan does not remove it.
//!    - **At the top of the checkout directory** otherwise (the same filesystem, so it can be
//!      renamed across directories later), or where a temporary name beside the destination
//!      would be too long.
//!
//!    A file staged under a numbered name gets the next number and one bit (beside its
//!    destination or at the top): with the walk, that is where every file was staged, which
//!    the later steps replay (`Replay`).
//!
//! ## Stage
//!
//! 8. **Leftovers.** Remove the `.dsv-tmp-<pid>-<n>` files and staged subtrees (directories,
//!    removed whole) found in step 5 whose process `<pid>` no longer runs (`/proc/<pid>` is absent); those of a live process are left, since
//!    it may be checking out into a nested directory.
//! 9. **Locate and write temporaries** (`stage_target()`, `stage()`), in rounds: a walk of
//!    the target finds the chunks of each file to write and where each is stored, on the
//!    calling thread (`ObjectReader::file_chunks`, which also checks the file map's lengths,
//!    see Layers (`store`)); every 32,768 files or 1 GiB (`STAGE_BATCH_FILES`,
//!    `STAGE_BATCH_BYTES`), the round is sorted by the (pack id, frame offset) of each file's
//!    first chunk, so neighbouring files share frames (symlinks and empty files, which have no
//!    chunks, come first), written in parallel, and its chunk lists dropped. A missing object
//!    or a file map that disagrees (`MissingObject`, `Corrupt`) stops the checkout as any
//!    staging error does, before anything is changed. Nothing is renamed into place here.
//!    - Files with more than one chunk that are larger than both 8 MiB (`SEGMENT_BYTES`) and
//!      half of one core's share of all the bytes to write (total / (2 × cores)) are split into
//!      segments: runs of chunks that end once they reach 8 MiB. Smaller files gain nothing
//!      from it, since other files keep every thread busy, and segmenting costs kernel time
//!      (scattered writes and a read-back to hash the whole file). The temporary file is created
//!      at full length first. Several threads then write segments at their offsets (`pwrite`),
//!      checking each chunk against its id. The thread that finishes the last segment
//!      re-reads the temporary file, checks its BLAKE3 against the file id, and sets the mode.
//!    - All other files, and symlinks, are written whole by one thread (`write_temp`), in
//!      batches of neighbouring entries that close at 32 entries (`BATCH_FILES`) or once they
//!      hold 2 MiB (`BATCH_BYTES`). Every chunk is checked against its id as it is read, and
//!      the whole file against the file id.
//!    - The tasks run in two phases (see Threads (`ops`)): first the
//!      bulk ones (every segment, and batches whose files average 256 KiB or more) on
//!      `min(jobs, CPUs)` threads, then the other batches on `jobs` threads.
//!    - Executable files get mode 0755. Other files keep the mode a new file gets (0666
//!      minus the umask).
//!    - On any error (a corrupt frame, a missing pack, a full disk, Ctrl-C), every temporary
//!      name of this checkout is removed (the numbered ones found by replaying the walk) (staged subtrees whole, directories made in place if
//!      empty) and the error is returned. The directory is then as
//!      it was, apart from the leftovers removed in step 8 and the directory itself if step 3
//!      created it.
//!
//! ## Apply
//!
//! 10. In order: delete the files and symlinks the plan deletes, delete the directory trees it
//!     replaces with files, rename each staged subtree into place, create the target's
//!     remaining missing directories, then rename each other staged temporary onto its
//!     destination (a replay of the walk, in rounds of 16,384, `APPLY_BATCH_FILES`, each on
//!     every writer thread), lstat'ing each written file right after. The lstats are spilled,
//!     in order, to an unnamed temporary file in `.dsv/tmp` (`RecordSpill`, 37 bytes a file,
//!     made before staging); if a spill write fails (a full disk), applying goes on and the
//!     files written get no cache entry (they are hashed next time). Last, prune
//!     old directories that the target lacks, deepest first, only if empty (untracked files
//!     keep their directory). This phase does not check for Ctrl-C.
//!
//! ## Record
//!
//! 11. **Stat cache.** If any file was written, sleep once for 100 ms (`RACY_MARGIN_NS`), take
//!     `checked_ns`, and lstat every written file again (a replay in rounds, beside the spilled
//!     lstats). A file whose stat did not change
//!     since its rename is cached with that stat (when it is settled); one whose stat changed
//!     (someone touched it meanwhile) loses its cache entry, so it is hashed next time. The
//!     files hashed in step 5 and kept are cached too (they hold the target's content, which
//!     the store holds), with the time before the scan. Every cached path that is not a file
//!     of the target is removed from the cache (noted by the plan's pass).
//! 12. **One catalog transaction:** `set_workspace` (dataset, version; it also sets the
//!     version's `last_used` and clears its `evicted_at`) and `update_stat_cache`.
//!
//! Every change of steps 7-10 (and the leftovers' removal) goes through a `BeneathDir`
//! (`beneath.rs`): a handle to the directory opened once, under which each operation opens the
//! parent of its last name with `openat2` (`RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`; where the
//! kernel lacks it, component by component with `O_NOFOLLOW`) and acts on the last name
//! without following it (`mkdirat`, `renameat`, `unlinkat`, `O_NOFOLLOW`). A directory
//! replaced by a symlink while the checkout runs fails the call (`ELOOP`), so nothing is
//! written outside the directory. A temporary file is created new (`O_EXCL`; a name already
//! taken, by a leftover or a planted hard link, FIFO or symlink, is unlinked and created again,
//! never opened), and written, verified and read back only through its own handle (a large
//! file's segments share it). Its inode is spilled in walk order (a `RecordSpill` of 8 bytes a
//! file); after each rename, a destination whose inode is not the one staged (another process
//! swapped something in at the temporary name) gets no stat cache entry, and the checkout ends
//! with an I/O error naming it once everything else is applied and recorded. The files the
//! plan hashes are opened beneath the directory too, `O_NOFOLLOW | O_NONBLOCK`, and only a
//! regular file is read (`workspace::hash_open_file`): a FIFO swapped in is an error, not a
//! hang.
//!
//! Checkout itself never takes the store lock and writes no objects. When the version's data
//! is on a remote, it is downloaded into the store before step 1
//! (Sync with remotes (`ops::sync`)).
//!
//! Missing or corrupt data is found in step 7 or step 9, before the directory changes. Only
//! an error in step 10 (a full disk while creating a directory, a permission error) leaves the
//! directory half-changed: some deletions and renames are done, the staged files not yet
//! renamed stay as `.dsv-tmp-<pid>-<n>` files, and the catalog still names the old version.
//! Every file already in place is complete and verified.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

use crate::beneath::BeneathDir;
use crate::error::{Error, IoResultExt, Result};
use crate::id::ObjectId;
use crate::progress::Progress;
use crate::revision::Revision;
use crate::store::{ObjectReader, Store};
use crate::tree::{self, FlatEntry, FlatKind};
use crate::walk::TEMP_PREFIX;
use crate::workspace;
use plan::Room;

mod apply;
mod dry_run;
mod plan;
mod spill;
mod stage;

pub use dry_run::{Action, CheckoutPlan, PlannedPath, plan_checkout};

/// How to check out.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CheckoutOptions {
    /// Overwrite or delete uncommitted changes.
    pub force: bool,
    /// Parallel file writers.
    pub jobs: usize,
    /// Only these files (a shard, globs, a manifest: a partial checkout). A partial
    /// checkout writes the selected files and the directories on their paths (no symlinks)
    /// into a directory that is not a workspace, and records none: `status` and `commit`
    /// there see plain files.
    pub selection: crate::read::Selection,
}

impl Default for CheckoutOptions {
    fn default() -> Self {
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2);
        // Creating files is kernel-bound: more writers than cores helps (as restic's restore does).
        CheckoutOptions {
            force: false,
            jobs: (cores * 3).min(12),
            selection: crate::read::Selection::default(),
        }
    }
}

/// Checks out the local `revision` as [`checkout`], first fetching from the store's remotes
/// what this store lacks of it (the selected files' data, for a partial checkout); the checkout, and what was
/// fetched (`None` without remotes). `requests` is how many requests a download keeps in
/// flight.
///
/// # Errors
/// As [`Revision::resolve`], [`crate::transfer::fetch_missing`] and [`checkout`].
pub fn checkout_fetching(
    store: &mut Store,
    revision: &Revision,
    dir: &Path,
    options: &CheckoutOptions,
    requests: usize,
    progress: &dyn Progress,
) -> Result<(CheckoutReport, Option<crate::transfer::Transfer>)> {
    let id = revision.resolve(store.catalog())?;
    let transfer = fetch_what_checkout_needs(store, &id, revision, options, requests, progress)?;
    let report = checkout(store, revision, dir, options, progress)?;
    Ok((report, transfer))
}

/// Fetches from the store's remotes what a checkout of version `id` with `options` needs
/// and this store lacks (a partial checkout: only the selected files); what it moved.
/// Nothing (`None`) without remotes.
///
/// # Errors
/// As [`crate::transfer::fetch_missing`]; reading the version's trees; a selection that
/// matches nothing.
pub(crate) fn fetch_what_checkout_needs(
    store: &mut Store,
    id: &ObjectId,
    revision: &Revision,
    options: &CheckoutOptions,
    requests: usize,
    progress: &dyn Progress,
) -> Result<Option<crate::transfer::Transfer>> {
    if store.catalog().remotes()?.is_empty() {
        return Ok(None);
    }
    let only = if options.selection.is_everything() {
        None
    } else {
        let version = store.reader().version(id)?;
        let entries = tree::flatten_version(&mut store.reader(), &version)?;
        let paths: Vec<String> = options
            .selection
            .apply(&entries, &revision.to_string())?
            .iter()
            .map(|e| globset::escape(&e.path))
            .collect();
        Some(crate::read::glob_set(&paths)?)
    };
    crate::transfer::fetch_missing(store, &[*id], only.as_ref(), None, requests, progress).map(Some)
}

/// What a checkout did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CheckoutReport {
    /// The dataset.
    pub dataset: String,
    /// The version now in the directory.
    pub version: ObjectId,
    /// The directory (canonical).
    pub dir: PathBuf,
    /// Files and symlinks in the version (in the selection, for a partial checkout).
    pub files: u64,
    /// Total file bytes in the version (in the selection, for a partial checkout).
    pub bytes: u64,
    /// True for a partial checkout ([`CheckoutOptions::selection`]): no workspace recorded.
    pub partial: bool,
    /// Files and symlinks written.
    pub written: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Files, symlinks and directories removed.
    pub deleted: u64,
    /// Files already right, left untouched.
    pub unchanged: u64,
    /// Uncommitted changes carried over (as `git checkout` does): paths the user changed,
    /// added or deleted where the version checked out before and this one agree, left as
    /// the user had them. `dsv status` lists them.
    pub carried: u64,
}

/// The entries a checkout writes, walked in path order ([`crate::walk::path_order`]) once
/// per step: the version's trees, read again each time, so nothing of the version is held
/// (memory grows with its depth times its widest directory, not with its files); for a
/// partial checkout, the selected entries, held (a selection is chosen from the whole
/// listing).
enum Target<'v> {
    Trees(&'v crate::object::Version),
    Selected(Vec<FlatEntry>),
}

/// A walk of a [`Target`].
type EntryWalk<'r> = Box<dyn Iterator<Item = Result<FlatEntry>> + 'r>;

impl<'v> Target<'v> {
    /// The target of a checkout of `version` (named `revision`) with `options`: its trees,
    /// or for a partial checkout the entries the selection picks with the directories on
    /// their paths (read through `trees`).
    ///
    /// # Errors
    /// Reading the trees; selection errors.
    fn new(
        trees: &mut ObjectReader<'_>,
        version: &'v crate::object::Version,
        options: &CheckoutOptions,
        revision: &Revision,
    ) -> Result<Target<'v>> {
        if options.selection.is_everything() {
            return Ok(Target::Trees(version));
        }
        let entries = tree::flatten_version(trees, version)?;
        Ok(Target::Selected(select_with_parents(
            &entries,
            &options.selection,
            &revision.to_string(),
        )?))
    }

    /// Whether this is a partial checkout.
    fn is_partial(&self) -> bool {
        matches!(self, Target::Selected(_))
    }

    /// The files and bytes the target has: a partial checkout counts its selection (regular
    /// files only: it writes no symlinks).
    fn counts(&self) -> (u64, u64) {
        match self {
            Target::Selected(entries) => {
                let selected = entries
                    .iter()
                    .filter(|e| matches!(e.kind, FlatKind::File { .. }));
                (
                    selected.clone().count() as u64,
                    selected.map(|e| e.size).sum(),
                )
            }
            Target::Trees(version) => (version.files, version.bytes),
        }
    }

    /// A walk of the target, through `trees`.
    ///
    /// # Errors
    /// Reading the root tree.
    fn walk<'r, 'a: 'r>(&'r self, trees: &'r mut ObjectReader<'a>) -> Result<EntryWalk<'r>> {
        Ok(match self {
            Target::Trees(version) => Box::new(tree::walk_version(trees, version)?),
            Target::Selected(entries) => Box::new(entries.iter().cloned().map(Ok)),
        })
    }
}

/// Files a checkout stages in one round, and their bytes at most: staged in pack order
/// within a round (neighbouring files share frames), their chunk lists dropped after it.
const STAGE_BATCH_FILES: usize = 32_768;
const STAGE_BATCH_BYTES: u64 = 1 << 30;

/// Files a checkout renames into place (and re-checks when recording) in one round.
const APPLY_BATCH_FILES: usize = 16_384;

/// Checks out `revision` into `dir` (created if missing).
///
/// The version's trees are walked once per step (check, compare, make directories, stage,
/// apply, record) rather than held: a checkout's memory grows with what the directory
/// holds already (its entries and the version checked out there before), not with the
/// version's files.
///
/// The phases, each a function: `resolve`, `Target::new` and `check_target` (the
/// version), `open_dir` (the directory), `decide` (`previous_version`, then `plan::plan`:
/// a `plan::Decisions`, every entry of the target decided, refused on conflicts), then
/// `execute`: `stage::make_dirs`, `stage::remove_leftovers` and `stage::stage_all`
/// (nothing visible changes), `apply::apply` (the directory changes), `apply::record` (the
/// catalog). [`plan_checkout`] is the same plan, public, without the directory made, the
/// locks or the execution (`dsv checkout --dry-run`).
///
/// # Errors
/// [`Error::Conflict`] when uncommitted changes are in the way; revision errors;
/// [`Error::UnsafePath`] when the tree names a path dsv will not write; [`Error::Corrupt`]
/// when stored data fails its hash; [`Error::Io`]; [`Error::Interrupted`]. Errors found
/// before files are renamed into place (all of these but a late I/O error) leave the
/// directory as it was.
pub fn checkout(
    store: &mut Store,
    revision: &Revision,
    dir: &Path,
    options: &CheckoutOptions,
    progress: &dyn Progress,
) -> Result<CheckoutReport> {
    crate::walk::check_workspace_dir(dir)?;
    // Held from the first read of a tree: gc waits until this checkout is done.
    let data_lock = store.lock_data_shared()?;
    progress.phase("reading the version");
    let clock = std::time::Instant::now();
    let (version_id, record) = resolve(store, revision)?;
    // Trees are read through a second connection, so the walk that records the checkout can
    // read them while the store's own connection writes.
    let tree_catalog = crate::catalog::Catalog::open_reader(store.catalog().path())?;
    let trees = &mut store.reader_through(&tree_catalog);
    let target = Target::new(trees, &record.version, options, revision)?;
    let shape = check_target(trees, &target, &record.version)?;
    let (dir, key) = open_dir(dir, &shape.longest)?;
    let _lock = store.lock_workspace(&data_lock, &key)?;
    // Every change below goes through this handle: nothing follows a symlink or leaves the
    // directory, whatever another process puts in its place meanwhile (crate::beneath).
    let root = BeneathDir::open(&dir)?;
    let plan = decide(store, &tree_catalog, &target, &dir, &key, options, progress)?;
    plan.check_decided(shape.room.inodes, &dir)?;
    plan.refuse_conflicts(&dir)?;
    progress.phase("locating the data");
    tracing::debug!(elapsed = ?clock.elapsed(), "planned");
    // Refused before anything is made: a version (honest or hostile) larger than the disk.
    shape.room.check(&root, &plan)?;
    let site = Site {
        dir: &dir,
        root: &root,
        jobs: options.jobs,
        progress,
    };
    let run = Run {
        revision,
        version: version_id,
        key: &key,
        longest: &shape.longest,
        clock,
    };
    let report = execute(store, trees, &target, &plan, &site, &run)?;
    Ok(CheckoutReport { dir, ..report })
}

/// Plan phase (steps 4-6): what the directory `dir` (workspace `key`) holds, compared with
/// `target` and the version checked out there before, decided entry by entry
/// ([`plan::plan`]). Reads the catalog (through `tree_catalog` for the trees), the
/// directory and its stat cache; changes nothing.
///
/// # Errors
/// [`Error::PartialCheckoutIntoWorkspace`]; as [`plan::plan`].
fn decide(
    store: &Store,
    tree_catalog: &crate::catalog::Catalog,
    target: &Target<'_>,
    dir: &Path,
    key: &str,
    options: &CheckoutOptions,
    progress: &dyn Progress,
) -> Result<plan::Decisions> {
    let (workspace_id, old) = previous_version(store, key, dir, target.is_partial())?;
    let trees = &mut store.reader_through(tree_catalog);
    let old_trees = &mut store.reader_through(tree_catalog);
    let old_walk: EntryWalk<'_> = match &old {
        Some(version) => Box::new(tree::walk_version(old_trees, version)?),
        None => Box::new(std::iter::empty()),
    };
    let input = plan::PlanInput {
        dir,
        cache_of: workspace_id,
        target: target.walk(trees)?,
        old: old_walk,
        force: options.force,
        jobs: options.jobs,
    };
    plan::plan(store, input, progress)
}

/// What a checkout being executed is: the revision asked for, the version it names, the
/// workspace's key, the target's longest path, and the clock since it began.
struct Run<'a> {
    revision: &'a Revision,
    version: ObjectId,
    key: &'a str,
    longest: &'a str,
    clock: std::time::Instant,
}

/// Carries out `plan`, a checkout of `target` into `site.dir` decided and not refused:
/// makes directories, stages every file to write under a temporary name (nothing visible
/// changes until all are staged and verified), applies (the directory changes) and, unless
/// partial, records the workspace (steps 7-12). The report, `dir` as the site's.
///
/// # Errors
/// As [`checkout`] after its plan: missing or corrupt data, I/O errors, interruption (all
/// but a late I/O error leave the directory as it was).
fn execute(
    store: &mut Store,
    trees: &mut ObjectReader<'_>,
    target: &Target<'_>,
    plan: &plan::Decisions,
    site: &Site<'_>,
    run: &Run<'_>,
) -> Result<CheckoutReport> {
    let root = site.root;
    let mut made = stage::MadeDirs::new(root);
    let new_dirs = stage::make_dirs(site, run.longest, target.walk(trees)?, plan, &mut made)?;
    stage::remove_leftovers(site, &plan.leftovers)?;
    // Made before anything is renamed into place, so a store whose temporary directory
    // cannot be written stops the checkout while the directory is as it was.
    let stats = spill::RecordSpill::create(&store.temp_dir())?;
    let staged = stage::stage_all(store, trees, target, plan, &made, &new_dirs, site)?;
    tracing::debug!(elapsed = ?run.clock.elapsed(), "staged");
    made.kept = true;
    let names = stage::Staged {
        plan,
        roots: &made.roots,
        beside: &staged.beside,
        first_number: staged.first_number,
    };
    let (applied, written) = apply::apply(
        trees,
        target,
        names,
        &new_dirs.create,
        staged.inodes,
        stats,
        site,
    )?;
    tracing::debug!(elapsed = ?run.clock.elapsed(), "applied");
    if !target.is_partial() {
        let recording = apply::Recording {
            key: run.key,
            dataset: &run.revision.dataset,
            version: &run.version,
        };
        apply::record(store, trees, target, names, written, &recording, site)?;
        // A checkout is a deliberate move: a recorded move of this workspace that a killed
        // rebase or pull left (also one given up by checking out its old version) is over.
        super::following::forget_following(store, run.key);
        super::workspace::link_store(store, site.dir);
    }
    tracing::debug!(elapsed = ?run.clock.elapsed(), "recorded");
    applied.refuse_replaced(site.dir)?;
    Ok(CheckoutReport {
        deleted: applied.deleted,
        ..report(
            run.revision,
            run.version,
            site.dir.to_path_buf(),
            target,
            &new_dirs,
            plan,
        )
    })
}

/// The report of a checkout of `target` (`revision`, version `version`) into `dir` that
/// wrote what `new_dirs` counts and kept what `plan` keeps (nothing deleted yet).
fn report(
    revision: &Revision,
    version: ObjectId,
    dir: PathBuf,
    target: &Target<'_>,
    new_dirs: &stage::NewDirs,
    plan: &plan::Decisions,
) -> CheckoutReport {
    let (files, bytes) = target.counts();
    CheckoutReport {
        dataset: revision.dataset.clone(),
        version,
        partial: target.is_partial(),
        dir,
        files,
        bytes,
        written: new_dirs.files,
        bytes_written: new_dirs.bytes,
        deleted: 0,
        unchanged: plan.unchanged,
        carried: plan.carried,
    }
}

/// Where the phases after planning work: the checkout's directory (canonical, and as a
/// handle every change goes through), the writer threads, the progress.
struct Site<'a> {
    dir: &'a Path,
    root: &'a BeneathDir,
    jobs: usize,
    progress: &'a dyn Progress,
}

/// Resolve phase (step 1): the version `revision` names, and its catalog row. Reads the
/// catalog only.
///
/// # Errors
/// Revision errors; [`Error::VersionRemoved`] for a removed version.
fn resolve(
    store: &Store,
    revision: &Revision,
) -> Result<(ObjectId, crate::catalog::VersionRecord)> {
    let version_id = revision.resolve(store.catalog())?;
    if store.catalog().removed_at(&version_id)?.is_some() {
        return Err(Error::VersionRemoved {
            version: version_id.to_hex(),
        });
    }
    let record = store.catalog().version_record(&version_id)?;
    Ok((version_id, record))
}

/// What [`check_target`] found: the longest path, and what the whole target takes on disk.
struct TargetShape {
    longest: String,
    room: Room,
}

/// Walk-target phase (step 2): walks the target once (reading, and so checking, its trees)
/// and refuses, before anything is written, names dsv does not write (`.dsv`, its temporary
/// names) and symlinks through symlinks. Reads the trees only.
///
/// # Errors
/// [`Error::UnsafePath`]; reading the trees; [`Error::Interrupted`].
fn check_target(
    trees: &mut ObjectReader<'_>,
    target: &Target<'_>,
    version: &crate::object::Version,
) -> Result<TargetShape> {
    let unsafe_path = |path: &str, reason| Error::UnsafePath {
        path: path.to_string(),
        tree: version.tree.to_hex(),
        reason,
    };
    let mut symlinks = Vec::new();
    let mut longest = String::new();
    let mut room = Room::default();
    for entry in target.walk(trees)? {
        let entry = entry?;
        crate::interrupt::check()?;
        room.add(&entry);
        if entry
            .path
            .split('/')
            .any(|c| crate::walk::is_reserved_name(c.as_bytes()))
        {
            return Err(unsafe_path(
                &entry.path,
                "dsv does not write into .dsv directories or its temporary names",
            ));
        }
        if entry.path.len() > longest.len() {
            longest.clone_from(&entry.path);
        }
        if matches!(entry.kind, FlatKind::Symlink { .. }) {
            symlinks.push(entry);
        }
    }
    if let Some(link) = tree::symlink_through_symlink(&symlinks) {
        return Err(unsafe_path(
            &link.path,
            "the symlink's target passes through another symlink",
        ));
    }
    Ok(TargetShape { longest, room })
}

/// Directory phase (step 3): creates `dir` if missing and canonicalizes it; refuses a path
/// that is not a directory, and one whose `longest` path would be longer than the system
/// opens (found while writing, it would leave staged files and made directories behind;
/// the directory made is removed again). The canonical directory and its workspace key.
///
/// # Errors
/// [`Error::NotADirectory`]; [`Error::Io`] (`ENAMETOOLONG` for a path too long).
fn open_dir(dir: &Path, longest: &str) -> Result<(PathBuf, String)> {
    if dir.exists() && !dir.is_dir() {
        return Err(Error::NotADirectory {
            path: dir.to_path_buf(),
        });
    }
    let made_checkout_dir = !dir.exists();
    fs::create_dir_all(dir).at(dir)?;
    let (dir, key) = workspace::canonical_dir(dir)?;
    if let Err(error) = refuse_too_long(&dir, longest) {
        if made_checkout_dir {
            let _ = fs::remove_dir(&dir);
        }
        return Err(error);
    }
    Ok((dir, key))
}

/// Refuses a checkout into `dir` (canonical) whose `longest` path, joined to it, would be
/// longer than the system opens.
///
/// # Errors
/// [`Error::Io`] (`ENAMETOOLONG`) naming the path.
fn refuse_too_long(dir: &Path, longest: &str) -> Result<()> {
    if !longest.is_empty() && too_long(dir, longest) {
        return Err(Error::Io {
            path: dir.join(longest),
            source: std::io::Error::from_raw_os_error(nix::errno::Errno::ENAMETOOLONG as i32),
        });
    }
    Ok(())
}

/// Old-state phase (step 4): the workspace at `key` (its id, whose stat cache the plan
/// reads) and the version checked out there before, when it is live (a removed version's
/// content is not kept by gc: the files it had here are not recoverable through it, so they
/// are compared as untracked files). Reads the catalog only.
///
/// # Errors
/// [`Error::PartialCheckoutIntoWorkspace`] for a `partial` checkout into a workspace;
/// reading the catalog.
fn previous_version(
    store: &Store,
    key: &str,
    dir: &Path,
    partial: bool,
) -> Result<(Option<i64>, Option<crate::object::Version>)> {
    let Some(workspace) = store.catalog().workspace(key)? else {
        return Ok((None, None));
    };
    if partial {
        return Err(Error::PartialCheckoutIntoWorkspace {
            dir: dir.to_path_buf(),
            dataset: workspace.dataset.unwrap_or_else(|| "a version".into()),
        });
    }
    let live_old = match workspace.version {
        Some(v) if store.catalog().removed_at(&v)?.is_none() => Some(v),
        _ => None,
    };
    let old = match live_old.and_then(|v| store.catalog().version(&v).transpose()) {
        Some(record) => Some(record?.version),
        None => None,
    };
    Ok((Some(workspace.id), old))
}

/// The files `selection` picks of `entries`, with the directories on their paths, in the
/// order of `entries`.
fn select_with_parents(
    entries: &[FlatEntry],
    selection: &crate::read::Selection,
    revision: &str,
) -> Result<Vec<FlatEntry>> {
    let chosen: HashSet<&str> = selection
        .apply(entries, revision)?
        .into_iter()
        .map(|e| e.path.as_str())
        .collect();
    let mut dirs: HashSet<&str> = HashSet::new();
    for path in &chosen {
        let mut rest = *path;
        while let Some((parent, _)) = rest.rsplit_once('/') {
            if !dirs.insert(parent) {
                break;
            }
            rest = parent;
        }
    }
    Ok(entries
        .iter()
        .filter(|e| match e.kind {
            FlatKind::Dir => dirs.contains(e.path.as_str()),
            _ => chosen.contains(e.path.as_str()),
        })
        .cloned()
        .collect())
}

/// The longest path the system opens, in bytes (PATH_MAX, 4096 on Linux, counts the
/// terminating NUL).
const PATH_MAX: usize = 4096;

/// The longest temporary name checkout stages under: `.dsv-tmp-<pid>-<n>` with a 10-digit
/// pid and a 20-digit number.
const TEMP_NAME_MAX: usize = TEMP_PREFIX.len() + 10 + 1 + 20;

/// Whether `relative`, joined to `dir`, is longer than the system opens.
fn too_long(dir: &Path, relative: &str) -> bool {
    dir.as_os_str().len() + 1 + relative.len() >= PATH_MAX
}

/// Files of more than this many bytes (and of a large share of the checkout, see [`stage`])
/// are written in segments by several threads at once.
const SEGMENT_BYTES: u64 = 8 * 1024 * 1024;
