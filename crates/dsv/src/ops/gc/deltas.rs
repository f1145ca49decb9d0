//! Reverse deltas at gc (issue 39): the head version of each dataset stored whole (bar
//! chunks that are deltas against the head's own whole chunks), each older
//! version's own chunks as deltas against the chunks of the same path in a newer version, as
//! `git gc` repacks. Planned here ([`plan_encodings`]), carried out by gc's copy.
//!
//! # The pass
//!
//! Each dataset's live versions are taken from its head back along parents (removed and
//! evicted versions are passed over: their chunks are not kept for them). A chunk is
//! *assigned* an encoding the first time the pass meets it, so a chunk several versions
//! share takes the encoding its newest version gives it:
//!
//! - a chunk of the head (the newest version not evicted): whole, or, when it pays, a
//!   delta against head chunks already stored whole that resemble it whatever their path
//!   ([`super::resemblance`]: a table's aggregate against the table), so one level deep at
//!   most. The head's files are taken largest first. A head chunk stored now as a delta
//!   against anything else (a forward delta made at commit) is rewritten;
//! - a chunk of an older version: a delta against the chunks of the same path in a newer
//!   version that overlap its offset scaled by the ratio of the two files' lengths (as
//!   commit picks bases), first the next newer version, else the head. Kept only when it
//!   stores at most half of what the chunk alone does, the chain stays within
//!   [`GC_DELTA_DEPTH`] levels, and the stored bytes of its closure (itself and its bases,
//!   recursively, each once) are at most twice its raw length. Else, as for the head, a
//!   delta against the whole chunks that resemble it (a file renamed or split), else whole.
//!
//! A chunk whose encoding is already the one chosen is left where it is, so a second gc
//! rewrites nothing.
//!
//! **No cycles**: a chunk only takes as bases chunks assigned before it in the pass (newer
//! versions' chunks), whose own bases were assigned before them. A chunk that keeps a delta
//! encoding the pass did not choose (its pack is leased) has its whole present closure
//! assigned as it is at that moment, so no later chunk of that closure takes it as a base.
//! Chunks of live versions no pass meets (left off a head's line of parents by `dsv reset`)
//! keep their encoding, and so do their bases, recursively (`off_line_closure`): re-encoding
//! a base under such a chain could make it deeper than readers follow. Leased chunks and
//! chunks a remote holds keep theirs too.
//!
//! **Within a dataset**: a chunk's bases are chunks of its own dataset's versions (the
//! resemblance index starts empty for each dataset), so a push of one dataset carries no
//! data of another.

use std::collections::{HashMap, HashSet};

use super::resemblance::{self, Resemblance};
use crate::catalog::ChunkStorage;
use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::object::ObjectKind;
use crate::pack::DeltaCompressor;
use crate::pack::format::{MAX_DELTA_BASES, MAX_DELTA_PREFIX};
use crate::progress::Progress;
use crate::store::{ObjectReader, Store};
use crate::tree::FlatKind;

/// The zstd level of the deltas gc writes. Measured on 10 daily versions of a public CSV
/// series (datasets/covid-19, 5 files, 7.2 MB a version; `docs/bench-deltas.md`), each older
/// version's deltas: level 3 63 KB, 9 26 KB, 12 6.6 KB, 16 6.3 KB, 19 6.1 KB; CPU time
/// for the nine: 12 about a third of 19's. So 12.
pub const GC_DELTA_LEVEL: i32 = 12;

/// The zstd level of chunks gc rewrites whole (a head chunk committed as a delta): the head
/// is most of what a store of a growing table holds after gc (1.0 MB at 19 against 1.2 MB
/// at 3 for the series above), and decoding costs the same at any level.
pub const GC_WHOLE_LEVEL: i32 = 19;

/// The deepest delta chain gc makes: a chunk at most this many levels of bases from a whole
/// chunk. Reading a version `d` levels down decodes up to `d` newer versions' frames; past
/// the cap, an older version's chunk takes the head's chunks as bases (depth 1) and a new
/// chain starts from it.
pub const GC_DELTA_DEPTH: u32 = 8;

