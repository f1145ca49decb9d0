//! The remotes a store knows (`dsv remote add|rm|ls|order`), their read order, and which one
//! a command uses when none is named. Nothing here contacts a remote but [`check_remote`]
//! (`dsv remote add`'s check that the bucket exists).
//!
//! # Read order
//!
//! Every read that fetches data this store lacks (checkout, pull, the read engine behind
//! `cat`, `mount` and the Python package) asks the remotes in their read order
//! ([`crate::catalog::RemoteRecord::position`], 1 first) and falls back to the next on a miss
//! or a failure (see "Fallback" in `crate::transfer`). A remote added goes last
//! ([`add_remote`]) or first ([`add_remote_placed`] with `first`); [`order_remotes`] moves
//! remotes to the front. The read order does not choose the remote that push, pull and fetch
//! talk to when none is named ([`default_remote`]): the nearest copy is often a read-only
//! mirror, and the remote a team pushes to stays the one its settings name.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::catalog::{RemoteRecord, RemoteRef};
use crate::error::{Error, Result};
use crate::remote::{self, Remote};
use crate::revision::check_name;
use crate::store::Store;

/// Adds a remote after checking its URL and options (nothing is contacted), last in the read
/// order. A local path is taken as the `file://` URL of its absolute path
/// ([`remote::url_from_path`]).
///
/// # Errors
/// [`Error::InvalidName`], [`Error::InvalidRemote`], [`Error::RemoteExists`].
pub fn add_remote(
    store: &mut Store,
    name: &str,
    url: &str,
    options: &BTreeMap<String, String>,
) -> Result<RemoteRecord> {
    add_remote_placed(store, name, url, options, false)
}

/// [`add_remote`], placing the remote first in the read order when `first` (in the same
/// transaction), else last.
///
/// # Errors
/// As [`add_remote`].
pub fn add_remote_placed(
    store: &mut Store,
    name: &str,
    url: &str,
    options: &BTreeMap<String, String>,
    first: bool,
) -> Result<RemoteRecord> {
    let record = checked_record(name, url, options)?;
    // Opening builds the backend client: a bad option is refused now, not at first push.
    Remote::open(&record)?;
    let writer = store.catalog_mut().writer()?;
    writer.add_remote(name, &record.url, options)?;
    if first {
        writer.set_remote_order(&[name.to_string()])?;
    }
    writer.commit()?;
    store.catalog().remote(name)
}

/// Checks, before `dsv remote add`, that a remote at `url` answers and its bucket (or
/// container) exists: one listing of its `refs/` (a page per 1,000 refs), read and
/// discarded. A `file://` remote (or local path) is not contacted: its directory is created
/// when the remote is added (a missing one is no typo to catch: the first push fills it).
/// The name, URL and options are checked first, as [`add_remote`] does (a name `store`
/// already has is refused before anything is contacted).
///
/// # Errors
/// [`Error::InvalidName`], [`Error::RemoteExists`], [`Error::InvalidRemote`];
/// [`Error::Remote`] (action "check
/// before adding it: list refs/") when the listing fails: a missing bucket
/// (of class [`crate::error::RemoteClass::MissingBucket`]), refused or absent credentials,
/// an unreachable endpoint.
pub fn check_remote(
    store: &Store,
    name: &str,
    url: &str,
    options: &BTreeMap<String, String>,
) -> Result<()> {
    check_name("remote", name)?;
    if store.catalog().remotes()?.iter().any(|r| r.name == name) {
        return Err(Error::RemoteExists {
            name: name.to_string(),
        });
    }
    let record = checked_record(name, url, options)?;
    if record.url.starts_with("file://") {
        return Ok(());
    }
    match Remote::open(&record)?.list_refs() {
        Ok(_) => Ok(()),
        Err(Error::Remote { remote, source, .. }) => Err(Error::Remote {
            remote,
            action: format!("{}: list refs/", crate::error::ADD_CHECK_ACTION),
            source,
        }),
        Err(other) => Err(other),
    }
}

/// The record of a remote to add, after the checks [`add_remote`] and [`check_remote`] share:
/// the name's rules, the URL (a local path made a `file://` URL) and the options (no
/// credential, no unknown key). Its `id` and `position` are 0 (not yet recorded).
///
/// # Errors
/// [`Error::InvalidName`], [`Error::InvalidRemote`].
fn checked_record(
    name: &str,
    url: &str,
    options: &BTreeMap<String, String>,
) -> Result<RemoteRecord> {
    check_name("remote", name)?;
    let url = remote::url_from_path(url);
    remote::check_url(&url)?;
    remote::check_options(options)?;
    Ok(RemoteRecord {
        id: 0,
        name: name.to_string(),
        url,
        options: options.clone(),
        position: 0,
    })
}

/// Puts remotes `first` at the front of the read order, in the order given; the others keep
/// their order after them. Returns every remote in the new order. Nothing is contacted.
///
/// # Errors
/// [`Error::RemoteNotFound`] for a name of no remote (then nothing changes). A name given
/// twice counts once, at its first place.
pub fn order_remotes(store: &mut Store, first: &[String]) -> Result<Vec<RemoteRecord>> {
    let writer = store.catalog_mut().writer()?;
    writer.set_remote_order(first)?;
    writer.commit()?;
    store.catalog().remotes()
}

