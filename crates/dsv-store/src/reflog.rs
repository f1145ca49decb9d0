//! The ref log: `.dsv/reflog`, a durable record of every name the store gives to versions
//! (dataset heads, tags), and of its remotes, pins and removals, kept beside the catalog so
//! that losing `catalog.db` loses no version, head or tag: `dsv repair` rebuilds the catalog
//! from the packs (objects, trees, versions) and replays this log (names).
//!
//! Format: UTF-8 JSON lines (RFC 8259), one `RefLogLine` per line, appended in order, e.g.
//! `{"time":1700000000,"op":"head","dataset":"mnist","version":"<64 hex>"}`. Replaying the
//! lines in order ([`RefState::apply`]) gives the state. Lines are written by
//! [`crate::catalog::CatalogWriter::commit`] in the commit protocol: packs are durable first,
//! then the lines are appended and synced, then the catalog transaction commits and records
//! the log's new length. The log is therefore never behind the catalog. A crash between the
//! append and the catalog commit leaves lines past the recorded length; they name versions
//! whose packs are durable, and the next append cuts them off (the catalog, when present,
//! is the authority; the log is for when it is lost).
//!
//! # The commit order, and a lost catalog
//!
//! The packs hold every object, tree and version, and describe themselves, but heads, tags,
//! remotes, pins and removals were only in the catalog. `.dsv/reflog`
//! (`docs/format.md#ref-log`) records them too, so that a lost `catalog.db` loses no
//! name. `CatalogWriter::commit` keeps the order packs → ref log → catalog:
//!
//! 1. the packs are sealed and synced (above);
//! 2. the transaction's changes to names are appended to the ref log, after cutting it to the
//!    length the catalog recorded, and synced (or, past 8 MiB or when the log is shorter than
//!    recorded, the log is replaced by a snapshot of the catalog's names);
//! 3. the catalog transaction records the log's new length and commits.
//!
//! So the log is never behind the catalog. A crash between 2 and 3 leaves lines past the
//! recorded length; they name versions whose packs are durable. While the catalog is there it
//! is the authority: the next append moves those lines to `reflog.unapplied` and cuts them
//! off. A failed append (a full disk) fails the transaction, which records nothing; so does a
//! failed step 3, and its lines are then cut off the log again.
//!
//! **A lost catalog is refused, never replaced.** A `.dsv` whose `catalog.db` is missing while
//! it holds packs or a non-empty ref log, or whose `catalog.db` is empty (`user_version` 0), is
//! `Error::CatalogLost` (exit 5) for every command but `repair`, `init` and `clone` included, so no command
//! makes a new empty catalog beside the old data. `dsv repair` rebuilds it
//! (Cleanup and audits (`ops::repair`)).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, IoResultExt, Result};
use crate::id::ObjectId;

/// The file name of the ref log inside `.dsv/`.
pub const FILE_NAME: &str = "reflog";

/// The longest line a ref log may hold, in bytes (a remote's options are the longest field).
pub(crate) const MAX_LINE: usize = 1024 * 1024;

/// When an append would grow the log past this many bytes, the log is rewritten as a
/// snapshot of the current state instead (compaction).
pub(crate) const COMPACT_AT: u64 = 8 * 1024 * 1024;

/// One change to the store's names.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case", deny_unknown_fields)]
pub enum RefLogEntry {
    /// Dataset `dataset`'s head moved to `version` (`None`: the dataset was removed).
    Head {
        /// The dataset.
        dataset: String,
        /// The new head.
        version: Option<ObjectId>,
    },
    /// Tag `tag` of `dataset` now names `version` (`None`: deleted).
    Tag {
        /// The dataset.
        dataset: String,
        /// The tag.
        tag: String,
        /// The version it names.
        version: Option<ObjectId>,
    },
    /// Remote `name` was added with `url` and non-secret `options` (`url` `None`: removed).
    Remote {
        /// The remote's name.
        name: String,
        /// Its URL.
        url: Option<String>,
        /// Its non-secret options.
        #[serde(default)]
        options: BTreeMap<String, String>,
    },
    /// The remotes' read order is now `names` (every remote, first read first). A replay
    /// puts the remotes named first, in that order, and the others after them as they were;
    /// a name of no remote is skipped. A remote added is read last until an entry like this
    /// says otherwise.
    RemoteOrder {
        /// The remotes' names, in read order.
        names: Vec<String>,
    },
    /// Version `version` was pinned (`reason`, until Unix second `until`).
    Pin {
        /// The version.
        version: ObjectId,
        /// Why.
        reason: String,
        /// Until when (Unix seconds), or for good.
        until: Option<i64>,
    },
    /// Version `version`'s pin was lifted.
    Unpin {
        /// The version.
        version: ObjectId,
    },
    /// Version `version` was removed (`dsv rm`); its tags went with it.
    Removed {
        /// The version.
        version: ObjectId,
    },
}

