//! Datasets, versions and tags.

use rusqlite::{OptionalExtension, Row, params};

use super::{Catalog, CatalogWriter, SqliteResultExt, unix_now};
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

/// The candidate closest to `name` when it is close enough to be a typo of it, else `None`.
///
/// Closest first: a candidate equal to `name` but for letter case or leading zeros of its
/// numbers (`v1` and `v01`, `Covid` and `covid`); then the smallest Damerau–Levenshtein
/// distance, when it is at most 2 and at most a third of the candidate's length (3 for
/// shorter ones). A candidate that differs from `name` only in the value of its numbers
/// (`v1` and `v2`) is another version, not a typo, and is never suggested.
pub(crate) fn closest_name(name: &str, candidates: &[String]) -> Option<String> {
    let key = numbers_and_case_folded(name);
    let mut best: Option<(usize, &String)> = None;
    for candidate in candidates {
        let folded = numbers_and_case_folded(candidate);
        let distance = if folded == key {
            0
        } else if skeleton(&folded) == skeleton(&key) {
            continue;
        } else {
            let distance = strsim::damerau_levenshtein(name, candidate);
            if distance > 2 || distance * 3 > candidate.chars().count().max(3) {
                continue;
            }
            distance
        };
        if best.is_none_or(|(d, _)| distance < d) {
            best = Some((distance, candidate));
        }
    }
    best.map(|(_, name)| name.clone())
}

/// `name` in lower case with each number's leading zeros dropped (`V007` → `v7`).
fn numbers_and_case_folded(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut in_number = false;
    let mut pending_zeros = 0usize;
    for c in name.chars() {
        if c.is_ascii_digit() {
            if c == '0' && !in_number {
                pending_zeros += 1;
                continue;
            }
            in_number = true;
            pending_zeros = 0;
            out.push(c);
        } else {
            if pending_zeros > 0 {
                out.push('0');
            }
            pending_zeros = 0;
            in_number = false;
            out.extend(c.to_lowercase());
        }
    }
    if pending_zeros > 0 {
        out.push('0');
    }
    out
}

