//! Forward deltas at commit (issue 39): a new chunk of a file whose path the parent version
//! held is stored as a delta frame, compressed by zstd against the raw bytes of the parent
//! file's chunks around the same (scaled) offset, when that stores at most half of what
//! the chunk takes compressed alone.
//!
//! The work is split as the ingest pipeline is:
//! - the **reader thread** ([`DeltaPlanner`], one per [`super::StreamWriter`]) resolves the
//!   parent file's chunk list once per file, picks the base chunks for each new chunk
//!   ([`DeltaPlanner::plan`]: those overlapping the chunk's offset scaled by parent length /
//!   new length, widened by [`BASE_SLACK`] on each side, at most
//!   [`MAX_DELTA_BASES`](crate::pack::format::MAX_DELTA_BASES) of them and a prefix of at most
//!   [`MAX_DELTA_PREFIX`](crate::pack::format::MAX_DELTA_PREFIX) bytes), keeps only bases this store
//!   holds whose chains are less than [`COMMIT_DELTA_DEPTH`] deep, reads their bytes
//!   (checked against their ids, through the store's object reader) and queues a
//!   [`DeltaJob`];
//! - a **compressor thread** ([`DeltaEncoder::encode`]) compresses the chunk against the
//!   prefix and alone, both at the commit's level, and keeps the delta only when its
//!   stored bytes are at most half the plain encoding's and the chunk's closure (the delta
//!   plus its bases' closures) stores at most twice the chunk's raw length. A chunk whose
//!   delta is not kept goes into a plain frame of that compressor, as any other chunk.
//!
//! A file with no parent (a new path), or with deltas turned off, takes exactly the path
//! it took before deltas: no base is looked up and nothing more is computed. A file whose
//! deltas keep failing (incompressible data replaced wholesale, such as images) stops
//! trying after [`GIVE_UP_AFTER`] attempts with fewer than one in eight kept, and files of
//! its kind (its extension) after [`GIVE_UP_KIND_AFTER`] such attempts among them.
//!
//! No cycle can form: a base is a chunk the store already holds, and the chunk being written
//! is one it does not hold, so no chain that a base starts can reach it.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::catalog::Catalog;
use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::object::{FileMap, ObjectKind};
use crate::pack::format::{MAX_DELTA_BASES, MAX_DELTA_DEPTH, MAX_DELTA_PREFIX};
use crate::pack::{Compression, DeltaCompressor, EncodedFrame, FrameBuilder};
use crate::store::ObjectReader;

/// The deepest chain commit makes: a base whose own chain is this deep is not used, so a
/// chunk commit stores is at most this many deltas away from a plain chunk (reading it
/// decodes at most this many levels).
pub const COMMIT_DELTA_DEPTH: u32 = 4;

/// Bytes of the parent file taken on each side of the new chunk's scaled range, so that
/// rows that moved a little (the rows added before it) are still in the prefix.
pub const BASE_SLACK: u64 = 16 * 1024;

/// Whether a parent chunk whose chain is [`COMMIT_DELTA_DEPTH`] deep is replaced by its
/// own bases (so a long series of versions keeps storing deltas against older versions
/// rather than a whole version every fifth).
const REACH_PAST_DEEP_BASES: bool = true;

/// Delta attempts on one file after which it stops trying when fewer than one in eight
/// were kept (data that shares nothing with its parent costs a few attempts, not one per
/// chunk).
pub const GIVE_UP_AFTER: u32 = 8;

/// Delta attempts on files of one kind ([`ParentFile::kind`]) in one reader thread after
/// which files of that kind stop trying when fewer than one in eight were kept (a commit
/// replacing thousands of images, each a chunk or two, pays for a few dozen attempts).
pub const GIVE_UP_KIND_AFTER: u32 = 32;

/// The most chunks a [`DeltaPlanner`] remembers the chains of before it forgets them all
/// (memory stays bounded on a commit of millions of files).
const MAX_REMEMBERED_CHAINS: usize = 1 << 16;

/// The most base chunks' bytes a [`DeltaPlanner`] keeps for the next chunks of a file.
const BYTES_KEPT: usize = 2 * MAX_DELTA_BASES;

/// The most chunks a closure may count before the chunk is not used as a base (a bound on
/// memory; a closure that large is far past the 2x rule anyway).
const MAX_CLOSURE: usize = 256;