/// One line of the ref log: an entry and when it was written.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct RefLogLine {
    /// Unix seconds.
    pub time: i64,
    /// The change.
    #[serde(flatten)]
    pub entry: RefLogEntry,
}

impl RefLogEntry {
    /// Checks the entry as the command that writes it checks its input: dataset and tag
    /// names by [`crate::revision::check_name`] (as `commit`, `tag` and `rename` do), a
    /// remote's name, URL and options as `dsv remote add` does ([`crate::remote_url::check_url`],
    /// [`crate::remote_url::check_options`]: no `http://`, no user or password in the URL, no
    /// credential among the options). A replay ([`read`]) keeps only entries that pass, so a
    /// line forged into the log cannot give the store a name or a remote no command would.
    ///
    /// # Errors
    /// Why the entry is refused, in words that name no secret.
    pub fn check(&self) -> std::result::Result<(), String> {
        use crate::names::check_name;
        let name_error = |e: Error| e.to_string();
        match self {
            RefLogEntry::Head { dataset, .. } => check_name("dataset", dataset).map_err(name_error),
            RefLogEntry::Tag { dataset, tag, .. } => check_name("dataset", dataset)
                .and_then(|()| check_name("tag", tag))
                .map_err(name_error),
            RefLogEntry::Remote { name, url, options } => {
                check_name("remote", name).map_err(name_error)?;
                let Some(url) = url else { return Ok(()) };
                crate::remote_url::check_url(url)
                    .and_then(|()| crate::remote_url::check_options(options))
                    .map_err(|e| match e {
                        // The reason alone: the value may hold the very secret refused.
                        Error::InvalidRemote {
                            what: "option",
                            value,
                            reason,
                        } => format!("remote {name:?}: option {value:?}: {reason}"),
                        Error::InvalidRemote { reason, .. } => {
                            let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
                            format!("remote {name:?}: its URL ({scheme}://…): {reason}")
                        }
                        other => format!("remote {name:?}: {other}"),
                    })
            }
            RefLogEntry::RemoteOrder { names } => names
                .iter()
                .try_for_each(|name| check_name("remote", name))
                .map_err(name_error),
            RefLogEntry::Pin { .. } | RefLogEntry::Unpin { .. } | RefLogEntry::Removed { .. } => {
                Ok(())
            }
        }
    }

    /// The version this entry names, if any.
    pub fn version(&self) -> Option<ObjectId> {
        match self {
            RefLogEntry::Head { version, .. } | RefLogEntry::Tag { version, .. } => *version,
            RefLogEntry::Pin { version, .. }
            | RefLogEntry::Unpin { version }
            | RefLogEntry::Removed { version } => Some(*version),
            RefLogEntry::Remote { .. } | RefLogEntry::RemoteOrder { .. } => None,
        }
    }
}

/// The store's names as a ref log (or a catalog) states them.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct RefState {
    /// Dataset → head.
    pub heads: BTreeMap<String, ObjectId>,
    /// (dataset, tag) → version.
    pub tags: BTreeMap<(String, String), ObjectId>,
    /// Remote name → (URL, options).
    pub remotes: BTreeMap<String, (String, BTreeMap<String, String>)>,
    /// The remotes' names in read order (every remote of `remotes`, once).
    pub remote_order: Vec<String>,
    /// Version → (reason, until).
    pub pins: BTreeMap<ObjectId, (String, Option<i64>)>,
    /// Removed versions.
    pub removed: BTreeSet<ObjectId>,
}

