//! Packs, frames and objects: where every stored object lives.

use rusqlite::{OptionalExtension, params};

use super::{Catalog, CatalogWriter, SqliteResultExt, unix_now};
use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::object::ObjectKind;
use crate::pack::{Compression, FrameLocation, FrameRecord, SealedPack};

/// Where one object is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ObjectLocation {
    /// What the object is.
    pub kind: ObjectKind,
    /// Its frame.
    pub frame: FrameLocation,
    /// Byte offset inside the frame's raw bytes.
    pub offset: u32,
    /// Length in bytes.
    pub length: u32,
}

const LOCATE: &str = "SELECT p.pack_id, f.offset, f.stored_length, f.raw_length, f.compression, o.offset, o.length, o.kind
     FROM objects o JOIN frames f ON f.id = o.frame JOIN packs p ON p.id = f.pack
     WHERE o.id = ?1 AND o.kind IN (?2, ?3) ORDER BY o.kind LIMIT 1";

/// The first seven columns of a location query (this store's objects or a remote's):
/// pack id, frame offset, stored length, raw length, compression, offset and length of the
/// object in the frame's raw bytes.
pub(super) struct RawLocation {
    pack: Vec<u8>,
    frame_offset: i64,
    stored_length: u32,
    raw_length: u32,
    compression: u8,
    /// Byte offset of the object inside the frame's raw bytes.
    pub object_offset: u32,
    /// The object's length in bytes.
    pub length: u32,
}

impl RawLocation {
    /// Reads columns 0–6 of `row`.
    pub(super) fn read(row: &rusqlite::Row<'_>) -> rusqlite::Result<RawLocation> {
        Ok(RawLocation {
            pack: row.get(0)?,
            frame_offset: row.get(1)?,
            stored_length: row.get(2)?,
            raw_length: row.get(3)?,
            compression: row.get(4)?,
            object_offset: row.get(5)?,
            length: row.get(6)?,
        })
    }

    /// The pack id and the frame, or the error `bad` makes of what is malformed.
    pub(super) fn frame(&self, bad: &dyn Fn(&str) -> Error) -> Result<(ObjectId, FrameRecord)> {
        Ok((
            ObjectId::from_slice(&self.pack).ok_or_else(|| bad("a malformed pack id"))?,
            FrameRecord {
                // A row is data read from a file: a negative offset is damage, not a place to
                // read at (the OS would refuse it as EINVAL, an I/O error, not corruption).
                offset: u64::try_from(self.frame_offset)
                    .map_err(|_| bad("a negative frame offset"))?,
                stored_length: self.stored_length,
                raw_length: self.raw_length,
                compression: Compression::from_u8(self.compression)
                    .ok_or_else(|| bad("an unknown compression"))?,
            },
        ))
    }
}

