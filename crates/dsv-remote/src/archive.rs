//! Archives expanded by `dsv import`: recognized by extension, read member by member as
//! streams, every member's path checked before anything of it is stored.
//!
//! Formats: `.tar`, `.tar.gz`/`.tgz`/`.tar.gz2`, `.tar.bz2`/`.tbz`/`.tbz2`, `.tar.xz`/`.txz`
//! (POSIX ustar/pax and GNU tar through the `tar` crate, decompressed by `flate2`, `bzip2`
//! and `liblzma`) are read in one pass from the stream, the decompressor running on a thread
//! of its own. `.zip` (APPNOTE 6.3) keeps its directory at the end, so a zip that is not a
//! local file is first copied to a temporary file in the store (`.dsv/tmp`), then read.
//!
//! Refused, failing the whole import: a member path that is absolute or climbs out with
//! `..`, a symlink whose target leaves the dataset, a hard link to a member not seen
//! before, a name that is not UTF-8. Protection against decompression bombs: the bytes an
//! archive expands to may not exceed `max_ratio` × its compressed bytes read so far (past a
//! floor of `RATIO_FLOOR`) nor `max_size` in all.

use std::io::{self, Read};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

use crate::error::{Error, Result};
use crate::progress::Progress;

/// Expansion below this many bytes is never refused by the ratio (small files of zeros
/// compress thousands of times).
pub(crate) const RATIO_FLOOR: u64 = 64 * 1024 * 1024;
/// Default of [`Limits::max_ratio`]: text data compresses 3–20x, and 1000x+ is the mark of a
/// bomb.
pub const DEFAULT_MAX_RATIO: u64 = 250;

/// How far an archive may expand.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Expanded bytes per compressed byte.
    pub max_ratio: u64,
    /// Total expanded bytes, if bounded.
    pub max_size: Option<u64>,
    /// Total expanded bytes the import may store, if bounded: its byte bound
    /// ([`crate::source::ReadBounds::max_bytes`]) applies to what an archive expands to as
    /// well as to what is downloaded, since that is what the store keeps.
    pub max_stored: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_ratio: DEFAULT_MAX_RATIO,
            max_size: None,
            max_stored: None,
        }
    }
}

/// An archive format dsv expands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Format {
    /// ZIP.
    #[serde(rename = "zip")]
    Zip,
    /// Uncompressed tar.
    #[serde(rename = "tar")]
    Tar,
    /// gzip-compressed tar (RFC 1952).
    #[serde(rename = "tar.gz")]
    TarGz,
    /// bzip2-compressed tar.
    #[serde(rename = "tar.bz2")]
    TarBz2,
    /// xz-compressed tar.
    #[serde(rename = "tar.xz")]
    TarXz,
}

/// Extensions, longest first so `.tar.gz` wins over `.gz`-less `.tar` checks.
const EXTENSIONS: &[(&str, Format)] = &[
    (".tar.gz2", Format::TarGz),
    (".tar.bz2", Format::TarBz2),
    (".tar.gz", Format::TarGz),
    (".tar.xz", Format::TarXz),
    (".tbz2", Format::TarBz2),
    (".tar", Format::Tar),
    (".tgz", Format::TarGz),
    (".tbz", Format::TarBz2),
    (".txz", Format::TarXz),
    (".zip", Format::Zip),
];

impl Format {
    /// The format a file name's extension says (case-insensitive), with the name stripped of
    /// it: `mnist.tar.gz` → (TarGz, `mnist`).
    pub fn detect(name: &str) -> Option<(Format, &str)> {
        let lower = name.to_ascii_lowercase();
        EXTENSIONS.iter().find_map(|(ext, format)| {
            (lower.ends_with(ext) && lower.len() > ext.len())
                .then(|| (*format, &name[..name.len() - ext.len()]))
        })
    }

