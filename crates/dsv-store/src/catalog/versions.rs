//! Datasets, versions and tags.

use rusqlite::{OptionalExtension, Row, params};

use super::{Catalog, CatalogWriter, unix_now};
use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::object::Version;
use crate::reflog::RefLogEntry;

/// A version as the catalog records it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct VersionRecord {
    /// The version id.
    pub id: ObjectId,
    /// Its fields, with `dataset` the dataset that holds it now: after a rename that differs
    /// from the name its object recorded when it was committed (see [`VersionRecord::agrees_with`]).
    #[serde(flatten)]
    pub version: Version,
}

impl VersionRecord {
    /// True when `stored`, the version's object, agrees with this record in every field the
    /// object fixes, its dataset aside: the object names the dataset it was committed to and
    /// is immutable, while which dataset holds the version is the catalog's (and a ref's)
    /// answer, which a rename changes.
    pub fn agrees_with(&self, stored: &Version) -> bool {
        let Version {
            dataset: _,
            tree,
            parent,
            author,
            time,
            files,
            bytes,
            source,
            provenance,
            message,
        } = stored;
        let v = &self.version;
        (
            tree, parent, author, time, files, bytes, source, provenance, message,
        ) == (
            &v.tree,
            &v.parent,
            &v.author,
            &v.time,
            &v.files,
            &v.bytes,
            &v.source,
            &v.provenance,
            &v.message,
        )
    }
}

/// One dataset with its head.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DatasetSummary {
    /// The dataset's name.
    pub name: String,
    /// The newest version, if any.
    pub head: Option<ObjectId>,
    /// Number of versions.
    pub versions: u64,
    /// Files in the head version.
    pub files: u64,
    /// Bytes in the head version.
    pub bytes: u64,
    /// When the head was made (Unix seconds).
    pub updated: Option<i64>,
}

const VERSION_COLUMNS: &str = "v.id, d.name, v.tree, v.parent, v.author, v.created_at, v.file_count, v.byte_count, v.source, v.message, v.provenance";

fn id_column(row: &Row<'_>, index: usize) -> rusqlite::Result<ObjectId> {
    let bytes: Vec<u8> = row.get(index)?;
    ObjectId::from_slice(&bytes).ok_or(rusqlite::Error::InvalidColumnType(
        index,
        "id".into(),
        rusqlite::types::Type::Blob,
    ))
}

fn version_row(row: &Row<'_>) -> rusqlite::Result<VersionRecord> {
    let parent: Option<Vec<u8>> = row.get(3)?;
    Ok(VersionRecord {
        id: id_column(row, 0)?,
        version: Version {
            dataset: row.get(1)?,
            tree: id_column(row, 2)?,
            parent: parent.as_deref().and_then(ObjectId::from_slice),
            author: row.get(4)?,
            time: row.get(5)?,
            files: row.get::<_, i64>(6)? as u64,
            bytes: row.get::<_, i64>(7)? as u64,
            source: row.get(8)?,
            provenance: row
                .get::<_, Option<Vec<u8>>>(10)?
                .as_deref()
                .and_then(ObjectId::from_slice),
            message: row.get(9)?,
        },
    })
}

impl Catalog {
    /// The id of dataset `name`'s head, `Ok(None)` when it has no versions.
    ///
    /// # Errors
    /// [`Error::DatasetNotFound`] when there is no such dataset.
    pub fn head(&self, name: &str) -> Result<Option<ObjectId>> {
        match self.dataset_head(name)? {
            None => Err(Error::DatasetNotFound {
                name: name.to_string(),
                closest: self.closest_dataset(name)?,
            }),
            Some(head) => Ok(head),
        }
    }

    /// True when a dataset `name` is recorded (with a head or not, even with every version
    /// removed).
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn has_dataset(&self, name: &str) -> Result<bool> {
        Ok(self.dataset_head(name)?.is_some())
    }