/// The level a candidate delta is tried at first, to leave data that shares nothing with
/// its bases (media, or a file rewritten whole) whole at little cost. Level 1's tables are
/// too small to match into a prefix of several chunks (its deltas of the series above were
/// as large as the chunks alone); 3 finds most of it.
const TRIAL_LEVEL: i32 = 3;

/// Deltas computed while planning are kept for the copy up to this many bytes in all (past
/// it, the copy computes them again).
const KEPT_DELTA_BYTES: usize = 256 << 20;

/// A chunk gc stores anew: whole (`bases` empty) or as a delta against `bases`, in prefix
/// order.
#[derive(Debug, Clone)]
pub struct Rewrite {
    /// The chunk.
    pub chunk: ObjectId,
    /// Its bases, in prefix order; empty: stored whole.
    pub bases: Vec<ObjectId>,
    /// The delta's stored bytes as planned (for a delta; kept for the copy while
    /// [`KEPT_DELTA_BYTES`] allows).
    pub delta: Option<std::sync::Arc<Vec<u8>>>,
    /// The zstd level it is stored at: [`GC_WHOLE_LEVEL`] for a head's chunk (whole or a
    /// delta against chunks that resemble it), [`GC_DELTA_LEVEL`] for an older version's
    /// delta.
    pub level: i32,
}

/// What the pass decided: the chunks to store anew, in the order they were assigned (each
/// one's bases before it), and every chunk's bases after gc.
#[derive(Debug, Clone, Default)]
pub struct Encodings {
    /// Chunks stored anew, in assignment order.
    pub rewrites: Vec<Rewrite>,
    /// Index of each rewritten chunk in [`Encodings::rewrites`].
    index: HashMap<ObjectId, usize>,
    /// Chunks the pass stores whole (a head's, and older ones no delta pays for), rewritten
    /// or not.
    pub whole: HashSet<ObjectId>,
    /// The same, in the order the pass met them (a head's files in path order, each file's
    /// chunks in order): the order a repack writes them in, so a frame holds neighbours.
    pub whole_order: Vec<ObjectId>,
}

impl Encodings {
    /// The rewrite of `chunk`, if gc stores it anew.
    pub fn rewrite(&self, chunk: &ObjectId) -> Option<&Rewrite> {
        self.index.get(chunk).map(|&i| &self.rewrites[i])
    }

    /// The bases `chunk` has once gc is done: its rewrite's, or those it has now.
    pub fn bases_after<'a>(
        &'a self,
        chunk: &ObjectId,
        storage: &'a HashMap<ObjectId, ChunkStorage>,
    ) -> &'a [ObjectId] {
        match self.rewrite(chunk) {
            Some(rewrite) => &rewrite.bases,
            None => storage.get(chunk).map_or(&[], |s| &s.bases[..]),
        }
    }

    fn push(&mut self, rewrite: Rewrite) {
        self.index.insert(rewrite.chunk, self.rewrites.len());
        self.rewrites.push(rewrite);
    }
}

/// [`Assigned::stored`] of a chunk stored whole whose size is not needed yet: computed
/// ([`Pass::plain_size`]) only when the chunk is in a closure the rules check, so a pass
/// reads no chunk that no delta takes as a base.
const NOT_YET: u64 = u64::MAX;

/// A chunk's place after the pass: its chain depth and its stored bytes (as estimated).
#[derive(Debug, Clone, Copy)]
struct Assigned {
    depth: u32,
    stored: u64,
}

/// A file of a version: its chunks with their lengths, in order.
type FileChunks = Vec<(ObjectId, u32)>;

/// Files of a version by path.
type Listing = HashMap<String, std::rc::Rc<FileChunks>>;

struct Pass<'s> {
    storage: &'s HashMap<ObjectId, ChunkStorage>,
    /// Chunks that stay where they are (their pack is leased): never rewritten.
    fixed: &'s HashSet<ObjectId>,
    /// Chunks the live versions reach (gc keeps them).
    live: &'s HashSet<ObjectId>,
    assigned: HashMap<ObjectId, Assigned>,
    out: Encodings,
    kept_bytes: usize,
    compressor: DeltaCompressor,
    plain: Option<zstd::bulk::Compressor<'static>>,
    /// Each chunk's bytes compressed alone at [`TRIAL_LEVEL`], once computed.
    plain_sizes: HashMap<ObjectId, u64>,
    /// The chunks stored whole so far, by their features: bases for a chunk no same-path
    /// delta pays for.
    resemblance: Resemblance,
    /// Compare every compressible chunk with those that resemble it, not only the chunks
    /// stored anew anyway ([`super::GcOptions::aggressive`]).
    aggressive: bool,
}