    /// The format's usual name: `zip`, `tar`, `tar.gz`, `tar.bz2`, `tar.xz`.
    pub fn name(self) -> &'static str {
        match self {
            Format::Zip => "zip",
            Format::Tar => "tar",
            Format::TarGz => "tar.gz",
            Format::TarBz2 => "tar.bz2",
            Format::TarXz => "tar.xz",
        }
    }

    /// The extensions dsv recognizes, for messages.
    pub fn known_extensions() -> String {
        EXTENSIONS
            .iter()
            .map(|(ext, _)| *ext)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// What an archive member is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberKind {
    /// A regular file, read from [`Member::reader`].
    File {
        /// The owner's execute bit.
        executable: bool,
    },
    /// A directory.
    Dir,
    /// A symbolic link (its target checked to stay inside the dataset).
    Symlink {
        /// The target as recorded.
        target: String,
    },
    /// A tar hard link: the same content as the earlier member at `target` (a checked path).
    HardLink {
        /// The linked member's path in the dataset.
        target: String,
    },
}

/// One member handed to the caller of [`read`].
pub struct Member<'a> {
    /// The member's name as the archive records it.
    pub name: String,
    /// Its checked path in the dataset (relative, `/`-separated, no `.` or `..`).
    pub path: String,
    /// What it is.
    pub kind: MemberKind,
    /// Its bytes (empty for anything but a file).
    pub reader: &'a mut dyn Read,
}

/// Where an archive's bytes come from.
pub enum Input {
    /// A stream (a download): tar formats read it in one pass; a zip is copied to a
    /// temporary file in `temp_dir` first.
    Stream(Box<dyn Read + Send>),
    /// A local file (zips are read in place).
    File(std::fs::File),
}

/// Checks an archive member's name and returns its path in the dataset; `Ok(None)` for the
/// root itself (`./`).
///
/// # Errors
/// The reason a name is refused: absolute, `..`, a component dsv cannot store.
pub fn member_path(name: &str) -> std::result::Result<Option<String>, &'static str> {
    if name.starts_with('/') || name.starts_with('\\') {
        return Err("the path is absolute");
    }
    if name.len() >= 2 && name.as_bytes()[1] == b':' && name.as_bytes()[0].is_ascii_alphabetic() {
        return Err("the path starts with a drive letter");
    }
    let mut parts = Vec::new();
    for part in name.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err("the path leaves the archive's root with '..'"),
            _ => {
                crate::object::check_name(part)?;
                crate::walk::check_reserved_name(part)?;
                parts.push(part);
            }
        }
    }
    Ok((!parts.is_empty()).then(|| parts.join("/")))
}