impl RefState {
    /// Applies one entry, with the catalog's semantics (a removal drops the version's tags).
    pub fn apply(&mut self, entry: &RefLogEntry) {
        match entry {
            RefLogEntry::Head { dataset, version } => match version {
                Some(v) => {
                    self.heads.insert(dataset.clone(), *v);
                }
                None => {
                    self.heads.remove(dataset);
                }
            },
            RefLogEntry::Tag {
                dataset,
                tag,
                version,
            } => {
                let key = (dataset.clone(), tag.clone());
                match version {
                    Some(v) => {
                        self.tags.insert(key, *v);
                    }
                    None => {
                        self.tags.remove(&key);
                    }
                }
            }
            RefLogEntry::Remote { name, url, options } => match url {
                Some(url) => {
                    self.remotes
                        .insert(name.clone(), (url.clone(), options.clone()));
                    if !self.remote_order.contains(name) {
                        self.remote_order.push(name.clone());
                    }
                }
                None => {
                    self.remotes.remove(name);
                    self.remote_order.retain(|n| n != name);
                }
            },
            RefLogEntry::RemoteOrder { names } => {
                self.remote_order = reorder(&self.remote_order, names);
            }
            RefLogEntry::Pin {
                version,
                reason,
                until,
            } => {
                self.pins.insert(*version, (reason.clone(), *until));
            }
            RefLogEntry::Unpin { version } => {
                self.pins.remove(version);
            }
            RefLogEntry::Removed { version } => {
                self.removed.insert(*version);
                self.tags.retain(|_, v| v != version);
            }
        }
    }

    /// Drops what `entry` (one of [`RefState::entries`]) states: its head, tag, remote, pin
    /// or removal.
    pub fn forget(&mut self, entry: &RefLogEntry) {
        match entry {
            RefLogEntry::Head { dataset, .. } => {
                self.heads.remove(dataset);
            }
            RefLogEntry::Tag { dataset, tag, .. } => {
                self.tags.remove(&(dataset.clone(), tag.clone()));
            }
            RefLogEntry::Remote { name, .. } => {
                self.remotes.remove(name);
                self.remote_order.retain(|n| n != name);
            }
            // The order of the remotes left stays as it is.
            RefLogEntry::RemoteOrder { .. } => {}
            RefLogEntry::Pin { version, .. } | RefLogEntry::Unpin { version } => {
                self.pins.remove(version);
            }
            RefLogEntry::Removed { version } => {
                self.removed.remove(version);
            }
        }
    }

    /// The entries that rebuild this state from nothing (a snapshot), in a fixed order.
    pub fn entries(&self) -> Vec<RefLogEntry> {
        let mut out = Vec::new();
        for (name, (url, options)) in &self.remotes {
            out.push(RefLogEntry::Remote {
                name: name.clone(),
                url: Some(url.clone()),
                options: options.clone(),
            });
        }
        // Added in name order above: the read order, when it differs.
        if !self.remote_order.is_sorted() {
            out.push(RefLogEntry::RemoteOrder {
                names: self.remote_order.clone(),
            });
        }
        for (dataset, version) in &self.heads {
            out.push(RefLogEntry::Head {
                dataset: dataset.clone(),
                version: Some(*version),
            });
        }
        for ((dataset, tag), version) in &self.tags {
            out.push(RefLogEntry::Tag {
                dataset: dataset.clone(),
                tag: tag.clone(),
                version: Some(*version),
            });
        }
        for (version, (reason, until)) in &self.pins {
            out.push(RefLogEntry::Pin {
                version: *version,
                reason: reason.clone(),
                until: *until,
            });
        }
        for version in &self.removed {
            out.push(RefLogEntry::Removed { version: *version });
        }
        out
    }

