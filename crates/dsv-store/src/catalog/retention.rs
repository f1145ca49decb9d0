//! What may be collected: removed versions, pins, and dropping packs from the catalog.

use std::collections::HashSet;

use rusqlite::{OptionalExtension, params};

use super::objects::decode_bases;
use super::{Catalog, CatalogWriter, SqliteResultExt, unix_now};
use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::object::ObjectKind;
use crate::reflog::RefLogEntry;

/// A pinned version: never removed while the pin holds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Pin {
    /// The version.
    pub version: ObjectId,
    /// Its dataset.
    pub dataset: String,
    /// Why it is pinned.
    pub reason: String,
    /// When the pin lapses (Unix seconds); `None` = until unpinned.
    pub until: Option<i64>,
    /// When it was made (Unix seconds).
    pub created_at: i64,
}

/// A live version's cache facts: (id, dataset, created_at, last used, evicted), times in
/// Unix seconds.
pub type CachedVersionRow = (ObjectId, String, i64, i64, bool);

/// One object the catalog locates in a pack: id, kind, stored length in bytes.
pub type PackObject = (ObjectId, ObjectKind, u32);

impl Catalog {
    /// Every pin, live or lapsed, by dataset then creation time.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn pins(&self) -> Result<Vec<Pin>> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT p.version, d.name, p.reason, p.until, p.created_at
             FROM pins p JOIN versions v ON v.id = p.version JOIN datasets d ON d.id = v.dataset
             ORDER BY d.name, p.created_at",
            )
            .in_catalog()?;
        let rows = stmt
            .query_map([], |row| {
                Ok((
                    row.get::<_, Vec<u8>>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, String>(2)?,
                    row.get::<_, Option<i64>>(3)?,
                    row.get::<_, i64>(4)?,
                ))
            })
            .in_catalog()?;
        let mut pins = Vec::new();
        for row in rows {
            let (version, dataset, reason, until, created_at) = row.in_catalog()?;
            pins.push(Pin {
                version: ObjectId::from_slice(&version)
                    .ok_or_else(|| Error::corrupt(&self.path, "malformed pin"))?,
                dataset,
                reason,
                until,
                created_at,
            });
        }
        Ok(pins)
    }

    /// When version `id` was removed (`dsv rm`), if it was.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn removed_at(&self, id: &ObjectId) -> Result<Option<i64>> {
        Ok(self
            .conn
            .query_row(
                "SELECT removed_at FROM versions WHERE id = ?1",
                [&id.0[..]],
                |row| row.get::<_, Option<i64>>(0),
            )
            .optional()
            .in_catalog()?
            .flatten())
    }

    /// Live versions with their cache facts: (id, dataset, created_at, last_used or
    /// created_at, evicted).
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn cached_versions(&self) -> Result<Vec<CachedVersionRow>> {
        let mut stmt = self.conn.prepare(
            "SELECT v.id, d.name, v.created_at, coalesce(v.last_used, v.created_at), v.evicted_at IS NOT NULL
             FROM versions v JOIN datasets d ON d.id = v.dataset
             WHERE v.removed_at IS NULL ORDER BY d.name, v.created_at DESC",
        ).in_catalog()?;
        let rows = stmt
            .query_map([], |row| {
                Ok((
                    row.get::<_, Vec<u8>>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, i64>(2)?,
                    row.get::<_, i64>(3)?,
                    row.get::<_, bool>(4)?,
                ))
            })
            .in_catalog()?;
        let mut out = Vec::new();
        for row in rows {
            let (id, dataset, created, used, evicted) = row.in_catalog()?;
            if let Some(id) = ObjectId::from_slice(&id) {
                out.push((id, dataset, created, used, evicted));
            }
        }
        Ok(out)
    }

    /// True when version `id`'s chunks were let go (`cache prune`): a remote holds them.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn is_evicted(&self, id: &ObjectId) -> Result<bool> {
        Ok(self
            .conn
            .query_row(
                "SELECT evicted_at IS NOT NULL FROM versions WHERE id = ?1",
                [&id.0[..]],
                |row| row.get::<_, bool>(0),
            )
            .optional()
            .in_catalog()?
            .unwrap_or(false))
    }

    /// The ids of every object of `kind` this store holds.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn object_ids(&self, kind: ObjectKind) -> Result<HashSet<ObjectId>> {
        let mut stmt = self
            .conn
            .prepare("SELECT id FROM objects WHERE kind = ?1")
            .in_catalog()?;
        let rows = stmt
            .query_map([kind as u8], |row| row.get::<_, Vec<u8>>(0))
            .in_catalog()?;
        let mut out = HashSet::new();
        for row in rows {
            out.extend(ObjectId::from_slice(&row.in_catalog()?));
        }
        Ok(out)
    }

    /// Every version not removed: the roots whose data gc keeps.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn live_versions(&self) -> Result<Vec<ObjectId>> {
        let mut stmt = self
            .conn
            .prepare("SELECT id FROM versions WHERE removed_at IS NULL")
            .in_catalog()?;
        let rows = stmt
            .query_map([], |row| row.get::<_, Vec<u8>>(0))
            .in_catalog()?;
        let mut out = Vec::new();
        for row in rows {
            out.extend(ObjectId::from_slice(&row.in_catalog()?));
        }
        Ok(out)
    }

    /// The objects the catalog locates in each pack, by pack id.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn objects_by_pack(&self) -> Result<std::collections::HashMap<ObjectId, Vec<PackObject>>> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT p.pack_id, o.id, o.kind, o.length
             FROM objects o JOIN frames f ON f.id = o.frame JOIN packs p ON p.id = f.pack",
            )
            .in_catalog()?;
        let rows = stmt
            .query_map([], |row| {
                Ok((
                    row.get::<_, Vec<u8>>(0)?,
                    row.get::<_, Vec<u8>>(1)?,
                    row.get::<_, u8>(2)?,
                    row.get::<_, u32>(3)?,
                ))
            })
            .in_catalog()?;
        let mut out: std::collections::HashMap<ObjectId, Vec<PackObject>> = Default::default();
        for row in rows {
            let (pack, id, kind, length) = row.in_catalog()?;
            if let (Some(pack), Some(id), Some(kind)) = (
                ObjectId::from_slice(&pack),
                ObjectId::from_slice(&id),
                ObjectKind::from_u8(kind),
            ) {
                out.entry(pack).or_default().push((id, kind, length));
            }
        }
        Ok(out)
    }
}

