//! Workspaces (directories a store committed or checked out) and their stat caches: the
//! catalog rows, read and written here and nowhere else.
//!
//! One of three workspace modules, each one concern: this one holds the rows; when an entry
//! is trusted is [`crate::workspace`] (the stat cache rules); the user's commands over the
//! records (`dsv workspace ls`, `dsv workspace forget`) are `dsv::ops::workspace`.

use rusqlite::{OptionalExtension, params};

use super::{Catalog, CatalogWriter, SqliteResultExt, unix_now};
use crate::error::Result;
use crate::id::ObjectId;

/// A directory the store knows, and the version it holds.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Workspace {
    /// Catalog row id.
    #[serde(skip)]
    pub id: i64,
    /// Absolute, canonical path.
    pub path: String,
    /// The dataset of the version it holds.
    pub dataset: Option<String>,
    /// The version it holds (as of the last commit or checkout).
    pub version: Option<ObjectId>,
    /// When it was last committed or checked out (Unix seconds).
    pub last_seen: i64,
    /// Whether the directory it describes still exists: a directory at `path` that is the
    /// same one (device and inode of its root) as when it was recorded.
    pub exists: bool,
}

/// The identity of the directory at `path`: (st_dev, st_ino, birth time in ns since the
/// epoch where the filesystem keeps one), when there is a directory there. Filesystems reuse
/// inode numbers at once, so the birth time tells a new directory from the old one.
pub fn directory_identity(path: &std::path::Path) -> Option<(i64, i64, Option<i64>)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path)
        .ok()
        .filter(std::fs::Metadata::is_dir)?;
    let born = meta
        .created()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_nanos() as i64);
    Some((meta.dev() as i64, meta.ino() as i64, born))
}

/// A recorded directory identity: device, inode, birth time (each NULL in old records).
type Identity = (Option<i64>, Option<i64>, Option<i64>);

/// Whether a recorded identity describes the directory now at `path`.
fn same_directory(path: &str, recorded: Identity) -> bool {
    match directory_identity(std::path::Path::new(path)) {
        None => false,
        Some((dev, ino, born)) => match recorded {
            (Some(d), Some(i), b) => d == dev && i == ino && (b.is_none() || b == born),
            // Recorded before identities were kept: trusted by path.
            _ => true,
        },
    }
}

const WORKSPACE_COLUMNS: &str = "SELECT w.id, w.path, d.name, w.version, w.updated_at, w.device, w.inode, w.born_ns FROM workspaces w LEFT JOIN datasets d ON d.id = w.dataset";

fn read_workspace(row: &rusqlite::Row<'_>) -> rusqlite::Result<Workspace> {
    let version: Option<Vec<u8>> = row.get(3)?;
    let path: String = row.get(1)?;
    let exists = same_directory(&path, (row.get(5)?, row.get(6)?, row.get(7)?));
    Ok(Workspace {
        id: row.get(0)?,
        path,
        dataset: row.get(2)?,
        version: version.as_deref().and_then(ObjectId::from_slice),
        last_seen: row.get(4)?,
        exists,
    })
}

/// What a file looked like (lstat: size, mtime, ctime, inode, mode) when it was last found to
/// hold its workspace's version's content at its path.
///
/// An entry names no file id: it vouches that the file, while its lstat is this one, holds
/// the content of the file the workspace's version has at the same path (schema 11). Readers
/// take the id from that version's tree. Only settled stats are written (see
/// [`crate::workspace::entry`]), so an entry is trusted exactly when the file's lstat equals
/// it.
pub type StatEntry = crate::stat::Stat;

