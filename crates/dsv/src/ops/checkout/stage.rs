//! Checkout's stage phase (steps 7-9 of [`super`]): makes the staged subtrees' directories,
//! removes dead checkouts' leftovers, and writes every file and symlink to write under a
//! temporary name, verified. Nothing the user sees changes: on any error what was made is
//! removed again.

use std::fs::{self, File};
use std::io::{Seek, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::plan::Decisions;
use super::spill::{INODE_RECORD, RecordSpill, inode_record};
use super::{
    EntryWalk, PATH_MAX, SEGMENT_BYTES, STAGE_BATCH_BYTES, STAGE_BATCH_FILES, Site, TEMP_NAME_MAX,
    Target,
};
use crate::beneath::BeneathDir;
use crate::catalog::ObjectLocation;
use crate::error::{Error, IoResultExt, Result};
use crate::id::ObjectId;
use crate::pack::{DeltaMap, PackReader};
use crate::progress::{Progress, Unit};
use crate::store::{ObjectReader, Store};
use crate::tree::{FlatEntry, FlatKind};
use crate::walk::TEMP_PREFIX;
use crate::workspace;

/// What [`make_dirs`] made and counted.
pub(super) struct NewDirs {
    /// The target's directories that are not kept, in path order: those still missing are
    /// created while applying.
    pub(super) create: Vec<String>,
    /// Files and symlinks to write.
    pub(super) files: u64,
    /// Their bytes.
    pub(super) bytes: u64,
    /// The temporary names numbered so far: files are numbered after.
    pub(super) numbered: u64,
}

/// Make-directories phase (step 7): walks `target`, makes the top of each new subtree under
/// a temporary name beside its destination (in place where that would make a path below it
/// longer than the system opens, bounded by the target's `longest` path) and the
/// directories inside staged subtrees under their own names, lists the other directories
/// to create, and counts the files and bytes to write. Touches the directory only by making
/// directories, each recorded in `made` (removed again unless the checkout gets to apply).
///
/// A directory the target adds where nothing is now is staged whole: everything below it is
/// written inside under its final name, and one rename applies the subtree. Files in
/// directories that exist (and stay) are staged beside their destination and renamed one
/// by one. (Staged at the top of the directory, as before, a checkout into an empty
/// directory put every file of the version in one directory first: 4x slower than `cp -r`
/// at 100,000 files; renamed one by one, 1.7x.)
///
/// # Errors
/// Reading the trees; [`Error::Io`] making a directory; [`Error::Interrupted`].
pub(super) fn make_dirs(
    site: &Site<'_>,
    longest: &str,
    target: EntryWalk<'_>,
    plan: &Decisions,
    made: &mut MadeDirs<'_>,
) -> Result<NewDirs> {
    let (root, removed) = (site.root, plan.removed());
    let mut new = NewDirs {
        create: Vec::new(),
        files: 0,
        bytes: 0,
        numbered: 0,
    };
    for (index, entry) in target.enumerate() {
        let entry = entry?;
        crate::interrupt::check()?;
        if plan.kept(index) {
            continue;
        }
        if entry.kind != FlatKind::Dir {
            new.files += 1;
            new.bytes += entry.size;
            continue;
        }
        if let Some(subtree) = root_of(&made.roots, &entry.path) {
            let inside = staged_at(&entry.path, Staging::Inside(subtree), &made.layout());
            root.create_dir(&inside)?;
            new.create.push(entry.path);
            continue;
        }
        let parent = entry.path.rsplit_once('/').map(|(parent, _)| parent);
        let absent = parent.is_none_or(|parent| stays(root, parent, &removed))
            && matches!(root.lstat(&entry.path), Ok(None));
        if absent {
            // The temporary name may be longer than the directory's own: every path below
            // it must still be one the system opens (the version's longest path bounds
            // those below this directory).
            let name_len = entry.path.len() - parent.map_or(0, |p| p.len() + 1);
            if site.dir.as_os_str().len() + 1 + longest.len() - name_len + TEMP_NAME_MAX >= PATH_MAX
            {
                root.create_dir(&entry.path)?;
                made.in_place.push(PathBuf::from(&entry.path));
            } else {
                new.numbered += 1;
                let temp = match parent {
                    Some(parent) => Path::new(parent).join(temp_name(new.numbered)),
                    None => PathBuf::from(temp_name(new.numbered)),
                };
                root.create_dir(&temp)?;
                made.roots.push((entry.path.clone(), temp));
            }
        }
        new.create.push(entry.path);
    }
    Ok(new)
}

/// Leftovers phase (step 8): removes the `.dsv-tmp-<pid>-<n>` files and staged subtrees
/// (directories, removed whole) of `leftovers` whose process no longer runs; those of a
/// live process are left, since it may be checking out into a nested directory. Touches
/// only those names.
///
/// # Errors
/// [`Error::Io`] removing one; [`Error::Interrupted`].
pub(super) fn remove_leftovers(site: &Site<'_>, leftovers: &[PathBuf]) -> Result<()> {
    for leftover in leftovers {
        crate::interrupt::check()?;
        let owner = leftover
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(crate::walk::temp_owner);
        if owner.is_none_or(|pid| !crate::walk::process_alive(pid)) {
            let relative = leftover.strip_prefix(site.dir).unwrap_or(leftover);
            // A directory is a subtree a killed checkout was staging whole.
            if site.root.is_dir(relative) {
                site.root.remove_dir_all(relative)?;
            } else {
                site.root.remove_file(relative)?;
            }
        }
    }
    Ok(())
}

/// What [`stage_all`] staged: with a walk of the target and the plan, where every file is
/// (see [`Staged`]).
pub(super) struct StagedFiles {
    /// For each file staged under a numbered name, in order: beside its destination (else
    /// at the top of the directory).
    pub(super) beside: Vec<bool>,
    /// The number before the first file's.
    pub(super) first_number: u64,
    /// The inode of each file staged, in the order applying replays them.
    pub(super) inodes: RecordSpill<INODE_RECORD>,
}

/// Stage phase (step 9): writes every file and symlink of `target` the plan does not keep
/// under a temporary name (see [`stage_target`]), each checked against its id. Touches only
/// temporary names (and the subtrees `made` holds); on any error, removes every numbered
/// temporary name it wrote (the subtrees go with `made`) and returns the error, the
/// directory as it was.
///
/// # Errors
/// [`Error::MissingObject`], [`Error::Corrupt`], [`Error::Io`], [`Error::Interrupted`].
pub(super) fn stage_all(
    store: &Store,
    trees: &mut ObjectReader<'_>,
    target: &Target<'_>,
    plan: &Decisions,
    made: &MadeDirs<'_>,
    new_dirs: &NewDirs,
    site: &Site<'_>,
) -> Result<StagedFiles> {
    let mut records = StageRecords {
        beside: Vec::new(),
        inodes: RecordSpill::<INODE_RECORD>::create(&store.temp_dir())?,
    };
    site.progress.count_files(new_dirs.files);
    site.progress.start("writing", new_dirs.bytes, Unit::Bytes);
    let removed = plan.removed();
    let staged = {
        let mut stager = Stager {
            dir: site.dir,
            root: site.root,
            removed: &removed,
            last: None,
            next_number: new_dirs.numbered,
        };
        stage_target(
            store,
            target.walk(trees)?,
            plan,
            &made.layout(),
            &mut stager,
            &mut records,
            site,
        )
    };
    let StageRecords { beside, inodes } = records;
    site.progress.phase("finishing");
    if let Err(error) = staged {
        // What was staged under numbered names (a staged subtree goes with its directory).
        let names = Staged {
            plan,
            roots: &made.roots,
            beside: &beside,
            first_number: new_dirs.numbered,
        };
        if let Ok(walk) = target.walk(trees) {
            let layout = made.layout();
            let mut replay = names.replay(walk);
            while let Ok(Some((entry, staging))) = replay.next() {
                if !matches!(staging, Staging::Inside(_)) {
                    let _ = site
                        .root
                        .remove_file(staged_at(&entry.path, staging, &layout));
                }
            }
        }
        return Err(error);
    }
    Ok(StagedFiles {
        beside,
        first_number: new_dirs.numbered,
        inodes,
    })
}

/// One file or symlink to write, with where its chunks are.
pub(super) struct WriteJob {
    pub(super) entry: FlatEntry,
    pub(super) chunks: Vec<(ObjectId, ObjectLocation)>,
    /// Where the content is staged before it is renamed into place (see [`staged_at`]).
    pub(super) staging: Staging,
    /// Its position in the target's walk.
    pub(super) position: usize,
    /// The inode of the file staged (through its own handle), once written and verified; 0
    /// for a symlink.
    pub(super) inode: AtomicU64,
}

/// Where a file is staged, kept small (a path is made when needed).
#[derive(Clone, Copy)]
pub(super) enum Staging {
    /// Under temporary name number N beside its destination, renamed into place.
    Beside(u64),
    /// Under temporary name number N at the top of the checkout's directory (its directory
    /// is made while applying), renamed into place.
    Top(u64),
    /// Under its own name inside staged subtree N, which is renamed into place whole.
    Inside(usize),
}

impl WriteJob {
    /// The path the content is staged at.
    pub(super) fn temp(&self, layout: &Layout<'_>) -> PathBuf {
        staged_at(&self.entry.path, self.staging, layout)
    }
}

/// The path the file at `path` (relative to the checkout's directory) is staged at, relative
/// to the checkout's directory.
pub(super) fn staged_at(path: &str, staging: Staging, layout: &Layout<'_>) -> PathBuf {
    match staging {
        Staging::Beside(number) => match path.rsplit_once('/') {
            Some((parent, _)) => Path::new(parent).join(temp_name(number)),
            None => PathBuf::from(temp_name(number)),
        },
        Staging::Top(number) => PathBuf::from(temp_name(number)),
        Staging::Inside(root) => {
            let (top, temp) = &layout.roots[root];
            temp.join(&path[top.len() + 1..])
        }
    }
}

/// What staging records for the steps after it, in the order it staged.
pub(super) struct StageRecords {
    /// For each file staged under a numbered temporary name: beside its destination (else
    /// at the top of the directory).
    pub(super) beside: Vec<bool>,
    /// The inode of each file staged.
    pub(super) inodes: RecordSpill<INODE_RECORD>,
}

/// Stages every file and symlink of `target` that is not kept: locates its chunks, picks
/// where it is staged (recording it in `records`), and writes rounds of
/// [`STAGE_BATCH_FILES`] in pack order on `site.jobs` threads.
pub(super) fn stage_target(
    store: &Store,
    target: EntryWalk<'_>,
    plan: &Decisions,
    layout: &Layout<'_>,
    stager: &mut Stager<'_>,
    records: &mut StageRecords,
    site: &Site<'_>,
) -> Result<()> {
    let StageRecords { beside, inodes } = records;
    let (jobs, progress) = (site.jobs, site.progress);
    let reader = &mut store.reader();
    let packs_dir = store.packs_dir();
    let mut batch: Vec<WriteJob> = Vec::new();
    let mut batch_bytes = 0u64;
    let mut target = target.enumerate();
    loop {
        let (index, next) = match target.next() {
            Some((index, entry)) => (index, Some(entry?)),
            None => (0, None),
        };
        let ended = next.is_none();
        if let Some(entry) = next {
            if entry.kind == FlatKind::Dir || plan.kept(index) {
                continue;
            }
            let chunks = match entry.kind {
                FlatKind::File { .. } => reader.file_chunks(&entry.id, entry.size)?,
                _ => Vec::new(),
            };
            let staging = match root_of(layout.roots, &entry.path) {
                Some(root) => Staging::Inside(root),
                None => {
                    let staging = stager.next(&entry.path);
                    beside.push(matches!(staging, Staging::Beside(_)));
                    staging
                }
            };
            batch_bytes += entry.size;
            batch.push(WriteJob {
                entry,
                chunks,
                staging,
                position: index,
                inode: AtomicU64::new(0),
            });
            if batch.len() < STAGE_BATCH_FILES && batch_bytes < STAGE_BATCH_BYTES {
                continue;
            }
        }
        if !batch.is_empty() {
            // Neighbouring files share frames: write them in pack order so each frame is
            // decompressed about once per writer.
            batch.sort_by_key(|job| {
                job.chunks
                    .first()
                    .map(|(_, l)| (l.frame.pack, l.frame.offset))
            });
            // The bases of the batch's delta frames, for writers that hold no catalog.
            let deltas = store.catalog().delta_map(
                batch
                    .iter()
                    .flat_map(|job| job.chunks.iter().map(|(_, l)| &l.frame)),
            )?;
            stage(&packs_dir, layout, &batch, &deltas, jobs, progress)?;
            // The inodes staged, in the walk's order (the order applying replays).
            batch.sort_by_key(|job| job.position);
            for job in &batch {
                inodes.push(&inode_record(job.inode.load(Ordering::Acquire)));
            }
            batch.clear();
            batch_bytes = 0;
        }
        if ended {
            return Ok(());
        }
    }
}

/// The files and symlinks a checkout staged, walked again in the order they were staged,
/// each with where it was staged: what applying, recording and cleaning up after a failed
/// staging go through. Ends where the numbered names staged so far end.
pub(super) struct Replay<'w, 'p> {
    walk: EntryWalk<'w>,
    staged: Staged<'p>,
    /// The position in the target's walk of the next entry.
    position: usize,
    /// Numbered temporary names replayed so far.
    numbered: usize,
}

/// What says where each file of a checkout was staged, with a walk of the target.
#[derive(Clone, Copy)]
pub(super) struct Staged<'p> {
    pub(super) plan: &'p Decisions,
    /// The staged subtrees ([`MadeDirs::roots`]).
    pub(super) roots: &'p [(String, PathBuf)],
    /// For each file staged under a numbered name, in order: beside its destination (else
    /// at the top of the directory).
    pub(super) beside: &'p [bool],
    /// The number before the first file's.
    pub(super) first_number: u64,
}

