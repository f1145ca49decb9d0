//! Lineage records: what a training run read (`dsv-lineage.json`, schema `dsv.lineage/1`,
//! written by the Python package's `dsv.lineage`), and their audit (`dsv audit --lineage`),
//! which replays the record against this store and proves the samples it names.
//!
//! A record names a version (dataset, id, root tree, the `dsv://` URI), the selection the
//! loader read (its include globs or its explicit list of paths, with the number of files,
//! their bytes and a digest of their paths), and the order it read them in: the loader, the
//! shuffle, seed, epoch, rank and world size, and how many samples the rank had consumed. A
//! loader's order is a pure function of these (the permutation is [`permutation`], the one
//! `dsv.torch` uses), so the audit recomputes it and checks the digest of the samples the
//! record says were seen.
//!
//! # Digests
//!
//! A digest of ids (paths) is `blake3:` followed by the hex BLAKE3 of each id's UTF-8 bytes,
//! each followed by one NUL byte, in order ([`ids_digest`]). A path never holds a NUL, so two
//! lists share a digest only when they are the same list.
//!
//! # What an audit proves
//!
//! - **version**: the version is recorded here, or is fetched (its metadata only) from a
//!   configured remote whose URL is one the record names, as `audit --lock` does.
//! - **dataset**, **tree**, **uri**: the version object belongs to the dataset the record
//!   names, names the root tree it names, and the URI names that version.
//! - **selection**: the record's include globs (or list of paths) select, in this version,
//!   the number of files and bytes it names, with the same digest of their paths.
//! - **samples** (`IterableVersionDataset`): the rank's order for the epoch, recomputed, has
//!   at least the samples the record says were seen, and the first that many have the
//!   record's digest (and are the ids it lists, when it lists them).
//! - **shards** (`TarShardDataset`): the rank's shards in the epoch's order have the record's
//!   digest. (Its samples are tar members: their count is reported, not proven.)
//!
//! - **lock**: when the `dsv.lock` the record names is found (beside the record, else at the
//!   path it gives), its BLAKE3 is the record's and it pins the record's version.
//!
//! A `VersionDataset` (map-style: the order is its sampler's) and a `ParquetRowDataset` get
//! the version and selection checks only (and the lock's).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::lock_file::{LockedRemote, fetch_pinned};
use crate::catalog::unix_now;
use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::progress::Progress;
use crate::read::Selection;
use crate::store::Store;
use crate::tree::{self, FlatEntry, FlatKind};

/// The schema tag of the lineage records this dsv reads.
pub const LINEAGE_SCHEMA: &str = "dsv.lineage/1";

/// The most bytes a lineage record may hold (64 MiB: a record lists at most a few hundred
/// thousand ids); a longer file is refused before it is parsed.
pub const MAX_LINEAGE_BYTES: u64 = 64 << 20;

/// The order of `n` items for `key`: a Fisher–Yates shuffle driven by BLAKE3's extendable
/// output of `key` (derived with the context `dsv 2025 python shuffle`), so the same key
/// gives the same order on every machine and platform. `dsv.torch` passes
/// `"{version id}\0{seed}\0{epoch}"` (and a suffix for the order of tar shards and row
/// groups). Draws are uniform (rejection sampling, no modulo bias).
pub fn permutation(n: usize, key: &[u8]) -> Vec<usize> {
    let mut hasher = blake3::Hasher::new_derive_key("dsv 2025 python shuffle");
    hasher.update(key);
    let mut stream = hasher.finalize_xof();
    let mut next = || {
        let mut bytes = [0u8; 8];
        stream.fill(&mut bytes);
        u64::from_le_bytes(bytes)
    };
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        // Uniform in 0..=i by rejection: no modulo bias.
        let bound = i as u64 + 1;
        let zone = u64::MAX - (u64::MAX % bound);
        let j = loop {
            let r = next();
            if r < zone {
                break (r % bound) as usize;
            }
        };
        order.swap(i, j);
    }
    order
}

/// The digest of a list of ids (paths): `blake3:` and the hex BLAKE3 of each id's bytes
/// followed by a NUL byte, in order.
pub fn ids_digest<'a>(ids: impl IntoIterator<Item = &'a str>) -> String {
    let mut hasher = blake3::Hasher::new();
    for id in ids {
        hasher.update(id.as_bytes());
        hasher.update(&[0]);
    }
    format!("blake3:{}", hasher.finalize().to_hex())
}

