//! Checkout's apply and record phases (steps 10-12 of [`super`]): the directory changes
//! (deletions, renames into place, new directories, pruning), then the workspace's version
//! and stat cache are recorded in one catalog transaction.

use std::path::Path;

use super::spill::{INODE_RECORD, RecordSpill, STAT_RECORD, inode_of, stat_of, stat_record};
use super::stage::{Layout, Staged, Staging, staged_at};
use super::{APPLY_BATCH_FILES, Site, Target};
use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::store::{ObjectReader, Store};
use crate::tree::FlatKind;
use crate::walk::Stat;
use crate::workspace;

/// What [`apply`] did.
pub(super) struct Applied {
    /// Files, symlinks and directories removed.
    pub(super) deleted: u64,
    /// Files that are not the ones this checkout staged once in place: another process
    /// swapped something in at their temporary name. They get no stat cache entry.
    pub(super) replaced: Vec<String>,
}

impl Applied {
    /// The error a checkout into `dir` ends with when another process replaced files it
    /// wrote (once everything else is applied and recorded).
    ///
    /// # Errors
    /// [`Error::Io`] naming the first such file.
    pub(super) fn refuse_replaced(&self, dir: &Path) -> Result<()> {
        let Some(first) = self.replaced.first() else {
            return Ok(());
        };
        Err(Error::Io {
            path: dir.join(first),
            source: std::io::Error::other(format!(
                "{} file(s) were replaced by another process while checkout wrote them: they do not hold what the version has (`dsv status` lists them); the rest of the checkout is done",
                self.replaced.len()
            )),
        })
    }
}

/// What [`apply`] renamed into place, for [`record`].
pub(super) struct Written {
    /// Files renamed into place (the spill holds symlinks too).
    files: u64,
    /// The lstat of each file and symlink renamed into place, in the walk's order.
    stats: RecordSpill<STAT_RECORD>,
}

/// Apply phase (step 10): deletes what the plan deletes, renames each staged subtree into
/// place, creates the target's remaining directories (`create`), renames every other staged
/// file onto its destination ([`rename_staged`]) and prunes the old version's directories
/// left empty. Touches the directory: only the plan's paths and the target's. Not stopped
/// by Ctrl-C once begun, so the directory is never left half old, half new.
///
/// # Errors
/// [`Error::Io`] (the directory is then half-changed; every file in place is complete).
pub(super) fn apply(
    trees: &mut ObjectReader<'_>,
    target: &Target<'_>,
    names: Staged<'_>,
    create: &[String],
    inodes: RecordSpill<INODE_RECORD>,
    stats: RecordSpill<STAT_RECORD>,
    site: &Site<'_>,
) -> Result<(Applied, Written)> {
    let (root, plan) = (site.root, names.plan);
    let mut deleted = 0u64;
    for path in &plan.delete_files {
        root.remove_file(path)?;
        deleted += 1;
    }
    for path in &plan.delete_trees {
        root.remove_dir_all(path)?;
        deleted += 1;
    }
    for (path, temp) in names.roots {
        root.rename(temp, path)?;
    }
    for path in create {
        if !root.is_dir(path) {
            root.create_dir(path)?;
        }
    }
    let mut written = Written { files: 0, stats };
    let replaced = rename_staged(trees, target, names, inodes, &mut written, site)?;
    for path in plan.prune_dirs.iter().rev() {
        // Only if empty: untracked files keep their directory.
        if root.remove_dir(path).is_ok() {
            deleted += 1;
        }
    }
    Ok((Applied { deleted, replaced }, written))
}

/// Renames each file staged under a temporary name onto its destination, in rounds of
/// [`APPLY_BATCH_FILES`] on every writer (at 100,000 small files, one thread spent longer
/// renaming than the writers spent staging), lstat'ing each file right after into
/// `written`. The files that are not the inode staged: another process swapped them in.
///
/// # Errors
/// [`Error::Io`]; reading the trees or the inode spill.
pub(super) fn rename_staged(
    trees: &mut ObjectReader<'_>,
    target: &Target<'_>,
    names: Staged<'_>,
    inodes: RecordSpill<INODE_RECORD>,
    written: &mut Written,
    site: &Site<'_>,
) -> Result<Vec<String>> {
    let root = site.root;
    let layout = Layout {
        root,
        roots: names.roots,
    };
    let mut replaced = Vec::new();
    let mut staged_inodes = inodes.read_back()?;
    crate::interrupt::run_under(None, || -> Result<()> {
        let mut replay = names.replay(target.walk(trees)?);
        loop {
            let batch = replay.take(APPLY_BATCH_FILES)?;
            if batch.is_empty() {
                return Ok(());
            }
            let mut expected = Vec::with_capacity(batch.len());
            for _ in &batch {
                expected.push(match &mut staged_inodes {
                    Some(spilled) => inode_of(spilled.next()?),
                    None => None,
                });
            }
            let jobs: Vec<_> = batch.iter().zip(expected).collect();
            let renamed = crate::parallel::map(&jobs, site.jobs, |((entry, staging), inode)| {
                let renamed = if matches!(staging, Staging::Inside(_)) {
                    None
                } else {
                    let from = staged_at(&entry.path, *staging, &layout);
                    Some(root.rename_then_lstat(from, &entry.path)?)
                };
                Ok(match entry.kind {
                    FlatKind::File { .. } => {
                        let stat = match renamed {
                            Some(stat) => stat,
                            None => root.lstat(&entry.path)?,
                        };
                        // Ours only when it is the inode staged (unknown: not cached).
                        let ours = stat.is_some_and(|s| Some(s.inode) == *inode);
                        (stat.filter(|_| ours), !ours && inode.is_some())
                    }
                    _ => (None, false),
                })
            })?;
            for ((stat, swapped), ((entry, _), _)) in renamed.into_iter().zip(&jobs) {
                if swapped {
                    replaced.push(entry.path.clone());
                }
                written.files += u64::from(stat.is_some());
                written.stats.push(&stat_record(stat));
            }
        }
    })?;
    Ok(replaced)
}

