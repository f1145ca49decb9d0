//! The bases of delta frames (pack index 2, schema 14): what a chunk stored as a delta needs
//! before it can be read, here and on a remote. Every path that reads, moves or frees chunks
//! asks these for a chunk's **closure**: its bases, their bases, and so on (Mercurial's revlog
//! calls the same thing a delta chain; dsv bounds it at
//! [`crate::pack::format::MAX_DELTA_DEPTH`] levels).

use std::collections::HashSet;

use rusqlite::{OptionalExtension, params};

use super::Catalog;
use super::SqliteResultExt;
use super::objects::decode_bases;
use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::object::ObjectKind;
use crate::pack::format::MAX_DELTA_DEPTH;
use crate::pack::{BaseLookup, Compression, DeltaMap, FrameLocation};

/// The bases of the local frame holding chunk `?1`.
const LOCAL_BASES: &str = "SELECT f.bases FROM objects o JOIN frames f ON f.id = o.frame
     WHERE o.id = ?1 AND o.kind = 1";

/// The bases of the frame of remote `?1` holding chunk `?2`: its own index rows first, then a
/// local pack whose index it shares (as `remote_locate` looks).
const REMOTE_BASES: &str =
    "SELECT f.bases FROM remote_objects o JOIN remote_frames f ON f.id = o.frame
     WHERE o.remote = ?1 AND o.id = ?2 AND o.kind = 1
     UNION ALL
     SELECT f.bases FROM objects o JOIN frames f ON f.id = o.frame JOIN packs p ON p.id = f.pack
     JOIN remote_packs r ON r.remote = ?1 AND r.pack_id = p.pack_id AND r.local_index = 1
     WHERE o.id = ?2 AND o.kind = 1
     LIMIT 1";

impl Catalog {
    /// The bases of the local frame at `location` (by pack id and offset), in prefix order;
    /// empty for a plain frame or one the catalog does not list.
    ///
    /// # Errors
    /// [`Error::Catalog`]; [`Error::Corrupt`] for a malformed `bases` column.
    pub fn frame_bases(&self, location: &FrameLocation) -> Result<Vec<ObjectId>> {
        let column: Option<Option<Vec<u8>>> = self
            .conn
            .prepare_cached(
                "SELECT f.bases FROM frames f JOIN packs p ON p.id = f.pack
                 WHERE p.pack_id = ?1 AND f.offset = ?2",
            )
            .in_catalog()?
            .query_row(
                params![&location.pack.0[..], location.offset as i64],
                |row| row.get(0),
            )
            .optional()
            .in_catalog()?;
        decode_bases(column.flatten()).map_err(|detail| Error::corrupt(&self.path, detail))
    }

    /// The bases of the frame of a remote location (`RemoteLocation::frame_row`: a
    /// `remote_frames` row, or a negated `frames` row for a pack whose index the remote shares
    /// with this store), in prefix order; empty for a plain frame.
    ///
    /// # Errors
    /// [`Error::Catalog`]; [`Error::Corrupt`] for a malformed `bases` column.
    pub fn remote_frame_bases(&self, frame_row: i64) -> Result<Vec<ObjectId>> {
        let sql = if frame_row < 0 {
            "SELECT bases FROM frames WHERE id = ?1"
        } else {
            "SELECT bases FROM remote_frames WHERE id = ?1"
        };
        let column: Option<Option<Vec<u8>>> = self
            .conn
            .prepare_cached(sql)
            .in_catalog()?
            .query_row([frame_row.abs()], |row| row.get(0))
            .optional()
            .in_catalog()?;
        decode_bases(column.flatten()).map_err(|detail| Error::corrupt(&self.path, detail))
    }

    /// The bases of the local frame holding chunk `id`, in prefix order: empty when the chunk
    /// is stored plain or not held here.
    ///
    /// # Errors
    /// As [`Catalog::frame_bases`].
    pub fn chunk_bases(&self, id: &ObjectId) -> Result<Vec<ObjectId>> {
        self.bases_by(LOCAL_BASES, None, id)
    }