impl<'p> Staged<'p> {
    /// The staged files of `walk`, a walk of the target.
    pub(super) fn replay<'w>(self, walk: EntryWalk<'w>) -> Replay<'w, 'p> {
        Replay {
            walk,
            staged: self,
            position: 0,
            numbered: 0,
        }
    }
}

impl Replay<'_, '_> {
    /// The next file or symlink staged, and where.
    pub(super) fn next(&mut self) -> Result<Option<(FlatEntry, Staging)>> {
        while let Some(entry) = self.walk.next().transpose()? {
            let index = self.position;
            self.position += 1;
            if entry.kind == FlatKind::Dir || self.staged.plan.kept(index) {
                continue;
            }
            let staging = match root_of(self.staged.roots, &entry.path) {
                Some(root) => Staging::Inside(root),
                None => {
                    let Some(&beside) = self.staged.beside.get(self.numbered) else {
                        return Ok(None);
                    };
                    // Numbered as [`Stager::next`] numbers them: one after another.
                    self.numbered += 1;
                    let number = self.staged.first_number + self.numbered as u64;
                    if beside {
                        Staging::Beside(number)
                    } else {
                        Staging::Top(number)
                    }
                }
            };
            return Ok(Some((entry, staging)));
        }
        Ok(None)
    }