impl Catalog {
    /// True when the store holds an object of `kind` with this id.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn has_object(&self, id: &ObjectId, kind: ObjectKind) -> Result<bool> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT 1 FROM objects WHERE id = ?1 AND kind = ?2")
            .in_catalog()?;
        stmt.exists(rusqlite::params![&id.0[..], kind as u8])
            .in_catalog()
    }

    /// Where the object `id` of `kind` is stored, or `None` when the store lacks it.
    ///
    /// # Errors
    /// [`Error::Catalog`]; [`Error::Corrupt`] when a row holds an unknown kind or compression.
    pub fn locate(&self, id: &ObjectId, kind: ObjectKind) -> Result<Option<ObjectLocation>> {
        self.locate_any(id, kind, kind)
    }

    /// Where the content of file `id` starts: its only chunk (kind chunk) for a file of one
    /// chunk, else its file map.
    ///
    /// # Errors
    /// As [`Catalog::locate`].
    pub fn locate_file(&self, id: &ObjectId) -> Result<Option<ObjectLocation>> {
        self.locate_any(id, ObjectKind::Chunk, ObjectKind::FileMap)
    }

    /// As [`Catalog::locate_file`], with, for a file map, the remote it came from when it is
    /// unproven: one statement, so the two answers are of one moment (a map rejected by
    /// another reader between two queries would otherwise read as trusted).
    ///
    /// # Errors
    /// As [`Catalog::locate`].
    pub fn locate_file_and_proof(
        &self,
        id: &ObjectId,
    ) -> Result<Option<(ObjectLocation, Option<String>)>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT p.pack_id, f.offset, f.stored_length, f.raw_length, f.compression, o.offset, o.length, o.kind, u.remote
             FROM objects o JOIN frames f ON f.id = o.frame JOIN packs p ON p.id = f.pack
             LEFT JOIN unproven_file_maps u ON u.id = o.id AND o.kind = ?3
             WHERE o.id = ?1 AND o.kind IN (?2, ?3) ORDER BY o.kind LIMIT 1",
        ).in_catalog()?;
        let row = stmt
            .query_row(
                rusqlite::params![
                    &id.0[..],
                    ObjectKind::Chunk as u8,
                    ObjectKind::FileMap as u8
                ],
                |row| {
                    Ok((
                        RawLocation::read(row)?,
                        row.get::<_, u8>(7)?,
                        row.get::<_, Option<String>>(8)?,
                    ))
                },
            )
            .optional()
            .in_catalog()?;
        let Some((raw, kind, remote)) = row else {
            return Ok(None);
        };
        Ok(Some((self.location(id, raw, kind)?, remote)))
    }

    /// Forgets file `id`'s map if it is still the one at `location` (a reader found it lists
    /// the wrong chunks) and unproven; returns whether it did. A map proven or replaced
    /// meanwhile stays.
    ///
    /// Only this store's copy is forgotten, not what the remotes hold: a remote pack that
    /// shares the index of the local pack holding the map (`remote_packs.local_index`) gets
    /// a row of its own for the map first, so the next read still finds it there and fetches
    /// it again (and a remote that serves the wrong map again is named again, never taken
    /// for data missing here). When another remote lists a map of the file too, the remote
    /// the wrong one came from stops being asked for it (its listing of that map is
    /// dropped until it lists a new pack): the next read fetches the map from the next
    /// mirror. The last remote listing one keeps it.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn reject_file_map_at(&self, id: &ObjectId, location: &ObjectLocation) -> Result<bool> {
        self.if_map_at(id, location, |tx| {
            let from: Option<String> = tx
                .query_row(
                    "SELECT remote FROM unproven_file_maps WHERE id = ?1",
                    [&id.0[..]],
                    |row| row.get(0),
                )
                .optional()
                .in_catalog()?;
            keep_remote_copies(tx, id, ObjectKind::FileMap, from.as_deref())?;
            tx.execute(
                "DELETE FROM objects WHERE id = ?1 AND kind = ?2",
                rusqlite::params![&id.0[..], ObjectKind::FileMap as u8],
            )
            .in_catalog()?;
            tx.execute("DELETE FROM unproven_file_maps WHERE id = ?1", [&id.0[..]])
                .in_catalog()?;
            Ok(())
        })
    }

    /// Records file `id`'s map as proven if it is still the one at `location` (every block
    /// of it passed); returns whether it did.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn prove_file_map_at(&self, id: &ObjectId, location: &ObjectLocation) -> Result<bool> {
        self.if_map_at(id, location, |tx| {
            tx.execute("DELETE FROM unproven_file_maps WHERE id = ?1", [&id.0[..]])
                .in_catalog()?;
            Ok(())
        })
    }
}

/// A remote pack sharing a local pack's index, and where an object lies in that pack: the
/// remote pack's row, the remote's row, the frame's offset, stored length, raw length and
/// compression, then the object's offset and length in the frame's raw bytes.
type SharedCopy = (i64, i64, i64, i64, i64, i64, i64, i64, Option<Vec<u8>>);