    /// The bases of the frame of remote `remote` (row id) that holds chunk `id`.
    ///
    /// # Errors
    /// As [`Catalog::frame_bases`].
    pub fn remote_chunk_bases(&self, remote: i64, id: &ObjectId) -> Result<Vec<ObjectId>> {
        self.bases_by(REMOTE_BASES, Some(remote), id)
    }

    fn bases_by(&self, sql: &str, remote: Option<i64>, id: &ObjectId) -> Result<Vec<ObjectId>> {
        let mut statement = self.conn.prepare_cached(sql).in_catalog()?;
        let column: Option<Option<Vec<u8>>> = match remote {
            None => statement.query_row([&id.0[..]], |row| row.get(0)),
            Some(remote) => statement.query_row(params![remote, &id.0[..]], |row| row.get(0)),
        }
        .optional()
        .in_catalog()?;
        decode_bases(column.flatten()).map_err(|detail| Error::corrupt(&self.path, detail))
    }

    /// The closure of `chunks` in this store: every chunk that one of them needs as a base,
    /// directly or through other bases (the given chunks are in it only when one needs
    /// another). Sorted, each once.
    ///
    /// # Errors
    /// [`Error::Catalog`]; [`Error::Corrupt`] for a malformed row, or a chain deeper than
    /// [`MAX_DELTA_DEPTH`] (a cycle among them).
    pub fn delta_bases_of(&self, chunks: &[ObjectId]) -> Result<Vec<ObjectId>> {
        self.closure(chunks, |id| self.chunk_bases(id))
    }

    /// The closure of `chunks` on remote `remote` (row id), as [`Catalog::delta_bases_of`]
    /// finds it here, through the remote's index.
    ///
    /// # Errors
    /// As [`Catalog::delta_bases_of`].
    pub fn remote_delta_bases_of(&self, remote: i64, chunks: &[ObjectId]) -> Result<Vec<ObjectId>> {
        self.closure(chunks, |id| self.remote_chunk_bases(remote, id))
    }

    fn closure(
        &self,
        chunks: &[ObjectId],
        bases_of: impl Fn(&ObjectId) -> Result<Vec<ObjectId>>,
    ) -> Result<Vec<ObjectId>> {
        let mut found: HashSet<ObjectId> = HashSet::new();
        let mut level: Vec<ObjectId> = chunks.to_vec();
        let mut depth = 0;
        while !level.is_empty() {
            let mut next = Vec::new();
            for id in &level {
                for base in bases_of(id)? {
                    if found.insert(base) {
                        next.push(base);
                    }
                }
            }
            if !next.is_empty() {
                depth += 1;
                if depth > MAX_DELTA_DEPTH {
                    return Err(Error::corrupt(
                        &self.path,
                        format!(
                            "delta chains from chunk {} are deeper than {MAX_DELTA_DEPTH} levels (a cycle?)",
                            next[0].short()
                        ),
                    ));
                }
            }
            level = next;
        }
        let mut out: Vec<ObjectId> = found.into_iter().collect();
        out.sort();
        Ok(out)
    }

    /// How many levels of bases chunk `id` has here: 0 for a chunk stored plain (or not held),
    /// 1 + the deepest of its bases' depths for a delta.
    ///
    /// # Errors
    /// As [`Catalog::delta_bases_of`]: a chain deeper than [`MAX_DELTA_DEPTH`] is corrupt.
    pub fn delta_depth(&self, id: &ObjectId) -> Result<u32> {
        let mut known = std::collections::HashMap::new();
        self.depth_below(id, 0, &mut known)
    }

    /// The depth of `id`, `above` levels below the chunk asked about; each chunk's depth is
    /// found once (`known`), so a chain listing one base many times costs one lookup a chunk.
    fn depth_below(
        &self,
        id: &ObjectId,
        above: u32,
        known: &mut std::collections::HashMap<ObjectId, u32>,
    ) -> Result<u32> {
        if let Some(depth) = known.get(id) {
            return Ok(*depth);
        }
        if above > MAX_DELTA_DEPTH {
            return Err(Error::corrupt(
                &self.path,
                format!(
                    "the delta chain of chunk {} is deeper than {MAX_DELTA_DEPTH} levels (a cycle?)",
                    id.short()
                ),
            ));
        }
        let mut deepest = 0;
        for base in self.chunk_bases(id)? {
            deepest = deepest.max(1 + self.depth_below(&base, above + 1, known)?);
        }
        known.insert(*id, deepest);
        Ok(deepest)
    }
}

