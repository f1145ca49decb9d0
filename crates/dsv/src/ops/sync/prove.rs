//! Proving the file maps a remote holds, for the commands that vouch for a remote's data
//! without reading it through a checkout: `dsv verify --remote --full` and `dsv copy`.
//!
//! A file map is stored under its file's id, not under the hash of its own bytes, so a
//! remote can hold a map that lists the wrong chunks (another file's, of the same length).
//! Such a map is proven the way a checkout proves it: the chunks it lists are joined in
//! order and hashed (BLAKE3) whole, and the hash must equal the file id. Each chunk is read
//! from this store when it holds it, else from the remote (the frame that holds it, fetched
//! by a ranged GET and checked as a fetch checks it; a delta frame with its bases, each
//! read the same way, and decoded against them); every chunk is checked against its id.

use crate::catalog::RemoteRecord;
use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::object::{FileMap, ObjectKind};
use crate::pack::EncodedFrame;
use crate::pack::format::Compression;
use crate::remote::Remote;
use crate::store::Store;

/// One problem `dsv verify --remote` found (a file map that fails its proof is one).
#[derive(Debug, serde::Serialize)]
pub struct RemoteProblem {
    /// The ref (`dataset` or `dataset@tag`) or the key (`packs/<id>.pack`) it concerns.
    pub what: String,
    /// What is wrong.
    pub detail: String,
}

/// The most stored bytes of remote frames one proof reads ahead at a time (the chunks a map
/// lists next that this store lacks): the memory a proof holds, about.
pub(crate) const PROOF_BATCH_BYTES: u64 = 64 * 1024 * 1024;

/// Ranged GETs a proof has in flight when it reads ahead.
pub(crate) const PROOF_JOBS: usize = 8;

/// Proves file maps against their file ids, reading chunks from this store or `remote`.
pub(crate) struct MapProver<'a> {
    record: &'a RemoteRecord,
    remote: &'a Remote,
    /// Frames read from the remote and checked: (pack, frame offset) and their raw bytes
    /// (those of one batch read ahead, or the last one read alone).
    frames: std::collections::HashMap<(ObjectId, u64), Vec<u8>>,
    /// Bytes downloaded so far.
    pub(crate) bytes: u64,
    /// Chunks decoded from the remote's delta frames, checked, by id: the bases the next
    /// deltas of a chain name (the next version's chunks) are not fetched again. Let go when
    /// they pass [`DECODED_BYTES`].
    decoded: std::collections::HashMap<ObjectId, Vec<u8>>,
    decoded_bytes: u64,
}

/// The most bytes of decoded delta chunks a proof keeps for the deltas that follow.
const DECODED_BYTES: u64 = 64 * 1024 * 1024;