/// A lineage record, as `dsv audit --lineage` reads it (fields it does not check, such as
/// the tracker's run id, the lock file's hash or the time, are allowed and ignored).
#[derive(Debug, Clone, Deserialize)]
pub struct LineageRecord {
    /// Always [`LINEAGE_SCHEMA`].
    pub schema: String,
    /// `dsv://DATASET@VERSION_ID`.
    pub uri: String,
    /// The dataset.
    pub dataset: String,
    /// The version id.
    pub version: ObjectId,
    /// Its root tree.
    pub tree: ObjectId,
    /// Remotes known to hold the version when the record was made (where to fetch it from).
    #[serde(default)]
    pub remotes: Vec<LockedRemote>,
    /// The loader that read it (`IterableVersionDataset`, `VersionDataset`,
    /// `TarShardDataset`, `ParquetRowDataset`), or none for a bare version.
    #[serde(default)]
    pub loader: Option<String>,
    /// What it read of the version.
    pub selection: RecordSelection,
    /// In what order (absent for a bare version).
    #[serde(default)]
    pub order: Option<RecordOrder>,
    /// How far it got.
    #[serde(default)]
    pub samples: Option<RecordSamples>,
    /// The lock file the run used, if any.
    #[serde(default)]
    pub lock: Option<RecordLock>,
}

/// The lock file a run used, as a record names it.
#[derive(Debug, Clone, Deserialize)]
pub struct RecordLock {
    /// Its path as the run gave it (relative paths: to the record's directory, else to the
    /// working directory of the audit).
    pub path: PathBuf,
    /// The hex BLAKE3 of its bytes.
    pub blake3: String,
}

/// The files a loader read of the version.
#[derive(Debug, Clone, Deserialize)]
pub struct RecordSelection {
    /// Glob patterns; `null` or empty: every file.
    #[serde(default)]
    pub include: Option<Vec<String>>,
    /// An explicit list of paths, in the loader's order (a `TarShardDataset`'s shards),
    /// instead of globs.
    #[serde(default)]
    pub paths: Option<Vec<String>>,
    /// Number of files selected.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// [`ids_digest`] of their paths (path order for globs, the list's order for paths).
    pub digest: String,
}

/// What a loader's order depends on.
#[derive(Debug, Clone, Deserialize)]
pub struct RecordOrder {
    /// Whether the order is shuffled.
    pub shuffle: bool,
    /// The shuffle's seed.
    pub seed: i64,
    /// The epoch.
    pub epoch: i64,
    /// The rank the record is of.
    pub rank: u64,
    /// The number of ranks.
    pub world_size: u64,
    /// `IterableVersionDataset(equal_per_rank=True)`: every rank padded to `ceil(N / W)`.
    #[serde(default)]
    pub equal_per_rank: bool,
    /// `TarShardDataset`: [`ids_digest`] of this rank's shards in the epoch's order.
    #[serde(default)]
    pub rank_shards: Option<String>,
}

/// How far the rank got in the epoch.
#[derive(Debug, Clone, Deserialize)]
pub struct RecordSamples {
    /// Samples the training loop consumed (this rank, this epoch).
    pub seen: u64,
    /// [`ids_digest`] of the seen samples' ids, in the order they were read
    /// (`IterableVersionDataset`: their paths).
    #[serde(default)]
    pub digest: Option<String>,
    /// The seen samples' ids, when the record lists them (short runs).
    #[serde(default)]
    pub ids: Option<Vec<String>>,
}

/// One check of a lineage audit.
#[derive(Debug, Clone, Serialize)]
pub struct LineageCheck {
    /// `version`, `dataset`, `tree`, `uri`, `selection`, `samples`, `shards` or `lock`.
    pub check: &'static str,
    /// Whether the record passed it.
    pub ok: bool,
    /// What was compared, or what differs.
    pub detail: String,
}

/// What `dsv audit --lineage` reports.
#[derive(Debug, Clone, Serialize)]
pub struct LineageAuditReport {
    /// The record, as given.
    pub lineage: PathBuf,
    /// The dataset it names.
    pub dataset: String,
    /// The version it names.
    pub version: ObjectId,
    /// The root tree it names.
    pub tree: ObjectId,
    /// The loader it names, if any.
    pub loader: Option<String>,
    /// The remote the version's metadata was fetched from for this audit, if it was not here.
    pub fetched_from: Option<String>,
    /// The samples the record says the rank consumed, if it says.
    pub samples_seen: Option<u64>,
    /// True when the seen samples' ids were recomputed from the order and matched (the
    /// `samples` check ran and passed).
    pub samples_proven: bool,
    /// Every check run, in order; a failed version check ends the audit.
    pub checks: Vec<LineageCheck>,
    /// True when every check passed.
    pub proven: bool,
    /// When the audit ran, Unix seconds.
    pub audited_at: i64,
    /// How long it took, in seconds.
    pub seconds: f64,
    /// The dsv that ran it.
    pub dsv_version: &'static str,
}

