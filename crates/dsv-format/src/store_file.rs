//! Opening a file inside a store (`.dsv`): one rule for every open.
//!
//! A store's directory may hold what dsv did not put there (a planted FIFO, a symlink to
//! elsewhere, a device). Opening a FIFO waits for a writer or reader forever, deaf to
//! SIGTERM, and a symlink would make dsv read or lock a file outside the store. So every
//! file inside a store is opened through [`open`]: the last name is never followed
//! (`O_NOFOLLOW`), the open never waits (`O_NONBLOCK`), and anything but a regular file is
//! refused (checked with `fstat` on what was opened), with an error that names what the path
//! is and what to do. The same rule is the `.dsvignore` reader's.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Options that read an existing file.
pub fn read() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.read(true);
    options
}

/// Options of a lock file: created when missing, written, never truncated.
pub fn lock() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.create(true).truncate(false).write(true);
    options
}

/// Opens `path` with `options` (as [`read`] or [`lock`] give them, or any other), never
/// following its last name and never waiting, and returns it only when it is a regular file.
///
/// # Errors
/// The open's error (`NotFound` for a missing file); an error of kind
/// [`io::ErrorKind::InvalidInput`] saying what the path is (a FIFO, a symbolic link, a
/// directory, a socket, a device) and to remove it, when it is not a regular file.
pub fn open(path: &Path, mut options: OpenOptions) -> io::Result<File> {
    options.custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK | nix::libc::O_CLOEXEC);
    let file = match options.open(path) {
        Ok(file) => file,
        Err(e) => {
            // A symlink (`ELOOP`), a FIFO without a reader (`ENXIO`), a directory
            // (`EISDIR`), a device: say what it is rather than the bare errno.
            return Err(match std::fs::symlink_metadata(path) {
                Ok(meta) if !meta.is_file() => not_regular(&meta.file_type()),
                _ => e,
            });
        }
    };
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(not_regular(&meta.file_type()));
    }
    Ok(file)
}

/// [`open`] with [`read`]: an existing file inside a store, for reading.
///
/// # Errors
/// As [`open`].
pub fn open_read(path: &Path) -> io::Result<File> {
    open(path, read())
}

/// [`open`] with [`lock`]: a lock file inside a store, created when missing.
///
/// # Errors
/// As [`open`].
pub fn open_lock(path: &Path) -> io::Result<File> {
    open(path, lock())
}

/// The whole of the regular file `path` inside a store, at most `limit` bytes of it (a file
/// longer than that is cut at `limit + 1` bytes, for the caller to refuse).
///
/// # Errors
/// As [`open`]; the read's error.
pub fn read_to_end(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    open_read(path)?
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Checks, without opening it, that `path` is a regular file or absent (`lstat`): for the
/// files inside a store that a library opens (SQLite's catalog and its `-wal`, `-shm` and
/// `-journal` files), which [`open`] cannot open for it.
///
/// # Errors
/// As [`open`] for a path that is not a regular file.
pub fn check_regular_or_absent(path: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if !meta.is_file() => Err(not_regular(&meta.file_type())),
        _ => Ok(()),
    }
}

/// The error for a path that is not a regular file.
fn not_regular(kind: &std::fs::FileType) -> io::Error {
    let what = if kind.is_symlink() {
        "a symbolic link"
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "a device"
    };
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "it is not a regular file but {what}, which dsv never opens there; remove it (or put back the regular file it replaced)"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_open_and_nothing_waits() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo.lock");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let link = dir.path().join("link.lock");
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), &link).unwrap();
        for path in [&fifo, &link, &dir.path().to_path_buf()] {
            for result in [open_lock(path), open_read(path)] {
                let error = result.unwrap_err();
                assert_eq!(error.kind(), io::ErrorKind::InvalidInput, "{path:?}");
                assert!(error.to_string().contains("remove it"), "{error}");
            }
        }
        assert!(
            !dir.path().join("elsewhere").exists(),
            "a symlink is never followed"
        );
        let lock = dir.path().join("new.lock");
        open_lock(&lock).unwrap();
        assert!(lock.is_file());
        assert_eq!(read_to_end(&lock, 10).unwrap(), b"");
        assert_eq!(
            open_read(&dir.path().join("missing")).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }
}
