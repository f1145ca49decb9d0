//! The names and paths dsv gives a meaning, and their rules: the store directory and
//! checkout's temporary names (reserved in every dataset), the process that owns a temporary
//! name, the names users give datasets, tags and remotes, the order of paths in a version,
//! symlink targets that stay inside their tree, and a workspace's link to its store (a `.dsv`
//! file naming it).
//!
//! The walk, trees, the store, the catalog, the ref log and revisions all apply these rules,
//! so they live below all of them; `walk`, `store` and `revision` re-export them where their
//! callers have always found them (`dsv::walk::path_order`, `dsv::store::STORE_DIR`,
//! `dsv_store::revision::check_name`).

use std::path::{Component, Path};

use crate::error::{Error, IoResultExt, Result};

/// The name of a store directory.
pub const STORE_DIR: &str = ".dsv";

/// The prefix of checkout's temporary file names.
pub const TEMP_PREFIX: &str = ".dsv-tmp-";

/// The first bytes of a store link: a regular file named `.dsv` at the top of a workspace
/// that lies outside its store's directory tree, naming that store (as a git worktree's
/// `.git` file names its repository), so commands run inside the workspace find the store
/// without `--store`. The rest of its first line is the store's `.dsv` directory, absolute.
pub const STORE_LINK_PREFIX: &str = "dsv store: ";

/// The most bytes a store link may hold; a longer file is not one.
pub const STORE_LINK_MAX_BYTES: u64 = 4096;

/// The store a store link names: `path` (a file named `.dsv`) read as [`STORE_LINK_PREFIX`]
/// and an absolute path. `None` when `path` is not a regular file (never followed or waited
/// on: `O_NOFOLLOW | O_NONBLOCK`), is longer than [`STORE_LINK_MAX_BYTES`], or does not read
/// as a link.
pub fn read_store_link(path: &Path) -> Option<std::path::PathBuf> {
    let bytes = crate::store_file::read_to_end(path, STORE_LINK_MAX_BYTES).ok()?;
    if bytes.len() as u64 > STORE_LINK_MAX_BYTES {
        return None;
    }
    let text = String::from_utf8(bytes).ok()?;
    let line = text.lines().next()?;
    let store = std::path::PathBuf::from(line.strip_prefix(STORE_LINK_PREFIX)?);
    store.is_absolute().then_some(store)
}