/// Reads and checks a lineage record: a regular file (a symlink to one is followed) of at
/// most [`MAX_LINEAGE_BYTES`], opened without waiting (a FIFO is refused), JSON of schema
/// [`LINEAGE_SCHEMA`].
///
/// # Errors
/// [`Error::Io`]; [`Error::InvalidLineage`] when it is not a regular file, is too long, is
/// not UTF-8 JSON of a lineage record, is of another schema, or names a rank outside its
/// world size.
pub fn read_record(path: &Path) -> Result<LineageRecord> {
    let invalid = |reason: String| Error::InvalidLineage {
        path: path.to_path_buf(),
        reason,
    };
    let text =
        super::lock_file::read_bounded_text(path, MAX_LINEAGE_BYTES, "lineage record", invalid)?;
    parse_record(&text, path)
}

/// Parses and checks the text of lineage record `path` (named in errors), as
/// [`read_record`] does. Public, as [`super::lock_file::parse_lock`] is, for a fuzz target
/// (none yet).
///
/// # Errors
/// As [`read_record`], less [`Error::Io`].
pub fn parse_record(text: &str, path: &Path) -> Result<LineageRecord> {
    let invalid = |reason: String| Error::InvalidLineage {
        path: path.to_path_buf(),
        reason,
    };
    // The schema first, so a record of another schema is named as such.
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| invalid(format!("it is not JSON: {e}")))?;
    match value.get("schema").and_then(|s| s.as_str()) {
        Some(LINEAGE_SCHEMA) => {}
        Some(other) => {
            return Err(invalid(format!(
                "its schema is {other:?}, not {LINEAGE_SCHEMA:?}: made by another dsv"
            )));
        }
        None => {
            return Err(invalid(format!(
                "it has no \"schema\": {LINEAGE_SCHEMA:?} (write it with dsv.lineage.write)"
            )));
        }
    }
    let record: LineageRecord =
        serde_json::from_value(value).map_err(|e| invalid(e.to_string()))?;
    if let Some(order) = &record.order
        && (order.world_size == 0 || order.rank >= order.world_size)
    {
        return Err(invalid(format!(
            "rank {} of world size {}: the rank counts from 0 and must be less than the world size",
            order.rank, order.world_size
        )));
    }
    Ok(record)
}

/// The indexes into a selection of `n` files that rank `order.rank` reads in the epoch, in
/// order, as `dsv.torch.IterableVersionDataset.rank_order` computes them: the permutation of
/// `"{version}\0{seed}\0{epoch}"` (or path order without shuffle), padded by repeating it
/// to `ceil(n / W) * W` with `equal_per_rank`, then every `W`-th from the rank.
pub fn iterable_rank_order(version: &ObjectId, n: usize, order: &RecordOrder) -> Vec<usize> {
    let world = order.world_size.max(1) as usize;
    let all: Vec<usize> = if order.shuffle {
        let key = format!("{}\0{}\0{}", version.to_hex(), order.seed, order.epoch);
        permutation(n, key.as_bytes())
    } else {
        (0..n).collect()
    };
    let rank = usize::try_from(order.rank).unwrap_or(usize::MAX);
    if order.equal_per_rank && n > 0 {
        // Positions rank, rank + W, ... of the order padded (by repeating it) to
        // ceil(n / W) * W: never materialized, so a record naming a huge world size (outside
        // input) costs what the rank reads, not the padded length.
        let per_rank = n.div_ceil(world);
        return (0..per_rank)
            .filter_map(|k| k.checked_mul(world)?.checked_add(rank))
            .map(|position| all[position % n])
            .collect();
    }
    all.into_iter().skip(rank).step_by(world).collect()
}

