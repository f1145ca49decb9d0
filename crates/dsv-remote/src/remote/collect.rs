//! The keys and requests of a remote's garbage collection (`dsv gc --remote`): the remote's
//! format key, gc marks, the server's clock, deletions, and ref deletion by
//! compare-and-swap. The rules that use them (mark, grace, delete, rescue; the writers'
//! view) are in `dsv::ops::sync::remote_gc` and `dsv::transfer`.
//!
//! Keys, under the remote's prefix (see `docs/format.md`, "Remote layout"):
//!
//! ```text
//! format                          JSON {"format":F,"grace_seconds":N}: written by the first
//!                                 `gc --remote` (F = 2), before its first mark, or by the
//!                                 first push of a pack with delta frames (F = 3)
//! marks/<pack id>                 a gc mark: the pack had no live object when it was written;
//!                                 its Last-Modified (the server's clock) is the mark time
//! clock                           rewritten by each gc run to read the server's clock
//! packs/ffff…ffff.pack, .idx      the guard pack: no dsv binary before the format key can
//!                                 parse its index, so they refuse the remote
//! ```

use std::collections::BTreeMap;

use bytes::Bytes;
use futures_util::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};
use serde::{Deserialize, Serialize};

use super::{RefName, RefState, Remote, index_key, lock_refs, pack_key, state_of};
use crate::error::{Error, IoResultExt, Result};
use crate::id::ObjectId;

/// The remote format this dsv writes and understands, the newest it knows: 1 is a remote
/// without a `format` key (nothing on it is ever deleted); [`FORMAT_GC`] (2) adds gc marks,
/// which writers must honour; [`FORMAT_DELTAS`] (3) adds packs that may hold delta frames
/// (pack format 2). A dsv whose `REMOTE_FORMAT` is older refuses to write to a remote of a
/// newer format ([`Error::RemoteFormatTooNew`]). Equal to [`FORMAT_DELTAS`] (a literal: the
/// constants table of docs/architecture.md is checked against it).
pub const REMOTE_FORMAT: u32 = 3;

/// Remote format 2: `gc --remote` has run (or may run) here; writers honour its marks.
pub const FORMAT_GC: u32 = 2;

/// Remote format 3: format 2, and packs may hold delta frames (pack format 2, `.idx` end
/// magic `DSVPEND2`), whose bases a writer and a collector treat as part of every chunk
/// stored so (a delta is never stored without its bases, nothing frees a base a kept delta
/// names). Set by the first push of such a pack (before its upload), and by a
/// `gc --remote` that finds one. A dsv that knows only format 2 refuses to write here.
pub const FORMAT_DELTAS: u32 = 3;

const _: () = assert!(REMOTE_FORMAT == FORMAT_DELTAS);

/// The key of the remote's format object.
pub(crate) const FORMAT_KEY: &str = "format";

/// The key a gc run rewrites to read the server's clock (its Last-Modified).
pub(crate) const CLOCK_KEY: &str = "clock";

/// The prefix of gc marks: `marks/<pack id>`.
pub(crate) const MARKS_PREFIX: &str = "marks";

/// The bytes of a deleted ref between its compare-and-swap and its deletion on S3, Azure
/// and GCS ([`Remote::delete_ref`]); read as an absent ref.
pub(crate) const REF_TOMBSTONE: &str = "deleted\n";

/// The longest format or mark object dsv reads, in bytes.
pub(crate) const MAX_SMALL_OBJECT: u64 = 64 * 1024;

/// The id of the guard pack: 64 `f` digits. Its `.pack` and `.idx` are text that no pack
/// reader accepts, so a dsv built before remote gc (which lists every pack and parses each
/// index before it pushes, fetches or pulls) stops with a corrupt-remote error instead of
/// writing without honouring marks. [`Remote::list_packs`] skips it.
pub fn guard_pack() -> ObjectId {
    ObjectId([0xff; 32])
}

const GUARD_TEXT: &str = "dsv remote format 2 (garbage collected): this dsv is too old to use \
     this remote, it does not honour gc marks; upgrade dsv\n";

/// The remote's format object (`format` at its root), as JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteFormat {
    /// The format version ([`REMOTE_FORMAT`] or older).
    pub format: u32,
    /// The shortest grace period, in seconds, any `gc --remote` of this remote has used:
    /// writers re-check marks before moving refs when their run has taken half of it.
    pub grace_seconds: u64,
}