/// Gives every remote pack that shares the index of the local pack holding object `id` of
/// `kind` a row of its own for it (and for its frame), so that forgetting the local row does
/// not forget what those remotes hold. Then, when remote `liar` (by name) served a wrong
/// copy and another remote lists the object too, drops `liar`'s listing of it.
fn keep_remote_copies(
    tx: &rusqlite::Transaction<'_>,
    id: &ObjectId,
    kind: ObjectKind,
    liar: Option<&str>,
) -> Result<()> {
    let sharing: Vec<SharedCopy> = tx
        .prepare_cached(
            "SELECT r.id, r.remote, f.offset, f.stored_length, f.raw_length, f.compression, o.offset, o.length, f.bases
             FROM objects o JOIN frames f ON f.id = o.frame JOIN packs p ON p.id = f.pack
             JOIN remote_packs r ON r.pack_id = p.pack_id AND r.local_index = 1
             WHERE o.id = ?1 AND o.kind = ?2",
        ).in_catalog()?
        .query_map(params![&id.0[..], kind as u8], |row| {
            Ok((
                row.get(0)?,
                row.get(1)?,
                row.get(2)?,
                row.get(3)?,
                row.get(4)?,
                row.get(5)?,
                row.get(6)?,
                row.get(7)?,
                row.get(8)?,
            ))
        }).in_catalog()?
        .collect::<rusqlite::Result<_>>().in_catalog()?;
    for (pack_row, remote, frame_offset, stored, raw, compression, offset, length, bases) in sharing
    {
        let existing: Option<i64> = tx
            .prepare_cached("SELECT id FROM remote_frames WHERE pack = ?1 AND offset = ?2")
            .in_catalog()?
            .query_row(params![pack_row, frame_offset], |row| row.get(0))
            .optional()
            .in_catalog()?;
        let frame_row = match existing {
            Some(row) => row,
            None => {
                tx.execute(
                    "INSERT INTO remote_frames (pack, offset, stored_length, raw_length, compression, bases)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    params![pack_row, frame_offset, stored, raw, compression, bases],
                ).in_catalog()?;
                tx.last_insert_rowid()
            }
        };
        tx.execute(
            "INSERT OR IGNORE INTO remote_objects (remote, id, kind, frame, offset, length)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![remote, &id.0[..], kind as u8, frame_row, offset, length],
        )
        .in_catalog()?;
    }
    let liar: Option<i64> = match liar {
        Some(name) => tx
            .query_row("SELECT id FROM remotes WHERE name = ?1", [name], |row| {
                row.get(0)
            })
            .optional()
            .in_catalog()?,
        None => None,
    };
    if let Some(liar) = liar {
        let others: bool = tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM remote_objects WHERE id = ?1 AND kind = ?2 AND remote != ?3)",
            params![&id.0[..], kind as u8, liar],
            |row| row.get(0),
        ).in_catalog()?;
        if others {
            tx.execute(
                "DELETE FROM remote_objects WHERE id = ?1 AND kind = ?2 AND remote = ?3",
                params![&id.0[..], kind as u8, liar],
            )
            .in_catalog()?;
        }
    }
    Ok(())
}

impl Catalog {
    /// Runs `change` in one write transaction if file `id`'s map is at `location` and
    /// unproven.
    fn if_map_at(
        &self,
        id: &ObjectId,
        location: &ObjectLocation,
        change: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<()>,
    ) -> Result<bool> {
        let tx = rusqlite::Transaction::new_unchecked(
            &self.conn,
            rusqlite::TransactionBehavior::Immediate,
        )
        .in_catalog()?;
        let here = self.locate(id, ObjectKind::FileMap)?;
        let unproven = self.unproven_file_map(id)?.is_some();
        if here.as_ref() != Some(location) || !unproven {
            return Ok(false);
        }
        change(&tx)?;
        tx.commit().in_catalog()?;
        Ok(true)
    }

    fn locate_any(
        &self,
        id: &ObjectId,
        first: ObjectKind,
        second: ObjectKind,
    ) -> Result<Option<ObjectLocation>> {
        let mut stmt = self.conn.prepare_cached(LOCATE).in_catalog()?;
        let row = stmt
            .query_row(
                rusqlite::params![&id.0[..], first as u8, second as u8],
                |row| Ok((RawLocation::read(row)?, row.get::<_, u8>(7)?)),
            )
            .optional()
            .in_catalog()?;
        let Some((raw, kind)) = row else {
            return Ok(None);
        };
        Ok(Some(self.location(id, raw, kind)?))
    }

    /// An object's location from the columns of a location query.
    fn location(&self, id: &ObjectId, raw: RawLocation, kind: u8) -> Result<ObjectLocation> {
        let bad =
            |what: &str| Error::corrupt(&self.path, format!("object {} has {what}", id.short()));
        let (pack, frame) = raw.frame(&bad)?;
        Ok(ObjectLocation {
            kind: ObjectKind::from_u8(kind).ok_or_else(|| bad("an unknown kind"))?,
            frame: FrameLocation {
                pack,
                offset: frame.offset,
                stored_length: frame.stored_length,
                raw_length: frame.raw_length,
                compression: frame.compression,
            },
            offset: raw.object_offset,
            length: raw.length,
        })
    }