/// The shards rank `order.rank` reads in the epoch, in order, as
/// `dsv.torch.TarShardDataset.rank_shards` computes them: the permutation of
/// `"{version}\0{seed}\0{epoch}\0shards"` over the listed shards (or their listed order
/// without shuffle), then every `W`-th from the rank.
pub fn tar_rank_shards<'a>(
    version: &ObjectId,
    shards: &'a [String],
    order: &RecordOrder,
) -> Vec<&'a str> {
    let world = order.world_size.max(1) as usize;
    let all: Vec<usize> = if order.shuffle {
        let key = format!(
            "{}\0{}\0{}\0shards",
            version.to_hex(),
            order.seed,
            order.epoch
        );
        permutation(shards.len(), key.as_bytes())
    } else {
        (0..shards.len()).collect()
    };
    all.into_iter()
        .skip(order.rank as usize)
        .step_by(world)
        .map(|i| shards[i].as_str())
        .collect()
}

/// Audits lineage record `path` against this store: reads it ([`read_record`]), makes sure
/// the store knows the version (fetching its metadata from a configured remote whose URL the
/// record names, when it does not: the only write), and runs the checks the module
/// documentation lists. A record that does not match is a report with failed checks, not an
/// error.
///
/// # Errors
/// As [`read_record`]; as [`super::sync::fetch()`] while fetching; [`Error::MissingObject`]
/// or [`Error::Corrupt`] for the version's trees; [`Error::VersionTooLarge`] for a listing
/// this process cannot hold.
pub fn audit_lineage(
    store: &mut Store,
    path: &Path,
    jobs: usize,
    progress: &dyn Progress,
) -> Result<LineageAuditReport> {
    let started = std::time::Instant::now();
    let record = read_record(path)?;
    let mut checks = Vec::new();
    let mut samples_proven = false;
    let fetched_from = fetch_pinned(store, &record.version, &record.remotes, jobs, progress)?;
    let found = store.catalog().version(&record.version)?;
    let report = |checks: Vec<LineageCheck>, samples_proven: bool| LineageAuditReport {
        lineage: path.to_path_buf(),
        dataset: record.dataset.clone(),
        version: record.version,
        tree: record.tree,
        loader: record.loader.clone(),
        fetched_from: fetched_from.clone(),
        samples_seen: record.samples.as_ref().map(|s| s.seen),
        samples_proven,
        proven: checks.iter().all(|c| c.ok),
        checks,
        audited_at: unix_now(),
        seconds: started.elapsed().as_secs_f64(),
        dsv_version: env!("CARGO_PKG_VERSION"),
    };
    let Some(found) = found else {
        checks.push(missing_version_check(&record));
        return Ok(report(checks, false));
    };
    let version = found.version;
    checks.extend(identity_checks(&record, &version, fetched_from.as_deref()));
    if version.tree != record.tree {
        // The selection and order of another tree prove nothing.
        return Ok(report(checks, false));
    }
    crate::object::check_listable(&record.version, version.files)?;
    let entries = tree::flatten_version(&mut store.reader(), &version)?;
    let revision = format!("{}@{}", record.dataset, record.version.short());
    let selected = match select(&record.selection, &entries, &revision) {
        Ok(selected) => selected,
        Err(detail) => {
            checks.push(LineageCheck {
                check: "selection",
                ok: false,
                detail,
            });
            return Ok(report(checks, false));
        }
    };
    let paths: Vec<&str> = selected.iter().map(|e| e.path.as_str()).collect();
    let bytes: u64 = selected.iter().map(|e| e.size).sum();
    let selection = selection_check(&record.selection, &paths, bytes);
    let selection_ok = selection.ok;
    checks.push(selection);
    if !selection_ok {
        return Ok(report(checks, false));
    }
    if let Some(check) = order_check(&record, &paths) {
        samples_proven = check.ok && check.check == "samples";
        checks.push(check);
    }
    if let Some(lock) = &record.lock
        && let Some(check) = check_lock(path, lock, &record)
    {
        checks.push(check);
    }
    Ok(report(checks, samples_proven))
}

/// The `version` check of a record whose version neither this store nor a configured remote
/// the record names holds: what to do about it.
fn missing_version_check(record: &LineageRecord) -> LineageCheck {
    let urls: Vec<&str> = record.remotes.iter().map(|r| r.url.as_str()).collect();
    let detail = if urls.is_empty() {
        format!(
            "version {} is not in this store, and the record names no remote: audit in the store that made it",
            record.version.short()
        )
    } else {
        format!(
            "version {} is not in this store, nor on a configured remote the record names ({}): `dsv remote add NAME {}` and run again",
            record.version.short(),
            urls.join(", "),
            urls[0]
        )
    };
    LineageCheck {
        check: "version",
        ok: false,
        detail,
    }
}

