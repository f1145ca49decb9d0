//! Falling back from one remote to the next while reading ("Fallback" in [`super`]): the
//! remotes in read order, those that failed set aside, and the error when none served.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::catalog::RemoteRecord;
use crate::error::RemotesFailed;
use crate::error::{Error, Result};

/// How long the read engine asks a remote that failed last (after every other), before it
/// takes its place in the read order again: a remote that is down is not waited on by every
/// read, and one that came back is used again within this long.
pub const FAILED_REMOTE_LAST_FOR: Duration = Duration::from_secs(60);

/// Remotes that failed recently, shared by the reads of one process that last beyond one
/// operation (the read engine behind `mount`, `cat` and the Python package): each is asked
/// after every other remote for [`FAILED_REMOTE_LAST_FOR`] after it failed.
#[derive(Debug, Default)]
pub struct RemoteHealth {
    failed: Mutex<HashMap<String, Instant>>,
}

impl RemoteHealth {
    /// Whether `name` failed within [`FAILED_REMOTE_LAST_FOR`].
    fn failed_recently(&self, name: &str) -> bool {
        let failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        failed
            .get(name)
            .is_some_and(|at| at.elapsed() < FAILED_REMOTE_LAST_FOR)
    }

    fn set_failed(&self, name: &str, failed: bool) {
        let mut map = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        if failed {
            map.insert(name.to_string(), Instant::now());
        } else {
            map.remove(name);
        }
    }
}

/// Whether `error`, met while asking one remote for data, is that remote's failure (the next
/// remote is asked instead) rather than this store's or the user's (which ends the read): a
/// request that failed after its retries (unreachable, refused credentials, a missing
/// bucket), an answer that is damaged (nothing of it was kept), or a remote that cannot be
/// opened (an option or AWS profile this build refuses).
pub fn is_remote_failure(error: &Error) -> bool {
    matches!(
        error,
        Error::Remote { .. }
            | Error::Corrupt { .. }
            | Error::Http { .. }
            | Error::InvalidRemote { .. }
            | Error::AwsProfileNotFound { .. }
            | Error::AwsProfileFile { .. }
            | Error::AwsProfileUnsupported { .. }
            | Error::RemotesFailed(_)
    )
}

/// One read's way through the remotes: which were asked, which failed and with what. A
/// remote that failed is not asked again by the same read; with a [`RemoteHealth`] it is
/// also asked last by later reads for a while.
pub struct Attempts<'a> {
    health: Option<&'a RemoteHealth>,
    /// Remotes asked, in the order asked, with their failure when they failed.
    tried: Vec<(String, Option<Error>)>,
}

impl<'a> Attempts<'a> {
    /// Attempts of one operation (checkout, pull, fetch of files): failures are remembered
    /// until it ends.
    pub fn new() -> Attempts<'static> {
        Attempts {
            health: None,
            tried: Vec::new(),
        }
    }

    /// Attempts of one read that shares `health` with the other reads of its engine.
    pub fn sharing(health: &'a RemoteHealth) -> Attempts<'a> {
        Attempts {
            health: Some(health),
            tried: Vec::new(),
        }
    }

    /// `records` (in read order) to ask: without those that failed in this read, and with
    /// those that failed recently in another read of the same engine moved last.
    pub fn order(&self, records: Vec<RemoteRecord>) -> Vec<RemoteRecord> {
        let (mut later, mut now) = (Vec::new(), Vec::new());
        for record in records {
            if self.failed(&record.name) {
                continue;
            }
            if self
                .health
                .is_some_and(|health| health.failed_recently(&record.name))
            {
                later.push(record);
            } else {
                now.push(record);
            }
        }
        now.append(&mut later);
        now
    }

    /// Whether remote `name` failed in this read.
    pub fn failed(&self, name: &str) -> bool {
        self.tried
            .iter()
            .any(|(tried, error)| tried == name && error.is_some())
    }

    /// Runs `step`, which asks remote `name` for data. A remote failure
    /// ([`is_remote_failure`]) is remembered and gives `Ok(None)`: the caller goes on to the
    /// next remote. Any other error is returned as it is.
    ///
    /// # Errors
    /// Those of `step` that are not the remote's failure.
    pub fn attempt<T>(
        &mut self,
        name: &str,
        step: impl FnOnce() -> Result<T>,
    ) -> Result<Option<T>> {
        self.attempt_where(name, step, is_remote_failure)
    }

    /// Opens remote `name` with `open`: as [`Attempts::attempt`], but any error but an
    /// interruption is the remote's failure (opening builds its client and, for `file://`,
    /// makes its directory: a path that is no directory is that remote's problem).
    ///
    /// # Errors
    /// [`Error::Interrupted`].
    pub fn open<T>(&mut self, name: &str, open: impl FnOnce() -> Result<T>) -> Result<Option<T>> {
        self.attempt_where(name, open, |e| !matches!(e, Error::Interrupted))
    }

    fn attempt_where<T>(
        &mut self,
        name: &str,
        step: impl FnOnce() -> Result<T>,
        is_failure: fn(&Error) -> bool,
    ) -> Result<Option<T>> {
        let outcome = step();
        let failed = matches!(&outcome, Err(e) if is_failure(e));
        if let Some(health) = self.health {
            health.set_failed(name, failed);
        }
        match outcome {
            Ok(value) => {
                if !self.tried.iter().any(|(tried, _)| tried == name) {
                    self.tried.push((name.to_string(), None));
                }
                Ok(Some(value))
            }
            Err(e) if failed => {
                match self.tried.iter_mut().find(|(tried, _)| tried == name) {
                    Some(entry) => entry.1 = Some(e),
                    None => self.tried.push((name.to_string(), Some(e))),
                }
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// The failures so far, in the order met: remote name and message (for reports).
    pub fn failures(&self) -> Vec<(String, String)> {
        self.tried
            .iter()
            .filter_map(|(name, error)| error.as_ref().map(|e| (name.clone(), e.to_string())))
            .collect()
    }

    /// The error of a read that still lacks data after asking every remote: `missing` (the
    /// data's [`Error::MissingObject`]) when no remote failed, else the first failure with
    /// every remote tried ([`Error::RemotesFailed`]; a single remote's failure alone is
    /// returned as it is).
    /// The failures are handed over: a second call gives `missing` back.
    pub fn missing(&mut self, missing: Error) -> Error {
        let Some(first) = self.tried.iter().position(|(_, error)| error.is_some()) else {
            return missing;
        };
        let mut entries = std::mem::take(&mut self.tried);
        if entries.len() == 1 {
            return entries.pop().and_then(|(_, e)| e).unwrap_or(missing);
        }
        let tried = entries
            .iter()
            .map(|(name, error)| (name.clone(), error.as_ref().map(ToString::to_string)))
            .collect();
        let first = entries.swap_remove(first).1.unwrap_or(missing);
        Error::RemotesFailed(Box::new(RemotesFailed { first, tried }))
    }
}