/// Plans reverse deltas for every dataset (see the module notes): which live chunks gc
/// stores anew, and how. `live` are the chunks the live versions reach, `fixed` those whose
/// packs stay as they are (leased), `storage` how every chunk here is stored now.
///
/// # Errors
/// Reading trees, file maps and chunks ([`Error::MissingObject`], [`Error::Corrupt`],
/// [`Error::Io`]); [`Error::Interrupted`].
pub fn plan_encodings(
    store: &Store,
    (storage, live, fixed): (
        &HashMap<ObjectId, ChunkStorage>,
        &HashSet<ObjectId>,
        &HashSet<ObjectId>,
    ),
    aggressive: bool,
    progress: &dyn Progress,
) -> Result<Encodings> {
    progress.phase("planning deltas");
    let mut reader = store.reader();
    let mut datasets = store.catalog().datasets()?;
    datasets.sort_by(|a, b| a.name.cmp(&b.name));
    let frozen = off_line_closure(store, &mut reader, storage, &datasets)?;
    let fixed: HashSet<ObjectId> = fixed.union(&frozen).copied().collect();
    let mut pass = Pass {
        storage,
        fixed: &fixed,
        live,
        assigned: HashMap::new(),
        out: Encodings::default(),
        kept_bytes: 0,
        compressor: DeltaCompressor::default(),
        plain: zstd::bulk::Compressor::new(TRIAL_LEVEL).ok(),
        plain_sizes: HashMap::new(),
        resemblance: Resemblance::default(),
        aggressive,
    };
    for dataset in datasets {
        // Deltas stay within a dataset: a chunk of one never takes another dataset's chunk
        // as a base (a push of one dataset would carry the other's data with it).
        pass.resemblance = Resemblance::default();
        let mut next = dataset.head;
        // The newest version taken (its chunks whole) and the one taken last.
        let mut head: Option<std::rc::Rc<Listing>> = None;
        let mut newer: Option<std::rc::Rc<Listing>> = None;
        let mut seen = HashSet::new();
        while let Some(id) = next {
            crate::interrupt::check()?;
            if !seen.insert(id) {
                break;
            }
            let Some(record) = store.catalog().version(&id)? else {
                break;
            };
            next = record.version.parent;
            if store.catalog().removed_at(&id)?.is_some() || store.catalog().is_evicted(&id)? {
                continue;
            }
            let listing = std::rc::Rc::new(listing(store, &mut reader, &record.version.tree)?);
            let (Some(newest), Some(last)) = (&head, &newer) else {
                pass.head(&mut reader, &listing)?;
                head = Some(listing.clone());
                newer = Some(listing);
                continue;
            };
            let candidates: Vec<&Listing> = if std::rc::Rc::ptr_eq(newest, last) {
                vec![newest.as_ref()]
            } else {
                vec![last.as_ref(), newest.as_ref()]
            };
            pass.older(&mut reader, &listing, &candidates)?;
            newer = Some(listing);
        }
    }
    Ok(pass.out)
}

/// The chunks of the live versions no pass meets (left off a head's line of parents by
/// `dsv reset`), with their bases, recursively: they keep their encoding, so that no chain
/// through them grows past the format's depth while the pass re-encodes a base under it.
fn off_line_closure(
    store: &Store,
    reader: &mut ObjectReader<'_>,
    storage: &HashMap<ObjectId, ChunkStorage>,
    datasets: &[crate::catalog::DatasetSummary],
) -> Result<HashSet<ObjectId>> {
    let catalog = store.catalog();
    let mut walked = HashSet::new();
    for dataset in datasets {
        let mut next = dataset.head;
        while let Some(id) = next {
            if !walked.insert(id) {
                break;
            }
            next = catalog.version(&id)?.and_then(|r| r.version.parent);
        }
    }
    let mut frozen = HashSet::new();
    let mut stack = Vec::new();
    for id in catalog.live_versions()? {
        crate::interrupt::check()?;
        if walked.contains(&id) || catalog.is_evicted(&id)? {
            continue;
        }
        let Some(record) = catalog.version(&id)? else {
            continue;
        };
        for chunks in listing(store, reader, &record.version.tree)?.values() {
            stack.extend(chunks.iter().map(|(chunk, _)| *chunk));
        }
    }
    while let Some(chunk) = stack.pop() {
        if frozen.insert(chunk) {
            stack.extend(storage.get(&chunk).map_or(&[][..], |s| &s.bases[..]));
        }
    }
    Ok(frozen)
}