    /// The next `count` (fewer at the end).
    pub(super) fn take(&mut self, count: usize) -> Result<Vec<(FlatEntry, Staging)>> {
        let mut batch = Vec::with_capacity(count.min(1024));
        while batch.len() < count {
            match self.next()? {
                Some(item) => batch.push(item),
                None => break,
            }
        }
        Ok(batch)
    }
}

/// Directories a checkout made before staging: removed again (each only if empty, deepest
/// first) when it stops before applying, unless kept.
pub(super) struct MadeDirs<'r> {
    /// The checkout's directory.
    pub(super) root: &'r BeneathDir,
    /// New subtrees staged whole: (the path of the subtree's top, in path order; the
    /// temporary directory it is staged in), both relative to the checkout's directory.
    pub(super) roots: Vec<(String, PathBuf)>,
    /// Directories made in place (where a temporary name would make a path too long),
    /// relative to the checkout's directory.
    pub(super) in_place: Vec<PathBuf>,
    pub(super) kept: bool,
}

impl<'r> MadeDirs<'r> {
    pub(super) fn new(root: &'r BeneathDir) -> MadeDirs<'r> {
        MadeDirs {
            root,
            roots: Vec::new(),
            in_place: Vec::new(),
            kept: false,
        }
    }

    /// Where files are staged in the checkout's directory.
    pub(super) fn layout(&self) -> Layout<'_> {
        Layout {
            root: self.root,
            roots: &self.roots,
        }
    }
}

