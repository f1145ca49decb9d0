//! `repair`: rebuild a lost or damaged catalog from what the store holds on disk — the packs
//! (every chunk, file map, tree, version and provenance, indexed by each pack's own footer)
//! and the ref log (every head, tag, remote, pin and removal; see [`crate::reflog`]).
//!
//! The old catalog, when there is one, is kept aside as `catalog.db.before-repair-<time>`,
//! and the old ref log as `reflog.before-repair-<time>`; nothing is deleted. What is not
//! rebuilt: workspace records and their stat caches (the next `status` or `commit` hashes
//! the files again) and what the store knew of its remotes' contents (`dsv fetch` reads it
//! again).
//!
//! # Steps
//!
//! `ops/repair.rs`, `repair()`, run by `dsv repair` (`docs/cli.md#dsv-repair`) on the `.dsv`
//! that `Store::find_root` finds, which may have no usable catalog. Under the store lock and the
//! data lock, both exclusive: read the whole ref log and copy it to
//! `reflog.before-repair-<time>`; move `catalog.db` (with its `-wal` and `-shm`) to
//! `catalog.db.before-repair-<time>`; create an empty catalog (`Catalog::create_for_repair`,
//! `ref_log.length` NULL, so its transactions write no ref log); check each `packs/<id>.pack`
//! whole (`verify_pack`, delta frames from their index only) and catalogue those that pass,
//! with each delta frame's bases from its pack's index (`frames.bases`), reporting the others;
//! of an object held more than once with a copy in a delta frame (a gc killed while deleting
//! its old packs leaves a plain copy beside a delta whose bases it had deleted), index the
//! copy that reads (`choose_copies`: plain first, else a delta whose bases read, round by
//! round, so no cycle), reporting the copies passed over, and leave unindexed a pack whose
//! every object is indexed from another copy;
//! decode every delta frame against its bases now that the catalog locates them all
//! (`check_deltas`, reporting those that do not read in `unreadable_deltas`); record every
//! version object they hold without moving a head; replay the ref log (`RefState`), each line
//! first checked as its command checks its input (`RefLogEntry::check`: `revision::check_name`
//! for dataset and tag names, `remote::check_url` and `remote::check_options` for remotes; a
//! line that fails is reported in `ref_log_refused_lines` and skipped, never restored), and restore
//! its remotes, and its heads, tags, pins and removals whose version a pack holds, reporting
//! the versions no pack holds; last, `adopt_ref_log` writes the ref log afresh as a snapshot of
//! the new catalog and records its length. Nothing is deleted.
//!
//! Not rebuilt: workspace records and their stat caches, eviction marks, `last_used`, and the
//! `remote_*` tables (a `dsv fetch` fills them again). Until then, `verify` reports as missing
//! the chunks that only a remote held (an evicted version's, a clone's data not needed yet),
//! and `rm` and `cache prune` no longer know which directories hold which versions.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use crate::catalog::{Catalog, unix_now};
use crate::error::{Error, IoResultExt, Result};
use crate::id::ObjectId;
use crate::object::ObjectKind;
use crate::pack::writer::SealedPack;
use crate::progress::{Progress, Unit};
use crate::reflog::{self, RefLogEntry};
use crate::store::{ExclusiveDataLock, HeadLock, OpenLock, STORE_DIR, Store};