    /// True when the catalog names pack `id`.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn has_pack(&self, id: &ObjectId) -> Result<bool> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT 1 FROM packs WHERE pack_id = ?1")
            .in_catalog()?;
        stmt.exists([&id.0[..]]).in_catalog()
    }

    /// Every pack the catalog names: (pack id, size in bytes).
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn packs(&self) -> Result<Vec<(ObjectId, u64)>> {
        let mut stmt = self
            .conn
            .prepare("SELECT pack_id, size FROM packs ORDER BY id")
            .in_catalog()?;
        let rows = stmt
            .query_map([], |row| {
                Ok((row.get::<_, Vec<u8>>(0)?, row.get::<_, i64>(1)?))
            })
            .in_catalog()?;
        let mut packs = Vec::new();
        for row in rows {
            let (id, size) = row.in_catalog()?;
            let id = ObjectId::from_slice(&id)
                .ok_or_else(|| Error::corrupt(&self.path, "malformed pack id"))?;
            // A negative size (a damaged row) reads as a size no pack file has, so `verify`
            // reports the pack's size as wrong rather than failing to list the packs.
            packs.push((id, size as u64));
        }
        Ok(packs)
    }

    /// Number of objects of each kind the catalog names, and the objects' total bytes.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn object_counts(&self) -> Result<Vec<(ObjectKind, u64, u64)>> {
        let mut stmt = self
            .conn
            .prepare("SELECT kind, count(*), sum(length) FROM objects GROUP BY kind ORDER BY kind")
            .in_catalog()?;
        let rows = stmt
            .query_map([], |row| {
                Ok((
                    row.get::<_, u8>(0)?,
                    row.get::<_, i64>(1)?,
                    row.get::<_, i64>(2)?,
                ))
            })
            .in_catalog()?;
        let mut out = Vec::new();
        for row in rows {
            let (kind, count, bytes) = row.in_catalog()?;
            if let Some(kind) = ObjectKind::from_u8(kind) {
                out.push((kind, count as u64, bytes as u64));
            }
        }
        Ok(out)
    }
}

impl CatalogWriter<'_> {
    /// Names a sealed pack and indexes its frames and objects. An object the catalog already
    /// has keeps its old location (a concurrent writer stored it first).
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn add_pack(&self, pack: &SealedPack) -> Result<()> {
        // Two writers can seal byte-identical packs (the same data, the same order): index once.
        let known: bool = self
            .tx
            .query_row(
                "SELECT count(*) FROM packs WHERE pack_id = ?1",
                [&pack.id.0[..]],
                |row| row.get::<_, i64>(0).map(|n| n > 0),
            )
            .in_catalog()?;
        if known {
            return self.index_again(pack);
        }
        self.tx
            .execute(
                "INSERT INTO packs (pack_id, size, created_at) VALUES (?1, ?2, ?3)",
                params![&pack.id.0[..], pack.size as i64, unix_now()],
            )
            .in_catalog()?;
        let pack_row = self.tx.last_insert_rowid();
        self.index_pack(
            "INSERT INTO frames (pack, offset, stored_length, raw_length, compression, bases) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            "INSERT OR IGNORE INTO objects (id, kind, frame, offset, length) VALUES (?1, ?2, ?3, ?4, ?5)",
            None,
            pack_row,
            IndexRef {
                frames: &pack.frames,
                objects: &pack.objects,
                deltas: &pack.deltas,
            },
        )
    }

    /// A pack already known, sealed again byte for byte (the same frames fetched again): the
    /// objects of it that have no row (a file map forgotten after a remote served a wrong one:
    /// [`Catalog::reject_file_map_at`]) are indexed again, in its known frames. Rows that
    /// exist, here or in another pack, stay.
    fn index_again(&self, pack: &SealedPack) -> Result<()> {
        let frames: std::collections::HashMap<i64, i64> = self
            .tx
            .prepare_cached(
                "SELECT f.offset, f.id FROM frames f JOIN packs p ON p.id = f.pack WHERE p.pack_id = ?1",
            ).in_catalog()?
            .query_map([&pack.id.0[..]], |row| Ok((row.get(0)?, row.get(1)?))).in_catalog()?
            .collect::<rusqlite::Result<_>>().in_catalog()?;
        let mut insert = self.tx.prepare_cached(
            "INSERT OR IGNORE INTO objects (id, kind, frame, offset, length) VALUES (?1, ?2, ?3, ?4, ?5)",
        ).in_catalog()?;
        for object in &pack.objects {
            let Some(frame) = pack.frames.get(object.frame as usize) else {
                continue;
            };
            let Some(row) = frames.get(&(frame.offset as i64)) else {
                continue;
            };
            insert
                .execute(params![
                    &object.id.0[..],
                    object.kind as u8,
                    row,
                    object.offset,
                    object.length
                ])
                .in_catalog()?;
        }
        Ok(())
    }

    /// Inserts a pack's index: each frame with `frame_sql` (parameters: pack row, offset,
    /// stored length, raw length, compression, bases of `deltas`), then each object with `object_sql`
    /// (parameters: id, kind, frame row, offset, length, and `remote` as a sixth when
    /// given). Serves this store's tables and a remote's alike.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub(super) fn index_pack(
        &self,
        frame_sql: &str,
        object_sql: &str,
        remote: Option<i64>,
        pack_row: i64,
        index: IndexRef<'_>,
    ) -> Result<()> {
        let IndexRef {
            frames,
            objects,
            deltas,
        } = index;
        let mut insert_frame = self.tx.prepare_cached(frame_sql).in_catalog()?;
        let mut deltas = deltas.iter().peekable();
        let frame_rows = frames
            .iter()
            .enumerate()
            .map(|(number, frame)| {
                let bases = deltas
                    .next_if(|d| d.frame as usize == number)
                    .map_or(&[][..], |d| d.bases.as_slice());
                insert_frame_row(&mut insert_frame, pack_row, frame, bases)
            })
            .collect::<Result<Vec<i64>>>()?;
        let mut insert_object = self.tx.prepare_cached(object_sql).in_catalog()?;
        for object in objects {
            let (id, kind, frame) = (
                &object.id.0[..],
                object.kind as u8,
                frame_rows[object.frame as usize],
            );
            match remote {
                None => insert_object
                    .execute(params![id, kind, frame, object.offset, object.length])
                    .in_catalog()?,
                Some(remote) => insert_object
                    .execute(params![
                        id,
                        kind,
                        frame,
                        object.offset,
                        object.length,
                        remote
                    ])
                    .in_catalog()?,
            };
        }
        Ok(())
    }
}

