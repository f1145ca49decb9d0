//! `.dsvignore` files read whole or not at all.
//!
//! The walk ([`crate::walk`]) obeys them through the `ignore` crate, which uses the rules it
//! can parse and only reports the others: a line that is not UTF-8 ends its reading of the
//! file there, and a rule that does not parse is dropped. Either way a file the ignore file
//! meant to leave out (`secrets.env`) would be committed. [`check`] reads an ignore file as
//! the walk does and refuses it, naming the file and the line, when any line cannot be used;
//! the walk runs it (`check_type`) on every directory's ignore file before the crate reads
//! it, listed or not (a file that ignores itself is never listed).

use std::io::Read;
use std::path::Path;

/// The name of the ignore files a walk obeys: gitignore syntax
/// (<https://git-scm.com/docs/gitignore>), in any directory of the tree, each applying to its
/// directory and below (a deeper file's rules win, `!pattern` re-includes).
pub const IGNORE_FILE: &str = ".dsvignore";

use crate::error::{Error, Result};

/// The largest ignore file read: rules are lines a person writes, not data.
pub(crate) const MAX_IGNORE_FILE_LEN: u64 = 1 << 20;

/// Checks the ignore file of directory `dir`, if there is one: that it is a regular file
/// (lstat first: a symlink is not followed, a FIFO not opened), then [`check`]s its lines.
/// The walk runs this on each directory before the `ignore` crate opens the directory's
/// ignore file, which would follow a symlink, wait forever on a FIFO, and obey a file up to
/// its first bad line even when the file leaves itself out of the walk.
///
/// # Errors
/// [`Error::InvalidIgnoreFile`] naming the file and what it is, or its first bad line.
pub(crate) fn check_type(dir: &Path) -> Result<()> {
    let path = dir.join(IGNORE_FILE);
    let Ok(meta) = std::fs::symlink_metadata(&path) else {
        // Missing (or the directory cannot be read: the walk reports that itself).
        return Ok(());
    };
    let kind = meta.file_type();
    let what = if kind.is_file() {
        // Its whole content too: an ignore file that leaves itself out (`.dsvignore`, `.*`)
        // is never listed, yet the crate obeys it, up to its first bad line.
        return check(dir, &path);
    } else if kind.is_symlink() {
        "a symbolic link"
    } else if kind.is_dir() {
        "a directory"
    } else if std::os::unix::fs::FileTypeExt::is_fifo(&kind) {
        "a FIFO"
    } else if std::os::unix::fs::FileTypeExt::is_socket(&kind) {
        "a socket"
    } else {
        "a device"
    };
    Err(Error::InvalidIgnoreFile {
        path,
        line: 0,
        reason: format!(
            "it is not a regular file but {what}, which dsv never opens; make it a regular file or remove it"
        ),
    })
}

/// Checks that every line of the ignore file `path` (in directory `dir`, which its rules are
/// relative to) is UTF-8 and a rule that parses.
///
/// # Errors
/// [`Error::InvalidIgnoreFile`] naming the first line that cannot be used (line 0: the file
/// is not a regular file, is larger than `MAX_IGNORE_FILE_LEN`, or cannot be read).
pub fn check(dir: &Path, path: &Path) -> Result<()> {
    let refuse = |line: u64, reason: String| Error::InvalidIgnoreFile {
        path: path.to_path_buf(),
        line,
        reason,
    };
    // Never follows a symlink or waits on a FIFO: only a regular file is read.
    let file = crate::store_file::open_read(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::InvalidInput {
            refuse(0, e.to_string())
        } else {
            refuse(0, format!("it cannot be opened ({e})"))
        }
    })?;
    let mut bytes = Vec::new();
    file.take(MAX_IGNORE_FILE_LEN + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| refuse(0, format!("it cannot be read ({e})")))?;
    if bytes.len() as u64 > MAX_IGNORE_FILE_LEN {
        return Err(refuse(
            0,
            format!("it is larger than the limit of {MAX_IGNORE_FILE_LEN} bytes"),
        ));
    }
    let mut builder = ignore::gitignore::GitignoreBuilder::new(dir);
    // The crate reads a `[` without its `]` as a literal `[`: `secrets[.env` then
    // leaves out only a file named so, and `secrets.env`, which the rule surely meant, is
    // committed. Such a rule is refused; `\[` is a literal `[`.
    builder.allow_unclosed_class(false);
    // As `BufRead::lines`, which the walk reads it with: split at `\n`, a `\r` before it dropped.
    let mut lines = bytes.split(|&b| b == b'\n').peekable();
    let mut number = 0;
    while let Some(raw) = lines.next() {
        if raw.is_empty() && lines.peek().is_none() {
            break;
        }
        number += 1;
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let line = std::str::from_utf8(raw).map_err(|e| {
            refuse(
                number,
                format!(
                    "byte {} is not UTF-8 (write the file in UTF-8)",
                    e.valid_up_to() + 1
                ),
            )
        })?;
        let line = if number == 1 {
            line.trim_start_matches('\u{feff}')
        } else {
            line
        };
        builder.add_line(None, line).map_err(|e| {
            let literal = if line.contains('[') {
                "; write `\\[` for a literal `[`"
            } else {
                ""
            };
            refuse(
                number,
                format!("the rule {line:?} does not parse ({e}{literal})"),
            )
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_text(text: &[u8]) -> Result<()> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".dsvignore");
        std::fs::write(&path, text).unwrap();
        check(dir.path(), &path)
    }

    fn refused_line(text: &[u8]) -> u64 {
        match check_text(text) {
            Err(Error::InvalidIgnoreFile { line, .. }) => line,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn an_ignore_file_is_used_whole_or_refused_at_its_first_bad_line() {
        check_text(b"").unwrap();
        check_text(b"\xef\xbb\xbf*.tmp\r\n# note\n\n!keep.tmp\ncache/").unwrap();
        assert_eq!(refused_line(b"*.tmp\ncaf\xe9\nsecrets.env\n"), 2);
        assert_eq!(refused_line(b"*.tmp\n\nfoo[z-a]\nsecrets.env\n"), 3);
        assert_eq!(refused_line(b"*.tmp\nsecrets[.env\n"), 2);
        check_text(b"literal\\[.env\n[ab]c\n").unwrap();
        assert_eq!(
            refused_line(&vec![b'a'; MAX_IGNORE_FILE_LEN as usize + 1]),
            0
        );
    }
}
