//! dsv: a content-addressed dataset versioning store — `git commit` / `git checkout` for the
//! directories machine-learning jobs train on.
//!
//! Open a version and read any byte of any file, without a checkout (from many threads at
//! once; data only on a remote is fetched on first read and kept):
//!
//! ```
//! use dsv::{Store, progress::NoProgress, read::{ReadEngine, ReadOptions}};
//! use dsv::ops::commit::{commit, CommitOptions};
//! # fn main() -> dsv::Result<()> {
//! # let scratch = tempfile::tempdir().unwrap();
//! # let root = scratch.path();
//! # std::fs::create_dir_all(root.join("data/train")).unwrap();
//! # std::fs::write(root.join("data/train/0.csv"), "pixel,label\n0,7\n").unwrap();
//! // A store with one version of dataset "mnist", tagged v1.
//! let mut store = Store::init(root)?;
//! let mut options = CommitOptions::new("mnist");
//! options.tag = Some("v1".into());
//! commit(&mut store, &root.join("data"), &options, &NoProgress)?;
//!
//! // Open the version (any revision: "mnist", "mnist@v1", "mnist@<id prefix>", "mnist~1").
//! let engine = ReadEngine::new(store, ReadOptions::default());
//! let version = engine.version("mnist@v1")?;
//! assert_eq!(version.files()?.count(), 1);
//! let file = version.open("train/0.csv")?;
//! let mut header = [0u8; 11];
//! let n = file.read_at(0, &mut header)?; // any offset; O(log chunks) to find it
//! assert_eq!(&header[..n], b"pixel,label");
//! # Ok(()) }
//! ```
//!
//! Data flow of a commit (each stage is a module):
//!
//! ```text
//! walk ─► stat cache (workspace) ─► chunk (FastCDC) ─► id (BLAKE3) ─► pack (zstd frames)
//!      ─► tree (Merkle) ─► object (canonical encodings) ─► catalog (SQLite, one transaction)
//! ```
//! Checkout runs it backwards: revision ─► tree ─► catalog locations ─► pack frames ─►
//! verified bytes ─► temp file ─► rename. The operations live in [`ops`]; [`Store`] is the
//! entry point; [`read`] is the random-access read engine that `cat`, `export`, the FUSE
//! mount (crate `dsv-mount`) and the Python package stand on.
//!
//! The library never prints and reads no user environment: it reports through
//! [`progress::Progress`] and returns serializable reports; options are
//! `#[non_exhaustive]` structs built from `Default` or `new` (so a new field breaks no
//! caller). It works from any thread and inside a caller's tokio runtime (`dsv_remote::runtime`);
//! operations stop at a consistent point when their [`interrupt::CancelToken`] is
//! cancelled. The `dsv` binary (crate `dsv-cli`) draws and formats; it, the FUSE mount and
//! the Python package are front ends of this library.
//!
//! This crate is the top of the library's layers: `dsv-format` (ids, chunks, encodings,
//! packs, errors), `dsv-store` (catalog, trees, walk, workspaces, ref log, leases) and
//! `dsv-remote` (remotes, import sources) below it, each re-exported here under its module's
//! name (`dsv::id`, `dsv::catalog`, `dsv::remote`, ...). The layers are listed in
//! docs/architecture.md.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub use dsv_remote::{
    Error, ErrorKind, ObjectId, Result, Revision, Store, archive, catalog, config, error, id,
    interrupt, object, outboard, pack, parallel, progress, redact, remote, source, store, tree,
    walk, workspace,
};
// What this crate uses but no front end names: reachable here, not part of the face.
pub(crate) use dsv_remote::{beneath, chunk, lease, reflog, revision, runtime, store_file};

pub(crate) mod eviction;
pub(crate) mod key_set;
pub mod ops;
pub(crate) mod pack_sink;
pub mod read;
pub mod shard;
pub mod transfer;