    /// Every way `self` (the catalog's state) and `log` (the ref log's) differ, in words.
    /// The remotes' read order is not compared: a log written before schema 12 lists the
    /// remotes in the order they were added, while the catalog kept them in name order.
    pub fn differences(&self, log: &RefState) -> Vec<String> {
        let mut out = Vec::new();
        let mut compare = |what: &str, ours: String, theirs: String| {
            if ours != theirs {
                out.push(format!(
                    "{what}: the catalog has {ours}, the ref log {theirs}"
                ));
            }
        };
        for name in self.heads.keys().chain(log.heads.keys()) {
            let show = |s: &RefState| s.heads.get(name).map_or("none".into(), |v| v.short());
            compare(&format!("head of {name}"), show(self), show(log));
        }
        for key in self.tags.keys().chain(log.tags.keys()) {
            let show = |s: &RefState| s.tags.get(key).map_or("none".into(), |v| v.short());
            compare(&format!("tag {}@{}", key.0, key.1), show(self), show(log));
        }
        for name in self.remotes.keys().chain(log.remotes.keys()) {
            let show = |s: &RefState| {
                s.remotes
                    .get(name)
                    .map_or("none".into(), |r| r.0.to_string())
            };
            compare(&format!("remote {name}"), show(self), show(log));
        }
        for version in self.pins.keys().chain(log.pins.keys()) {
            let show = |s: &RefState| s.pins.contains_key(version).to_string();
            compare(
                &format!("pin of {}", version.short()),
                show(self),
                show(log),
            );
        }
        for version in self.removed.iter().chain(&log.removed) {
            let show = |s: &RefState| s.removed.contains(version).to_string();
            compare(
                &format!("removal of {}", version.short()),
                show(self),
                show(log),
            );
        }
        out.sort();
        out.dedup();
        out
    }
}

/// `current` with `first` moved to the front, in the order `first` names them; names in
/// `first` that are not in `current` are skipped, and the rest keep their order.
pub(crate) fn reorder(current: &[String], first: &[String]) -> Vec<String> {
    let mut order: Vec<String> = Vec::with_capacity(current.len());
    for name in first {
        if current.contains(name) && !order.contains(name) {
            order.push(name.clone());
        }
    }
    for name in current {
        if !order.contains(name) {
            order.push(name.clone());
        }
    }
    order
}

/// A ref log line that parsed but that its command would have refused
/// ([`RefLogEntry::check`]): never replayed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RefusedLine {
    /// Its 1-based number.
    pub line: usize,
    /// Why it is refused.
    pub reason: String,
    /// The entry, for [`ReadLog::named_versions`] only (a cleanup keeps what any line names).
    #[serde(skip)]
    pub entry: RefLogEntry,
}

/// What reading a ref log found.
#[derive(Debug, Default)]
pub struct ReadLog {
    /// The entries that pass [`RefLogEntry::check`], in order.
    pub entries: Vec<RefLogEntry>,
    /// Lines that did not parse (a line torn by a crash, or damage), by 1-based number.
    pub bad_lines: Vec<usize>,
    /// Lines that parsed but name what no command would accept (a forged or damaged line).
    pub refused: Vec<RefusedLine>,
}

impl ReadLog {
    /// The state the entries give.
    pub fn state(&self) -> RefState {
        let mut state = RefState::default();
        for entry in &self.entries {
            state.apply(entry);
        }
        state
    }

    /// Every version any entry names, a refused line's too (a cleanup that keeps too much
    /// loses nothing).
    pub fn named_versions(&self) -> BTreeSet<ObjectId> {
        self.entries
            .iter()
            .chain(self.refused.iter().map(|r| &r.entry))
            .filter_map(RefLogEntry::version)
            .collect()
    }
}

/// Reads the first `limit` bytes of the ref log at `path` (all of it with `None`). A missing
/// file reads as empty. Lines longer than `MAX_LINE` or that do not parse are skipped and
/// counted in [`ReadLog::bad_lines`]; lines that parse but fail [`RefLogEntry::check`] are
/// skipped and listed in [`ReadLog::refused`].
///
/// # Errors
/// [`Error::Io`].
pub fn read(path: &Path, limit: Option<u64>) -> Result<ReadLog> {
    let file = match crate::store_file::open_read(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(ReadLog::default()),
        Err(e) => return Err(e).at(path),
    };
    let mut reader = BufReader::new(file.take(limit.unwrap_or(u64::MAX)));
    let mut out = ReadLog::default();
    let mut line = Vec::new();
    let mut number = 0;
    loop {
        line.clear();
        // Bounded: never more than MAX_LINE + 1 bytes of one line in memory.
        let n = (&mut reader)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
            .at(path)?;
        if n == 0 {
            break;
        }
        number += 1;
        if line.last() != Some(&b'\n') {
            // Too long (skip to its end) or torn at the end of the file.
            if n > MAX_LINE {
                let mut rest = Vec::new();
                loop {
                    rest.clear();
                    let m = (&mut reader)
                        .take(MAX_LINE as u64)
                        .read_until(b'\n', &mut rest)
                        .at(path)?;
                    if m == 0 || rest.last() == Some(&b'\n') {
                        break;
                    }
                }
            }
            out.bad_lines.push(number);
            continue;
        }
        match serde_json::from_slice::<RefLogLine>(&line) {
            Ok(parsed) => match parsed.entry.check() {
                Ok(()) => out.entries.push(parsed.entry),
                Err(reason) => out.refused.push(RefusedLine {
                    line: number,
                    reason,
                    entry: parsed.entry,
                }),
            },
            Err(_) => out.bad_lines.push(number),
        }
    }
    Ok(out)
}

