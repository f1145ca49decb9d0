//! `verify`: check that the store is whole — every pack hashes to its name and matches its
//! index, every catalog row points at an object that is really there, every version's trees
//! and files can be found. Reports every problem; fixes nothing.
//!
//! # Steps
//!
//! `ops/verify.rs`, `verify()`. It holds the data lock shared for its whole run (so it never
//! sees a pack that a running `gc` is deleting, see Cleanup and audits (`ops::gc`)),
//! reports problems and fixes nothing:
//!
//! 1. `PRAGMA integrity_check` on the catalog, then `PRAGMA foreign_key_check`: rows that point
//!    at a row that is not there (an object whose frame is gone, a dataset head naming no
//!    version) are a problem, listed up to ten ("a row of TABLE (rowid N) points at a missing
//!    row of TABLE", then "and N more").
//! 2. For each pack the catalog names, `pack::reader::verify_pack` streams the file through
//!    BLAKE3 and checks that the hash equals its name. Packs are independent, so they are
//!    checked in parallel, one per thread, on one thread per CPU (`parallel::map`, which
//!    checks for Ctrl-C between packs), a group of one pack per CPU at a time; each read is
//!    sequential. The object ids of the packs that pass go into a `key_set::KeySet` (past
//!    half a million, to an unnamed file in `.dsv/tmp`), and so do the file ids step 4 has
//!    checked, so memory stays bounded at any number of objects. `verify_pack` then reads the
//!    header, trailer and index (magic, format version, index position, index hash) and reads
//!    the frames one at a time through a `PackReader` with a single cache slot (the same frame
//!    reader every other read uses), so each thread holds one frame in memory: every frame
//!    decompresses to its recorded length (≤ 256 MiB); every chunk, tree and version object in
//!    it hashes to its id; and the index lists objects in frame order. File maps are not hashed
//!    here (their key is the file id). A delta frame (pack index 2) needs its bases, which
//!    other packs may hold: once a group's packs pass, `DeltaCheck` takes each of their delta
//!    frames on this thread. Each base must be in the store (else a problem naming the chunk
//!    and the base); the closure of its bases (`Catalog::delta_bases_of`) must not reach the
//!    frame's own chunks (a cycle) nor go deeper than `MAX_DELTA_DEPTH`; the catalog must list
//!    the bases the pack's index lists; then the frame is decoded as every read decodes it
//!    (`PackReader::prepare`: each base read, its own bases first, and checked against its id;
//!    the prefix at most `MAX_DELTA_PREFIX` bytes; zstd's window capped) and each chunk hashed.
//!    A frame that fails is one problem, and its chunks are left out of the verified set;
//!    but a frame none of whose chunks the catalog locates there (each indexed from another
//!    copy: `repair` passed it over) is listed in `unused_unreadable_deltas`, not a problem:
//!    no read decodes it.
//! 3. Lists files in `.dsv/packs/` that the catalog does not name, or whose names are not
//!    `<id>.pack`. They go to `unreferenced_packs`, which is not a problem, unless one is a
//!    readable pack holding versions that the ref log names and the catalog lacks
//!    (`repair::forgotten_versions`): data a lost catalog forgot, a problem that names
//!    `dsv repair`. Then the ref log, up to the length the catalog recorded, is replayed and
//!    compared with the catalog's names (`RefState::differences`): each head, tag, remote, pin
//!    or removal on which they differ is a problem, and so is a ref log shorter than recorded,
//!    and so is a line there that its command would have refused (`RefLogEntry::check`).
//!    Lists every file in `.dsv/tmp/` under `temporary_files`, which is not a problem either.
//! 4. For each dataset, walks from the head along parents. For each version: the catalog row
//!    exists; the stored version object equals the row; its provenance object, if it names
//!    one, can be read (hash-checked); all its trees can be read and flattened;
//!    for each distinct non-empty file id, `ObjectReader::file_chunks` finds its chunk or file
//!    map and every chunk catalogued as a chunk, with the file map's lengths equal to the
//!    chunks' and summing to the file's size; and each chunk appears in the index of a pack
//!    that passed step 2 (else "chunk … is in no verified pack"). Reads go through
//!    `Store::checking_reader`, so a file map fetched from a remote and not yet proven is
//!    reassembled and hashed against its file id when all its chunks are here, with or without
//!    `--full`; a wrong one is a problem naming the remote, and nothing is recorded either way. A file whose chunks are not
//!    all here (`MissingObject`) is not a problem when each missing chunk is in the recorded
//!    pack index of one of the store's remotes (`remote_locate`), or, for a file whose map
//!    is not here (never fetched, or forgotten after a remote served a wrong one), when a
//!    remote's index lists its map; it is counted in
//!    `files_on_remotes` instead. Remotes are not contacted. A removed version gets only the
//!    first checks (its row, its version object, its provenance): `gc` may have freed its trees
//!    and data.
//! 5. With `--full`, each file of step 4 whose chunks are all in verified packs is also
//!    reassembled through `ObjectReader::write_file` into a sink: every chunk is checked against
//!    its id and the whole against the file id (`files_rehashed`, `bytes_rehashed`). This is
//!    the check a checkout makes, run on every distinct file of every version walked.
//!
//! Not checked: the contents of `.dsv/tmp/`, workspaces, and, without `--full`, whether a
//! multi-chunk file's chunks hash, joined, to its file id. Checkout, and `cat` without
//! `--range`, check that when they read the file. Versions not reachable from a head (those of
//! a dataset whose head `dsv rm NAME` cleared, and fetched versions off every local head's line)
//! are not walked.

