//! The canonical encodings of trees, file maps and versions.
//!
//! These bytes are hashed to give ids, so they are an on-disk contract: fixed field order,
//! little-endian integers, entries sorted by name bytes. `docs/format.md` lays them out byte
//! by byte. Every decoder treats its input as untrusted: lengths are bounds-checked and a
//! malformed object is an error, never a panic.

use crate::id::ObjectId;

mod size_limits;
pub use size_limits::{
    LISTED_BYTES_PER_ENTRY, MAX_VERSION_DIRS, MAX_VERSION_FILES, servable_files,
};

/// The kind of an object stored in a pack (one byte in the pack index).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ObjectKind {
    /// Raw file bytes; id = BLAKE3 of the bytes.
    Chunk = 1,
    /// A directory listing ([`Tree`]); id = BLAKE3 of its encoding.
    Tree = 2,
    /// A version ([`Version`]); id = BLAKE3 of its encoding.
    Version = 3,
    /// The chunk list of a multi-chunk file ([`FileMap`]); keyed by the file id.
    FileMap = 4,
    /// Where an imported version's files came from ([`Provenance`]); id = BLAKE3 of its
    /// encoding.
    Provenance = 5,
    /// The BLAKE3 chaining values of a file's 64 KiB blocks
    /// ([`crate::outboard::Outboard`]); keyed by the file id, and proven against it when
    /// decoded (its values merge to the id).
    Outboard = 6,
}

impl ObjectKind {
    /// Parses the index byte.
    pub fn from_u8(value: u8) -> Option<Self> {
        Some(match value {
            1 => ObjectKind::Chunk,
            2 => ObjectKind::Tree,
            3 => ObjectKind::Version,
            4 => ObjectKind::FileMap,
            5 => ObjectKind::Provenance,
            6 => ObjectKind::Outboard,
            _ => return None,
        })
    }

    /// A lowercase name for messages.
    pub fn name(self) -> &'static str {
        match self {
            ObjectKind::Chunk => "chunk",
            ObjectKind::Tree => "tree",
            ObjectKind::Version => "version",
            ObjectKind::FileMap => "file map",
            ObjectKind::Provenance => "provenance",
            ObjectKind::Outboard => "outboard",
        }
    }

    /// Whether an object of this kind is named by the BLAKE3 hash of its bytes (all but
    /// file maps and outboards, which are keyed by their file's id).
    pub fn is_hashed(self) -> bool {
        !matches!(self, ObjectKind::FileMap | ObjectKind::Outboard)
    }

    /// Checks that `data` may be stored under key `id` as an object of this kind: the bytes
    /// hash to the id (chunks, trees, versions, provenance), or, for objects keyed by a file
    /// id, they decode and (an outboard) prove themselves against it. A file map cannot be
    /// proven without its file's bytes; its readers prove it (`dsv_store::store::ObjectReader`).
    /// The one rule every writer and reader of packs applies.
    ///
    /// # Errors
    /// A description of the mismatch or of the malformed encoding.
    pub fn check(self, id: &ObjectId, data: &[u8]) -> Result<(), String> {
        if self.is_hashed() && ObjectId::of(data) != *id {
            return Err(format!("{} {id} does not match its hash", self.name()));
        }
        let decoded = match self {
            ObjectKind::Chunk => Ok(()),
            ObjectKind::Tree => Tree::decode(data).map(drop).map_err(|e| e.to_string()),
            ObjectKind::Version => Version::decode(data).map(drop).map_err(|e| e.to_string()),
            ObjectKind::FileMap => FileMap::decode(data).map(drop).map_err(|e| e.to_string()),
            ObjectKind::Provenance => Provenance::decode(data)
                .map(drop)
                .map_err(|e| e.to_string()),
            ObjectKind::Outboard => crate::outboard::Outboard::decode(data, id).map(drop),
        };
        decoded.map_err(|e| format!("{} {id}: {e}", self.name()))
    }
}

