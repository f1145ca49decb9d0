//! `dsv export`: a version's files as a deterministic tar stream (SageMaker's Pipe mode),
//! read through the read engine ([`crate::read`]), so it works on versions whose data is only
//! on a remote and streams before the whole version is here. The version is leased while it
//! is read. `cat` (one file) is [`super::cat`].

use std::collections::HashSet;
use std::path::Path;

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::read::{ReadEngine, Selection};
use crate::tree::FlatKind;

/// What [`export_tar`] wrote.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ExportReport {
    /// The version exported.
    pub version: ObjectId,
    /// Files written.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// Writes the files `selection` picks (with their directories, and the version's symlinks
/// when everything is selected) to `out` as a tar stream (POSIX ustar with GNU long names),
/// SageMaker's Pipe mode. The stream is deterministic: entries in path order (depth first,
/// siblings sorted), owner 0:0 without names, mode 0644 (0755 for executables and
/// directories), every time the version's time; so one version always gives the same bytes.
/// Files are fetched one at a time as they are reached, so the stream starts before the whole
/// version is here. The version is leased ([`crate::lease`]) while it is read: a `gc` meanwhile
/// keeps it and does not wait.
///
/// # Errors
/// As [`ReadEngine::version`], [`crate::read::VersionHandle::select`] and
/// [`crate::read::VersionHandle::open`];
/// [`Error::Io`] naming `out_name` when writing fails (a closed pipe: `BrokenPipe`), or
/// [`Error::IoOperation`] when `out_name` is `None` (`out` is a stream that is no file);
/// [`Error::Interrupted`].
pub fn export_tar(
    engine: &ReadEngine,
    revision: &str,
    selection: &Selection,
    out: &mut dyn std::io::Write,
    out_name: Option<&Path>,
    progress: &dyn crate::progress::Progress,
) -> Result<ExportReport> {
    let version = engine.version(revision)?;
    let files = version.select(selection)?;
    let chosen: HashSet<&str> = files.iter().map(|e| e.path.as_str()).collect();
    let mut dirs: HashSet<&str> = HashSet::new();
    for file in &files {
        let mut path = file.path.as_str();
        while let Some((parent, _)) = path.rsplit_once('/') {
            dirs.insert(parent);
            path = parent;
        }
    }
    let time = version.version().time.max(0) as u64;
    let io = |source| match out_name {
        Some(path) => Error::Io {
            path: path.to_path_buf(),
            source,
        },
        None => Error::IoOperation {
            operation: "writing the output",
            source,
        },
    };
    let total: u64 = files.iter().map(|e| e.size).sum();
    progress.start("exporting", total, crate::progress::Unit::Bytes);
    let mut builder = tar::Builder::new(out);
    let mut report = ExportReport {
        version: version.id(),
        files: 0,
        bytes: 0,
    };
    for entry in version.entries()? {
        crate::interrupt::check()?;
        let mut header = tar::Header::new_gnu();
        header.set_mtime(time);
        header.set_uid(0);
        header.set_gid(0);
        match &entry.kind {
            FlatKind::Dir if dirs.contains(entry.path.as_str()) => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_mode(0o755);
                header.set_size(0);
                builder
                    .append_data(&mut header, format!("{}/", entry.path), std::io::empty())
                    .map_err(io)?;
            }
            FlatKind::Symlink { target } if selection.is_everything() => {
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_mode(0o777);
                header.set_size(0);
                builder
                    .append_link(&mut header, &entry.path, target)
                    .map_err(io)?;
            }
            FlatKind::File { executable } if chosen.contains(entry.path.as_str()) => {
                let file = version.open(&entry.path)?;
                header.set_entry_type(tar::EntryType::Regular);
                header.set_mode(if *executable { 0o755 } else { 0o644 });
                header.set_size(file.size());
                let mut reader = Counted {
                    inner: file.reader(0),
                    progress,
                };
                builder
                    .append_data(&mut header, &entry.path, &mut reader)
                    .map_err(|e| {
                        crate::interrupt::check()
                            .err()
                            .unwrap_or_else(|| unwrap_io(e, io))
                    })?;
                report.files += 1;
                report.bytes += file.size();
            }
            _ => {}
        }
    }
    builder.finish().map_err(io)?;
    builder.into_inner().map_err(io)?.flush().map_err(io)?;
    progress.finish();
    Ok(report)
}

/// The engine's own error when `error` carries one (a read failing inside `std::io::Read`),
/// else `otherwise(error)`.
fn unwrap_io(error: std::io::Error, otherwise: impl Fn(std::io::Error) -> Error) -> Error {
    if error.get_ref().is_some_and(|inner| inner.is::<Error>()) {
        if let Some(inner) = error.into_inner()
            && let Ok(engine_error) = inner.downcast::<Error>()
        {
            return *engine_error;
        }
        return Error::Internal {
            detail: "a read error lost its cause".into(),
        };
    }
    otherwise(error)
}

/// A reader that reports the bytes it passes on, checking for Ctrl-C.
struct Counted<'a, R> {
    inner: R,
    progress: &'a dyn crate::progress::Progress,
}

impl<R: std::io::Read> std::io::Read for Counted<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        // Not `ErrorKind::Interrupted`: `io::copy` retries that one (it means EINTR), so
        // the copy would spin. The engine error travels inside and is unwrapped by the caller.
        crate::interrupt::check().map_err(std::io::Error::other)?;
        let n = self.inner.read(buf)?;
        self.progress.advance(n as u64);
        Ok(n)
    }
}
