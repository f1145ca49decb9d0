//! The local cache of versions: what each version costs here (`cache ls`) and bounded
//! eviction (`cache prune`).
//!
//! Eviction lets a version's chunks go from this store when every one of them, and every
//! base of their deltas there (transitively), is on a remote this store knows (by the
//! remote's pack indexes): its version object, trees and file maps stay, so a later checkout
//! fetches exactly the chunks back. A chunk of an evicted version that a kept delta here
//! names as a base stays: the gc that frees the space keeps every base of a live chunk. A version held only here is
//! never evicted; with `allow_data_loss` it is removed instead (its tags dropped; never a
//! dataset's head), and a pinned version or one a directory holds is never touched. `gc`
//! then frees the space.
//!
//! # cache prune, step by step
//!
//! `prune()` lists every version as `cache ls` does (`list`), keeps the newest `--keep-last` of
//! each dataset (from the head back along parents), filters by `--dataset` and `--older-than`,
//! and takes the rest least recently used first. `last_used` is in whole seconds, so versions
//! used in the same second are ordered by history, older first. Each candidate is skipped when
//! pinned or in use, evicted when a remote holds it, removed (as `rm` marks versions, without
//! its head and tag checks) with `--allow-data-loss`, else skipped. With `--max-size`, it stops
//! once the raw bytes of the chunks the catalog holds, less the `unique_bytes` of each version
//! acted on, fit. One transaction marks the evicted and removed versions; then `gc` runs with a
//! 1-hour grace and frees the space.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde::Serialize;

use crate::catalog::unix_now;
use crate::error::Result;
use crate::id::ObjectId;
use crate::object::{EntryKind, ObjectKind};
use crate::progress::Progress;
use crate::store::Store;

/// One version as the cache sees it.
#[derive(Debug, Clone, Serialize)]
pub struct CachedVersion {
    /// The dataset.
    pub dataset: String,
    /// The version.
    pub version: ObjectId,
    /// Bytes of chunks here that no other live version uses (what evicting it frees).
    pub unique_bytes: u64,
    /// Bytes of chunks here that other versions use too.
    pub shared_bytes: u64,
    /// Bytes of its chunks that are not here (on a remote).
    pub remote_only_bytes: u64,
    /// When it was last committed or checked out here (Unix seconds).
    pub last_used: i64,
    /// Whether a live pin holds it.
    pub pinned: bool,
    /// Whether an existing directory holds it.
    pub in_use: bool,
    /// Remotes holding every one of its chunks, by name.
    pub on_remotes: Vec<String>,
    /// Whether its chunks were let go (`cache prune`).
    pub evicted: bool,
}

/// Chunk ids and lengths of every live version, with the facts `cache ls` reports.
struct Usage {
    versions: Vec<(ObjectId, String, i64, bool)>,
    chunks: HashMap<ObjectId, Vec<(ObjectId, u32)>>,
}

fn usage(store: &Store) -> Result<Usage> {
    let mut reader = store.reader();
    let mut by_tree: HashMap<ObjectId, std::rc::Rc<Vec<(ObjectId, u32)>>> = HashMap::new();
    let mut versions = Vec::new();
    let mut chunks = HashMap::new();
    for (id, dataset, _created, used, evicted) in store.catalog().cached_versions()? {
        let root = reader.version(&id)?.tree;
        let list = tree_chunks(&mut reader, &root, &mut by_tree)?;
        let mut seen = HashSet::new();
        let list: Vec<(ObjectId, u32)> =
            list.iter().filter(|c| seen.insert(c.0)).copied().collect();
        chunks.insert(id, list);
        versions.push((id, dataset, used, evicted));
    }
    Ok(Usage { versions, chunks })
}