/// Writes the store link `workspace/.dsv` naming the store whose `.dsv` directory is
/// `store_root`, when the workspace lies outside the store's directory tree (inside it, the
/// store is found as it is). Nothing is written when `workspace/.dsv` is something else than
/// a store link (a store of its own, a directory, a user's file), and a link already naming
/// the store is left as it is; a link naming another store is replaced (renamed over, never
/// written through). Returns whether a link was written.
///
/// # Errors
/// [`crate::Error::Io`].
pub fn write_store_link(workspace: &Path, store_root: &Path) -> Result<bool> {
    let store_root = std::fs::canonicalize(store_root).at(store_root)?;
    let workspace = std::fs::canonicalize(workspace).at(workspace)?;
    if store_root
        .parent()
        .is_some_and(|tree| workspace.starts_with(tree))
    {
        return Ok(false);
    }
    let path = workspace.join(STORE_DIR);
    match std::fs::symlink_metadata(&path) {
        Ok(meta) if !meta.is_file() => return Ok(false),
        // A store link: replaced unless it already names this store. Any other regular
        // file is the user's, never replaced.
        Ok(_) => match read_store_link(&path) {
            Some(named) if named != store_root => {}
            _ => return Ok(false),
        },
        Err(_) => {}
    }
    let Some(store_text) = store_root.to_str() else {
        return Ok(false);
    };
    let text = format!(
        "{STORE_LINK_PREFIX}{store_text}\n# Written by dsv: this directory is a workspace of that store. Never committed.\n"
    );
    // Written beside under a temporary name dsv's walks skip, then renamed into place.
    let temp = workspace.join(format!(
        "{}{}-{}",
        TEMP_PREFIX,
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
    ));
    let written = (|| {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(&temp)
            .at(&temp)?;
        file.write_all(text.as_bytes()).at(&temp)?;
        std::fs::rename(&temp, &path).at(&path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written.map(|()| true)
}

/// Removes the store link `workspace/.dsv` when it is one naming the store whose `.dsv`
/// directory is `store_root` (`dsv workspace forget`: the directory is no workspace of that
/// store any more). Anything else there (a store, a directory, a user's file, a link naming
/// another store) is left alone. Returns whether a link was removed.
///
/// # Errors
/// [`crate::Error::Io`] when the link cannot be removed.
pub fn remove_store_link(workspace: &Path, store_root: &Path) -> Result<bool> {
    let path = workspace.join(STORE_DIR);
    let Some(named) = read_store_link(&path) else {
        return Ok(false);
    };
    let store_root = std::fs::canonicalize(store_root).at(store_root)?;
    if named != store_root {
        return Ok(false);
    }
    std::fs::remove_file(&path).at(&path)?;
    Ok(true)
}

/// True for a name dsv reserves in a dataset: `.dsv` (a store) and `.dsv-tmp-*` (checkout's
/// temporary files). The one rule for every path component: the commit walk skips `.dsv`
/// directories and refuses other reserved names, import refuses them in archives and
/// object keys (`dsv::archive::member_path`), and checkout refuses a tree holding one.
pub fn is_reserved_name(name: &[u8]) -> bool {
    name == STORE_DIR.as_bytes() || name.starts_with(TEMP_PREFIX.as_bytes())
}

/// Refuses a name dsv reserves ([`is_reserved_name`]).
///
/// # Errors
/// A short reason.
pub fn check_reserved_name(name: &str) -> std::result::Result<(), &'static str> {
    if is_reserved_name(name.as_bytes()) {
        return Err(
            "dsv reserves the names .dsv and .dsv-tmp-* (a store, checkout's temporary files)",
        );
    }
    Ok(())
}

/// True for the names of checkout's temporary files: `.dsv-tmp-<pid>-<n>`.
pub fn is_temp_name(name: &[u8]) -> bool {
    let Some(rest) = name.strip_prefix(TEMP_PREFIX.as_bytes()) else {
        return false;
    };
    let mut parts = rest.split(|&b| b == b'-');
    let numeric =
        |p: Option<&[u8]>| p.is_some_and(|p| !p.is_empty() && p.iter().all(u8::is_ascii_digit));
    numeric(parts.next()) && numeric(parts.next()) && parts.next().is_none()
}

/// The process id in a temporary name made by [`is_temp_name`]'s pattern (or a pack's
/// `pack-<pid>-…` temp name).
pub fn temp_owner(name: &str) -> Option<u32> {
    let rest = name
        .strip_prefix(TEMP_PREFIX)
        .or_else(|| name.strip_prefix("pack-"))?;
    rest.split('-').next()?.parse().ok()
}

/// True while a process with this id runs (Linux: `/proc/<pid>` exists).
pub fn process_alive(pid: u32) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
}

/// Checks a dataset or tag name: 1–100 characters from `A-Z a-z 0-9 . _ -`, not starting
/// with `.` or `-`, and not `latest` for tags.
///
/// # Errors
/// [`Error::InvalidName`] saying which rule is broken.
pub fn check_name(what: &'static str, name: &str) -> Result<()> {
    let invalid = |reason| Error::InvalidName {
        what,
        name: name.to_string(),
        reason,
    };
    if name.is_empty() || name.len() > 100 {
        return Err(invalid("it must be 1 to 100 characters long"));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return Err(invalid("use only letters, digits, '.', '_' and '-'"));
    }
    if name.starts_with(['.', '-']) {
        return Err(invalid("it must not start with '.' or '-'"));
    }
    if what == "tag" && name == "latest" {
        return Err(invalid("'latest' always means the newest version"));
    }
    if what == "tag" && name == "HEAD" {
        return Err(invalid("'HEAD' always means the head, as 'latest' does"));
    }
    Ok(())
}

/// The order of paths in a version and a scan: depth first, siblings sorted by name bytes
/// (component-wise byte order: `a`, `a/x`, `a.txt`, as `/` sorts before every byte a name
/// may hold).
///
/// Compares the common prefix eight bytes at a time (equal bytes order nothing), then the
/// first byte that differs: a lookup in a sorted listing ([`crate::tree::position`]) costs a
/// few word compares per probe, not one mapped byte at a time.
pub fn path_order(a: &str, b: &str) -> std::cmp::Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let common = common_prefix(a, b);
    let key = |c: u8| if c == b'/' { 0 } else { c };
    match (a.get(common), b.get(common)) {
        (Some(&x), Some(&y)) if key(x) != key(y) => key(x).cmp(&key(y)),
        // `/` against a NUL byte (no path holds one, but the order stays total): compare
        // the rest as the mapped sequences.
        (Some(_), Some(_)) => a[common..]
            .iter()
            .map(|&c| key(c))
            .cmp(b[common..].iter().map(|&c| key(c))),
        (x, y) => x.is_some().cmp(&y.is_some()),
    }
}

/// The length of the longest common prefix of `a` and `b`, compared a word at a time.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    const WORD: usize = std::mem::size_of::<u64>();
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + WORD <= n {
        let word = |s: &[u8]| {
            let mut bytes = [0u8; WORD];
            bytes.copy_from_slice(&s[i..i + WORD]);
            u64::from_le_bytes(bytes)
        };
        let diff = word(a) ^ word(b);
        if diff != 0 {
            // Little-endian: the lowest set bit is in the first byte that differs.
            return i + (diff.trailing_zeros() / 8) as usize;
        }
        i += WORD;
    }
    while i < n && a[i] == b[i] {
        i += 1;
    }
    i
}

/// Checks that a symlink at `link_path` (relative to the root) with `target` stays inside the
/// root when resolved lexically.
///
/// # Errors
/// A reason when the target is empty, absolute, or climbs above the root.
pub fn check_symlink_target(
    link_path: &str,
    target: &str,
) -> std::result::Result<(), &'static str> {
    if target.is_empty() {
        return Err("the symlink target is empty");
    }
    if target.len() > u16::MAX as usize {
        return Err("the symlink target is longer than 65535 bytes");
    }
    let target_path = Path::new(target);
    if target_path.is_absolute() {
        return Err(
            "the symlink is absolute; only relative links inside the directory can be versioned",
        );
    }
    // Depth of the link's parent directory below the root.
    let mut depth = link_path.split('/').count() as i64 - 1;
    for component in target_path.components() {
        match component {
            Component::ParentDir => depth -= 1,
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            _ => return Err("the symlink target is not a plain relative path"),
        }
        if depth < 0 {
            return Err("the symlink points outside the directory");
        }
    }
    Ok(())
}