/// What `repair` rebuilt.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RepairReport {
    /// The `.dsv` directory repaired.
    pub store: PathBuf,
    /// Where the old catalog was moved, when there was one.
    pub old_catalog: Option<PathBuf>,
    /// Where the old ref log was copied.
    pub old_ref_log: Option<PathBuf>,
    /// Packs indexed.
    pub packs: u64,
    /// Pack files that failed their check (bytes not matching their name, a bad index):
    /// left in place, not indexed.
    pub damaged_packs: Vec<String>,
    /// Objects indexed.
    pub objects: u64,
    /// Delta frames of the packs indexed that do not read against their bases (a base no
    /// pack holds, a cycle of bases, a result that does not hash to its chunk), one line each
    /// as `verify` reports them: indexed all the same (their packs check), their chunks fail
    /// every read. A chunk with another copy that reads is indexed from that copy instead
    /// (`copies_passed_over`), and its delta frame is not listed here.
    pub unreadable_deltas: Vec<String>,
    /// Objects the packs hold more than once, one copy of which is a delta frame (a gc killed
    /// while deleting its old packs, two encodings fetched): one line each, naming the
    /// object, the copy indexed (pack, frame offset, plain or delta) and the copies passed
    /// over. The copy indexed is one that reads: a plain one first, else a delta whose bases
    /// are all held (themselves by copies that read, no cycle, at most 16 levels); only when
    /// no copy reads, the first (by pack id), as before.
    pub copies_passed_over: Vec<String>,
    /// Pack files left in place but not indexed because every object they hold is indexed
    /// from another copy (`copies_passed_over`): listed by `verify` under its unreferenced
    /// packs; `gc` deletes them once they are older than its grace period.
    pub packs_passed_over: Vec<String>,
    /// Versions found in the packs.
    pub versions: u64,
    /// Datasets with a head after the repair.
    pub heads: u64,
    /// Tags restored.
    pub tags: u64,
    /// Remotes restored.
    pub remotes: u64,
    /// Pins restored.
    pub pins: u64,
    /// Removals restored.
    pub removed: u64,
    /// Where the names came from: `"ref log"`, or `"catalog"` when the old catalog could
    /// still be read and the ref log did not hold every line it applied (missing, cut short,
    /// or a damaged line).
    pub names_from: &'static str,
    /// Ref log entries read.
    pub ref_log_entries: u64,
    /// Heads moved forward and tags added from lines an earlier change set aside
    /// (`reflog.unapplied`).
    pub set_aside_restored: u64,
    /// Ref log lines that did not parse (a line torn by a crash), by number.
    pub ref_log_bad_lines: Vec<usize>,
    /// Ref log lines (of `reflog`, `reflog.unapplied`, or rows of the old catalog when the
    /// names came from it) naming what their command would refuse: a dataset or tag name
    /// `commit` or `tag` would not take, a remote `remote add` would not add (`http://`, a
    /// password in the URL, a credential among its options). Never restored.
    pub ref_log_refused_lines: Vec<RefusedName>,
    /// Versions the ref log names that no pack holds (their names could not be restored).
    pub missing_versions: Vec<String>,
}

/// A name repair did not restore because its command would refuse it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RefusedName {
    /// Where it was: `"reflog"`, `"reflog.unapplied"` or `"catalog"`.
    pub file: &'static str,
    /// Its 1-based line number in that file (null for the catalog).
    pub line: Option<usize>,
    /// Why it was refused.
    pub reason: String,
}

/// Rebuilds the catalog of the store whose `.dsv` directory is `root` from its packs and
/// its ref log, then writes the ref log afresh from the result. Takes the store's locks, so
/// no other dsv process works on the store meanwhile; then `plan`s (reads only) and
/// `execute`s the plan.
///
/// # Errors
/// [`Error::NotADirectory`] when `root` is not a store directory; [`Error::Io`];
/// [`Error::Catalog`]. Damaged packs and ref log lines are reported, not errors.
pub fn repair(root: &Path, progress: &dyn Progress) -> Result<RepairReport> {
    if !root.join("packs").is_dir() {
        return Err(Error::NotADirectory {
            path: root.join("packs"),
        });
    }
    // No other process may have the store open: the catalog file is replaced.
    let _open = OpenLock::try_take_exclusive(root)?.ok_or_else(|| Error::StoreBusy {
        path: root.to_path_buf(),
    })?;
    // In the one lock order (crate::store): data, then head.
    let _data_lock = ExclusiveDataLock::take_at(root)?;
    let _store_lock = HeadLock::take_at(root)?;
    let plan = plan(root)?;
    execute(plan, progress)
}

/// What a repair will do, decided before anything moves: the names to restore and where
/// they come from, where the old ref log and catalog go aside, and the pack files to check
/// and index. Executed by [`execute`].
#[derive(Debug)]
struct RepairPlan {
    /// The `.dsv` directory.
    root: PathBuf,
    /// The ref log, read whole.
    log: reflog::ReadLog,
    /// The names to restore (over the versions the packs hold): the ref log's, or the old
    /// catalog's when the log does not hold every line the catalog applied.
    state: reflog::RefState,
    /// `"ref log"` or `"catalog"`: where `state` came from.
    names_from: &'static str,
    /// The lines (or catalog rows) refused, never restored.
    refused: Vec<RefusedName>,
    /// Where the ref log is copied, when there is one.
    old_ref_log: Option<PathBuf>,
    /// Where the catalog (and its `-wal`, `-shm`) is moved, when there is one.
    old_catalog: Option<PathBuf>,
    /// The pack files to check whole and index (id by name, path, bytes), by id.
    packs: Vec<(ObjectId, PathBuf, u64)>,
}

