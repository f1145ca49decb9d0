//! The ingest pipeline shared by every operation that adds data: read → FastCDC chunks →
//! BLAKE3 → skip chunks the store has → group new chunks into ~1 MiB frames → zstd →
//! append to the open pack.
//!
//! Files are spread over `jobs` reader threads; each has its own catalog connection (used
//! only to ask "do we have this chunk?") and its own frame. Full frames go through a bounded
//! queue to `jobs` compressor threads, so the CPU-bound stages run in parallel and only the
//! pack append is serialized.
//!
//! A file given with the file its path held in the parent version ([`ParentFile`]) may have
//! its new chunks stored as deltas against that file's chunks ([`deltas`]): the reader
//! thread picks and reads the bases, a compressor thread compresses and keeps the delta only
//! when it saves at least half.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;

use crate::catalog::Catalog;
use crate::chunk::{ChunkParams, Chunker};
use crate::error::{Error, IoResultExt, Result};
use crate::id::ObjectId;
use crate::object::{FileMap, ObjectKind};
use crate::pack::FrameBuilder;
use crate::progress::Progress;
use crate::store::Store;
use crate::walk::Stat;

pub mod deltas;

pub use deltas::{COMMIT_DELTA_DEPTH, ParentFile};
use deltas::{DeltaEncoder, DeltaJob, DeltaPlanner, Encoded, NewChunk, ParentChunks};

/// Raw bytes collected into one frame before it is compressed.
pub const FRAME_TARGET: usize = 1024 * 1024;
/// A frame's buffer size: the target plus one largest chunk, so it never reallocates.
const FRAME_CAPACITY: usize = FRAME_TARGET + ChunkParams::DEFAULT.max;
pub(crate) use crate::pack_sink::remove_unrecorded_packs;
pub use crate::pack_sink::{PACK_TARGET, PACK_TARGET_OBJECTS, PackSink};

/// Tuning of the ingest pipeline.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct IngestOptions {
    /// Worker threads (brought into `1..=`[`crate::parallel::MAX_JOBS`]).
    pub jobs: usize,
    /// zstd level (1–19; 3 is zstd's default).
    pub compression_level: i32,
    /// Store a new chunk of a file given with its parent ([`IngestFile::parent`]) as a
    /// delta against the parent's chunks when that saves at least half ([`deltas`]); false
    /// stores every chunk whole, as dsv did before deltas. Default: true.
    pub deltas: bool,
}

impl Default for IngestOptions {
    fn default() -> Self {
        IngestOptions {
            jobs: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2),
            compression_level: 3,
            deltas: true,
        }
    }
}

/// Totals of one ingest run.
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct IngestStats {
    /// Files read.
    pub files_read: u64,
    /// Bytes read.
    pub bytes_read: u64,
    /// Chunks the store did not have.
    pub new_chunks: u64,
    /// Raw bytes of those chunks.
    pub new_bytes: u64,
    /// Bytes they take in packs after compression.
    pub stored_bytes: u64,
    /// New chunks stored as deltas against the parent version's chunks (counted in
    /// `new_chunks` too).
    pub delta_chunks: u64,
    /// Stored bytes the deltas saved: for each, its plain encoding's stored bytes less its
    /// own (so `stored_bytes + delta_bytes_saved` is what the chunks would take without
    /// deltas, give or take how plain frames are cut).
    pub delta_bytes_saved: u64,
}

impl IngestStats {
    /// Adds `other`'s totals to these.
    pub(crate) fn add(&mut self, other: &IngestStats) {
        self.files_read += other.files_read;
        self.bytes_read += other.bytes_read;
        self.new_chunks += other.new_chunks;
        self.new_bytes += other.new_bytes;
        self.stored_bytes += other.stored_bytes;
        self.delta_chunks += other.delta_chunks;
        self.delta_bytes_saved += other.delta_bytes_saved;
    }
}

/// One file to ingest.
pub struct IngestFile {
    /// Where to read it.
    pub path: PathBuf,
    /// Its stat when listed; a file that changes while read is an error.
    pub stat: Stat,
    /// The file its path held in the parent version, whose chunks its new chunks may be
    /// stored as deltas against; `None` for a new path (or no deltas).
    pub parent: Option<ParentFile>,
}