/// Distinct chunks under tree `id` with their lengths (from file maps, or the file itself),
/// memoized per tree so versions sharing subtrees are walked once, and each tree's list
/// holds each chunk once (a tree naming one subtree many times costs no more than once).
/// Iterative (children before parents), and refusing paths deeper than
/// [`crate::tree::MAX_TREE_DEPTH`] as every walk does.
fn tree_chunks(
    reader: &mut crate::store::ObjectReader<'_>,
    id: &ObjectId,
    memo: &mut HashMap<ObjectId, std::rc::Rc<Vec<(ObjectId, u32)>>>,
) -> Result<std::rc::Rc<Vec<(ObjectId, u32)>>> {
    if let Some(found) = memo.get(id) {
        return Ok(found.clone());
    }
    // Post-order without recursion: a tree is pushed once to expand (its subtrees above it on
    // the stack) and once more to combine, by which time every subtree is memoized. Trees are
    // content-addressed, so there is no cycle; the depth is capped all the same.
    let mut stack = vec![(*id, 0usize, false)];
    while let Some((tree_id, depth, expanded)) = stack.pop() {
        if memo.contains_key(&tree_id) {
            continue;
        }
        if !expanded {
            let tree = reader.tree(&tree_id)?;
            if depth >= crate::tree::MAX_TREE_DEPTH && !tree.entries.is_empty() {
                return Err(crate::error::Error::corrupt(
                    format!("tree {tree_id}"),
                    format!(
                        "it nests paths more than {} levels deep",
                        crate::tree::MAX_TREE_DEPTH
                    ),
                ));
            }
            stack.push((tree_id, depth, true));
            for entry in tree.entries {
                if matches!(entry.kind, EntryKind::Dir { .. }) && !memo.contains_key(&entry.id) {
                    stack.push((entry.id, depth + 1, false));
                }
            }
            continue;
        }
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for entry in reader.tree(&tree_id)?.entries {
            match entry.kind {
                EntryKind::Dir { .. } => {
                    let below = memo.get(&entry.id).cloned().ok_or_else(|| {
                        crate::error::Error::MissingObject {
                            id: entry.id.to_hex(),
                            what: "tree",
                        }
                    })?;
                    out.extend(below.iter().filter(|c| seen.insert(c.0)));
                }
                EntryKind::File { .. } => {
                    let ids = reader.chunk_ids(&entry.id, entry.size)?;
                    if ids.len() == 1 {
                        let length = u32::try_from(entry.size).unwrap_or(u32::MAX);
                        if seen.insert(ids[0]) {
                            out.push((ids[0], length));
                        }
                    } else if !ids.is_empty() {
                        let map = reader.bytes(&entry.id, ObjectKind::FileMap)?;
                        let map = crate::object::FileMap::decode(&map).map_err(|e| {
                            crate::error::Error::corrupt(
                                "file map",
                                format!("{}: {e}", entry.id.short()),
                            )
                        })?;
                        out.extend(map.chunks.into_iter().filter(|c| seen.insert(c.0)));
                    }
                }
                EntryKind::Symlink { .. } => {}
            }
        }
        memo.insert(tree_id, std::rc::Rc::new(out));
    }
    memo.get(id)
        .cloned()
        .ok_or_else(|| crate::error::Error::MissingObject {
            id: id.to_hex(),
            what: "tree",
        })
}

/// `dsv cache ls`: every live version with the bytes it alone holds here, the bytes it
/// shares, when it was last used, and what protects or backs it.
///
/// # Errors
/// Catalog and read errors.
pub fn list(store: &Store) -> Result<Vec<CachedVersion>> {
    let usage = usage(store)?;
    let mut refcount: HashMap<ObjectId, u32> = HashMap::new();
    for list in usage.chunks.values() {
        for (chunk, _) in list {
            *refcount.entry(*chunk).or_default() += 1;
        }
    }
    // Each dataset newest first by history (distance from the head along parents; times are
    // whole seconds and may tie), versions off the head's line after.
    let mut depth: HashMap<ObjectId, usize> = HashMap::new();
    for summary in store.catalog().datasets()? {
        let mut next = summary.head;
        while let Some(id) = next {
            let steps = depth.len();
            depth.insert(id, steps);
            next = store.catalog().version(&id)?.and_then(|r| r.version.parent);
        }
    }
    let mut usage = usage;
    usage.versions.sort_by_key(|(id, dataset, _, _)| {
        (
            dataset.clone(),
            depth.get(id).copied().unwrap_or(usize::MAX),
        )
    });
    let now = unix_now();
    let pins = store.catalog().pins()?;
    let workspaces = store.catalog().workspace_versions()?;
    let remotes = store.catalog().remotes()?;
    let here = store.catalog().object_ids(ObjectKind::Chunk)?;
    let mut out = Vec::new();
    for (id, dataset, last_used, evicted) in &usage.versions {
        let mut unique = 0;
        let mut shared = 0;
        let mut remote_only = 0;
        let list = &usage.chunks[id];
        for (chunk, length) in list {
            if !here.contains(chunk) {
                remote_only += u64::from(*length);
            } else if refcount[chunk] == 1 {
                unique += u64::from(*length);
            } else {
                shared += u64::from(*length);
            }
        }
        let mut on_remotes = Vec::new();
        for remote in &remotes {
            let mut all = store
                .catalog()
                .remote_locate(remote.id, id, ObjectKind::Version)?
                .is_some();
            for (chunk, _) in list {
                if !all {
                    break;
                }
                all = store
                    .catalog()
                    .remote_locate(remote.id, chunk, ObjectKind::Chunk)?
                    .is_some();
            }
            // And every base of those chunks' deltas there, transitively: a checkout of the
            // evicted version fetches its closure back from the remote.
            if all {
                let chunks: Vec<ObjectId> = list.iter().map(|(chunk, _)| *chunk).collect();
                for base in store.catalog().remote_delta_bases_of(remote.id, &chunks)? {
                    if store
                        .catalog()
                        .remote_locate(remote.id, &base, ObjectKind::Chunk)?
                        .is_none()
                    {
                        all = false;
                        break;
                    }
                }
            }
            if all {
                on_remotes.push(remote.name.clone());
            }
        }
        out.push(CachedVersion {
            dataset: dataset.clone(),
            version: *id,
            unique_bytes: unique,
            shared_bytes: shared,
            remote_only_bytes: remote_only,
            last_used: *last_used,
            pinned: pins
                .iter()
                .any(|p| p.version == *id && p.until.is_none_or(|u| u > now)),
            in_use: workspaces
                .iter()
                .any(|(path, v)| v == id && std::path::Path::new(path).is_dir()),
            on_remotes,
            evicted: *evicted,
        });
    }
    Ok(out)
}