impl<'a> MapProver<'a> {
    pub(crate) fn new(record: &'a RemoteRecord, remote: &'a Remote) -> MapProver<'a> {
        MapProver {
            record,
            remote,
            frames: std::collections::HashMap::new(),
            decoded: std::collections::HashMap::new(),
            decoded_bytes: 0,
            bytes: 0,
        }
    }

    /// Whether the chunks `map` (the remote's map of file `file`) lists, joined, hash to
    /// `file`: `Ok(Ok(()))` when they do, `Ok(Err(detail))` when they do not, or when a
    /// chunk it lists is neither here nor on the remote, or is not what its id says.
    ///
    /// # Errors
    /// [`Error::Catalog`], [`Error::Io`] reading this store; [`Error::Remote`];
    /// [`Error::Interrupted`].
    pub(crate) fn prove(
        &mut self,
        store: &Store,
        file: &ObjectId,
        map: &FileMap,
    ) -> Result<std::result::Result<(), String>> {
        let mut hasher = blake3::Hasher::new();
        let mut reader = store.reader();
        // Chunks before this index are covered by the frames read ahead.
        let mut read_ahead_to = 0;
        for (index, (chunk, length)) in map.chunks.iter().enumerate() {
            crate::interrupt::check()?;
            let bytes = if store.catalog().has_object(chunk, ObjectKind::Chunk)? {
                reader.bytes(chunk, ObjectKind::Chunk)?
            } else {
                if index >= read_ahead_to {
                    match self.read_ahead(store, &map.chunks[index..])? {
                        Ok(covered) => read_ahead_to = index + covered,
                        Err(detail) => return Ok(Err(detail)),
                    }
                }
                match self.remote_chunk(store, chunk)? {
                    Ok(bytes) => bytes,
                    Err(detail) => return Ok(Err(detail)),
                }
            };
            if ObjectId::of(&bytes) != *chunk {
                return Ok(Err(format!(
                    "chunk {} is not what its id says",
                    chunk.short()
                )));
            }
            if bytes.len() as u64 != u64::from(*length) {
                return Ok(Err(format!(
                    "its file map lists chunk {} as {length} bytes, but it holds {}",
                    chunk.short(),
                    bytes.len()
                )));
            }
            hasher.update(&bytes);
        }
        if ObjectId::from(hasher.finalize()) != *file {
            return Ok(Err(format!(
                "its file map lists chunks that do not reassemble file {}",
                file.short()
            )));
        }
        Ok(Ok(()))
    }

    /// Reads ahead the remote frames holding the chunks of `chunks` (those a map lists next)
    /// that this store lacks, up to [`PROOF_BATCH_BYTES`] of them, [`PROOF_JOBS`] ranged
    /// GETs at a time, each checked as a fetch checks it (every chunk of the batch in it
    /// hashes to its id); the frames read before are let go. Returns how many of `chunks`
    /// the batch covers (at least one), or why a frame failed its check. A chunk the remote
    /// does not list is left to [`MapProver::remote_chunk`] to report.
    fn read_ahead(
        &mut self,
        store: &Store,
        chunks: &[(ObjectId, u32)],
    ) -> Result<std::result::Result<usize, String>> {
        type Members = Vec<(ObjectId, ObjectKind, u32, u32)>;
        let mut wanted: std::collections::BTreeMap<
            (ObjectId, u64),
            (crate::pack::FrameRecord, Members),
        > = std::collections::BTreeMap::new();
        let mut total = 0u64;
        let mut covered = 0;
        for (chunk, _) in chunks {
            if store.catalog().has_object(chunk, ObjectKind::Chunk)? {
                covered += 1;
                continue;
            }
            let Some(location) =
                store
                    .catalog()
                    .remote_locate(self.record.id, chunk, ObjectKind::Chunk)?
            else {
                covered += 1;
                continue;
            };
            // A delta is read with its bases, one at a time (`remote_delta_object`).
            if location.frame.compression == Compression::Delta {
                covered += 1;
                continue;
            }
            let key = (location.pack, location.frame.offset);
            if !wanted.contains_key(&key) {
                if total >= PROOF_BATCH_BYTES && covered > 0 {
                    break;
                }
                total += u64::from(location.frame.stored_length);
            }
            let member = (*chunk, ObjectKind::Chunk, location.offset, location.length);
            let entry = wanted
                .entry(key)
                .or_insert_with(|| (location.frame, Vec::new()));
            if !entry.1.contains(&member) {
                entry.1.push(member);
            }
            covered += 1;
        }
        self.frames.clear();
        let ranges = wanted
            .iter()
            .map(|((pack, _), (frame, _))| {
                (
                    *pack,
                    frame.offset..frame.offset + u64::from(frame.stored_length),
                )
            })
            .collect();
        let mut got = Vec::new();
        self.remote.get_ranges(
            ranges,
            PROOF_JOBS,
            std::sync::Arc::new(|pack, range: std::ops::Range<u64>, bytes: bytes::Bytes| {
                Ok((pack, range.start, bytes))
            }),
            |piece| {
                got.push(piece);
                Ok(())
            },
        )?;
        for (pack, offset, stored) in got {
            self.bytes += stored.len() as u64;
            let Some((frame, members)) = wanted.remove(&(pack, offset)) else {
                continue;
            };
            match EncodedFrame::verified_with_raw(
                stored.to_vec(),
                frame.raw_length,
                frame.compression,
                members,
            ) {
                Ok((_, raw)) => {
                    self.frames.insert((pack, offset), raw);
                }
                Err(detail) => {
                    return Ok(Err(format!(
                        "the frame at offset {offset} of pack {}: {detail}",
                        pack.short()
                    )));
                }
            }
        }
        Ok(Ok(covered.max(1)))
    }

    /// Chunk `chunk` read from the remote (the frame holding it, by the remote's index as
    /// this store recorded it), or why it cannot be.
    /// The stored bytes of `frame` of remote pack `pack`, by one ranged GET (counted in
    /// `bytes`), unchecked.
    ///
    /// # Errors
    /// [`Error::Remote`]; [`Error::Internal`] when the read returned nothing.
    fn frame_bytes(
        &mut self,
        pack: &ObjectId,
        frame: &crate::pack::FrameRecord,
    ) -> Result<Vec<u8>> {
        let range = frame.offset..frame.offset + u64::from(frame.stored_length);
        let mut got = None;
        self.remote.get_ranges(
            vec![(*pack, range)],
            1,
            std::sync::Arc::new(|_, _, bytes: bytes::Bytes| Ok(bytes)),
            |bytes| {
                got = Some(bytes.to_vec());
                Ok(())
            },
        )?;
        let stored = got.ok_or_else(|| Error::Internal {
            detail: "a ranged read returned nothing".into(),
        })?;
        self.bytes += stored.len() as u64;
        Ok(stored)
    }

    fn remote_chunk(
        &mut self,
        store: &Store,
        chunk: &ObjectId,
    ) -> Result<std::result::Result<Vec<u8>, String>> {
        self.remote_object(store, chunk, ObjectKind::Chunk)
    }

    /// Object `id` of `kind` read from the remote (the frame holding it, by the remote's
    /// index as this store recorded it, checked as a fetch checks it), or why it cannot be.
    fn remote_object(
        &mut self,
        store: &Store,
        chunk: &ObjectId,
        kind: ObjectKind,
    ) -> Result<std::result::Result<Vec<u8>, String>> {
        let Some(location) = store.catalog().remote_locate(self.record.id, chunk, kind)? else {
            return Ok(Err(format!(
                "it lists {} {}, which the remote does not hold",
                kind.name(),
                chunk.short()
            )));
        };
        if location.frame.compression == Compression::Delta {
            if let Some(bytes) = self.decoded.get(chunk) {
                return Ok(Ok(bytes.clone()));
            }
            return self.remote_delta_object(store, &location, chunk, kind, 1);
        }
        let key = (location.pack, location.frame.offset);
        if !self.frames.contains_key(&key) {
            let frame = location.frame;
            let stored = self.frame_bytes(&location.pack, &frame)?;
            // Checked as a fetch checks a frame (a chunk hashes to its id, a map decodes).
            let members = vec![(*chunk, kind, location.offset, location.length)];
            let raw = match EncodedFrame::verified_with_raw(
                stored,
                frame.raw_length,
                frame.compression,
                members,
            ) {
                Ok((_, raw)) => raw,
                Err(detail) => {
                    return Ok(Err(format!(
                        "the frame at offset {} of pack {} holding {} {}: {detail}",
                        frame.offset,
                        location.pack.short(),
                        kind.name(),
                        chunk.short()
                    )));
                }
            };
            self.frames.clear();
            self.frames.insert(key, raw);
        }
        let bytes = self
            .frames
            .get(&key)
            .and_then(|raw| {
                raw.get(
                    location.offset as usize..location.offset as usize + location.length as usize,
                )
            })
            .map(<[u8]>::to_vec);
        Ok(bytes.ok_or_else(|| {
            format!(
                "{} {} lies outside its frame in pack {}",
                kind.name(),
                chunk.short(),
                location.pack.short()
            )
        }))
    }
}

