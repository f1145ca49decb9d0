//! dsv: a content-addressed dataset versioning store — `git commit` / `git checkout` for the
//! directories machine-learning jobs train on.
//!
//! Data flow of a commit (each stage is a module):
//!
//! ```text
//! walk ─► stat cache (workspace) ─► chunk (FastCDC) ─► id (BLAKE3) ─► pack (zstd frames)
//!      ─► tree (Merkle) ─► object (canonical encodings) ─► catalog (SQLite, one transaction)
//! ```
//! Checkout runs it backwards: revision ─► tree ─► catalog locations ─► pack frames ─►
//! verified bytes ─► temp file ─► rename. The operations live in [`ops`]; [`Store`] is the
//! entry point.
//!
//! ```no_run
//! use dsv::{Store, progress::NoProgress, ops::commit::{commit, CommitOptions}};
//! # fn main() -> dsv::Result<()> {
//! let mut store = Store::init(std::path::Path::new("."))?;
//! let options = CommitOptions {
//!     dataset: "mnist".into(),
//!     message: "first import".into(),
//!     tag: Some("v1".into()),
//!     author: None,
//!     allow_empty: false,
//!     ingest: Default::default(),
//! };
//! let report = commit(&mut store, std::path::Path::new("data"), &options, &NoProgress)?;
//! println!("{}", report.version);
//! # Ok(()) }
//! ```
//!
//! The library never prints: it reports through [`progress::Progress`] and returns
//! serializable reports; the `dsv` binary draws and formats.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod archive;
pub mod catalog;
pub mod chunk;
pub mod error;
pub mod id;
pub mod interrupt;
pub mod lease;
pub mod mount;
pub mod object;
pub mod ops;
pub mod pack;
pub mod parallel;
pub mod progress;
pub mod read;
pub mod reflog;
pub mod remote;
pub mod revision;
pub mod runtime;
pub mod shard;
pub mod source;
pub mod store;
pub mod tree;
pub mod walk;
pub mod workspace;

pub use error::{Error, ErrorKind, Result};
pub use id::ObjectId;
pub use revision::Revision;
pub use store::Store;