/// The index of the staged subtree of `roots` ([`MadeDirs::roots`]) holding `path` (below
/// its top), if one does.
pub(super) fn root_of(roots: &[(String, PathBuf)], path: &str) -> Option<usize> {
    // The roots are in path order and disjoint: only the last one not after `path` can
    // hold it.
    let after = roots.partition_point(|(top, _)| crate::walk::path_order(top, path).is_le());
    let index = after.checked_sub(1)?;
    path.strip_prefix(roots[index].0.as_str())
        .is_some_and(|rest| rest.starts_with('/'))
        .then_some(index)
}

impl Drop for MadeDirs<'_> {
    fn drop(&mut self) {
        if !self.kept {
            // Staged subtrees hold only what this checkout wrote there.
            for (_, temp) in &self.roots {
                let _ = self.root.remove_dir_all(temp);
            }
            for made in self.in_place.iter().rev() {
                let _ = self.root.remove_dir(made);
            }
        }
    }
}

/// Where a checkout stages: its directory and the subtrees it stages whole.
pub(super) struct Layout<'a> {
    pub(super) root: &'a BeneathDir,
    pub(super) roots: &'a [(String, PathBuf)],
}

/// The temporary name numbered `number` of this process: `.dsv-tmp-<pid>-<number>`.
pub(super) fn temp_name(number: u64) -> String {
    format!("{TEMP_PREFIX}{}-{number}", std::process::id())
}