impl MapProver<'_> {
    /// Object `id` of `kind` in the remote delta frame at `location`, read with its bases
    /// (each from this store when it holds it, else from the remote, a delta base with its
    /// own bases: `depth` levels down so far) and checked as a fetch checks a delta (decoded
    /// against the bases, every object hashing to its id), or why it cannot be.
    fn remote_delta_object(
        &mut self,
        store: &Store,
        location: &crate::catalog::RemoteLocation,
        id: &ObjectId,
        kind: ObjectKind,
        depth: usize,
    ) -> Result<std::result::Result<Vec<u8>, String>> {
        if depth > crate::pack::format::MAX_DELTA_DEPTH as usize {
            return Ok(Err(format!(
                "{} {} is a delta chain deeper than {} levels",
                kind.name(),
                id.short(),
                crate::pack::format::MAX_DELTA_DEPTH
            )));
        }
        let bases = store.catalog().remote_frame_bases(location.frame_row)?;
        let mut prefix = Vec::new();
        for base in &bases {
            let bytes = if store.catalog().has_object(base, ObjectKind::Chunk)? {
                store.reader().bytes(base, ObjectKind::Chunk)?
            } else {
                let Some(at) =
                    store
                        .catalog()
                        .remote_locate(self.record.id, base, ObjectKind::Chunk)?
                else {
                    return Ok(Err(format!(
                        "the delta of {} {} names base chunk {}, which the remote does not hold",
                        kind.name(),
                        id.short(),
                        base.short()
                    )));
                };
                let got = if let Some(bytes) = self.decoded.get(base) {
                    Ok(bytes.clone())
                } else if at.frame.compression == Compression::Delta {
                    self.remote_delta_object(store, &at, base, ObjectKind::Chunk, depth + 1)?
                } else {
                    self.remote_object(store, base, ObjectKind::Chunk)?
                };
                match got {
                    Ok(bytes) => bytes,
                    Err(detail) => return Ok(Err(detail)),
                }
            };
            if (prefix.len() + bytes.len()) as u64 > crate::pack::format::MAX_DELTA_PREFIX {
                return Ok(Err(format!(
                    "the delta of {} {} names bases of more than {} bytes",
                    kind.name(),
                    id.short(),
                    crate::pack::format::MAX_DELTA_PREFIX
                )));
            }
            prefix.extend_from_slice(&bytes);
        }
        let frame = location.frame;
        let stored = self.frame_bytes(&location.pack, &frame)?;
        let where_ = || {
            format!(
                "the delta frame at offset {} of pack {} holding {} {}",
                frame.offset,
                location.pack.short(),
                kind.name(),
                id.short()
            )
        };
        let members = vec![(*id, kind, location.offset, location.length)];
        let raw =
            match EncodedFrame::verified_delta(stored, frame.raw_length, members, bases, &prefix) {
                Ok((_, raw)) => raw,
                Err(detail) => return Ok(Err(format!("{}: {detail}", where_()))),
            };
        let start = location.offset as usize;
        let Some(bytes) = raw.get(start..start + location.length as usize) else {
            return Ok(Err(format!(
                "{}: the object lies outside its frame",
                where_()
            )));
        };
        if self.decoded_bytes + bytes.len() as u64 > DECODED_BYTES {
            self.decoded.clear();
            self.decoded_bytes = 0;
        }
        self.decoded_bytes += bytes.len() as u64;
        self.decoded.insert(*id, bytes.to_vec());
        Ok(Ok(bytes.to_vec()))
    }
}