/// How a chunk is stored here now: what gc's reverse deltas and its liveness read
/// ([`Catalog::chunk_storage`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkStorage {
    /// The pack holding it.
    pub pack: ObjectId,
    /// Its raw length in bytes.
    pub length: u32,
    /// Byte offset of its frame in the pack file.
    pub frame_offset: u64,
    /// Stored bytes of its frame (compressed, or a delta).
    pub frame_stored: u32,
    /// Raw bytes of its frame (every object in it).
    pub frame_raw: u32,
    /// The frame's bases in prefix order: empty for a frame stored whole, else the chunks
    /// whose raw bytes make the reference prefix of its delta.
    pub bases: Vec<ObjectId>,
}

impl Catalog {
    /// Every chunk held here with how it is stored (its pack, frame sizes and delta bases):
    /// one scan of `objects`.
    ///
    /// # Errors
    /// [`Error::Catalog`]; [`Error::Corrupt`] for a malformed id or bases column.
    pub fn chunk_storage(&self) -> Result<std::collections::HashMap<ObjectId, ChunkStorage>> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT o.id, p.pack_id, o.length, f.stored_length, f.raw_length, f.bases, f.offset
             FROM objects o JOIN frames f ON f.id = o.frame JOIN packs p ON p.id = f.pack
             WHERE o.kind = ?1",
            )
            .in_catalog()?;
        let rows = stmt
            .query_map([ObjectKind::Chunk as u8], |row| {
                Ok((
                    row.get::<_, Vec<u8>>(0)?,
                    row.get::<_, Vec<u8>>(1)?,
                    row.get::<_, u32>(2)?,
                    row.get::<_, u32>(3)?,
                    row.get::<_, u32>(4)?,
                    row.get::<_, Option<Vec<u8>>>(5)?,
                    row.get::<_, i64>(6)?,
                ))
            })
            .in_catalog()?;
        let bad = |what: &str| Error::corrupt(&self.path, format!("a chunk row with {what}"));
        let mut out = std::collections::HashMap::new();
        for row in rows {
            let (id, pack, length, frame_stored, frame_raw, bases, frame_offset) =
                row.in_catalog()?;
            let bases = decode_bases(bases).map_err(|detail| bad(&detail))?;
            out.insert(
                ObjectId::from_slice(&id).ok_or_else(|| bad("a malformed id"))?,
                ChunkStorage {
                    pack: ObjectId::from_slice(&pack).ok_or_else(|| bad("a malformed pack id"))?,
                    length,
                    frame_offset: u64::try_from(frame_offset)
                        .map_err(|_| bad("a negative frame offset"))?,
                    frame_stored,
                    frame_raw,
                    bases,
                },
            );
        }
        Ok(out)
    }

    /// Packs holding a chunk that a delta frame of another pack names as a base: a cache
    /// limit never evicts them whole, since the delta's reads need the base here.
    ///
    /// # Errors
    /// [`Error::Catalog`]; [`Error::Corrupt`] for a malformed id or bases column.
    pub fn packs_holding_bases_of_others(&self) -> Result<HashSet<ObjectId>> {
        let mut stmt = self
            .conn
            .prepare("SELECT pack, bases FROM frames WHERE bases IS NOT NULL")
            .in_catalog()?;
        let rows = stmt
            .query_map([], |row| {
                Ok((row.get::<_, i64>(0)?, row.get::<_, Vec<u8>>(1)?))
            })
            .in_catalog()?;
        let mut named: Vec<(i64, ObjectId)> = Vec::new();
        for row in rows {
            let (pack, bases) = row.in_catalog()?;
            let bases =
                decode_bases(Some(bases)).map_err(|detail| Error::corrupt(&self.path, detail))?;
            named.extend(bases.into_iter().map(|base| (pack, base)));
        }
        let mut locate = self
            .conn
            .prepare_cached(
                "SELECT f.pack, p.pack_id FROM objects o JOIN frames f ON f.id = o.frame
                 JOIN packs p ON p.id = f.pack WHERE o.id = ?1 AND o.kind = ?2",
            )
            .in_catalog()?;
        let mut out = HashSet::new();
        for (naming, base) in named {
            let found = locate
                .query_row(params![&base.0[..], ObjectKind::Chunk as u8], |row| {
                    Ok((row.get::<_, i64>(0)?, row.get::<_, Vec<u8>>(1)?))
                })
                .optional()
                .in_catalog()?;
            if let Some((holder, pack)) = found
                && holder != naming
            {
                out.extend(ObjectId::from_slice(&pack));
            }
        }
        Ok(out)
    }
}