/// Chooses where each file is staged, numbering the temporary names.
pub(super) struct Stager<'a> {
    dir: &'a Path,
    root: &'a BeneathDir,
    removed: &'a [&'a str],
    /// The last parent directory asked about, and whether it stays: files come in path
    /// order, so siblings ask once (not one `lstat` per file).
    last: Option<(String, bool)>,
    next_number: u64,
}

impl Stager<'_> {
    /// Where to stage `path`: beside it when its directory exists now and stays, else at
    /// the top of the checkout's directory.
    pub(super) fn next(&mut self, path: &str) -> Staging {
        let beside = match path.rsplit_once('/') {
            None => false,
            // A temporary name may be longer than the file's own: staged at the top when
            // beside the destination its path would be too long.
            Some((parent, _))
                if self.dir.as_os_str().len() + parent.len() + 2 + TEMP_NAME_MAX >= PATH_MAX =>
            {
                false
            }
            Some((parent, _)) => match &self.last {
                Some((last, stays_too)) if last == parent => *stays_too,
                _ => {
                    let answer = stays(self.root, parent, self.removed);
                    self.last = Some((parent.to_string(), answer));
                    answer
                }
            },
        };
        self.next_number += 1;
        if beside {
            Staging::Beside(self.next_number)
        } else {
            Staging::Top(self.next_number)
        }
    }
}

