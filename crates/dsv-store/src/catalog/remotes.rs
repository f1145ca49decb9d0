//! Remotes: their settings, their refs as last fetched, and the indexes of their packs.

use std::collections::{BTreeMap, HashSet};

use rusqlite::{OptionalExtension, params};

use super::objects::RawLocation;
use super::{Catalog, CatalogWriter, SqliteResultExt, unix_now};
use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::object::ObjectKind;
use crate::pack::{FrameRecord, ObjectRecord};
use crate::reflog::RefLogEntry;

/// A configured remote.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RemoteRecord {
    /// Row id (internal).
    #[serde(skip)]
    pub id: i64,
    /// Its name (`origin`).
    pub name: String,
    /// Its URL (`s3://bucket/prefix`, `az://container/prefix`, `gs://bucket/prefix`, `file:///path`).
    pub url: String,
    /// Non-secret backend settings (`--option key=value`).
    pub options: BTreeMap<String, String>,
    /// Its place in the read order, 1 first: reads that fetch data ask the remotes in this
    /// order and fall back to the next on a miss or a failure.
    pub position: u32,
}

/// One ref of a remote as last fetched or pushed, with what the remote said about the ref
/// object then: comparing those with a fresh HEAD tells whether the local copy is current.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RemoteRef {
    /// The dataset.
    pub dataset: String,
    /// The tag, or `None` for the dataset's head.
    pub tag: Option<String>,
    /// The version the ref names.
    pub version: ObjectId,
    /// The ref object's ETag (RFC 9110 entity tag), as the backend reported it.
    pub etag: Option<String>,
    /// The backend's object version id (S3 VersionId, GCS generation), when it has one.
    pub object_version: Option<String>,
    /// The ref object's Last-Modified, Unix seconds.
    pub last_modified: i64,
    /// When this store last read it, Unix seconds.
    pub fetched_at: i64,
}

/// Where a remote keeps one object: pack, frame, and place in the frame's raw bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteLocation {
    /// The remote pack's id.
    pub pack: ObjectId,
    /// The frame, as in the pack's index.
    pub frame: FrameRecord,
    /// The object's kind.
    pub kind: ObjectKind,
    /// Byte offset inside the frame's raw bytes.
    pub offset: u32,
    /// Length in bytes.
    pub length: u32,
    /// The frame's row (for [`Catalog::remote_frame_objects`]): a `remote_frames` row, or,
    /// negated, a `frames` row of the local pack a remote pack shares its index with
    /// ([`RemoteLocation::in_local_pack`]).
    pub frame_row: i64,
}

/// The remotes `conn` records, in read order, numbered 1.. as they stand (positions are kept
/// dense; a gap or a tie would still give one order: ties by name).
fn remotes_of(conn: &rusqlite::Connection, path: &std::path::Path) -> Result<Vec<RemoteRecord>> {
    let mut stmt = conn
        .prepare("SELECT id, name, url, options FROM remotes ORDER BY position, name")
        .in_catalog()?;
    let rows = stmt
        .query_map([], |row| {
            Ok((
                row.get::<_, i64>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, String>(3)?,
            ))
        })
        .in_catalog()?;
    let mut remotes = Vec::new();
    for row in rows {
        let (id, name, url, options) = row.in_catalog()?;
        let options = serde_json::from_str(&options)
            .map_err(|_| Error::corrupt(path, "remote options are not a JSON object"))?;
        remotes.push(RemoteRecord {
            id,
            name,
            url,
            options,
            position: remotes.len() as u32 + 1,
        });
    }
    Ok(remotes)
}

impl RemoteLocation {
    /// True when the location was found through the index of a local pack that the remote
    /// also holds (the same pack id and size: see [`CatalogWriter::add_remote_pack`]): the
    /// object is in this store too.
    pub fn in_local_pack(&self) -> bool {
        self.frame_row < 0
    }
}

/// A remote pack's objects that its own rows locate (`remote_objects`: a pack indexed from
/// its `.idx`, or an object of a shared pack whose `objects` row names another local pack).
const REMOTE_LOCATE: &str = "SELECT p.pack_id, f.offset, f.stored_length, f.raw_length, f.compression, o.offset, o.length, f.id
     FROM remote_objects o JOIN remote_frames f ON f.id = o.frame
     JOIN remote_packs p ON p.id = f.pack
     WHERE o.remote = ?1 AND o.id = ?2 AND o.kind = ?3";

/// The objects of a remote pack that shares a local pack's index: located in that local
/// pack by `objects`. The frame row is negated (a `frames` row, not a `remote_frames` one).
const SHARED_LOCATE: &str = "SELECT p.pack_id, f.offset, f.stored_length, f.raw_length, f.compression, o.offset, o.length, -f.id
     FROM objects o JOIN frames f ON f.id = o.frame JOIN packs p ON p.id = f.pack
     JOIN remote_packs r ON r.remote = ?1 AND r.pack_id = p.pack_id AND r.local_index = 1
     WHERE o.id = ?2 AND o.kind = ?3";

/// SQL true when object `o` (a row of `objects`) lies in a local pack whose index remote
/// `?1` shares.
const IN_SHARED_PACK: &str = "EXISTS (SELECT 1 FROM frames f JOIN packs p ON p.id = f.pack
     JOIN remote_packs r ON r.remote = ?1 AND r.pack_id = p.pack_id AND r.local_index = 1
     WHERE f.id = o.frame)";