/// Local packs that hold only chunks some remote's pack index (as this store last read it)
/// lists, or that the catalog locates nothing in: the packs a cache limit may evict, with
/// their sizes in bytes. A pack holding any other object (a file map, a tree, a version, an
/// outboard) or a chunk no remote lists is never among them.
///
/// One scan of `objects` (there is no index by frame): the packs holding an object that
/// disqualifies them, then every other pack. `CROSS JOIN` keeps SQLite looking each object
/// up by `remote_objects`' primary key (remote, id, kind), remote by remote, instead of
/// scanning `remote_objects` for each object (minutes on a store of 50,000 objects).
const REMOTE_HELD_PACKS: &str = "WITH shared AS MATERIALIZED (
       SELECT DISTINCT p.id FROM packs p
         JOIN remote_packs rp ON rp.pack_id = p.pack_id AND rp.local_index = 1),
     held_only_here AS MATERIALIZED (
       SELECT DISTINCT f.pack AS pack FROM objects o JOIN frames f ON f.id = o.frame
        WHERE o.kind != ?1
           OR (f.pack NOT IN shared
               AND NOT EXISTS (SELECT 1 FROM remotes r CROSS JOIN remote_objects ro
                                 ON ro.remote = r.id AND ro.id = o.id AND ro.kind = o.kind)))
     SELECT p.pack_id, p.size FROM packs p WHERE p.id NOT IN held_only_here";

