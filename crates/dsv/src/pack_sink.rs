//! The sink every writer of packs appends frames to (commit, import, rebase, fetches, the
//! read engine's fetcher, gc's repack): one open pack at a time, sealed at [`PACK_TARGET`]
//! bytes or [`PACK_TARGET_OBJECTS`] objects, each object claimed once per run, and on failure
//! every pack of the run removed unless another writer's catalog names it.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::object::ObjectKind;
use crate::pack::{EncodedFrame, PackFile, PackWriter};

/// A pack is sealed once it holds this many bytes (tens of MiB: few objects on a remote,
/// cheap to rewrite when repacking).
pub const PACK_TARGET: u64 = 32 * 1024 * 1024;
/// A pack is also sealed once it indexes this many objects: the open pack's index is held
/// in memory until it is sealed (about 48 bytes an object, so ~6 MiB here). Without this
/// bound, a pack of tiny files reached millions of objects before [`PACK_TARGET`] bytes
/// (a commit of 300,000 files of 8 bytes held a 25 MB index in one open pack).
pub const PACK_TARGET_OBJECTS: usize = 1 << 17;

/// Appends frames to packs, sealing each pack when it reaches [`PACK_TARGET`] bytes or
/// [`PACK_TARGET_OBJECTS`] objects.
pub struct PackSink {
    packs_dir: PathBuf,
    temp_dir: PathBuf,
    /// Writes nothing: computes the packs it would write ([`PackSink::measuring`]).
    measure: bool,
    /// Keeps sealed packs in memory ([`PackSink::in_memory`]).
    memory: bool,
    state: Mutex<(Option<PackWriter>, Vec<PackFile>)>,
    /// The bytes of every pack sealed in memory, in the order of `state.1`.
    sealed_bytes: Mutex<Vec<Vec<u8>>>,
    /// Objects pushed to this sink (id and kind byte), so no object is written twice in one
    /// run.
    written: Mutex<crate::key_set::KeySet<33>>,
}

/// The key [`PackSink::claim`] keeps: the 32-byte id, then the kind byte.
fn claim_key(id: &ObjectId, kind: ObjectKind) -> [u8; 33] {
    let mut key = [0u8; 33];
    key[..32].copy_from_slice(&id.0);
    key[32] = kind as u8;
    key
}

impl PackSink {
    /// A sink writing into `packs_dir`, staging in `temp_dir`.
    pub fn new(packs_dir: &Path, temp_dir: &Path) -> Self {
        PackSink {
            packs_dir: packs_dir.to_path_buf(),
            temp_dir: temp_dir.to_path_buf(),
            measure: false,
            memory: false,
            state: Mutex::new((None, Vec::new())),
            sealed_bytes: Mutex::new(Vec::new()),
            written: Mutex::new(crate::key_set::KeySet::spilling_to(temp_dir)),
        }
    }

    /// A sink that writes no file: [`PackSink::finish`] returns the packs (ids and sizes) that
    /// a [`PackSink::new`] given the same frames would write (gc's dry run uses it, so its
    /// plan states the bytes the real run frees).
    pub fn measuring() -> Self {
        PackSink {
            measure: true,
            written: Mutex::new(crate::key_set::KeySet::default()),
            ..PackSink::new(Path::new(""), Path::new(""))
        }
    }

    /// A sink that keeps its packs in memory, for packs that go straight to a remote
    /// (`dsv copy`): [`PackSink::finish_in_memory`] gives each pack with its bytes. Memory is
    /// the caller's to bound: every sealed pack (about [`PACK_TARGET`] bytes) is held until
    /// then.
    pub fn in_memory() -> Self {
        PackSink {
            memory: true,
            written: Mutex::new(crate::key_set::KeySet::default()),
            ..PackSink::new(Path::new(""), Path::new(""))
        }
    }

    /// The directory the packs go to (the store's `packs/`; empty for a sink that writes
    /// no file).
    pub fn packs_dir(&self) -> &Path {
        &self.packs_dir
    }

    fn seal(&self, writer: PackWriter) -> Result<PackFile> {
        if self.memory {
            let (sealed, bytes) = writer.finish_in_memory()?;
            self.sealed_bytes
                .lock()
                .expect("no panics while holding the lock")
                .push(bytes);
            Ok(PackFile::from(&sealed))
        } else {
            Ok(PackFile::from(&writer.finish()?))
        }
    }