/// The statement that records where a remote holds an object: `$columns` (the six columns
/// of `remote_objects` in some order) bound to `?1`..`?6`, and `$remote`, `$id`, `$kind`,
/// `$frame` the parameters holding the remote's row, the object's id and kind, and its
/// `remote_frames` row. It makes the choice between two copies of one object on one remote.
///
/// This store keeps one location per object and remote, and a remote can hold a chunk
/// twice, in two encodings: two stores pushed the same content, one with `--no-deltas` and
/// one with deltas, or with deltas against different parents. Two delta copies can even name
/// each other (A against B in one pack, B against A in another): a cycle no reader decodes.
/// So, whatever order the remote lists its packs in:
/// - a location in a delta frame is not recorded when the remote already has the object in
///   a plain frame of a local pack whose index it shares (`SHARED_LOCATE` answers for it);
/// - a location in a plain frame replaces a recorded one in a delta frame;
/// - nothing else replaces a recorded location.
///
/// A chunk the remote holds plain anywhere is then read plain: every fetch (clone, pull,
/// checkout of remote-only data, the read engine, `copy`) locates it through these rows
/// (`remote_locate`, `remote_frames_holding`, `remote_chunk_bases`). A chunk the remote holds
/// only as deltas keeps the first delta recorded.
macro_rules! record_remote_object {
    ($columns:literal, $remote:literal, $id:literal, $kind:literal, $frame:literal) => {
        concat!(
            "INSERT INTO remote_objects ",
            $columns,
            " SELECT ?1, ?2, ?3, ?4, ?5, ?6
             WHERE (SELECT bases FROM remote_frames WHERE id = ",
            $frame,
            ") IS NULL
                OR NOT EXISTS (SELECT 1 FROM objects o JOIN frames f ON f.id = o.frame
                    JOIN packs p ON p.id = f.pack
                    JOIN remote_packs r ON r.remote = ",
            $remote,
            " AND r.pack_id = p.pack_id AND r.local_index = 1
                    WHERE o.id = ",
            $id,
            " AND o.kind = ",
            $kind,
            " AND f.bases IS NULL)
             ON CONFLICT (remote, id, kind) DO UPDATE
                SET frame = excluded.frame, offset = excluded.offset, length = excluded.length
              WHERE (SELECT bases FROM remote_frames WHERE id = excluded.frame) IS NULL
                AND (SELECT bases FROM remote_frames WHERE id = remote_objects.frame) IS NOT NULL"
        )
    };
}

/// Records where remote `?1` holds object `?2` of kind `?3`: frame `?4` (a `remote_frames`
/// row), offset `?5` and length `?6` in its raw bytes; of two copies, the plain one (see
/// `record_remote_object!`).
pub(super) const RECORD_REMOTE_OBJECT: &str = record_remote_object!(
    "(remote, id, kind, frame, offset, length)",
    "?1",
    "?2",
    "?3",
    "?4"
);

/// [`RECORD_REMOTE_OBJECT`] with the parameters in the order `index_pack` binds them: id
/// `?1`, kind `?2`, frame `?3`, offset `?4`, length `?5`, remote `?6`.
const RECORD_INDEXED_REMOTE_OBJECT: &str = record_remote_object!(
    "(id, kind, frame, offset, length, remote)",
    "?6",
    "?1",
    "?2",
    "?3"
);

/// Forgets remote `?1`'s own location of object `?2` of kind `?3` when it lies in a delta
/// frame: the object is in a plain frame of a local pack the remote shares, which
/// `SHARED_LOCATE` then answers with (see `record_remote_object!`).
const FORGET_REMOTE_DELTA_COPY: &str = "DELETE FROM remote_objects
     WHERE remote = ?1 AND id = ?2 AND kind = ?3
       AND (SELECT bases FROM remote_frames WHERE id = remote_objects.frame) IS NOT NULL";

fn parse_id(bytes: &[u8], catalog: &Catalog) -> Result<ObjectId> {
    ObjectId::from_slice(bytes).ok_or_else(|| Error::corrupt(catalog.path(), "malformed id"))
}

impl Catalog {
    /// The remote called `name`.
    ///
    /// # Errors
    /// [`Error::RemoteNotFound`]; [`Error::Catalog`].
    pub fn remote(&self, name: &str) -> Result<RemoteRecord> {
        self.remotes()?
            .into_iter()
            .find(|r| r.name == name)
            .ok_or_else(|| Error::RemoteNotFound {
                name: name.to_string(),
            })
    }

    /// Every configured remote, in read order (by position, 1 first).
    ///
    /// # Errors
    /// [`Error::Catalog`]; [`Error::Corrupt`] when stored options are not a JSON object.
    pub fn remotes(&self) -> Result<Vec<RemoteRecord>> {
        remotes_of(&self.conn, &self.path)
    }

    /// Every ref of `remote` as last fetched, sorted by dataset then tag (heads first).
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn remote_refs(&self, remote: i64) -> Result<Vec<RemoteRef>> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT dataset, tag, version, etag, object_version, last_modified, fetched_at
             FROM remote_refs WHERE remote = ?1 ORDER BY dataset, tag",
            )
            .in_catalog()?;
        let rows = stmt
            .query_map([remote], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, Vec<u8>>(2)?,
                    row.get::<_, Option<String>>(3)?,
                    row.get::<_, Option<String>>(4)?,
                    row.get::<_, i64>(5)?,
                    row.get::<_, i64>(6)?,
                ))
            })
            .in_catalog()?;
        let mut refs = Vec::new();
        for row in rows {
            let (dataset, tag, version, etag, object_version, last_modified, fetched_at) =
                row.in_catalog()?;
            refs.push(RemoteRef {
                dataset,
                tag: (!tag.is_empty()).then_some(tag),
                version: parse_id(&version, self)?,
                etag,
                object_version,
                last_modified,
                fetched_at,
            });
        }
        Ok(refs)
    }

    /// One ref of `remote` as last fetched: the head of `dataset` (`tag` `None`) or a tag.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn remote_ref(
        &self,
        remote: i64,
        dataset: &str,
        tag: Option<&str>,
    ) -> Result<Option<RemoteRef>> {
        Ok(self
            .remote_refs(remote)?
            .into_iter()
            .find(|r| r.dataset == dataset && r.tag.as_deref() == tag))
    }

    /// The ids of every pack this store knows `remote` holds.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn remote_packs(&self, remote: i64) -> Result<HashSet<ObjectId>> {
        let mut stmt = self
            .conn
            .prepare("SELECT pack_id FROM remote_packs WHERE remote = ?1")
            .in_catalog()?;
        let rows = stmt
            .query_map([remote], |row| row.get::<_, Vec<u8>>(0))
            .in_catalog()?;
        let mut packs = HashSet::new();
        for row in rows {
            packs.insert(parse_id(&row.in_catalog()?, self)?);
        }
        Ok(packs)
    }

    /// Where `remote` keeps object `id` of `kind`, if any pack it holds has it: first by the
    /// remote's own index rows, then through the index of a local pack the remote holds
    /// too (a pushed pack: [`RemoteLocation::in_local_pack`]).
    ///
    /// # Errors
    /// [`Error::Catalog`]; [`Error::Corrupt`] for an unknown compression byte.
    pub fn remote_locate(
        &self,
        remote: i64,
        id: &ObjectId,
        kind: ObjectKind,
    ) -> Result<Option<RemoteLocation>> {
        let mut row = None;
        for sql in [REMOTE_LOCATE, SHARED_LOCATE] {
            row = self
                .conn
                .prepare_cached(sql)
                .in_catalog()?
                .query_row(params![remote, &id.0[..], kind as u8], |row| {
                    Ok((RawLocation::read(row)?, row.get::<_, i64>(7)?))
                })
                .optional()
                .in_catalog()?;
            if row.is_some() {
                break;
            }
        }
        let Some((raw, frame_row)) = row else {
            return Ok(None);
        };
        let bad = |what: &str| {
            Error::corrupt(
                &self.path,
                format!("remote object {} has {what}", id.short()),
            )
        };
        let (pack, frame) = raw.frame(&bad)?;
        Ok(Some(RemoteLocation {
            pack,
            frame,
            kind,
            offset: raw.object_offset,
            length: raw.length,
            frame_row,
        }))
    }

    /// The frames of remote `remote`'s packs that hold `objects`, each frame once, as
    /// [`Catalog::remote_locate`] would locate each object (its own index rows first, else a
    /// local pack whose index the remote shares): (pack id, frame, frame row as
    /// [`RemoteLocation::frame_row`]); and the first object no pack of the remote holds, if
    /// any. One pass over a temporary table of the objects instead of a lookup each: `dsv
    /// copy` plans from it (70,000 lookups took 0.4 s).
    ///
    /// # Errors
    /// [`Error::Catalog`]; [`Error::Corrupt`] for a malformed row.
    #[allow(clippy::type_complexity)]
    pub fn remote_frames_holding(
        &self,
        remote: i64,
        objects: &[(ObjectId, ObjectKind)],
    ) -> Result<(
        Vec<(ObjectId, FrameRecord, i64)>,
        Option<(ObjectId, ObjectKind)>,
    )> {
        // Rolled back at the end: the temporary rows never outlive this call.
        let transaction = self.conn.unchecked_transaction().in_catalog()?;
        transaction
            .execute_batch(
                "CREATE TEMP TABLE IF NOT EXISTS wanted_objects (
                 id BLOB NOT NULL, kind INTEGER NOT NULL, PRIMARY KEY (id, kind)
             ) WITHOUT ROWID;
             DELETE FROM temp.wanted_objects;",
            )
            .in_catalog()?;
        {
            let mut insert = transaction
                .prepare_cached(
                    "INSERT OR IGNORE INTO temp.wanted_objects (id, kind) VALUES (?1, ?2)",
                )
                .in_catalog()?;
            for (id, kind) in objects {
                insert
                    .execute(params![&id.0[..], *kind as u8])
                    .in_catalog()?;
            }
        }
        let own = "EXISTS (SELECT 1 FROM remote_objects o2
                 WHERE o2.remote = ?1 AND o2.id = w.id AND o2.kind = w.kind)";
        let shared = "EXISTS (SELECT 1 FROM objects o3 JOIN frames f3 ON f3.id = o3.frame
                 JOIN packs p3 ON p3.id = f3.pack
                 JOIN remote_packs r3 ON r3.remote = ?1 AND r3.pack_id = p3.pack_id
                     AND r3.local_index = 1
                 WHERE o3.id = w.id AND o3.kind = w.kind)";
        let mut frames = Vec::new();
        {
            let mut stmt = transaction.prepare(&format!(
                "SELECT DISTINCT p.pack_id, f.offset, f.stored_length, f.raw_length, f.compression, 0, 0, f.id
                 FROM temp.wanted_objects w
                 JOIN remote_objects o ON o.remote = ?1 AND o.id = w.id AND o.kind = w.kind
                 JOIN remote_frames f ON f.id = o.frame JOIN remote_packs p ON p.id = f.pack
                 UNION
                 SELECT DISTINCT p.pack_id, f.offset, f.stored_length, f.raw_length, f.compression, 0, 0, -f.id
                 FROM temp.wanted_objects w
                 JOIN objects o ON o.id = w.id AND o.kind = w.kind
                 JOIN frames f ON f.id = o.frame JOIN packs p ON p.id = f.pack
                 JOIN remote_packs r ON r.remote = ?1 AND r.pack_id = p.pack_id AND r.local_index = 1
                 WHERE NOT {own}"
            )).in_catalog()?;
            let rows = stmt
                .query_map(params![remote], |row| {
                    Ok((RawLocation::read(row)?, row.get::<_, i64>(7)?))
                })
                .in_catalog()?;
            let bad = |what: &str| Error::corrupt(&self.path, format!("a remote frame has {what}"));
            for row in rows {
                let (raw, frame_row) = row.in_catalog()?;
                let (pack, frame) = raw.frame(&bad)?;
                frames.push((pack, frame, frame_row));
            }
        }
        let missing = transaction
            .prepare(&format!(
                "SELECT w.id, w.kind FROM temp.wanted_objects w
                 WHERE NOT {own} AND NOT {shared} LIMIT 1"
            ))
            .in_catalog()?
            .query_row(params![remote], |row| {
                Ok((row.get::<_, Vec<u8>>(0)?, row.get::<_, u8>(1)?))
            })
            .optional()
            .in_catalog()?;
        transaction.rollback().in_catalog()?;
        let missing = match missing {
            None => None,
            Some((id, kind)) => Some((
                parse_id(&id, self)?,
                ObjectKind::from_u8(kind)
                    .ok_or_else(|| Error::corrupt(&self.path, "an unknown object kind"))?,
            )),
        };
        Ok((frames, missing))
    }

    /// True when this store's record of remote `remote`'s packs lists a delta frame (in the
    /// remote's own index rows, or in a local pack whose index it shares).
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn remote_has_delta_frames(&self, remote: i64) -> Result<bool> {
        self.conn
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM remote_frames f JOIN remote_packs p ON p.id = f.pack
                     WHERE p.remote = ?1 AND f.bases IS NOT NULL)
                 OR EXISTS (SELECT 1 FROM frames f JOIN packs p ON p.id = f.pack
                     JOIN remote_packs r ON r.remote = ?1 AND r.pack_id = p.pack_id
                         AND r.local_index = 1
                     WHERE f.bases IS NOT NULL)",
            )
            .in_catalog()?
            .query_row([remote], |row| row.get(0))
            .in_catalog()
    }

    /// Every base chunk that the delta frames of remote `remote`'s pack `pack` name (its own
    /// index rows, or those of the local pack whose index it shares), each once: what must be
    /// on a remote that receives the pack whole (`dsv copy`). Empty for a pack without delta
    /// frames or one the store does not record.
    ///
    /// # Errors
    /// [`Error::Catalog`]; [`Error::Corrupt`] for a malformed `bases` column.
    pub fn remote_pack_delta_bases(&self, remote: i64, pack: &ObjectId) -> Result<Vec<ObjectId>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT f.bases FROM remote_frames f JOIN remote_packs p ON p.id = f.pack
                 WHERE p.remote = ?1 AND p.pack_id = ?2 AND f.bases IS NOT NULL
                 UNION ALL
                 SELECT f.bases FROM frames f JOIN packs p ON p.id = f.pack
                 JOIN remote_packs r ON r.remote = ?1 AND r.pack_id = p.pack_id
                     AND r.local_index = 1
                 WHERE p.pack_id = ?2 AND f.bases IS NOT NULL",
            )
            .in_catalog()?;
        let rows = stmt
            .query_map(params![remote, &pack.0[..]], |row| {
                row.get::<_, Option<Vec<u8>>>(0)
            })
            .in_catalog()?;
        let mut bases = Vec::new();
        let mut seen = HashSet::new();
        for row in rows {
            let decoded = super::objects::decode_bases(row.in_catalog()?)
                .map_err(|detail| Error::corrupt(&self.path, detail))?;
            bases.extend(decoded.into_iter().filter(|id| seen.insert(*id)));
        }
        Ok(bases)
    }

    /// Every object of a remote frame: (id, kind, offset, length), in frame order.
    /// `frame_row` is a [`RemoteLocation::frame_row`]; for a frame of a local pack the remote
    /// shares (negative), the objects `objects` locates in it (a scan of `objects`: such a
    /// frame is downloaded only when a race made [`Catalog::remote_locate`] find an object
    /// that another process had just stored here).
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn remote_frame_objects(
        &self,
        frame_row: i64,
    ) -> Result<Vec<(ObjectId, ObjectKind, u32, u32)>> {
        let (sql, row) = if frame_row < 0 {
            (
                "SELECT id, kind, offset, length FROM objects WHERE frame = ?1 ORDER BY offset",
                -frame_row,
            )
        } else {
            (
                "SELECT id, kind, offset, length FROM remote_objects WHERE frame = ?1 ORDER BY offset",
                frame_row,
            )
        };
        let mut stmt = self.conn.prepare_cached(sql).in_catalog()?;
        let rows = stmt
            .query_map([row], |row| {
                Ok((
                    row.get::<_, Vec<u8>>(0)?,
                    row.get::<_, u8>(1)?,
                    row.get::<_, u32>(2)?,
                    row.get::<_, u32>(3)?,
                ))
            })
            .in_catalog()?;
        let mut out = Vec::new();
        for row in rows {
            let (id, kind, offset, length) = row.in_catalog()?;
            let kind = ObjectKind::from_u8(kind)
                .ok_or_else(|| Error::corrupt(&self.path, "an unknown object kind"))?;
            out.push((parse_id(&id, self)?, kind, offset, length));
        }
        Ok(out)
    }

    /// Versions this store holds as objects but has not recorded in its version table
    /// (fetched from a remote, or a fetch interrupted before recording them).
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn unrecorded_versions(&self) -> Result<Vec<ObjectId>> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT o.id FROM objects o WHERE o.kind = ?1
               AND NOT EXISTS (SELECT 1 FROM versions v WHERE v.id = o.id)",
            )
            .in_catalog()?;
        let rows = stmt
            .query_map([ObjectKind::Version as u8], |row| row.get::<_, Vec<u8>>(0))
            .in_catalog()?;
        let mut out = Vec::new();
        for row in rows {
            out.push(parse_id(&row.in_catalog()?, self)?);
        }
        Ok(out)
    }

    /// Whether this store holds an outboard that remote `remote` lacks (one written by `gc`
    /// or `push` after the remote received its file): `push` then walks heads the remote
    /// already has, to send them.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn outboards_missing_on(&self, remote: i64) -> Result<bool> {
        let missing = self
            .conn
            .prepare_cached(&format!(
                "SELECT EXISTS (SELECT 1 FROM objects o WHERE o.kind = ?2 AND NOT EXISTS
                   (SELECT 1 FROM remote_objects r
                     WHERE r.remote = ?1 AND r.id = o.id AND r.kind = o.kind)
                   AND NOT {IN_SHARED_PACK})"
            ))
            .in_catalog()?
            .query_row(
                rusqlite::params![remote, ObjectKind::Outboard as u8],
                |row| row.get::<_, bool>(0),
            )
            .in_catalog()?;
        Ok(missing)
    }

    /// Every object `remote` holds that this store lacks, of the given kinds. (The objects
    /// of a pack the remote shares with this store are here, but for those its own rows
    /// list: `remote_objects` is enough.)
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn remote_objects_missing_here(
        &self,
        remote: i64,
        kinds: &[ObjectKind],
    ) -> Result<Vec<(ObjectId, ObjectKind)>> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT r.id, r.kind FROM remote_objects r
             WHERE r.remote = ?1
               AND NOT EXISTS (SELECT 1 FROM objects o WHERE o.id = r.id AND o.kind = r.kind)",
            )
            .in_catalog()?;
        let rows = stmt
            .query_map([remote], |row| {
                Ok((row.get::<_, Vec<u8>>(0)?, row.get::<_, u8>(1)?))
            })
            .in_catalog()?;
        let mut out = Vec::new();
        for row in rows {
            let (id, kind) = row.in_catalog()?;
            if let Some(kind) = ObjectKind::from_u8(kind)
                && kinds.contains(&kind)
            {
                out.push((parse_id(&id, self)?, kind));
            }
        }
        Ok(out)
    }
}

