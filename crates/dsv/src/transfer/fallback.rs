//! Falling back from one remote to the next while reading ("Fallback" in [`super`]): the
//! remotes in read order, those that failed set aside, the error when none served, and
//! the fallbacks a front end tells the user about ([`take_fallbacks`]).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::catalog::RemoteRecord;
use crate::error::RemotesFailed;
use crate::error::{Error, Result};

/// How long every read of the process asks a remote that failed last (after every other),
/// before it takes its place in the read order again: a remote that is down (or stalled) is
/// not waited on by every read, and one that came back is used again within this long.
/// Each further failure of the same remote doubles the time, up to
/// [`FAILED_REMOTE_LAST_AT_MOST`]; a success resets it.
pub(crate) const FAILED_REMOTE_LAST_FOR: Duration = Duration::from_secs(60);

/// The longest a remote that keeps failing is asked last: 30 minutes.
pub(crate) const FAILED_REMOTE_LAST_AT_MOST: Duration = Duration::from_secs(30 * 60);

/// One fallback: a remote failed and another served instead ([`take_fallbacks`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Fallback {
    /// The remote that failed.
    pub failed: String,
    /// Its error, in words.
    pub error: String,
    /// The remote that served next (asked after it, and answered).
    pub served: String,
}

/// Remotes that failed recently, shared by every read of the process (checkout, pull,
/// fetch of files, and the read engine behind `mount`, `cat` and the Python package),
/// keyed by name and URL: each is asked after every other remote for a while after it
/// failed ([`FAILED_REMOTE_LAST_FOR`]). Also the fallbacks not yet told ([`take_fallbacks`]).
/// A handle: every one ([`RemoteHealth::process`]) is the process's.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RemoteHealth {
    state: &'static HealthState,
}

/// What [`RemoteHealth`] remembers, once per process.
#[derive(Debug, Default)]
struct HealthState {
    /// Remote key: when it last failed, and how long it is asked last from then.
    failed: Mutex<HashMap<String, (Instant, Duration)>>,
    /// Fallbacks met and not yet taken, and the failed remotes already told once.
    fallbacks: Mutex<(Vec<Fallback>, HashSet<String>)>,
}

static PROCESS_HEALTH: std::sync::LazyLock<HealthState> =
    std::sync::LazyLock::new(HealthState::default);

impl RemoteHealth {
    /// The health every read of this process shares.
    pub fn process() -> RemoteHealth {
        RemoteHealth {
            state: &PROCESS_HEALTH,
        }
    }

    /// Whether `key` failed lately (within its time to be asked last).
    fn failed_recently(&self, key: &str) -> bool {
        let failed = self.state.failed.lock().unwrap_or_else(|e| e.into_inner());
        failed
            .get(key)
            .is_some_and(|(at, last_for)| at.elapsed() < *last_for)
    }

    fn set_failed(&self, key: &str, failed: bool) {
        let mut map = self.state.failed.lock().unwrap_or_else(|e| e.into_inner());
        if failed {
            let last_for = match map.get(key) {
                Some((_, before)) => (*before * 2).min(FAILED_REMOTE_LAST_AT_MOST),
                None => FAILED_REMOTE_LAST_FOR,
            };
            map.insert(key.to_string(), (Instant::now(), last_for));
        } else {
            map.remove(key);
        }
    }

    /// Records that `failed` (with `error`) was passed over and `served` answered, once
    /// per failed remote and process.
    fn fell_back(&self, failed: &str, error: &str, served: &str) {
        let mut fallbacks = self
            .state
            .fallbacks
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if fallbacks.1.insert(failed.to_string()) {
            fallbacks.0.push(Fallback {
                failed: failed.to_string(),
                error: error.to_string(),
                served: served.to_string(),
            });
        }
    }
}

/// The fallbacks met by this process's reads since the last call, in the order met: each
/// remote that failed (stalled, unreachable, refused) while another served instead, told
/// once per remote and process. The library never prints: a front end calls this after a
/// command (or a read) and warns the user, naming both remotes (the CLI on stderr, the
/// Python package with `warnings.warn`).
pub fn take_fallbacks() -> Vec<Fallback> {
    let mut fallbacks = PROCESS_HEALTH
        .fallbacks
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    std::mem::take(&mut fallbacks.0)
}

