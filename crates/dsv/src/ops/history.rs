//! A dataset's history as the catalog records it: walks along parent links (the common
//! ancestor of two versions, git's ahead/behind, whether a version is on a head's line).
//! Each walk keeps a set of the versions seen, so a cycle in a damaged catalog ends it,
//! never loops. Read-only; used by status, rebase and the record of a workspace's move.

use std::collections::HashSet;

use crate::catalog::Catalog;
use crate::error::Result;
use crate::id::ObjectId;

/// The versions after the common ancestor of `head` and `onto` on `head`'s line, oldest
/// first, and that ancestor (`None`: they share no version). Each line is walked once by
/// its parent links, stopping at a version seen before (a damaged catalog's cycle) or one
/// the catalog lacks.
///
/// # Errors
/// [`Error::Catalog`].
pub fn common_ancestor(
    catalog: &Catalog,
    head: &ObjectId,
    onto: &ObjectId,
) -> Result<(Option<ObjectId>, Vec<ObjectId>)> {
    let line = |start: &ObjectId| -> Result<Vec<ObjectId>> {
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        let mut next = Some(*start);
        while let Some(id) = next {
            if !seen.insert(id) {
                break;
            }
            out.push(id);
            next = catalog.version(&id)?.and_then(|r| r.version.parent);
        }
        Ok(out)
    };
    let theirs: HashSet<ObjectId> = line(onto)?.into_iter().collect();
    let mut local = Vec::new();
    for id in line(head)? {
        if theirs.contains(&id) {
            local.reverse();
            return Ok((Some(id), local));
        }
        local.push(id);
    }
    local.reverse();
    Ok((None, local))
}

/// How many versions `from`'s line has after the common ancestor with `other`, and how many
/// `other`'s has (git's ahead/behind): `None` when they share no version.
///
/// # Errors
/// [`Error::Catalog`].
pub fn ahead_behind(
    catalog: &Catalog,
    from: &ObjectId,
    other: &ObjectId,
) -> Result<Option<(u64, u64)>> {
    let (base, ours) = common_ancestor(catalog, from, other)?;
    if base.is_none() {
        return Ok(None);
    }
    let (_, theirs) = common_ancestor(catalog, other, from)?;
    Ok(Some((ours.len() as u64, theirs.len() as u64)))
}

/// Whether `version` is `head` or one of its ancestors (following parent links, stopping at
/// a version seen before or one the catalog lacks).
pub(crate) fn on_line(catalog: &Catalog, head: &ObjectId, version: &ObjectId) -> Result<bool> {
    let mut seen = HashSet::new();
    let mut next = Some(*head);
    while let Some(id) = next {
        if id == *version {
            return Ok(true);
        }
        if !seen.insert(id) {
            break;
        }
        next = catalog.version(&id)?.and_then(|r| r.version.parent);
    }
    Ok(false)
}