/// Plans a repair of the store at `root`: reads the names (from the ref log when it holds,
/// intact, every line the old catalog, if it can still be read, applied; else from that
/// catalog), picks names for the backups no earlier repair used, and lists the pack files.
/// Reads only; changes nothing.
///
/// # Errors
/// [`Error::Io`] reading the ref log or listing the packs.
fn plan(root: &Path) -> Result<RepairPlan> {
    let catalog_path = root.join("catalog.db");
    let log_path = root.join(reflog::FILE_NAME);
    let log = reflog::read(&log_path, None)?;
    // Every line is checked as its command checks its input: a forged line is reported and
    // skipped, never restored (the rest of the names still are; the log is kept aside whole).
    let mut refused = refused_lines(reflog::FILE_NAME, &log);
    let mut state = log.state();
    let mut names_from = "ref log";
    if let Some(from_catalog) = names_from_catalog(&catalog_path, &log_path) {
        state = from_catalog;
        names_from = "catalog";
        // The catalog's rows pass the same checks (a catalog can be edited too).
        for entry in state.entries() {
            if let Err(reason) = entry.check() {
                refused.push(RefusedName {
                    file: "catalog",
                    line: None,
                    reason,
                });
                state.forget(&entry);
            }
        }
    }
    let stamp = unique_stamp(root);
    let old_ref_log = log_path
        .exists()
        .then(|| root.join(format!("{}.before-repair-{stamp}", reflog::FILE_NAME)));
    let old_catalog = catalog_path
        .exists()
        .then(|| root.join(format!("catalog.db.before-repair-{stamp}")));
    Ok(RepairPlan {
        root: root.to_path_buf(),
        log,
        state,
        names_from,
        refused,
        old_ref_log,
        old_catalog,
        packs: pack_files(&root.join("packs"))?,
    })
}

/// The lines of `log` (the file `file`) refused by their command's checks.
fn refused_lines(file: &'static str, log: &reflog::ReadLog) -> Vec<RefusedName> {
    log.refused
        .iter()
        .map(|r| RefusedName {
            file,
            line: Some(r.line),
            reason: r.reason.clone(),
        })
        .collect()
}

/// The names of the old catalog at `catalog_path` when they are the record: it can still
/// be read and the ref log at `log_path` does not hold, intact, every line it committed
/// (cut short, damaged, or holding a line no command would have written). `None`: the ref
/// log is the record (a catalog that disagrees with it lost rows).
fn names_from_catalog(catalog_path: &Path, log_path: &Path) -> Option<reflog::RefState> {
    if !catalog_path.exists() {
        return None;
    }
    let old = Catalog::open_without_ref_log(catalog_path).ok()?;
    let old_state = old.ref_state().ok()?;
    let applied = old.ref_log_applied().ok().flatten().unwrap_or(0);
    let on_disk = fs::metadata(log_path).map_or(0, |m| m.len());
    let covered = on_disk >= applied
        && reflog::read(log_path, Some(applied))
            .is_ok_and(|prefix| prefix.bad_lines.is_empty() && prefix.refused.is_empty());
    (!covered).then_some(old_state)
}

/// The pack files in `packs_dir` (named `<id>.pack`): id, path, bytes, by id.
///
/// # Errors
/// [`Error::Io`].
fn pack_files(packs_dir: &Path) -> Result<Vec<(ObjectId, PathBuf, u64)>> {
    let mut names = Vec::new();
    for entry in fs::read_dir(packs_dir).at(packs_dir)? {
        let entry = entry.at(packs_dir)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(id) = crate::pack::writer::pack_id_of(&name) else {
            continue;
        };
        let size = entry.metadata().at(&entry.path())?.len();
        names.push((id, entry.path(), size));
    }
    names.sort();
    Ok(names)
}