use std::collections::HashSet;

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::object::ObjectKind;
use crate::progress::{Progress, Unit};
use crate::store::Store;
use crate::tree::{self, FlatKind};

/// What `verify` found.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct VerifyReport {
    /// Packs read and hashed.
    pub packs: u64,
    /// Their bytes.
    pub pack_bytes: u64,
    /// Objects whose bytes were checked against their ids.
    pub objects: u64,
    /// Versions whose trees and files were found.
    pub versions: u64,
    /// Pack files on disk that the catalog does not name (left by an interrupted commit,
    /// transfer or gc).
    pub unreferenced_packs: Vec<String>,
    /// Versions in unnamed packs that the ref log names only past what the catalog applied
    /// (a commit killed before its catalog transaction, or a catalog restored from an older
    /// copy): not problems, but gc keeps their packs and `dsv repair` records them.
    pub unrecorded_versions: Vec<String>,
    /// Files in `tmp/`: packs being written now, or left by a killed commit (the next commit
    /// removes those whose process is gone).
    pub temporary_files: Vec<String>,
    /// Delta frames that do not read (worded as `problems` words them) none of whose chunks
    /// the catalog locates there: each is indexed from another copy that reads (`dsv repair`
    /// passed this one over, `copies_passed_over`), so no read decodes them. Not problems.
    pub unused_unreadable_deltas: Vec<String>,
    /// Everything wrong, one line each. Empty means the store is consistent.
    pub problems: Vec<String>,
    /// Files whose data is not here but on a remote this store knows (a clone's data not
    /// yet needed, or a pull limited by `--include`): not a problem.
    pub files_on_remotes: u64,
    /// With `--full`: files reassembled from their chunks and hashed whole.
    pub files_rehashed: u64,
    /// With `--full`: bytes of those files.
    pub bytes_rehashed: u64,
}

/// What `dsv verify` is asked to check.
#[derive(Debug, Clone, Copy, Default)]
pub struct VerifyOptions {
    /// Also reassemble every file of every version from its chunks and check the whole
    /// against the file id (`--full`).
    pub full: bool,
}