/// Whether `parent` (relative to the checkout's directory `root`) is a real directory now
/// (not a symlink, nor below one) that this checkout keeps: not one of the `removed` paths
/// nor below one.
pub(super) fn stays(root: &BeneathDir, parent: &str, removed: &[&str]) -> bool {
    !removed.iter().any(|r| {
        parent
            .strip_prefix(r)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    }) && root.is_dir(parent)
}

/// A batch of small files holds at most this many files and bytes.
pub(super) const BATCH_FILES: usize = 32;
pub(super) const BATCH_BYTES: u64 = 2 * 1024 * 1024;

/// One unit of parallel staging work.
pub(super) enum Task<'a> {
    /// Small files, written one after the other (neighbours share frames).
    Files(Vec<&'a WriteJob>),
    /// A run of chunks of one large file, written at its offset into the file's temp name.
    Segment {
        /// Index into the large files.
        large: usize,
        /// Which of the file's chunks.
        chunks: std::ops::Range<usize>,
        /// Byte offset of the first.
        offset: u64,
    },
}

impl Task<'_> {
    /// True for segments and batches of files averaging 256 KiB or more: work bound by bytes
    /// rather than by the number of files.
    pub(super) fn is_bulk(&self) -> bool {
        match self {
            Task::Segment { .. } => true,
            Task::Files(batch) => {
                batch.iter().map(|job| job.entry.size).sum::<u64>()
                    >= 256 * 1024 * batch.len() as u64
            }
        }
    }
}

/// A large file being staged in segments.
pub(super) struct LargeFile<'a> {
    job: &'a WriteJob,
    /// Its temporary file, created once and written (and read back) only through this handle:
    /// never opened again by name, so nothing put at that name meanwhile is written.
    file: File,
    /// Segments still to write; the thread that writes the last one verifies the file.
    remaining: AtomicU64,
}

/// Writes every job to its temp name, checked against its id; large files in segments.
pub(super) fn stage(
    packs_dir: &Path,
    dir: &Layout<'_>,
    jobs: &[WriteJob],
    deltas: &DeltaMap,
    threads: usize,
    progress: &dyn Progress,
) -> Result<()> {
    // Segmenting costs kernel time (writes at scattered offsets, and a read-back to hash the
    // whole file), so only files big enough to leave a thread idle otherwise are segmented:
    // over SEGMENT_BYTES and over half of one core's share of all bytes (measured on 686 MB
    // of binaries with a 117 MB file: 1.9-2.1 s segmented vs 1.6 s whole when the disk is
    // slow, equal when it is fast).
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2);
    let total: u64 = jobs.iter().map(|j| j.entry.size).sum();
    let threshold = SEGMENT_BYTES.max(total / (2 * cores as u64));
    let (large_jobs, small_jobs): (Vec<&WriteJob>, Vec<&WriteJob>) = jobs
        .iter()
        .partition(|j| j.entry.size > threshold && j.chunks.len() > 1);
    let mut tasks = Vec::new();
    let mut large = Vec::new();
    for job in large_jobs {
        let temp = job.temp(dir);
        let file = dir.root.create_file(&temp)?;
        file.set_len(job.entry.size)
            .at(&dir.root.path().join(&temp))?;
        let (mut start, mut offset, mut run, mut segments) = (0, 0u64, 0u64, 0);
        for (i, (_, location)) in job.chunks.iter().enumerate() {
            run += u64::from(location.length);
            if run >= SEGMENT_BYTES || i + 1 == job.chunks.len() {
                tasks.push(Task::Segment {
                    large: large.len(),
                    chunks: start..i + 1,
                    offset,
                });
                (start, offset, run, segments) = (i + 1, offset + run, 0, segments + 1);
            }
        }
        large.push(LargeFile {
            job,
            file,
            remaining: AtomicU64::new(segments),
        });
    }
    // Large segments first, so they spread over the threads; then batches of small files
    // (in pack order, so each batch reads few frames).
    let mut batch: Vec<&WriteJob> = Vec::new();
    let mut batch_bytes = 0;
    for job in small_jobs {
        batch_bytes += job.entry.size;
        batch.push(job);
        if batch.len() == BATCH_FILES || batch_bytes >= BATCH_BYTES {
            tasks.push(Task::Files(std::mem::take(&mut batch)));
            batch_bytes = 0;
        }
    }
    if !batch.is_empty() {
        tasks.push(Task::Files(batch));
    }
    // Byte-heavy work runs on one thread per core: more writers only contend in the kernel's
    // page cache (measured: 686 MB of binaries, 0.87 s with 2 writers, 1.93 s with 6).
    // Creating many small files is bound by per-file kernel work that does overlap, so those
    // batches get every writer.
    let (bulk, many): (Vec<&Task<'_>>, Vec<&Task<'_>>) =
        tasks.iter().partition(|task| task.is_bulk());
    for (tasks, threads) in [(bulk, threads.min(cores)), (many, threads)] {
        crate::parallel::map(&tasks, threads, |task| {
            with_pack_reader(packs_dir, |packs| {
                run_task(task, dir, &large, packs, deltas, progress)
            })
        })?;
    }
    Ok(())
}