/// Reads every member of archive `input` (format `format`, fetched from `url`), calling
/// `each` once per member in archive order; returns how many members were skipped (devices,
/// FIFOs: nothing to version). `progress` advances by the archive's bytes read.
///
/// # Errors
/// [`Error::UnsafeArchive`] for a refused member; [`Error::BadArchive`] for a truncated or
/// corrupt archive or one expanding past `limits`; [`Error::SourceIo`] when the source fails; the
/// first error `each` returns.
pub fn read(
    format: Format,
    input: Input,
    url: &str,
    temp_dir: &std::path::Path,
    limits: Limits,
    progress: &dyn Progress,
    each: &mut dyn FnMut(Member<'_>) -> Result<()>,
) -> Result<u64> {
    let consumed = Arc::new(AtomicU64::new(0));
    if format == Format::Zip {
        let file = match input {
            Input::File(file) => {
                let length = file.metadata().map_err(|e| input_error(url, e))?.len();
                progress.advance(length);
                file
            }
            // The central directory is at the end: spool the stream to a temporary file.
            Input::Stream(stream) => {
                let mut file = tempfile::tempfile_in(temp_dir).map_err(|source| Error::Io {
                    path: temp_dir.to_path_buf(),
                    source,
                })?;
                let mut counted = Counting {
                    inner: stream,
                    consumed: consumed.clone(),
                    progress,
                };
                io::copy(&mut counted, &mut file).map_err(|e| input_error(url, e))?;
                file
            }
        };
        return read_zip(file, url, limits, &consumed, each).map(|()| 0);
    }
    std::thread::scope(|scope| {
        let input: Box<dyn Read + Send + '_> = match input {
            Input::Stream(stream) => Box::new(Counting {
                inner: stream,
                consumed: consumed.clone(),
                progress,
            }),
            Input::File(file) => Box::new(Counting {
                inner: file,
                consumed: consumed.clone(),
                progress,
            }),
        };
        match format {
            Format::Zip => unreachable!("read above"),
            _ => {
                let decoded: Box<dyn Read + Send + '_> = match format {
                    Format::Tar => input,
                    Format::TarGz => Box::new(flate2::read::MultiGzDecoder::new(input)),
                    Format::TarBz2 => Box::new(bzip2::read::MultiBzDecoder::new(input)),
                    Format::TarXz => Box::new(liblzma::read::XzDecoder::new_multi_decoder(input)),
                    Format::Zip => unreachable!("handled above"),
                };
                let limited = Limited {
                    inner: decoded,
                    consumed: consumed.clone(),
                    produced: 0,
                    limits,
                };
                let ahead = read_ahead(scope, limited);
                read_tar(ahead, url, &consumed, limits, each)
            }
        }
    })
}

/// Reads a tar stream member by member. The limits apply twice: to the decompressed stream
/// (in the caller) and here to what members yield, which counts the zeros the tar reader
/// makes up for sparse members and the bytes hard links repeat.
fn read_tar(
    input: impl Read,
    url: &str,
    consumed: &Arc<AtomicU64>,
    limits: Limits,
    each: &mut dyn FnMut(Member<'_>) -> Result<()>,
) -> Result<u64> {
    let mut skipped = 0;
    let mut produced = 0u64;
    // Bytes of each file member so far, for the hard links that repeat them.
    let mut sizes: std::collections::HashMap<String, u64> = std::collections::HashMap::new();
    let limit_error = |detail| Error::BadArchive {
        url: url.to_string(),
        detail,
    };
    let mut archive = tar::Archive::new(input);
    let entries = archive.entries().map_err(|e| input_error(url, e))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| input_error(url, e))?;
        let name = utf8(url, &entry.path_bytes())?;
        let refuse = refusal(url, &name);
        let Some(path) = member_path(&name).map_err(refuse)? else {
            continue;
        };
        let header = entry.header();
        let kind = match header.entry_type() {
            tar::EntryType::Regular | tar::EntryType::Continuous | tar::EntryType::GNUSparse => {
                MemberKind::File {
                    executable: header.mode().map_err(|e| input_error(url, e))? & 0o100 != 0,
                }
            }
            tar::EntryType::Directory => MemberKind::Dir,
            tar::EntryType::Symlink => {
                let target = utf8(url, &entry.link_name_bytes().unwrap_or_default())?;
                crate::walk::check_symlink_target(&path, &target).map_err(refuse)?;
                MemberKind::Symlink { target }
            }
            tar::EntryType::Link => {
                let target = utf8(url, &entry.link_name_bytes().unwrap_or_default())?;
                let target = member_path(&target)
                    .map_err(refuse)?
                    .ok_or_else(|| refuse("a hard link to the archive's root"))?;
                produced += sizes.get(&target).copied().unwrap_or(0);
                check_expansion(produced, consumed.load(Ordering::Relaxed), limits)
                    .map_err(limit_error)?;
                MemberKind::HardLink { target }
            }
            // A pax global header (git archive writes one) holds no member.
            tar::EntryType::XGlobalHeader => continue,
            // Devices, FIFOs and the like hold no data to version.
            other => {
                tracing::warn!(member = %name, kind = ?other, "skipping an archive member that is not a file, directory or link");
                skipped += 1;
                continue;
            }
        };
        let is_file = matches!(kind, MemberKind::File { .. });
        let before = produced;
        let mut limited = Limited {
            inner: &mut entry,
            consumed: consumed.clone(),
            produced,
            limits,
        };
        let member_path = path.clone();
        each(Member {
            name,
            path,
            kind,
            reader: &mut limited,
        })?;
        produced = limited.produced;
        if is_file {
            sizes.insert(member_path, produced - before);
        }
    }
    Ok(skipped)
}