/// What a tree entry names.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum EntryKind {
    /// A regular file; `executable` is the owner's execute bit.
    File {
        /// Whether the file is executable.
        executable: bool,
    },
    /// A subdirectory; the entry's id is its tree id.
    Dir {
        /// Regular files and symlinks below it, at any depth.
        files: u64,
    },
    /// A symbolic link, stored as its target (never followed).
    Symlink {
        /// The link's target, relative, never leaving the tree.
        target: String,
    },
}

/// One entry of a [`Tree`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeEntry {
    /// The file name (one path component, UTF-8, no `/`, not `.` or `..`).
    pub name: String,
    /// What it is.
    pub kind: EntryKind,
    /// Bytes: a file's length, a directory's total file bytes, a symlink target's length.
    pub size: u64,
    /// File id, tree id, or BLAKE3 of a symlink's target.
    pub id: ObjectId,
}

/// A directory: entries sorted by name bytes, names unique.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tree {
    /// The entries, sorted by `name` as bytes.
    pub entries: Vec<TreeEntry>,
}

/// The longest version message, in bytes (1 MiB). Commit refuses a longer one and
/// [`Version::decode`] rejects it, so the rule is the same on both sides.
pub const MAX_MESSAGE_LEN: usize = 1024 * 1024;
/// The longest version `author`, in bytes (4 KiB); as [`MAX_MESSAGE_LEN`].
pub(crate) const MAX_AUTHOR_LEN: usize = 4096;
/// The longest version `source` (a path or URL), in bytes (64 KiB); as [`MAX_MESSAGE_LEN`].
pub(crate) const MAX_SOURCE_LEN: usize = 64 * 1024;
/// The longest encoded version object, in bytes (2 MiB): the message, author and source at
/// their limits plus the fixed fields fit well inside it. Pack indexes listing a longer
/// version object are refused.
pub(crate) const MAX_VERSION_LEN: u32 = 2 * 1024 * 1024;
/// The memory this process may use, in bytes: the smallest of the physical memory
/// (`MemTotal` of `/proc/meminfo`), the cgroup's limit (`/sys/fs/cgroup/memory.max`) and the
/// process's own soft limits on its address space and data (`RLIMIT_AS`, `ulimit -v`, and
/// `RLIMIT_DATA`, `ulimit -d`, from `/proc/self/limits`), so a listing that the machine could
/// hold but the process may not is refused instead of aborting on a failed allocation;
/// `None` when none can be read.
pub(crate) fn process_memory() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|text| process_limit(&text));
    let machine = machine_memory();
    match (machine, limits) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The memory of this machine, in bytes: the physical memory (`MemTotal` of
/// `/proc/meminfo`), less the cgroup's limit (`/sys/fs/cgroup/memory.max`) when it has one;
/// `None` when neither can be read. Unlike [`process_memory`], a process's own `ulimit` does
/// not lower it: a version fetched under a `ulimit` may be listed by another process.
pub(crate) fn machine_memory() -> Option<u64> {
    physical_memory()
}

/// Refuses version `id`, claiming `files` files, when this machine (`machine_memory`) could
/// not list it whole ([`servable_files`]): for a fetch, which records versions any process
/// of this machine may list later.
///
/// # Errors
/// [`crate::Error::VersionTooLarge`].
pub fn check_servable(id: &ObjectId, files: u64) -> Result<(), crate::Error> {
    check_fits(id, files, machine_memory())
}

/// Refuses version `id`, claiming `files` files, when this process (`process_memory`: its
/// `ulimit -v` and `-d` included) could not list it whole ([`servable_files`]): before a
/// listing, rather than aborting on a failed allocation.
///
/// # Errors
/// [`crate::Error::VersionTooLarge`].
pub fn check_listable(id: &ObjectId, files: u64) -> Result<(), crate::Error> {
    check_fits(id, files, process_memory())
}

/// Refuses `files` files beyond [`servable_files`] of `memory` (nothing is refused when the
/// memory is unknown).
fn check_fits(id: &ObjectId, files: u64, memory: Option<u64>) -> Result<(), crate::Error> {
    let Some(memory) = memory else {
        return Ok(());
    };
    let limit = servable_files(memory);
    if files > limit {
        return Err(crate::Error::VersionTooLarge {
            version: id.to_hex(),
            files,
            limit,
            memory,
        });
    }
    Ok(())
}

/// The smaller of the soft limits "Max address space" and "Max data size" in
/// `/proc/self/limits`' text (bytes); `None` when both are unlimited or absent.
fn process_limit(text: &str) -> Option<u64> {
    text.lines()
        .filter_map(|line| {
            let rest = line
                .strip_prefix("Max address space")
                .or_else(|| line.strip_prefix("Max data size"))?;
            rest.split_whitespace().next()?.parse::<u64>().ok()
        })
        .min()
}

/// The physical memory, less a cgroup's limit when it has one.
fn physical_memory() -> Option<u64> {
    let physical = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|line| line.strip_prefix("MemTotal:"))
                .and_then(|rest| {
                    rest.trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<u64>()
                        .ok()
                })
                .map(|kib| kib.saturating_mul(1024))
        });
    let limited = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok());
    match (physical, limited) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