pub(super) fn run_task(
    task: &Task<'_>,
    dir: &Layout<'_>,
    large: &[LargeFile<'_>],
    packs: &mut PackReader,
    deltas: &DeltaMap,
    progress: &dyn Progress,
) -> Result<()> {
    match task {
        Task::Files(batch) => {
            // Neighbours: each parent directory is resolved once for the batch.
            let mut nearby = dir.root.nearby();
            for job in batch {
                crate::interrupt::check()?;
                write_temp(job, dir, &mut nearby, packs, deltas)?;
                progress.advance(job.entry.size);
                progress.file_done();
            }
        }
        Task::Segment {
            large: index,
            chunks,
            offset,
        } => {
            let job = large[*index].job;
            let handle = &large[*index].file;
            let temp = dir.root.path().join(job.temp(dir));
            let mut position = *offset;
            for (chunk_id, location) in &job.chunks[chunks.clone()] {
                crate::interrupt::check()?;
                let (frame, offset, length) = (&location.frame, location.offset, location.length);
                packs.prepare(frame, deltas)?;
                packs
                    // Not each chunk hashed: the whole file is, below (see `write_temp`).
                    .with_object(frame, offset, length, chunk_id, false, |bytes| {
                        // The file was made at full length: a run of zeros stays a hole.
                        if is_zeros(bytes) {
                            return Ok(());
                        }
                        std::os::unix::fs::FileExt::write_all_at(handle, bytes, position)
                    })?
                    .at(&temp)?;
                position += u64::from(length);
                progress.advance(u64::from(length));
            }
            if large[*index].remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
                progress.file_done();
                // Every segment is in: check the whole file against its id.
                if workspace::hash_open_file(handle, &temp)?.0 != job.entry.id {
                    return Err(corruption(job, packs, deltas, &temp));
                }
                if let FlatKind::File { executable: true } = job.entry.kind {
                    handle
                        .set_permissions(fs::Permissions::from_mode(0o755))
                        .at(&temp)?;
                }
                job.inode.store(
                    std::os::unix::fs::MetadataExt::ino(&handle.metadata().at(&temp)?),
                    Ordering::Release,
                );
            }
        }
    }
    Ok(())
}