/// Removes a remote and what this store recorded about it; its data stays where it is.
///
/// # Errors
/// [`Error::RemoteNotFound`].
pub fn remove_remote(store: &mut Store, name: &str) -> Result<()> {
    let writer = store.catalog_mut().writer()?;
    writer.remove_remote(name)?;
    writer.commit()
}

/// The remote a command uses: `name` when one is given, else the store's setting
/// `remote.default` (`.dsv/config.toml`), else the store's only remote, else the one called
/// `origin`. A given or configured name is returned as it is (an unknown one fails where it
/// is used, with [`Error::RemoteNotFound`]).
///
/// # Errors
/// [`Error::NoRemote`] when the store has no remote; [`Error::AmbiguousRemote`] when it has
/// several and none is called `origin`; [`Error::InvalidConfig`] for a settings file that
/// does not parse.
pub fn default_remote(store: &Store, name: Option<&str>) -> Result<String> {
    if let Some(name) = name {
        return Ok(name.to_string());
    }
    if let Some(name) = store.config()?.remote.default {
        return Ok(name);
    }
    let remotes = store.catalog().remotes()?;
    match remotes.as_slice() {
        [only] => Ok(only.name.clone()),
        _ if remotes.iter().any(|r| r.name == "origin") => Ok("origin".into()),
        [] => Err(Error::NoRemote),
        _ => Err(Error::AmbiguousRemote {
            names: remotes.into_iter().map(|r| r.name).collect(),
        }),
    }
}

/// A configured remote with its refs as last fetched or pushed (`dsv remote ls`). The
/// fields are in name order, as the JSON of `remote ls` has always listed them.
#[derive(Debug, Clone, Serialize)]
pub struct RemoteListing {
    /// Its name (`origin`).
    pub name: String,
    /// Non-secret backend settings.
    pub options: BTreeMap<String, String>,
    /// Its place in the read order, 1 first.
    pub position: u32,
    /// Its refs as this store last saw them (nothing before the first fetch or push).
    pub refs: Vec<RemoteRef>,
    /// Its URL.
    pub url: String,
}

/// Every configured remote, in read order, with its refs as last fetched or pushed. Nothing
/// is contacted.
///
/// # Errors
/// Catalog errors.
pub fn list_remotes(store: &Store) -> Result<Vec<RemoteListing>> {
    let mut listed = Vec::new();
    for record in store.catalog().remotes()? {
        let refs = store.catalog().remote_refs(record.id)?;
        listed.push(RemoteListing {
            name: record.name,
            options: record.options,
            position: record.position,
            refs,
            url: record.url,
        });
    }
    Ok(listed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_remote_is_the_named_one_else_the_only_one_else_origin() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::init(dir.path()).unwrap();
        assert!(matches!(default_remote(&store, None), Err(Error::NoRemote)));
        assert_eq!(default_remote(&store, Some("x")).unwrap(), "x");
        let url = |name: &str| format!("file://{}", dir.path().join(name).display());
        let none = BTreeMap::new();
        add_remote(&mut store, "backup", &url("backup"), &none).unwrap();
        assert_eq!(default_remote(&store, None).unwrap(), "backup");
        add_remote(&mut store, "mirror", &url("mirror"), &none).unwrap();
        match default_remote(&store, None) {
            Err(Error::AmbiguousRemote { names }) => assert_eq!(names, ["backup", "mirror"]),
            other => panic!("{other:?}"),
        }
        add_remote(&mut store, "origin", &url("origin"), &none).unwrap();
        assert_eq!(default_remote(&store, None).unwrap(), "origin");
        // The store's setting beats origin; a name given beats the setting.
        let mut config = store.config().unwrap();
        config
            .set(crate::config::Setting::DefaultRemote, "mirror")
            .unwrap();
        config.save(store.root()).unwrap();
        assert_eq!(default_remote(&store, None).unwrap(), "mirror");
        assert_eq!(default_remote(&store, Some("backup")).unwrap(), "backup");
        let listed = list_remotes(&store).unwrap();
        let names: Vec<_> = listed.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["backup", "mirror", "origin"]);
        assert!(listed.iter().all(|r| r.refs.is_empty()));
        // The read order is not the default: origin stays the default when read last or
        // first, and the setting still wins.
        order_remotes(&mut store, &["origin".into()]).unwrap();
        let listed = list_remotes(&store).unwrap();
        let names: Vec<_> = listed
            .iter()
            .map(|r| (r.name.as_str(), r.position))
            .collect();
        assert_eq!(names, [("origin", 1), ("backup", 2), ("mirror", 3)]);
        assert_eq!(default_remote(&store, None).unwrap(), "mirror");
        let near = add_remote_placed(&mut store, "near", &url("near"), &none, true).unwrap();
        assert_eq!(near.position, 1);
        assert!(matches!(
            order_remotes(&mut store, &["gone".into()]),
            Err(Error::RemoteNotFound { .. })
        ));
    }
}
