//! Where dsv's data comes from and goes to outside the store: remotes (S3, Azure Blob,
//! Google Cloud Storage, a directory; through `object_store`) and import sources (local
//! paths, `https://` URLs, cloud URLs, tar and zip archives).
//!
//! Depends on `dsv-format` and `dsv-store`, whose modules it re-exports. The layers are listed
//! in docs/architecture.md.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub use dsv_store::{
    Error, ErrorKind, ObjectId, Result, Revision, Store, beneath, catalog, chunk, config, error,
    id, ignore_file, interrupt, lease, object, outboard, pack, parallel, progress, redact, reflog,
    remote_url, revision, store, store_file, tree, walk, workspace,
};

pub mod archive;
pub mod failure;
pub mod remote;
pub mod runtime;
pub mod source;
pub mod stall;
