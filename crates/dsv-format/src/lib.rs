//! The bottom layer of dsv: what every other crate names and nothing here depends on a store.
//!
//! - [`id`]: object ids (BLAKE3-256 of content; [`ObjectId`]);
//! - [`chunk`]: content-defined chunking (FastCDC, Xia et al., USENIX ATC 2016);
//! - [`object`]: the canonical encodings of trees, versions, file maps and provenance;
//! - [`outboard`]: BLAKE3 chaining values of a file's 64 KiB blocks, so any block is provable
//!   on its own;
//! - [`pack`]: pack files (zstd frames, a sealed index, a BLAKE3 name);
//! - [`error`]: the one error type of the library, its classification and its hints;
//! - [`interrupt`], [`parallel`], [`progress`]: cancellation, the worker pool and progress
//!   reporting, shared by every operation;
//! - [`redact`]: removing credentials from text before it reaches an error or a log.
//!
//! The crates above re-export these modules, so `dsv::id::ObjectId` names the same type as
//! `dsv_format::id::ObjectId`. The layers are listed in docs/architecture.md.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod chunk;
pub mod error;
pub mod id;
pub mod interrupt;
pub mod object;
pub mod outboard;
pub mod pack;
pub mod parallel;
pub mod progress;
pub mod redact;
pub mod store_file;

pub use error::{
    CatalogClass, CatalogFailure, Error, ErrorKind, ForeignError, RemoteClass, RemoteFailure,
    Result,
};
pub use id::ObjectId;
