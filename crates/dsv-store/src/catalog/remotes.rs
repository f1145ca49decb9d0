//! Remotes: their settings, their refs as last fetched, and the indexes of their packs.

use std::collections::{BTreeMap, HashSet};

use rusqlite::{OptionalExtension, params};

use super::objects::RawLocation;
use super::{Catalog, CatalogWriter, unix_now};
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
    /// The frame's row (for [`Catalog::remote_frame_objects`]).
    pub frame_row: i64,
}

/// The remotes `conn` records, in read order, numbered 1.. as they stand (positions are kept
/// dense; a gap or a tie would still give one order: ties by name).
fn remotes_of(conn: &rusqlite::Connection, path: &std::path::Path) -> Result<Vec<RemoteRecord>> {
    let mut stmt =
        conn.prepare("SELECT id, name, url, options FROM remotes ORDER BY position, name")?;
    let rows = stmt.query_map([], |row| {
        Ok((
            row.get::<_, i64>(0)?,
            row.get::<_, String>(1)?,
            row.get::<_, String>(2)?,
            row.get::<_, String>(3)?,
        ))
    })?;
    let mut remotes = Vec::new();
    for row in rows {
        let (id, name, url, options) = row?;
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
        let mut stmt = self.conn.prepare(
            "SELECT dataset, tag, version, etag, object_version, last_modified, fetched_at
             FROM remote_refs WHERE remote = ?1 ORDER BY dataset, tag",
        )?;
        let rows = stmt.query_map([remote], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, Vec<u8>>(2)?,
                row.get::<_, Option<String>>(3)?,
                row.get::<_, Option<String>>(4)?,
                row.get::<_, i64>(5)?,
                row.get::<_, i64>(6)?,
            ))
        })?;
        let mut refs = Vec::new();
        for row in rows {
            let (dataset, tag, version, etag, object_version, last_modified, fetched_at) = row?;
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
            .prepare("SELECT pack_id FROM remote_packs WHERE remote = ?1")?;
        let rows = stmt.query_map([remote], |row| row.get::<_, Vec<u8>>(0))?;
        let mut packs = HashSet::new();
        for row in rows {
            packs.insert(parse_id(&row?, self)?);
        }
        Ok(packs)
    }

    /// Where `remote` keeps object `id` of `kind`, if any pack it holds has it.
    ///
    /// # Errors
    /// [`Error::Catalog`]; [`Error::Corrupt`] for an unknown compression byte.
    pub fn remote_locate(
        &self,
        remote: i64,
        id: &ObjectId,
        kind: ObjectKind,
    ) -> Result<Option<RemoteLocation>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT p.pack_id, f.offset, f.stored_length, f.raw_length, f.compression, o.offset, o.length, f.id
             FROM remote_objects o JOIN remote_frames f ON f.id = o.frame
             JOIN remote_packs p ON p.id = f.pack
             WHERE o.remote = ?1 AND o.id = ?2 AND o.kind = ?3",
        )?;
        let row = stmt
            .query_row(params![remote, &id.0[..], kind as u8], |row| {
                Ok((RawLocation::read(row)?, row.get::<_, i64>(7)?))
            })
            .optional()?;
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

    /// Every object of a remote frame: (id, kind, offset, length), in frame order.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn remote_frame_objects(
        &self,
        frame_row: i64,
    ) -> Result<Vec<(ObjectId, ObjectKind, u32, u32)>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id, kind, offset, length FROM remote_objects WHERE frame = ?1 ORDER BY offset",
        )?;
        let rows = stmt.query_map([frame_row], |row| {
            Ok((
                row.get::<_, Vec<u8>>(0)?,
                row.get::<_, u8>(1)?,
                row.get::<_, u32>(2)?,
                row.get::<_, u32>(3)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (id, kind, offset, length) = row?;
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
        let mut stmt = self.conn.prepare(
            "SELECT o.id FROM objects o WHERE o.kind = ?1
               AND NOT EXISTS (SELECT 1 FROM versions v WHERE v.id = o.id)",
        )?;
        let rows = stmt.query_map([ObjectKind::Version as u8], |row| row.get::<_, Vec<u8>>(0))?;
        let mut out = Vec::new();
        for row in rows {
            out.push(parse_id(&row?, self)?);
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
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM objects o WHERE o.kind = ?2 AND NOT EXISTS
                   (SELECT 1 FROM remote_objects r
                     WHERE r.remote = ?1 AND r.id = o.id AND r.kind = o.kind))",
            )?
            .query_row(
                rusqlite::params![remote, ObjectKind::Outboard as u8],
                |row| row.get::<_, bool>(0),
            )?;
        Ok(missing)
    }

    /// Every object `remote` holds that this store lacks, of the given kinds.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn remote_objects_missing_here(
        &self,
        remote: i64,
        kinds: &[ObjectKind],
    ) -> Result<Vec<(ObjectId, ObjectKind)>> {
        let mut stmt = self.conn.prepare(
            "SELECT r.id, r.kind FROM remote_objects r
             WHERE r.remote = ?1
               AND NOT EXISTS (SELECT 1 FROM objects o WHERE o.id = r.id AND o.kind = r.kind)",
        )?;
        let rows = stmt.query_map([remote], |row| {
            Ok((row.get::<_, Vec<u8>>(0)?, row.get::<_, u8>(1)?))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (id, kind) = row?;
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
        let added = self.tx.execute(
            "INSERT OR IGNORE INTO remotes (name, url, options, created_at, position)
             VALUES (?1, ?2, ?3, ?4, (SELECT coalesce(max(position), 0) + 1 FROM remotes))",
            params![name, url, options, unix_now()],
        )?;
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
            .execute("DELETE FROM remotes WHERE name = ?1", [name])?
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
            .prepare_cached("SELECT name FROM remotes ORDER BY position, name")?;
        let names = stmt
            .query_map([], |row| row.get::<_, String>(0))?
            .collect::<rusqlite::Result<Vec<String>>>()?;
        Ok(names)
    }

    /// Gives remotes `order` the positions 1, 2, ... in that order.
    fn number_remotes(&self, order: &[String]) -> Result<()> {
        let mut stmt = self
            .tx
            .prepare_cached("UPDATE remotes SET position = ?1 WHERE name = ?2")?;
        for (index, name) in order.iter().enumerate() {
            stmt.execute(params![index as i64 + 1, name])?;
        }
        Ok(())
    }

    /// Records `reference` as `remote`'s current ref.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn set_remote_ref(&self, remote: i64, reference: &RemoteRef) -> Result<()> {
        self.tx.execute(
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
        )?;
        Ok(())
    }

    /// Forgets a ref the remote no longer has.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn remove_remote_ref(&self, remote: i64, dataset: &str, tag: Option<&str>) -> Result<()> {
        self.tx.execute(
            "DELETE FROM remote_refs WHERE remote = ?1 AND dataset = ?2 AND tag = ?3",
            params![remote, dataset, tag.unwrap_or("")],
        )?;
        Ok(())
    }

    /// Records that `remote` holds pack `pack` of `size` bytes with this index. A pack already
    /// known is left as it is.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn add_remote_pack(
        &self,
        remote: i64,
        pack: &ObjectId,
        size: u64,
        frames: &[FrameRecord],
        objects: &[ObjectRecord],
    ) -> Result<()> {
        let added = self.tx.execute(
            "INSERT OR IGNORE INTO remote_packs (remote, pack_id, size) VALUES (?1, ?2, ?3)",
            params![remote, &pack.0[..], size as i64],
        )?;
        if added == 0 {
            return Ok(());
        }
        let pack_row = self.tx.last_insert_rowid();
        self.index_pack(
            "INSERT INTO remote_frames (pack, offset, stored_length, raw_length, compression) VALUES (?1, ?2, ?3, ?4, ?5)",
            "INSERT OR IGNORE INTO remote_objects (id, kind, frame, offset, length, remote) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            Some(remote),
            pack_row,
            frames,
            objects,
        )
    }

    /// Forgets the packs of `remote` not in `present` (deleted on the remote).
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn retain_remote_packs(&self, remote: i64, present: &HashSet<ObjectId>) -> Result<()> {
        let mut stmt = self
            .tx
            .prepare("SELECT id, pack_id FROM remote_packs WHERE remote = ?1")?;
        let rows: Vec<(i64, Vec<u8>)> = stmt
            .query_map([remote], |row| Ok((row.get(0)?, row.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        for (row, pack) in rows {
            if ObjectId::from_slice(&pack).is_none_or(|id| !present.contains(&id)) {
                self.tx.execute(
                    "DELETE FROM remote_objects WHERE frame IN (SELECT id FROM remote_frames WHERE pack = ?1)",
                    [row],
                )?;
                self.tx
                    .execute("DELETE FROM remote_packs WHERE id = ?1", [row])?;
            }
        }
        Ok(())
    }

    /// Moves dataset `name`'s head to `id` (a version the catalog has), creating the dataset.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn set_head(&self, name: &str, id: &ObjectId) -> Result<()> {
        self.tx.execute(
            "INSERT OR IGNORE INTO datasets (name, head, created_at) VALUES (?1, NULL, ?2)",
            params![name, unix_now()],
        )?;
        self.tx.execute(
            "UPDATE datasets SET head = ?1 WHERE name = ?2",
            params![&id.0[..], name],
        )?;
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
        let dataset: i64 =
            self.tx
                .query_row("SELECT id FROM datasets WHERE name = ?1", [name], |row| {
                    row.get(0)
                })?;
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
            )?;
            let rows = stmt.query_map(params![&id.0[..], dataset], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })?;
            rows.collect::<rusqlite::Result<_>>()?
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
                .optional()?;
            if let Some(old_name) = old_name {
                let reached: bool = self.tx.query_row(
                    &format!(
                        "{} SELECT EXISTS (SELECT 1 FROM reach WHERE id = ?2)",
                        crate::catalog::versions::MEMBERS
                    ),
                    params![old_name, version],
                    |row| row.get(0),
                )?;
                if reached {
                    continue;
                }
            }
            self.tx.execute(
                "UPDATE versions SET dataset = ?2 WHERE id = ?1",
                params![version, dataset],
            )?;
            left.insert(*old);
        }
        for old in left {
            self.tx.execute(
                "DELETE FROM datasets WHERE id = ?1 AND head IS NULL
                   AND NOT EXISTS (SELECT 1 FROM versions WHERE dataset = ?1)
                   AND NOT EXISTS (SELECT 1 FROM tags WHERE dataset = ?1)
                   AND NOT EXISTS (SELECT 1 FROM workspaces WHERE dataset = ?1)",
                [old],
            )?;
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
            .add_remote_pack(origin, &pack.id, pack.size, &pack.frames, &pack.objects)
            .unwrap();
        // Known already: left as it is.
        writer
            .add_remote_pack(origin, &pack.id, 1, &pack.frames, &[])
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
                .add_remote_pack(origin, &pack.id, pack.size, &pack.frames, &pack.objects)
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
            .add_remote_pack(origin, &pack.id, pack.size, &pack.frames, &pack.objects)
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