/// Ingests `files` in parallel into `sink`, returning each file's id in input order.
///
/// Two stages, each on `jobs` threads: readers (read, chunk, hash, skip known chunks, fill
/// frames) and compressors (zstd, append to the pack), joined by a bounded queue of frames,
/// so a single huge file still compresses on every core and memory stays bounded
/// (about `4 × jobs` frames of [`FRAME_TARGET`] bytes; a queued delta job holds a chunk and
/// its prefix, at most 8 bases of at most 256 KiB, so at most about twice a frame).
///
/// # Errors
/// [`Error::Io`] reading a file or writing a pack; [`Error::Unsupported`] when a file changed
/// while it was read; [`Error::Interrupted`].
pub fn ingest_files(
    catalog_path: &Path,
    sink: &PackSink,
    files: &[IngestFile],
    options: IngestOptions,
    progress: &dyn Progress,
) -> Result<(Vec<(ObjectId, bool)>, IngestStats)> {
    let ids = Mutex::new(vec![(ObjectId([0; 32]), false); files.len()]);
    let ((), stats) = with_ingester(catalog_path, sink, options, Some(progress), |ingester| {
        crate::parallel::for_each_with(
            files,
            options.jobs,
            || ingester.writer(),
            |writer, index, job| {
                let read = read_file(writer, job)?;
                ids.lock().expect("no panics while holding the lock")[index] = read;
                progress.file_done();
                Ok(())
            },
            StreamWriter::finish,
        )
    })?;
    Ok((
        ids.into_inner().expect("no panics while holding the lock"),
        stats,
    ))
}

/// Ingests one file of [`ingest_files`]: its file id, and whether the file read still had the
/// walk's whole stat (`job.stat`) after its last byte. Fails if it changed while it was read
/// (its size or mtime moved). A stat that moved otherwise (another inode: the file was
/// replaced at its path, say by a directory renamed away; or only the ctime: a hard link,
/// `touch -a`, a write whose mtime was set back) leaves the content read as committed, but
/// commit must not cache the walk's stat for it: the stat cache would vouch for a file that
/// was not read.
fn read_file(writer: &mut StreamWriter<'_>, job: &IngestFile) -> Result<(ObjectId, bool)> {
    // Not followed, never waited on: a symlink or FIFO swapped in since the walk is an error.
    let file = crate::workspace::open_regular(&job.path)?;
    let (file_id, size) = writer
        .ingest_beside(&file, Some(job.stat.size), job.parent)
        .map_err(|e| e.at(&job.path))?;
    let after = Stat::of(&file.metadata().at(&job.path)?);
    if size != job.stat.size || after.mtime_ns != job.stat.mtime_ns || after.size != job.stat.size {
        return Err(Error::Unsupported {
            path: job.path.clone(),
            reason: "the file changed while it was being read; run the command again".into(),
        });
    }
    Ok((file_id, after == job.stat))
}

