//! The record of a workspace's move to its dataset's new head (`.dsv/following/`), written
//! by rebase and pull before the head moves and the workspace's files change, and forgotten
//! once the workspace's record names the new head ([`Following`]). Status explains a move
//! left unfinished, commit refuses until it is finished, checkout forgets it; the move itself
//! is rebase's ([`super::rebase::resume_following`]).

use std::path::PathBuf;

use serde::Serialize;

use super::history::on_line;
use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::store::Store;

/// A workspace's move to a dataset's new head, recorded (in `.dsv/following/`) before the
/// head moves and the workspace's files change, and forgotten once the workspace's record
/// names the new head: a process killed in between (`kill -9` during `dsv rebase` or
/// `dsv pull`) leaves the files part-way to `to` while the workspace's record still names
/// `from`. [`super::rebase::resume_following`] finishes the move; `status` explains it; `commit` refuses
/// until then (its parent would be `from`, forking off the rebased line).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Following {
    /// The workspace (its canonical path, the catalog's key).
    pub workspace: String,
    /// The dataset.
    pub dataset: String,
    /// The version the workspace's record names (the head before).
    pub from: ObjectId,
    /// The version it is moving to (the head after).
    pub to: ObjectId,
}

/// The most bytes a record of [`Following`] may hold.
const FOLLOWING_MAX_BYTES: u64 = 64 * 1024;

/// Where the record of workspace `key`'s move is kept.
pub(crate) fn following_path(store: &Store, key: &str) -> PathBuf {
    let name = ObjectId::of(key.as_bytes()).to_hex();
    store
        .root()
        .join("following")
        .join(format!("{}.json", &name[..32]))
}

/// Records `following` durably (written beside, synced, renamed into place).
pub(crate) fn record_following(store: &Store, following: &Following) -> Result<()> {
    use crate::error::IoResultExt;
    use std::io::Write;
    let path = following_path(store, &following.workspace);
    let dir = path.parent().expect("a file in a directory");
    std::fs::create_dir_all(dir).at(dir)?;
    // A temporary name that `Store::remove_stale_temp_packs` removes once its process is gone.
    let temp = store.temp_dir().join(format!(
        "{}{}-{}",
        crate::walk::TEMP_PREFIX,
        std::process::id(),
        crate::workspace::now_ns().rem_euclid(1_000_000_000)
    ));
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)
            .at(&temp)?;
        let bytes = serde_json::to_vec(following).map_err(|e| Error::Io {
            path: temp.clone(),
            source: std::io::Error::other(e),
        })?;
        file.write_all(&bytes).at(&temp)?;
        file.sync_all().at(&temp)?;
        std::fs::rename(&temp, &path).at(&path)?;
        std::fs::File::open(dir).and_then(|d| d.sync_all()).at(dir)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}

/// Forgets workspace `key`'s recorded move (nothing when there is none): once its move
/// finished, or when a checkout recorded another version there (a deliberate move, also
/// back to `from`).
pub(crate) fn forget_following(store: &Store, key: &str) {
    let _ = std::fs::remove_file(following_path(store, key));
}

/// The interrupted move of the workspace `key`, when one is recorded and counts: the
/// workspace's record names `from` of the dataset, and `to` is recorded, not removed, and
/// on the head's line (the dataset's head or an ancestor of it: a version the head was
/// reset away from is abandoned, and moving there would leave the workspace off the line).
/// A record that does not count (the move finished, never began because the head never
/// moved, was abandoned, or the workspace was checked out or committed since) is ignored,
/// never deleted here: a rebase may be between recording it and moving the head. A record
/// that cannot be read (not a regular file, too long, not JSON) counts as none.
///
/// # Errors
/// [`Error::Catalog`].
pub fn interrupted_following(store: &Store, key: &str) -> Result<Option<Following>> {
    let path = following_path(store, key);
    let Ok(bytes) = crate::store_file::read_to_end(&path, FOLLOWING_MAX_BYTES) else {
        return Ok(None);
    };
    if bytes.len() as u64 > FOLLOWING_MAX_BYTES {
        return Ok(None);
    }
    let Ok(following) = serde_json::from_slice::<Following>(&bytes) else {
        return Ok(None);
    };
    let catalog = store.catalog();
    let workspace = catalog.workspace(key)?;
    let counts = following.workspace == key
        && workspace.is_some_and(|w| {
            w.exists
                && w.dataset.as_deref() == Some(following.dataset.as_str())
                && w.version == Some(following.from)
        })
        && catalog.version(&following.to)?.is_some()
        && catalog.removed_at(&following.to)?.is_none()
        && match catalog.head_or_none(&following.dataset)? {
            Some(head) => on_line(catalog, &head, &following.to)?,
            None => false,
        };
    Ok(counts.then_some(following))
}