fn read_zip(
    file: std::fs::File,
    url: &str,
    limits: Limits,
    consumed: &Arc<AtomicU64>,
    each: &mut dyn FnMut(Member<'_>) -> Result<()>,
) -> Result<()> {
    let archive_size = file.metadata().map_err(|e| input_error(url, e))?.len();
    let mut archive = zip::ZipArchive::new(file).map_err(|e| zip_error(url, e))?;
    // Refuse a bomb from its directory before expanding anything.
    let too_large = || {
        Error::BadArchive {
        url: url.to_string(),
        detail: "the archive's directory declares more bytes than can be counted; refused as a possible decompression bomb".into(),
    }
    };
    let mut declared = 0u64;
    for index in 0..archive.len() {
        let size = archive
            .by_index_raw(index)
            .map_err(|e| zip_error(url, e))?
            .size();
        declared = declared.checked_add(size).ok_or_else(too_large)?;
    }
    check_expansion(declared, archive_size, limits).map_err(|detail| Error::BadArchive {
        url: url.to_string(),
        detail,
    })?;
    consumed.store(0, Ordering::Relaxed);
    let mut produced = 0u64;
    for index in 0..archive.len() {
        let mut file = archive.by_index(index).map_err(|e| zip_error(url, e))?;
        let name = utf8(url, file.name_raw())?;
        let refuse = refusal(url, &name);
        let Some(path) = member_path(&name).map_err(refuse)? else {
            continue;
        };
        // What the directory says a member takes, but never more than the file holds.
        let so_far = consumed.load(Ordering::Relaxed);
        consumed.store(
            so_far
                .saturating_add(file.compressed_size())
                .min(archive_size),
            Ordering::Relaxed,
        );
        let kind = if file.is_dir() {
            MemberKind::Dir
        } else if file.is_symlink() {
            let mut target = String::new();
            file.by_ref()
                .take(u16::MAX as u64 + 1)
                .read_to_string(&mut target)
                .map_err(|e| input_error(url, e))?;
            crate::walk::check_symlink_target(&path, &target).map_err(refuse)?;
            MemberKind::Symlink { target }
        } else {
            MemberKind::File {
                executable: file.unix_mode().is_some_and(|mode| mode & 0o100 != 0),
            }
        };
        let mut limited = Limited {
            inner: &mut file,
            consumed: consumed.clone(),
            produced,
            limits,
        };
        each(Member {
            name,
            path,
            kind,
            reader: &mut limited,
        })?;
        produced = limited.produced;
    }
    Ok(())
}

/// Makes the error refusing member `name` of archive `url` for a reason.
fn refusal<'a>(url: &'a str, name: &'a str) -> impl Fn(&str) -> Error + Copy + 'a {
    move |reason| Error::UnsafeArchive {
        url: url.to_string(),
        member: name.to_string(),
        reason: reason.to_string(),
    }
}

fn utf8(url: &str, bytes: &[u8]) -> Result<String> {
    String::from_utf8(bytes.to_vec()).map_err(|_| Error::UnsafeArchive {
        url: url.to_string(),
        member: String::from_utf8_lossy(bytes).into_owned(),
        reason: "the name is not UTF-8".into(),
    })
}

fn zip_error(url: &str, e: zip::result::ZipError) -> Error {
    match e {
        zip::result::ZipError::Io(e) => input_error(url, e),
        other => Error::BadArchive {
            url: url.to_string(),
            detail: format!("not a readable zip archive: {other}"),
        },
    }
}

/// A read of the source itself failed (network, disk), as opposed to its content.
#[derive(Debug)]
struct SourceFailure(io::Error);

impl std::fmt::Display for SourceFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for SourceFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// The archive expanded past its limits.
#[derive(Debug)]
struct ExpansionLimit(String);

impl std::fmt::Display for ExpansionLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ExpansionLimit {}

/// Classifies an error met while reading archive `url` (also through a member's reader):
/// the source failing ([`Error::SourceIo`]), the limits ([`Error::BadArchive`]), or a truncated or
/// corrupt archive ([`Error::BadArchive`]).
pub fn input_error(url: &str, e: io::Error) -> Error {
    // A bound, a stall, a deadline or a cancellation, met reading the source.
    let e = match crate::source::carried_error(e) {
        Ok(carried) => return carried,
        Err(e) => e,
    };
    if let Some(inner) = e.get_ref() {
        if let Some(SourceFailure(_)) = inner.downcast_ref::<SourceFailure>() {
            let Ok(SourceFailure(source)) = e
                .into_inner()
                .expect("checked")
                .downcast::<SourceFailure>()
                .map(|b| *b)
            else {
                unreachable!("checked")
            };
            return match crate::source::carried_error(source) {
                Ok(carried) => carried,
                Err(source) => Error::SourceIo {
                    url: url.to_string(),
                    source,
                },
            };
        }
        if let Some(limit) = inner.downcast_ref::<ExpansionLimit>() {
            return Error::BadArchive {
                url: url.to_string(),
                detail: limit.0.clone(),
            };
        }
    }
    Error::BadArchive {
        url: url.to_string(),
        detail: format!("the archive is truncated or corrupt: {e}"),
    }
}

fn check_expansion(
    produced: u64,
    consumed: u64,
    limits: Limits,
) -> std::result::Result<(), String> {
    if let Some(max) = limits.max_stored
        && produced > max
        && limits.max_size.is_none_or(|size| size > max)
    {
        return Err(format!(
            "the archive expands to more than {max} bytes, the import's bound (--max-bytes; by default the store's disk's free space less a margin); refused, nothing was imported"
        ));
    }
    if let Some(max) = limits.max_size
        && produced > max
    {
        return Err(format!(
            "the archive expands to more than {max} bytes (--max-expanded-size); refused as a possible decompression bomb"
        ));
    }
    if produced > RATIO_FLOOR && produced / consumed.max(1) > limits.max_ratio {
        return Err(format!(
            "the archive expands more than {}x ({produced} bytes from {consumed}); refused as a possible decompression bomb (raise --max-expansion-ratio if it is genuine)",
            limits.max_ratio
        ));
    }
    Ok(())
}

/// Counts the compressed bytes read from the source and reports them as progress; marks
/// the source's own errors as [`SourceFailure`].
struct Counting<'p, R> {
    inner: R,
    consumed: Arc<AtomicU64>,
    progress: &'p dyn Progress,
}