const TREE_MAGIC: &[u8; 8] = b"DSVTREE1";
const FILEMAP_MAGIC: &[u8; 8] = b"DSVFMAP1";
const KIND_FILE: u8 = 1;
const KIND_EXECUTABLE: u8 = 2;
const KIND_DIR: u8 = 3;
const KIND_SYMLINK: u8 = 4;

/// A decoding failure: which object kind and what was wrong.
#[derive(Debug, thiserror::Error)]
#[error("malformed {kind}: {reason}")]
pub struct DecodeError {
    /// The object kind being decoded.
    pub kind: &'static str,
    /// What was wrong.
    pub reason: String,
}

fn malformed(kind: &'static str, reason: impl Into<String>) -> DecodeError {
    DecodeError {
        kind,
        reason: reason.into(),
    }
}

/// A bounds-checked little-endian reader over untrusted bytes.
struct Reader<'a> {
    data: &'a [u8],
    kind: &'static str,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.data.len() < n {
            return Err(malformed(self.kind, "truncated"));
        }
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn id(&mut self) -> Result<ObjectId, DecodeError> {
        Ok(ObjectId::from_slice(self.take(32)?).expect("32 bytes"))
    }
    fn string(&mut self, len: usize) -> Result<String, DecodeError> {
        String::from_utf8(self.take(len)?.to_vec())
            .map_err(|_| malformed(self.kind, "name is not UTF-8"))
    }
}