impl Catalog {
    /// Local packs a cache limit may evict: those holding only chunks a remote lists (by
    /// the remotes' pack indexes as this store last read them), with their sizes in bytes.
    ///
    /// # Errors
    /// [`Error::Catalog`]; [`Error::Corrupt`] for a malformed pack id.
    pub fn remote_held_packs(&self) -> Result<Vec<(ObjectId, u64)>> {
        let mut stmt = self.conn.prepare_cached(REMOTE_HELD_PACKS).in_catalog()?;
        let rows = stmt
            .query_map([ObjectKind::Chunk as u8], |row| {
                Ok((row.get::<_, Vec<u8>>(0)?, row.get::<_, i64>(1)?))
            })
            .in_catalog()?;
        let mut out = Vec::new();
        for row in rows {
            let (id, size) = row.in_catalog()?;
            let id = ObjectId::from_slice(&id)
                .ok_or_else(|| Error::corrupt(&self.path, "malformed pack id"))?;
            out.push((id, u64::try_from(size).unwrap_or(0)));
        }
        Ok(out)
    }
}

impl CatalogWriter<'_> {
    /// Pins version `id` (replacing an earlier pin of it).
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn pin(&self, id: &ObjectId, reason: &str, until: Option<i64>) -> Result<()> {
        self.tx.execute(
            "INSERT OR REPLACE INTO pins (version, reason, until, created_at) VALUES (?1, ?2, ?3, ?4)",
            params![&id.0[..], reason, until, unix_now()],
        ).in_catalog()?;
        self.log(RefLogEntry::Pin {
            version: *id,
            reason: reason.to_string(),
            until,
        });
        Ok(())
    }

    /// Removes the pin of version `id`; false when there was none.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn unpin(&self, id: &ObjectId) -> Result<bool> {
        let removed = self
            .tx
            .execute("DELETE FROM pins WHERE version = ?1", [&id.0[..]])
            .in_catalog()?
            > 0;
        if removed {
            self.log(RefLogEntry::Unpin { version: *id });
        }
        Ok(removed)
    }

    /// Marks versions removed (their data becomes collectable) and drops their tags.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn mark_removed(&self, ids: &[ObjectId]) -> Result<()> {
        let now = unix_now();
        for id in ids {
            let marked = self
                .tx
                .execute(
                    "UPDATE versions SET removed_at = ?1 WHERE id = ?2 AND removed_at IS NULL",
                    params![now, &id.0[..]],
                )
                .in_catalog()?;
            self.tx
                .execute("DELETE FROM tags WHERE version = ?1", [&id.0[..]])
                .in_catalog()?;
            if marked > 0 {
                self.log(RefLogEntry::Removed { version: *id });
            }
        }
        Ok(())
    }

    /// Marks versions evicted: their chunks may be collected (a remote holds them).
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn mark_evicted(&self, ids: &[ObjectId]) -> Result<()> {
        for id in ids {
            self.tx
                .execute(
                    "UPDATE versions SET evicted_at = ?1 WHERE id = ?2",
                    params![unix_now(), &id.0[..]],
                )
                .in_catalog()?;
        }
        Ok(())
    }

    /// Clears dataset `name`'s head (every version of it was removed).
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn clear_head(&self, name: &str) -> Result<()> {
        self.tx
            .execute("UPDATE datasets SET head = NULL WHERE name = ?1", [name])
            .in_catalog()?;
        self.log(RefLogEntry::Head {
            dataset: name.to_string(),
            version: None,
        });
        Ok(())
    }

    /// Forgets packs: their objects, frames and rows (the files are deleted afterwards). A
    /// remote pack that shared one's index (a pushed pack) gets a copy of it first: the
    /// remote still holds the pack.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn drop_packs(&self, packs: &HashSet<ObjectId>) -> Result<()> {
        for pack in packs {
            let row: Option<i64> = self
                .tx
                .query_row(
                    "SELECT id FROM packs WHERE pack_id = ?1",
                    [&pack.0[..]],
                    |r| r.get(0),
                )
                .optional()
                .in_catalog()?;
            let Some(row) = row else { continue };
            self.unshare_local_pack(row)?;
            self.tx
                .execute(
                    "DELETE FROM objects WHERE frame IN (SELECT id FROM frames WHERE pack = ?1)",
                    [row],
                )
                .in_catalog()?;
            self.tx
                .execute("DELETE FROM frames WHERE pack = ?1", [row])
                .in_catalog()?;
            self.tx
                .execute("DELETE FROM packs WHERE id = ?1", [row])
                .in_catalog()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::tests::{add_line, new_catalog, sample_pack};

    #[test]
    fn a_pin_replaces_the_earlier_pin_of_its_version_and_unpins_once() {
        let (_dir, mut catalog) = new_catalog();
        let ids = add_line(&mut catalog, "ds", 2);
        let writer = catalog.writer().unwrap();
        writer.pin(&ids[0], "first", None).unwrap();
        writer.pin(&ids[0], "second", Some(42)).unwrap();
        writer.pin(&ids[1], "other", None).unwrap();
        // A version the catalog does not have cannot be pinned.
        assert!(writer.pin(&ObjectId::of(b"missing"), "x", None).is_err());
        writer.commit().unwrap();
        let pins = catalog.pins().unwrap();
        assert_eq!(pins.len(), 2);
        let first = pins.iter().find(|p| p.version == ids[0]).unwrap();
        assert_eq!(
            (first.dataset.as_str(), first.reason.as_str(), first.until),
            ("ds", "second", Some(42))
        );
        let writer = catalog.writer().unwrap();
        assert!(writer.unpin(&ids[0]).unwrap());
        assert!(!writer.unpin(&ids[0]).unwrap());
        writer.commit().unwrap();
        let left: Vec<_> = catalog.pins().unwrap().iter().map(|p| p.version).collect();
        assert_eq!(left, [ids[1]]);
        assert_eq!(catalog.ref_state().unwrap().pins.len(), 1);
    }

    #[test]
    fn a_removed_version_keeps_its_first_removal_time_and_loses_its_tags() {
        let (_dir, mut catalog) = new_catalog();
        let ids = add_line(&mut catalog, "ds", 2);
        let writer = catalog.writer().unwrap();
        writer.set_tag("ds", "t", &ids[0], false).unwrap();
        writer.commit().unwrap();
        assert_eq!(catalog.removed_at(&ids[0]).unwrap(), None);
        let writer = catalog.writer().unwrap();
        writer.mark_removed(&[ids[0]]).unwrap();
        writer.commit().unwrap();
        assert!(catalog.removed_at(&ids[0]).unwrap().is_some());
        assert_eq!(catalog.tag("ds", "t").unwrap(), None);
        assert_eq!(catalog.live_versions().unwrap(), [ids[1]]);
        assert!(catalog.ref_state().unwrap().removed.contains(&ids[0]));
        catalog
            .conn()
            .execute(
                "UPDATE versions SET removed_at = 5 WHERE id = ?1",
                [&ids[0].0[..]],
            )
            .unwrap();
        let writer = catalog.writer().unwrap();
        writer.mark_removed(&[ids[0]]).unwrap();
        writer.commit().unwrap();
        assert_eq!(catalog.removed_at(&ids[0]).unwrap(), Some(5));
        assert_eq!(catalog.removed_at(&ObjectId::of(b"none")).unwrap(), None);
    }

    #[test]
    fn evicted_versions_are_marked_and_removed_ones_leave_the_cache_list() {
        let (_dir, mut catalog) = new_catalog();
        let ids = add_line(&mut catalog, "ds", 3);
        let writer = catalog.writer().unwrap();
        writer.mark_evicted(&[ids[1]]).unwrap();
        writer.mark_removed(&[ids[0]]).unwrap();
        writer.commit().unwrap();
        assert!(catalog.is_evicted(&ids[1]).unwrap());
        assert!(!catalog.is_evicted(&ids[2]).unwrap());
        assert!(!catalog.is_evicted(&ObjectId::of(b"none")).unwrap());
        let cached: Vec<(ObjectId, bool)> = catalog
            .cached_versions()
            .unwrap()
            .into_iter()
            .map(|(id, _, _, _, evicted)| (id, evicted))
            .collect();
        assert_eq!(cached, [(ids[2], false), (ids[1], true)]);
    }

    #[test]
    fn clearing_a_head_keeps_the_dataset_without_one() {
        let (_dir, mut catalog) = new_catalog();
        add_line(&mut catalog, "ds", 1);
        let writer = catalog.writer().unwrap();
        writer.clear_head("ds").unwrap();
        writer.commit().unwrap();
        assert!(catalog.has_dataset("ds").unwrap());
        assert_eq!(catalog.head("ds").unwrap(), None);
        assert!(catalog.ref_state().unwrap().heads.is_empty());
    }

    #[test]
    fn a_pack_holding_a_base_of_another_packs_delta_is_named_and_chunks_tell_their_bases() {
        let (_dir, mut catalog) = new_catalog();
        let (base, delta, own) = (
            ObjectId::of(b"base"),
            ObjectId::of(b"delta"),
            ObjectId::of(b"own"),
        );
        let bases_pack = sample_pack("bases", &[(base, ObjectKind::Chunk)]);
        let mut deltas_pack = sample_pack("deltas", &[(delta, ObjectKind::Chunk)]);
        deltas_pack.frames[0].compression = crate::pack::Compression::Delta;
        deltas_pack.deltas = vec![crate::pack::format::FrameBases {
            frame: 0,
            bases: vec![base],
        }];
        // A delta whose base is in its own pack does not hold that pack.
        let mut alone = sample_pack(
            "alone",
            &[
                (own, ObjectKind::Chunk),
                (ObjectId::of(b"x"), ObjectKind::Chunk),
            ],
        );
        alone.frames.push(crate::pack::FrameRecord {
            offset: 600,
            stored_length: 10,
            raw_length: 10,
            compression: crate::pack::Compression::Delta,
        });
        alone.objects[1].frame = 1;
        alone.objects[1].offset = 0;
        alone.deltas = vec![crate::pack::format::FrameBases {
            frame: 1,
            bases: vec![own],
        }];
        let writer = catalog.writer().unwrap();
        for pack in [&bases_pack, &deltas_pack, &alone] {
            writer.add_pack(pack).unwrap();
        }
        writer.commit().unwrap();
        assert_eq!(
            catalog.packs_holding_bases_of_others().unwrap(),
            HashSet::from([bases_pack.id])
        );
        let storage = catalog.chunk_storage().unwrap();
        assert_eq!(storage[&delta].bases, [base]);
        assert_eq!(storage[&delta].pack, deltas_pack.id);
        assert!(storage[&base].bases.is_empty());
        assert_eq!(storage[&ObjectId::of(b"x")].bases, [own]);
        assert_eq!(storage[&base].frame_offset, 16);
    }

    #[test]
    fn dropping_packs_forgets_their_objects_and_frames_only() {
        let (_dir, mut catalog) = new_catalog();
        let (a, b, c) = (ObjectId::of(b"a"), ObjectId::of(b"b"), ObjectId::of(b"c"));
        let kept = sample_pack("kept", &[(a, ObjectKind::Chunk), (b, ObjectKind::Tree)]);
        let dropped = sample_pack(
            "dropped",
            &[(c, ObjectKind::Chunk), (a, ObjectKind::FileMap)],
        );
        let writer = catalog.writer().unwrap();
        writer.add_pack(&kept).unwrap();
        writer.add_pack(&dropped).unwrap();
        writer.commit().unwrap();
        assert_eq!(
            catalog.object_ids(ObjectKind::Chunk).unwrap(),
            HashSet::from([a, c])
        );
        let by_pack = catalog.objects_by_pack().unwrap();
        let in_dropped: HashSet<PackObject> = by_pack[&dropped.id].iter().copied().collect();
        assert_eq!(
            in_dropped,
            HashSet::from([(c, ObjectKind::Chunk, 10), (a, ObjectKind::FileMap, 10)])
        );
        let writer = catalog.writer().unwrap();
        writer
            .drop_packs(&HashSet::from([dropped.id, ObjectId::of(b"unknown")]))
            .unwrap();
        writer.commit().unwrap();
        assert_eq!(catalog.packs().unwrap(), [(kept.id, kept.size)]);
        assert_eq!(
            catalog.object_ids(ObjectKind::Chunk).unwrap(),
            HashSet::from([a])
        );
        assert!(catalog.object_ids(ObjectKind::FileMap).unwrap().is_empty());
        assert_eq!(
            catalog.object_ids(ObjectKind::Tree).unwrap(),
            HashSet::from([b])
        );
        let frames: i64 = catalog
            .conn()
            .query_row("SELECT count(*) FROM frames", [], |row| row.get(0))
            .unwrap();
        assert_eq!(frames, 1);
        catalog.check_integrity().unwrap();
    }
}