/// Encodes entries as ref log lines stamped `time`.
pub fn encode(entries: &[RefLogEntry], time: i64) -> Vec<u8> {
    let mut out = Vec::new();
    for entry in entries {
        let line = RefLogLine {
            time,
            entry: entry.clone(),
        };
        // Serializing plain strings, numbers and hex ids cannot fail.
        if let Ok(text) = serde_json::to_vec(&line) {
            out.extend_from_slice(&text);
            out.push(b'\n');
        }
    }
    out
}

/// Appends `bytes` to the ref log at `path` after cutting it to `applied` bytes (lines past
/// it belong to transactions that never committed; they are moved to [`unapplied_path`]),
/// and syncs; returns the new length.
///
/// # Errors
/// [`Error::Corrupt`] when the file is shorter than `applied` (the caller rewrites it);
/// [`Error::Io`].
pub fn append(path: &Path, applied: u64, bytes: &[u8]) -> Result<u64> {
    let mut options = OpenOptions::new();
    options.read(true).write(true).create(true).truncate(false);
    let mut file = crate::store_file::open(path, options).at(path)?;
    let len = file.metadata().at(path)?.len();
    if len < applied {
        return Err(Error::corrupt(
            path,
            format!("the ref log has {len} bytes but the catalog recorded {applied}"),
        ));
    }
    if len > applied {
        // Lines of a transaction that never committed (a crash, or a catalog restored from
        // an older copy): kept aside in `reflog.unapplied`, never destroyed.
        let mut tail = Vec::new();
        file.seek(SeekFrom::Start(applied)).at(path)?;
        (&mut file)
            .take(COMPACT_AT)
            .read_to_end(&mut tail)
            .at(path)?;
        let aside = unapplied_path(path);
        let mut options = OpenOptions::new();
        options.create(true).append(true);
        let mut kept = crate::store_file::open(&aside, options).at(&aside)?;
        kept.write_all(&tail).at(&aside)?;
        kept.sync_data().at(&aside)?;
        file.set_len(applied).at(path)?;
    }
    file.seek(SeekFrom::Start(applied)).at(path)?;
    file.write_all(bytes).at(path)?;
    file.sync_data().at(path)?;
    Ok(applied + bytes.len() as u64)
}

/// Cuts the ref log at `path` back to `applied` bytes and syncs: undoes an [`append`] whose
/// transaction did not commit.
///
/// # Errors
/// [`Error::Io`].
pub fn cut(path: &Path, applied: u64) -> Result<()> {
    let mut options = OpenOptions::new();
    options.write(true);
    let file = crate::store_file::open(path, options).at(path)?;
    file.set_len(applied).at(path)?;
    file.sync_data().at(path)
}

/// Replaces the ref log at `path` with `bytes`, atomically (temp file, sync, rename, sync
/// of the directory); returns the new length.
///
/// The temporary file's name is predictable (`reflog.tmp-<pid>`), so whatever is found
/// there (a leftover, or a planted symlink or FIFO) is removed first and the file is made
/// anew through [`crate::store_file::open`]: a symlink is never followed, a FIFO never
/// waited on.
///
/// # Errors
/// [`Error::Io`].
pub(crate) fn rewrite(path: &Path, bytes: &[u8]) -> Result<u64> {
    let temp = temp_path(path);
    {
        match fs::remove_file(&temp) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e).at(&temp),
            _ => {}
        }
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        let mut file = crate::store_file::open(&temp, options).at(&temp)?;
        file.write_all(bytes).at(&temp)?;
        file.sync_all().at(&temp)?;
    }
    fs::rename(&temp, path).at(path)?;
    if let Some(dir) = path.parent() {
        File::open(dir).and_then(|d| d.sync_all()).at(dir)?;
    }
    Ok(bytes.len() as u64)
}