impl Tree {
    /// The canonical encoding (see `docs/format.md`).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(12 + self.entries.len() * 64);
        out.extend_from_slice(TREE_MAGIC);
        out.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        for entry in &self.entries {
            let kind = match entry.kind {
                EntryKind::File { executable: false } => KIND_FILE,
                EntryKind::File { executable: true } => KIND_EXECUTABLE,
                EntryKind::Dir { .. } => KIND_DIR,
                EntryKind::Symlink { .. } => KIND_SYMLINK,
            };
            out.push(kind);
            out.extend_from_slice(&entry.size.to_le_bytes());
            out.extend_from_slice(&entry.id.0);
            out.extend_from_slice(&(entry.name.len() as u16).to_le_bytes());
            out.extend_from_slice(entry.name.as_bytes());
            match &entry.kind {
                EntryKind::Dir { files } => out.extend_from_slice(&files.to_le_bytes()),
                EntryKind::Symlink { target } => {
                    out.extend_from_slice(&(target.len() as u16).to_le_bytes());
                    out.extend_from_slice(target.as_bytes());
                }
                EntryKind::File { .. } => {}
            }
        }
        out
    }

    /// This tree's id: BLAKE3 of [`Tree::encode`].
    pub fn id(&self) -> ObjectId {
        ObjectId::of(&self.encode())
    }

    /// Parses an encoded tree, checking names are safe path components in strict order.
    ///
    /// # Errors
    /// [`DecodeError`] on truncation, unknown entry kinds, unsorted or duplicate names, or
    /// names that are empty, `.`, `..`, or contain `/` or NUL.
    pub fn decode(data: &[u8]) -> Result<Tree, DecodeError> {
        let mut reader = Reader { data, kind: "tree" };
        if reader.take(8)? != TREE_MAGIC {
            return Err(malformed("tree", "bad magic"));
        }
        let count = reader.u32()? as usize;
        // Each entry takes at least 43 bytes: refuse counts the data cannot hold.
        if count > data.len() / 43 {
            return Err(malformed("tree", "entry count exceeds the data"));
        }
        let mut entries = Vec::with_capacity(count);
        for _ in 0..count {
            let kind = reader.u8()?;
            let size = reader.u64()?;
            let id = reader.id()?;
            let name_len = reader.u16()? as usize;
            let name = reader.string(name_len)?;
            check_name(&name)
                .map_err(|reason| malformed("tree", format!("entry {name:?}: {reason}")))?;
            let kind = match kind {
                KIND_FILE => EntryKind::File { executable: false },
                KIND_EXECUTABLE => EntryKind::File { executable: true },
                KIND_DIR => EntryKind::Dir {
                    files: reader.u64()?,
                },
                KIND_SYMLINK => {
                    let len = reader.u16()? as usize;
                    EntryKind::Symlink {
                        target: reader.string(len)?,
                    }
                }
                other => return Err(malformed("tree", format!("unknown entry kind {other}"))),
            };
            if let Some(previous) = entries.last().map(|e: &TreeEntry| e.name.as_bytes())
                && previous >= name.as_bytes()
            {
                return Err(malformed(
                    "tree",
                    "entries are not sorted by name or repeat a name",
                ));
            }
            entries.push(TreeEntry {
                name,
                kind,
                size,
                id,
            });
        }
        if !reader.data.is_empty() {
            return Err(malformed("tree", "trailing bytes"));
        }
        Ok(Tree { entries })
    }

    /// Total file bytes and file count of the tree (from its entries' sizes), saturating at
    /// `u64::MAX` (only a corrupt tree comes near; [`Tree::checked_totals`] tells).
    pub fn totals(&self) -> (u64, u64) {
        self.entries
            .iter()
            .fold((0u64, 0u64), |(bytes, files), e| match e.kind {
                EntryKind::Dir { files: n } => {
                    (bytes.saturating_add(e.size), files.saturating_add(n))
                }
                _ => (bytes.saturating_add(e.size), files.saturating_add(1)),
            })
    }

    /// Total file bytes and file count as [`Tree::totals`], or `None` when a sum overflows
    /// `u64` (a corrupt tree: its claims cannot all be true).
    pub fn checked_totals(&self) -> Option<(u64, u64)> {
        self.entries
            .iter()
            .try_fold((0u64, 0u64), |(bytes, files), e| {
                let n = match e.kind {
                    EntryKind::Dir { files: n } => n,
                    _ => 1,
                };
                Some((bytes.checked_add(e.size)?, files.checked_add(n)?))
            })
    }
}

/// Checks that `name` is a single safe path component.
///
/// # Errors
/// A short reason when it is empty, `.`, `..`, longer than 65,535 bytes, or contains `/` or NUL.
pub fn check_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() || name == "." || name == ".." {
        return Err("not a file name");
    }
    if name.contains('/') || name.contains('\0') {
        return Err("contains '/' or NUL");
    }
    if name.len() > u16::MAX as usize {
        return Err("longer than 65535 bytes");
    }
    Ok(())
}

/// The chunk list of a file of more than one chunk. Its key is the file id (BLAKE3 of the
/// whole file), checked when the chunks are joined back together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMap {
    /// Each chunk's id and length in bytes, in file order.
    pub chunks: Vec<(ObjectId, u32)>,
}