/// Decodes file map `bytes` of file `file`, or says why it does not decode.
pub(crate) fn decode_map(file: &ObjectId, bytes: &[u8]) -> std::result::Result<FileMap, String> {
    FileMap::decode(bytes)
        .map_err(|e| format!("the file map of file {} does not decode: {e}", file.short()))
}

/// The file maps read from a remote's packs (`verify --remote --full` reads every frame):
/// by file id, each copy with the pack that holds it.
#[derive(Default)]
pub(crate) struct RemoteMaps {
    maps: std::collections::HashMap<ObjectId, Vec<(ObjectId, Vec<u8>)>>,
}

impl RemoteMaps {
    /// Whether a frame with these members holds a file map (its raw bytes are then wanted).
    pub(crate) fn wants(members: &[(ObjectId, ObjectKind, u32, u32)]) -> bool {
        members
            .iter()
            .any(|(_, kind, ..)| *kind == ObjectKind::FileMap)
    }

    /// Keeps the file maps among `members` of a checked frame of pack `pack` whose raw
    /// bytes are `raw`.
    pub(crate) fn add(
        &mut self,
        pack: &ObjectId,
        raw: &[u8],
        members: &[(ObjectId, ObjectKind, u32, u32)],
    ) {
        for (id, kind, offset, length) in members {
            if *kind != ObjectKind::FileMap {
                continue;
            }
            if let Some(bytes) = raw.get(*offset as usize..*offset as usize + *length as usize) {
                self.maps
                    .entry(*id)
                    .or_default()
                    .push((*pack, bytes.to_vec()));
            }
        }
    }

