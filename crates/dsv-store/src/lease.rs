//! Leases: a long-lived reader's claim on the versions it reads.
//!
//! A mount or a training job may read one version for days. It must not hold the store's
//! data lock that long (every `gc` and `cache prune` would wait for it), and `gc` must never
//! delete what it reads. So a reader takes a [`Lease`] instead: a small file in
//! `.dsv/leases/` that names the versions, with an exclusive `flock` held on it by the
//! reader's open file. `gc` (`dsv::ops::gc`) reads every lease under its exclusive data
//! lock and keeps the leased versions (even removed or evicted ones) whole, packs unmoved,
//! and goes on with the rest.
//!
//! A lease ends when its [`Lease`] drops (the file is deleted) or when its process dies: the
//! kernel drops the `flock` with the process, and the next `gc` finds the file unlocked and
//! deletes it. No clock or process id is trusted.
//!
//! A lease is written while its taker holds the data lock shared, so a running `gc` never
//! sees a lease half made: it either ran before (and the taker then finds the version as gc
//! left it) or runs after (and keeps the version).

use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, IoResultExt, Result};
use crate::id::ObjectId;
use crate::store::Store;

/// Largest lease file read (bytes): a lease names a few versions.
const MAX_LEASE_LEN: u64 = 1024 * 1024;

/// What a lease file holds (JSON).
#[derive(serde::Serialize, serde::Deserialize)]
struct LeaseRecord {
    /// The leased versions, as hex ids.
    versions: Vec<ObjectId>,
    /// The holder's process id, for people reading the file (never trusted).
    pid: u32,
}

/// A held lease on some versions; released when dropped. `Send + Sync`.
#[derive(Debug)]
pub struct Lease {
    path: PathBuf,
    /// Holds the exclusive `flock` that says the lease is alive.
    _file: File,
    versions: Vec<ObjectId>,
}

/// The directory of lease files in the store `root`.
fn leases_dir(root: &Path) -> PathBuf {
    root.join("leases")
}

impl Lease {
    /// Takes a lease on `versions` of `store`. Waits while a `gc` runs (it holds the data
    /// lock exclusive), then returns at once.
    ///
    /// # Errors
    /// [`Error::Io`] when the lease file cannot be written.
    pub fn take(store: &Store, versions: &[ObjectId]) -> Result<Lease> {
        let _data_lock = store.lock_data_shared()?;
        let dir = leases_dir(store.root());
        fs::create_dir_all(&dir).at(&dir)?;
        let (mut file, path) = tempfile::Builder::new()
            .prefix("lease-")
            .suffix(".json")
            .tempfile_in(&dir)
            .at(&dir)?
            .keep()
            .map_err(|e| Error::Io {
                path: e.file.path().to_path_buf(),
                source: e.error,
            })?;
        let record = LeaseRecord {
            versions: versions.to_vec(),
            pid: std::process::id(),
        };
        let written = file.try_lock().map_err(|e| match e {
            std::fs::TryLockError::WouldBlock => {
                std::io::Error::from(std::io::ErrorKind::WouldBlock)
            }
            std::fs::TryLockError::Error(e) => e,
        });
        let written = written.and_then(|()| {
            file.write_all(&serde_json::to_vec(&record).expect("a lease serializes"))
        });
        if let Err(source) = written {
            let _ = fs::remove_file(&path);
            return Err(Error::Io { path, source });
        }
        Ok(Lease {
            path,
            _file: file,
            versions: versions.to_vec(),
        })
    }

    /// The leased versions.
    pub fn versions(&self) -> &[ObjectId] {
        &self.versions
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // Deleted before the lock drops with the file: a gc that opens it first sees it
        // locked (kept), one that comes after finds no file.
        let _ = fs::remove_file(&self.path);
    }
}

/// The versions leased by live readers of the store at `root`. Deletes the files of leases
/// whose holder is gone. Call it while holding the data lock exclusive (as `gc` does), so
/// no lease is being written.
///
/// # Errors
/// [`Error::Io`]; [`Error::Corrupt`] for a lease file a live process holds that is not a
/// lease (gc then refuses to run rather than guess what it protects).
pub fn leased_versions(root: &Path) -> Result<Vec<ObjectId>> {
    let dir = leases_dir(root);
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).at(&dir),
    };
    let mut versions = Vec::new();
    for entry in entries {
        let path = entry.at(&dir)?.path();
        // Only a regular file is a lease (`Lease::take` writes nothing else): a FIFO, device,
        // directory or symlink here protects nothing, and opening it must not hang gc, which
        // holds the data lock exclusive meanwhile. It is left alone.
        let mut file = match crate::pack::open_listed_file(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e)
                if e.kind() == std::io::ErrorKind::InvalidInput
                    || e.raw_os_error() == Some(nix::libc::ELOOP) =>
            {
                continue;
            }
            Err(e) => return Err(e).at(&path),
        };
        match file.try_lock_shared() {
            Ok(()) => {
                // No holder: its process ended without releasing it.
                drop(file);
                match fs::remove_file(&path) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(e).at(&path);
                    }
                    _ => continue,
                }
            }
            Err(std::fs::TryLockError::WouldBlock) => {}
            Err(std::fs::TryLockError::Error(e)) => return Err(e).at(&path),
        }
        let mut bytes = Vec::new();
        (&mut file)
            .take(MAX_LEASE_LEN + 1)
            .read_to_end(&mut bytes)
            .at(&path)?;
        let record: LeaseRecord = (bytes.len() as u64 <= MAX_LEASE_LEN)
            .then(|| serde_json::from_slice(&bytes).ok())
            .flatten()
            .ok_or_else(|| {
                Error::corrupt(
                    path.display().to_string(),
                    "a lease file held by a running process is not a lease",
                )
            })?;
        versions.extend(record.versions);
    }
    versions.sort();
    versions.dedup();
    Ok(versions)
}