/// The catalog answers a reader's questions about bases from its tables: a delta frame's
/// bases from `frames.bases`, a base's place from `objects`.
impl BaseLookup for Catalog {
    fn bases(&self, frame: &FrameLocation) -> Result<Vec<ObjectId>> {
        self.frame_bases(frame)
    }

    fn locate_base(&self, id: &ObjectId) -> Result<(FrameLocation, u32, u32)> {
        let location = self
            .locate(id, ObjectKind::Chunk)?
            .ok_or_else(|| Error::MissingObject {
                id: id.to_hex(),
                what: "base chunk of a delta",
            })?;
        Ok((location.frame, location.offset, location.length))
    }
}

impl Catalog {
    /// A [`DeltaMap`] for reading the frames at `frames` on threads that hold no catalog
    /// connection: the bases of each delta frame among them and, transitively, the place
    /// and bases of every base. Plain frames add nothing.
    ///
    /// # Errors
    /// [`Error::MissingObject`] for a base not held here; as [`Catalog::delta_bases_of`].
    pub fn delta_map<'f>(
        &self,
        frames: impl IntoIterator<Item = &'f FrameLocation>,
    ) -> Result<DeltaMap> {
        let mut map = DeltaMap::default();
        let mut pending: Vec<(FrameLocation, u32)> = frames
            .into_iter()
            .filter(|f| f.compression == Compression::Delta)
            .map(|f| (*f, 0))
            .collect();
        while let Some((frame, depth)) = pending.pop() {
            if map.frames.contains_key(&(frame.pack, frame.offset)) {
                continue;
            }
            if depth >= MAX_DELTA_DEPTH {
                return Err(Error::corrupt(
                    &self.path,
                    format!("delta chains are deeper than {MAX_DELTA_DEPTH} levels (a cycle?)"),
                ));
            }
            let bases = self.frame_bases(&frame)?;
            for base in &bases {
                if map.chunks.contains_key(base) {
                    continue;
                }
                let place = self.locate_base(base)?;
                if place.0.compression == Compression::Delta {
                    pending.push((place.0, depth + 1));
                }
                map.chunks.insert(*base, place);
            }
            map.frames.insert((frame.pack, frame.offset), bases);
        }
        Ok(map)
    }
}

impl Catalog {
    /// The chunks some remote holds, as this store last read or wrote the remotes' indexes
    /// (their own rows, and the objects of local packs a remote holds too). `gc` leaves
    /// their encoding as it is: a remote holding one chunk in two encodings (a forward delta
    /// pushed before a gc, a reverse delta after) could hand a reader two deltas that name
    /// each other.
    ///
    /// # Errors
    /// [`Error::Catalog`]; [`Error::Corrupt`] for a malformed id.
    pub fn chunks_on_remotes(&self) -> Result<HashSet<ObjectId>> {
        let mut statement = self
            .conn
            .prepare(
                "SELECT id FROM remote_objects WHERE kind = 1
                 UNION
                 SELECT o.id FROM objects o JOIN frames f ON f.id = o.frame
                 JOIN packs p ON p.id = f.pack
                 JOIN remote_packs r ON r.pack_id = p.pack_id AND r.local_index = 1
                 WHERE o.kind = 1",
            )
            .in_catalog()?;
        let rows = statement
            .query_map([], |row| row.get::<_, Vec<u8>>(0))
            .in_catalog()?;
        let mut out = HashSet::new();
        for row in rows {
            let bytes = row.in_catalog()?;
            out.insert(
                ObjectId::from_slice(&bytes)
                    .ok_or_else(|| Error::corrupt(&self.path, "a malformed chunk id"))?,
            );
        }
        Ok(out)
    }
}