/// What `cache prune` may evict.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct PruneOptions {
    /// Keep the newest N versions of each dataset (counted from its head back along parents).
    pub keep_last: usize,
    /// Only versions not used for at least this long.
    pub older_than: Option<Duration>,
    /// Evict least-recently-used versions until the bytes held here fit (bytes).
    pub max_size: Option<u64>,
    /// Only this dataset.
    pub dataset: Option<String>,
    /// Remove (as `dsv rm`) versions held nowhere else instead of skipping them.
    pub allow_data_loss: bool,
    /// Plan only.
    pub dry_run: bool,
}

/// One version `cache prune` acted on or skipped.
#[derive(Debug, Clone, Serialize)]
pub struct PruneAction {
    /// The dataset.
    pub dataset: String,
    /// The version.
    pub version: ObjectId,
    /// `evicted` (a remote holds its chunks), `removed` (with `--allow-data-loss`), or
    /// `skipped`.
    pub action: &'static str,
    /// Bytes its eviction frees here (its unique bytes).
    pub bytes: u64,
    /// Why, for a skipped version.
    pub reason: Option<String>,
}

/// The outcome of `cache prune`.
#[derive(Debug, Clone, Serialize)]
pub struct PruneReport {
    /// Versions evicted, removed or skipped, least recently used first.
    pub actions: Vec<PruneAction>,
    /// Bytes of chunks held here before.
    pub bytes_before: u64,
    /// The gc that freed the space (absent in a dry run).
    pub gc: Option<super::gc::GcReport>,
}

/// `dsv cache prune`: chooses versions by the options, least recently used first, evicts
/// those a remote fully holds (or removes them with `allow_data_loss`), then runs gc.
///
/// # Errors
/// As [`list`] and [`super::gc::gc`].
pub fn prune(
    store: &mut Store,
    options: &PruneOptions,
    progress: &dyn Progress,
) -> Result<PruneReport> {
    let listed = list(store)?;
    let now = unix_now();
    let held_total: u64 = local_chunk_bytes(store)?;
    // The newest `keep_last` of each dataset stay.
    let mut kept: HashSet<ObjectId> = HashSet::new();
    let mut per_dataset: HashMap<&str, usize> = HashMap::new();
    for version in &listed {
        // `list` is ordered by dataset, newest first.
        let seen = per_dataset.entry(version.dataset.as_str()).or_default();
        if *seen < options.keep_last {
            kept.insert(version.version);
        }
        *seen += 1;
    }
    let mut candidates: Vec<&CachedVersion> = listed
        .iter()
        .filter(|v| !v.evicted && !kept.contains(&v.version))
        .filter(|v| options.dataset.as_ref().is_none_or(|d| *d == v.dataset))
        .filter(|v| {
            options
                .older_than
                .is_none_or(|age| now - v.last_used >= age.as_secs() as i64)
        })
        .collect();
    // Least recently used first; `list` gives each dataset newest first, so reversing makes
    // the older version win a tie (last_used is in whole seconds).
    candidates.reverse();
    candidates.sort_by_key(|v| v.last_used);
    let heads: HashSet<ObjectId> = store
        .catalog()
        .datasets()?
        .into_iter()
        .filter_map(|d| d.head)
        .collect();
    let mut actions = Vec::new();
    let mut held = held_total;
    let mut evict = Vec::new();
    let mut remove = Vec::new();
    for version in candidates {
        if options.max_size.is_some_and(|max| held <= max) {
            break;
        }
        let skip = |reason: &str| PruneAction {
            dataset: version.dataset.clone(),
            version: version.version,
            action: "skipped",
            bytes: 0,
            reason: Some(reason.to_string()),
        };
        if version.pinned {
            actions.push(skip("pinned"));
            continue;
        }
        if version.in_use {
            actions.push(skip("a directory holds it"));
            continue;
        }
        let action = if !version.on_remotes.is_empty() {
            evict.push(version.version);
            "evicted"
        } else if heads.contains(&version.version) {
            actions.push(skip(
                "no remote holds it and it is the dataset's head (`dsv rm NAME` removes a whole dataset)",
            ));
            continue;
        } else if options.allow_data_loss {
            remove.push(version.version);
            "removed"
        } else {
            actions.push(skip(
                "no remote holds it (push it first, or pass --allow-data-loss)",
            ));
            continue;
        };
        held = held.saturating_sub(version.unique_bytes);
        actions.push(PruneAction {
            dataset: version.dataset.clone(),
            version: version.version,
            action,
            bytes: version.unique_bytes,
            reason: None,
        });
    }
    if options.dry_run {
        return Ok(PruneReport {
            actions,
            bytes_before: held_total,
            gc: None,
        });
    }
    {
        let _lock = store.lock_head_alone()?;
        let writer = store.catalog_mut().writer()?;
        writer.mark_evicted(&evict)?;
        writer.mark_removed(&remove)?;
        writer.commit()?;
    }
    let gc = super::gc::gc(store, &super::gc::GcOptions::default(), progress)?;
    Ok(PruneReport {
        actions,
        bytes_before: held_total,
        gc: Some(gc),
    })
}