/// Verifies the whole store. With `options.full`, also reassembles every file of every
/// version from its chunks and checks the whole against the file id (BLAKE3 of its bytes).
///
/// # Errors
/// Only when the catalog itself cannot be queried; problems in the data are reported in
/// [`VerifyReport::problems`].
pub fn verify(
    store: &Store,
    options: &VerifyOptions,
    progress: &dyn Progress,
) -> Result<VerifyReport> {
    // A pack gc is deleting would look missing or unreferenced: wait for gc to finish.
    let _data_lock = store.lock_data_shared()?;
    let mut report = VerifyReport::default();
    progress.phase("checking the catalog");
    if let Err(e) = store.catalog().check_integrity() {
        report.problems.push(e.to_string());
    }
    // What to check: the packs the catalog names, the files on disk, the datasets.
    let packs = store.catalog().packs()?;
    let named: HashSet<ObjectId> = packs.iter().map(|(id, _)| *id).collect();
    let indexed = check_packs(store, &packs, &mut report, progress)?;
    progress.phase("checking versions and trees");
    check_unreferenced_packs(store, &named, &mut report)?;
    check_ref_log(store, &mut report)?;
    if let Ok(dir) = std::fs::read_dir(store.temp_dir()) {
        report.temporary_files = dir
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        report.temporary_files.sort();
    }
    check_versions(store, &indexed, options.full, &mut report)?;
    Ok(report)
}

/// The error of a spilled key set that failed (in the store's temporary directory).
fn spill_error(store: &Store) -> impl Fn(std::io::Error) -> Error + '_ {
    |source| Error::Io {
        path: store.temp_dir(),
        source,
    }
}

/// Checks each of `packs` whole against its name (on every core, a group of that many at
/// a time, so only that many packs' object lists are held at once), reporting the damaged
/// ones; then, on this thread, decodes each delta frame of the group's packs against its
/// bases (`delta_check::DeltaCheck`). Every object id the verified packs index, but the
/// chunks of a delta frame that fails (past half a million, on disk: [`crate::key_set`]).
/// Reads the packs.
///
/// # Errors
/// [`Error::Io`] spilling the ids; [`Error::Catalog`].
fn check_packs(
    store: &Store,
    packs: &[(ObjectId, u64)],
    report: &mut VerifyReport,
    progress: &dyn Progress,
) -> Result<crate::key_set::KeySet<32>> {
    progress.start(
        "verifying",
        packs.iter().map(|(_, size)| size).sum(),
        Unit::Bytes,
    );
    let mut indexed = crate::key_set::KeySet::<32>::spilling_to(&store.temp_dir());
    let mut deltas = super::delta_check::DeltaCheck::new(store);
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
    let packs_dir = store.packs_dir();
    for group in packs.chunks(jobs) {
        let checked = crate::parallel::map(group, jobs, |(id, size)| {
            let path = crate::pack::writer::pack_path(&packs_dir, id);
            // Delta frames need their bases, which other packs may hold: decoded below.
            let result = crate::pack::reader::verify_pack(&path, id, None)
                .map(|index| CheckedPack::of(id, index))
                .map_err(|e| e.to_string());
            progress.advance(*size);
            Ok(result)
        })?;
        for ((id, size), result) in group.iter().zip(checked) {
            match result {
                Ok(pack) => {
                    report.objects += pack.objects.len() as u64;
                    for object in pack.objects {
                        indexed.insert(object.0).map_err(spill_error(store))?;
                    }
                    for frame in &pack.deltas {
                        match deltas.check(frame)? {
                            Ok(()) => {
                                report.objects += frame.chunks.len() as u64;
                                for (chunk, _, _) in &frame.chunks {
                                    indexed.insert(chunk.0).map_err(spill_error(store))?;
                                }
                            }
                            Err(problem) if unused(store, frame)? => {
                                report.unused_unreadable_deltas.push(problem);
                            }
                            Err(problem) => report.problems.push(problem),
                        }
                    }
                }
                Err(e) => report.problems.push(format!("pack {id}: {e}")),
            }
            report.packs += 1;
            report.pack_bytes += size;
        }
    }
    Ok(indexed)
}