/// Carries out `plan`: the old ref log copied and the old catalog moved aside, an empty
/// catalog created (`Catalog::create_for_repair`: its transactions write no ref log), the
/// packs checked and indexed, every version they hold recorded, the names restored, and the
/// ref log written afresh as the new catalog states it. Nothing is deleted.
///
/// # Errors
/// [`Error::Io`]; [`Error::Catalog`]; [`Error::Interrupted`] while checking packs.
fn execute(plan: RepairPlan, progress: &dyn Progress) -> Result<RepairReport> {
    let mut report = RepairReport {
        store: plan.root.clone(),
        names_from: plan.names_from,
        ref_log_bad_lines: plan.log.bad_lines.clone(),
        ref_log_refused_lines: plan.refused.clone(),
        ..RepairReport::default()
    };
    set_aside(&plan, &mut report)?;
    let catalog = Catalog::create_for_repair(&plan.root.join("catalog.db"))?;
    let mut store = Store::from_parts(plan.root.clone(), catalog);
    let sealed = index_packs(&mut store, &plan.packs, &mut report, progress)?;
    check_deltas(&store, &sealed, &mut report)?;
    // Every version object, recorded (no head moves: the ref log says where heads are).
    let version_ids: BTreeSet<ObjectId> = sealed
        .iter()
        .flat_map(|p| &p.objects)
        .filter(|o| o.kind == ObjectKind::Version)
        .map(|o| o.id)
        .collect();
    let mut versions = Vec::new();
    {
        let mut reader = store.reader();
        for id in &version_ids {
            versions.push((*id, reader.version(id)?));
        }
    }
    report.versions = versions.len() as u64;
    report.ref_log_entries = plan.log.entries.len() as u64;
    let mut state = plan.state;
    let log_path = plan.root.join(reflog::FILE_NAME);
    restore_set_aside(&mut state, &log_path, &versions, &mut report)?;
    let known = |id: &ObjectId| version_ids.contains(id);
    let mut missing = BTreeSet::new();
    for entry in &plan.log.entries {
        if let Some(v) = entry.version()
            && !known(&v)
            && !matches!(entry, RefLogEntry::Unpin { .. })
        {
            missing.insert(v);
        }
    }
    restore_names(&mut store, &versions, &state, &mut report)?;
    report.missing_versions = missing.iter().map(ObjectId::to_hex).collect();
    // The ref log afresh, as the catalog now states it.
    store.catalog_mut().adopt_ref_log()?;
    Ok(report)
}

/// Copies the ref log and moves the old catalog (with its WAL) to the plan's backup names.
///
/// # Errors
/// [`Error::Io`].
fn set_aside(plan: &RepairPlan, report: &mut RepairReport) -> Result<()> {
    let root = &plan.root;
    if let Some(copy) = &plan.old_ref_log {
        let log = root.join(reflog::FILE_NAME);
        crate::store_file::check_regular_or_absent(&log).at(&log)?;
        fs::copy(&log, copy).at(copy)?;
        report.old_ref_log = Some(copy.clone());
    }
    if let Some(aside) = &plan.old_catalog {
        fs::rename(root.join("catalog.db"), aside).at(aside)?;
        for suffix in ["-wal", "-shm"] {
            let from = root.join(format!("catalog.db{suffix}"));
            if from.exists() {
                let mut to = aside.clone().into_os_string();
                to.push(suffix);
                let to = PathBuf::from(to);
                fs::rename(&from, &to).at(&to)?;
            }
        }
        report.old_catalog = Some(aside.clone());
    }
    Ok(())
}

/// Checks each of `packs` whole against its name and indexes those that pass by their own
/// footer in `store`'s catalog (one transaction), reporting the others as damaged. The
/// packs indexed.
///
/// # Errors
/// [`Error::Catalog`]; [`Error::Interrupted`].
fn index_packs(
    store: &mut Store,
    packs: &[(ObjectId, PathBuf, u64)],
    report: &mut RepairReport,
    progress: &dyn Progress,
) -> Result<Vec<SealedPack>> {
    progress.start(
        "indexing packs",
        packs.iter().map(|p| p.2).sum(),
        Unit::Bytes,
    );
    let mut sealed: Vec<SealedPack> = Vec::new();
    for (id, path, size) in packs {
        crate::interrupt::check()?;
        match crate::pack::reader::verify_pack(path, id, None) {
            Ok(index) => sealed.push(SealedPack {
                id: *id,
                size: *size,
                frames: index.frames,
                objects: index.objects,
                deltas: index.deltas,
            }),
            Err(e) => report
                .damaged_packs
                .push(format!("{}: {e}", path.display())),
        }
        progress.advance(*size);
    }
    progress.phase("rebuilding the catalog");
    // Of several copies of an object, the one that reads is indexed: the others' records go.
    let copies = choose_copies(&sealed);
    for (pack, object) in copies.passed_over.iter().rev() {
        sealed[*pack].objects.remove(*object);
    }
    report.copies_passed_over = copies.lines;
    let (sealed, passed_over): (Vec<SealedPack>, Vec<SealedPack>) =
        sealed.into_iter().partition(|pack| {
            !pack.objects.is_empty() || copies.emptied.binary_search(&pack.id).is_err()
        });
    report.packs_passed_over = passed_over
        .iter()
        .map(|pack| {
            crate::pack::writer::pack_path(&store.packs_dir(), &pack.id)
                .display()
                .to_string()
        })
        .collect();
    let writer = store.catalog_mut().writer()?;
    for pack in &sealed {
        writer.add_pack(pack)?;
        report.objects += pack.objects.len() as u64;
    }
    writer.commit()?;
    report.packs = sealed.len() as u64;
    Ok(sealed)
}