    /// `None` when there is no dataset `name`, else its head (`Some(None)`: no versions).
    fn dataset_head(&self, name: &str) -> Result<Option<Option<ObjectId>>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT head FROM datasets WHERE name = ?1")?;
        let head: Option<Option<Vec<u8>>> = stmt.query_row([name], |row| row.get(0)).optional()?;
        Ok(head.map(|h| h.as_deref().and_then(ObjectId::from_slice)))
    }

    /// The name of the dataset (with a head) closest to `name`, when it is close enough to be
    /// a typo: a Damerau–Levenshtein distance of at most 2, and at most a third of the name.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn closest_dataset(&self, name: &str) -> Result<Option<String>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT name FROM datasets WHERE head IS NOT NULL")?;
        let names = stmt.query_map([], |row| row.get::<_, String>(0))?;
        let mut best: Option<(usize, String)> = None;
        for candidate in names {
            let candidate = candidate?;
            let distance = strsim::damerau_levenshtein(name, &candidate);
            let close = distance <= 2 && distance * 3 <= candidate.chars().count().max(3);
            if close && best.as_ref().is_none_or(|(d, _)| distance < *d) {
                best = Some((distance, candidate));
            }
        }
        Ok(best.map(|(_, name)| name))
    }

    /// As [`Catalog::head`], but `Ok(None)` for a dataset that does not exist yet.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn head_or_none(&self, name: &str) -> Result<Option<ObjectId>> {
        // Not through `head`: a new dataset is no mistake, so no typo suggestion is computed.
        Ok(self.dataset_head(name)?.flatten())
    }

    /// The version `id`, if the catalog has it.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn version(&self, id: &ObjectId) -> Result<Option<VersionRecord>> {
        let sql = format!(
            "SELECT {VERSION_COLUMNS} FROM versions v JOIN datasets d ON d.id = v.dataset WHERE v.id = ?1"
        );
        let mut stmt = self.conn.prepare_cached(&sql)?;
        Ok(stmt.query_row([&id.0[..]], version_row).optional()?)
    }

    /// The version `id`, which the catalog must have (a dataset head, a parent, a workspace's
    /// version).
    ///
    /// # Errors
    /// [`Error::MissingObject`] when it is absent; [`Error::Catalog`].
    pub fn version_record(&self, id: &ObjectId) -> Result<VersionRecord> {
        self.version(id)?.ok_or_else(|| Error::MissingObject {
            id: id.to_hex(),
            what: "version",
        })
    }

    /// Versions of dataset `name` ([`MEMBERS`]) whose hex id starts with `prefix`.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn versions_with_prefix(&self, name: &str, prefix: &str) -> Result<Vec<ObjectId>> {
        // Ids are BLOBs: compare on their hex form. Datasets rarely hold more than thousands of versions.
        let mut stmt = self.conn.prepare_cached(&format!(
            "{MEMBERS} SELECT v.id FROM versions v JOIN members m ON m.id = v.id WHERE lower(hex(v.id)) LIKE ?2 || '%'"
        ))?;
        let ids = stmt.query_map(params![name, prefix], |row| id_column(row, 0))?;
        Ok(ids.collect::<rusqlite::Result<_>>()?)
    }

    /// The version tag `tag` of dataset `name` names, if any.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn tag(&self, name: &str, tag: &str) -> Result<Option<ObjectId>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT t.version FROM tags t JOIN datasets d ON d.id = t.dataset WHERE d.name = ?1 AND t.name = ?2",
        )?;
        Ok(stmt
            .query_row(params![name, tag], |row| id_column(row, 0))
            .optional()?)
    }

    /// Every tag of dataset `name` with the version it names, sorted by tag.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn tags(&self, name: &str) -> Result<Vec<(String, ObjectId)>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT t.name, t.version FROM tags t JOIN datasets d ON d.id = t.dataset WHERE d.name = ?1 ORDER BY t.name",
        )?;
        let rows = stmt.query_map([name], |row| Ok((row.get(0)?, id_column(row, 1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Every version of dataset `name` ([`MEMBERS`]), newest first (by creation time, then
    /// id).
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn versions_of(&self, name: &str) -> Result<Vec<ObjectId>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "{MEMBERS} SELECT v.id FROM versions v JOIN members m ON m.id = v.id ORDER BY v.created_at DESC, v.id"
        ))?;
        let rows = stmt.query_map([name], |row| id_column(row, 0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Tags that name version `id`, sorted.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn tags_of(&self, id: &ObjectId) -> Result<Vec<String>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT name FROM tags WHERE version = ?1 ORDER BY name")?;
        let names = stmt.query_map([&id.0[..]], |row| row.get(0))?;
        Ok(names.collect::<rusqlite::Result<_>>()?)
    }

    /// True when `ancestor` is `descendant` or one of its parents, walking the version table
    /// (a version not in it ends the walk). A version id covers its parent's, so parents
    /// never form a cycle; a damaged catalog's rows might, and the walk stops there.
    ///
    /// # Errors
    /// [`Error::Catalog`]; [`Error::Corrupt`] (naming the catalog) when the parents recorded
    /// for `descendant` lead back to a version already walked.
    pub fn is_ancestor(&self, ancestor: &ObjectId, descendant: &ObjectId) -> Result<bool> {
        let mut seen = std::collections::HashSet::new();
        let mut next = Some(*descendant);
        while let Some(id) = next {
            if id == *ancestor {
                return Ok(true);
            }
            if !seen.insert(id) {
                return Err(Error::corrupt(
                    &self.path,
                    format!(
                        "the parents recorded for version {} form a cycle through {}",
                        descendant.short(),
                        id.short()
                    ),
                ));
            }
            next = self.version(&id)?.and_then(|r| r.version.parent);
        }
        Ok(false)
    }

    /// Every dataset, sorted by name, with its head's counts.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn datasets(&self) -> Result<Vec<DatasetSummary>> {
        let mut stmt = self.conn.prepare(
            "SELECT d.name, d.head, v.file_count, v.byte_count, v.created_at
             FROM datasets d LEFT JOIN versions v ON v.id = d.head ORDER BY d.name",
        )?;
        let rows = stmt.query_map([], |row| {
            let head: Option<Vec<u8>> = row.get(1)?;
            Ok(DatasetSummary {
                name: row.get(0)?,
                head: head.as_deref().and_then(ObjectId::from_slice),
                versions: 0,
                files: row.get::<_, Option<i64>>(2)?.unwrap_or(0) as u64,
                bytes: row.get::<_, Option<i64>>(3)?.unwrap_or(0) as u64,
                updated: row.get(4)?,
            })
        })?;
        let mut summaries: Vec<DatasetSummary> = rows.collect::<rusqlite::Result<_>>()?;
        // Counted as `log` lists them ([`MEMBERS`]): a few datasets, a query each.
        let mut count = self.conn.prepare_cached(&format!(
            "{MEMBERS} SELECT count(*) FROM versions v JOIN members m ON m.id = v.id"
        ))?;
        for summary in &mut summaries {
            summary.versions = count.query_row([&summary.name], |row| row.get::<_, i64>(0))? as u64;
        }
        Ok(summaries)
    }
}

/// The versions of dataset `?1`, as `dsv log` lists them: those its head and tags reach by
/// parents, and those filed under it. Two datasets can share versions: a remote keeps the
/// old name's ref after a rename, or a dataset branches from another's version, and each
/// lists the versions its own line reaches, whichever one a version is filed under. A SQL
/// prefix defining `members(id)` for the statement after it.
pub(crate) const MEMBERS: &str = "WITH RECURSIVE
    reach(id) AS (
        SELECT head FROM datasets WHERE name = ?1 AND head IS NOT NULL
        UNION SELECT t.version FROM tags t JOIN datasets d ON d.id = t.dataset WHERE d.name = ?1
        UNION SELECT v.parent FROM versions v JOIN reach r ON v.id = r.id WHERE v.parent IS NOT NULL
    ),
    members(id) AS (
        SELECT id FROM reach
        UNION SELECT v.id FROM versions v JOIN datasets d ON d.id = v.dataset WHERE d.name = ?1
    )";

impl CatalogWriter<'_> {
    /// Records `version` (id `id`), creating its dataset if new, and moves the dataset's head to it.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn add_version(&self, id: &ObjectId, version: &Version) -> Result<()> {
        self.record_version(id, version)?;
        self.tx.execute(
            "UPDATE datasets SET head = ?1 WHERE name = ?2",
            params![&id.0[..], version.dataset],
        )?;
        self.log(RefLogEntry::Head {
            dataset: version.dataset.clone(),
            version: Some(*id),
        });
        Ok(())
    }

    /// Records `version` (id `id`), creating its dataset if new, without moving any head (a
    /// version fetched from a remote).
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn record_version(&self, id: &ObjectId, version: &Version) -> Result<()> {
        self.tx.execute(
            "INSERT OR IGNORE INTO datasets (name, head, created_at) VALUES (?1, NULL, ?2)",
            params![version.dataset, unix_now()],
        )?;
        let dataset: i64 = self.tx.query_row(
            "SELECT id FROM datasets WHERE name = ?1",
            [&version.dataset],
            |row| row.get(0),
        )?;
        self.tx.execute(
            "INSERT OR IGNORE INTO versions (id, dataset, parent, tree, author, created_at, file_count, byte_count, source, message, provenance)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                &id.0[..],
                dataset,
                version.parent.as_ref().map(|p| p.0.to_vec()),
                &version.tree.0[..],
                version.author,
                version.time,
                version.files as i64,
                version.bytes as i64,
                version.source,
                version.message,
                version.provenance.as_ref().map(|p| p.0.to_vec())
            ],
        )?;
        Ok(())
    }

    /// The head of dataset `name` as seen inside this transaction.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn head(&self, name: &str) -> Result<Option<ObjectId>> {
        let head: Option<Option<Vec<u8>>> = self
            .tx
            .query_row("SELECT head FROM datasets WHERE name = ?1", [name], |row| {
                row.get(0)
            })
            .optional()?;
        Ok(head.flatten().as_deref().and_then(ObjectId::from_slice))
    }

    /// Deletes tag `tag` of dataset `name`; returns the version it named, `None` when there
    /// was no such tag.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn delete_tag(&self, name: &str, tag: &str) -> Result<Option<ObjectId>> {
        let named: Option<Vec<u8>> = self
            .tx
            .query_row(
                "SELECT t.version FROM tags t JOIN datasets d ON d.id = t.dataset WHERE d.name = ?1 AND t.name = ?2",
                params![name, tag],
                |row| row.get(0),
            )
            .optional()?;
        let Some(named) = named.as_deref().and_then(ObjectId::from_slice) else {
            return Ok(None);
        };
        self.tx.execute(
            "DELETE FROM tags WHERE name = ?2 AND dataset = (SELECT id FROM datasets WHERE name = ?1)",
            params![name, tag],
        )?;
        self.log(RefLogEntry::Tag {
            dataset: name.to_string(),
            tag: tag.to_string(),
            version: None,
        });
        Ok(Some(named))
    }

    /// Renames dataset `old` to `new` (which must not exist): its versions, head, tags and
    /// workspaces follow. The ref log records it as the new name's head and tags set and the
    /// old name's cleared, so a repair rebuilds the same names.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn rename_dataset(&self, old: &str, new: &str) -> Result<()> {
        let head = self.head(old)?;
        let tags: Vec<(String, Vec<u8>)> = {
            let mut stmt = self.tx.prepare(
                "SELECT t.name, t.version FROM tags t JOIN datasets d ON d.id = t.dataset WHERE d.name = ?1 ORDER BY t.name",
            )?;
            let rows = stmt.query_map([old], |row| Ok((row.get(0)?, row.get(1)?)))?;
            rows.collect::<rusqlite::Result<_>>()?
        };
        self.tx.execute(
            "UPDATE datasets SET name = ?2 WHERE name = ?1",
            params![old, new],
        )?;
        for (tag, version) in &tags {
            self.log(RefLogEntry::Tag {
                dataset: old.to_string(),
                tag: tag.clone(),
                version: None,
            });
            self.log(RefLogEntry::Tag {
                dataset: new.to_string(),
                tag: tag.clone(),
                version: ObjectId::from_slice(version),
            });
        }
        self.log(RefLogEntry::Head {
            dataset: old.to_string(),
            version: None,
        });
        if head.is_some() {
            self.log(RefLogEntry::Head {
                dataset: new.to_string(),
                version: head,
            });
        }
        Ok(())
    }

    /// Names version `id` of dataset `name` as `tag`; replaces an existing tag only if `force`.
    ///
    /// # Errors
    /// [`Error::TagExists`] when the tag exists and `force` is false;
    /// [`Error::DatasetNotFound`] when there is no dataset `name`.
    pub fn set_tag(&self, name: &str, tag: &str, id: &ObjectId, force: bool) -> Result<()> {
        let dataset: i64 = self
            .tx
            .query_row("SELECT id FROM datasets WHERE name = ?1", [name], |row| {
                row.get(0)
            })
            .optional()?
            .ok_or_else(|| Error::DatasetNotFound {
                name: name.to_string(),
                closest: None,
            })?;
        let existing: Option<Vec<u8>> = self
            .tx
            .query_row(
                "SELECT version FROM tags WHERE dataset = ?1 AND name = ?2",
                params![dataset, tag],
                |row| row.get(0),
            )
            .optional()?;
        if let Some(existing) = existing {
            if existing == id.0 {
                return Ok(());
            }
            if !force {
                return Err(Error::TagExists {
                    dataset: name.to_string(),
                    tag: tag.to_string(),
                });
            }
        }
        self.tx.execute(
            "INSERT OR REPLACE INTO tags (dataset, name, version, created_at) VALUES (?1, ?2, ?3, ?4)",
            params![dataset, tag, &id.0[..], unix_now()],
        )?;
        self.log(RefLogEntry::Tag {
            dataset: name.to_string(),
            tag: tag.to_string(),
            version: Some(*id),
        });
        Ok(())
    }
}