/// True when the catalog locates none of delta frame `frame`'s chunks in it: each is
/// indexed from another copy (or not at all), so no read decodes this frame.
///
/// # Errors
/// [`Error::Catalog`].
fn unused(store: &Store, frame: &super::delta_check::DeltaFrame) -> Result<bool> {
    for (chunk, _, _) in &frame.chunks {
        if let Some(location) = store.catalog().locate(chunk, ObjectKind::Chunk)?
            && location.frame.pack == frame.location.pack
            && location.frame.offset == frame.location.offset
        {
            return Ok(false);
        }
    }
    Ok(true)
}

/// What checking one pack whole left to check: the objects it checked, and its delta
/// frames, which need their bases.
#[derive(Clone)]
struct CheckedPack {
    /// The ids of the objects in its plain frames, checked against their ids.
    objects: Vec<ObjectId>,
    /// Its delta frames, not decoded yet.
    deltas: Vec<super::delta_check::DeltaFrame>,
}

impl CheckedPack {
    /// Splits the index of pack `id` (checked by `verify_pack` without bases) into the
    /// objects checked and the delta frames left.
    fn of(id: &ObjectId, index: crate::pack::PackIndex) -> Self {
        let mut deltas: Vec<super::delta_check::DeltaFrame> = index
            .deltas
            .iter()
            .map(|d| super::delta_check::DeltaFrame::of(id, &index, d.frame))
            .collect();
        deltas.sort_by_key(|d| d.location.offset);
        let objects = index
            .objects
            .iter()
            .filter(|o| index.bases_of(o.frame).is_empty())
            .map(|o| o.id)
            .collect();
        CheckedPack { objects, deltas }
    }
}

/// Lists the pack files the catalog does not name (`named`), and accounts for those that
/// hold a version the ref log names: data the catalog forgot (named in what it applied: a
/// problem), or a commit it never finished or a catalog restored from an older copy (named
/// only past that: reported, kept by gc). Reads the packs directory and the ref log.
///
/// # Errors
/// [`Error::Io`] reading the ref log; [`Error::Catalog`].
fn check_unreferenced_packs(
    store: &Store,
    named: &HashSet<ObjectId>,
    report: &mut VerifyReport,
) -> Result<()> {
    if let Ok(dir) = std::fs::read_dir(store.packs_dir()) {
        for entry in dir.flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            let id = crate::pack::writer::pack_id_of(&name);
            if id.is_none_or(|id| !named.contains(&id)) {
                report.unreferenced_packs.push(name);
            }
        }
    }
    report.unreferenced_packs.sort();
    let accounting = super::repair::PackAccounting::new(store);
    for name in &report.unreferenced_packs {
        let path = store.packs_dir().join(name);
        let Some(forgotten) = accounting.forgotten_versions(&path)? else {
            continue;
        };
        let short = |ids: &[ObjectId]| {
            ids.iter()
                .map(ObjectId::short)
                .collect::<Vec<_>>()
                .join(", ")
        };
        if !forgotten.applied.is_empty() {
            report.problems.push(format!(
                "pack {name} holds {} versions the ref log names but the catalog lacks ({}): run `dsv repair`",
                forgotten.applied.len(),
                short(&forgotten.applied)
            ));
        }
        report
            .unrecorded_versions
            .extend(forgotten.unapplied.iter().map(ObjectId::to_hex));
    }
    Ok(())
}