impl CatalogWriter<'_> {
    /// Adds remote `name`, last in the read order (see [`CatalogWriter::set_remote_order`]).
    ///
    /// # Errors
    /// [`Error::RemoteExists`]; [`Error::Catalog`].
    pub fn add_remote(
        &self,
        name: &str,
        url: &str,
        options: &BTreeMap<String, String>,
    ) -> Result<()> {
        let options_map = options;
        let options = serde_json::to_string(options).expect("a map of strings serializes");
        let added = self
            .tx
            .execute(
                "INSERT OR IGNORE INTO remotes (name, url, options, created_at, position)
             VALUES (?1, ?2, ?3, ?4, (SELECT coalesce(max(position), 0) + 1 FROM remotes))",
                params![name, url, options, unix_now()],
            )
            .in_catalog()?;
        if added == 0 {
            return Err(Error::RemoteExists {
                name: name.to_string(),
            });
        }
        self.log(RefLogEntry::Remote {
            name: name.to_string(),
            url: Some(url.to_string()),
            options: options_map.clone(),
        });
        Ok(())
    }

    /// Removes remote `name` and everything this store recorded about it (its refs and pack
    /// indexes; nothing on the remote itself).
    ///
    /// # Errors
    /// [`Error::RemoteNotFound`]; [`Error::Catalog`].
    pub fn remove_remote(&self, name: &str) -> Result<()> {
        if self
            .tx
            .execute("DELETE FROM remotes WHERE name = ?1", [name])
            .in_catalog()?
            == 0
        {
            return Err(Error::RemoteNotFound {
                name: name.to_string(),
            });
        }
        self.log(RefLogEntry::Remote {
            name: name.to_string(),
            url: None,
            options: BTreeMap::new(),
        });
        // The others keep their order, numbered 1.. again.
        let order: Vec<String> = self.remote_names()?;
        self.number_remotes(&order)
    }

    /// Puts remotes `first` at the front of the read order, in the order given; the others
    /// follow in the order they had. Returns the new order (every remote's name).
    ///
    /// # Errors
    /// [`Error::RemoteNotFound`] for a name of no remote; [`Error::Catalog`].
    pub fn set_remote_order(&self, first: &[String]) -> Result<Vec<String>> {
        let current: Vec<String> = self.remote_names()?;
        if let Some(unknown) = first.iter().find(|name| !current.contains(name)) {
            return Err(Error::RemoteNotFound {
                name: unknown.clone(),
            });
        }
        let order = crate::reflog::reorder(&current, first);
        self.number_remotes(&order)?;
        self.log(RefLogEntry::RemoteOrder {
            names: order.clone(),
        });
        Ok(order)
    }

    /// The remotes' names in read order.
    fn remote_names(&self) -> Result<Vec<String>> {
        let mut stmt = self
            .tx
            .prepare_cached("SELECT name FROM remotes ORDER BY position, name")
            .in_catalog()?;
        let names = stmt
            .query_map([], |row| row.get::<_, String>(0))
            .in_catalog()?
            .collect::<rusqlite::Result<Vec<String>>>()
            .in_catalog()?;
        Ok(names)
    }

    /// Gives remotes `order` the positions 1, 2, ... in that order.
    fn number_remotes(&self, order: &[String]) -> Result<()> {
        let mut stmt = self
            .tx
            .prepare_cached("UPDATE remotes SET position = ?1 WHERE name = ?2")
            .in_catalog()?;
        for (index, name) in order.iter().enumerate() {
            stmt.execute(params![index as i64 + 1, name]).in_catalog()?;
        }
        Ok(())
    }

    /// Records `reference` as `remote`'s current ref.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn set_remote_ref(&self, remote: i64, reference: &RemoteRef) -> Result<()> {
        self.tx
            .execute(
                "INSERT OR REPLACE INTO remote_refs
             (remote, dataset, tag, version, etag, object_version, last_modified, fetched_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    remote,
                    reference.dataset,
                    reference.tag.as_deref().unwrap_or(""),
                    &reference.version.0[..],
                    reference.etag,
                    reference.object_version,
                    reference.last_modified,
                    reference.fetched_at
                ],
            )
            .in_catalog()?;
        Ok(())
    }

    /// Forgets a ref the remote no longer has.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn remove_remote_ref(&self, remote: i64, dataset: &str, tag: Option<&str>) -> Result<()> {
        self.tx
            .execute(
                "DELETE FROM remote_refs WHERE remote = ?1 AND dataset = ?2 AND tag = ?3",
                params![remote, dataset, tag.unwrap_or("")],
            )
            .in_catalog()?;
        Ok(())
    }

    /// Records that `remote` holds pack `pack` of `size` bytes with this index. A pack already
    /// known is left as it is.
    ///
    /// A pack this store holds too, with the same size (a pushed pack: the id is the BLAKE3
    /// of the bytes), shares the local pack's index (`remote_packs.local_index`): only the
    /// objects of `objects` that `objects` locates in another local pack (or not at all) get
    /// rows of their own, so [`Catalog::remote_locate`] finds every object of the pack. A
    /// pack listed with another size than the local one is not the same pack: it is
    /// indexed from `frames` and `objects`, as any other.
    ///
    /// # Errors
    /// [`Error::Catalog`]; [`Error::Corrupt`] for an object naming a frame the index lacks.
    pub fn add_remote_pack(
        &self,
        remote: i64,
        pack: &ObjectId,
        size: u64,
        frames: &[FrameRecord],
        objects: &[ObjectRecord],
        deltas: &[crate::pack::FrameBases],
    ) -> Result<()> {
        let local: Option<i64> = self
            .tx
            .prepare_cached("SELECT id FROM packs WHERE pack_id = ?1 AND size = ?2")
            .in_catalog()?
            .query_row(params![&pack.0[..], size as i64], |row| row.get(0))
            .optional()
            .in_catalog()?;
        let added = self.tx.execute(
            "INSERT OR IGNORE INTO remote_packs (remote, pack_id, size, local_index) VALUES (?1, ?2, ?3, ?4)",
            params![remote, &pack.0[..], size as i64, local.is_some()],
        ).in_catalog()?;
        if added == 0 {
            return Ok(());
        }
        let pack_row = self.tx.last_insert_rowid();
        if let Some(local) = local {
            let index = super::objects::IndexRef {
                frames,
                objects,
                deltas,
            };
            return self.index_outside_local(remote, pack, pack_row, local, index);
        }
        self.index_pack(
            "INSERT INTO remote_frames (pack, offset, stored_length, raw_length, compression, bases) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            RECORD_INDEXED_REMOTE_OBJECT,
            Some(remote),
            pack_row,
            super::objects::IndexRef {
                frames,
                objects,
                deltas,
            },
        )
    }

    /// Gives remote pack `pack_row` (sharing local pack `local`'s index) rows of its own for
    /// the objects of `objects` that `objects` does not locate in `local`, with the frames
    /// they lie in.
    fn index_outside_local(
        &self,
        remote: i64,
        pack: &ObjectId,
        pack_row: i64,
        local: i64,
        index: super::objects::IndexRef<'_>,
    ) -> Result<()> {
        let super::objects::IndexRef {
            frames,
            objects,
            deltas,
        } = index;
        let mut in_pack = self.tx.prepare_cached(
            "SELECT f.pack, f.bases IS NULL FROM objects o JOIN frames f ON f.id = o.frame WHERE o.id = ?1 AND o.kind = ?2",
        ).in_catalog()?;
        let mut insert_frame = self.tx.prepare_cached(
            "INSERT INTO remote_frames (pack, offset, stored_length, raw_length, compression, bases) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        ).in_catalog()?;
        let mut insert_object = self.tx.prepare_cached(RECORD_REMOTE_OBJECT).in_catalog()?;
        let mut forget_delta = self
            .tx
            .prepare_cached(FORGET_REMOTE_DELTA_COPY)
            .in_catalog()?;
        let mut frame_rows = std::collections::HashMap::new();
        for object in objects {
            let here: Option<(i64, bool)> = in_pack
                .query_row(params![&object.id.0[..], object.kind as u8], |row| {
                    Ok((row.get(0)?, row.get(1)?))
                })
                .optional()
                .in_catalog()?;
            if let Some((pack, plain)) = here
                && pack == local
            {
                // Located through the shared index; a plain copy there wins over a delta
                // copy the remote's own rows recorded from another pack.
                if plain {
                    forget_delta
                        .execute(params![remote, &object.id.0[..], object.kind as u8])
                        .in_catalog()?;
                }
                continue;
            }
            let frame_row = match frame_rows.get(&object.frame) {
                Some(row) => *row,
                None => {
                    let frame = frames.get(object.frame as usize).ok_or_else(|| {
                        Error::corrupt(
                            format!("the index of pack {}", pack.to_hex()),
                            format!(
                                "an object names frame {}, of {}",
                                object.frame,
                                frames.len()
                            ),
                        )
                    })?;
                    let bases = deltas
                        .binary_search_by_key(&object.frame, |d| d.frame)
                        .map_or(&[][..], |i| deltas[i].bases.as_slice());
                    let row = super::objects::insert_frame_row(
                        &mut insert_frame,
                        pack_row,
                        frame,
                        bases,
                    )?;
                    frame_rows.insert(object.frame, row);
                    row
                }
            };
            insert_object
                .execute(params![
                    remote,
                    &object.id.0[..],
                    object.kind as u8,
                    frame_row,
                    object.offset,
                    object.length
                ])
                .in_catalog()?;
        }
        Ok(())
    }

    /// Before local pack `local` (row id) is forgotten: every remote pack sharing its index
    /// gets a copy of it (its frames into `remote_frames`, the objects `objects` locates in
    /// it into `remote_objects`) and shares no more, so the store still knows what those
    /// remotes hold.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub(super) fn unshare_local_pack(&self, local: i64) -> Result<()> {
        let sharing: Vec<(i64, i64)> = self
            .tx
            .prepare_cached(
                "SELECT r.id, r.remote FROM remote_packs r JOIN packs p ON p.pack_id = r.pack_id
                 WHERE p.id = ?1 AND r.local_index = 1",
            )
            .in_catalog()?
            .query_map([local], |row| Ok((row.get(0)?, row.get(1)?)))
            .in_catalog()?
            .collect::<rusqlite::Result<_>>()
            .in_catalog()?;
        if sharing.is_empty() {
            return Ok(());
        }
        type FrameRow = (i64, i64, i64, i64, i64, Option<Vec<u8>>);
        let frames: Vec<FrameRow> = self
            .tx
            .prepare_cached(
                "SELECT id, offset, stored_length, raw_length, compression, bases FROM frames WHERE pack = ?1",
            ).in_catalog()?
            .query_map([local], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?, row.get(5)?))
            }).in_catalog()?
            .collect::<rusqlite::Result<_>>().in_catalog()?;
        // One scan of `objects` (it has no index by frame), whatever the number of remotes.
        let objects: Vec<(Vec<u8>, i64, i64, i64, i64)> = self
            .tx
            .prepare_cached(
                "SELECT id, kind, frame, offset, length FROM objects
                  WHERE frame IN (SELECT id FROM frames WHERE pack = ?1)",
            )
            .in_catalog()?
            .query_map([local], |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                ))
            })
            .in_catalog()?
            .collect::<rusqlite::Result<_>>()
            .in_catalog()?;
        for (pack_row, remote) in sharing {
            // Frames of its own it may have already (for objects located in other packs).
            let mut rows: std::collections::HashMap<i64, i64> = self
                .tx
                .prepare_cached("SELECT offset, id FROM remote_frames WHERE pack = ?1")
                .in_catalog()?
                .query_map([pack_row], |row| Ok((row.get(0)?, row.get(1)?)))
                .in_catalog()?
                .collect::<rusqlite::Result<_>>()
                .in_catalog()?;
            let mut by_local = std::collections::HashMap::new();
            for (frame, offset, stored_length, raw_length, compression, bases) in &frames {
                let row = match rows.get(offset) {
                    Some(row) => *row,
                    None => {
                        self.tx.execute(
                            "INSERT INTO remote_frames (pack, offset, stored_length, raw_length, compression, bases)
                             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                            params![pack_row, offset, stored_length, raw_length, compression, bases],
                        ).in_catalog()?;
                        let row = self.tx.last_insert_rowid();
                        rows.insert(*offset, row);
                        row
                    }
                };
                by_local.insert(*frame, row);
            }
            let mut insert = self.tx.prepare_cached(RECORD_REMOTE_OBJECT).in_catalog()?;
            for (id, kind, frame, offset, length) in &objects {
                if let Some(row) = by_local.get(frame) {
                    insert
                        .execute(params![remote, id, kind, row, offset, length])
                        .in_catalog()?;
                }
            }
            self.tx
                .execute(
                    "UPDATE remote_packs SET local_index = 0 WHERE id = ?1",
                    [pack_row],
                )
                .in_catalog()?;
        }
        Ok(())
    }

    /// Forgets the packs of `remote` not in `present` (deleted on the remote).
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn retain_remote_packs(&self, remote: i64, present: &HashSet<ObjectId>) -> Result<()> {
        let mut stmt = self
            .tx
            .prepare("SELECT id, pack_id FROM remote_packs WHERE remote = ?1")
            .in_catalog()?;
        let rows: Vec<(i64, Vec<u8>)> = stmt
            .query_map([remote], |row| Ok((row.get(0)?, row.get(1)?)))
            .in_catalog()?
            .collect::<rusqlite::Result<_>>()
            .in_catalog()?;
        for (row, pack) in rows {
            if ObjectId::from_slice(&pack).is_none_or(|id| !present.contains(&id)) {
                self.tx.execute(
                    "DELETE FROM remote_objects WHERE frame IN (SELECT id FROM remote_frames WHERE pack = ?1)",
                    [row],
                ).in_catalog()?;
                self.tx
                    .execute("DELETE FROM remote_packs WHERE id = ?1", [row])
                    .in_catalog()?;
            }
        }
        Ok(())
    }

    /// Moves dataset `name`'s head to `id` (a version the catalog has), creating the dataset.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn set_head(&self, name: &str, id: &ObjectId) -> Result<()> {
        self.tx
            .execute(
                "INSERT OR IGNORE INTO datasets (name, head, created_at) VALUES (?1, NULL, ?2)",
                params![name, unix_now()],
            )
            .in_catalog()?;
        self.tx
            .execute(
                "UPDATE datasets SET head = ?1 WHERE name = ?2",
                params![&id.0[..], name],
            )
            .in_catalog()?;
        self.adopt_history(name, id)?;
        self.log(RefLogEntry::Head {
            dataset: name.to_string(),
            version: Some(*id),
        });
        Ok(())
    }

    /// A head's history belongs to its dataset: the versions reached from `id` by parents
    /// that the catalog files under another dataset move to `name`. A version object names the
    /// dataset it was committed to, which a rename does not change, so a version recorded from
    /// its object alone (fetched from a remote, or rebuilt by repair) is filed under that old
    /// name until the ref naming it says where it belongs. A dataset left with nothing (no
    /// head, version, tag or workspace) is dropped.
    fn adopt_history(&self, name: &str, id: &ObjectId) -> Result<()> {
        let dataset: i64 = self
            .tx
            .query_row("SELECT id FROM datasets WHERE name = ?1", [name], |row| {
                row.get(0)
            })
            .in_catalog()?;
        // The walk stops at the first version already filed here: its history was adopted
        // when it became a head.
        let moved: Vec<(Vec<u8>, i64)> = {
            let mut stmt = self.tx.prepare_cached(
                "WITH RECURSIVE chain(id, parent, dataset) AS (
                     SELECT id, parent, dataset FROM versions WHERE id = ?1
                     UNION ALL
                     SELECT v.id, v.parent, v.dataset FROM versions v JOIN chain c ON v.id = c.parent
                     WHERE c.dataset != ?2
                 )
                 SELECT id, dataset FROM chain WHERE dataset != ?2",
            ).in_catalog()?;
            let rows = stmt
                .query_map(params![&id.0[..], dataset], |row| {
                    Ok((row.get(0)?, row.get(1)?))
                })
                .in_catalog()?;
            rows.collect::<rusqlite::Result<_>>().in_catalog()?
        };
        let mut left = std::collections::BTreeSet::new();
        for (version, old) in &moved {
            // A version its own dataset's line still reaches stays filed there (a remote
            // keeps the old name's ref after a rename): both datasets list it
            // (crate::catalog::versions::MEMBERS), whichever it is filed under.
            let old_name: Option<String> = self
                .tx
                .query_row("SELECT name FROM datasets WHERE id = ?1", [old], |row| {
                    row.get(0)
                })
                .optional()
                .in_catalog()?;
            if let Some(old_name) = old_name {
                let reached: bool = self
                    .tx
                    .query_row(
                        &format!(
                            "{} SELECT EXISTS (SELECT 1 FROM reach WHERE id = ?2)",
                            crate::catalog::versions::MEMBERS
                        ),
                        params![old_name, version],
                        |row| row.get(0),
                    )
                    .in_catalog()?;
                if reached {
                    continue;
                }
            }
            self.tx
                .execute(
                    "UPDATE versions SET dataset = ?2 WHERE id = ?1",
                    params![version, dataset],
                )
                .in_catalog()?;
            left.insert(*old);
        }
        for old in left {
            self.tx
                .execute(
                    "DELETE FROM datasets WHERE id = ?1 AND head IS NULL
                   AND NOT EXISTS (SELECT 1 FROM versions WHERE dataset = ?1)
                   AND NOT EXISTS (SELECT 1 FROM tags WHERE dataset = ?1)
                   AND NOT EXISTS (SELECT 1 FROM workspaces WHERE dataset = ?1)",
                    [old],
                )
                .in_catalog()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::tests::{add_line, new_catalog, sample_pack, sample_version};

    fn options(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// A catalog with remotes `origin` and `backup`; their row ids.
    fn with_remotes() -> (tempfile::TempDir, Catalog, i64, i64) {
        let (dir, mut catalog) = new_catalog();
        let writer = catalog.writer().unwrap();
        writer
            .add_remote("origin", "s3://bucket/a", &options(&[("region", "x")]))
            .unwrap();
        writer
            .add_remote("backup", "file:///b", &BTreeMap::new())
            .unwrap();
        writer.commit().unwrap();
        let origin = catalog.remote("origin").unwrap().id;
        let backup = catalog.remote("backup").unwrap().id;
        (dir, catalog, origin, backup)
    }

    fn reference(dataset: &str, tag: Option<&str>, version: ObjectId) -> RemoteRef {
        RemoteRef {
            dataset: dataset.into(),
            tag: tag.map(Into::into),
            version,
            etag: Some("\"e\"".into()),
            object_version: None,
            last_modified: 10,
            fetched_at: 20,
        }
    }

    #[test]
    fn remotes_are_added_once_listed_in_read_order_and_replaced_by_remove_then_add() {
        let (_dir, mut catalog, origin, _) = with_remotes();
        let names: Vec<_> = catalog
            .remotes()
            .unwrap()
            .into_iter()
            .map(|r| r.name)
            .collect();
        assert_eq!(names, ["origin", "backup"]);
        let record = catalog.remote("origin").unwrap();
        assert_eq!(
            record,
            RemoteRecord {
                id: origin,
                name: "origin".into(),
                url: "s3://bucket/a".into(),
                options: options(&[("region", "x")]),
                position: 1,
            }
        );
        let writer = catalog.writer().unwrap();
        assert!(matches!(
            writer.add_remote("origin", "file:///other", &BTreeMap::new()),
            Err(Error::RemoteExists { .. })
        ));
        writer.remove_remote("origin").unwrap();
        writer
            .add_remote("origin", "file:///other", &BTreeMap::new())
            .unwrap();
        writer.commit().unwrap();
        let replaced = catalog.remote("origin").unwrap();
        assert_eq!(replaced.url, "file:///other");
        assert!(replaced.options.is_empty());
        assert_eq!(
            catalog.ref_state().unwrap().remotes["origin"],
            ("file:///other".to_string(), BTreeMap::new())
        );
        let writer = catalog.writer().unwrap();
        assert!(matches!(
            writer.remove_remote("nope"),
            Err(Error::RemoteNotFound { .. })
        ));
        drop(writer);
        assert!(matches!(
            catalog.remote("nope"),
            Err(Error::RemoteNotFound { .. })
        ));
    }

    #[test]
    fn a_remotes_refs_are_keyed_by_dataset_and_tag_heads_first() {
        let (_dir, mut catalog, origin, backup) = with_remotes();
        let (a, b) = (ObjectId::of(b"a"), ObjectId::of(b"b"));
        let writer = catalog.writer().unwrap();
        writer
            .set_remote_ref(origin, &reference("ds", Some("t"), a))
            .unwrap();
        writer
            .set_remote_ref(origin, &reference("ds", None, a))
            .unwrap();
        writer
            .set_remote_ref(origin, &reference("ds", None, b))
            .unwrap();
        writer
            .set_remote_ref(backup, &reference("ds", None, a))
            .unwrap();
        writer.commit().unwrap();
        let refs = catalog.remote_refs(origin).unwrap();
        assert_eq!(
            refs,
            [reference("ds", None, b), reference("ds", Some("t"), a)]
        );
        assert_eq!(
            catalog.remote_ref(origin, "ds", Some("t")).unwrap(),
            Some(reference("ds", Some("t"), a))
        );
        assert_eq!(
            catalog
                .remote_ref(backup, "ds", None)
                .unwrap()
                .unwrap()
                .version,
            a
        );
        let writer = catalog.writer().unwrap();
        writer.remove_remote_ref(origin, "ds", None).unwrap();
        writer.commit().unwrap();
        assert_eq!(catalog.remote_ref(origin, "ds", None).unwrap(), None);
        assert_eq!(catalog.remote_refs(origin).unwrap().len(), 1);
    }

    #[test]
    fn a_remote_packs_index_locates_its_objects_in_frame_order() {
        let (_dir, mut catalog, origin, backup) = with_remotes();
        let (a, b) = (ObjectId::of(b"a"), ObjectId::of(b"b"));
        let pack = sample_pack(
            "remote pack",
            &[(b, ObjectKind::Tree), (a, ObjectKind::Chunk)],
        );
        let writer = catalog.writer().unwrap();
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
        // Known already: left as it is.
        writer
            .add_remote_pack(origin, &pack.id, 1, &pack.frames, &[], &[])
            .unwrap();
        writer.commit().unwrap();
        assert_eq!(
            catalog.remote_packs(origin).unwrap(),
            HashSet::from([pack.id])
        );
        let frames: i64 = catalog
            .conn()
            .query_row("SELECT count(*) FROM remote_frames", [], |row| row.get(0))
            .unwrap();
        assert_eq!(frames, 1, "a known pack is indexed once");
        assert!(catalog.remote_packs(backup).unwrap().is_empty());
        let found = catalog
            .remote_locate(origin, &a, ObjectKind::Chunk)
            .unwrap()
            .unwrap();
        assert_eq!(
            (
                found.pack,
                found.frame,
                found.kind,
                found.offset,
                found.length
            ),
            (pack.id, pack.frames[0], ObjectKind::Chunk, 10, 10)
        );
        assert_eq!(
            catalog.remote_locate(origin, &a, ObjectKind::Tree).unwrap(),
            None
        );
        assert_eq!(
            catalog
                .remote_locate(backup, &a, ObjectKind::Chunk)
                .unwrap(),
            None
        );
        assert_eq!(
            catalog.remote_frame_objects(found.frame_row).unwrap(),
            [(b, ObjectKind::Tree, 0, 10), (a, ObjectKind::Chunk, 10, 10)]
        );
        // What the remote has and this store lacks, of the kinds asked for.
        assert_eq!(
            catalog
                .remote_objects_missing_here(origin, &[ObjectKind::Chunk])
                .unwrap(),
            [(a, ObjectKind::Chunk)]
        );
        let writer = catalog.writer().unwrap();
        writer
            .add_pack(&sample_pack("local", &[(a, ObjectKind::Chunk)]))
            .unwrap();
        writer.commit().unwrap();
        assert!(
            catalog
                .remote_objects_missing_here(origin, &[ObjectKind::Chunk, ObjectKind::Tree])
                .unwrap()
                .contains(&(b, ObjectKind::Tree))
        );
        assert!(
            catalog
                .remote_objects_missing_here(origin, &[ObjectKind::Chunk])
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn retaining_remote_packs_forgets_the_others_and_their_objects() {
        let (_dir, mut catalog, origin, _) = with_remotes();
        let (a, b) = (ObjectId::of(b"a"), ObjectId::of(b"b"));
        let kept = sample_pack("kept", &[(a, ObjectKind::Chunk)]);
        let gone = sample_pack("gone", &[(b, ObjectKind::Chunk)]);
        let writer = catalog.writer().unwrap();
        for pack in [&kept, &gone] {
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
        }
        writer
            .retain_remote_packs(origin, &HashSet::from([kept.id]))
            .unwrap();
        writer.commit().unwrap();
        assert_eq!(
            catalog.remote_packs(origin).unwrap(),
            HashSet::from([kept.id])
        );
        assert!(
            catalog
                .remote_locate(origin, &a, ObjectKind::Chunk)
                .unwrap()
                .is_some()
        );
        assert!(
            catalog
                .remote_locate(origin, &b, ObjectKind::Chunk)
                .unwrap()
                .is_none()
        );
    }

    fn order(catalog: &Catalog) -> Vec<(String, u32)> {
        catalog
            .remotes()
            .unwrap()
            .into_iter()
            .map(|r| (r.name, r.position))
            .collect()
    }

    fn named(names: &[&str]) -> Vec<(String, u32)> {
        names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.to_string(), i as u32 + 1))
            .collect()
    }

    /// A remote added goes last; `set_remote_order` puts the named ones first, in the order
    /// given, the rest after as they were; a removal closes the gap; the ref log replays to
    /// the same order (what `dsv repair` restores), and its snapshot does too.
    #[test]
    fn the_read_order_is_kept_changed_and_logged() {
        let (_dir, mut catalog, _, _) = with_remotes();
        let writer = catalog.writer().unwrap();
        writer
            .add_remote("near", "file:///n", &BTreeMap::new())
            .unwrap();
        writer.commit().unwrap();
        assert_eq!(order(&catalog), named(&["origin", "backup", "near"]));
        let writer = catalog.writer().unwrap();
        let new = writer.set_remote_order(&["near".into()]).unwrap();
        writer.commit().unwrap();
        assert_eq!(new, ["near", "origin", "backup"]);
        assert_eq!(order(&catalog), named(&["near", "origin", "backup"]));
        let writer = catalog.writer().unwrap();
        writer
            .set_remote_order(&["backup".into(), "near".into()])
            .unwrap();
        assert!(matches!(
            writer.set_remote_order(&["nope".into()]),
            Err(Error::RemoteNotFound { .. })
        ));
        writer.commit().unwrap();
        assert_eq!(order(&catalog), named(&["backup", "near", "origin"]));
        let writer = catalog.writer().unwrap();
        writer.remove_remote("near").unwrap();
        writer.commit().unwrap();
        assert_eq!(order(&catalog), named(&["backup", "origin"]));
        assert_eq!(catalog.remote("origin").unwrap().position, 2);
        let state = catalog.ref_state().unwrap();
        assert_eq!(state.remote_order, ["backup", "origin"]);
        let log = crate::reflog::read(&catalog.ref_log_path(), None).unwrap();
        assert_eq!(log.state(), state);
        // A snapshot of the state (a compacted log) gives the same order.
        let mut replayed = crate::reflog::RefState::default();
        for entry in state.entries() {
            replayed.apply(&entry);
        }
        assert_eq!(replayed, state);
    }

    fn count(catalog: &Catalog, table: &str) -> i64 {
        catalog
            .conn()
            .query_row(&format!("SELECT count(*) FROM {table}"), [], |row| {
                row.get(0)
            })
            .unwrap()
    }

    /// What `remote_locate` says of `id`: (pack, frame offset, offset in frame, through a
    /// local pack's index).
    fn located(
        catalog: &Catalog,
        remote: i64,
        id: &ObjectId,
        kind: ObjectKind,
    ) -> Option<(ObjectId, u64, u32, bool)> {
        catalog
            .remote_locate(remote, id, kind)
            .unwrap()
            .map(|l| (l.pack, l.frame.offset, l.offset, l.in_local_pack()))
    }

    /// A local pack `q` holding `c`, then a local pack `p` holding `a` (chunk), `b` (tree),
    /// `c` (chunk; `objects` keeps it in `q`) and `o` (outboard).
    fn two_local_packs(catalog: &mut Catalog) -> (crate::pack::SealedPack, [ObjectId; 4]) {
        let [a, b, c, o] = [b"a", b"b", b"c", b"o"].map(|s| ObjectId::of(s));
        let q = sample_pack("q", &[(c, ObjectKind::Chunk)]);
        let p = sample_pack(
            "p",
            &[
                (a, ObjectKind::Chunk),
                (b, ObjectKind::Tree),
                (c, ObjectKind::Chunk),
                (o, ObjectKind::Outboard),
            ],
        );
        let writer = catalog.writer().unwrap();
        writer.add_pack(&q).unwrap();
        writer.add_pack(&p).unwrap();
        writer.commit().unwrap();
        (p, [a, b, c, o])
    }

    /// The bulk lookup `dsv copy` plans with agrees with `remote_locate` object by object:
    /// own rows first, a shared local index else, each frame once, and the first object the
    /// remote lacks named.
    #[test]
    fn frames_holding_many_objects_agree_with_locating_each() {
        let (_dir, mut catalog, origin, backup) = with_remotes();
        let (p, [a, b, c, o]) = two_local_packs(&mut catalog);
        let elsewhere = sample_pack("r", &[(ObjectId::of(b"x"), ObjectKind::Chunk)]);
        let writer = catalog.writer().unwrap();
        writer
            .add_remote_pack(origin, &p.id, p.size, &p.frames, &p.objects, &[])
            .unwrap();
        writer
            .add_remote_pack(
                backup,
                &elsewhere.id,
                elsewhere.size,
                &elsewhere.frames,
                &elsewhere.objects,
                &[],
            )
            .unwrap();
        writer.commit().unwrap();
        let wanted = [
            (a, ObjectKind::Chunk),
            (b, ObjectKind::Tree),
            (c, ObjectKind::Chunk),
            (o, ObjectKind::Outboard),
        ];
        let (frames, missing) = catalog.remote_frames_holding(origin, &wanted).unwrap();
        assert_eq!(missing, None);
        let mut expected: Vec<(ObjectId, u64, i64)> = wanted
            .iter()
            .map(|(id, kind)| {
                let l = catalog.remote_locate(origin, id, *kind).unwrap().unwrap();
                (l.pack, l.frame.offset, l.frame_row)
            })
            .collect();
        expected.sort();
        expected.dedup();
        let mut got: Vec<(ObjectId, u64, i64)> = frames
            .iter()
            .map(|(pack, f, row)| (*pack, f.offset, *row))
            .collect();
        got.sort();
        assert_eq!(got, expected);
        // Asked again with one object the remote lacks: it is named, and nothing is kept of the
        // first call's table.
        let lacking = (ObjectId::of(b"nowhere"), ObjectKind::Chunk);
        let (frames, missing) = catalog
            .remote_frames_holding(origin, &[(a, ObjectKind::Chunk), lacking])
            .unwrap();
        assert_eq!(missing, Some(lacking));
        assert_eq!(frames.len(), 1);
        let (frames, missing) = catalog.remote_frames_holding(backup, &wanted).unwrap();
        assert!(frames.is_empty());
        assert!(missing.is_some());
    }

    #[test]
    fn a_remote_pack_that_is_a_local_pack_shares_its_index() {
        let (_dir, mut catalog, origin, backup) = with_remotes();
        let (p, [a, b, c, o]) = two_local_packs(&mut catalog);
        assert!(catalog.outboards_missing_on(origin).unwrap());
        let writer = catalog.writer().unwrap();
        writer
            .add_remote_pack(origin, &p.id, p.size, &p.frames, &p.objects, &[])
            .unwrap();
        writer.commit().unwrap();
        assert_eq!(catalog.remote_packs(origin).unwrap(), HashSet::from([p.id]));
        // Only `c`, which `objects` locates in another local pack, has rows of its own.
        assert_eq!(count(&catalog, "remote_objects"), 1);
        assert_eq!(count(&catalog, "remote_frames"), 1);
        let frame = p.frames[0].offset;
        assert_eq!(
            located(&catalog, origin, &a, ObjectKind::Chunk),
            Some((p.id, frame, 0, true))
        );
        assert_eq!(
            located(&catalog, origin, &b, ObjectKind::Tree),
            Some((p.id, frame, 10, true))
        );
        assert_eq!(
            located(&catalog, origin, &c, ObjectKind::Chunk),
            Some((p.id, frame, 20, false))
        );
        // The kind is part of the key; another remote has none of it.
        assert_eq!(located(&catalog, origin, &a, ObjectKind::Tree), None);
        assert_eq!(located(&catalog, backup, &a, ObjectKind::Chunk), None);
        assert_eq!(located(&catalog, backup, &c, ObjectKind::Chunk), None);
        assert!(!catalog.outboards_missing_on(origin).unwrap());
        assert!(catalog.outboards_missing_on(backup).unwrap());
        // Everything the remote holds is here.
        let all = [ObjectKind::Chunk, ObjectKind::Tree, ObjectKind::Outboard];
        assert!(
            catalog
                .remote_objects_missing_here(origin, &all)
                .unwrap()
                .is_empty()
        );
        // A shared frame lists the objects `objects` locates in it.
        let found = catalog
            .remote_locate(origin, &a, ObjectKind::Chunk)
            .unwrap()
            .unwrap();
        assert_eq!(
            catalog.remote_frame_objects(found.frame_row).unwrap(),
            [
                (a, ObjectKind::Chunk, 0, 10),
                (b, ObjectKind::Tree, 10, 10),
                (o, ObjectKind::Outboard, 30, 10)
            ]
        );
        // Known already: left as it is.
        let writer = catalog.writer().unwrap();
        writer
            .add_remote_pack(origin, &p.id, p.size, &p.frames, &p.objects, &[])
            .unwrap();
        writer.commit().unwrap();
        assert_eq!(count(&catalog, "remote_objects"), 1);
        catalog.check_integrity().unwrap();
    }

    #[test]
    fn a_remote_pack_of_another_size_than_the_local_one_is_indexed_on_its_own() {
        let (_dir, mut catalog, origin, _) = with_remotes();
        let (p, [a, ..]) = two_local_packs(&mut catalog);
        let writer = catalog.writer().unwrap();
        writer
            .add_remote_pack(origin, &p.id, p.size + 1, &p.frames, &p.objects, &[])
            .unwrap();
        writer.commit().unwrap();
        assert_eq!(count(&catalog, "remote_objects"), 4);
        assert_eq!(
            located(&catalog, origin, &a, ObjectKind::Chunk),
            Some((p.id, p.frames[0].offset, 0, false))
        );
    }

    #[test]
    fn dropping_a_local_pack_copies_its_index_to_the_remote_packs_sharing_it() {
        let (_dir, mut catalog, origin, backup) = with_remotes();
        let (p, [a, b, c, o]) = two_local_packs(&mut catalog);
        let writer = catalog.writer().unwrap();
        for remote in [origin, backup] {
            writer
                .add_remote_pack(remote, &p.id, p.size, &p.frames, &p.objects, &[])
                .unwrap();
        }
        writer.commit().unwrap();
        let writer = catalog.writer().unwrap();
        writer.drop_packs(&HashSet::from([p.id])).unwrap();
        writer.commit().unwrap();
        assert!(!catalog.has_object(&a, ObjectKind::Chunk).unwrap());
        let frame = p.frames[0].offset;
        for remote in [origin, backup] {
            assert_eq!(catalog.remote_packs(remote).unwrap(), HashSet::from([p.id]));
            for (id, kind, offset) in [
                (a, ObjectKind::Chunk, 0),
                (b, ObjectKind::Tree, 10),
                (c, ObjectKind::Chunk, 20),
                (o, ObjectKind::Outboard, 30),
            ] {
                assert_eq!(
                    located(&catalog, remote, &id, kind),
                    Some((p.id, frame, offset, false)),
                    "{kind:?} at {offset}"
                );
            }
            let found = catalog
                .remote_locate(remote, &a, ObjectKind::Chunk)
                .unwrap()
                .unwrap();
            assert_eq!(
                catalog.remote_frame_objects(found.frame_row).unwrap().len(),
                4
            );
            let mut missing = catalog
                .remote_objects_missing_here(remote, &[ObjectKind::Chunk, ObjectKind::Tree])
                .unwrap();
            missing.sort_by_key(|(id, _)| *id);
            let mut expected = vec![(a, ObjectKind::Chunk), (b, ObjectKind::Tree)];
            expected.sort_by_key(|(id, _)| *id);
            assert_eq!(missing, expected);
        }
        // One frame per remote pack: the copy reuses the frame `c` had already.
        assert_eq!(count(&catalog, "remote_frames"), 2);
        assert_eq!(count(&catalog, "remote_objects"), 8);
        let shared: i64 = catalog
            .conn()
            .query_row(
                "SELECT count(*) FROM remote_packs WHERE local_index = 1",
                [],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(shared, 0);
        catalog.check_integrity().unwrap();
    }

    #[test]
    fn forgetting_a_shared_remote_pack_keeps_the_local_one() {
        let (_dir, mut catalog, origin, _) = with_remotes();
        let (p, [a, _, c, _]) = two_local_packs(&mut catalog);
        let writer = catalog.writer().unwrap();
        writer
            .add_remote_pack(origin, &p.id, p.size, &p.frames, &p.objects, &[])
            .unwrap();
        writer.retain_remote_packs(origin, &HashSet::new()).unwrap();
        writer.commit().unwrap();
        assert!(catalog.remote_packs(origin).unwrap().is_empty());
        assert_eq!(located(&catalog, origin, &a, ObjectKind::Chunk), None);
        assert_eq!(located(&catalog, origin, &c, ObjectKind::Chunk), None);
        assert_eq!(count(&catalog, "remote_objects"), 0);
        assert_eq!(count(&catalog, "remote_frames"), 0);
        assert!(catalog.has_pack(&p.id).unwrap());
        assert!(catalog.has_object(&a, ObjectKind::Chunk).unwrap());
        catalog.check_integrity().unwrap();
    }

    /// A pack `seed` of one frame holding chunk `a`: a delta frame against `base` when given,
    /// else a plain (zstd) one.
    fn one_chunk_pack(seed: &str, a: ObjectId, base: Option<ObjectId>) -> crate::pack::SealedPack {
        let mut pack = sample_pack(seed, &[(a, ObjectKind::Chunk)]);
        if let Some(base) = base {
            pack.frames[0].compression = crate::pack::Compression::Delta;
            pack.deltas = vec![crate::pack::FrameBases {
                frame: 0,
                bases: vec![base],
            }];
        }
        pack
    }

    fn record(catalog: &mut Catalog, remote: i64, packs: &[&crate::pack::SealedPack]) {
        let writer = catalog.writer().unwrap();
        for pack in packs {
            writer
                .add_remote_pack(
                    remote,
                    &pack.id,
                    pack.size,
                    &pack.frames,
                    &pack.objects,
                    &pack.deltas,
                )
                .unwrap();
        }
        writer.commit().unwrap();
    }

    /// Two copies of one chunk on one remote, a delta (here a cycle: `a` against `b` and `b`
    /// against `a`) and a plain one: the plain copy is the one recorded, in either order the
    /// packs are listed, whether it is in the remote's own index rows or in a local pack
    /// whose index the remote shares; and a chunk held only as deltas keeps the first.
    #[test]
    fn of_a_plain_and_a_delta_copy_of_a_chunk_on_a_remote_the_plain_one_is_recorded() {
        let (_dir, mut catalog, origin, backup) = with_remotes();
        let (a, b) = (ObjectId::of(b"a"), ObjectId::of(b"b"));
        let a_delta = one_chunk_pack("a against b", a, Some(b));
        let b_delta = one_chunk_pack("b against a", b, Some(a));
        let plain = sample_pack("plain", &[(a, ObjectKind::Chunk), (b, ObjectKind::Chunk)]);
        let plain_at = |catalog: &Catalog, remote: i64| {
            [a, b].map(|id| {
                let found = catalog
                    .remote_locate(remote, &id, ObjectKind::Chunk)
                    .unwrap()
                    .unwrap();
                assert!(
                    catalog
                        .remote_frame_bases(found.frame_row)
                        .unwrap()
                        .is_empty()
                );
                assert!(catalog.remote_chunk_bases(remote, &id).unwrap().is_empty());
                (found.pack, found.in_local_pack())
            })
        };
        // The deltas listed first, then the plain pack; and the other way round.
        record(&mut catalog, origin, &[&a_delta, &b_delta, &plain]);
        record(&mut catalog, backup, &[&plain, &b_delta, &a_delta]);
        for remote in [origin, backup] {
            assert_eq!(plain_at(&catalog, remote), [(plain.id, false); 2]);
            assert!(
                catalog
                    .remote_delta_bases_of(remote, &[a, b])
                    .unwrap()
                    .is_empty()
            );
            let (frames, missing) = catalog
                .remote_frames_holding(remote, &[(a, ObjectKind::Chunk), (b, ObjectKind::Chunk)])
                .unwrap();
            assert_eq!(missing, None);
            assert_eq!(
                frames.iter().map(|f| (f.0, f.1)).collect::<Vec<_>>(),
                [(plain.id, plain.frames[0])]
            );
        }
        // Only deltas: the first recorded stays.
        let writer = catalog.writer().unwrap();
        writer
            .add_remote("third", "file:///c", &BTreeMap::new())
            .unwrap();
        writer.commit().unwrap();
        let third = catalog.remote("third").unwrap().id;
        let a_other = one_chunk_pack("a against c", a, Some(ObjectId::of(b"c")));
        record(&mut catalog, third, &[&a_delta, &a_other]);
        assert_eq!(
            catalog.remote_chunk_bases(third, &a).unwrap(),
            [b],
            "a delta does not replace a delta"
        );

        // A local pack holding them plain, which the remote holds too (a pushed pack): its
        // shared index wins over the deltas, listed before or after it.
        let (_dir, mut catalog, origin, backup) = with_remotes();
        let writer = catalog.writer().unwrap();
        writer.add_pack(&plain).unwrap();
        writer.commit().unwrap();
        record(&mut catalog, origin, &[&a_delta, &plain, &b_delta]);
        record(&mut catalog, backup, &[&plain, &a_delta, &b_delta]);
        for remote in [origin, backup] {
            assert_eq!(plain_at(&catalog, remote), [(plain.id, true); 2]);
            assert!(
                catalog
                    .remote_delta_bases_of(remote, &[a, b])
                    .unwrap()
                    .is_empty()
            );
        }
    }

    #[test]
    fn removing_a_remote_forgets_its_refs_and_pack_indexes() {
        let (_dir, mut catalog, origin, _) = with_remotes();
        let a = ObjectId::of(b"a");
        let pack = sample_pack("p", &[(a, ObjectKind::Outboard)]);
        let writer = catalog.writer().unwrap();
        writer
            .set_remote_ref(origin, &reference("ds", None, a))
            .unwrap();
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
        writer
            .add_pack(&sample_pack("local", &[(a, ObjectKind::Outboard)]))
            .unwrap();
        writer.commit().unwrap();
        assert!(!catalog.outboards_missing_on(origin).unwrap());
        let writer = catalog.writer().unwrap();
        writer.remove_remote("origin").unwrap();
        writer.commit().unwrap();
        assert!(catalog.remote_refs(origin).unwrap().is_empty());
        assert!(catalog.remote_packs(origin).unwrap().is_empty());
        assert!(
            catalog
                .remote_locate(origin, &a, ObjectKind::Outboard)
                .unwrap()
                .is_none()
        );
        assert!(catalog.outboards_missing_on(origin).unwrap());
        catalog.check_integrity().unwrap();
    }

    #[test]
    fn setting_a_head_files_the_versions_it_reaches_under_that_dataset() {
        let (_dir, mut catalog) = new_catalog();
        // Versions recorded from their objects, under the name they were committed to.
        let (first, v1) = sample_version("old", None, 1);
        let (second, v2) = sample_version("old", Some(first), 2);
        let writer = catalog.writer().unwrap();
        writer.record_version(&first, &v1).unwrap();
        writer.record_version(&second, &v2).unwrap();
        writer.set_head("new", &second).unwrap();
        writer.commit().unwrap();
        assert_eq!(catalog.head("new").unwrap(), Some(second));
        assert_eq!(
            catalog.version_record(&first).unwrap().version.dataset,
            "new"
        );
        // The old name, left with nothing, is gone.
        assert!(!catalog.has_dataset("old").unwrap());
        // A version its own dataset's head still reaches stays filed there.
        let ids = add_line(&mut catalog, "kept", 2);
        let writer = catalog.writer().unwrap();
        writer.set_head("branch", &ids[0]).unwrap();
        writer.commit().unwrap();
        assert_eq!(
            catalog.version_record(&ids[0]).unwrap().version.dataset,
            "kept"
        );
        assert_eq!(catalog.versions_of("branch").unwrap(), [ids[0]]);
    }

    #[test]
    fn a_version_object_without_a_version_row_is_unrecorded() {
        let (_dir, mut catalog) = new_catalog();
        let ids = add_line(&mut catalog, "ds", 1);
        let fetched = ObjectId::of(b"fetched version");
        let writer = catalog.writer().unwrap();
        writer
            .add_pack(&sample_pack(
                "p",
                &[
                    (ids[0], ObjectKind::Version),
                    (fetched, ObjectKind::Version),
                ],
            ))
            .unwrap();
        writer.commit().unwrap();
        assert_eq!(catalog.unrecorded_versions().unwrap(), [fetched]);
    }
}