impl Catalog {
    /// The workspace that holds `dir`: the record of `dir` itself, else of its nearest
    /// parent directory that has one (as git finds the repository from a subdirectory). Only
    /// records whose directory is still the one recorded count.
    ///
    /// # Errors
    /// [`crate::Error::NotADirectory`] when `dir` does not exist; [`crate::Error::Catalog`].
    pub fn enclosing_workspace(&self, dir: &std::path::Path) -> Result<Option<Workspace>> {
        let canonical =
            std::fs::canonicalize(dir).map_err(|_| crate::error::Error::NotADirectory {
                path: dir.to_path_buf(),
            })?;
        for ancestor in canonical.ancestors() {
            let Some(key) = ancestor.to_str() else {
                continue;
            };
            if let Some(record) = self.workspace(key)? {
                return Ok(Some(record));
            }
        }
        Ok(None)
    }

    /// Every workspace record, by path, whether or not its directory still exists.
    ///
    /// # Errors
    /// [`crate::Error::Catalog`].
    pub fn workspaces(&self) -> Result<Vec<Workspace>> {
        let mut stmt = self
            .conn
            .prepare(&format!("{WORKSPACE_COLUMNS} ORDER BY w.path"))
            .in_catalog()?;
        stmt.query_map([], read_workspace)
            .in_catalog()?
            .collect::<rusqlite::Result<_>>()
            .in_catalog()
    }

    /// Every workspace whose directory exists (the same directory as recorded) and holds a
    /// version: (canonical path, version). These keep their versions from `rm` and cleanup.
    ///
    /// # Errors
    /// [`crate::Error::Catalog`].
    pub fn workspace_versions(&self) -> Result<Vec<(String, ObjectId)>> {
        Ok(self
            .workspaces()?
            .into_iter()
            .filter(|w| w.exists)
            .filter_map(|w| w.version.map(|v| (w.path, v)))
            .collect())
    }

    /// The workspace at canonical path `path`, if the store knows it and the directory there
    /// is the one it recorded (a directory deleted and made again is a new one).
    ///
    /// # Errors
    /// [`crate::Error::Catalog`].
    pub fn workspace(&self, path: &str) -> Result<Option<Workspace>> {
        let mut stmt = self
            .conn
            .prepare_cached(&format!("{WORKSPACE_COLUMNS} WHERE w.path = ?1"))
            .in_catalog()?;
        Ok(stmt
            .query_row([path], read_workspace)
            .optional()
            .in_catalog()?
            .filter(|w| w.exists))
    }

    /// Reads the stat cache of workspace `workspace` in path order ([`crate::names::path_order`],
    /// the order of a walk and of a version's trees), calling `each` with every entry's
    /// relative path until it returns false. One cursor, nothing held: a million entries cost
    /// no memory here.
    ///
    /// An entry vouches for the content of the workspace's version at its path, so entries
    /// are given only while the store keeps that version whole: when the workspace record
    /// names no version, or one that was removed or evicted (gc may have freed its data), no
    /// entry is given. A workspace's version is kept whole while its directory exists (gc and
    /// `cache prune` keep it), and [`CatalogWriter::drop_unheld_stat_entries`] drops the
    /// entries of the others after gc. A row whose key is not a path (written by no dsv) is
    /// skipped: a cache entry fewer costs a hash.
    ///
    /// # Errors
    /// [`crate::Error::Catalog`]; any error `each` returns.
    pub fn stat_cache_in_order(
        &self,
        workspace: i64,
        mut each: impl FnMut(String, StatEntry) -> Result<bool>,
    ) -> Result<()> {
        let version_kept: bool = self
            .conn
            .query_row(
                &format!("SELECT EXISTS ({WORKSPACES_HOLDING_A_LIVE_VERSION} AND w.id = ?1)"),
                [workspace],
                |row| row.get(0),
            )
            .in_catalog()?;
        if !version_kept {
            return Ok(());
        }
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT key, size, mtime_ns, ctime_ns, inode, mode FROM stat_cache
             WHERE workspace = ?1 ORDER BY key",
            )
            .in_catalog()?;
        let mut rows = stmt.query([workspace]).in_catalog()?;
        while let Some(row) = rows.next().in_catalog()? {
            let Some(path) = path_of_key(&row.get::<_, Vec<u8>>(0).in_catalog()?) else {
                continue;
            };
            let entry = StatEntry {
                size: row.get::<_, i64>(1).in_catalog()? as u64,
                mtime_ns: row.get(2).in_catalog()?,
                ctime_ns: row.get(3).in_catalog()?,
                inode: row.get::<_, i64>(4).in_catalog()? as u64,
                mode: row.get(5).in_catalog()?,
            };
            if !each(path, entry)? {
                break;
            }
        }
        Ok(())
    }
}

