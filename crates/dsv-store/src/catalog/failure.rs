//! SQLite's errors as the library's: this crate owns the database, so it reads SQLite's codes
//! and classes each failure ([`CatalogClass`]) when it builds the [`Error::Catalog`], keeping
//! SQLite's error as the cause. The error type (in `dsv-format`) knows no SQLite.

use crate::error::{CatalogClass, CatalogFailure, Error, Result};

/// Converts SQLite's errors where `?` would: `query(...).in_catalog()?`.
pub(crate) trait SqliteResultExt<T> {
    /// The value, or SQLite's error as an [`Error::Catalog`] ([`catalog_error`]).
    fn in_catalog(self) -> Result<T>;
}

impl<T> SqliteResultExt<T> for rusqlite::Result<T> {
    fn in_catalog(self) -> Result<T> {
        self.map_err(catalog_error)
    }
}

/// SQLite's error as an [`Error::Catalog`], classed by its code ([`classify`]).
pub fn catalog_error(error: rusqlite::Error) -> Error {
    let (class, message) = classify(&error);
    Error::Catalog(CatalogFailure::new(class, message, Box::new(error)))
}

/// The migration library's error as an [`Error::Migration`] (exit 5).
pub fn migration_error(error: rusqlite_migration::Error) -> Error {
    Error::Migration(Box::new(error))
}

/// What SQLite's error means, and the message [`Error::Catalog`] shows for it: a full disk
/// by name (SQLite's own words, "database or disk is full", follow as the cause), anything
/// else as a catalog error.
///
/// `rusqlite::Error` and `rusqlite::ErrorCode` are `#[non_exhaustive]`: they cannot be listed
/// whole, so each test names the codes it picks out and lets the rest through (to
/// [`CatalogClass::Bug`]: a constraint, a misuse, a row that is not there is a query that
/// should not have been made).
pub fn classify(error: &rusqlite::Error) -> (CatalogClass, &'static str) {
    use rusqlite::ErrorCode::*;
    // SQLITE_IOERR_WRITE, _FSYNC and _SHMSIZE: how a full disk shows in a WAL database when
    // SQLite itself does not call it SQLITE_FULL (https://sqlite.org/rescode.html).
    const FULL_DISK_IO_ERRORS: [std::ffi::c_int; 3] = [778, 1034, 4874];
    let rusqlite::Error::SqliteFailure(failure, _) = error else {
        return (CatalogClass::Bug, "catalog error");
    };
    match failure.code {
        DiskFull => (
            CatalogClass::DiskFull,
            "cannot write the catalog: the disk is full",
        ),
        _ if FULL_DISK_IO_ERRORS.contains(&failure.extended_code) => (
            CatalogClass::DiskFull,
            "cannot write the catalog (is the disk full?)",
        ),
        CannotOpen | ReadOnly | PermissionDenied | DatabaseBusy | DatabaseLocked
        | SystemIoFailure => (CatalogClass::Environment, "catalog error"),
        DatabaseCorrupt | NotADatabase => (CatalogClass::Corrupt, "catalog error"),
        _ => (CatalogClass::Bug, "catalog error"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn sqlite(code: std::ffi::c_int) -> Error {
        catalog_error(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(code),
            None,
        ))
    }

    #[test]
    fn sqlite_errors_are_classed_by_cause() {
        // A bug (a constraint, a row that is not there), never "restore your data".
        assert_eq!(
            sqlite(rusqlite::ffi::SQLITE_CONSTRAINT_FOREIGNKEY).kind(),
            ErrorKind::Internal
        );
        assert_eq!(
            catalog_error(rusqlite::Error::QueryReturnedNoRows).kind(),
            ErrorKind::Internal
        );
        assert_eq!(
            sqlite(rusqlite::ffi::SQLITE_CORRUPT).kind(),
            ErrorKind::Corrupt
        );
        assert_eq!(
            sqlite(rusqlite::ffi::SQLITE_NOTADB).kind(),
            ErrorKind::Corrupt
        );
        assert_eq!(sqlite(rusqlite::ffi::SQLITE_BUSY).kind(), ErrorKind::Io);
        // A full disk, however SQLite words it, gets the disk-full treatment.
        assert!(sqlite(rusqlite::ffi::SQLITE_FULL).is_disk_full());
        assert!(sqlite(rusqlite::ffi::SQLITE_IOERR_WRITE).is_disk_full());
        assert!(sqlite(rusqlite::ffi::SQLITE_IOERR_FSYNC).is_disk_full());
        assert!(!sqlite(rusqlite::ffi::SQLITE_IOERR_READ).is_disk_full());
        assert_eq!(
            sqlite(rusqlite::ffi::SQLITE_IOERR_READ).kind(),
            ErrorKind::Io
        );
        assert_eq!(
            sqlite(rusqlite::ffi::SQLITE_FULL).to_string(),
            "cannot write the catalog: the disk is full"
        );
        assert_eq!(
            sqlite(rusqlite::ffi::SQLITE_CORRUPT).to_string(),
            "catalog error"
        );
        assert_eq!(
            sqlite(rusqlite::ffi::SQLITE_IOERR_WRITE).kind(),
            ErrorKind::Io
        );
    }

    #[test]
    fn sqlite_errors_get_the_hint_of_their_class() {
        assert_eq!(
            sqlite(rusqlite::ffi::SQLITE_FULL).hints(),
            ["free some disk space and run the command again; nothing was recorded"]
        );
        assert!(
            sqlite(rusqlite::ffi::SQLITE_CONSTRAINT_FOREIGNKEY).hints()[0]
                .starts_with("this is a bug in dsv")
        );
        assert!(sqlite(rusqlite::ffi::SQLITE_CORRUPT).hints().is_empty());
        // SQLite's own words are the cause, as when SQLite's error was the variant's.
        let full = sqlite(rusqlite::ffi::SQLITE_FULL);
        assert_eq!(
            crate::error::causes(&full),
            [rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
                None
            )
            .to_string()]
        );
    }
}