/// The file a path held in the parent version: where a new chunk of that path finds its
/// bases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParentFile {
    /// The file's id (its content's BLAKE3).
    pub id: ObjectId,
    /// Its size in bytes.
    pub size: u64,
    /// Its kind (a hash of its name's extension, see [`ParentFile::at`]): files of a kind
    /// whose deltas keep failing (images replaced wholesale) stop being tried in the run.
    pub kind: u64,
}

impl ParentFile {
    /// The file `id` of `size` bytes that the parent version held at `path`; its kind is
    /// the extension of `path`'s last name, letter case ignored (none: kind 0).
    pub fn at(path: &str, id: ObjectId, size: u64) -> ParentFile {
        let name = path.rsplit('/').next().unwrap_or(path);
        let kind = match name.rsplit_once('.') {
            Some((stem, extension)) if !stem.is_empty() => {
                // FNV-1a: a stable hash of a few bytes.
                extension
                    .bytes()
                    .fold(0xcbf2_9ce4_8422_2325u64, |hash, byte| {
                        (hash ^ u64::from(byte.to_ascii_lowercase())).wrapping_mul(0x100_0000_01b3)
                    })
            }
            _ => 0,
        };
        ParentFile { id, size, kind }
    }
}

/// The parent file's chunks, in file order.
pub(super) struct ParentChunks {
    ids: Vec<ObjectId>,
    /// Each chunk's end offset in the parent file (its start is the previous end).
    ends: Vec<u64>,
    /// How the delta attempts of this file, and of files of its kind, went (shared with
    /// the compressor threads).
    outcomes: Outcomes,
}

/// The delta attempts of one file and of its kind in this run.
#[derive(Debug, Clone, Default)]
pub(super) struct Outcomes {
    file: Arc<FileOutcome>,
    kind: Arc<FileOutcome>,
}

impl Outcomes {
    /// True when the file's deltas, or those of its kind, fail so often that trying more is
    /// a waste.
    fn given_up(&self) -> bool {
        self.file.given_up(GIVE_UP_AFTER) || self.kind.given_up(GIVE_UP_KIND_AFTER)
    }