/// One pack id listed under `packs/`, complete or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListedPack {
    /// The `.pack`'s size in bytes, `None` when only the `.idx` exists.
    pub pack_size: Option<u64>,
    /// Whether the `.idx` exists (the pack is complete only with both).
    pub has_index: bool,
    /// The newest Last-Modified of the two keys, Unix milliseconds (the server's clock).
    pub modified_ms: i64,
}

/// A gc mark's key.
pub fn mark_key(pack: &ObjectId) -> Path {
    Path::from(format!("{MARKS_PREFIX}/{pack}"))
}

impl Remote {
    /// Reads the remote's format object, `None` when there is none (format 1).
    ///
    /// # Errors
    /// [`Error::Remote`]; [`Error::Corrupt`] when it is not a format object or is longer
    /// than `MAX_SMALL_OBJECT` bytes.
    pub fn get_format(&self) -> Result<Option<(RemoteFormat, RefState)>> {
        let key = Path::from(FORMAT_KEY);
        self.count(1);
        match self
            .runtime
            .block_on(self.get_bounded(&key, MAX_SMALL_OBJECT))
        {
            Ok((bytes, meta)) => {
                let format: RemoteFormat = serde_json::from_slice(&bytes)
                    .map_err(|e| Error::corrupt(format!("{}:{key}", self.name), e.to_string()))?;
                Ok(Some((format, state_of(&meta))))
            }
            Err(Error::Remote { source, .. }) if source.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Writes the format object if it is still as `expected` (`None`: absent), and the guard
    /// pack before it. Returns false when another writer changed it first.
    ///
    /// # Errors
    /// [`Error::Remote`].
    pub fn put_format(&self, format: &RemoteFormat, expected: Option<&RefState>) -> Result<bool> {
        let guard = guard_pack();
        self.runtime.block_on(async {
            self.put_create(&pack_key(&guard), Bytes::from_static(GUARD_TEXT.as_bytes()))
                .await?;
            self.put_create(
                &index_key(&guard),
                Bytes::from_static(GUARD_TEXT.as_bytes()),
            )
            .await
        })?;
        let body = serde_json::to_vec(format).expect("a format object serializes");
        self.swap(&Path::from(FORMAT_KEY), Some(Bytes::from(body)), expected)
    }

    /// Makes the remote's format at least `at_least` (compare-and-swap on the `format` key,
    /// retried while other writers change it; the guard pack written first, as
    /// [`Remote::put_format`] does): a remote without the key gets
    /// `{"format": at_least, "grace_seconds": default_grace_seconds}`, one of an older
    /// format keeps its grace. A remote at `at_least` or newer (up to [`REMOTE_FORMAT`]) is
    /// left as it is. Returns the format now in force.
    ///
    /// A push calls it with [`FORMAT_DELTAS`] before uploading the first pack that holds a
    /// delta frame, so that a dsv that knows only format 2 refuses to write here from then on.
    ///
    /// # Errors
    /// [`Error::RemoteFormatTooNew`] when the remote's format is newer than
    /// [`REMOTE_FORMAT`] (or `at_least` is: a caller's bug); [`Error::RemoteCollected`]
    /// (naming `operation`, e.g. `push`) when other writers kept changing the key, eight
    /// times in a row; [`Error::Remote`]; [`Error::Corrupt`] for a
    /// malformed format object.
    pub fn ensure_format(
        &self,
        at_least: u32,
        default_grace_seconds: u64,
        operation: &'static str,
    ) -> Result<RemoteFormat> {
        for _ in 0..8 {
            let current = self.get_format()?;
            let found = current.as_ref().map_or(1, |(format, _)| format.format);
            if found > REMOTE_FORMAT || at_least > REMOTE_FORMAT {
                return Err(Error::RemoteFormatTooNew {
                    remote: self.name.clone(),
                    found: found.max(at_least),
                    known: REMOTE_FORMAT,
                });
            }
            if let Some((format, _)) = &current
                && format.format >= at_least
            {
                return Ok(format.clone());
            }
            let wanted = RemoteFormat {
                format: at_least,
                grace_seconds: current
                    .as_ref()
                    .map_or(default_grace_seconds, |(format, _)| format.grace_seconds),
            };
            if self.put_format(&wanted, current.as_ref().map(|(_, state)| state))? {
                return Ok(wanted);
            }
        }
        Err(Error::RemoteCollected {
            remote: self.name.clone(),
            operation,
        })
    }

    /// Deletes ref `name` if it is still as `expected` (the ETag the caller read). Returns
    /// false when another writer changed or deleted it first.
    ///
    /// `object_store` has no conditional delete. On a local directory the check and the
    /// deletion happen under the exclusive lock on `refs.lock`, as a ref update does. On S3,
    /// Azure and GCS the ref is first overwritten with `REF_TOMBSTONE` by a conditional
    /// put (`If-Match` on the ETag read): that is the compare-and-swap, and a writer that
    /// moved the ref meanwhile wins it. The tombstone is then deleted unconditionally. In
    /// between, readers see the ref as absent, and a writer creating the ref (a create-only
    /// put) fails as when losing any race; only `push --force` (an unconditional put) can
    /// write the ref in that window and have its write deleted.
    ///
    /// # Errors
    /// [`Error::Remote`].
    pub fn delete_ref(&self, name: &RefName, expected: &RefState) -> Result<bool> {
        self.swap(&name.key(), None, Some(expected))
    }

    /// A compare-and-swap on `key`: writes `body` (or deletes the key, for `None`) if the
    /// key is still as `expected` (`None`: absent). False when it is not.
    fn swap(&self, key: &Path, body: Option<Bytes>, expected: Option<&RefState>) -> Result<bool> {
        if let Some(root) = &self.local_root {
            let _lock = lock_refs(root)?;
            self.count(1);
            let current = match self.runtime.block_on(self.store.head(key)) {
                Ok(meta) => Some(state_of(&meta)),
                Err(object_store::Error::NotFound { .. }) => None,
                Err(e) => return Err(self.fail(format!("check {key}"))(e)),
            };
            if current.as_ref().map(|s| &s.etag) != expected.map(|s| &s.etag) {
                return Ok(false);
            }
            self.count(1);
            match body {
                Some(body) => self
                    .runtime
                    .block_on(self.store.put(key, PutPayload::from_bytes(body)))
                    .map(|_| ())
                    .map_err(self.fail(format!("write {key}")))?,
                None => self.delete_key(key)?,
            }
            return Ok(true);
        }
        let mode = match expected {
            None => PutMode::Create,
            Some(state) => PutMode::Update(UpdateVersion {
                e_tag: state.etag.clone(),
                version: state.version.clone(),
            }),
        };
        let payload = match &body {
            Some(body) => PutPayload::from_bytes(body.clone()),
            None => PutPayload::from_static(REF_TOMBSTONE.as_bytes()),
        };
        self.count(1);
        match self
            .runtime
            .block_on(self.store.put_opts(key, payload, PutOptions::from(mode)))
        {
            Ok(_) => {}
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. }
                | object_store::Error::NotFound { .. },
            ) => return Ok(false),
            Err(e) => return Err(self.fail(format!("write {key}"))(e)),
        }
        if body.is_none() {
            self.delete_key(key)?;
        }
        Ok(true)
    }