/// Checks that the ref log (up to what the catalog applied) names what the catalog names,
/// and holds no line a command would refuse. Reads the ref log and the catalog.
///
/// # Errors
/// [`Error::Io`] reading the ref log; [`Error::Catalog`].
fn check_ref_log(store: &Store, report: &mut VerifyReport) -> Result<()> {
    let Some(applied) = store.catalog().ref_log_applied()? else {
        report
            .problems
            .push("the catalog has no ref log (run `dsv repair`)".into());
        return Ok(());
    };
    let path = store.catalog().ref_log_path();
    let on_disk = std::fs::metadata(&path).map_or(0, |m| m.len());
    if on_disk < applied {
        report.problems.push(format!(
            "the ref log {} has {on_disk} bytes, the catalog recorded {applied}: the next change rewrites it",
            path.display()
        ));
        return Ok(());
    }
    let log = crate::reflog::read(&path, Some(applied))?;
    for refused in &log.refused {
        report.problems.push(format!(
            "ref log line {} names what no command would write ({}): run `dsv repair`, which rewrites the log from the catalog",
            refused.line, refused.reason
        ));
    }
    for difference in store.catalog().ref_state()?.differences(&log.state()) {
        report.problems.push(format!("ref log: {difference}"));
    }
    Ok(())
}

/// What checking versions' files goes through.
struct FileCheck<'a, 's> {
    store: &'s Store,
    reader: &'a mut crate::store::ObjectReader<'s>,
    /// The object ids the verified packs index.
    indexed: &'a crate::key_set::KeySet<32>,
    /// Files checked already (by id): each is checked once.
    seen_files: crate::key_set::KeySet<32>,
    /// The store's remotes (a clone's data not yet needed here may be on one).
    remotes: Vec<i64>,
    full: bool,
}

/// Checks every version of every dataset (head to first): its row agrees with its stored
/// object, its provenance is here, and, unless removed, its trees are readable and every
/// file is locatable ([`FileCheck::file`]). Reads the catalog, trees and file maps (with
/// `full`, every file's chunks too).
///
/// # Errors
/// [`Error::Catalog`]; [`Error::Io`] spilling; [`Error::Interrupted`].
fn check_versions(
    store: &Store,
    indexed: &crate::key_set::KeySet<32>,
    full: bool,
    report: &mut VerifyReport,
) -> Result<()> {
    let mut check = FileCheck {
        store,
        reader: &mut store.checking_reader(),
        indexed,
        seen_files: crate::key_set::KeySet::<32>::spilling_to(&store.temp_dir()),
        remotes: store.catalog().remotes()?.iter().map(|r| r.id).collect(),
        full,
    };
    let tree_reader = &mut store.checking_reader();
    for dataset in store.catalog().datasets()? {
        let mut next = dataset.head;
        while let Some(id) = next {
            crate::interrupt::check()?;
            let Some(record) = store.catalog().version(&id)? else {
                report.problems.push(format!(
                    "dataset {} names version {id}, which the catalog lacks",
                    dataset.name
                ));
                break;
            };
            next = record.version.parent;
            report.versions += 1;
            match check.reader.version(&id) {
                Ok(stored) if record.agrees_with(&stored) => {}
                Ok(_) => report
                    .problems
                    .push(format!("version {id} differs from its stored object")),
                Err(e) => report.problems.push(format!("version {id}: {e}")),
            }
            // A remote's provenance arrives with the version (fetch takes both), so it must be here.
            if let Some(provenance) = &record.version.provenance
                && let Err(e) = check.reader.provenance(provenance)
            {
                report.problems.push(format!("version {id}: {e}"));
            }
            // A removed version keeps only its version object; gc may have freed the rest.
            if store.catalog().removed_at(&id)?.is_some() {
                continue;
            }
            check.version_files(tree_reader, &id, &record.version, report)?;
        }
    }
    Ok(())
}