/// The `version`, `dataset`, `tree` and `uri` checks: the record names `version` (found here,
/// or fetched from remote `fetched_from`) by its dataset, root tree and URI.
fn identity_checks(
    record: &LineageRecord,
    version: &crate::object::Version,
    fetched_from: Option<&str>,
) -> [LineageCheck; 4] {
    let short = record.version.short();
    let expected_uri = format!("dsv://{}@{}", record.dataset, record.version.to_hex());
    let uri_ok = record.uri == expected_uri;
    [
        LineageCheck {
            check: "version",
            ok: true,
            detail: match fetched_from {
                Some(remote) => format!("{short} fetched from remote {remote}"),
                None => format!("{short} is in this store"),
            },
        },
        LineageCheck {
            check: "dataset",
            ok: version.dataset == record.dataset,
            detail: if version.dataset == record.dataset {
                format!("{short} belongs to {}", record.dataset)
            } else {
                format!(
                    "{short} belongs to {}, not to {} as the record says",
                    version.dataset, record.dataset
                )
            },
        },
        LineageCheck {
            check: "tree",
            ok: version.tree == record.tree,
            detail: if version.tree == record.tree {
                format!("root tree {}", version.tree.short())
            } else {
                format!(
                    "the version's root tree is {}, the record names {}",
                    version.tree.short(),
                    record.tree.short()
                )
            },
        },
        LineageCheck {
            check: "uri",
            ok: uri_ok,
            detail: if uri_ok {
                expected_uri
            } else {
                format!(
                    "{} does not name the version the record names ({expected_uri})",
                    record.uri
                )
            },
        },
    ]
}

/// The `selection` check: the version's files the record's selection picks, `paths` of
/// `bytes` in all, are the count, bytes and digest the record states.
fn selection_check(recorded: &RecordSelection, paths: &[&str], bytes: u64) -> LineageCheck {
    let digest = ids_digest(paths.iter().copied());
    let ok = paths.len() as u64 == recorded.files
        && bytes == recorded.bytes
        && digest == recorded.digest;
    LineageCheck {
        check: "selection",
        ok,
        detail: if ok {
            format!("{} files, {bytes} bytes", paths.len())
        } else {
            format!(
                "the record's selection is {} files, {} bytes ({}); it selects {} files, {bytes} bytes ({digest}) of this version",
                recorded.files,
                recorded.bytes,
                recorded.digest,
                paths.len()
            )
        },
    }
}

/// The order check of the loaders that record one: the samples an `IterableVersionDataset`
/// rank saw (`samples`), or the shards a `TarShardDataset` rank read (`shards`). `None` for
/// a record of another loader, or without an order.
fn order_check(record: &LineageRecord, paths: &[&str]) -> Option<LineageCheck> {
    match (record.loader.as_deref(), &record.order, &record.samples) {
        (Some("IterableVersionDataset"), Some(order), Some(samples)) => {
            Some(prove_iterable(&record.version, paths, order, samples))
        }
        (Some("TarShardDataset"), Some(order), _) => {
            let shards: Vec<String> = paths.iter().map(|p| p.to_string()).collect();
            let mine = tar_rank_shards(&record.version, &shards, order);
            let digest = ids_digest(mine.iter().copied());
            let ok = order.rank_shards.as_deref() == Some(digest.as_str());
            Some(LineageCheck {
                check: "shards",
                ok,
                detail: if ok {
                    format!(
                        "rank {} of {} read {} shard(s) in epoch {}",
                        order.rank,
                        order.world_size,
                        mine.len(),
                        order.epoch
                    )
                } else {
                    format!(
                        "rank {} of {} reads shards {digest} in epoch {}, the record says {}",
                        order.rank,
                        order.world_size,
                        order.epoch,
                        order.rank_shards.as_deref().unwrap_or("nothing")
                    )
                },
            })
        }
        _ => None,
    }
}