/// The workspace a checkout records: its key, the dataset named (which may share the
/// version with another, after a rename) and the version.
pub(super) struct Recording<'a> {
    pub(super) key: &'a str,
    pub(super) dataset: &'a str,
    pub(super) version: &'a ObjectId,
}

/// Record phase (steps 11-12): waits out the racy margin once, then in one catalog
/// transaction records the workspace's version and its stat cache: the files written whose
/// stat did not change since their rename ([`cache_written`]), the kept files the plan
/// hashed, and no entry where the target has no file. Touches the catalog only.
///
/// # Errors
/// [`Error::Catalog`]; [`Error::Io`] reading the spill or the trees.
pub(super) fn record(
    store: &mut Store,
    trees: &mut ObjectReader<'_>,
    target: &Target<'_>,
    names: Staged<'_>,
    written: Written,
    recording: &Recording<'_>,
    site: &Site<'_>,
) -> Result<()> {
    // Wait out the racy margin once, then cache only files no one touched since.
    if written.files > 0 {
        std::thread::sleep(std::time::Duration::from_nanos(
            workspace::RACY_MARGIN_NS as u64,
        ));
    }
    let checked_ns = workspace::now_ns();
    let mut spilled = written.stats.read_back()?;
    let writer = store.catalog_mut().writer()?;
    let workspace_id = writer.set_workspace(recording.key, recording.dataset, recording.version)?;
    // Entries for paths where the target has no file go (first: a path the cache had
    // but the disk did not may be written now, and gets its entry below).
    let plan = names.plan;
    writer.update_stat_cache(
        workspace_id,
        plan.uncache.iter().map(|p| (p.as_str(), None)),
    )?;
    let mut replay = names.replay(target.walk(trees)?);
    loop {
        let batch = replay.take(APPLY_BATCH_FILES)?;
        if batch.is_empty() {
            break;
        }
        let mut files = Vec::with_capacity(batch.len());
        for (entry, _) in &batch {
            // Without the spilled stat (the spill failed), the file gets no entry.
            let stat = match &mut spilled {
                Some(spilled) => stat_of(spilled.next()?),
                None => None,
            };
            if matches!(entry.kind, FlatKind::File { .. }) {
                files.push((entry, stat));
            }
        }
        let changes = cache_written(&files, checked_ns, site)?;
        writer.update_stat_cache(
            workspace_id,
            files
                .iter()
                .zip(&changes)
                .map(|((entry, _), cached)| (entry.path.as_str(), cached.as_ref())),
        )?;
    }
    drop(replay);
    writer.update_stat_cache(
        workspace_id,
        plan.hashed
            .iter()
            .map(|(path, entry)| (path.as_str(), entry.as_ref())),
    )?;
    writer.commit()
}

/// The stat cache entries of `written` (files with the lstat taken right after their
/// rename), re-lstat'ed on every writer: an entry only where the stat did not change since
/// (no one touched the file meanwhile) and is settled by `checked_ns`. Reads the directory.
///
/// # Errors
/// As [`crate::parallel::map`].
pub(super) fn cache_written(
    written: &[(&crate::tree::FlatEntry, Option<Stat>)],
    checked_ns: i64,
    site: &Site<'_>,
) -> Result<Vec<Option<crate::catalog::StatEntry>>> {
    crate::interrupt::run_under(None, || {
        crate::parallel::map(written, site.jobs, |(entry, stat)| {
            Ok(stat
                .filter(|stat| {
                    site.root
                        .lstat(&entry.path)
                        .is_ok_and(|now| now == Some(*stat))
                })
                .and_then(|stat| workspace::entry(&stat, checked_ns)))
        })
    })
}