/// Bytes of chunks held in this store.
fn local_chunk_bytes(store: &Store) -> Result<u64> {
    Ok(store
        .catalog()
        .object_counts()?
        .into_iter()
        .filter(|(kind, _, _)| *kind == ObjectKind::Chunk)
        .map(|(_, _, bytes)| bytes)
        .sum())
}

// The cache limit (`dsv cache limit`, `Store.set_cache_limit` in Python): the setting
// here, the eviction in [`crate::eviction`].

pub use crate::eviction::{
    EVICT_LOCK_WAIT, Eviction, enforce_limit, enforce_limit_under, held_bytes, take_eviction_lock,
};

/// The store's cache limit in bytes (`dsv cache limit`), when set.
///
/// # Errors
/// [`crate::Error::InvalidConfig`] for a settings file that does not parse; I/O errors.
pub fn limit(store: &Store) -> Result<Option<u64>> {
    Ok(store.config()?.cache.limit)
}

/// Sets (`Some`) or clears (`None`) the store's cache limit; returns the limit before.
///
/// # Errors
/// [`crate::Error::InvalidSetting`] for a limit of 0; settings errors as [`limit`].
pub fn set_limit(store: &Store, limit: Option<u64>) -> Result<Option<u64>> {
    if limit == Some(0) {
        return Err(crate::Error::InvalidSetting {
            key: "cache.limit",
            value: "0".into(),
            reason:
                "expected a size of at least 1 byte (`dsv cache limit --clear` removes the limit)"
                    .into(),
        });
    }
    let _lock = store.lock_head_alone()?;
    let mut config = store.config()?;
    let before = config.cache.limit;
    config.cache.limit = limit;
    config.save(store.root())?;
    Ok(before)
}

/// What the store holds against its cache limit (`dsv cache limit` without a size).
#[derive(Debug, Clone, Serialize)]
pub struct LimitStatus {
    /// The limit in bytes; absent when none is set.
    pub limit: Option<u64>,
    /// Bytes of every pack this store holds.
    pub held_bytes: u64,
    /// Of those, bytes of packs the limit may evict (only chunks a remote holds).
    pub evictable_bytes: u64,
}

/// The limit and what the store holds against it.
///
/// # Errors
/// As [`limit`]; catalog errors.
pub fn limit_status(store: &Store) -> Result<LimitStatus> {
    Ok(LimitStatus {
        limit: limit(store)?,
        held_bytes: store.catalog().packs()?.iter().map(|(_, size)| size).sum(),
        evictable_bytes: store
            .catalog()
            .remote_held_packs()?
            .iter()
            .map(|(_, size)| size)
            .sum(),
    })
}

/// Parses a size: a number with an optional unit, `B`, `KB`, `MB`, `GB`, `TB` (powers of
/// 1000) or `KiB`, `MiB`, `GiB`, `TiB` (powers of 1024), case-insensitive (`10GiB`,
/// `512 MB`, `1.5GB`, `4096`).
///
/// # Errors
/// A message naming the text and the units, for anything else.
pub fn parse_size(text: &str) -> std::result::Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a size such as 50GB or 512MiB"))?;
    let factor: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        other => {
            return Err(format!(
                "unknown size unit {other:?}: use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB"
            ));
        }
    };
    Ok((number * factor) as u64)
}