/// The ids of the workspaces whose recorded version is live (neither removed nor evicted):
/// the store keeps it whole, so their stat cache entries may vouch for its content.
const WORKSPACES_HOLDING_A_LIVE_VERSION: &str = "SELECT w.id FROM workspaces w
     JOIN versions v ON v.id = w.version
     WHERE v.removed_at IS NULL AND v.evicted_at IS NULL";

/// The stat cache's key of a relative path: its bytes with every `/` written as 0, so that
/// byte order of keys is [`crate::names::path_order`] of paths (schema 10).
pub(crate) fn stat_key(path: &str) -> Vec<u8> {
    path.bytes()
        .map(|b| if b == b'/' { 0 } else { b })
        .collect()
}

/// The relative path of a stat cache key ([`stat_key`] undone); `None` when the key holds a
/// `/` or is not UTF-8 (no dsv writes such a key).
fn path_of_key(key: &[u8]) -> Option<String> {
    if key.contains(&b'/') {
        return None;
    }
    String::from_utf8(key.iter().map(|&b| if b == 0 { b'/' } else { b }).collect()).ok()
}

/// Migration 10's hook: moves every stat cache row into `stat_cache_keyed` under its
/// [`stat_key`], then puts that table in the old one's place.
pub(super) fn rekey_stat_cache(tx: &rusqlite::Transaction<'_>) -> rusqlite_migration::HookResult {
    {
        let mut read = tx.prepare(
            "SELECT workspace, path, size, mtime_ns, ctime_ns, inode, mode, file_id, checked_ns FROM stat_cache",
        )?;
        let mut write = tx.prepare(
            "INSERT OR REPLACE INTO stat_cache_keyed (workspace, key, size, mtime_ns, ctime_ns, inode, mode, file_id, checked_ns)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )?;
        let mut rows = read.query([])?;
        while let Some(row) = rows.next()? {
            let Ok(path) = row.get_ref(1)?.as_str() else {
                continue;
            };
            write.execute(params![
                row.get::<_, i64>(0)?,
                stat_key(path),
                row.get::<_, i64>(2)?,
                row.get::<_, i64>(3)?,
                row.get::<_, i64>(4)?,
                row.get::<_, i64>(5)?,
                row.get::<_, i64>(6)?,
                row.get::<_, Vec<u8>>(7)?,
                row.get::<_, i64>(8)?,
            ])?;
        }
    }
    tx.execute_batch(
        "DROP TABLE stat_cache;
         ALTER TABLE stat_cache_keyed RENAME TO stat_cache;",
    )?;
    Ok(())
}

impl CatalogWriter<'_> {
    /// Records that the directory at `path` holds `version` of `dataset`; returns its row id.
    ///
    /// # Errors
    /// [`crate::Error::Catalog`].
    pub fn set_workspace(&self, path: &str, dataset: &str, version: &ObjectId) -> Result<i64> {
        let (device, inode, born) = match directory_identity(std::path::Path::new(path)) {
            Some((d, i, b)) => (Some(d), Some(i), b),
            None => (None, None, None),
        };
        // Another directory than the one recorded at this path: its stat cache is not ours.
        let recorded: Option<(i64, Identity)> = self
            .tx
            .query_row(
                "SELECT id, device, inode, born_ns FROM workspaces WHERE path = ?1",
                [path],
                |row| Ok((row.get(0)?, (row.get(1)?, row.get(2)?, row.get(3)?))),
            )
            .optional()
            .in_catalog()?;
        if let Some((id, old)) = recorded
            && old.0.is_some()
            && old != (device, inode, born)
        {
            self.tx
                .execute("DELETE FROM stat_cache WHERE workspace = ?1", [id])
                .in_catalog()?;
        }
        let dataset: Option<i64> = self
            .tx
            .query_row(
                "SELECT id FROM datasets WHERE name = ?1",
                [dataset],
                |row| row.get(0),
            )
            .optional()
            .in_catalog()?;
        self.tx.execute(
            "INSERT INTO workspaces (path, dataset, version, updated_at, device, inode, born_ns) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT(path) DO UPDATE SET dataset = excluded.dataset, version = excluded.version, updated_at = excluded.updated_at,
                 device = excluded.device, inode = excluded.inode, born_ns = excluded.born_ns",
            params![path, dataset, &version.0[..], unix_now(), device, inode, born],
        ).in_catalog()?;
        // The version is in use and (committed or checked out) whole here.
        self.tx
            .execute(
                "UPDATE versions SET last_used = ?1, evicted_at = NULL WHERE id = ?2",
                params![unix_now(), &version.0[..]],
            )
            .in_catalog()?;
        self.tx
            .query_row("SELECT id FROM workspaces WHERE path = ?1", [path], |row| {
                row.get(0)
            })
            .in_catalog()
    }

    /// Forgets the workspace record at `path` (and its stat cache); false when there was none.
    ///
    /// # Errors
    /// [`crate::Error::Catalog`].
    pub fn forget_workspace(&self, path: &str) -> Result<bool> {
        Ok(self
            .tx
            .execute("DELETE FROM workspaces WHERE path = ?1", [path])
            .in_catalog()?
            > 0)
    }

    /// Deletes the stat cache of every workspace whose version the store may no longer hold
    /// whole (removed, evicted, or no version recorded): its entries vouch for that
    /// version's content. Run after gc or cache eviction freed data; returns how many
    /// entries went.
    ///
    /// # Errors
    /// [`crate::Error::Catalog`].
    pub fn drop_unheld_stat_entries(&self) -> Result<u64> {
        Ok(self
            .tx
            .execute(
                &format!(
                    "DELETE FROM stat_cache WHERE workspace IN (
                     SELECT id FROM workspaces EXCEPT {WORKSPACES_HOLDING_A_LIVE_VERSION})"
                ),
                [],
            )
            .in_catalog()? as u64)
    }

    /// Applies changes to a workspace's stat cache: `Some` upserts a path's entry, `None`
    /// deletes it. An entry written must hold for the version the workspace record names
    /// once this transaction commits ([`StatEntry`]).
    ///
    /// # Errors
    /// [`crate::Error::Catalog`].
    pub fn update_stat_cache<'p>(
        &self,
        workspace: i64,
        changes: impl IntoIterator<Item = (&'p str, Option<&'p StatEntry>)>,
    ) -> Result<()> {
        let mut upsert = self.tx.prepare_cached(
            "INSERT OR REPLACE INTO stat_cache (workspace, key, size, mtime_ns, ctime_ns, inode, mode)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        ).in_catalog()?;
        let mut delete = self
            .tx
            .prepare_cached("DELETE FROM stat_cache WHERE workspace = ?1 AND key = ?2")
            .in_catalog()?;
        for (path, entry) in changes {
            match entry {
                Some(e) => upsert
                    .execute(params![
                        workspace,
                        stat_key(path),
                        e.size as i64,
                        e.mtime_ns,
                        e.ctime_ns,
                        e.inode as i64,
                        e.mode,
                    ])
                    .in_catalog()?,
                None => delete
                    .execute(params![workspace, stat_key(path)])
                    .in_catalog()?,
            };
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::tests::{add_line, new_catalog};

    fn entry(n: u64) -> StatEntry {
        StatEntry {
            size: n,
            mtime_ns: n as i64 + 1,
            ctime_ns: n as i64 + 2,
            inode: n + 3,
            mode: 0o100644,
        }
    }

    /// The stat cache of `workspace` as read in order.
    fn read(catalog: &Catalog, workspace: i64) -> Vec<(String, StatEntry)> {
        let mut out = Vec::new();
        catalog
            .stat_cache_in_order(workspace, |path, entry| {
                out.push((path, entry));
                Ok(true)
            })
            .unwrap();
        out
    }

    /// A catalog with a dataset `ds` and a workspace at a new directory holding its head.
    fn with_workspace() -> (tempfile::TempDir, Catalog, String, i64) {
        let (dir, mut catalog) = new_catalog();
        let ids = add_line(&mut catalog, "ds", 1);
        let work = dir.path().join("work");
        std::fs::create_dir(&work).unwrap();
        let path = std::fs::canonicalize(&work)
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        let writer = catalog.writer().unwrap();
        let id = writer.set_workspace(&path, "ds", &ids[0]).unwrap();
        writer.commit().unwrap();
        (dir, catalog, path, id)
    }

    #[test]
    fn the_stat_cache_reads_back_in_path_order() {
        let (_dir, mut catalog, _, workspace) = with_workspace();
        let paths = ["b", "a.c", "a-b/x", "a/b", "a", "a/b/c"];
        let entries: Vec<StatEntry> = (0..paths.len() as u64).map(entry).collect();
        let writer = catalog.writer().unwrap();
        writer
            .update_stat_cache(
                workspace,
                paths.iter().copied().zip(entries.iter().map(Some)),
            )
            .unwrap();
        writer.commit().unwrap();
        let found = read(&catalog, workspace);
        let order: Vec<&str> = found.iter().map(|(p, _)| p.as_str()).collect();
        // '/' sorts before every other byte: a directory's entries come right after it.
        assert_eq!(order, ["a", "a/b", "a/b/c", "a-b/x", "a.c", "b"]);
        let sorted = {
            let mut p = paths.to_vec();
            p.sort_by(|x, y| crate::names::path_order(x, y));
            p
        };
        assert_eq!(order, sorted);
        for (path, found) in &found {
            let n = paths.iter().position(|p| p == path).unwrap();
            assert_eq!(*found, entries[n]);
        }
    }

    #[test]
    fn a_stat_cache_change_replaces_or_deletes_one_entry() {
        let (_dir, mut catalog, _, workspace) = with_workspace();
        let writer = catalog.writer().unwrap();
        writer
            .update_stat_cache(workspace, [("x", Some(&entry(1))), ("y", Some(&entry(2)))])
            .unwrap();
        writer
            .update_stat_cache(
                workspace,
                [("x", Some(&entry(7))), ("y", None), ("z", None)],
            )
            .unwrap();
        writer.commit().unwrap();
        assert_eq!(read(&catalog, workspace), [("x".to_string(), entry(7))]);
        // Reading stops when asked to.
        let writer = catalog.writer().unwrap();
        writer
            .update_stat_cache(workspace, [("w", Some(&entry(3)))])
            .unwrap();
        writer.commit().unwrap();
        let mut seen = Vec::new();
        catalog
            .stat_cache_in_order(workspace, |path, _| {
                seen.push(path);
                Ok(false)
            })
            .unwrap();
        assert_eq!(seen, ["w"]);
    }

    #[test]
    fn forgetting_a_workspace_drops_its_stat_cache_only() {
        let (dir, mut catalog, path, workspace) = with_workspace();
        let other_dir = dir.path().join("other");
        std::fs::create_dir(&other_dir).unwrap();
        let other_path = std::fs::canonicalize(&other_dir)
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        let head = catalog.head("ds").unwrap().unwrap();
        let writer = catalog.writer().unwrap();
        let other = writer.set_workspace(&other_path, "ds", &head).unwrap();
        assert_ne!(other, workspace);
        for id in [workspace, other] {
            writer
                .update_stat_cache(id, [("f", Some(&entry(1)))])
                .unwrap();
        }
        assert!(writer.forget_workspace(&path).unwrap());
        assert!(!writer.forget_workspace(&path).unwrap());
        writer.commit().unwrap();
        let rows: Vec<i64> = {
            let mut stmt = catalog
                .conn()
                .prepare("SELECT workspace FROM stat_cache")
                .unwrap();
            stmt.query_map([], |row| row.get(0))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap()
        };
        assert_eq!(rows, [other]);
        assert_eq!(catalog.workspace(&path).unwrap().map(|w| w.id), None);
        assert_eq!(read(&catalog, other).len(), 1);
    }

    #[test]
    fn a_workspace_record_is_one_row_per_path_found_from_below() {
        let (dir, mut catalog, path, workspace) = with_workspace();
        let ids = add_line(&mut catalog, "ds", 2);
        let writer = catalog.writer().unwrap();
        writer.mark_evicted(&[ids[1]]).unwrap();
        // Again at the same path: the same row, now holding another version, whole again.
        assert_eq!(
            writer.set_workspace(&path, "ds", &ids[1]).unwrap(),
            workspace
        );
        writer.commit().unwrap();
        assert!(!catalog.is_evicted(&ids[1]).unwrap());
        let record = catalog.workspace(&path).unwrap().unwrap();
        assert_eq!(record.version, Some(ids[1]));
        assert_eq!(record.dataset.as_deref(), Some("ds"));
        assert!(record.exists);
        assert_eq!(
            catalog.workspace_versions().unwrap(),
            [(path.clone(), ids[1])]
        );
        let below = dir.path().join("work/a/b");
        std::fs::create_dir_all(&below).unwrap();
        let found = catalog.enclosing_workspace(&below).unwrap().unwrap();
        assert_eq!(found.id, workspace);
        assert!(catalog.enclosing_workspace(dir.path()).unwrap().is_none());
        assert!(
            catalog
                .enclosing_workspace(&dir.path().join("none"))
                .is_err()
        );
        // Its directory gone, the record stays listed but no longer counts.
        std::fs::remove_dir_all(dir.path().join("work")).unwrap();
        assert!(catalog.workspace(&path).unwrap().is_none());
        assert!(catalog.workspace_versions().unwrap().is_empty());
        let listed = catalog.workspaces().unwrap();
        assert_eq!(listed.len(), 1);
        assert!(!listed[0].exists);
    }

    #[test]
    fn another_directory_at_a_recorded_path_does_not_inherit_its_stat_cache() {
        let (_dir, mut catalog, path, workspace) = with_workspace();
        let head = catalog.head("ds").unwrap().unwrap();
        let writer = catalog.writer().unwrap();
        writer
            .update_stat_cache(workspace, [("f", Some(&entry(1)))])
            .unwrap();
        // The same directory again keeps its entries.
        writer.set_workspace(&path, "ds", &head).unwrap();
        writer.commit().unwrap();
        assert_eq!(read(&catalog, workspace).len(), 1);
        // As if the directory had been deleted and made again: another inode.
        catalog
            .conn()
            .execute("UPDATE workspaces SET inode = inode + 1", [])
            .unwrap();
        assert!(catalog.workspace(&path).unwrap().is_none());
        let writer = catalog.writer().unwrap();
        assert_eq!(writer.set_workspace(&path, "ds", &head).unwrap(), workspace);
        writer.commit().unwrap();
        assert!(read(&catalog, workspace).is_empty());
        assert!(catalog.workspace(&path).unwrap().is_some());
    }

    #[test]
    fn a_stat_key_orders_bytes_as_paths_and_reads_back() {
        assert_eq!(stat_key("a/b"), b"a\0b");
        assert_eq!(path_of_key(b"a\0b").as_deref(), Some("a/b"));
        assert_eq!(path_of_key(b"a/b"), None);
        assert_eq!(path_of_key(&[0xff]), None);
        assert!(stat_key("a/b") < stat_key("a-b"));
    }
}