    /// Claims object `id` of `kind` for writing: true the first time it is asked in this run.
    /// Past half a million claims the older ones move to an unnamed file in the temporary
    /// directory (`crate::key_set`), so a commit of millions of new objects holds ~20 MB of
    /// claims, not ~33 bytes each.
    ///
    /// # Errors
    /// [`Error::Io`] when the claims on disk cannot be read.
    pub fn claim(&self, id: &ObjectId, kind: ObjectKind) -> Result<bool> {
        self.written
            .lock()
            .expect("no panics while holding the lock")
            .insert(claim_key(id, kind))
            .map_err(|source| Error::Io {
                path: self.temp_dir.clone(),
                source,
            })
    }

    /// Appends a frame to the open pack, sealing the pack when full.
    ///
    /// # Errors
    /// [`Error::Io`] (a full disk, for one).
    pub fn add(&self, frame: EncodedFrame) -> Result<()> {
        let mut state = self.state.lock().expect("no panics while holding the lock");
        // A pack's index stays within what readers accept (format::MAX_PACK_*).
        if let Some(writer) = state.0.take_if(|w| !w.fits(&frame)) {
            let sealed = self.seal(writer)?;
            state.1.push(sealed);
        }
        if state.0.is_none() {
            state.0 = Some(if self.memory {
                PackWriter::in_memory()
            } else if self.measure {
                PackWriter::measuring()
            } else {
                PackWriter::create(&self.packs_dir, &self.temp_dir)?
            });
        }
        let writer = state.0.as_mut().expect("just created");
        writer.add_frame(frame)?;
        if writer.size() >= PACK_TARGET || writer.object_count() >= PACK_TARGET_OBJECTS {
            let sealed = self.seal(state.0.take().expect("present"))?;
            state.1.push(sealed);
        }
        Ok(())
    }

    /// Gives up: deletes the open pack and the packs this sink sealed, so nothing of a failed
    /// download or import stays in `store`. A pack is named by its content, so another
    /// process may have recorded a byte-identical one meanwhile: under the store lock, only
    /// packs the catalog does not name are deleted (if the lock or the catalog cannot be
    /// read, none is: an unnamed pack is harmless and `gc` removes it). The caller must not
    /// hold the store lock.
    pub(crate) fn abandon(self, store: &crate::store::Store) {
        if self.measure || self.memory {
            return;
        }
        let (open, sealed) = self
            .state
            .into_inner()
            .expect("no panics while holding the lock");
        drop(open);
        let Ok(_lock) = store.lock_head_alone() else {
            return;
        };
        remove_unrecorded_packs(store, &sealed);
    }

    /// Seals the open pack (if any) and returns every pack written, durable on disk (for a
    /// measuring sink, every pack it would have written). The packs' indexes are not held:
    /// [`PackFile::read_index`] reads each back.
    ///
    /// # Errors
    /// [`Error::Io`].
    pub fn finish(self) -> Result<Vec<PackFile>> {
        let (open, mut sealed) = self
            .state
            .into_inner()
            .expect("no panics while holding the lock");
        if let Some(writer) = open
            && !writer.is_empty()
        {
            sealed.push(PackFile::from(&writer.finish()?));
        }
        Ok(sealed)
    }
}

impl PackSink {
    /// Seals the open pack (if any) of an in-memory sink ([`PackSink::in_memory`]) and
    /// returns every pack with its bytes (the pack's `.idx` is its bytes from
    /// `size - index length`; [`crate::pack::reader::parse_tail`] reads it).
    ///
    /// # Errors
    /// None for an in-memory sink; for another, its packs come back with empty bytes.
    pub fn finish_in_memory(self) -> Result<Vec<(PackFile, Vec<u8>)>> {
        let (open, mut sealed) =
            std::mem::take(&mut *self.state.lock().expect("no panics while holding the lock"));
        if let Some(writer) = open
            && !writer.is_empty()
        {
            sealed.push(self.seal(writer)?);
        }
        let bytes = std::mem::take(
            &mut *self
                .sealed_bytes
                .lock()
                .expect("no panics while holding the lock"),
        );
        let mut bytes = bytes.into_iter();
        Ok(sealed
            .into_iter()
            .map(|pack| (pack, bytes.next().unwrap_or_default()))
            .collect())
    }
}

/// Deletes those of `packs` (written by an operation that then failed to record them) that
/// the catalog does not name: another writer may have recorded an identical pack meanwhile.
/// A pack whose state cannot be read is left (an unnamed pack is harmless; `gc` removes it).
/// The caller holds the store lock.
pub(crate) fn remove_unrecorded_packs(store: &crate::store::Store, packs: &[PackFile]) {
    let packs_dir = store.packs_dir();
    for pack in packs {
        if matches!(store.catalog().has_pack(&pack.id), Ok(false)) {
            let _ = std::fs::remove_file(crate::pack::writer::pack_path(&packs_dir, &pack.id));
        }
    }
}