/// Whether `error`, met while asking one remote for data, is that remote's failure (the next
/// remote is asked instead) rather than this store's or the user's (which ends the read): a
/// request that failed after its retries (unreachable, refused credentials, a missing
/// bucket), an answer that is damaged (nothing of it was kept), or a remote that cannot be
/// opened (an option or AWS profile this build refuses).
pub(crate) fn is_remote_failure(error: &Error) -> bool {
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

/// A remote's failure in words: the error's message and, when it has causes, the deepest
/// one (what the server or the network did: "stalled: 0 bytes of the answer arrived in
/// 5s ...", "Connection refused"), which the message alone does not say.
pub(crate) fn in_words(error: &Error) -> String {
    let message = error.to_string();
    let mut deepest: Option<&dyn std::error::Error> = None;
    let mut next = std::error::Error::source(error);
    while let Some(cause) = next {
        deepest = Some(cause);
        next = cause.source();
    }
    match deepest.map(ToString::to_string) {
        Some(cause) if !message.contains(&cause) => format!("{message}: {cause}"),
        _ => message,
    }
}

/// One read's way through the remotes: which were asked, which failed and with what. A
/// remote that failed is not asked again by the same read; through the process's
/// `RemoteHealth` it is also asked last by later reads for a while.
pub struct Attempts {
    health: RemoteHealth,
    /// Remotes asked, in the order asked, with their failure when they failed.
    tried: Vec<(String, Option<Error>)>,
    /// The health key (name and URL) of each remote [`Attempts::order`] was given.
    keys: HashMap<String, String>,
}

impl Default for Attempts {
    fn default() -> Self {
        Attempts::new()
    }
}

impl Attempts {
    /// Attempts of one operation (checkout, pull, fetch of files, one read of the read
    /// engine): failures are remembered until it ends, and in the process's
    /// `RemoteHealth`, shared with every other read.
    pub fn new() -> Attempts {
        Attempts {
            health: RemoteHealth::process(),
            tried: Vec::new(),
            keys: HashMap::new(),
        }
    }

    /// The health key of remote `name`: its name and URL (two stores of one process may
    /// both have an "origin").
    fn key(&self, name: &str) -> String {
        self.keys
            .get(name)
            .cloned()
            .unwrap_or_else(|| name.to_string())
    }

    /// `records` (in read order) to ask: without those that failed in this read, and with
    /// those that failed recently in another read of the same engine moved last.
    pub fn order(&mut self, records: Vec<RemoteRecord>) -> Vec<RemoteRecord> {
        let (mut later, mut now) = (Vec::new(), Vec::new());
        for record in records {
            let key = format!("{} {}", record.name, record.url);
            self.keys.insert(record.name.clone(), key.clone());
            if self.failed(&record.name) {
                continue;
            }
            if self.health.failed_recently(&key) {
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
    /// (`is_remote_failure`) is remembered and gives `Ok(None)`: the caller goes on to the
    /// next remote. Any other error is returned as it is. A step that moved data calls
    /// [`Attempts::served`] after it.
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

    /// Remote `name` served data (a step moved some): each remote that failed before it in
    /// this read is a fallback the front end tells of ([`take_fallbacks`]), naming `name`.
    /// A step that did not fail but moved nothing (the remote lacked the data) is no
    /// fallback to tell of.
    pub fn served(&self, name: &str) {
        for (tried, error) in &self.tried {
            if let Some(error) = error {
                self.health.fell_back(tried, &in_words(error), name);
            }
        }
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
        self.health.set_failed(&self.key(name), failed);
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
            .filter_map(|(name, error)| error.as_ref().map(|e| (name.clone(), in_words(e))))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remote_failing_again_is_asked_last_longer_and_told_once() {
        let health = RemoteHealth::process();
        // Keys of this test only: the state is the process's.
        let key = "unit-failing file:///nowhere";
        let last_for = |key: &str| {
            health
                .state
                .failed
                .lock()
                .unwrap()
                .get(key)
                .map(|(_, last_for)| *last_for)
        };
        health.set_failed(key, true);
        assert!(health.failed_recently(key));
        assert_eq!(last_for(key), Some(FAILED_REMOTE_LAST_FOR));
        health.set_failed(key, true);
        assert_eq!(last_for(key), Some(FAILED_REMOTE_LAST_FOR * 2));
        for _ in 0..20 {
            health.set_failed(key, true);
        }
        assert_eq!(last_for(key), Some(FAILED_REMOTE_LAST_AT_MOST));
        // A success puts it back in its place.
        health.set_failed(key, false);
        assert!(!health.failed_recently(key));

        health.fell_back("unit-near", "stalled", "unit-far");
        health.fell_back("unit-near", "stalled again", "unit-far");
        let told: Vec<Fallback> = take_fallbacks()
            .into_iter()
            .filter(|f| f.failed == "unit-near")
            .collect();
        assert_eq!(
            told,
            [Fallback {
                failed: "unit-near".into(),
                error: "stalled".into(),
                served: "unit-far".into(),
            }]
        );
    }
}
