//! The catalog: one SQLite database (`.dsv/catalog.db`, WAL mode) that indexes packs,
//! frames and objects, and records datasets, versions, tags, workspaces and stat caches.
//!
//! The schema lives in `migrations/` and is applied by `rusqlite_migration`; connection
//! settings (WAL, foreign keys, busy timeout) are set per connection here, outside the
//! migrations. Writes go through [`CatalogWriter`], one `BEGIN IMMEDIATE` transaction, so a
//! crash leaves either all of an operation's rows or none.

mod objects;
mod remotes;
mod retention;
mod versions;
mod workspaces;

use std::path::{Path, PathBuf};
use std::sync::LazyLock;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, TransactionBehavior};
use rusqlite_migration::{M, Migrations};

pub use objects::ObjectLocation;
pub use remotes::{RemoteLocation, RemoteRecord, RemoteRef};
pub use retention::{CachedVersionRow, PackObject, Pin};
pub use versions::{DatasetSummary, VersionRecord};
pub use workspaces::{StatEntry, Workspace};

use crate::error::{Error, Result};

/// The SQL of every schema migration, in order; the catalog's `user_version` counts those applied.
const MIGRATION_SQL: &[&str] = &[
    include_str!("../../migrations/0001_initial.sql"),
    include_str!("../../migrations/0002_objects_keyed_by_kind.sql"),
    include_str!("../../migrations/0003_remotes.sql"),
    include_str!("../../migrations/0004_pins_and_removal.sql"),
    include_str!("../../migrations/0005_cache_use.sql"),
    include_str!("../../migrations/0006_provenance.sql"),
];

static MIGRATIONS: LazyLock<Migrations<'static>> =
    LazyLock::new(|| Migrations::new(MIGRATION_SQL.iter().map(|sql| M::up(sql)).collect()));

/// Number of migrations this build knows (the newest schema version).
pub fn schema_version() -> usize {
    MIGRATION_SQL.len()
}

/// An open catalog connection.
pub struct Catalog {
    conn: Connection,
    path: PathBuf,
}

impl Catalog {
    /// Opens (creating if `create`) the catalog at `path` and brings its schema up to date.
    ///
    /// # Errors
    /// [`Error::StoreTooNew`] when a newer dsv wrote it; [`Error::Catalog`] or
    /// [`Error::Migration`] when SQLite fails (a corrupt file, for one).
    ///
    /// The path is made absolute first and URI filenames are off: SQLite (built with
    /// `SQLITE_USE_URI`) would read a relative path starting with `file:` (a store in a
    /// directory named `file:x`) as a URI naming another database.
    pub fn open(path: &Path, create: bool) -> Result<Catalog> {
        let absolute = std::path::absolute(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let path = absolute.as_path();
        // No SQLITE_OPEN_URI; an absolute path starts with '/', never with "file:".
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
        if found > schema_version() {
            return Err(Error::StoreTooNew {
                path: path.to_path_buf(),
                found,
                supported: schema_version(),
            });
        }
        if found < schema_version() {
            MIGRATIONS.to_latest(&mut conn)?;
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
    /// busy timeout, instead of failing midway).
    ///
    /// # Errors
    /// [`Error::Catalog`] when the database stays locked past the timeout.
    pub fn writer(&mut self) -> Result<CatalogWriter<'_>> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        Ok(CatalogWriter { tx })
    }

    /// Runs SQLite's own consistency check, then looks for rows pointing at nothing
    /// (`PRAGMA foreign_key_check`: an object whose frame is gone, a head naming no version).
    ///
    /// # Errors
    /// [`Error::Corrupt`] listing what either check found (at most ten dangling rows).
    pub fn check_integrity(&self) -> Result<()> {
        let mut stmt = self.conn.prepare("PRAGMA integrity_check")?;
        let rows: Vec<String> = stmt
            .query_map([], |row| row.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        if rows != ["ok"] {
            return Err(Error::corrupt(&self.path, rows.join("; ")));
        }
        // Rows pointing at nothing (a frame, pack or version that is not there).
        let mut stmt = self.conn.prepare("PRAGMA foreign_key_check")?;
        let dangling: Vec<String> = stmt
            .query_map([], |row| {
                Ok(format!(
                    "a row of {} (rowid {}) points at a missing row of {}",
                    row.get::<_, String>(0)?,
                    row.get::<_, Option<i64>>(1)?
                        .map_or_else(|| "-".to_string(), |r| r.to_string()),
                    row.get::<_, String>(2)?
                ))
            })?
            .collect::<rusqlite::Result<_>>()?;
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
        _ => Error::Catalog(error),
    }
}

/// One write transaction on the catalog; dropped without [`CatalogWriter::commit`], it rolls back.
pub struct CatalogWriter<'a> {
    tx: rusqlite::Transaction<'a>,
}

impl CatalogWriter<'_> {
    /// Makes every write of this transaction durable and visible at once.
    ///
    /// # Errors
    /// [`Error::Catalog`] (a full disk, for one); nothing is then written.
    pub fn commit(self) -> Result<()> {
        self.tx.commit()?;
        Ok(())
    }
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
}
