//! The dsv store on disk: the SQLite catalog, packs and their indexes, trees, the walk of a
//! directory and its stat cache, workspaces, the append-only ref log, leases held by readers,
//! and the store's settings. [`Store`] is the entry point.
//!
//! Depends only on `dsv-format`, whose modules it re-exports so that `crate::id` and friends
//! keep one path in every crate above. The layers are listed in docs/architecture.md.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub use dsv_format::{
    Error, ErrorKind, ObjectId, Result, chunk, error, id, interrupt, object, outboard, pack,
    parallel, progress, redact, store_file,
};

pub mod beneath;
pub mod catalog;
pub mod config;
pub mod ignore_file;
pub mod lease;
pub mod names;
pub mod reflog;
pub mod remote_url;
pub mod revision;
pub mod stat;
pub mod store;
pub mod tree;
pub mod walk;
pub mod workspace;

pub use revision::Revision;
pub use store::Store;
