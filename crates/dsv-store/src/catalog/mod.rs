//! The catalog: one SQLite database (`.dsv/catalog.db`, WAL mode) that indexes packs,
//! frames and objects, and records datasets, versions, tags, workspaces and stat caches.
//!
//! The schema lives in `migrations/` and is applied by `rusqlite_migration`; connection
//! settings (WAL, foreign keys, busy timeout) are set per connection here, outside the
//! migrations. Writes go through [`CatalogWriter`], one `BEGIN IMMEDIATE` transaction, so a
//! crash leaves either all of an operation's rows or none.

mod deltas;
mod failure;
mod objects;
mod remotes;
mod retention;
mod versions;
mod workspaces;

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, TransactionBehavior};
use rusqlite_migration::{M, Migrations};

pub(crate) use failure::SqliteResultExt;
pub use failure::{catalog_error, classify, migration_error};
pub use objects::ObjectLocation;
pub use remotes::{RemoteLocation, RemoteRecord, RemoteRef};
pub use retention::{CachedVersionRow, ChunkStorage, PackObject, Pin};
pub use versions::{DatasetSummary, VersionRecord};
pub use workspaces::{StatEntry, Workspace};

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::reflog::{self, RefLogEntry, RefState};

/// The SQL of every schema migration, in order; the catalog's `user_version` counts those applied.
const MIGRATION_SQL: &[&str] = &[
    include_str!("../../migrations/0001_initial.sql"),
    include_str!("../../migrations/0002_objects_keyed_by_kind.sql"),
    include_str!("../../migrations/0003_remotes.sql"),
    include_str!("../../migrations/0004_pins_and_removal.sql"),
    include_str!("../../migrations/0005_cache_use.sql"),
    include_str!("../../migrations/0006_provenance.sql"),
    include_str!("../../migrations/0007_ref_log.sql"),
    include_str!("../../migrations/0008_unproven_file_maps.sql"),
    include_str!("../../migrations/0009_workspace_identity.sql"),
    include_str!("../../migrations/0010_stat_cache_in_path_order.sql"),
    include_str!("../../migrations/0011_stat_cache_vouches_for_the_version.sql"),
    include_str!("../../migrations/0012_remote_order.sql"),
    include_str!("../../migrations/0013_remote_packs_share_local_indexes.sql"),
    include_str!("../../migrations/0014_delta_bases.sql"),
];

static MIGRATIONS: LazyLock<Migrations<'static>> =
    LazyLock::new(|| migrations(MIGRATION_SQL.len()));

/// The first `count` migrations of [`MIGRATION_SQL`], each with its hook (schema 10 re-keys
/// the stat cache's rows).
fn migrations(count: usize) -> Migrations<'static> {
    Migrations::new(
        MIGRATION_SQL[..count]
            .iter()
            .enumerate()
            .map(|(index, sql)| match index {
                9 => M::up_with_hook(sql, workspaces::rekey_stat_cache),
                _ => M::up(sql),
            })
            .collect(),
    )
}

/// Number of migrations this build knows (the newest schema version).
pub(crate) fn schema_version() -> usize {
    MIGRATION_SQL.len()
}

/// An open catalog connection.
pub struct Catalog {
    conn: Connection,
    path: PathBuf,
}

impl Catalog {
    /// Opens (creating if `create`) the catalog at `path` and brings its schema up to date.
    /// A catalog made before the ref log existed gets one written from its state.
    ///
    /// # Errors
    /// [`Error::CatalogLost`] when an existing catalog is empty (truncated, or replaced by a
    /// new file), or when `create` finds a ref log already there; [`Error::StoreTooNew`]
    /// when a newer dsv wrote it; [`Error::Catalog`] or [`Error::Migration`] when SQLite
    /// fails (a corrupt file, for one).
    pub fn open(path: &Path, create: bool) -> Result<Catalog> {
        let catalog = Self::open_schema(path, create)?;
        catalog.ensure_ref_log(create)?;
        Ok(catalog)
    }

    /// Creates a new, empty catalog at `path` for `dsv repair`, which fills it from the
    /// packs and the ref log; the ref log is left as it is (see [`Catalog::adopt_ref_log`]).
    ///
    /// # Errors
    /// As [`Catalog::open`].
    pub fn create_for_repair(path: &Path) -> Result<Catalog> {
        Self::open_schema(path, true)
    }

    /// Opens an existing catalog as it is, without touching the ref log beside it (`dsv
    /// repair` reading the names of the catalog it replaces).
    ///
    /// # Errors
    /// As [`Catalog::open`].
    pub fn open_without_ref_log(path: &Path) -> Result<Catalog> {
        Self::open_schema(path, false)
    }

