//! The top tier of the operations: those composed of operations of different concerns,
//! which no other operation names. Checking out a revision wherever its data is
//! ([`checkout_from_anywhere`]: a remote's ref is made local first, a local version's
//! missing data fetched from the store's remotes) and the versions a lock file pins
//! ([`checkout_lock`]).
//!
//! The tiers below, each naming only those below it: mechanisms (`disk`, `ingest`,
//! `history`, `following`, `crate::transfer`), then the operations (`status`, `commit`,
//! `checkout`, `lock_file`, `audit`, `rebase` with its workspace following, the `sync`
//! operations), then this module. `scripts/module-graph` shows the file graph;
//! `architecture_docs::no_crate_has_a_lateral_circle_among_its_files` holds it.

use std::path::{Path, PathBuf};

use super::checkout::{self, CheckoutOptions, CheckoutReport};
use super::lock_file;
use super::sync::{PullReport, prepare_remote_revision, resolve_remote};
use crate::error::Result;
use crate::progress::Progress;
use crate::revision::Revision;
use crate::store::Store;
use crate::transfer::RemoteRevision;

/// What [`checkout_from_anywhere`] did: the checkout, and what it fetched first.
#[derive(Debug, serde::Serialize)]
pub struct CheckoutOutcome {
    /// The checkout.
    #[serde(flatten)]
    pub checkout: CheckoutReport,
    /// For `REMOTE/NAME[@REV]`: the ref cache check and what was downloaded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote: Option<PullReport>,
    /// For a local revision in a store with remotes: the data this store lacked, fetched
    /// from the remotes in read order (`remotes`: which served, which failed); `None`
    /// (absent in JSON) without remotes, and for `REMOTE/NAME[@REV]` (see `remote`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transfer: Option<crate::transfer::Transfer>,
}

/// Checks out `revision`, wherever its data is: `REMOTE/NAME[@REV]` is made local first
/// (its ref checked, its metadata and data fetched), and a local revision whose data is
/// not all here (a clone, a `pull --include`, an evicted version) has what it lacks fetched
/// from the store's remotes. Then as [`checkout::checkout`]. `requests` is how many requests a
/// download keeps in flight.
///
/// # Errors
/// As [`checkout::checkout`], [`prepare_remote_revision`] and [`crate::transfer::fetch_missing`].
pub fn checkout_from_anywhere(
    store: &mut Store,
    revision: &str,
    dir: &Path,
    options: &CheckoutOptions,
    requests: usize,
    progress: &dyn Progress,
) -> Result<CheckoutOutcome> {
    let Some(target) = RemoteRevision::parse(revision)? else {
        let revision = Revision::parse(revision)?;
        let (checkout, transfer) =
            checkout::checkout_fetching(store, &revision, dir, options, requests, progress)?;
        return Ok(CheckoutOutcome {
            checkout,
            remote: None,
            transfer,
        });
    };
    let fetched = prepare_remote_revision(store, &target, None, requests, progress)?;
    let exact = Revision {
        dataset: fetched.dataset.clone(),
        base: fetched.version.to_hex(),
        ancestors: 0,
    };
    Ok(CheckoutOutcome {
        checkout: checkout::checkout(store, &exact, dir, options, progress)?,
        remote: Some(fetched),
        transfer: None,
    })
}

/// Plans a checkout of `revision` into `dir` ([`checkout::plan_checkout`]) and changes
/// nothing, whatever the revision names: `REMOTE/NAME[@REV]` is resolved against the remote's
/// refs as this store last recorded them (no request is sent: `dsv fetch REMOTE` brings them
/// up to date), and data this store lacks is not fetched (a checkout would fetch it; the plan
/// needs only the version's trees, which must be here).
///
/// # Errors
/// As [`checkout::plan_checkout`]; [`crate::Error::RemoteNotFound`] for an unknown remote;
/// [`crate::Error::RevisionNotFound`] for a ref this store has not recorded.
pub fn plan_from_anywhere(
    store: &Store,
    revision: &str,
    dir: &Path,
    options: &CheckoutOptions,
    progress: &dyn Progress,
) -> Result<checkout::CheckoutPlan> {
    let revision = match RemoteRevision::parse(revision)? {
        Some(target) => {
            let record = store.catalog().remote(&target.remote)?;
            let version = resolve_remote(store, &record, &target.revision)?;
            Revision {
                dataset: target.revision.dataset.clone(),
                base: version.to_hex(),
                ancestors: 0,
            }
        }
        None => Revision::parse(revision)?,
    };
    checkout::plan_checkout(store, &revision, dir, options, progress)
}

/// What [`checkout_lock`] did: one checkout per dataset the lock file pins.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LockCheckoutReport {
    /// The lock file.
    pub lock: PathBuf,
    /// The checkouts, in the lock file's order.
    pub datasets: Vec<CheckoutReport>,
}

/// Checks out exactly the versions the lock file at `lock_path` pins (see
/// [`lock_file::read_lock`]), each dataset into `dir/NAME`. Every pinned version is
/// resolved (its metadata fetched from a remote the lock names, if need be) before anything
/// is written; data this store lacks is fetched from its remotes.
///
/// # Errors
/// As [`lock_file::read_lock`], [`lock_file::resolve_lock`], [`checkout::checkout`] and
/// [`crate::transfer::fetch_missing`].
pub fn checkout_lock(
    store: &mut Store,
    lock_path: &Path,
    dir: &Path,
    options: &CheckoutOptions,
    requests: usize,
    progress: &dyn Progress,
) -> Result<LockCheckoutReport> {
    let lock = lock_file::read_lock(lock_path)?;
    let pinned = lock_file::resolve_lock(store, lock_path, &lock, requests, progress)?;
    let mut datasets = Vec::new();
    for (dataset, version) in &pinned {
        let exact = Revision {
            dataset: dataset.clone(),
            base: version.to_hex(),
            ancestors: 0,
        };
        checkout::fetch_what_checkout_needs(store, version, &exact, options, requests, progress)?;
        datasets.push(checkout::checkout(
            store,
            &exact,
            &dir.join(dataset),
            options,
            progress,
        )?);
    }
    Ok(LockCheckoutReport {
        lock: lock_path.to_path_buf(),
        datasets,
    })
}