/// The error for a staged file whose bytes do not hash to its id: the first of its chunks
/// that does not match its own hash, naming its pack (found by hashing them one by one now,
/// which the happy path never does), else the file as a whole (a file map that lists the
/// wrong chunks).
fn corruption(job: &WriteJob, packs: &mut PackReader, deltas: &DeltaMap, temp: &Path) -> Error {
    for (chunk_id, location) in &job.chunks {
        let (frame, offset, length) = (&location.frame, location.offset, location.length);
        if let Err(e) = packs.prepare(frame, deltas) {
            return e;
        }
        if let Err(e) = packs.with_object(frame, offset, length, chunk_id, true, |_| ()) {
            return e;
        }
    }
    Error::corrupt(
        temp,
        format!(
            "the stored bytes of {} do not hash to its file id",
            job.entry.path
        ),
    )
}

/// Whether `bytes` are all zeros (at least a page of them): written as a hole instead, so
/// sparse content stays sparse on disk.
pub(super) fn is_zeros(bytes: &[u8]) -> bool {
    bytes.len() >= 4096 && bytes.iter().all(|b| *b == 0)
}

/// Decompressed frames each writer keeps (about 1 MiB each): enough for neighbouring files.
pub(super) const FRAME_CACHE_SLOTS: usize = 3;

thread_local! {
    static PACK_READER: std::cell::RefCell<Option<PackReader>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` with this thread's pack reader (its frame cache lives as long as the thread).
pub(super) fn with_pack_reader<R>(
    packs_dir: &Path,
    f: impl FnOnce(&mut PackReader) -> Result<R>,
) -> Result<R> {
    PACK_READER.with(|cell| {
        let mut slot = cell.borrow_mut();
        let reader = slot.get_or_insert_with(|| PackReader::new(packs_dir, FRAME_CACHE_SLOTS));
        f(reader)
    })
}

/// Writes one small file or symlink to its temp name, checking the file against its id.
pub(super) fn write_temp(
    job: &WriteJob,
    dir: &Layout<'_>,
    nearby: &mut crate::beneath::Nearby<'_>,
    packs: &mut PackReader,
    deltas: &DeltaMap,
) -> Result<()> {
    let relative = &job.temp(dir);
    let temp = &dir.root.path().join(relative);
    match &job.entry.kind {
        FlatKind::Symlink { target } => nearby.symlink(target, relative)?,
        FlatKind::File { executable } => {
            let mut file = nearby.create_file(relative)?;
            let mut hasher = blake3::Hasher::new();
            let several = job.chunks.len() > 1;
            let mut holes = false;
            for (chunk_id, location) in &job.chunks {
                let (frame, offset, length) = (&location.frame, location.offset, location.length);
                packs.prepare(frame, deltas)?;
                // A file of several chunks is hashed whole as it is written (its id is that
                // hash), so its chunks are not hashed one by one as well: one BLAKE3 pass over
                // the bytes, not two. A mismatch names the chunk then (`corruption`). A file
                // of one chunk is that chunk: it is checked as it is read.
                packs
                    .with_object(frame, offset, length, chunk_id, !several, |bytes| {
                        if several {
                            hasher.update(bytes);
                        }
                        // A run of zeros (sparse content) is skipped, left a hole.
                        if is_zeros(bytes) {
                            holes = true;
                            return file
                                .seek(std::io::SeekFrom::Current(bytes.len() as i64))
                                .map(drop);
                        }
                        file.write_all(bytes)
                    })?
                    .at(temp)?;
            }
            if holes {
                // A hole at the end is made by the length.
                file.set_len(job.entry.size).at(temp)?;
            }
            let id = match job.chunks.as_slice() {
                [(only, _)] => *only,
                _ => hasher.finalize().into(),
            };
            if id != job.entry.id {
                return Err(corruption(job, packs, deltas, temp));
            }
            if *executable {
                file.set_permissions(fs::Permissions::from_mode(0o755))
                    .at(temp)?;
            }
            job.inode.store(
                std::os::unix::fs::MetadataExt::ino(&file.metadata().at(temp)?),
                Ordering::Release,
            );
        }
        FlatKind::Dir => unreachable!("directories are created, not staged"),
    }
    Ok(())
}
