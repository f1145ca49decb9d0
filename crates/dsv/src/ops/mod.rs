//! Operations: the use cases, each composing the stages (walk, chunk, pack, catalog).
//! Each takes the [`crate::Store`], an options struct and a [`crate::progress::Progress`],
//! and returns a serializable report; none prints.

pub mod audit;
pub mod cache;
pub mod checkout;
pub mod commit;
pub mod gc;
pub mod import;
pub mod ingest;
pub mod inspect;
pub mod rebase;
pub mod repair;
pub mod status;
pub mod sync;
pub mod verify;
pub mod workspace;