/// The files of tree `root` with their chunks and lengths, by path.
fn listing(store: &Store, reader: &mut ObjectReader<'_>, root: &ObjectId) -> Result<Listing> {
    let mut out = Listing::new();
    for entry in crate::tree::flatten(reader, root)? {
        if !matches!(entry.kind, FlatKind::File { .. }) || entry.size == 0 {
            continue;
        }
        let chunks = if store.catalog().has_object(&entry.id, ObjectKind::FileMap)? {
            let bytes = reader.bytes(&entry.id, ObjectKind::FileMap)?;
            crate::store::decode_file_map(&bytes, &entry.id, entry.size)
                .map_err(|detail| Error::corrupt("file map", detail))?
                .chunks
        } else {
            vec![(entry.id, u32::try_from(entry.size).unwrap_or(u32::MAX))]
        };
        out.insert(entry.path, std::rc::Rc::new(chunks));
    }
    Ok(out)
}

impl Pass<'_> {
    /// A chunk the pass may choose an encoding for: held here, live, not leased, and its
    /// present closure held here.
    fn movable(&self, chunk: &ObjectId) -> bool {
        self.storage.contains_key(chunk) && self.live.contains(chunk) && !self.fixed.contains(chunk)
    }

    /// The stored bytes of `chunk` as it is now: its share of its frame.
    fn stored_now(&self, chunk: &ObjectId) -> u64 {
        self.storage.get(chunk).map_or(0, |s| {
            if s.frame_raw == 0 {
                return u64::from(s.frame_stored);
            }
            u64::from(s.frame_stored) * u64::from(s.length) / u64::from(s.frame_raw)
        })
    }

    /// Assigns `chunk` the encoding it has now, and first its present closure (so that no
    /// later chunk of that closure takes it as a base). Iterative; a chain longer than the
    /// format allows, or a cycle, is left to `verify` (the depth saturates).
    fn keep(&mut self, chunk: ObjectId) {
        let mut stack = vec![(chunk, false)];
        let mut on_path = HashSet::new();
        while let Some((id, expanded)) = stack.pop() {
            if self.assigned.contains_key(&id) {
                continue;
            }
            let bases: Vec<ObjectId> = self.out.bases_after(&id, self.storage).to_vec();
            if !expanded {
                if !on_path.insert(id) {
                    // A cycle in the present encoding: assign it as it is, shallow.
                    self.assigned.insert(
                        id,
                        Assigned {
                            depth: u32::MAX / 2,
                            stored: self.stored_now(&id),
                        },
                    );
                    continue;
                }
                stack.push((id, true));
                for base in bases.iter().rev() {
                    if !self.assigned.contains_key(base) {
                        stack.push((*base, false));
                    }
                }
                continue;
            }
            on_path.remove(&id);
            let depth = bases
                .iter()
                .filter_map(|b| self.assigned.get(b))
                .map(|a| a.depth.saturating_add(1))
                .max()
                .unwrap_or(0);
            self.assigned.insert(
                id,
                Assigned {
                    depth,
                    stored: self.stored_now(&id),
                },
            );
        }
    }

    /// The bytes of `chunk` (raw, `raw` when already read) compressed alone at
    /// [`TRIAL_LEVEL`]: what the closure rule counts for a chunk stored whole. A function of
    /// the chunk's bytes only, not of how its frame happens to be stored now, so that a
    /// second gc counts what the first did and chooses the same.
    fn plain_size(
        &mut self,
        reader: &mut ObjectReader<'_>,
        chunk: &ObjectId,
        raw: Option<&[u8]>,
    ) -> Result<u64> {
        if let Some(size) = self.plain_sizes.get(chunk) {
            return Ok(*size);
        }
        let read;
        let bytes = match raw {
            Some(bytes) => bytes,
            None => {
                read = reader.bytes(chunk, ObjectKind::Chunk)?;
                &read[..]
            }
        };
        let size = match &mut self.plain {
            Some(c) => c.compress(bytes).map_or(bytes.len(), |z| z.len()),
            None => bytes.len(),
        } as u64;
        self.plain_sizes.insert(*chunk, size);
        Ok(size)
    }

    /// Assigns `chunk` whole (depth 0), rewriting it when it is a delta now.
    fn assign_whole(&mut self, chunk: ObjectId, stored: u64) {
        self.assigned.insert(chunk, Assigned { depth: 0, stored });
        self.out.whole.insert(chunk);
        self.out.whole_order.push(chunk);
        if !self.storage[&chunk].bases.is_empty() {
            self.out.push(Rewrite {
                chunk,
                bases: Vec::new(),
                delta: None,
                level: GC_WHOLE_LEVEL,
            });
        }
    }

    /// The head's chunks: whole, or deltas against head chunks stored whole that resemble
    /// them (one level deep at most). Files largest first: a file that holds another's
    /// content (a table and its aggregate) is more often the larger.
    fn head(&mut self, reader: &mut ObjectReader<'_>, listing: &Listing) -> Result<()> {
        let mut files = ordered(listing);
        files.sort_by_key(|chunks| {
            std::cmp::Reverse(chunks.iter().map(|c| u64::from(c.1)).sum::<u64>())
        });
        for chunks in files {
            for (chunk, length) in chunks.iter() {
                if self.meets(chunk)? {
                    self.choose(reader, *chunk, *length, &[], (GC_WHOLE_LEVEL, 1))?;
                }
            }
        }
        Ok(())
    }

    /// Whether the pass chooses an encoding for `chunk` now: not when it was assigned
    /// before, nor when it may not move (then its present encoding is kept, [`Pass::keep`]).
    ///
    /// # Errors
    /// [`Error::Interrupted`].
    fn meets(&mut self, chunk: &ObjectId) -> Result<bool> {
        if self.assigned.contains_key(chunk) {
            return Ok(false);
        }
        crate::interrupt::check()?;
        if !self.movable(chunk) {
            self.keep(*chunk);
            return Ok(false);
        }
        Ok(true)
    }

    /// An older version's chunks not met yet: deltas against a newer version's, if that pays.
    fn older(
        &mut self,
        reader: &mut ObjectReader<'_>,
        listing: &Listing,
        candidates: &[&Listing],
    ) -> Result<()> {
        for (path, chunks) in ordered_paths(listing) {
            let total: u64 = chunks.iter().map(|c| u64::from(c.1)).sum();
            let mut offset = 0u64;
            for (chunk, length) in chunks.iter() {
                let start = offset;
                offset += u64::from(*length);
                if !self.meets(chunk)? {
                    continue;
                }
                let options: Vec<Vec<ObjectId>> = candidates
                    .iter()
                    .filter_map(|newer| newer.get(path))
                    .map(|newer| self.overlapping(newer, start, u64::from(*length), total, chunk))
                    .filter(|bases| !bases.is_empty())
                    .collect();
                self.choose(
                    reader,
                    *chunk,
                    *length,
                    &options,
                    (GC_DELTA_LEVEL, GC_DELTA_DEPTH),
                )?;
            }
        }
        Ok(())
    }

    /// The chunks of `newer` (a file's chunks in a newer version) that overlap the range
    /// `start..start + length` of a file of `total` bytes, scaled to `newer`'s length:
    /// usable bases only (assigned, held here,
    /// not `chunk`), at most [`MAX_DELTA_BASES`] and [`MAX_DELTA_PREFIX`] bytes, nearest the
    /// middle first when there are more.
    fn overlapping(
        &self,
        newer: &FileChunks,
        start: u64,
        length: u64,
        total: u64,
        chunk: &ObjectId,
    ) -> Vec<ObjectId> {
        let newer_total: u64 = newer.iter().map(|c| u64::from(c.1)).sum();
        if total == 0 || newer_total == 0 {
            return Vec::new();
        }
        let scale = |x: u64| (u128::from(x) * u128::from(newer_total) / u128::from(total)) as u64;
        // No slack: on the covid-19 series, a slack of an eighth of the chunk each side gave
        // the same deltas with 2.9 bases each instead of 2.0 (each base costs 36 bytes of
        // index, its prefix bytes to compress against, and a wider closure to read).
        let slack = 0;
        let from = scale(start).saturating_sub(slack);
        let to = scale(start + length) + slack;
        let middle = (from + to) / 2;
        let mut found: Vec<(u64, usize, ObjectId, u32)> = Vec::new();
        let mut offset = 0u64;
        for (i, (id, len)) in newer.iter().enumerate() {
            let (a, b) = (offset, offset + u64::from(*len));
            offset = b;
            if b <= from || a >= to || id == chunk {
                continue;
            }
            if !self.assigned.contains_key(id) || !self.storage.contains_key(id) {
                continue;
            }
            let centre = (a + b) / 2;
            found.push((centre.abs_diff(middle), i, *id, *len));
        }
        found.sort();
        let mut chosen: Vec<(usize, ObjectId)> = Vec::new();
        let mut prefix = 0u64;
        for (_, i, id, len) in found {
            if chosen.len() >= MAX_DELTA_BASES || prefix + u64::from(len) > MAX_DELTA_PREFIX {
                break;
            }
            if chosen.iter().any(|(_, c)| *c == id) {
                continue;
            }
            prefix += u64::from(len);
            chosen.push((i, id));
        }
        chosen.sort();
        chosen.into_iter().map(|(_, id)| id).collect()
    }

    /// The depth and the stored bytes of the closure of a chunk with `bases` (each chunk of
    /// the closure counted once), not counting the chunk itself.
    fn closure_of(
        &mut self,
        reader: &mut ObjectReader<'_>,
        bases: &[ObjectId],
    ) -> Result<(u32, u64)> {
        let mut depth = 0;
        for base in bases {
            if let Some(a) = self.assigned.get(base) {
                depth = depth.max(a.depth.saturating_add(1));
            }
        }
        let mut seen = HashSet::new();
        let mut stack: Vec<ObjectId> = bases.to_vec();
        let mut members = Vec::new();
        while let Some(id) = stack.pop() {
            if !seen.insert(id) {
                continue;
            }
            members.push(id);
            stack.extend(self.out.bases_after(&id, self.storage).iter().copied());
        }
        let mut stored = 0u64;
        for id in members {
            let Some(assigned) = self.assigned.get(&id).copied() else {
                continue;
            };
            let size = if assigned.stored == NOT_YET {
                let size = self.plain_size(reader, &id, None)?;
                self.assigned.insert(
                    id,
                    Assigned {
                        stored: size,
                        ..assigned
                    },
                );
                size
            } else {
                assigned.stored
            };
            stored = stored.saturating_add(size);
        }
        Ok((depth, stored))
    }

    /// Chooses `chunk`'s encoding among the base lists `options` (nearest version first),
    /// else the chunks stored whole that most resemble it ([`resemblance`]), else whole, and
    /// records it. A delta is made at `level`, at most `max_depth` levels deep.
    fn choose(
        &mut self,
        reader: &mut ObjectReader<'_>,
        chunk: ObjectId,
        length: u32,
        options: &[Vec<ObjectId>],
        (level, max_depth): (i32, u32),
    ) -> Result<()> {
        let limit = 2 * u64::from(length);
        let now = self.storage[&chunk].clone();
        // A delta already against chunks assigned before it (so no cycle), within the depth
        // and closure rules: left as it is, whichever option it took (so a second gc, whose
        // estimates of stored sizes differ, rewrites nothing).
        if !now.bases.is_empty() && now.bases.iter().all(|b| self.assigned.contains_key(b)) {
            let (depth, closure) = self.closure_of(reader, &now.bases)?;
            let stored = self.stored_now(&chunk);
            if depth <= max_depth && closure + stored <= limit {
                self.assigned.insert(chunk, Assigned { depth, stored });
                return Ok(());
            }
        }
        let mut raw: Option<Vec<u8>> = None;
        for bases in options {
            if self.try_delta(reader, chunk, length, &mut raw, bases, (level, max_depth))? {
                return Ok(());
            }
        }
        // Stored raw now (media, compressed data): nothing resembles it enough to pay for
        // reading it, and it is never a useful base. Stored whole now and not aggressive:
        // left as it is (compared, it would cost zstd at a high level over every chunk).
        if now.bases.is_empty() && (now.frame_stored >= now.frame_raw || !self.aggressive) {
            let stored = match raw.as_deref() {
                Some(bytes) => self.plain_size(reader, &chunk, Some(bytes))?,
                None => NOT_YET,
            };
            self.assign_whole(chunk, stored);
            return Ok(());
        }
        if raw.is_none() {
            raw = Some(reader.bytes(&chunk, ObjectKind::Chunk)?);
        }
        let features = resemblance::features(raw.as_deref().expect("just read"));
        let similar = self.resemblance.similar(&chunk, &features, |base| {
            self.storage.contains_key(base) && self.assigned.get(base).is_some_and(|a| a.depth == 0)
        });
        if !similar.is_empty()
            && !options.contains(&similar)
            && self.try_delta(
                reader,
                chunk,
                length,
                &mut raw,
                &similar,
                (level, max_depth),
            )?
        {
            return Ok(());
        }
        let stored = self.plain_size(reader, &chunk, raw.as_deref())?;
        self.assign_whole(chunk, stored);
        self.resemblance.add(chunk, &features);
        Ok(())
    }

    /// Stores `chunk` (its raw bytes in `raw`, read when first needed) as a delta against
    /// `bases` at `level` when that pays: the chain at most `max_depth` deep, the closure
    /// within twice the chunk's length, the delta at most half of what the chunk alone
    /// stores. True when it was recorded.
    fn try_delta(
        &mut self,
        reader: &mut ObjectReader<'_>,
        chunk: ObjectId,
        length: u32,
        raw: &mut Option<Vec<u8>>,
        bases: &[ObjectId],
        (level, max_depth): (i32, u32),
    ) -> Result<bool> {
        let limit = 2 * u64::from(length);
        let (depth, closure) = self.closure_of(reader, bases)?;
        if depth > max_depth || closure >= limit {
            return Ok(false);
        }
        if raw.is_none() {
            *raw = Some(reader.bytes(&chunk, ObjectKind::Chunk)?);
        }
        let raw_bytes = raw.as_deref().expect("just read");
        let plain = self.plain_size(reader, &chunk, Some(raw_bytes))?;
        let mut prefix = Vec::new();
        for base in bases {
            prefix.extend_from_slice(&reader.bytes(base, ObjectKind::Chunk)?);
        }
        let quick = self
            .compressor
            .compress(TRIAL_LEVEL, &prefix, raw_bytes)
            .map_err(|e| Error::corrupt("delta", e.to_string()))?;
        // Nothing to gain: the quick delta is not a tenth smaller than the chunk alone.
        if quick.len() as u64 * 10 > plain * 9 {
            return Ok(false);
        }
        let delta = self
            .compressor
            .compress(level, &prefix, raw_bytes)
            .map_err(|e| Error::corrupt("delta", e.to_string()))?;
        let stored = delta.len() as u64;
        if stored * 2 > plain || closure + stored > limit {
            return Ok(false);
        }
        self.assigned.insert(chunk, Assigned { depth, stored });
        let same = self.storage[&chunk].bases == bases;
        let kept = (self.kept_bytes + delta.len() <= KEPT_DELTA_BYTES).then(|| {
            self.kept_bytes += delta.len();
            std::sync::Arc::new(delta)
        });
        if !same {
            self.out.push(Rewrite {
                chunk,
                bases: bases.to_vec(),
                delta: kept,
                level,
            });
        }
        Ok(true)
    }
}

/// A listing's files in path order (a deterministic pass).
fn ordered(listing: &Listing) -> Vec<std::rc::Rc<FileChunks>> {
    ordered_paths(listing).into_iter().map(|(_, c)| c).collect()
}

fn ordered_paths(listing: &Listing) -> Vec<(&str, std::rc::Rc<FileChunks>)> {
    let mut paths: Vec<(&str, std::rc::Rc<FileChunks>)> = listing
        .iter()
        .map(|(p, c)| (p.as_str(), c.clone()))
        .collect();
    paths.sort_by(|a, b| a.0.cmp(b.0));
    paths
}