impl FileMap {
    /// The canonical encoding (see `docs/format.md`).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(12 + self.chunks.len() * 36);
        out.extend_from_slice(FILEMAP_MAGIC);
        out.extend_from_slice(&(self.chunks.len() as u32).to_le_bytes());
        for (id, len) in &self.chunks {
            out.extend_from_slice(&id.0);
            out.extend_from_slice(&len.to_le_bytes());
        }
        out
    }

    /// Parses an encoded file map.
    ///
    /// # Errors
    /// [`DecodeError`] when the magic, count or length is wrong.
    pub fn decode(data: &[u8]) -> Result<FileMap, DecodeError> {
        let mut reader = Reader {
            data,
            kind: "file map",
        };
        if reader.take(8)? != FILEMAP_MAGIC {
            return Err(malformed("file map", "bad magic"));
        }
        let count = reader.u32()? as usize;
        if data.len() != 12 + count * 36 {
            return Err(malformed(
                "file map",
                "length does not match the chunk count",
            ));
        }
        let chunks = (0..count)
            .map(|_| Ok((reader.id()?, reader.u32()?)))
            .collect::<Result<_, DecodeError>>()?;
        Ok(FileMap { chunks })
    }

    /// Total bytes of the file.
    pub fn size(&self) -> u64 {
        self.chunks.iter().map(|(_, len)| u64::from(*len)).sum()
    }
}

/// An immutable snapshot of a dataset.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Version {
    /// The name of the dataset it was committed to. A rename does not change it (the object
    /// is immutable): which dataset holds a version now is the catalog's answer, and a ref's.
    pub dataset: String,
    /// The root tree.
    pub tree: ObjectId,
    /// The previous head of the dataset, if any.
    pub parent: Option<ObjectId>,
    /// Who made it (`DSV_AUTHOR`, else `$USER@host`).
    pub author: String,
    /// When, in seconds since the Unix epoch.
    pub time: i64,
    /// Regular files and symlinks in the tree.
    pub files: u64,
    /// Total file bytes in the tree.
    pub bytes: u64,
    /// Where it came from (the committed directory's absolute path, or a URL).
    pub source: String,
    /// For an import: the [`Provenance`] object recording where each file came from.
    #[serde(rename = "provenance_id", skip_serializing_if = "Option::is_none")]
    pub provenance: Option<ObjectId>,
    /// The commit message.
    pub message: String,
}