    /// Deletes one key; an absent key is success.
    ///
    /// # Errors
    /// [`Error::Remote`].
    pub fn delete_key(&self, key: &Path) -> Result<()> {
        self.count(1);
        match self.runtime.block_on(self.store.delete(key)) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.fail(format!("delete {key}"))(e)),
        }
    }

    /// Lists every pack id under `packs/` (the guard pack left out), complete or not.
    ///
    /// # Errors
    /// [`Error::Remote`].
    pub fn list_all_packs(&self) -> Result<BTreeMap<ObjectId, ListedPack>> {
        let listed: Vec<object_store::ObjectMeta> = self
            .runtime
            .block_on(self.store.list(Some(&Path::from("packs"))).try_collect())
            .map_err(self.fail("list packs/"))?;
        self.count(1 + listed.len() as u64 / 1000);
        let guard = guard_pack();
        let mut packs: BTreeMap<ObjectId, ListedPack> = BTreeMap::new();
        for meta in listed {
            let Some(name) = meta.location.filename() else {
                continue;
            };
            let (id, is_pack) = if let Some(id) = crate::pack::writer::pack_id_of(name) {
                (id, true)
            } else if let Some(hex) = name.strip_suffix(".idx")
                && let Ok(id) = hex.parse::<ObjectId>()
            {
                (id, false)
            } else {
                continue;
            };
            if id == guard {
                continue;
            }
            let entry = packs.entry(id).or_insert(ListedPack {
                pack_size: None,
                has_index: false,
                modified_ms: i64::MIN,
            });
            if is_pack {
                entry.pack_size = Some(meta.size);
            } else {
                entry.has_index = true;
            }
            entry.modified_ms = entry.modified_ms.max(meta.last_modified.timestamp_millis());
        }
        Ok(packs)
    }

    /// Lists the gc marks: pack id and mark time (Last-Modified, Unix milliseconds).
    ///
    /// # Errors
    /// [`Error::Remote`].
    pub fn list_marks(&self) -> Result<BTreeMap<ObjectId, i64>> {
        let listed: Vec<object_store::ObjectMeta> = self
            .runtime
            .block_on(
                self.store
                    .list(Some(&Path::from(MARKS_PREFIX)))
                    .try_collect(),
            )
            .map_err(self.fail("list marks/"))?;
        self.count(1 + listed.len() as u64 / 1000);
        Ok(listed
            .into_iter()
            .filter_map(|meta| {
                let id = meta.location.filename()?.parse::<ObjectId>().ok()?;
                Some((id, meta.last_modified.timestamp_millis()))
            })
            .collect())
    }

    /// Writes a gc mark for `pack` with a create-only put (an existing mark is kept, with
    /// its older time).
    ///
    /// # Errors
    /// [`Error::Remote`].
    pub fn put_mark(&self, pack: &ObjectId) -> Result<()> {
        let body = format!("{{\"pack\":\"{pack}\"}}\n");
        self.runtime
            .block_on(self.put_create(&mark_key(pack), Bytes::from(body)))
    }

    /// The server's clock, Unix milliseconds: the Last-Modified of `CLOCK_KEY` after
    /// rewriting it.
    ///
    /// # Errors
    /// [`Error::Remote`].
    pub fn server_now_ms(&self) -> Result<i64> {
        let key = Path::from(CLOCK_KEY);
        self.count(2);
        self.runtime
            .block_on(
                self.store
                    .put(&key, PutPayload::from_static(b"dsv gc clock\n")),
            )
            .map_err(self.fail(format!("write {key}")))?;
        let meta = self
            .runtime
            .block_on(self.store.head(&key))
            .map_err(self.fail(format!("check {key}")))?;
        Ok(meta.last_modified.timestamp_millis())
    }

    /// Downloads a whole pack of `size` bytes (as listed), in one GET.
    ///
    /// # Errors
    /// [`Error::Remote`]; [`Error::Corrupt`] when it is larger than `size`.
    pub fn get_pack(&self, id: &ObjectId, size: u64) -> Result<Bytes> {
        self.get(&pack_key(id), size)
    }
}