/// One copy of an object in the packs being indexed: pack number (in the list), object
/// number (in its pack's object list).
type CopyAt = (usize, usize);

/// What [`choose_copies`] decided.
#[derive(Debug, Default)]
struct CopyChoice {
    /// The copies not to index, sorted (pack number, then object number).
    passed_over: Vec<CopyAt>,
    /// The ids of the packs that held objects and hold none once those are left out, sorted.
    emptied: Vec<ObjectId>,
    /// One line per object with a copy passed over (`RepairReport::copies_passed_over`).
    lines: Vec<String>,
}

/// Chooses, for each object that `sealed` (by pack id) holds more than once with a copy in a
/// delta frame, the copy to index: the first plain copy; else the first delta copy whose
/// bases all read (each a chunk with a plain copy, or with a delta copy chosen in an earlier
/// round: so no cycle, and at most `MAX_DELTA_DEPTH` rounds, the depth a reader follows);
/// else, when no copy reads, the first (the copy indexed before this choice existed, which
/// `check_deltas` then reports). Objects held once, or only in plain frames, are left as
/// they are (the first copy is indexed). Reads the indexes only: bounded by the delta frames'
/// objects and bases.
fn choose_copies(sealed: &[SealedPack]) -> CopyChoice {
    use std::collections::{HashMap, HashSet};
    // The objects of delta frames, and the bases those frames name.
    let mut in_deltas: HashSet<(ObjectId, ObjectKind)> = HashSet::new();
    let mut bases: HashSet<ObjectId> = HashSet::new();
    for pack in sealed {
        for delta in &pack.deltas {
            bases.extend(delta.bases.iter().copied());
            in_deltas.extend(
                pack.objects
                    .iter()
                    .filter(|o| o.frame == delta.frame)
                    .map(|o| (o.id, o.kind)),
            );
        }
    }
    if in_deltas.is_empty() {
        return CopyChoice::default();
    }
    // Every copy of those objects, in pack order; and which bases have a plain copy.
    let mut copies: HashMap<(ObjectId, ObjectKind), Vec<CopyAt>> = HashMap::new();
    let mut readable: HashSet<ObjectId> = HashSet::new();
    for (p, pack) in sealed.iter().enumerate() {
        for (o, object) in pack.objects.iter().enumerate() {
            let key = (object.id, object.kind);
            let plain = pack.bases_of(object.frame).is_empty();
            if in_deltas.contains(&key) {
                copies.entry(key).or_default().push((p, o));
            }
            if plain && object.kind == ObjectKind::Chunk && bases.contains(&object.id) {
                readable.insert(object.id);
            }
        }
    }
    let bases_of = |(p, o): CopyAt| sealed[p].bases_of(sealed[p].objects[o].frame);
    let mut chosen: HashMap<(ObjectId, ObjectKind), CopyAt> = HashMap::new();
    for (key, at) in &copies {
        if let Some(plain) = at.iter().find(|c| bases_of(**c).is_empty()) {
            chosen.insert(*key, *plain);
        }
    }
    // Round by round, the deltas whose bases read: a chunk's chain is as short as its
    // copies allow.
    for _ in 0..crate::pack::format::MAX_DELTA_DEPTH {
        let mut resolved = Vec::new();
        for (key, at) in &copies {
            if chosen.contains_key(key) {
                continue;
            }
            if let Some(copy) = at
                .iter()
                .find(|c| bases_of(**c).iter().all(|b| readable.contains(b)))
            {
                resolved.push((*key, *copy));
            }
        }
        if resolved.is_empty() {
            break;
        }
        for (key, copy) in resolved {
            chosen.insert(key, copy);
            if key.1 == ObjectKind::Chunk {
                readable.insert(key.0);
            }
        }
    }
    let describe = |(p, o): CopyAt| {
        let pack = &sealed[p];
        let frame = &pack.frames[pack.objects[o].frame as usize];
        let encoding = if bases_of((p, o)).is_empty() {
            "plain".to_string()
        } else {
            let names: Vec<String> = bases_of((p, o)).iter().map(ObjectId::short).collect();
            format!("a delta against {}", names.join(", "))
        };
        format!("pack {} at offset {} ({encoding})", pack.id, frame.offset)
    };
    let mut out = CopyChoice::default();
    let mut keys: Vec<&(ObjectId, ObjectKind)> =
        copies.keys().filter(|k| copies[*k].len() > 1).collect();
    keys.sort_by_key(|(id, kind)| (*id, *kind as u8));
    for key in keys {
        let at = &copies[key];
        let keep = chosen.get(key).copied().unwrap_or(at[0]);
        let others: Vec<CopyAt> = at.iter().copied().filter(|c| *c != keep).collect();
        out.lines.push(format!(
            "{} {}: indexed its copy in {}{}; passed over {}",
            key.1.name(),
            key.0,
            describe(keep),
            if chosen.contains_key(key) {
                ""
            } else {
                ", though no copy reads"
            },
            others
                .iter()
                .map(|c| describe(*c))
                .collect::<Vec<_>>()
                .join("; ")
        ));
        out.passed_over.extend(others);
    }
    out.passed_over.sort_unstable();
    let mut left: Vec<usize> = sealed.iter().map(|p| p.objects.len()).collect();
    for (p, _) in &out.passed_over {
        left[*p] -= 1;
    }
    out.emptied = left
        .iter()
        .enumerate()
        .filter(|(p, n)| **n == 0 && !sealed[*p].objects.is_empty())
        .map(|(p, _)| sealed[p].id)
        .collect();
    out.emptied.sort_unstable();
    out
}