impl Version {
    /// The canonical encoding: UTF-8 text, one `key value` line per field in fixed order, the
    /// message last after its length in bytes (see `docs/format.md`).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = String::new();
        out.push_str("dsv-version 1\n");
        out.push_str(&format!("dataset {}\n", self.dataset));
        out.push_str(&format!("tree {}\n", self.tree));
        if let Some(parent) = self.parent {
            out.push_str(&format!("parent {parent}\n"));
        }
        out.push_str(&format!("author {}\n", one_line(&self.author)));
        out.push_str(&format!("time {}\n", self.time));
        out.push_str(&format!("files {}\n", self.files));
        out.push_str(&format!("bytes {}\n", self.bytes));
        out.push_str(&format!("source {}\n", one_line(&self.source)));
        if let Some(provenance) = self.provenance {
            out.push_str(&format!("provenance {provenance}\n"));
        }
        out.push_str(&format!("message {}\n", self.message.len()));
        out.push_str(&self.message);
        out.into_bytes()
    }

    /// This version's id: BLAKE3 of [`Version::encode`].
    pub fn id(&self) -> ObjectId {
        ObjectId::of(&self.encode())
    }

    /// Checks the size limits every version obeys: message at most [`MAX_MESSAGE_LEN`] bytes,
    /// author at most `MAX_AUTHOR_LEN`, source at most `MAX_SOURCE_LEN`, at most
    /// [`MAX_VERSION_FILES`] files. Commit and import check them before recording a version;
    /// [`Version::decode`] refuses a version that breaks them.
    ///
    /// # Errors
    /// A short reason naming the field and its limit.
    pub fn check_limits(&self) -> Result<(), String> {
        let fields = [
            ("message", self.message.len(), MAX_MESSAGE_LEN),
            ("author", self.author.len(), MAX_AUTHOR_LEN),
            ("source", self.source.len(), MAX_SOURCE_LEN),
        ];
        for (field, len, limit) in fields {
            if len > limit {
                return Err(format!(
                    "the {field} is {len} bytes, more than the limit of {limit}"
                ));
            }
        }
        if self.files > MAX_VERSION_FILES {
            return Err(format!(
                "it holds {} files, more than the limit of {MAX_VERSION_FILES}",
                self.files
            ));
        }
        Ok(())
    }

    /// Parses an encoded version.
    ///
    /// # Errors
    /// [`DecodeError`] when the data is longer than `MAX_VERSION_LEN`, when a field is
    /// missing, out of order, or malformed, or when it breaks [`Version::check_limits`].
    pub fn decode(data: &[u8]) -> Result<Version, DecodeError> {
        let bad = |reason: &str| malformed("version", reason.to_string());
        if data.len() > MAX_VERSION_LEN as usize {
            return Err(bad("longer than the format allows"));
        }
        let text = std::str::from_utf8(data).map_err(|_| bad("not UTF-8"))?;
        let mut rest = text;
        let mut line = |key: &str| -> Result<Option<&str>, DecodeError> {
            let (head, tail) = rest.split_once('\n').ok_or_else(|| bad("truncated"))?;
            match head.strip_prefix(key).and_then(|v| v.strip_prefix(' ')) {
                Some(value) => {
                    rest = tail;
                    Ok(Some(value))
                }
                None => Ok(None),
            }
        };
        let header = line("dsv-version")?;
        if header != Some("1") {
            return Err(bad("unknown version format"));
        }
        fn required<'t>(v: Option<&'t str>, key: &str) -> Result<&'t str, DecodeError> {
            v.ok_or_else(|| malformed("version", format!("missing {key}")))
        }
        let dataset = required(line("dataset")?, "dataset")?.to_string();
        let tree = required(line("tree")?, "tree")?
            .parse()
            .map_err(|_| bad("bad tree id"))?;
        let parent = line("parent")?
            .map(|p| p.parse().map_err(|_| bad("bad parent id")))
            .transpose()?;
        let author = required(line("author")?, "author")?.to_string();
        let number = |v: &str| v.parse::<i64>().map_err(|_| bad("bad number"));
        let time = number(required(line("time")?, "time")?)?;
        let count = |v: &str| v.parse::<u64>().map_err(|_| bad("bad count"));
        let files = count(required(line("files")?, "files")?)?;
        let bytes = count(required(line("bytes")?, "bytes")?)?;
        let source = required(line("source")?, "source")?.to_string();
        let provenance = line("provenance")?
            .map(|p| p.parse().map_err(|_| bad("bad provenance id")))
            .transpose()?;
        let message_len = count(required(line("message")?, "message")?)? as usize;
        if rest.len() != message_len {
            return Err(bad("message length does not match"));
        }
        let version = Version {
            dataset,
            tree,
            parent,
            author,
            time,
            files,
            bytes,
            source,
            provenance,
            message: rest.to_string(),
        };
        version.check_limits().map_err(|reason| bad(&reason))?;
        Ok(version)
    }
}

/// Where each file of an imported version came from: the source as given to `dsv import`,
/// how it was read, and one record per file. Content-addressed like every object, and named
/// by its version's `provenance` line, so it travels with the version (push, clone).
///
/// Encoding: JSON (RFC 8259) of this struct, fields in declaration order, `files` sorted by
/// path, no whitespace; id = BLAKE3 of those bytes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    /// Encoding version (1).
    pub format: u32,
    /// The source as given: `s3://bucket/key`, `s3://bucket/prefix/`, `https://…`, or an
    /// absolute local path.
    pub source: String,
    /// Whether archives were expanded.
    pub extract: bool,
    /// The ETag the import was pinned to (`--etag`), if any.
    pub pinned_etag: Option<String>,
    /// The object version the import was pinned to (`--version-id`), if any.
    pub pinned_version_id: Option<String>,
    /// One record per regular file or symlink of the version, sorted by `path`.
    pub files: Vec<FileProvenance>,
}