    /// Proves every copy the remote holds of the map of every file that `refs` (what each
    /// is called, the version it names) reach, each file once; reports each bad one as a
    /// problem naming the ref and the path. Returns the distinct files checked and the
    /// bytes downloaded for the proofs.
    ///
    /// # Errors
    /// As [`MapProver::prove`]; [`Error::Catalog`].
    pub(crate) fn prove_refs(
        &self,
        store: &Store,
        record: &RemoteRecord,
        remote: &Remote,
        refs: &[(String, ObjectId)],
        problems: &mut Vec<RemoteProblem>,
    ) -> Result<(u64, u64)> {
        let mut prover = MapProver::new(record, remote);
        let mut seen = std::collections::HashSet::new();
        let mut files = 0u64;
        let mut tree_reader = store.reader();
        for (what, version) in refs {
            // What cannot be read here is reported by the closure check.
            let Ok(object) = store.reader().version(version) else {
                continue;
            };
            let Ok(entries) = crate::tree::walk_version(&mut tree_reader, &object) else {
                continue;
            };
            for entry in entries {
                let Ok(entry) = entry else {
                    break;
                };
                if !matches!(entry.kind, crate::tree::FlatKind::File { .. })
                    || entry.size == 0
                    || !seen.insert(entry.id)
                {
                    continue;
                }
                files += 1;
                for (pack, bytes) in self.maps.get(&entry.id).into_iter().flatten() {
                    // Bounded by the file's size first: a map listing more (or less) is
                    // refused without reading its chunks.
                    let result = match decode_map(&entry.id, bytes) {
                        Ok(map) if map.size() != entry.size => Err(format!(
                            "its file map lists {} bytes, but file {} is {} bytes",
                            map.size(),
                            entry.id.short(),
                            entry.size
                        )),
                        Ok(map) => prover.prove(store, &entry.id, &map)?,
                        Err(detail) => Err(detail),
                    };
                    if let Err(detail) = result {
                        problems.push(RemoteProblem {
                            what: format!("{what}:{}", entry.path),
                            detail: format!(
                                "{detail} (the file map in {}): a clone cannot read this file",
                                crate::remote::pack_key(pack)
                            ),
                        });
                    }
                }
            }
        }
        Ok((files, prover.bytes))
    }
}

/// `copy`: proves each file map among `needed` (what a copy forwards) as remote `record`
/// holds it, before any byte moves: each map is read from the remote (one ranged GET of its
/// frame). A map this store holds, proven, byte for byte the same, needs nothing more; any
/// other is proven by its chunks (read here, else from the remote).
/// Returns the bytes downloaded.
///
/// # Errors
/// [`Error::Corrupt`] naming `remote NAME` for the first map that does not reassemble its
/// file (or cannot be read from the remote as its index says); as [`MapProver::prove`].
pub(crate) fn prove_forwarded(
    store: &Store,
    record: &RemoteRecord,
    remote: &Remote,
    needed: &[(ObjectId, ObjectKind)],
) -> Result<u64> {
    let mut prover = MapProver::new(record, remote);
    let refuse = |file: &ObjectId, detail: String| {
        Error::corrupt(
            format!("remote {}", record.name),
            format!(
                "the file map of file {} there: {detail}; a copy forwards no such map, so nothing was sent and no ref moved",
                file.short()
            ),
        )
    };
    for (id, kind) in needed {
        if *kind != ObjectKind::FileMap {
            continue;
        }
        let catalog = store.catalog();
        if catalog
            .remote_locate(record.id, id, ObjectKind::FileMap)?
            .is_none()
        {
            continue;
        }
        // Always what the remote holds, even where this store shares the remote's pack
        // (same id and size): the remote may have changed its bytes in place, and the copy
        // forwards the remote's bytes, not this store's.
        let bytes = match prover.remote_object(store, id, ObjectKind::FileMap)? {
            Ok(bytes) => bytes,
            Err(detail) => return Err(refuse(id, detail)),
        };
        let here_proven = catalog.has_object(id, ObjectKind::FileMap)?
            && catalog.unproven_file_map(id)?.is_none()
            && store.reader().bytes(id, ObjectKind::FileMap)? == bytes;
        if here_proven {
            continue;
        }
        let map = decode_map(id, &bytes).map_err(|detail| refuse(id, detail))?;
        if let Err(detail) = prover.prove(store, id, &map)? {
            return Err(refuse(id, detail));
        }
    }
    Ok(prover.bytes)
}