    fn count(&self, kept: bool) {
        for outcome in [&self.file, &self.kind] {
            outcome.tried.fetch_add(1, Ordering::Relaxed);
            if kept {
                outcome.kept.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl ParentChunks {
    /// The parent file's size.
    fn size(&self) -> u64 {
        self.ends.last().copied().unwrap_or(0)
    }

    fn start(&self, index: usize) -> u64 {
        if index == 0 { 0 } else { self.ends[index - 1] }
    }
}

/// Delta attempts of one file and how many were kept, counted by the compressor threads.
#[derive(Debug, Default)]
pub(super) struct FileOutcome {
    tried: AtomicU32,
    kept: AtomicU32,
}

impl FileOutcome {
    /// True when at least `after` attempts were made and fewer than one in eight kept.
    fn given_up(&self, after: u32) -> bool {
        let tried = self.tried.load(Ordering::Relaxed);
        tried >= after && self.kept.load(Ordering::Relaxed) * 8 < tried
    }
}

/// A chunk to compress against its bases, queued from a reader thread to the compressors.
pub(super) struct DeltaJob {
    id: ObjectId,
    raw: Vec<u8>,
    bases: Vec<ObjectId>,
    prefix: Vec<u8>,
    /// Stored bytes of the union of the bases' closures (each chunk once).
    bases_closure: u64,
    outcomes: Outcomes,
}

/// A chunk's chain: how deep, and the stored bytes of everything reading it decodes.
#[derive(Debug, Clone)]
struct Chain {
    depth: u32,
    /// The chunk's length in bytes.
    length: u32,
    /// The bases its frame lists (none for a plain frame).
    bases: Vec<ObjectId>,
    /// The chunk and every base reachable from it, each once, with its stored bytes (a
    /// chunk sharing a plain frame with others counts its share of the frame's stored bytes,
    /// by raw length), sorted by id.
    closure: Vec<(ObjectId, u64)>,
}

/// The union of sorted closures `a` and `b`.
fn merge(a: &[(ObjectId, u64)], b: &[(ObjectId, u64)]) -> Vec<(ObjectId, u64)> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match a[i].0.cmp(&b[j].0) {
            std::cmp::Ordering::Less => {
                out.push(a[i]);
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                out.push(b[j]);
                j += 1;
            }
            std::cmp::Ordering::Equal => {
                out.push(a[i]);
                i += 1;
                j += 1;
            }
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}

/// A new chunk of a file, as [`DeltaPlanner::plan`] takes it.
pub(super) struct NewChunk<'c> {
    /// Its id.
    pub id: ObjectId,
    /// Its bytes.
    pub bytes: &'c [u8],
    /// Its offset in the file.
    pub start: u64,
    /// The file's size as far as known (its stat's, else the parent's).
    pub file_size: u64,
}

/// A reader thread's half of forward deltas: the chains of the chunks it looked at and the
/// bytes of the last bases it read.
#[derive(Default)]
pub(super) struct DeltaPlanner {
    /// `None`: the chunk is no base (not held here, or unreadable).
    chains: HashMap<ObjectId, Option<Chain>>,
    bytes: VecDeque<(ObjectId, Arc<Vec<u8>>)>,
    /// How the delta attempts of each kind of file went.
    kinds: HashMap<u64, Arc<FileOutcome>>,
}

/// Errors that mean "no delta from here" rather than a failed commit: the parent's data is
/// missing or damaged (verify reports that), which only costs the compression a delta
/// would have saved.
fn no_base(error: &Error) -> bool {
    matches!(error, Error::MissingObject { .. } | Error::Corrupt { .. })
}

impl DeltaPlanner {
    /// The chunks of `parent`, from its file map (or the file itself, for a file of one
    /// chunk); `None` when the store has neither or the map disagrees with the size.
    ///
    /// # Errors
    /// Catalog and I/O errors (missing or damaged data is `None`).
    pub(super) fn parent_chunks(
        &mut self,
        catalog: &Catalog,
        reader: &mut ObjectReader<'_>,
        parent: ParentFile,
    ) -> Result<Option<ParentChunks>> {
        if parent.size == 0 {
            return Ok(None);
        }
        let Some(location) = catalog.locate_file(&parent.id)? else {
            return Ok(None);
        };
        let listed = if location.kind == ObjectKind::Chunk {
            vec![(parent.id, location.length)]
        } else {
            match reader.bytes(&parent.id, ObjectKind::FileMap) {
                Ok(bytes) => match FileMap::decode(&bytes) {
                    Ok(map) => map.chunks,
                    Err(_) => return Ok(None),
                },
                Err(e) if no_base(&e) => return Ok(None),
                Err(e) => return Err(e),
            }
        };
        let mut end = 0u64;
        let mut ids = Vec::with_capacity(listed.len());
        let mut ends = Vec::with_capacity(listed.len());
        for (id, length) in listed {
            end += u64::from(length);
            ids.push(id);
            ends.push(end);
        }
        if end != parent.size {
            return Ok(None);
        }
        let kind = self.kinds.entry(parent.kind).or_default();
        Ok(Some(ParentChunks {
            ids,
            ends,
            outcomes: Outcomes {
                file: Arc::default(),
                kind: Arc::clone(kind),
            },
        }))
    }

    /// The delta job of new chunk `chunk` of a file whose path held `parent`: `None` when
    /// no base qualifies (none held here, every chain too deep, every closure past twice the
    /// chunk) or the file's deltas keep failing.
    ///
    /// # Errors
    /// Catalog and I/O errors (missing or damaged bases are skipped).
    pub(super) fn plan(
        &mut self,
        catalog: &Catalog,
        reader: &mut ObjectReader<'_>,
        parent: &ParentChunks,
        chunk: NewChunk<'_>,
    ) -> Result<Option<DeltaJob>> {
        let NewChunk {
            id,
            bytes: raw,
            start,
            file_size: size,
        } = chunk;
        if parent.outcomes.given_up() || raw.is_empty() {
            return Ok(None);
        }
        let raw_length = raw.len() as u64;
        // Each candidate (or, for one already as deep as commit goes, each of its own
        // bases: one level less deep, an older version of the same bytes), with how much of
        // the chunk's scaled range it covers and its place in the prefix (file order).
        let mut offered: Vec<(u64, (usize, usize), ObjectId, Chain)> = Vec::new();
        for (index, overlap) in candidates(parent, start, raw_length, size) {
            let Some(chain) = self.chain(catalog, &parent.ids[index])? else {
                continue;
            };
            if chain.depth < COMMIT_DELTA_DEPTH {
                offered.push((overlap, (index, 0), parent.ids[index], chain));
            } else if REACH_PAST_DEEP_BASES {
                for (n, base) in chain.bases.iter().enumerate() {
                    if let Some(below) = self.chain(catalog, base)? {
                        offered.push((overlap, (index, n), *base, below));
                    }
                }
            }
        }
        // The bases that cover most of the chunk first, each taken while the closure stays
        // within twice the chunk's length (less a sixteenth for the delta itself).
        offered.sort_by_key(|(overlap, place, ..)| (std::cmp::Reverse(*overlap), *place));
        let budget = 2 * raw_length - raw_length / 16;
        let mut chosen: Vec<((usize, usize), ObjectId)> = Vec::new();
        let mut closure: Vec<(ObjectId, u64)> = Vec::new();
        let mut prefix_length = 0u64;
        for (_, place, base, chain) in offered {
            if base == id
                || chain.depth >= COMMIT_DELTA_DEPTH
                || chosen.iter().any(|(_, b)| *b == base)
                || prefix_length + u64::from(chain.length) > MAX_DELTA_PREFIX
            {
                continue;
            }
            let merged = merge(&closure, &chain.closure);
            if merged.iter().map(|(_, stored)| stored).sum::<u64>() > budget {
                continue;
            }
            closure = merged;
            prefix_length += u64::from(chain.length);
            chosen.push((place, base));
            if chosen.len() == MAX_DELTA_BASES {
                break;
            }
        }
        if chosen.is_empty() {
            return Ok(None);
        }
        chosen.sort();
        let bases_closure: u64 = closure.iter().map(|(_, stored)| stored).sum();
        let bases = chosen.into_iter().map(|(_, base)| base);
        let mut prefix = Vec::new();
        let mut used = Vec::with_capacity(MAX_DELTA_BASES);
        for base in bases {
            match self.base_bytes(reader, &base) {
                Ok(bytes) => {
                    prefix.extend_from_slice(&bytes);
                    used.push(base);
                }
                Err(e) if no_base(&e) => {
                    self.chains.insert(base, None);
                }
                Err(e) => return Err(e),
            }
        }
        if used.is_empty() {
            return Ok(None);
        }
        Ok(Some(DeltaJob {
            id,
            raw: raw.to_vec(),
            bases: used,
            prefix,
            bases_closure,
            outcomes: parent.outcomes.clone(),
        }))
    }

    /// The bytes of base chunk `id`, checked against its id (a delta base is decoded through
    /// its own bases by the reader), from the last ones read when there.
    fn base_bytes(&mut self, reader: &mut ObjectReader<'_>, id: &ObjectId) -> Result<Arc<Vec<u8>>> {
        if let Some((_, bytes)) = self.bytes.iter().find(|(kept, _)| kept == id) {
            return Ok(Arc::clone(bytes));
        }
        let bytes = Arc::new(reader.bytes(id, ObjectKind::Chunk)?);
        if self.bytes.len() >= BYTES_KEPT {
            self.bytes.pop_front();
        }
        self.bytes.push_back((*id, Arc::clone(&bytes)));
        Ok(bytes)
    }

    /// The chain of chunk `id` as this store holds it (`None`: it does not, or its chain is
    /// broken, too deep for a reader, or too large to count).
    fn chain(&mut self, catalog: &Catalog, id: &ObjectId) -> Result<Option<Chain>> {
        if self.chains.len() >= MAX_REMEMBERED_CHAINS {
            self.chains.clear();
        }
        self.chain_at(catalog, id, 0)
    }

    fn chain_at(&mut self, catalog: &Catalog, id: &ObjectId, level: u32) -> Result<Option<Chain>> {
        if let Some(known) = self.chains.get(id) {
            return Ok(known.clone());
        }
        // Past the readers' depth (or a cycle, which has no end): no base.
        if level > MAX_DELTA_DEPTH {
            return Ok(None);
        }
        let chain = match catalog.locate(id, ObjectKind::Chunk)? {
            None => None,
            Some(location) => {
                let frame = location.frame;
                let own = u64::from(frame.stored_length) * u64::from(location.length)
                    / u64::from(frame.raw_length.max(1));
                let bases = match frame.compression == Compression::Delta {
                    true => catalog.frame_bases(&location.frame)?,
                    false => Vec::new(),
                };
                let mut chain = Some(Chain {
                    depth: 0,
                    length: location.length,
                    bases: bases.clone(),
                    closure: vec![(*id, own.max(1))],
                });
                // Every base must be readable here, or the chunk is not.
                for base in bases {
                    let Some(below) = self.chain_at(catalog, &base, level + 1)? else {
                        chain = None;
                        break;
                    };
                    let current = chain.as_mut().expect("set above");
                    current.depth = current.depth.max(below.depth + 1);
                    current.closure = merge(&current.closure, &below.closure);
                    if current.closure.len() > MAX_CLOSURE {
                        chain = None;
                        break;
                    }
                }
                chain
            }
        };
        self.chains.insert(*id, chain.clone());
        Ok(chain)
    }
}

/// The indexes of the parent chunks a new chunk of `length` bytes at `start` of a file of
/// `size` bytes is compressed against: those overlapping its range scaled by parent size /
/// `size`, widened by [`BASE_SLACK`] each side; trimmed, from the end that overlaps the
/// scaled range least, to [`MAX_DELTA_BASES`] chunks and [`MAX_DELTA_PREFIX`] bytes. Each
/// with the bytes of the scaled range it covers (0 for one only the slack reaches).
fn candidates(parent: &ParentChunks, start: u64, length: u64, size: u64) -> Vec<(usize, u64)> {
    let parent_size = parent.size();
    let size = size.max(start + length).max(1);
    let scale =
        |offset: u64| (u128::from(offset) * u128::from(parent_size) / u128::from(size)) as u64;
    let (scaled_start, scaled_end) = (scale(start), scale(start + length));
    let low = scaled_start.saturating_sub(BASE_SLACK);
    let high = scaled_end.saturating_add(BASE_SLACK).min(parent_size);
    // The first chunk ending after `low`, then every chunk starting before `high`.
    let first = parent.ends.partition_point(|end| *end <= low);
    let mut last = first;
    while last < parent.ids.len() && parent.start(last) < high {
        last += 1;
    }
    let (mut first, mut last) = (first, last);
    let overlap = |index: usize| {
        let (s, e) = (parent.start(index), parent.ends[index]);
        e.min(scaled_end).saturating_sub(s.max(scaled_start))
    };
    let prefix = |first: usize, last: usize| parent.start(last) - parent.start(first);
    while last > first && (last - first > MAX_DELTA_BASES || prefix(first, last) > MAX_DELTA_PREFIX)
    {
        if overlap(first) <= overlap(last - 1) {
            first += 1;
        } else {
            last -= 1;
        }
    }
    (first..last).map(|index| (index, overlap(index))).collect()
}

/// A compressor thread's half of forward deltas: its zstd contexts and the plain frame that
/// collects the chunks whose deltas were not kept.
pub(super) struct DeltaEncoder {
    level: i32,
    delta: DeltaCompressor,
    /// Plain frames that collect the chunks whose deltas were not kept.
    rejected: FrameBuilder,
}

/// What [`DeltaEncoder::encode`] made of a job.
pub(super) enum Encoded {
    /// The delta frame, kept, and the bytes it saved against the plain encoding.
    Delta(EncodedFrame, u64),
    /// Not kept: a plain frame full of such chunks, when one filled up.
    Plain(Option<EncodedFrame>),
}

impl DeltaEncoder {
    /// An encoder at zstd `level` (the commit's).
    pub(super) fn new(level: i32) -> DeltaEncoder {
        DeltaEncoder {
            level,
            delta: DeltaCompressor::default(),
            rejected: FrameBuilder::default(),
        }
    }

    /// Compresses `job`'s chunk against its bases and alone (with `plain`, the thread's
    /// context at the same level): the delta frame when it stores at most half the plain
    /// encoding and its closure at most twice the chunk's length; else the chunk joins this
    /// encoder's plain frame (returned once past `frame_target` raw bytes).
    pub(super) fn encode(
        &mut self,
        job: DeltaJob,
        plain: &mut zstd::bulk::Compressor<'_>,
        frame_target: usize,
    ) -> Encoded {
        let raw_length = job.raw.len() as u64;
        let mut builder = FrameBuilder::default();
        builder.push(job.id, ObjectKind::Chunk, &job.raw);
        // A delta zstd refuses (it cannot: the planner keeps to the format's limits) is only
        // a delta not kept.
        let delta = builder.encode_delta(&mut self.delta, self.level, &job.prefix, job.bases);
        if let Ok(delta) = delta
            && delta.stored_len() as u64 + job.bases_closure <= 2 * raw_length
        {
            let delta_stored = delta.stored_len() as u64;
            let mut alone = FrameBuilder::default();
            alone.push(job.id, ObjectKind::Chunk, &job.raw);
            let plain_stored = alone.encode_with(plain).stored_len() as u64;
            if delta_stored * 2 <= plain_stored {
                job.outcomes.count(true);
                return Encoded::Delta(delta, plain_stored - delta_stored);
            }
        }
        job.outcomes.count(false);
        self.rejected.push(job.id, ObjectKind::Chunk, &job.raw);
        if self.rejected.len() >= frame_target {
            return Encoded::Plain(Some(std::mem::take(&mut self.rejected).encode_with(plain)));
        }
        Encoded::Plain(None)
    }

    /// The plain frame of chunks whose deltas were not kept, if it holds any.
    pub(super) fn finish(
        &mut self,
        plain: &mut zstd::bulk::Compressor<'_>,
    ) -> Option<EncodedFrame> {
        (!self.rejected.is_empty()).then(|| std::mem::take(&mut self.rejected).encode_with(plain))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parent(lengths: &[u64]) -> ParentChunks {
        let mut end = 0;
        let ends: Vec<u64> = lengths
            .iter()
            .map(|l| {
                end += l;
                end
            })
            .collect();
        ParentChunks {
            ids: (0..lengths.len() as u64)
                .map(|n| ObjectId::of(&n.to_le_bytes()))
                .collect(),
            ends,
            outcomes: Outcomes::default(),
        }
    }

    /// The indexes [`candidates`] picks.
    fn picked(p: &ParentChunks, start: u64, length: u64, size: u64) -> Vec<usize> {
        candidates(p, start, length, size)
            .into_iter()
            .map(|(index, _)| index)
            .collect()
    }

    #[test]
    fn candidates_follow_the_scaled_offset_with_slack() {
        let kib = 1024;
        let p = parent(&[64 * kib; 10]);
        // The chunk's scaled range covers chunk 2 whole; the slack reaches into 1 and 3.
        assert_eq!(
            candidates(&p, 128 * kib, 64 * kib, 640 * kib),
            vec![(1, 0), (2, 64 * kib), (3, 0)]
        );
        // Same size: the chunk at 128 KiB overlaps chunk 2, and the slack reaches 1 and 3.
        assert_eq!(picked(&p, 128 * kib, 64 * kib, 640 * kib), vec![1, 2, 3]);
        // The new file is twice as long: its offset 256 KiB is the parent's 128 KiB.
        assert_eq!(picked(&p, 256 * kib, 128 * kib, 1280 * kib), vec![1, 2, 3]);
        // The first chunk: nothing before it.
        assert_eq!(picked(&p, 0, 64 * kib, 640 * kib), vec![0, 1]);
        // Past the parent's end (the new file grew): the last chunk.
        assert_eq!(picked(&p, 700 * kib, 64 * kib, 764 * kib), vec![8, 9]);
    }

    #[test]
    fn candidates_are_trimmed_to_the_base_limits() {
        let p = parent(&[1024; 64]);
        let picked = picked(&p, 20 * 1024, 30 * 1024, 64 * 1024);
        assert_eq!(picked.len(), MAX_DELTA_BASES);
        // The ones kept overlap the chunk's own range.
        assert!(picked.iter().all(|i| (20..50).contains(i)), "{picked:?}");
    }

    #[test]
    fn a_file_or_a_kind_whose_deltas_fail_gives_up() {
        let outcomes = Outcomes::default();
        for _ in 1..GIVE_UP_AFTER {
            outcomes.count(false);
        }
        assert!(!outcomes.given_up());
        outcomes.count(false);
        assert!(outcomes.given_up());
        outcomes.count(true);
        outcomes.count(true);
        assert!(!outcomes.given_up(), "two of ten kept");
        // The next file of the kind starts afresh, until the kind has failed enough.
        let next = Outcomes {
            file: Arc::default(),
            kind: Arc::clone(&outcomes.kind),
        };
        assert!(!next.given_up());
        for _ in 0..GIVE_UP_KIND_AFTER {
            next.count(false);
        }
        assert!(next.given_up());
    }

    #[test]
    fn a_files_kind_is_its_extension() {
        let id = ObjectId([0; 32]);
        let kind = |path: &str| ParentFile::at(path, id, 1).kind;
        assert_eq!(kind("a/x.png"), kind("b/y.PNG"));
        assert_ne!(kind("a/x.png"), kind("a/x.csv"));
        assert_eq!(kind("a/.hidden"), 0);
        assert_eq!(kind("a.d/noext"), 0);
    }

    #[test]
    fn closures_merge_each_chunk_once() {
        let (a, b, c) = (ObjectId([1; 32]), ObjectId([2; 32]), ObjectId([3; 32]));
        let merged = merge(&[(a, 1), (c, 3)], &[(b, 2), (c, 3)]);
        assert_eq!(merged, vec![(a, 1), (b, 2), (c, 3)]);
    }
}