/// Where one file of an imported version came from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileProvenance {
    /// The file's path in the version (relative, `/`-separated).
    pub path: String,
    /// The source object's URL (`s3://bucket/key`, `https://…`, `file:///…`).
    pub url: String,
    /// The object's ETag as the server gave it (RFC 9110 entity tag, quotes included); for
    /// a local file, `"<mtime ns hex>-<size hex>"`.
    pub etag: Option<String>,
    /// The object's version id (S3 VersionId, Azure version, GCS generation), if any.
    pub version_id: Option<String>,
    /// The object's Last-Modified, Unix seconds.
    pub last_modified: Option<i64>,
    /// The object's size in bytes (the whole archive's, for an archive member).
    pub size: u64,
    /// The member's path inside the archive, when the file came out of one.
    pub member: Option<String>,
}

impl Provenance {
    /// The canonical encoding (see the type's documentation).
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("provenance serializes")
    }

    /// This provenance's id: BLAKE3 of [`Provenance::encode`].
    pub fn id(&self) -> ObjectId {
        ObjectId::of(&self.encode())
    }

    /// Parses an encoded provenance.
    ///
    /// # Errors
    /// [`DecodeError`] when it is not the JSON this version of dsv writes.
    pub fn decode(data: &[u8]) -> Result<Provenance, DecodeError> {
        let provenance: Provenance =
            serde_json::from_slice(data).map_err(|e| malformed("provenance", e.to_string()))?;
        if provenance.format != 1 {
            return Err(malformed("provenance", "unknown format"));
        }
        Ok(provenance)
    }
}