impl Remote {
    /// For a file:// remote: the staging files (`<key>#<n>`, which `object_store` writes
    /// and renames into place; a process killed in between leaves them, and listings never
    /// show them) under `packs/`, `marks/` and `refs/` whose modification time is at least
    /// `older_than` ago. Each is deleted unless `dry_run`. Returns how many. Nothing for
    /// object storage, where an interrupted PUT leaves no object.
    ///
    /// # Errors
    /// [`Error::Io`] reading the directories or deleting a file.
    pub fn remove_staging_files(
        &self,
        older_than: std::time::Duration,
        dry_run: bool,
    ) -> Result<u64> {
        let Some(root) = &self.local_root else {
            return Ok(0);
        };
        let mut found = 0;
        let mut pending: Vec<std::path::PathBuf> = ["packs", "marks", "refs"]
            .iter()
            .map(|dir| root.join(dir))
            .collect();
        while let Some(dir) = pending.pop() {
            let entries = match std::fs::read_dir(&dir) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e).at(&dir),
            };
            for entry in entries {
                let entry = entry.at(&dir)?;
                let path = entry.path();
                let kind = entry.file_type().at(&path)?;
                if kind.is_dir() {
                    pending.push(path);
                    continue;
                }
                if !entry.file_name().to_string_lossy().contains('#') {
                    continue;
                }
                let age = entry
                    .metadata()
                    .at(&path)?
                    .modified()
                    .at(&path)?
                    .elapsed()
                    .unwrap_or_default();
                if age < older_than {
                    continue;
                }
                found += 1;
                if !dry_run {
                    match std::fs::remove_file(&path) {
                        Ok(()) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => return Err(e).at(&path),
                    }
                }
            }
        }
        Ok(found)
    }
}