/// The `lock` check: when the lock file the record names is found (beside the record, else
/// where the record says), its BLAKE3 is the record's and it pins the record's version.
/// `None` when it is found nowhere (a record travels without its lock file).
fn check_lock(
    record_path: &Path,
    lock: &RecordLock,
    record: &LineageRecord,
) -> Option<LineageCheck> {
    let beside = record_path
        .parent()
        .map(|dir| dir.join(&lock.path))
        .filter(|_| lock.path.is_relative());
    let found = beside
        .into_iter()
        .chain([lock.path.clone()])
        .find(|p| p.is_file())?;
    let check = |ok: bool, detail: String| {
        Some(LineageCheck {
            check: "lock",
            ok,
            detail,
        })
    };
    // Read as a lock file first (a regular file, bounded, a dsv lock): a record naming some
    // other file (outside input) learns nothing of it, not even its hash.
    let invalid = |reason: String| crate::Error::InvalidLock {
        path: found.clone(),
        reason,
    };
    let text = match super::lock_file::read_bounded_text(
        &found,
        super::lock_file::MAX_LOCK_BYTES,
        "lock file",
        invalid,
    ) {
        Ok(text) => text,
        Err(e) => return check(false, e.to_string()),
    };
    let parsed = super::lock_file::parse_lock(&text, &found);
    if parsed.is_ok() && blake3::hash(text.as_bytes()).to_hex().as_str() != lock.blake3 {
        return check(
            false,
            format!(
                "{} is not the lock file the run used (its BLAKE3 is not the record's {}): the lock changed since the run",
                found.display(),
                lock.blake3
            ),
        );
    }
    match parsed {
        Ok(parsed) => match parsed.datasets.get(&record.dataset) {
            Some(pinned) if pinned.version == record.version => check(
                true,
                format!(
                    "{} pins {}@{}",
                    found.display(),
                    record.dataset,
                    record.version.short()
                ),
            ),
            Some(pinned) => check(
                false,
                format!(
                    "{} pins {}@{}, not the version the record names",
                    found.display(),
                    record.dataset,
                    pinned.version.short()
                ),
            ),
            None => check(
                false,
                format!("{} pins no version of {}", found.display(), record.dataset),
            ),
        },
        Err(e) => check(false, e.to_string()),
    }
}

/// The files `selection` picks of `entries`: by its globs (path order), or its explicit
/// paths (in their order, each a file of the version). The error is the check's detail.
fn select<'a>(
    selection: &RecordSelection,
    entries: &'a [FlatEntry],
    revision: &str,
) -> std::result::Result<Vec<&'a FlatEntry>, String> {
    if let Some(paths) = &selection.paths {
        let files: HashMap<&str, &FlatEntry> = entries
            .iter()
            .filter(|e| matches!(e.kind, FlatKind::File { .. }))
            .map(|e| (e.path.as_str(), e))
            .collect();
        let missing: Vec<&str> = paths
            .iter()
            .map(|p| p.as_str())
            .filter(|p| !files.contains_key(p))
            .take(5)
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "the record's paths are not all files of {revision}: {}",
                missing.join(", ")
            ));
        }
        return Ok(paths.iter().map(|p| files[p.as_str()]).collect());
    }
    let chosen = Selection {
        include: selection.include.clone().unwrap_or_default(),
        ..Selection::default()
    };
    chosen
        .apply(entries, revision)
        .map_err(|e| format!("the record's include globs do not select from {revision}: {e}"))
}