impl Catalog {
    /// The remote an unproven file map of file `id` came from, or `None` when the map (if
    /// any) is proven: written by a local commit, or reassembled to its file id once.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn unproven_file_map(&self, id: &ObjectId) -> Result<Option<String>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT remote FROM unproven_file_maps WHERE id = ?1")
            .in_catalog()?;
        stmt.query_row([&id.0[..]], |row| row.get(0))
            .optional()
            .in_catalog()
    }

    /// Every unproven file map: (file id, remote it came from).
    ///
    /// # Errors
    /// [`Error::Catalog`].
    #[cfg(test)]
    pub(crate) fn unproven_file_maps(&self) -> Result<Vec<(ObjectId, String)>> {
        let mut stmt = self
            .conn
            .prepare("SELECT id, remote FROM unproven_file_maps ORDER BY id")
            .in_catalog()?;
        let rows = stmt
            .query_map([], |row| Ok((row.get::<_, Vec<u8>>(0)?, row.get(1)?)))
            .in_catalog()?;
        let mut out = Vec::new();
        for row in rows {
            let (id, remote) = row.in_catalog()?;
            if let Some(id) = ObjectId::from_slice(&id) {
                out.push((id, remote));
            }
        }
        Ok(out)
    }
}

impl CatalogWriter<'_> {
    /// The pack that holds file `id`'s map now (in this transaction), if any.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn file_map_pack(&self, id: &ObjectId) -> Result<Option<ObjectId>> {
        let pack: Option<Vec<u8>> = self
            .tx
            .query_row(
                "SELECT p.pack_id FROM objects o JOIN frames f ON f.id = o.frame
                 JOIN packs p ON p.id = f.pack WHERE o.id = ?1 AND o.kind = ?2",
                rusqlite::params![&id.0[..], ObjectKind::FileMap as u8],
                |row| row.get(0),
            )
            .optional()
            .in_catalog()?;
        Ok(pack.and_then(|bytes| ObjectId::from_slice(&bytes)))
    }

    /// Lists file `id`'s map, just fetched from `remote`, as unproven.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn add_unproven_file_map(&self, id: &ObjectId, remote: &str) -> Result<()> {
        self.tx
            .execute(
                "INSERT OR IGNORE INTO unproven_file_maps (id, remote) VALUES (?1, ?2)",
                rusqlite::params![&id.0[..], remote],
            )
            .in_catalog()?;
        Ok(())
    }
}

/// A pack's index, borrowed from a [`SealedPack`] or a [`crate::pack::PackIndex`].
#[derive(Clone, Copy)]
pub(super) struct IndexRef<'a> {
    pub(super) frames: &'a [FrameRecord],
    pub(super) objects: &'a [crate::pack::ObjectRecord],
    pub(super) deltas: &'a [crate::pack::FrameBases],
}

/// Inserts `frame` of pack row `pack_row` with `insert` (a frame insert of this store's
/// table or a remote's: parameters pack row, offset, stored length, raw length,
/// compression, bases); returns the new row's id.
///
/// # Errors
/// [`Error::Catalog`].
pub(super) fn insert_frame_row(
    insert: &mut rusqlite::CachedStatement<'_>,
    pack_row: i64,
    frame: &FrameRecord,
    bases: &[ObjectId],
) -> Result<i64> {
    insert
        .insert(params![
            pack_row,
            frame.offset as i64,
            frame.stored_length,
            frame.raw_length,
            frame.compression as u8,
            encode_bases(bases)
        ])
        .in_catalog()
}