    /// A second connection to the catalog at `path`, which another connection of this
    /// process opened (and brought up to date) already: for reading beside it on another
    /// thread. The ref log is not touched.
    ///
    /// # Errors
    /// As [`Catalog::open`].
    pub fn open_reader(path: &Path) -> Result<Catalog> {
        Self::open_schema(path, false)
    }

    fn open_schema(path: &Path, create: bool) -> Result<Catalog> {
        // The path is made absolute first and URI filenames are off: SQLite (built with
        // `SQLITE_USE_URI`) would read a relative path starting with `file:` (a store in a
        // directory named `file:x`) as a URI naming another database. An absolute path
        // starts with '/', never with "file:".
        let path = &std::path::absolute(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        // SQLite would wait forever on a FIFO planted there, or follow a symlink out.
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut file = path.as_os_str().to_owned();
            file.push(suffix);
            let file = std::path::PathBuf::from(file);
            crate::store_file::check_regular_or_absent(&file).map_err(|source| Error::Io {
                path: file.clone(),
                source,
            })?;
        }
        let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        if create {
            flags |= OpenFlags::SQLITE_OPEN_CREATE;
        }
        debug_assert!(!flags.contains(OpenFlags::SQLITE_OPEN_URI));
        let mut conn = Connection::open_with_flags(path, flags).map_err(|e| corrupt_or(path, e))?;
        configure(&conn).map_err(|e| corrupt_or(path, e))?;
        let found: i64 = conn
            .query_row("PRAGMA user_version", [], |row| row.get(0))
            .map_err(|e| corrupt_or(path, e))?;
        let found = found.max(0) as usize;
        if !create && found == 0 {
            return Err(Error::CatalogLost {
                path: path.to_path_buf(),
                reason: "the catalog is empty (truncated, or replaced by a new file)".into(),
            });
        }
        if found > schema_version() {
            return Err(Error::StoreTooNew {
                path: path.to_path_buf(),
                found,
                supported: schema_version(),
            });
        }
        if found < schema_version() {
            MIGRATIONS.to_latest(&mut conn).map_err(migration_error)?;
        }
        Ok(Catalog {
            conn,
            path: path.to_path_buf(),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The raw connection (tests only; queries live in this module's children).
    #[cfg(test)]
    pub(crate) fn conn(&self) -> &Connection {
        &self.conn
    }

    /// Starts a write transaction (`BEGIN IMMEDIATE`: it waits for other writers, up to the
    /// busy timeout, instead of failing midway). Changes to names (heads, tags, remotes,
    /// pins, removals) are written to the ref log when it commits.
    ///
    /// # Errors
    /// [`Error::Catalog`] when the database stays locked past the timeout.
    pub fn writer(&mut self) -> Result<CatalogWriter<'_>> {
        let ref_log = self.ref_log_path();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .in_catalog()?;
        Ok(CatalogWriter {
            tx,
            ref_log,
            refs: RefCell::new(Vec::new()),
        })
    }

    /// The ref log beside this catalog (`.dsv/reflog`).
    pub fn ref_log_path(&self) -> PathBuf {
        self.path
            .parent()
            .unwrap_or(Path::new("."))
            .join(reflog::FILE_NAME)
    }

    /// How many bytes of the ref log this catalog has applied (`None`: not yet started).
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn ref_log_applied(&self) -> Result<Option<u64>> {
        let length: Option<i64> = self
            .conn
            .query_row("SELECT length FROM ref_log WHERE id = 1", [], |row| {
                row.get(0)
            })
            .in_catalog()?;
        Ok(length.map(|l| l.max(0) as u64))
    }

    /// The names this catalog gives (heads, tags, remotes, pins, removals), to compare with
    /// the ref log's.
    ///
    /// # Errors
    /// [`Error::Catalog`]; [`Error::Corrupt`] for an id that is not 32 bytes.
    pub fn ref_state(&self) -> Result<RefState> {
        ref_state_of(&self.conn, &self.path)
    }

    /// Makes the ref log a snapshot of this catalog's names and records it as applied
    /// (after `dsv repair`, or for a catalog made before the ref log existed).
    ///
    /// # Errors
    /// [`Error::Io`], [`Error::Catalog`].
    pub fn adopt_ref_log(&mut self) -> Result<()> {
        let path = self.ref_log_path();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .in_catalog()?;
        write_snapshot(&tx, &self.path, &path)?;
        tx.commit().in_catalog()?;
        Ok(())
    }

    fn ensure_ref_log(&self, create: bool) -> Result<()> {
        if self.ref_log_applied()?.is_some() {
            return Ok(());
        }
        let path = self.ref_log_path();
        // Under the write lock, so two processes upgrading one store agree on who writes.
        let tx = rusqlite::Transaction::new_unchecked(&self.conn, TransactionBehavior::Immediate)
            .in_catalog()?;
        let applied: Option<i64> = tx
            .query_row("SELECT length FROM ref_log WHERE id = 1", [], |row| {
                row.get(0)
            })
            .in_catalog()?;
        if applied.is_none() {
            // A ref log the catalog never applied is not overwritten: the catalog was made
            // anew, or restored from a copy older than the ref log (repair reconciles them).
            if std::fs::metadata(&path).map_or(0, |m| m.len()) > 0 {
                return Err(Error::CatalogLost {
                    path: self.path.clone(),
                    reason: if create {
                        "a ref log is there without its catalog".into()
                    } else {
                        "the catalog predates the ref log beside it (restored from an older copy?)"
                            .into()
                    },
                });
            }
            write_snapshot(&tx, &self.path, &path)?;
        }
        tx.commit().in_catalog()?;
        Ok(())
    }

    /// Runs SQLite's own consistency check, then looks for rows pointing at nothing
    /// (`PRAGMA foreign_key_check`: an object whose frame is gone, a head naming no version).
    ///
    /// # Errors
    /// [`Error::Corrupt`] listing what either check found (at most ten dangling rows).
    pub fn check_integrity(&self) -> Result<()> {
        let mut stmt = self.conn.prepare("PRAGMA integrity_check").in_catalog()?;
        let rows: Vec<String> = stmt
            .query_map([], |row| row.get(0))
            .in_catalog()?
            .collect::<rusqlite::Result<_>>()
            .in_catalog()?;
        if rows != ["ok"] {
            return Err(Error::corrupt(&self.path, rows.join("; ")));
        }
        // Rows pointing at nothing (a frame, pack or version that is not there).
        let mut stmt = self.conn.prepare("PRAGMA foreign_key_check").in_catalog()?;
        let dangling: Vec<String> = stmt
            .query_map([], |row| {
                Ok(format!(
                    "a row of {} (rowid {}) points at a missing row of {}",
                    row.get::<_, String>(0)?,
                    row.get::<_, Option<i64>>(1)?
                        .map_or_else(|| "-".to_string(), |r| r.to_string()),
                    row.get::<_, String>(2)?
                ))
            })
            .in_catalog()?
            .collect::<rusqlite::Result<_>>()
            .in_catalog()?;
        if !dangling.is_empty() {
            let total = dangling.len();
            let mut shown: Vec<String> = dangling.into_iter().take(10).collect();
            if total > 10 {
                shown.push(format!("and {} more", total - 10));
            }
            return Err(Error::corrupt(&self.path, shown.join("; ")));
        }
        Ok(())
    }
}

fn configure(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_timeout(Duration::from_secs(60))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    // FULL: a commit that reported success survives power loss, not only a crash.
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    Ok(())
}

/// Turns "file is not a database" and similar into [`Error::Corrupt`] naming the file.
fn corrupt_or(path: &Path, error: rusqlite::Error) -> Error {
    match &error {
        rusqlite::Error::SqliteFailure(f, _)
            if matches!(
                f.code,
                rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt
            ) =>
        {
            Error::corrupt(path, "the catalog is not a valid SQLite database")
        }
        // `rusqlite::Error` is `#[non_exhaustive]`: the rest stays an SQLite error, classed
        // by its code.
        _ => catalog_error(error),
    }
}

/// One write transaction on the catalog; dropped without [`CatalogWriter::commit`], it rolls back.
pub struct CatalogWriter<'a> {
    tx: rusqlite::Transaction<'a>,
    ref_log: PathBuf,
    refs: RefCell<Vec<RefLogEntry>>,
}

impl CatalogWriter<'_> {
    /// Makes every write of this transaction durable and visible at once. Changes to names
    /// go to the ref log first (appended and synced; see [`crate::reflog`]), then the
    /// transaction commits and records the log's new length, so the log is never behind.
    /// When the transaction then fails to commit (a full disk), the lines appended for it are
    /// cut off again: the log names nothing the catalog did not record.
    ///
    /// # Errors
    /// [`Error::Catalog`] (a full disk, for one) or [`Error::Io`] writing the ref log;
    /// nothing is then recorded in the catalog.
    pub fn commit(self) -> Result<()> {
        let entries = self.refs.take();
        // The log's length before this transaction's lines were appended to it.
        let mut appended_to = None;
        if !entries.is_empty() {
            let applied: Option<i64> = self
                .tx
                .query_row("SELECT length FROM ref_log WHERE id = 1", [], |row| {
                    row.get(0)
                })
                .in_catalog()?;
            // NULL only while `dsv repair` rebuilds: it adopts the log as a whole at the end.
            if let Some(applied) = applied {
                let applied = applied.max(0) as u64;
                let bytes = reflog::encode(&entries, unix_now());
                let length = if applied + bytes.len() as u64 > reflog::COMPACT_AT {
                    None
                } else {
                    match reflog::append(&self.ref_log, applied, &bytes) {
                        Ok(length) => {
                            appended_to = Some(applied);
                            Some(length)
                        }
                        // Shorter than recorded (damaged): rewritten whole below.
                        Err(Error::Corrupt { .. }) => None,
                        Err(e) => return Err(e),
                    }
                };
                let recorded = match length {
                    Some(length) => self
                        .tx
                        .execute(
                            "UPDATE ref_log SET length = ?1 WHERE id = 1",
                            [length as i64],
                        )
                        .map(drop)
                        .map_err(catalog_error),
                    None => write_snapshot(&self.tx, &self.ref_log, &self.ref_log),
                };
                if let Err(e) = recorded {
                    cut_back(&self.ref_log, appended_to);
                    return Err(e);
                }
            }
        }
        if let Err(e) = self.tx.commit() {
            cut_back(&self.ref_log, appended_to);
            return Err(catalog_error(e));
        }
        Ok(())
    }

    /// Queues a change to names for the ref log.
    fn log(&self, entry: RefLogEntry) {
        self.refs.borrow_mut().push(entry);
    }
}

/// Undoes [`reflog::append`] of a transaction that did not commit, when it appended
/// (`applied`: the length before). Best effort: lines left past the catalog's recorded length
/// are harmless (the next append moves them aside).
fn cut_back(ref_log: &Path, applied: Option<u64>) {
    if let Some(applied) = applied {
        let _ = reflog::cut(ref_log, applied);
    }
}

/// Rewrites the ref log at `ref_log` as a snapshot of the names `conn` (inside a write
/// transaction) gives, and records its length as applied.
fn write_snapshot(conn: &Connection, catalog: &Path, ref_log: &Path) -> Result<()> {
    let state = ref_state_of(conn, catalog)?;
    let length = reflog::rewrite(ref_log, &reflog::encode(&state.entries(), unix_now()))?;
    conn.execute(
        "UPDATE ref_log SET length = ?1 WHERE id = 1",
        [length as i64],
    )
    .in_catalog()?;
    Ok(())
}

/// Reads the names a catalog gives (see [`Catalog::ref_state`]).
fn ref_state_of(conn: &Connection, path: &Path) -> Result<RefState> {
    let id = |bytes: Vec<u8>| {
        ObjectId::from_slice(&bytes)
            .ok_or_else(|| Error::corrupt(path, "an id in the catalog is not 32 bytes"))
    };
    let mut state = RefState::default();
    let mut stmt = conn
        .prepare("SELECT name, head FROM datasets WHERE head IS NOT NULL")
        .in_catalog()?;
    for row in stmt
        .query_map([], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, Vec<u8>>(1)?))
        })
        .in_catalog()?
    {
        let (name, head) = row.in_catalog()?;
        state.heads.insert(name, id(head)?);
    }
    let mut stmt = conn
        .prepare("SELECT d.name, t.name, t.version FROM tags t JOIN datasets d ON d.id = t.dataset")
        .in_catalog()?;
    for row in stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, Vec<u8>>(2)?,
            ))
        })
        .in_catalog()?
    {
        let (dataset, tag, version) = row.in_catalog()?;
        state.tags.insert((dataset, tag), id(version)?);
    }
    let mut stmt = conn
        .prepare("SELECT name, url, options FROM remotes ORDER BY position, name")
        .in_catalog()?;
    for row in stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
            ))
        })
        .in_catalog()?
    {
        let (name, url, options) = row.in_catalog()?;
        let options = serde_json::from_str(&options).unwrap_or_default();
        state.remote_order.push(name.clone());
        state.remotes.insert(name, (url, options));
    }
    let mut stmt = conn
        .prepare("SELECT version, reason, until FROM pins")
        .in_catalog()?;
    for row in stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, Vec<u8>>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, Option<i64>>(2)?,
            ))
        })
        .in_catalog()?
    {
        let (version, reason, until) = row.in_catalog()?;
        state.pins.insert(id(version)?, (reason, until));
    }
    let mut stmt = conn
        .prepare("SELECT id FROM versions WHERE removed_at IS NOT NULL")
        .in_catalog()?;
    for row in stmt
        .query_map([], |r| r.get::<_, Vec<u8>>(0))
        .in_catalog()?
    {
        state.removed.insert(id(row.in_catalog()?)?);
    }
    Ok(state)
}

