//! A revision on a remote, as `checkout`, `pull`, lock files and the front ends name it:
//! `REMOTE/NAME[@REV]` ([`RemoteRevision`]).

use crate::error::Result;
use crate::revision::{Revision, check_name};

/// A revision on a remote: `REMOTE/NAME[@REV]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteRevision {
    /// The remote's name.
    pub remote: String,
    /// The revision within it.
    pub revision: Revision,
}

impl RemoteRevision {
    /// Splits `REMOTE/NAME[@REV]` when `text` has a `/` before any `@` (dataset names have
    /// none); `None` for a local revision.
    ///
    /// # Errors
    /// As [`Revision::parse`]; [`crate::Error::InvalidName`] for a bad remote name.
    pub fn parse(text: &str) -> Result<Option<RemoteRevision>> {
        let before_at = text.split('@').next().unwrap_or(text);
        let Some((remote, _)) = before_at.split_once('/') else {
            return Ok(None);
        };
        check_name("remote", remote)?;
        let revision = Revision::parse(&text[remote.len() + 1..])?;
        Ok(Some(RemoteRevision {
            remote: remote.to_string(),
            revision,
        }))
    }
}