/// The `bases` column of a frame: the base ids end to end, or NULL for a plain frame.
pub(super) fn encode_bases(bases: &[ObjectId]) -> Option<Vec<u8>> {
    (!bases.is_empty()).then(|| bases.iter().flat_map(|b| b.0).collect())
}

/// Reads a `bases` column back: 32-byte ids. A length that is not a multiple of 32, or more
/// than [`crate::pack::format::MAX_DELTA_BASES`] ids, is corrupt.
pub(super) fn decode_bases(column: Option<Vec<u8>>) -> std::result::Result<Vec<ObjectId>, String> {
    let Some(bytes) = column else {
        return Ok(Vec::new());
    };
    if bytes.len() % 32 != 0 || bytes.len() / 32 > crate::pack::format::MAX_DELTA_BASES {
        return Err(format!("a frame lists {} bytes of bases", bytes.len()));
    }
    Ok(bytes
        .chunks_exact(32)
        .filter_map(ObjectId::from_slice)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::tests::{new_catalog, sample_pack};

    fn id(name: &str) -> ObjectId {
        ObjectId::of(name.as_bytes())
    }

    fn add(catalog: &mut Catalog, pack: &SealedPack) {
        let writer = catalog.writer().unwrap();
        writer.add_pack(pack).unwrap();
        writer.commit().unwrap();
    }

    #[test]
    fn one_id_under_two_kinds_is_two_objects() {
        let (_dir, mut catalog) = new_catalog();
        let x = id("x");
        add(
            &mut catalog,
            &sample_pack("p", &[(x, ObjectKind::Chunk), (x, ObjectKind::FileMap)]),
        );
        assert!(catalog.has_object(&x, ObjectKind::Chunk).unwrap());
        assert!(catalog.has_object(&x, ObjectKind::FileMap).unwrap());
        assert!(!catalog.has_object(&x, ObjectKind::Tree).unwrap());
        let chunk = catalog.locate(&x, ObjectKind::Chunk).unwrap().unwrap();
        let map = catalog.locate(&x, ObjectKind::FileMap).unwrap().unwrap();
        assert_eq!((chunk.kind, chunk.offset), (ObjectKind::Chunk, 0));
        assert_eq!((map.kind, map.offset), (ObjectKind::FileMap, 10));
        assert_eq!(
            catalog.object_counts().unwrap(),
            [(ObjectKind::Chunk, 1, 10), (ObjectKind::FileMap, 1, 10)]
        );
        // A file's content starts at its only chunk when it has one.
        assert_eq!(catalog.locate_file(&x).unwrap(), Some(chunk));
    }

    #[test]
    fn a_location_gives_the_pack_frame_and_place_recorded() {
        let (_dir, mut catalog) = new_catalog();
        let pack = sample_pack(
            "p",
            &[(id("a"), ObjectKind::Chunk), (id("b"), ObjectKind::Tree)],
        );
        add(&mut catalog, &pack);
        let frame = pack.frames[0];
        assert_eq!(
            catalog.locate(&id("b"), ObjectKind::Tree).unwrap(),
            Some(ObjectLocation {
                kind: ObjectKind::Tree,
                frame: FrameLocation {
                    pack: pack.id,
                    offset: frame.offset,
                    stored_length: frame.stored_length,
                    raw_length: frame.raw_length,
                    compression: frame.compression,
                },
                offset: 10,
                length: 10,
            })
        );
        assert_eq!(catalog.locate(&id("b"), ObjectKind::Chunk).unwrap(), None);
        assert_eq!(catalog.locate(&id("c"), ObjectKind::Chunk).unwrap(), None);
        assert_eq!(catalog.locate_file(&id("c")).unwrap(), None);
        assert!(catalog.has_pack(&pack.id).unwrap());
        assert!(!catalog.has_pack(&id("q")).unwrap());
        assert_eq!(catalog.packs().unwrap(), [(pack.id, pack.size)]);
    }

    #[test]
    fn a_negative_frame_offset_in_a_damaged_row_is_corrupt_not_a_place_to_read() {
        let (_dir, mut catalog) = new_catalog();
        let pack = sample_pack("p", &[(id("a"), ObjectKind::Chunk)]);
        add(&mut catalog, &pack);
        catalog
            .conn
            .execute_batch("UPDATE frames SET offset = -5;")
            .unwrap();
        let located = catalog.locate(&id("a"), ObjectKind::Chunk);
        assert!(matches!(located, Err(Error::Corrupt { .. })), "{located:?}");
    }

    #[test]
    fn an_object_already_indexed_keeps_its_first_location() {
        let (_dir, mut catalog) = new_catalog();
        let x = id("x");
        let first = sample_pack("first", &[(x, ObjectKind::Chunk)]);
        let second = sample_pack(
            "second",
            &[(id("y"), ObjectKind::Chunk), (x, ObjectKind::Chunk)],
        );
        add(&mut catalog, &first);
        add(&mut catalog, &second);
        let found = catalog.locate(&x, ObjectKind::Chunk).unwrap().unwrap();
        assert_eq!((found.frame.pack, found.offset), (first.id, 0));
        assert_eq!(
            catalog.object_counts().unwrap(),
            [(ObjectKind::Chunk, 2, 20)]
        );
    }

    #[test]
    fn a_pack_added_twice_is_indexed_once() {
        let (_dir, mut catalog) = new_catalog();
        let pack = sample_pack("p", &[(id("a"), ObjectKind::Chunk)]);
        add(&mut catalog, &pack);
        add(&mut catalog, &pack);
        assert_eq!(catalog.packs().unwrap().len(), 1);
        let frames: i64 = catalog
            .conn()
            .query_row("SELECT count(*) FROM frames", [], |row| row.get(0))
            .unwrap();
        assert_eq!(frames, 1);
    }

    /// File `x`'s map, fetched from `origin`, recorded unproven in pack `p`; its location.
    fn unproven_map(catalog: &mut Catalog, pack: &str) -> ObjectLocation {
        let x = id("x");
        let writer = catalog.writer().unwrap();
        writer
            .add_pack(&sample_pack(pack, &[(x, ObjectKind::FileMap)]))
            .unwrap();
        writer.add_unproven_file_map(&x, "origin").unwrap();
        writer.add_unproven_file_map(&x, "other").unwrap();
        assert_eq!(writer.file_map_pack(&x).unwrap(), Some(id(pack)));
        writer.commit().unwrap();
        catalog.locate(&x, ObjectKind::FileMap).unwrap().unwrap()
    }

    #[test]
    fn an_unproven_map_is_proven_only_at_its_recorded_location() {
        let (_dir, mut catalog) = new_catalog();
        let x = id("x");
        let here = unproven_map(&mut catalog, "p");
        // The first remote recorded stays.
        assert_eq!(
            catalog.unproven_file_map(&x).unwrap().as_deref(),
            Some("origin")
        );
        assert_eq!(
            catalog.locate_file_and_proof(&x).unwrap(),
            Some((here, Some("origin".to_string())))
        );
        let elsewhere = ObjectLocation {
            offset: here.offset + 1,
            ..here
        };
        assert!(!catalog.prove_file_map_at(&x, &elsewhere).unwrap());
        assert!(!catalog.reject_file_map_at(&x, &elsewhere).unwrap());
        assert_eq!(
            catalog.unproven_file_maps().unwrap(),
            [(x, "origin".to_string())]
        );
        assert!(catalog.prove_file_map_at(&x, &here).unwrap());
        assert_eq!(catalog.unproven_file_map(&x).unwrap(), None);
        assert_eq!(
            catalog.locate_file_and_proof(&x).unwrap(),
            Some((here, None))
        );
        // Proven, it can no longer be rejected (nor proven again).
        assert!(!catalog.reject_file_map_at(&x, &here).unwrap());
        assert!(!catalog.prove_file_map_at(&x, &here).unwrap());
        assert!(catalog.has_object(&x, ObjectKind::FileMap).unwrap());
    }

    #[test]
    fn an_unproven_map_is_rejected_only_at_its_recorded_location() {
        let (_dir, mut catalog) = new_catalog();
        let x = id("x");
        let here = unproven_map(&mut catalog, "p");
        let in_another_pack = ObjectLocation {
            frame: FrameLocation {
                pack: id("another"),
                ..here.frame
            },
            ..here
        };
        assert!(!catalog.reject_file_map_at(&x, &in_another_pack).unwrap());
        assert!(catalog.has_object(&x, ObjectKind::FileMap).unwrap());
        assert!(catalog.reject_file_map_at(&x, &here).unwrap());
        assert!(!catalog.has_object(&x, ObjectKind::FileMap).unwrap());
        assert_eq!(catalog.unproven_file_map(&x).unwrap(), None);
        assert_eq!(catalog.locate_file_and_proof(&x).unwrap(), None);
        assert!(catalog.unproven_file_maps().unwrap().is_empty());
    }

    /// A map rejected here is still on the remotes that hold it: a remote sharing the local
    /// pack's index keeps listing it (the next read fetches it again) unless another remote
    /// lists one too, which is then the one asked.
    #[test]
    fn a_rejected_map_stays_listed_on_its_remote_unless_another_lists_one() {
        let (_dir, mut catalog) = new_catalog();
        let x = id("x");
        let pack = sample_pack("p", &[(x, ObjectKind::FileMap)]);
        let mirror_pack = sample_pack("m", &[(x, ObjectKind::FileMap)]);
        let writer = catalog.writer().unwrap();
        writer.add_pack(&pack).unwrap();
        writer.add_unproven_file_map(&x, "origin").unwrap();
        writer
            .add_remote("origin", "file:///o", &Default::default())
            .unwrap();
        writer
            .add_remote("mirror", "file:///m", &Default::default())
            .unwrap();
        writer.commit().unwrap();
        let remotes = catalog.remotes().unwrap();
        let (origin, mirror) = (remotes[0].id, remotes[1].id);
        let writer = catalog.writer().unwrap();
        // origin holds the local pack itself (the same id and size: it shares its index).
        writer
            .add_remote_pack(
                origin,
                &pack.id,
                pack.size,
                &pack.frames,
                &pack.objects,
                &[],
            )
            .unwrap();
        writer.commit().unwrap();
        let here = catalog.locate(&x, ObjectKind::FileMap).unwrap().unwrap();
        assert!(
            catalog
                .remote_locate(origin, &x, ObjectKind::FileMap)
                .unwrap()
                .unwrap()
                .in_local_pack()
        );
        assert!(catalog.reject_file_map_at(&x, &here).unwrap());
        assert!(!catalog.has_object(&x, ObjectKind::FileMap).unwrap());
        let listed = catalog
            .remote_locate(origin, &x, ObjectKind::FileMap)
            .unwrap()
            .unwrap();
        assert!(!listed.in_local_pack(), "to be fetched again from origin");
        assert_eq!(listed.pack, pack.id);

        // Fetched again from origin, wrong again, with a mirror listing one too: origin is
        // no longer asked, the mirror is.
        let writer = catalog.writer().unwrap();
        writer
            .add_pack(&sample_pack("again", &[(x, ObjectKind::FileMap)]))
            .unwrap();
        writer.add_unproven_file_map(&x, "origin").unwrap();
        writer
            .add_remote_pack(
                mirror,
                &mirror_pack.id,
                mirror_pack.size,
                &mirror_pack.frames,
                &mirror_pack.objects,
                &[],
            )
            .unwrap();
        writer.commit().unwrap();
        let here = catalog.locate(&x, ObjectKind::FileMap).unwrap().unwrap();
        assert!(catalog.reject_file_map_at(&x, &here).unwrap());
        assert!(
            catalog
                .remote_locate(origin, &x, ObjectKind::FileMap)
                .unwrap()
                .is_none()
        );
        assert!(
            catalog
                .remote_locate(mirror, &x, ObjectKind::FileMap)
                .unwrap()
                .is_some()
        );
        // The mirror, wrong too, is the last to list one: it keeps it.
        let writer = catalog.writer().unwrap();
        writer
            .add_pack(&sample_pack("third", &[(x, ObjectKind::FileMap)]))
            .unwrap();
        writer.add_unproven_file_map(&x, "mirror").unwrap();
        writer.commit().unwrap();
        let here = catalog.locate(&x, ObjectKind::FileMap).unwrap().unwrap();
        assert!(catalog.reject_file_map_at(&x, &here).unwrap());
        assert!(
            catalog
                .remote_locate(mirror, &x, ObjectKind::FileMap)
                .unwrap()
                .is_some()
        );
    }

    /// The same frames fetched again seal a byte-identical pack: the map forgotten from it
    /// is indexed again (else the fetch would store it and never find it).
    #[test]
    fn a_known_pack_sealed_again_indexes_again_what_was_forgotten() {
        let (_dir, mut catalog) = new_catalog();
        let x = id("x");
        let here = unproven_map(&mut catalog, "p");
        assert!(catalog.reject_file_map_at(&x, &here).unwrap());
        assert!(!catalog.has_object(&x, ObjectKind::FileMap).unwrap());
        add(&mut catalog, &sample_pack("p", &[(x, ObjectKind::FileMap)]));
        assert_eq!(catalog.locate(&x, ObjectKind::FileMap).unwrap(), Some(here));
        assert_eq!(catalog.packs().unwrap().len(), 1);
    }

    #[test]
    fn a_row_with_an_unknown_kind_or_compression_is_corrupt() {
        let (_dir, mut catalog) = new_catalog();
        add(
            &mut catalog,
            &sample_pack("p", &[(id("a"), ObjectKind::Chunk)]),
        );
        catalog
            .conn()
            .execute("UPDATE frames SET compression = 7", [])
            .unwrap();
        assert!(matches!(
            catalog.locate(&id("a"), ObjectKind::Chunk),
            Err(Error::Corrupt { .. })
        ));
    }
}