/// Runs `body` with an [`Ingester`] whose compressor threads (`options.jobs` of them) append
/// frames to `sink`; returns `body`'s result and the totals of every writer it made.
///
/// `progress`, when given, advances by the bytes each writer reads; pass `None` to count
/// something else (an import counts bytes downloaded).
///
/// # Errors
/// `body`'s error, else the first compressor error ([`Error::Io`] writing a pack).
pub fn with_ingester<T>(
    catalog_path: &Path,
    sink: &PackSink,
    options: IngestOptions,
    progress: Option<&dyn Progress>,
    body: impl FnOnce(&Ingester<'_>) -> Result<T>,
) -> Result<(T, IngestStats)> {
    let jobs = crate::parallel::clamp_jobs(options.jobs);
    let failed = AtomicBool::new(false);
    let (sender, receiver) = mpsc::sync_channel::<Work>(jobs * 2);
    let receiver = Mutex::new(receiver);
    std::thread::scope(|scope| {
        let mut compressors = Vec::with_capacity(jobs);
        for _ in 0..jobs {
            let spawned = std::thread::Builder::new().spawn_scoped(scope, || {
                let result = compress_worker(&receiver, sink, options.compression_level, &failed);
                if result.is_err() {
                    failed.store(true, Ordering::Relaxed);
                }
                result
            });
            match spawned {
                Ok(handle) => compressors.push(handle),
                // The system allows no more threads: the ones started do the work.
                Err(_) if !compressors.is_empty() => break,
                Err(source) => return Err(crate::parallel::thread_error(source)),
            }
        }
        let ingester = Ingester {
            catalog_path,
            sink,
            deltas: options.deltas,
            sender,
            failed: &failed,
            progress,
            stats: Mutex::new(IngestStats::default()),
        };
        let result = body(&ingester);
        if result.is_err() {
            failed.store(true, Ordering::Relaxed);
        }
        let Ingester { sender, stats, .. } = ingester;
        drop(sender);
        let mut total = stats
            .into_inner()
            .expect("no panics while holding the lock");
        let mut first_error = None;
        for handle in compressors {
            match handle.join().expect("ingest compressor panicked") {
                Ok(compressed) => total.add(&compressed),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        // A compressor's error is the cause: writers that saw it report `Interrupted`.
        if let Some(e) = first_error {
            return Err(e);
        }
        Ok((result?, total))
    })
}

/// The shared half of an ingest run: the queue to the compressor threads. Each reading
/// thread takes a [`StreamWriter`] of its own from it.
pub struct Ingester<'a> {
    catalog_path: &'a Path,
    sink: &'a PackSink,
    /// Whether files given with a parent may get deltas ([`IngestOptions::deltas`]).
    deltas: bool,
    sender: mpsc::SyncSender<Work>,
    failed: &'a AtomicBool,
    progress: Option<&'a dyn Progress>,
    stats: Mutex<IngestStats>,
}

impl<'a> Ingester<'a> {
    /// A writer for one thread: its own catalog connection (only read: "does the store have
    /// this chunk?") and its own frames.
    ///
    /// # Errors
    /// [`Error::Catalog`] opening the connection.
    pub fn writer(&'a self) -> Result<StreamWriter<'a>> {
        Ok(StreamWriter {
            ingester: self,
            catalog: Catalog::open(self.catalog_path, false)?,
            frame: FrameBuilder::with_capacity(FRAME_CAPACITY),
            maps: FrameBuilder::default(),
            stats: IngestStats::default(),
            planner: DeltaPlanner::default(),
        })
    }
}

/// Turns byte streams into stored files: chunks (FastCDC), ids (BLAKE3), new chunks into
/// frames queued for compression. One per thread; see [`Ingester::writer`].
pub struct StreamWriter<'a> {
    ingester: &'a Ingester<'a>,
    catalog: Catalog,
    frame: FrameBuilder,
    /// File maps go in frames of their own: with the trees and versions, they are the
    /// metadata a remote clone fetches without any chunk (see ops/sync/).
    maps: FrameBuilder,
    stats: IngestStats,
    /// Picks the bases of the new chunks of a file given with its parent.
    planner: DeltaPlanner,
}

/// What the reader threads queue for the compressor threads.
enum Work {
    /// A frame to compress whole.
    Frame(FrameBuilder),
    /// A chunk to compress against its bases (or, failing that, into a plain frame).
    Delta(DeltaJob),
}

/// An error of [`StreamWriter::ingest`]: reading the stream failed (the caller knows what
/// the stream was), or the store did.
#[derive(Debug)]
pub enum IngestError {
    /// The stream's `read` failed.
    Read(std::io::Error),
    /// Anything else ([`Error::Interrupted`], catalog errors).
    Store(Error),
}

impl IngestError {
    /// Converts a read error into [`Error::Io`] naming `path`.
    pub fn at(self, path: &Path) -> Error {
        match self {
            IngestError::Read(source) => Error::Io {
                path: path.to_path_buf(),
                source,
            },
            IngestError::Store(e) => e,
        }
    }
}

impl From<Error> for IngestError {
    fn from(e: Error) -> Self {
        IngestError::Store(e)
    }
}

impl StreamWriter<'_> {
    /// Reads `source` to its end as one file: returns its file id (BLAKE3 of its bytes, see
    /// `docs/format.md`) and its size in bytes. Chunks the store lacks are queued for
    /// storing; a file of more than one chunk gets a file map. `expected_size` (when the
    /// caller knows it) only saves hashing: a file of at most one minimum-size chunk has the
    /// id of that chunk.
    ///
    /// # Errors
    /// [`IngestError::Read`] when `source` fails; [`IngestError::Store`] for
    /// [`Error::Interrupted`], catalog errors, or a failure of another thread of this run
    /// (reported as [`Error::Interrupted`] here; the run returns the real error).
    pub fn ingest(
        &mut self,
        source: impl Read,
        expected_size: Option<u64>,
    ) -> std::result::Result<(ObjectId, u64), IngestError> {
        self.ingest_beside(source, expected_size, None)
    }

    /// As [`StreamWriter::ingest`], for a file whose path held `parent` in the parent
    /// version: with deltas on ([`IngestOptions::deltas`]), each new chunk is offered to the
    /// compressors as a delta against the parent's chunks around its (scaled) offset
    /// ([`deltas`]). `expected_size` scales the offsets (the parent's size when unknown).
    ///
    /// # Errors
    /// As [`StreamWriter::ingest`].
    pub fn ingest_beside(
        &mut self,
        source: impl Read,
        expected_size: Option<u64>,
        parent: Option<ParentFile>,
    ) -> std::result::Result<(ObjectId, u64), IngestError> {
        crate::interrupt::check()?;
        if self.ingester.failed.load(Ordering::Relaxed) {
            return Err(Error::Interrupted.into());
        }
        let params = ChunkParams::DEFAULT;
        let sender = &self.ingester.sender;
        let sink = self.ingester.sink;
        let mut chunker = Chunker::new(source, params);
        let mut hasher = crate::outboard::BlockHasher::new();
        let hash_whole = expected_size.is_none_or(|size| size > params.min as u64);
        let mut chunks = Vec::new();
        let mut size = 0u64;
        // The parent's chunks, and a reader of their bytes (its frame cache serves the
        // whole file: the bases of consecutive chunks share frames).
        let mut base_reader = crate::store::ObjectReader::over(&self.catalog, sink.packs_dir());
        let parent_chunks: Option<ParentChunks> = match parent {
            Some(parent) if self.ingester.deltas => {
                self.planner
                    .parent_chunks(&self.catalog, &mut base_reader, parent)?
            }
            _ => None,
        };
        let scale_size = expected_size.or(parent.map(|p| p.size)).unwrap_or(0);
        while let Some(chunk) = chunker.next_chunk().map_err(IngestError::Read)? {
            // Checked per chunk, so a single huge stream stops promptly too.
            crate::interrupt::check()?;
            if self.ingester.failed.load(Ordering::Relaxed) {
                return Err(Error::Interrupted.into());
            }
            let id = ObjectId::of(chunk);
            let start = size;
            size += chunk.len() as u64;
            if let Some(progress) = self.ingester.progress {
                progress.advance(chunk.len() as u64);
            }
            if hash_whole {
                hasher.update(chunk);
            }
            chunks.push((id, chunk.len() as u32));
            if !self.catalog.has_object(&id, ObjectKind::Chunk)?
                && sink.claim(&id, ObjectKind::Chunk)?
            {
                self.stats.new_chunks += 1;
                self.stats.new_bytes += chunk.len() as u64;
                let job = match &parent_chunks {
                    Some(parent) => {
                        let chunk = NewChunk {
                            id,
                            bytes: chunk,
                            start,
                            file_size: scale_size,
                        };
                        let catalog = &self.catalog;
                        self.planner
                            .plan(catalog, &mut base_reader, parent, chunk)?
                    }
                    None => None,
                };
                if let Some(job) = job {
                    sender.send(Work::Delta(job)).expect(QUEUE_OPEN);
                    continue;
                }
                self.frame.push(id, ObjectKind::Chunk, chunk);
                if self.frame.len() >= FRAME_TARGET {
                    let full = std::mem::replace(
                        &mut self.frame,
                        FrameBuilder::with_capacity(FRAME_CAPACITY),
                    );
                    sender.send(Work::Frame(full)).expect(QUEUE_OPEN);
                }
            }
        }
        let (file_id, outboard) = match chunks.as_slice() {
            [(only, _)] => (*only, None),
            _ => hasher.finalize(),
        };
        if chunks.len() > 1 {
            // The file map lists the chunks; the outboard (files of more than one 64 KiB
            // block) lets a reader prove any byte range alone. Both go in the frames of
            // metadata, beside each other.
            if !self.catalog.has_object(&file_id, ObjectKind::FileMap)?
                && sink.claim(&file_id, ObjectKind::FileMap)?
            {
                self.maps
                    .push(file_id, ObjectKind::FileMap, &FileMap { chunks }.encode());
            }
            if let Some(outboard) = outboard
                && !self.catalog.has_object(&file_id, ObjectKind::Outboard)?
                && sink.claim(&file_id, ObjectKind::Outboard)?
            {
                self.maps
                    .push(file_id, ObjectKind::Outboard, &outboard.encode());
            }
            if self.maps.len() >= FRAME_TARGET {
                sender
                    .send(Work::Frame(std::mem::take(&mut self.maps)))
                    .expect(QUEUE_OPEN);
            }
        }
        self.stats.files_read += 1;
        self.stats.bytes_read += size;
        Ok((file_id, size))
    }

    /// Queues the partly filled frames and adds this writer's totals to the run's.
    pub fn finish(self) {
        for rest in [self.frame, self.maps] {
            if !rest.is_empty() {
                self.ingester
                    .sender
                    .send(Work::Frame(rest))
                    .expect(QUEUE_OPEN);
            }
        }
        self.ingester
            .stats
            .lock()
            .expect("no panics while holding the lock")
            .add(&self.stats);
    }
}

/// Compresses frames (and delta jobs) from the queue into the sink until the queue closes;
/// returns the bytes stored and the deltas kept (the other totals are zero). After a
/// failure anywhere it keeps draining (discarding) so readers never block.
fn compress_worker(
    receiver: &Mutex<mpsc::Receiver<Work>>,
    sink: &PackSink,
    level: i32,
    failed: &AtomicBool,
) -> Result<IngestStats> {
    let mut totals = IngestStats::default();
    let mut outcome = Ok(());
    let mut compressor =
        zstd::bulk::Compressor::new(level).during("setting up a zstd compressor")?;
    // Made at the first delta job: a run without deltas sets up no second context.
    let mut deltas: Option<DeltaEncoder> = None;
    let add = |encoded: crate::pack::EncodedFrame, totals: &mut IngestStats| {
        totals.stored_bytes += encoded.stored_len() as u64;
        sink.add(encoded)
    };
    loop {
        let work = receiver
            .lock()
            .expect("no panics while holding the lock")
            .recv();
        let Ok(work) = work else { break };
        if outcome.is_err() || failed.load(Ordering::Relaxed) {
            continue;
        }
        outcome = match work {
            Work::Frame(mut frame) => add(frame.encode_with(&mut compressor), &mut totals),
            Work::Delta(job) => {
                let encoder = deltas.get_or_insert_with(|| DeltaEncoder::new(level));
                match encoder.encode(job, &mut compressor, FRAME_TARGET) {
                    Encoded::Delta(frame, saved) => {
                        totals.delta_chunks += 1;
                        totals.delta_bytes_saved += saved;
                        add(frame, &mut totals)
                    }
                    Encoded::Plain(Some(frame)) => add(frame, &mut totals),
                    Encoded::Plain(None) => Ok(()),
                }
            }
        };
        if outcome.is_err() {
            failed.store(true, Ordering::Relaxed);
        }
    }
    // The chunks whose deltas were not kept, still in this thread's plain frame.
    if outcome.is_ok()
        && !failed.load(Ordering::Relaxed)
        && let Some(frame) = deltas.as_mut().and_then(|d| d.finish(&mut compressor))
    {
        outcome = add(frame, &mut totals);
    }
    outcome.map(|()| totals)
}

/// Writes the outboard ([`crate::outboard`]) of each of `files` that this store lacks: files
/// of several chunks and more than one block whose chunks are all here. The upgrade path for
/// data committed before outboards existed (`gc` and `push` call it). Each file is read
/// whole and its id checked; a file whose bytes do not hash to its id gets no outboard (its
/// file map is wrong, which `verify` reports). Returns how many were written.
///
/// # Errors
/// [`Error::Io`] and catalog errors; [`Error::Interrupted`].
pub fn write_missing_outboards(store: &mut crate::store::Store, files: &[ObjectId]) -> Result<u64> {
    let mut frames = Vec::new();
    let mut frame = FrameBuilder::default();
    let mut written = 0u64;
    {
        let catalog = store.catalog();
        let mut reader = store.checking_reader();
        for id in files {
            crate::interrupt::check()?;
            if catalog.has_object(id, ObjectKind::Outboard)?
                || !catalog.has_object(id, ObjectKind::FileMap)?
            {
                continue;
            }
            let Ok(map) = FileMap::decode(&reader.bytes(id, ObjectKind::FileMap)?) else {
                continue;
            };
            let size = map.size();
            if !crate::outboard::has_outboard(size)
                || map.chunks.iter().try_fold(false, |missing, (chunk, _)| {
                    Ok::<_, Error>(missing || !catalog.has_object(chunk, ObjectKind::Chunk)?)
                })?
            {
                continue;
            }
            let mut hasher = HashingWriter(crate::outboard::BlockHasher::new());
            match reader.write_file(id, size, None, &mut hasher) {
                Ok(()) => {}
                Err(Error::Corrupt { .. }) => continue,
                Err(e) => return Err(e),
            }
            let (hashed, outboard) = hasher.0.finalize();
            if let (true, Some(outboard)) = (hashed == *id, outboard) {
                frame.push(*id, ObjectKind::Outboard, &outboard.encode());
                written += 1;
                if frame.len() >= FRAME_TARGET {
                    frames.push(std::mem::take(&mut frame).encode(3));
                }
            }
        }
    }
    if !frame.is_empty() {
        frames.push(frame.encode(3));
    }
    if frames.is_empty() {
        return Ok(0);
    }
    let sink = PackSink::new(&store.packs_dir(), &store.temp_dir());
    for encoded in frames {
        sink.add(encoded)?;
    }
    let packs = sink.finish()?;
    let _lock = store.lock_head_alone()?;
    let recorded = (|| {
        let packs_dir = store.packs_dir();
        let writer = store.catalog_mut().writer()?;
        for pack in &packs {
            writer.add_pack(&pack.read_index(&packs_dir)?)?;
        }
        writer.commit()
    })();
    if let Err(e) = recorded {
        remove_unrecorded_packs(store, &packs);
        return Err(e);
    }
    Ok(written)
}

/// A [`std::io::Write`] that hashes what passes and keeps nothing.
struct HashingWriter(crate::outboard::BlockHasher);

impl std::io::Write for HashingWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.update(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The frame queue's receiver lives until every writer has finished, so a send cannot fail.
const QUEUE_OPEN: &str = "the frame queue outlives the writers";

/// Trees (and other metadata objects) on their way into a commit's (or a rebase's) packs: packed into
/// frames of about [`FRAME_TARGET`] bytes with one zstd context (setting one up costs
/// megabytes).
/// Commit writes its trees through it, rebase its trees and versions.
pub(crate) struct TreeWriter {
    metadata: FrameBuilder,
    compressor: zstd::bulk::Compressor<'static>,
}

impl TreeWriter {
    pub(crate) fn new(compression_level: i32) -> Result<TreeWriter> {
        Ok(TreeWriter {
            metadata: FrameBuilder::default(),
            compressor: zstd::bulk::Compressor::new(compression_level)
                .during("setting up a zstd compressor")?,
        })
    }

    /// Adds tree `id` unless the store or this sink already has it.
    pub(crate) fn add(
        &mut self,
        store: &Store,
        sink: &PackSink,
        id: ObjectId,
        bytes: &[u8],
    ) -> Result<()> {
        if !store.catalog().has_object(&id, ObjectKind::Tree)?
            && sink.claim(&id, ObjectKind::Tree)?
        {
            self.push_framed(sink, id, ObjectKind::Tree, bytes)?;
        }
        Ok(())
    }

    /// Puts object `id` of `kind` in the frame being filled, sealing that frame into `sink`
    /// first when `bytes` would take it past [`FRAME_TARGET`].
    fn push_framed(
        &mut self,
        sink: &PackSink,
        id: ObjectId,
        kind: ObjectKind,
        bytes: &[u8],
    ) -> Result<()> {
        if !self.metadata.is_empty() && self.metadata.len() + bytes.len() > FRAME_TARGET {
            sink.add(self.metadata.encode_with(&mut self.compressor))?;
        }
        self.metadata.push(id, kind, bytes);
        Ok(())
    }

    /// Adds version object `id` (encoded as `bytes`) unless this sink already has it.
    pub(crate) fn add_version(
        &mut self,
        sink: &PackSink,
        id: ObjectId,
        bytes: &[u8],
    ) -> Result<()> {
        if sink.claim(&id, ObjectKind::Version)? {
            self.push_framed(sink, id, ObjectKind::Version, bytes)?;
        }
        Ok(())
    }

    /// Adds provenance object `id` (encoded as `bytes`) unless the store or this sink already
    /// has it, to the frame being filled (whatever its size).
    pub(crate) fn add_provenance(
        &mut self,
        store: &Store,
        sink: &PackSink,
        id: ObjectId,
        bytes: &[u8],
    ) -> Result<()> {
        if !store.catalog().has_object(&id, ObjectKind::Provenance)?
            && sink.claim(&id, ObjectKind::Provenance)?
        {
            self.metadata.push(id, ObjectKind::Provenance, bytes);
        }
        Ok(())
    }

    /// Writes object `id` of `kind` (encoded as `bytes`) to `sink` in a frame of its own,
    /// compressed with this writer's context.
    pub(crate) fn add_alone(
        &mut self,
        sink: &PackSink,
        id: ObjectId,
        kind: ObjectKind,
        bytes: &[u8],
    ) -> Result<()> {
        let mut frame = FrameBuilder::default();
        frame.push(id, kind, bytes);
        sink.add(frame.encode_with(&mut self.compressor))
    }

    /// Writes what is left as a last frame.
    pub(crate) fn flush(&mut self, sink: &PackSink) -> Result<()> {
        if !self.metadata.is_empty() {
            sink.add(self.metadata.encode_with(&mut self.compressor))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pack::EncodedFrame;

    /// A frame of `count` distinct tiny chunks, numbered from `first`.
    fn frame(first: u64, count: u64) -> EncodedFrame {
        let mut builder = FrameBuilder::default();
        for n in first..first + count {
            let bytes = n.to_le_bytes();
            builder.push(ObjectId::of(&bytes), ObjectKind::Chunk, &bytes);
        }
        builder.encode(1)
    }

    #[test]
    fn a_pack_of_tiny_objects_is_sealed_at_its_object_target_and_read_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let (packs, temp) = (dir.path().join("packs"), dir.path().join("tmp"));
        std::fs::create_dir_all(&packs).unwrap();
        std::fs::create_dir_all(&temp).unwrap();
        let sink = PackSink::new(&packs, &temp);
        let half = PACK_TARGET_OBJECTS as u64 / 2 + 1;
        // Two frames pass the object target (far below PACK_TARGET bytes): sealed then.
        sink.add(frame(0, half)).unwrap();
        sink.add(frame(half, half)).unwrap();
        sink.add(frame(2 * half, 10)).unwrap();
        let sealed = sink.finish().unwrap();
        assert_eq!(sealed.len(), 2, "{sealed:?}");
        assert!(sealed[0].size < PACK_TARGET);
        // The index is read back from each file, whole.
        let first = sealed[0].read_index(&packs).unwrap();
        assert_eq!(first.objects.len() as u64, 2 * half);
        assert_eq!(first.objects[0].id, ObjectId::of(&0u64.to_le_bytes()));
        assert_eq!(sealed[1].read_index(&packs).unwrap().objects.len(), 10);
        // A file whose length is not the one sealed is refused.
        let wrong = crate::pack::PackFile {
            size: sealed[1].size + 1,
            ..sealed[1]
        };
        assert!(matches!(
            wrong.read_index(&packs),
            Err(Error::Corrupt { .. })
        ));
    }
}