impl FileCheck<'_, '_> {
    /// Checks every file of version `id` not checked yet, walking its paths one at a time
    /// (its trees read by `tree_reader`), not a listing of them all.
    ///
    /// # Errors
    /// [`Error::Catalog`]; [`Error::Io`] spilling.
    fn version_files(
        &mut self,
        tree_reader: &mut crate::store::ObjectReader<'_>,
        id: &ObjectId,
        version: &crate::object::Version,
        report: &mut VerifyReport,
    ) -> Result<()> {
        let entries = match tree::walk_version(tree_reader, version) {
            Ok(entries) => entries,
            Err(e) => {
                report.problems.push(format!("version {id}: {e}"));
                return Ok(());
            }
        };
        for entry in entries {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    report.problems.push(format!("version {id}: {e}"));
                    break;
                }
            };
            if !matches!(entry.kind, FlatKind::File { .. })
                || entry.size == 0
                || !self
                    .seen_files
                    .insert(entry.id.0)
                    .map_err(spill_error(self.store))?
            {
                continue;
            }
            self.file(&entry, id, report)?;
        }
        Ok(())
    }

    /// Checks that every chunk of the file `entry` (of version `id`) is in a verified pack
    /// (or the file on a remote); with `full`, reassembles it and checks the whole against
    /// its id (catches a file map listing wrong chunks of the right lengths).
    ///
    /// # Errors
    /// [`Error::Catalog`]; [`Error::Io`] spilling.
    fn file(
        &mut self,
        entry: &tree::FlatEntry,
        id: &ObjectId,
        report: &mut VerifyReport,
    ) -> Result<()> {
        let chunks = match self.reader.file_chunks(&entry.id, entry.size) {
            Ok(chunks) => chunks,
            Err(Error::MissingObject { .. })
                if on_remotes(
                    self.store,
                    self.reader,
                    &self.remotes,
                    &entry.id,
                    entry.size,
                )? =>
            {
                report.files_on_remotes += 1;
                return Ok(());
            }
            Err(e) => {
                report
                    .problems
                    .push(format!("{} in version {}: {e}", entry.path, id.short()));
                return Ok(());
            }
        };
        let mut whole = true;
        for (chunk, _) in &chunks {
            if self
                .indexed
                .contains(&chunk.0)
                .map_err(spill_error(self.store))?
            {
                continue;
            }
            whole = false;
            report.problems.push(format!(
                "{}: chunk {chunk} is in no verified pack",
                entry.path
            ));
        }
        if self.full && whole {
            match self
                .reader
                .write_file(&entry.id, entry.size, None, &mut std::io::sink())
            {
                Ok(()) => {
                    report.files_rehashed += 1;
                    report.bytes_rehashed += entry.size;
                }
                Err(e) => {
                    report
                        .problems
                        .push(format!("{} in version {}: {e}", entry.path, id.short()))
                }
            }
        }
        Ok(())
    }
}

/// True when every chunk of file `id` is here or on one of `remotes` (by their indexes), or,
/// when this store holds neither the file's map nor the file as one chunk, when a remote
/// holds its map: a remote-only file whose map is not here (never fetched, or forgotten
/// after a remote served a wrong one) is not data missing here.
fn on_remotes(
    store: &Store,
    reader: &mut crate::store::ObjectReader<'_>,
    remotes: &[i64],
    id: &ObjectId,
    size: u64,
) -> Result<bool> {
    if remotes.is_empty() {
        return Ok(false);
    }
    let on_a_remote = |object: &ObjectId, kind: ObjectKind| -> Result<bool> {
        for remote in remotes {
            if store
                .catalog()
                .remote_locate(*remote, object, kind)?
                .is_some()
            {
                return Ok(true);
            }
        }
        Ok(false)
    };
    let catalog = store.catalog();
    if !catalog.has_object(id, ObjectKind::Chunk)?
        && !catalog.has_object(id, ObjectKind::FileMap)?
        && on_a_remote(id, ObjectKind::FileMap)?
    {
        return Ok(true);
    }
    for chunk in reader.chunk_ids(id, size)? {
        if catalog.has_object(&chunk, ObjectKind::Chunk)? {
            continue;
        }
        if !on_a_remote(&chunk, ObjectKind::Chunk)? {
            return Ok(false);
        }
    }
    Ok(true)
}