/// `folded` with each number replaced by `#` (`v12.3` → `v#.#`).
fn skeleton(folded: &str) -> String {
    let mut out = String::with_capacity(folded.len());
    for c in folded.chars() {
        if !c.is_ascii_digit() {
            out.push(c);
        } else if !out.ends_with('#') {
            out.push('#');
        }
    }
    out
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
            .prepare_cached("SELECT head FROM datasets WHERE name = ?1")
            .in_catalog()?;
        let head: Option<Option<Vec<u8>>> = stmt
            .query_row([name], |row| row.get(0))
            .optional()
            .in_catalog()?;
        Ok(head.map(|h| h.as_deref().and_then(ObjectId::from_slice)))
    }

    /// The name of the dataset (with a head) closest to `name`, when it is close enough to be
    /// a typo (`closest_name`: the same but for case or a number's leading zeros, or a
    /// Damerau–Levenshtein distance of at most 2, and at most a third of the name); else,
    /// when `name` is a tag of one or more datasets, `DATASET@name` (a tag given where a
    /// revision was meant: `dsv show v1`).
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn closest_dataset(&self, name: &str) -> Result<Option<String>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT name FROM datasets WHERE head IS NOT NULL")
            .in_catalog()?;
        let names = stmt
            .query_map([], |row| row.get::<_, String>(0))
            .in_catalog()?
            .collect::<rusqlite::Result<Vec<_>>>()
            .in_catalog()?;
        if let Some(closest) = closest_name(name, &names) {
            return Ok(Some(closest));
        }
        let tagged = self.datasets_with_tag(name)?;
        Ok(tagged.first().map(|dataset| format!("{dataset}@{name}")))
    }

    /// The datasets (with a head) that have a tag `tag`, sorted.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn datasets_with_tag(&self, tag: &str) -> Result<Vec<String>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT d.name FROM tags t JOIN datasets d ON d.id = t.dataset WHERE t.name = ?1 AND d.head IS NOT NULL ORDER BY d.name",
        ).in_catalog()?;
        let names = stmt
            .query_map([tag], |row| row.get::<_, String>(0))
            .in_catalog()?;
        names.collect::<rusqlite::Result<_>>().in_catalog()
    }

    /// The tag of dataset `name` closest to `tag`, when it is close enough to be a typo
    /// ([`closest_name`]).
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub(crate) fn closest_tag(&self, name: &str, tag: &str) -> Result<Option<String>> {
        let tags: Vec<String> = self.tags(name)?.into_iter().map(|(tag, _)| tag).collect();
        Ok(closest_name(tag, &tags))
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
        let mut stmt = self.conn.prepare_cached(&sql).in_catalog()?;
        stmt.query_row([&id.0[..]], version_row)
            .optional()
            .in_catalog()
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
    pub(crate) fn versions_with_prefix(&self, name: &str, prefix: &str) -> Result<Vec<ObjectId>> {
        // Ids are BLOBs: compare on their hex form. Datasets rarely hold more than thousands of versions.
        let mut stmt = self.conn.prepare_cached(&format!(
            "{MEMBERS} SELECT v.id FROM versions v JOIN members m ON m.id = v.id WHERE lower(hex(v.id)) LIKE ?2 || '%'"
        )).in_catalog()?;
        let ids = stmt
            .query_map(params![name, prefix], |row| id_column(row, 0))
            .in_catalog()?;
        ids.collect::<rusqlite::Result<_>>().in_catalog()
    }

    /// The version tag `tag` of dataset `name` names, if any.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn tag(&self, name: &str, tag: &str) -> Result<Option<ObjectId>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT t.version FROM tags t JOIN datasets d ON d.id = t.dataset WHERE d.name = ?1 AND t.name = ?2",
        ).in_catalog()?;
        stmt.query_row(params![name, tag], |row| id_column(row, 0))
            .optional()
            .in_catalog()
    }

    /// Every tag of dataset `name` with the version it names, sorted by tag.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn tags(&self, name: &str) -> Result<Vec<(String, ObjectId)>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT t.name, t.version FROM tags t JOIN datasets d ON d.id = t.dataset WHERE d.name = ?1 ORDER BY t.name",
        ).in_catalog()?;
        let rows = stmt
            .query_map([name], |row| Ok((row.get(0)?, id_column(row, 1)?)))
            .in_catalog()?;
        rows.collect::<rusqlite::Result<_>>().in_catalog()
    }

    /// Every version of dataset `name` (`MEMBERS`), newest first (by creation time, then
    /// id).
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn versions_of(&self, name: &str) -> Result<Vec<ObjectId>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "{MEMBERS} SELECT v.id FROM versions v JOIN members m ON m.id = v.id ORDER BY v.created_at DESC, v.id"
        )).in_catalog()?;
        let rows = stmt
            .query_map([name], |row| id_column(row, 0))
            .in_catalog()?;
        rows.collect::<rusqlite::Result<_>>().in_catalog()
    }

    /// Tags that name version `id`, sorted.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn tags_of(&self, id: &ObjectId) -> Result<Vec<String>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT name FROM tags WHERE version = ?1 ORDER BY name")
            .in_catalog()?;
        let names = stmt.query_map([&id.0[..]], |row| row.get(0)).in_catalog()?;
        names.collect::<rusqlite::Result<_>>().in_catalog()
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
        let mut stmt = self
            .conn
            .prepare(
                "SELECT d.name, d.head, v.file_count, v.byte_count, v.created_at
             FROM datasets d LEFT JOIN versions v ON v.id = d.head ORDER BY d.name",
            )
            .in_catalog()?;
        let rows = stmt
            .query_map([], |row| {
                let head: Option<Vec<u8>> = row.get(1)?;
                Ok(DatasetSummary {
                    name: row.get(0)?,
                    head: head.as_deref().and_then(ObjectId::from_slice),
                    versions: 0,
                    files: row.get::<_, Option<i64>>(2)?.unwrap_or(0) as u64,
                    bytes: row.get::<_, Option<i64>>(3)?.unwrap_or(0) as u64,
                    updated: row.get(4)?,
                })
            })
            .in_catalog()?;
        let mut summaries: Vec<DatasetSummary> =
            rows.collect::<rusqlite::Result<_>>().in_catalog()?;
        // Counted as `log` lists them ([`MEMBERS`]): a few datasets, a query each.
        let mut count = self
            .conn
            .prepare_cached(&format!(
                "{MEMBERS} SELECT count(*) FROM versions v JOIN members m ON m.id = v.id"
            ))
            .in_catalog()?;
        for summary in &mut summaries {
            summary.versions = count
                .query_row([&summary.name], |row| row.get::<_, i64>(0))
                .in_catalog()? as u64;
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
        self.tx
            .execute(
                "UPDATE datasets SET head = ?1 WHERE name = ?2",
                params![&id.0[..], version.dataset],
            )
            .in_catalog()?;
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
        self.tx
            .execute(
                "INSERT OR IGNORE INTO datasets (name, head, created_at) VALUES (?1, NULL, ?2)",
                params![version.dataset, unix_now()],
            )
            .in_catalog()?;
        let dataset: i64 = self
            .tx
            .query_row(
                "SELECT id FROM datasets WHERE name = ?1",
                [&version.dataset],
                |row| row.get(0),
            )
            .in_catalog()?;
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
        ).in_catalog()?;
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
            .optional()
            .in_catalog()?;
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
            .optional().in_catalog()?;
        let Some(named) = named.as_deref().and_then(ObjectId::from_slice) else {
            return Ok(None);
        };
        self.tx.execute(
            "DELETE FROM tags WHERE name = ?2 AND dataset = (SELECT id FROM datasets WHERE name = ?1)",
            params![name, tag],
        ).in_catalog()?;
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
            ).in_catalog()?;
            let rows = stmt
                .query_map([old], |row| Ok((row.get(0)?, row.get(1)?)))
                .in_catalog()?;
            rows.collect::<rusqlite::Result<_>>().in_catalog()?
        };
        self.tx
            .execute(
                "UPDATE datasets SET name = ?2 WHERE name = ?1",
                params![old, new],
            )
            .in_catalog()?;
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
            .optional()
            .in_catalog()?
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
            .optional()
            .in_catalog()?;
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
        ).in_catalog()?;
        self.log(RefLogEntry::Tag {
            dataset: name.to_string(),
            tag: tag.to_string(),
            version: Some(*id),
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::tests::{add_line, new_catalog, sample_version};

    #[test]
    fn adding_a_version_moves_its_datasets_head_and_recording_one_does_not() {
        let (_dir, mut catalog) = new_catalog();
        let ids = add_line(&mut catalog, "ds", 2);
        assert_eq!(catalog.head("ds").unwrap(), Some(ids[1]));
        let (fetched, version) = sample_version("ds", Some(ids[1]), 9);
        let writer = catalog.writer().unwrap();
        writer.record_version(&fetched, &version).unwrap();
        writer.commit().unwrap();
        assert_eq!(catalog.head("ds").unwrap(), Some(ids[1]));
        let record = catalog.version_record(&fetched).unwrap();
        assert_eq!(record.id, fetched);
        assert!(record.agrees_with(&version));
        // A version recorded under a new dataset makes it, without a head.
        let (other, version) = sample_version("new", None, 1);
        let writer = catalog.writer().unwrap();
        writer.record_version(&other, &version).unwrap();
        writer.commit().unwrap();
        assert!(catalog.has_dataset("new").unwrap());
        assert_eq!(catalog.head("new").unwrap(), None);
        assert_eq!(catalog.head_or_none("new").unwrap(), None);
    }

    #[test]
    fn the_closest_name_is_a_typo_or_the_same_number_never_another_number() {
        let names = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let tags = names(&["v01", "v2", "release-2024", "V10"]);
        assert_eq!(closest_name("v1", &tags).as_deref(), Some("v01"));
        assert_eq!(closest_name("v001", &tags).as_deref(), Some("v01"));
        assert_eq!(closest_name("v10", &tags).as_deref(), Some("V10"));
        assert_eq!(
            closest_name("relase-2024", &tags).as_deref(),
            Some("release-2024")
        );
        assert_eq!(closest_name("v3", &tags), None);
        assert_eq!(closest_name("v02", &tags).as_deref(), Some("v2"));
        assert_eq!(closest_name("x", &tags), None);
        assert_eq!(
            closest_name("v0", &names(&["v00", "v1"])).as_deref(),
            Some("v00")
        );
    }

    #[test]
    fn the_head_of_an_unknown_dataset_is_an_error_naming_a_close_one() {
        let (_dir, mut catalog) = new_catalog();
        add_line(&mut catalog, "images", 1);
        match catalog.head("imagse") {
            Err(Error::DatasetNotFound { name, closest }) => {
                assert_eq!(name, "imagse");
                assert_eq!(closest.as_deref(), Some("images"));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            catalog.head("text"),
            Err(Error::DatasetNotFound { closest: None, .. })
        ));
        assert_eq!(catalog.head_or_none("text").unwrap(), None);
        assert!(!catalog.has_dataset("text").unwrap());
        assert!(matches!(
            catalog.version_record(&ObjectId::of(b"none")),
            Err(Error::MissingObject { .. })
        ));
    }

    #[test]
    fn a_tag_names_an_existing_version_and_moves_only_when_forced() {
        let (_dir, mut catalog) = new_catalog();
        let ids = add_line(&mut catalog, "ds", 2);
        let writer = catalog.writer().unwrap();
        writer.set_tag("ds", "v1", &ids[0], false).unwrap();
        // The same version again is no change.
        writer.set_tag("ds", "v1", &ids[0], false).unwrap();
        assert!(matches!(
            writer.set_tag("ds", "v1", &ids[1], false),
            Err(Error::TagExists { .. })
        ));
        assert!(matches!(
            writer.set_tag("nope", "v1", &ids[1], false),
            Err(Error::DatasetNotFound { .. })
        ));
        // A version the catalog does not have cannot be tagged.
        let missing = ObjectId::of(b"missing");
        assert!(writer.set_tag("ds", "v2", &missing, true).is_err());
        writer.commit().unwrap();
        assert_eq!(catalog.tag("ds", "v1").unwrap(), Some(ids[0]));
        assert_eq!(catalog.tag("ds", "v2").unwrap(), None);
        let writer = catalog.writer().unwrap();
        writer.set_tag("ds", "v1", &ids[1], true).unwrap();
        writer.set_tag("ds", "a", &ids[1], false).unwrap();
        writer.commit().unwrap();
        assert_eq!(
            catalog.tags("ds").unwrap(),
            [("a".to_string(), ids[1]), ("v1".to_string(), ids[1])]
        );
        assert_eq!(catalog.tags_of(&ids[1]).unwrap(), ["a", "v1"]);
        assert!(catalog.tags_of(&ids[0]).unwrap().is_empty());
    }

    #[test]
    fn deleting_a_tag_returns_what_it_named_once() {
        let (_dir, mut catalog) = new_catalog();
        let ids = add_line(&mut catalog, "ds", 1);
        let writer = catalog.writer().unwrap();
        writer.set_tag("ds", "t", &ids[0], false).unwrap();
        assert_eq!(writer.delete_tag("ds", "t").unwrap(), Some(ids[0]));
        assert_eq!(writer.delete_tag("ds", "t").unwrap(), None);
        assert_eq!(writer.delete_tag("other", "t").unwrap(), None);
        writer.commit().unwrap();
        assert!(catalog.tags("ds").unwrap().is_empty());
    }

    #[test]
    fn a_dataset_lists_its_versions_newest_first_and_finds_them_by_prefix() {
        let (_dir, mut catalog) = new_catalog();
        let ids = add_line(&mut catalog, "ds", 3);
        add_line(&mut catalog, "other", 2);
        let newest_first: Vec<_> = ids.iter().rev().copied().collect();
        assert_eq!(catalog.versions_of("ds").unwrap(), newest_first);
        let hex = ids[1].to_hex();
        assert_eq!(
            catalog.versions_with_prefix("ds", &hex[..10]).unwrap(),
            [ids[1]]
        );
        assert!(
            catalog
                .versions_with_prefix("other", &hex[..10])
                .unwrap()
                .is_empty()
        );
        let summaries = catalog.datasets().unwrap();
        let names: Vec<_> = summaries
            .iter()
            .map(|s| (s.name.as_str(), s.versions))
            .collect();
        assert_eq!(names, [("ds", 3), ("other", 2)]);
        assert_eq!(summaries[0].head, Some(ids[2]));
        assert_eq!((summaries[0].files, summaries[0].bytes), (2, 20));
    }

    #[test]
    fn ancestry_follows_parents_and_a_cycle_is_corrupt() {
        let (_dir, mut catalog) = new_catalog();
        let ids = add_line(&mut catalog, "ds", 3);
        assert!(catalog.is_ancestor(&ids[0], &ids[2]).unwrap());
        assert!(catalog.is_ancestor(&ids[2], &ids[2]).unwrap());
        assert!(!catalog.is_ancestor(&ids[2], &ids[0]).unwrap());
        assert!(!catalog.is_ancestor(&ObjectId::of(b"x"), &ids[2]).unwrap());
        catalog
            .conn()
            .execute(
                "UPDATE versions SET parent = ?1 WHERE id = ?2",
                [&ids[2].0[..], &ids[0].0[..]],
            )
            .unwrap();
        assert!(matches!(
            catalog.is_ancestor(&ObjectId::of(b"x"), &ids[2]),
            Err(Error::Corrupt { .. })
        ));
    }

    #[test]
    fn a_renamed_dataset_keeps_its_head_versions_and_tags() {
        let (_dir, mut catalog) = new_catalog();
        let ids = add_line(&mut catalog, "old", 2);
        let writer = catalog.writer().unwrap();
        writer.set_tag("old", "t", &ids[0], false).unwrap();
        writer.rename_dataset("old", "new").unwrap();
        writer.commit().unwrap();
        assert!(!catalog.has_dataset("old").unwrap());
        assert_eq!(catalog.head("new").unwrap(), Some(ids[1]));
        assert_eq!(catalog.tag("new", "t").unwrap(), Some(ids[0]));
        assert_eq!(catalog.versions_of("new").unwrap(), [ids[1], ids[0]]);
        let state = catalog.ref_state().unwrap();
        assert_eq!(state.heads.keys().collect::<Vec<_>>(), ["new"]);
        // The version keeps the name it was committed to; the record, the one that holds it.
        let record = catalog.version_record(&ids[1]).unwrap();
        assert_eq!(record.version.dataset, "new");
        let (_, committed) = sample_version("old", Some(ids[0]), 1);
        assert!(record.agrees_with(&committed));
    }

    #[test]
    fn a_writer_sees_its_own_head_before_commit_and_others_after() {
        let (dir, mut catalog) = new_catalog();
        let ids = add_line(&mut catalog, "ds", 1);
        let reader = Catalog::open_reader(&dir.path().join("catalog.db")).unwrap();
        let (next, version) = sample_version("ds", Some(ids[0]), 5);
        let writer = catalog.writer().unwrap();
        assert_eq!(writer.head("ds").unwrap(), Some(ids[0]));
        writer.add_version(&next, &version).unwrap();
        assert_eq!(writer.head("ds").unwrap(), Some(next));
        assert_eq!(writer.head("none").unwrap(), None);
        assert_eq!(reader.head("ds").unwrap(), Some(ids[0]));
        writer.commit().unwrap();
        assert_eq!(reader.head("ds").unwrap(), Some(next));
    }
}
