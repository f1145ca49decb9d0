//! `dsv cat`: one file of a version, or a byte range of it, read through the read engine
//! ([`crate::read`]): it works on versions whose data is only on a remote (the chunks read are
//! fetched and kept). The version is leased while it is read. A whole tar stream is
//! [`super::export`].

use crate::error::{Error, IoResultExt, Result};
use crate::id::ObjectId;
use crate::read::ReadEngine;
use crate::tree::FlatEntry;

/// What [`cat`] wrote.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CatReport {
    /// The file's entry.
    pub entry: FlatEntry,
    /// The byte range written, `[start, end)`.
    pub range: std::ops::Range<u64>,
}

/// Writes file `path` of `revision` to `out`, or the bytes `[start, end)` of it with `range`
/// (an end past the size is clamped). Works on versions whose data is only on a remote (the
/// file's chunks are fetched and kept). The version is leased while it is read.
///
/// # Errors
/// [`Error::RangeNotSatisfiable`] when the range starts at or past the end of a non-empty
/// file (HTTP's 416); as [`ReadEngine::version`] and [`crate::read::VersionHandle::open`];
/// [`Error::IoOperation`] when writing to `out` fails.
pub fn cat(
    engine: &ReadEngine,
    revision: &str,
    path: &str,
    range: Option<std::ops::Range<u64>>,
    out: &mut dyn std::io::Write,
) -> Result<CatReport> {
    let version = engine.version(revision)?;
    let file = version.open(path)?;
    let size = file.size();
    let range = match range {
        Some(r) if r.start >= size && size > 0 => {
            return Err(Error::RangeNotSatisfiable {
                path: path.to_string(),
                start: r.start,
                size,
            });
        }
        Some(r) => r.start.min(size)..r.end.min(size),
        None => 0..size,
    };
    // A whole file is also checked whole against its id (every chunk is checked anyway).
    let mut whole = (range == (0..size)).then(blake3::Hasher::new);
    let mut buffer = vec![0u8; 1024 * 1024];
    let mut position = range.start;
    while position < range.end {
        crate::interrupt::check()?;
        let want = ((range.end - position) as usize).min(buffer.len());
        let n = file.read_at(position, &mut buffer[..want])?;
        if n == 0 {
            break;
        }
        if let Some(hasher) = whole.as_mut() {
            hasher.update(&buffer[..n]);
        }
        out.write_all(&buffer[..n]).during("writing the output")?;
        position += n as u64;
    }
    if let Some(hasher) = whole
        && ObjectId::from(hasher.finalize()) != file.entry().id
    {
        return Err(Error::corrupt(
            engine.packs_dir().to_path_buf(),
            format!("{path}: the stored bytes do not hash to its file id"),
        ));
    }
    Ok(CatReport {
        entry: file.entry().clone(),
        range,
    })
}