impl<R: Read> Read for Counting<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self
            .inner
            .read(buf)
            .map_err(|e| io::Error::other(SourceFailure(e)))?;
        self.consumed.fetch_add(n as u64, Ordering::Relaxed);
        self.progress.advance(n as u64);
        Ok(n)
    }
}

/// Counts expanded bytes and fails once they pass the limits.
struct Limited<R> {
    inner: R,
    consumed: Arc<AtomicU64>,
    produced: u64,
    limits: Limits,
}

impl<R: Read> Read for Limited<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.produced += n as u64;
        check_expansion(
            self.produced,
            self.consumed.load(Ordering::Relaxed),
            self.limits,
        )
        .map_err(|detail| io::Error::other(ExpansionLimit(detail)))?;
        Ok(n)
    }
}

/// Block size of [`read_ahead`].
const READ_AHEAD_BLOCK: usize = 1024 * 1024;

/// Runs `source` on a thread of `scope`, a few blocks ahead of the returned reader, so
/// decompression overlaps with chunking and hashing.
fn read_ahead<'scope, R: Read + Send + 'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    mut source: R,
) -> impl Read + 'scope {
    let (sender, receiver) = mpsc::sync_channel::<io::Result<Vec<u8>>>(4);
    // The caller's cancellation reaches a read that waits on the network here.
    let token = crate::interrupt::current();
    scope.spawn(move || {
        crate::interrupt::run_under(token, || {
            loop {
                let mut block = vec![0u8; READ_AHEAD_BLOCK];
                let mut filled = 0;
                let outcome = loop {
                    match source.read(&mut block[filled..]) {
                        Ok(0) => break Ok(()),
                        Ok(n) => {
                            filled += n;
                            if filled == block.len() {
                                break Ok(());
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => break Err(e),
                    }
                };
                let end = filled == 0;
                block.truncate(filled);
                let sent = match outcome {
                    Ok(()) if end => break,
                    Ok(()) => sender.send(Ok(block)),
                    Err(e) => {
                        if filled > 0 {
                            let _ = sender.send(Ok(block));
                        }
                        let _ = sender.send(Err(e));
                        break;
                    }
                };
                // The reader was dropped (the import failed or finished early): stop.
                if sent.is_err() {
                    break;
                }
            }
        })
    });
    ReadAhead {
        receiver,
        current: Vec::new(),
        position: 0,
        done: false,
    }
}

struct ReadAhead {
    receiver: mpsc::Receiver<io::Result<Vec<u8>>>,
    current: Vec<u8>,
    position: usize,
    done: bool,
}

impl Read for ReadAhead {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.position == self.current.len() {
            if self.done {
                return Ok(0);
            }
            match self.receiver.recv() {
                Ok(Ok(block)) => {
                    self.current = block;
                    self.position = 0;
                }
                Ok(Err(e)) => {
                    self.done = true;
                    return Err(e);
                }
                Err(_) => {
                    self.done = true;
                    return Ok(0);
                }
            }
        }
        let n = buf.len().min(self.current.len() - self.position);
        buf[..n].copy_from_slice(&self.current[self.position..self.position + n]);
        self.position += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_by_extension() {
        assert_eq!(Format::detect("mnist.zip"), Some((Format::Zip, "mnist")));
        assert_eq!(Format::detect("a.TAR.GZ"), Some((Format::TarGz, "a")));
        assert_eq!(Format::detect("a.tar.gz2"), Some((Format::TarGz, "a")));
        assert_eq!(Format::detect("a.tbz2"), Some((Format::TarBz2, "a")));
        assert_eq!(Format::detect("a.txz"), Some((Format::TarXz, "a")));
        assert_eq!(Format::detect("a.tar"), Some((Format::Tar, "a")));
        assert_eq!(Format::detect("a.csv"), None);
        assert_eq!(Format::detect(".zip"), None);
    }

    #[test]
    fn member_paths_are_checked() {
        assert_eq!(member_path("./a/b.txt"), Ok(Some("a/b.txt".into())));
        assert_eq!(member_path("a//b/"), Ok(Some("a/b".into())));
        assert_eq!(member_path("./"), Ok(None));
        for bad in ["../x", "a/../../x", "/etc/passwd", "C:/x", "a/\0b"] {
            assert!(member_path(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn expansion_limits() {
        let limits = Limits {
            max_ratio: 100,
            max_size: Some(1 << 40),
            max_stored: None,
        };
        assert!(check_expansion(RATIO_FLOOR, 1, limits).is_ok());
        assert!(check_expansion(RATIO_FLOOR + 1, 1, limits).is_err());
        assert!(check_expansion(1 << 30, 1 << 24, limits).is_ok());
        assert!(check_expansion((1 << 40) + 1, 1 << 40, limits).is_err());
    }
}