/// Replaces newlines so a field stays on one line of the encoding.
fn one_line(value: &str) -> String {
    value.replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_machine_serves_the_versions_half_its_memory_lists() {
        assert_eq!(servable_files(24 << 30), MAX_VERSION_FILES);
        assert_eq!(servable_files(8 << 30), 10_122_253);
        assert_eq!(
            servable_files(1 << 30),
            (1u64 << 30) / 2 / LISTED_BYTES_PER_ENTRY / 2
        );
        assert_eq!(servable_files(0), 0);
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
            Max data size             unlimited            unlimited            bytes     \n\
            Max address space         4096000000           unlimited            bytes     \n";
        assert_eq!(process_limit(limits), Some(4_096_000_000));
        assert_eq!(
            process_limit(&limits.replace("4096000000", "unlimited")),
            None
        );
        // This machine answers, and within what it can report.
        let memory = machine_memory().expect("/proc/meminfo is readable on Linux");
        assert!(memory > 64 << 20, "{memory}");
    }

    fn sample_tree() -> Tree {
        Tree {
            entries: vec![
                TreeEntry {
                    name: "a.txt".into(),
                    kind: EntryKind::File { executable: false },
                    size: 3,
                    id: ObjectId::of(b"abc"),
                },
                TreeEntry {
                    name: "bin".into(),
                    kind: EntryKind::Dir { files: 2 },
                    size: 10,
                    id: ObjectId::of(b"tree"),
                },
                TreeEntry {
                    name: "link".into(),
                    kind: EntryKind::Symlink {
                        target: "a.txt".into(),
                    },
                    size: 5,
                    id: ObjectId::of(b"a.txt"),
                },
                TreeEntry {
                    name: "run.sh".into(),
                    kind: EntryKind::File { executable: true },
                    size: 0,
                    id: ObjectId::of(b""),
                },
            ],
        }
    }

    #[test]
    fn tree_round_trips_and_its_id_is_pinned() {
        let tree = sample_tree();
        let bytes = tree.encode();
        assert_eq!(Tree::decode(&bytes).unwrap(), tree);
        // The encoding is a format contract: a change here is a format change.
        insta::assert_snapshot!(tree.id().to_hex(), @"233efd5067c05f739f2286be44b39a2d0c74e9b55c7b3bf030e90e36f70558b3");
    }

    #[test]
    fn tree_decode_refuses_unsafe_or_malformed_input() {
        for name in ["..", ".", "", "a/b"] {
            let mut tree = sample_tree();
            tree.entries[0].name = name.into();
            assert!(Tree::decode(&tree.encode()).is_err(), "{name:?} accepted");
        }
        let mut unsorted = sample_tree();
        unsorted.entries.swap(0, 1);
        assert!(Tree::decode(&unsorted.encode()).is_err());
        let bytes = sample_tree().encode();
        for cut in [0, 7, 12, bytes.len() - 1] {
            assert!(
                Tree::decode(&bytes[..cut]).is_err(),
                "truncated at {cut} accepted"
            );
        }
        let mut huge_count = bytes.clone();
        huge_count[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Tree::decode(&huge_count).is_err());
    }

    #[test]
    fn version_round_trips() {
        let version = Version {
            dataset: "mnist".into(),
            tree: ObjectId::of(b"t"),
            parent: Some(ObjectId::of(b"p")),
            author: "ada@host".into(),
            time: 1_700_000_000,
            files: 10,
            bytes: 1234,
            source: "/data/mnist".into(),
            provenance: None,
            message: "first line\nsecond line\n".into(),
        };
        assert_eq!(Version::decode(&version.encode()).unwrap(), version);
        // Versions without provenance keep the encoding (and ids) they had before it existed.
        insta::assert_snapshot!(version.id().to_hex(), @"188cb8e37134743b691d06a71c1e9e53a98639a038ac2c7204c740d60c2738aa");
        let imported = Version {
            provenance: Some(ObjectId::of(b"provenance")),
            ..version.clone()
        };
        assert_eq!(Version::decode(&imported.encode()).unwrap(), imported);
        assert_ne!(imported.id(), version.id());
        let root = Version {
            parent: None,
            ..version
        };
        assert_eq!(Version::decode(&root.encode()).unwrap(), root);
        assert!(Version::decode(b"dsv-version 2\n").is_err());
    }

    #[test]
    fn provenance_round_trips_and_refuses_unknown_fields() {
        let provenance = Provenance {
            format: 1,
            source: "s3://bucket/mnist.zip".into(),
            extract: true,
            pinned_etag: Some("\"abc\"".into()),
            pinned_version_id: None,
            files: vec![FileProvenance {
                path: "train/0.png".into(),
                url: "s3://bucket/mnist.zip".into(),
                etag: Some("\"abc\"".into()),
                version_id: Some("v1".into()),
                last_modified: Some(1_700_000_000),
                size: 1234,
                member: Some("mnist/train/0.png".into()),
            }],
        };
        let bytes = provenance.encode();
        assert_eq!(Provenance::decode(&bytes).unwrap(), provenance);
        insta::assert_snapshot!(provenance.id().to_hex(), @"55c6bda46316c3ac7e873f101d6e16cd5f13e148ac52e4d74a386f9cf03579a0");
        let mut extra: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        extra["surprise"] = 1.into();
        assert!(Provenance::decode(extra.to_string().as_bytes()).is_err());
        assert!(Provenance::decode(b"{}").is_err());
    }

    #[test]
    fn file_map_round_trips() {
        let map = FileMap {
            chunks: vec![(ObjectId::of(b"1"), 10), (ObjectId::of(b"2"), 20)],
        };
        assert_eq!(FileMap::decode(&map.encode()).unwrap(), map);
        assert_eq!(map.size(), 30);
        assert!(FileMap::decode(&map.encode()[..40]).is_err());
    }
}
