//! The remotes a store knows (`dsv remote add|remove|list`) and which one a command uses
//! when none is named. Nothing here contacts a remote.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::catalog::{RemoteRecord, RemoteRef};
use crate::error::{Error, Result};
use crate::remote::{self, Remote};
use crate::revision::check_name;
use crate::store::Store;

/// Adds a remote after checking its URL and options (nothing is contacted). A local path is
/// taken as the `file://` URL of its absolute path ([`remote::url_from_path`]).
///
/// # Errors
/// [`Error::InvalidName`], [`Error::InvalidRemote`], [`Error::RemoteExists`].
pub fn add_remote(
    store: &mut Store,
    name: &str,
    url: &str,
    options: &BTreeMap<String, String>,
) -> Result<RemoteRecord> {
    check_name("remote", name)?;
    let url = &remote::url_from_path(url);
    remote::check_url(url)?;
    remote::check_options(options)?;
    let record = RemoteRecord {
        id: 0,
        name: name.to_string(),
        url: url.to_string(),
        options: options.clone(),
    };
    // Opening builds the backend client: a bad option is refused now, not at first push.
    Remote::open(&record)?;
    let writer = store.catalog_mut().writer()?;
    writer.add_remote(name, url, options)?;
    writer.commit()?;
    store.catalog().remote(name)
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
    /// Its refs as this store last saw them (nothing before the first fetch or push).
    pub refs: Vec<RemoteRef>,
    /// Its URL.
    pub url: String,
}

/// Every configured remote, in name order, with its refs as last fetched or pushed. Nothing
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
    }
}