/// Decodes every delta frame of the `sealed` packs against its bases, now that `store`'s
/// catalog locates every base the packs hold, reporting those that do not read
/// ([`super::delta_check::DeltaCheck`]). The bases themselves came from each pack's index
/// (`frames.bases`, by `add_pack`).
///
/// # Errors
/// [`Error::Catalog`]; [`Error::Interrupted`].
fn check_deltas(store: &Store, sealed: &[SealedPack], report: &mut RepairReport) -> Result<()> {
    let mut check = super::delta_check::DeltaCheck::new(store);
    for pack in sealed.iter().filter(|p| !p.deltas.is_empty()) {
        let index = crate::pack::PackIndex {
            frames: pack.frames.clone(),
            objects: pack.objects.clone(),
            deltas: pack.deltas.clone(),
        };
        for delta in &pack.deltas {
            crate::interrupt::check()?;
            let frame = super::delta_check::DeltaFrame::of(&pack.id, &index, delta.frame);
            // A frame whose every chunk is indexed from another copy: no read decodes it.
            if frame.chunks.is_empty() {
                continue;
            }
            if let Err(problem) = check.check(&frame)? {
                report.unreadable_deltas.push(problem);
            }
        }
    }
    Ok(())
}

/// Applies to `state` the lines an earlier change set aside (`reflog.unapplied` beside the
/// ref log at `log_path`: a catalog restored from an older copy, then changed), which only
/// move names forward: a head to a descendant of the head it has, a tag that is not there;
/// only to `versions` (the packs').
///
/// # Errors
/// [`Error::Io`] reading `reflog.unapplied`.
fn restore_set_aside(
    state: &mut reflog::RefState,
    log_path: &Path,
    versions: &[(ObjectId, crate::object::Version)],
    report: &mut RepairReport,
) -> Result<()> {
    let parents: std::collections::HashMap<ObjectId, Option<ObjectId>> =
        versions.iter().map(|(id, v)| (*id, v.parent)).collect();
    let known = |id: &ObjectId| parents.contains_key(id);
    let descends = |from: &ObjectId, to: &ObjectId| {
        let mut next = Some(*to);
        let mut steps = 0usize;
        while let Some(id) = next {
            if id == *from {
                return true;
            }
            steps += 1;
            if steps > parents.len() {
                return false;
            }
            next = parents.get(&id).copied().flatten();
        }
        false
    };
    let set_aside = reflog::read(&reflog::unapplied_path(log_path), None)?;
    report
        .ref_log_refused_lines
        .extend(refused_lines("reflog.unapplied", &set_aside));
    for entry in &set_aside.entries {
        match entry {
            RefLogEntry::Head {
                dataset,
                version: Some(v),
            } if known(v)
                && state
                    .heads
                    .get(dataset)
                    .is_none_or(|head| head != v && descends(head, v)) =>
            {
                state.heads.insert(dataset.clone(), *v);
                report.set_aside_restored += 1;
            }
            RefLogEntry::Tag {
                dataset,
                tag,
                version: Some(v),
            } if known(v) && !state.tags.contains_key(&(dataset.clone(), tag.clone())) => {
                state.tags.insert((dataset.clone(), tag.clone()), *v);
                report.set_aside_restored += 1;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Records `versions` and restores `state`'s remotes, and its heads, tags, pins and
/// removals whose version is one of `versions`, in one catalog transaction.
///
/// # Errors
/// [`Error::Catalog`].
fn restore_names(
    store: &mut Store,
    versions: &[(ObjectId, crate::object::Version)],
    state: &reflog::RefState,
    report: &mut RepairReport,
) -> Result<()> {
    let known = |id: &ObjectId| versions.binary_search_by(|(v, _)| v.cmp(id)).is_ok();
    let writer = store.catalog_mut().writer()?;
    for (id, version) in versions {
        writer.record_version(id, version)?;
    }
    for (name, (url, options)) in &state.remotes {
        writer.add_remote(name, url, options)?;
        report.remotes += 1;
    }
    // Added in name order: then the read order the log gives.
    if !state.remote_order.is_sorted() {
        writer.set_remote_order(&state.remote_order)?;
    }
    for (dataset, head) in &state.heads {
        if known(head) {
            writer.set_head(dataset, head)?;
            report.heads += 1;
        }
    }
    for ((dataset, tag), version) in &state.tags {
        if known(version) {
            writer.set_tag(dataset, tag, version, true)?;
            report.tags += 1;
        }
    }
    for (version, (reason, until)) in &state.pins {
        if known(version) {
            writer.pin(version, reason, *until)?;
            report.pins += 1;
        }
    }
    let removed: Vec<ObjectId> = state.removed.iter().copied().filter(known).collect();
    report.removed = removed.len() as u64;
    writer.mark_removed(&removed)?;
    writer.commit()
}

/// `<unix seconds>-<n>`, with the first `n` no earlier repair's backups in `root` use.
fn unique_stamp(root: &Path) -> String {
    let now = unix_now();
    (0u32..)
        .map(|n| format!("{now}-{n}"))
        .find(|stamp| {
            !root
                .join(format!("catalog.db.before-repair-{stamp}"))
                .exists()
                && !root
                    .join(format!("{}.before-repair-{stamp}", reflog::FILE_NAME))
                    .exists()
        })
        .unwrap_or_else(|| format!("{now}-{}", std::process::id()))
}

/// The `.dsv` directory for `dir`: `dir` itself when it is one, else `dir/.dsv`.
pub fn store_dir(dir: &Path) -> PathBuf {
    if dir.file_name().is_some_and(|n| n == STORE_DIR) {
        dir.to_path_buf()
    } else {
        dir.join(STORE_DIR)
    }
}

/// The versions an unnamed pack file holds that the catalog lacks but the ref log names.
#[derive(Debug, Default)]
pub struct ForgottenVersions {
    /// Named by the part of the ref log the catalog applied: the catalog lost them.
    pub applied: Vec<ObjectId>,
    /// Named only past it, or in `reflog.unapplied`: a commit killed before its catalog
    /// transaction, or a catalog restored from an older copy. Either way, kept.
    pub unapplied: Vec<ObjectId>,
}

impl ForgottenVersions {
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.applied.is_empty() && self.unapplied.is_empty()
    }
}

/// The versions the ref log names, read once for every unnamed pack a gc or verify looks at.
struct NamedVersions {
    /// Named by the part of the ref log the catalog applied.
    applied: BTreeSet<ObjectId>,
    /// Named anywhere in it, or in `reflog.unapplied`.
    all: BTreeSet<ObjectId>,
}

/// Accounts for unnamed pack files: reads the ref log at most once, on the first pack that
/// holds a version (most unnamed packs, left by killed transfers, hold none).
pub struct PackAccounting<'a> {
    store: &'a Store,
    names: std::cell::OnceCell<NamedVersions>,
}

impl<'a> PackAccounting<'a> {
    /// Accounting against `store`'s catalog and ref log.
    pub fn new(store: &'a Store) -> Self {
        PackAccounting {
            store,
            names: std::cell::OnceCell::new(),
        }
    }

    fn names(&self) -> Result<&NamedVersions> {
        if let Some(names) = self.names.get() {
            return Ok(names);
        }
        let log_path = self.store.catalog().ref_log_path();
        let applied = self.store.catalog().ref_log_applied()?;
        let mut all = reflog::read(&log_path, None)?.named_versions();
        all.extend(reflog::read(&reflog::unapplied_path(&log_path), None)?.named_versions());
        let names = NamedVersions {
            applied: reflog::read(&log_path, applied)?.named_versions(),
            all,
        };
        Ok(self.names.get_or_init(|| names))
    }

    /// What the unnamed pack file at `path` holds that no cleanup may delete: its versions
    /// that the catalog lacks and the ref log (all of it, and `reflog.unapplied`) names.
    /// `Ok(None)` when the file is not a readable pack (its contents cannot be accounted for
    /// either).
    ///
    /// # Errors
    /// [`Error::Io`] reading the ref log; [`Error::Catalog`].
    pub fn forgotten_versions(&self, path: &Path) -> Result<Option<ForgottenVersions>> {
        let Ok(file) = crate::pack::open_listed_file(path) else {
            return Ok(None);
        };
        let Ok(crate::pack::PackIndex { objects, .. }) =
            crate::pack::reader::read_index(&file, path)
        else {
            return Ok(None);
        };
        let mut out = ForgottenVersions::default();
        for object in objects.iter().filter(|o| o.kind == ObjectKind::Version) {
            if self.store.catalog().version(&object.id)?.is_some() {
                continue;
            }
            let names = self.names()?;
            if names.applied.contains(&object.id) {
                out.applied.push(object.id);
            } else if names.all.contains(&object.id) {
                out.unapplied.push(object.id);
            }
        }
        Ok(Some(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::progress::NoProgress;

    /// A store in `dir` with one version of dataset `d`; its `.dsv` directory.
    fn store_with_a_version(dir: &Path) -> PathBuf {
        let mut store = Store::init(dir).unwrap();
        let data = dir.join("data");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(data.join("f"), "content").unwrap();
        let options = crate::ops::commit::CommitOptions::new("d");
        crate::ops::commit::commit(&mut store, &data, &options, &NoProgress).unwrap();
        store.root().to_path_buf()
    }

    #[test]
    fn a_plan_reads_the_names_and_lists_the_packs_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let root = store_with_a_version(dir.path());
        let before: Vec<_> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        let plan = plan(&root).unwrap();
        assert_eq!(plan.names_from, "ref log");
        assert!(plan.state.heads.contains_key("d"));
        assert!(plan.refused.is_empty());
        let packs = std::fs::read_dir(root.join("packs"))
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().extension() == Some("pack".as_ref()))
            .count();
        assert!(packs > 0);
        assert_eq!(plan.packs.len(), packs);
        assert!(plan.packs.windows(2).all(|w| w[0].0 < w[1].0));
        // The backups get names no file has yet; nothing was moved or copied.
        let aside = plan.old_catalog.clone().unwrap();
        assert!(!aside.exists() && !plan.old_ref_log.clone().unwrap().exists());
        let after: Vec<_> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(before, after);
        // Executed, it rebuilds what it planned and sets the old catalog aside.
        let report = execute(plan, &NoProgress).unwrap();
        assert_eq!((report.heads, report.versions), (1, 1));
        assert_eq!(report.packs, packs as u64);
        assert!(report.damaged_packs.is_empty() && report.missing_versions.is_empty());
        assert_eq!(report.old_catalog, Some(aside.clone()));
        assert!(aside.exists());
        // A second plan picks other backup names.
        assert_ne!(plan_of(&root).old_catalog, Some(aside));
    }

    fn plan_of(root: &Path) -> RepairPlan {
        plan(root).unwrap()
    }

    #[test]
    fn a_cut_ref_log_makes_the_old_catalog_the_record_and_a_lost_catalog_is_not_set_aside() {
        let dir = tempfile::tempdir().unwrap();
        let root = store_with_a_version(dir.path());
        let log = root.join(reflog::FILE_NAME);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&log)
            .unwrap()
            .set_len(0)
            .unwrap();
        let plan = plan_of(&root);
        assert_eq!(plan.names_from, "catalog");
        assert!(plan.state.heads.contains_key("d"));
        std::fs::remove_file(root.join("catalog.db")).unwrap();
        let plan = plan_of(&root);
        assert_eq!(plan.names_from, "ref log");
        assert!(plan.old_catalog.is_none() && plan.state.heads.is_empty());
    }
}