/// Where [`append`] keeps lines it cut off: `reflog.unapplied` beside the log.
pub fn unapplied_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".unapplied");
    PathBuf::from(name)
}

fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".tmp-{}", std::process::id()));
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> ObjectId {
        ObjectId([n; 32])
    }

    #[test]
    fn replay_follows_the_catalogs_rules() {
        let mut state = RefState::default();
        for entry in [
            RefLogEntry::Head {
                dataset: "a".into(),
                version: Some(id(1)),
            },
            RefLogEntry::Tag {
                dataset: "a".into(),
                tag: "v1".into(),
                version: Some(id(1)),
            },
            RefLogEntry::Head {
                dataset: "a".into(),
                version: Some(id(2)),
            },
            RefLogEntry::Removed { version: id(1) },
        ] {
            state.apply(&entry);
        }
        assert_eq!(state.heads["a"], id(2));
        assert!(state.tags.is_empty(), "a removal drops the version's tags");
        let mut again = RefState::default();
        for entry in state.entries() {
            again.apply(&entry);
        }
        assert_eq!(again, state, "a snapshot replays to the same state");
        assert!(state.differences(&again).is_empty());
    }

    #[test]
    fn torn_long_and_garbage_lines_are_skipped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        let good = encode(
            &[RefLogEntry::Head {
                dataset: "a".into(),
                version: Some(id(3)),
            }],
            1,
        );
        let mut bytes = good.clone();
        bytes.extend_from_slice(b"not json\n");
        bytes.extend(std::iter::repeat_n(b'x', MAX_LINE + 10));
        bytes.push(b'\n');
        bytes.extend_from_slice(&good);
        bytes.extend_from_slice(&good[..10]);
        fs::write(&path, &bytes).unwrap();
        let log = read(&path, None).unwrap();
        assert_eq!(log.entries.len(), 2);
        assert_eq!(log.bad_lines, vec![2, 3, 5]);
        let first = read(&path, Some(good.len() as u64)).unwrap();
        assert_eq!(first.entries.len(), 1);
        assert!(first.bad_lines.is_empty());
    }

    #[test]
    fn append_cuts_lines_past_the_applied_length() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        let line = encode(&[RefLogEntry::Unpin { version: id(1) }], 1);
        let one = append(&path, 0, &line).unwrap();
        // A line a crashed transaction wrote, never applied:
        append(&path, one, &line).unwrap();
        let two = append(&path, one, &line).unwrap();
        assert_eq!(two, 2 * one);
        assert_eq!(fs::metadata(&path).unwrap().len(), two);
        assert_eq!(
            fs::read(unapplied_path(&path)).unwrap(),
            line,
            "cut lines are kept"
        );
        assert!(matches!(
            append(&path, 10 * two, &line),
            Err(Error::Corrupt { .. })
        ));
    }

    #[test]
    fn rewrite_neither_follows_a_planted_symlink_nor_waits_on_a_fifo() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        let line = encode(&[RefLogEntry::Unpin { version: id(1) }], 1);
        // A symlink planted at the temporary file's predictable name: its target is kept.
        let victim = dir.path().join("victim");
        fs::write(&victim, b"precious").unwrap();
        std::os::unix::fs::symlink(&victim, temp_path(&path)).unwrap();
        assert_eq!(rewrite(&path, &line).unwrap(), line.len() as u64);
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        assert_eq!(fs::read(&path).unwrap(), line);
        assert!(!fs::symlink_metadata(&path).unwrap().is_symlink());
        // A FIFO there: removed, never opened (opening it for writing would wait forever).
        nix::unistd::mkfifo(&temp_path(&path), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let twice = [line.clone(), line.clone()].concat();
        assert_eq!(rewrite(&path, &twice).unwrap(), twice.len() as u64);
        assert_eq!(fs::read(&path).unwrap(), twice);
    }
}