/// The `samples` check of an `IterableVersionDataset` record.
fn prove_iterable(
    version: &ObjectId,
    paths: &[&str],
    order: &RecordOrder,
    samples: &RecordSamples,
) -> LineageCheck {
    let rank_order = iterable_rank_order(version, paths.len(), order);
    let fail = |detail: String| LineageCheck {
        check: "samples",
        ok: false,
        detail,
    };
    if samples.seen > rank_order.len() as u64 {
        return fail(format!(
            "the record says rank {} saw {} samples in epoch {}, but its order has {}",
            order.rank,
            samples.seen,
            order.epoch,
            rank_order.len()
        ));
    }
    let seen: Vec<&str> = rank_order[..samples.seen as usize]
        .iter()
        .map(|i| paths[*i])
        .collect();
    let digest = ids_digest(seen.iter().copied());
    if let Some(ids) = &samples.ids
        && (ids.len() != seen.len() || ids.iter().zip(&seen).any(|(a, b)| a != b))
    {
        let at = ids
            .iter()
            .zip(&seen)
            .position(|(a, b)| a != b)
            .unwrap_or(ids.len().min(seen.len()));
        return fail(format!(
            "the record's ids differ from the order at sample {at}: it lists {} ids, {} {}, the order gives {}",
            ids.len(),
            if at < ids.len() {
                "then"
            } else {
                "ending before"
            },
            ids.get(at).map_or("-", |s| s.as_str()),
            seen.get(at).copied().unwrap_or("-")
        ));
    }
    match &samples.digest {
        Some(recorded) if *recorded == digest => LineageCheck {
            check: "samples",
            ok: true,
            detail: format!(
                "the first {} of rank {} of {}'s {} samples in epoch {} ({digest})",
                samples.seen,
                order.rank,
                order.world_size,
                rank_order.len(),
                order.epoch
            ),
        },
        Some(recorded) => fail(format!(
            "the first {} samples of rank {} of {} in epoch {} have digest {digest}, the record says {recorded}",
            samples.seen, order.rank, order.world_size, order.epoch
        )),
        None => fail("the record gives no digest of the samples seen".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_huge_world_size_in_a_record_costs_what_the_rank_reads() {
        let order = RecordOrder {
            shuffle: false,
            seed: 0,
            epoch: 0,
            rank: 3,
            world_size: 1 << 40,
            equal_per_rank: false,
            rank_shards: None,
        };
        let padded = RecordOrder {
            equal_per_rank: true,
            ..order.clone()
        };
        let version = ObjectId::from_slice(&[7; 32]).expect("32 bytes");
        assert_eq!(iterable_rank_order(&version, 10, &order), vec![3]);
        // Padded to W samples by repeating the order: the rank reads one, position 3.
        assert_eq!(iterable_rank_order(&version, 10, &padded), vec![3]);
        let small = RecordOrder {
            rank: 1,
            world_size: 4,
            ..padded.clone()
        };
        // 10 samples padded to 12: rank 1 reads positions 1, 5, 9.
        assert_eq!(iterable_rank_order(&version, 10, &small), vec![1, 5, 9]);
    }

    #[test]
    fn the_permutation_is_fixed_by_its_key() {
        // The order dsv.torch has shipped with (`dsv._dsv.permutation(10, "k")` of main
        // before the function moved here): recorded runs replay only while it stays so.
        let order = permutation(10, b"k");
        assert_eq!(order, [3, 4, 0, 2, 6, 8, 9, 1, 5, 7]);
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(sorted, (0..10).collect::<Vec<_>>());
        assert_eq!(order, permutation(10, b"k"));
        assert_ne!(order, permutation(10, b"k2"));
        assert!(permutation(0, b"k").is_empty());
    }

    #[test]
    fn the_ids_digest_separates_ids() {
        assert_ne!(ids_digest(["ab", "c"]), ids_digest(["a", "bc"]));
        assert!(ids_digest([]).starts_with("blake3:"));
    }

    #[test]
    fn ranks_take_every_world_size_th_sample_and_pad_when_asked() {
        let id = ObjectId([7; 32]);
        let mut order = RecordOrder {
            shuffle: false,
            seed: 0,
            epoch: 0,
            rank: 1,
            world_size: 3,
            equal_per_rank: false,
            rank_shards: None,
        };
        assert_eq!(iterable_rank_order(&id, 7, &order), vec![1, 4]);
        order.equal_per_rank = true;
        order.rank = 0;
        // 7 padded to 9: 0..7 then 0, 1.
        assert_eq!(iterable_rank_order(&id, 7, &order), vec![0, 3, 6]);
        order.rank = 2;
        assert_eq!(iterable_rank_order(&id, 7, &order), vec![2, 5, 1]);
    }

    #[test]
    fn a_record_of_another_schema_or_a_bad_rank_is_refused() {
        let path = Path::new("r.json");
        let err = parse_record(r#"{"schema": "x/2"}"#, path).unwrap_err();
        assert!(err.to_string().contains("x/2"), "{err}");
        let err = parse_record("[", path).unwrap_err();
        assert!(matches!(err, Error::InvalidLineage { .. }));
        let hex = "ab".repeat(32);
        let text = format!(
            r#"{{"schema": "dsv.lineage/1", "uri": "dsv://m@{hex}", "dataset": "m", "version": "{hex}",
               "tree": "{hex}", "selection": {{"files": 0, "bytes": 0, "digest": "d"}},
               "order": {{"shuffle": false, "seed": 0, "epoch": 0, "rank": 2, "world_size": 2}}}}"#
        );
        let err = parse_record(&text, path).unwrap_err();
        assert!(err.to_string().contains("rank 2 of world size 2"), "{err}");
    }
}