/// Current time in seconds since the Unix epoch.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_valid() {
        MIGRATIONS.validate().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let catalog = Catalog::open(&dir.path().join("catalog.db"), true).unwrap();
        let applied: i64 = catalog
            .conn()
            .query_row("PRAGMA user_version", [], |row| row.get(0))
            .unwrap();
        assert_eq!(applied as usize, schema_version());
    }

    /// docs/format.md states the schema version this build migrates to and lists every
    /// migration file.
    #[test]
    fn the_format_doc_names_every_migration() {
        let doc = include_str!("../../../../docs/format.md");
        let stated = format!("The current schema version is **{}**.", schema_version());
        assert!(doc.contains(&stated), "docs/format.md should say: {stated}");
        let files = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations")).unwrap();
        let mut count = 0;
        for file in files {
            let name = file.unwrap().file_name().into_string().unwrap();
            let row = format!(
                "| `{name}` (schema {}) |",
                name[..4].parse::<usize>().unwrap()
            );
            assert!(doc.contains(&row), "docs/format.md lacks the row {row}");
            count += 1;
        }
        assert_eq!(count, schema_version());
    }

    /// The first column of every row `sql` gives.
    fn column<T: rusqlite::types::FromSql>(conn: &Connection, sql: &str) -> Vec<T> {
        conn.prepare(sql)
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }

    /// A schema 9 catalog's stat cache survives the move to schema 10, re-keyed so that it
    /// reads back in path order ("a/b" before "a.c", unlike byte order).
    #[test]
    fn the_stat_cache_is_rekeyed_in_path_order_by_migration_10() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.db");
        let mut conn = Connection::open(&path).unwrap();
        migrations(9).to_latest(&mut conn).unwrap();
        conn.execute_batch(
            "INSERT INTO workspaces (id, path, updated_at) VALUES (1, '/w', 0);
             INSERT INTO stat_cache VALUES (1, 'a.c', 0, 1, 2, 3, 4, x'00', 5);
             INSERT INTO stat_cache VALUES (1, 'a/b', 0, 6, 7, 8, 9, x'00', 10);
             INSERT INTO stat_cache VALUES (1, 'a', 0, 1, 1, 1, 1, x'00', 1);",
        )
        .unwrap();
        migrations(10).to_latest(&mut conn).unwrap();
        let mut stmt = conn
            .prepare(
                "SELECT key, mtime_ns, checked_ns FROM stat_cache WHERE workspace = 1 ORDER BY key",
            )
            .unwrap();
        let rows: Vec<(Vec<u8>, i64, i64)> = stmt
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(
            rows,
            [
                (b"a".to_vec(), 1, 1),
                (b"a\0b".to_vec(), 6, 10),
                (b"a.c".to_vec(), 1, 5)
            ]
        );
    }

    /// Schema 12: remotes recorded before it, read in name order then, keep that order.
    #[test]
    fn migration_12_keeps_the_remotes_in_name_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.db");
        let mut conn = Connection::open(&path).unwrap();
        migrations(11).to_latest(&mut conn).unwrap();
        conn.execute_batch(
            "INSERT INTO remotes (name, url, options, created_at) VALUES ('zeta', 'file:///z', '{}', 1);
             INSERT INTO remotes (name, url, options, created_at) VALUES ('alpha', 'file:///a', '{}', 2);
             INSERT INTO remotes (name, url, options, created_at) VALUES ('mid', 'file:///m', '{}', 3);",
        )
        .unwrap();
        migrations(12).to_latest(&mut conn).unwrap();
        let rows: Vec<(String, i64)> = {
            let mut stmt = conn
                .prepare("SELECT name, position FROM remotes ORDER BY position")
                .unwrap();
            stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap()
        };
        assert_eq!(
            rows,
            [
                ("alpha".to_string(), 1),
                ("mid".to_string(), 2),
                ("zeta".to_string(), 3)
            ]
        );
    }

    /// Schema 11: a stat cache entry names no file id (it vouches for the workspace's
    /// version at its path), and the rows of schema 10, which cannot be checked against
    /// their versions in a migration, are dropped; the workspace records stay.
    #[test]
    fn migration_11_drops_the_stat_cache_rows_and_their_file_ids() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.db");
        {
            let mut conn = Connection::open(&path).unwrap();
            migrations(10).to_latest(&mut conn).unwrap();
            conn.execute_batch(
                "INSERT INTO workspaces (id, path, updated_at) VALUES (1, '/w', 0);
                 INSERT INTO stat_cache VALUES (1, x'61', 0, 1, 2, 3, 4, x'00', 5);",
            )
            .unwrap();
        }
        let catalog = Catalog::open(&path, false).unwrap();
        let columns: Vec<String> = column(
            &catalog.conn,
            "SELECT name FROM pragma_table_info('stat_cache')",
        );
        assert_eq!(
            columns,
            [
                "workspace",
                "key",
                "size",
                "mtime_ns",
                "ctime_ns",
                "inode",
                "mode"
            ]
        );
        let rows: i64 = catalog
            .conn
            .query_row("SELECT count(*) FROM stat_cache", [], |row| row.get(0))
            .unwrap();
        assert_eq!(rows, 0);
        assert_eq!(catalog.workspaces().unwrap().len(), 1);
    }

    /// Schema 12: a remote pack with the id and size of a local pack shares its index; the
    /// rows copied from it before are dropped, but for objects `objects` locates in another
    /// pack. Remote packs that are not local, or local under another size, keep theirs.
    #[test]
    fn migration_13_drops_the_copies_of_local_pack_indexes() {
        use crate::object::ObjectKind::{Chunk, Tree};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.db");
        let [p, q, other] = [b"p", b"q", b"o"].map(|s| ObjectId::of(s));
        let [a, b, c, d, e] = [b"a", b"b", b"c", b"d", b"e"].map(|s| ObjectId::of(s));
        {
            let mut conn = Connection::open(&path).unwrap();
            migrations(12).to_latest(&mut conn).unwrap();
            let sql = |sql: &str, params: &[&dyn rusqlite::ToSql]| {
                conn.execute(sql, params).unwrap();
            };
            sql(
                "INSERT INTO remotes (id, name, url, options, created_at) VALUES (1, 'origin', 'file:///r', '{}', 0)",
                &[],
            );
            for (row, pack, size) in [(1, &q, 100), (2, &p, 2000)] {
                sql(
                    "INSERT INTO packs (id, pack_id, size, created_at) VALUES (?1, ?2, ?3, 0)",
                    &[&row, &&pack.0[..], &size],
                );
                sql(
                    "INSERT INTO frames (id, pack, offset, stored_length, raw_length, compression) VALUES (?1, ?1, 16, 50, 100, 1)",
                    &[&row],
                );
            }
            for (id, kind, frame, offset) in [(c, Chunk, 1, 0), (a, Chunk, 2, 0), (b, Tree, 2, 10)]
            {
                sql(
                    "INSERT INTO objects (id, kind, frame, offset, length) VALUES (?1, ?2, ?3, ?4, 10)",
                    &[&&id.0[..], &(kind as u8), &frame, &offset],
                );
            }
            // p as pushed; a pack only the remote has; q under another size.
            for (row, pack, size) in [(1, &p, 2000), (2, &other, 500), (3, &q, 999)] {
                sql(
                    "INSERT INTO remote_packs (id, remote, pack_id, size) VALUES (?1, 1, ?2, ?3)",
                    &[&row, &&pack.0[..], &size],
                );
                sql(
                    "INSERT INTO remote_frames (id, pack, offset, stored_length, raw_length, compression) VALUES (?1, ?1, 16, 50, 100, 1)",
                    &[&row],
                );
            }
            for (id, kind, frame, offset) in [
                (a, Chunk, 1, 0),
                (b, Tree, 1, 10),
                (c, Chunk, 1, 20),
                (d, Chunk, 2, 0),
                (e, Chunk, 3, 0),
            ] {
                sql(
                    "INSERT INTO remote_objects (remote, id, kind, frame, offset, length) VALUES (1, ?1, ?2, ?3, ?4, 10)",
                    &[&&id.0[..], &(kind as u8), &frame, &offset],
                );
            }
        }
        let catalog = Catalog::open(&path, false).unwrap();
        let shared: Vec<i64> = column(
            &catalog.conn,
            "SELECT local_index FROM remote_packs ORDER BY id",
        );
        assert_eq!(shared, [1, 0, 0]);
        let kept: Vec<i64> = column(
            &catalog.conn,
            "SELECT frame FROM remote_objects ORDER BY frame",
        );
        assert_eq!(kept, [1, 2, 3], "c (located in q), d and e keep their rows");
        let frames: Vec<i64> = column(&catalog.conn, "SELECT id FROM remote_frames ORDER BY id");
        assert_eq!(frames, [1, 2, 3]);
        for (id, kind, pack, offset, local) in [
            (a, Chunk, p, 0, true),
            (b, Tree, p, 10, true),
            (c, Chunk, p, 20, false),
            (d, Chunk, other, 0, false),
            (e, Chunk, q, 0, false),
        ] {
            let found = catalog.remote_locate(1, &id, kind).unwrap().unwrap();
            assert_eq!(
                (
                    found.pack,
                    found.frame.offset,
                    found.offset,
                    found.in_local_pack()
                ),
                (pack, 16, offset, local)
            );
        }
        catalog.check_integrity().unwrap();
    }

    /// An entry vouches for its workspace's version: only a workspace whose version is live
    /// (recorded, not removed, not evicted) has its entries read, and gc's
    /// `drop_unheld_stat_entries` deletes the entries of every other workspace.
    #[test]
    fn only_the_entries_of_a_workspace_holding_a_live_version_are_read_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let mut catalog = Catalog::open(&dir.path().join("catalog.db"), true).unwrap();
        catalog
            .conn
            .execute_batch(
                "INSERT INTO datasets (id, name, created_at) VALUES (1, 'ds', 0);
                 INSERT INTO versions (id, dataset, tree, author, created_at, file_count, byte_count, source, message, removed_at, evicted_at)
                     VALUES (x'01', 1, x'00', 'a', 0, 1, 1, 's', '', NULL, NULL),
                            (x'02', 1, x'00', 'a', 0, 1, 1, 's', '', 5, NULL),
                            (x'03', 1, x'00', 'a', 0, 1, 1, 's', '', NULL, 5);
                 INSERT INTO workspaces (id, path, dataset, version, updated_at) VALUES
                     (1, '/live', 1, x'01', 0), (2, '/removed', 1, x'02', 0),
                     (3, '/evicted', 1, x'03', 0), (4, '/none', NULL, NULL, 0);",
            )
            .unwrap();
        let entry = StatEntry {
            size: 1,
            mtime_ns: 2,
            ctime_ns: 3,
            inode: 4,
            mode: 0o100644,
        };
        let writer = catalog.writer().unwrap();
        for workspace in 1..=4 {
            writer
                .update_stat_cache(workspace, [("d/f", Some(&entry)), ("g", Some(&entry))])
                .unwrap();
        }
        writer.commit().unwrap();
        let read = |catalog: &Catalog, workspace: i64| {
            let mut paths = Vec::new();
            catalog
                .stat_cache_in_order(workspace, |path, found| {
                    assert_eq!(found, entry);
                    paths.push(path);
                    Ok(true)
                })
                .unwrap();
            paths
        };
        assert_eq!(read(&catalog, 1), ["d/f", "g"]);
        for workspace in 2..=4 {
            assert!(
                read(&catalog, workspace).is_empty(),
                "workspace {workspace}"
            );
        }
        let writer = catalog.writer().unwrap();
        assert_eq!(writer.drop_unheld_stat_entries().unwrap(), 6);
        writer.commit().unwrap();
        let rows: Vec<i64> = column(
            &catalog.conn,
            "SELECT workspace FROM stat_cache ORDER BY workspace",
        );
        assert_eq!(rows, [1, 1]);
    }

    #[test]
    fn a_catalog_from_a_newer_dsv_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.db");
        drop(Catalog::open(&path, true).unwrap());
        Connection::open(&path)
            .unwrap()
            .pragma_update(None, "user_version", 99)
            .unwrap();
        assert!(matches!(
            Catalog::open(&path, false),
            Err(Error::StoreTooNew { found: 99, .. })
        ));
    }

    #[test]
    fn a_file_that_is_not_a_database_is_reported_as_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.db");
        std::fs::write(&path, vec![0x42u8; 8192]).unwrap();
        assert!(matches!(
            Catalog::open(&path, false),
            Err(Error::Corrupt { .. })
        ));
    }

    /// A new catalog in a temporary directory (dropped with it).
    pub(super) fn new_catalog() -> (tempfile::TempDir, Catalog) {
        let dir = tempfile::tempdir().unwrap();
        let catalog = Catalog::open(&dir.path().join("catalog.db"), true).unwrap();
        (dir, catalog)
    }

    /// Version number `n` of `dataset` after `parent`, with its id.
    pub(super) fn sample_version(
        dataset: &str,
        parent: Option<ObjectId>,
        n: i64,
    ) -> (ObjectId, crate::object::Version) {
        let version = crate::object::Version {
            dataset: dataset.to_string(),
            tree: ObjectId::of(format!("tree {n}").as_bytes()),
            parent,
            author: "tester".into(),
            time: 1_000 + n,
            files: n as u64,
            bytes: 10 * n as u64,
            source: "/src".into(),
            provenance: None,
            message: format!("version {n}"),
        };
        (version.id(), version)
    }

    /// Records `count` versions of `dataset`, each the next one's parent, the last its head;
    /// returns their ids, oldest first.
    pub(super) fn add_line(catalog: &mut Catalog, dataset: &str, count: i64) -> Vec<ObjectId> {
        let writer = catalog.writer().unwrap();
        let mut ids: Vec<ObjectId> = Vec::new();
        for n in 0..count {
            let (id, version) = sample_version(dataset, ids.last().copied(), n);
            writer.add_version(&id, &version).unwrap();
            ids.push(id);
        }
        writer.commit().unwrap();
        ids
    }

    /// A sealed pack (never written: the catalog only records it) named by `seed`, with one
    /// frame of 1000 raw bytes holding `objects` back to back, 10 bytes each.
    pub(super) fn sample_pack(
        seed: &str,
        objects: &[(ObjectId, crate::object::ObjectKind)],
    ) -> crate::pack::SealedPack {
        use crate::pack::{Compression, FrameRecord, ObjectRecord};
        crate::pack::SealedPack {
            id: ObjectId::of(seed.as_bytes()),
            size: 2_000,
            frames: vec![FrameRecord {
                offset: 16,
                stored_length: 500,
                raw_length: 1_000,
                compression: Compression::Zstd,
            }],
            deltas: Vec::new(),
            objects: objects
                .iter()
                .enumerate()
                .map(|(n, &(id, kind))| ObjectRecord {
                    id,
                    kind,
                    frame: 0,
                    offset: 10 * n as u32,
                    length: 10,
                })
                .collect(),
        }
    }

    #[test]
    fn every_migration_step_ends_at_the_latest_schema() {
        for applied in 1..=schema_version() {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("catalog.db");
            {
                let mut conn = Connection::open(&path).unwrap();
                migrations(applied).to_latest(&mut conn).unwrap();
                let version: i64 = conn
                    .query_row("PRAGMA user_version", [], |row| row.get(0))
                    .unwrap();
                assert_eq!(version as usize, applied);
            }
            let catalog = Catalog::open(&path, false).unwrap();
            let version: i64 = catalog
                .conn()
                .query_row("PRAGMA user_version", [], |row| row.get(0))
                .unwrap();
            assert_eq!(version as usize, schema_version(), "from schema {applied}");
            catalog.check_integrity().unwrap();
            assert!(catalog.ref_log_applied().unwrap().is_some());
        }
    }

    #[test]
    fn an_existing_catalog_with_no_schema_is_lost_not_recreated() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.db");
        std::fs::write(&path, b"").unwrap();
        assert!(matches!(
            Catalog::open(&path, false),
            Err(Error::CatalogLost { .. })
        ));
        // No schema was written into it: it stays lost.
        assert!(matches!(
            Catalog::open(&path, false),
            Err(Error::CatalogLost { .. })
        ));
    }

    #[test]
    fn creating_a_catalog_beside_a_ref_log_it_never_applied_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(reflog::FILE_NAME), b"a line\n").unwrap();
        assert!(matches!(
            Catalog::open(&dir.path().join("catalog.db"), true),
            Err(Error::CatalogLost { .. })
        ));
    }

    #[test]
    fn a_writer_dropped_without_commit_leaves_nothing() {
        let (_dir, mut catalog) = new_catalog();
        let (id, version) = sample_version("ds", None, 1);
        let log_before = std::fs::read(catalog.ref_log_path()).unwrap();
        {
            let writer = catalog.writer().unwrap();
            writer.add_version(&id, &version).unwrap();
            assert_eq!(writer.head("ds").unwrap(), Some(id));
        }
        assert!(!catalog.has_dataset("ds").unwrap());
        assert!(catalog.version(&id).unwrap().is_none());
        assert_eq!(std::fs::read(catalog.ref_log_path()).unwrap(), log_before);
    }

    #[test]
    fn a_commit_logs_its_name_changes_and_records_the_logs_length() {
        let (_dir, mut catalog) = new_catalog();
        let ids = add_line(&mut catalog, "ds", 2);
        let writer = catalog.writer().unwrap();
        writer.set_tag("ds", "v1", &ids[0], false).unwrap();
        writer.pin(&ids[1], "keep", Some(99)).unwrap();
        writer
            .add_remote("origin", "file:///r", &Default::default())
            .unwrap();
        writer.commit().unwrap();
        let length = std::fs::metadata(catalog.ref_log_path()).unwrap().len();
        assert_eq!(catalog.ref_log_applied().unwrap(), Some(length));
        let state = catalog.ref_state().unwrap();
        assert_eq!(state.heads["ds"], ids[1]);
        assert_eq!(state.tags[&("ds".to_string(), "v1".to_string())], ids[0]);
        assert_eq!(state.pins[&ids[1]], ("keep".to_string(), Some(99)));
        assert_eq!(state.remotes["origin"].0, "file:///r");
        // The log read back gives the same names.
        let read = reflog::read(&catalog.ref_log_path(), Some(length)).unwrap();
        assert_eq!(read.state(), state);
    }

    #[test]
    fn a_row_pointing_at_nothing_fails_the_integrity_check() {
        let (_dir, catalog) = new_catalog();
        catalog.check_integrity().unwrap();
        catalog
            .conn()
            .execute_batch(
                "PRAGMA foreign_keys = OFF;
                 INSERT INTO datasets (id, name, head, created_at) VALUES (1, 'ds', x'01', 0);
                 PRAGMA foreign_keys = ON;",
            )
            .unwrap();
        let Err(Error::Corrupt { detail, .. }) = catalog.check_integrity() else {
            panic!("a head naming no version passed");
        };
        assert!(detail.contains("datasets"), "{detail}");
    }
}
