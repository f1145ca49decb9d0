//! Freeing space: `dsv rm` (a version's or a dataset's data) and `dsv gc`.

use clap::Args;
use dsv::ops::sync::remote_gc;
use dsv::ops::{gc, retention};

use super::open_store;
use crate::{Cli, error, render, ui::Ui};

#[derive(Debug, Args)]
pub(crate) struct GcArgs {
    /// Print what would be deleted and the bytes freed; delete nothing.
    #[arg(long)]
    dry_run: bool,
    /// Keep pack files the catalog does not name until they are this old (default 1h).
    /// With --remote: how long an unreferenced pack waits before it is marked, and a marked
    /// one before it is deleted (default 24h); writers must finish within half of it.
    #[arg(long, value_parser = humantime::parse_duration)]
    grace: Option<std::time::Duration>,
    /// Collect the garbage of remote NAME instead (packs no ref of it reaches: marked,
    /// then deleted by a later run past the grace; no lock).
    #[arg(long, value_name = "NAME")]
    remote: Option<String>,
    /// Also compare the chunks gc would leave as they are with the chunks of the same
    /// dataset that resemble them (any path) and store them as deltas where that pays, as
    /// `git gc --aggressive`: the smallest store, at a few MB/s of compressible data.
    /// Without it, only chunks gc stores anew anyway (a commit's deltas) are compared.
    #[arg(long, conflicts_with = "remote")]
    aggressive: bool,
}

pub(crate) fn gc(cli: &Cli, ui: &Ui, args: &GcArgs) -> anyhow::Result<u8> {
    let mut store = open_store(cli)?;
    if let Some(remote) = &args.remote {
        let mut options = remote_gc::RemoteGcOptions::default();
        options.dry_run = args.dry_run;
        if let Some(grace) = args.grace {
            options.grace = grace;
        }
        let report = remote_gc::gc_remote(&mut store, remote, &options, &ui.reporter())?;
        ui.report(&report, render::remote_gc)?;
        return Ok(error::SUCCESS);
    }
    let options = gc::GcOptions {
        dry_run: args.dry_run,
        grace: args.grace.unwrap_or(std::time::Duration::from_secs(3600)),
        aggressive: args.aggressive,
    };
    let report = gc::gc(&mut store, &options, &ui.reporter())?;
    ui.report(&report, render::gc)?;
    Ok(error::SUCCESS)
}

#[derive(Debug, Args)]
pub(crate) struct RmArgs {
    /// NAME (the whole dataset), or one version: NAME@TAG, NAME@<id prefix, 4+ hex digits>, or
    /// either followed by ~N (N versions back), also NAME~N.
    #[arg(value_name = "NAME[@REV]")]
    target: String,
    /// Also drop the tags of the versions removed.
    #[arg(long)]
    force: bool,
    /// Remove refs of remote NAME instead: NAME (its head and every tag) or NAME@TAG. Each
    /// is deleted only if unchanged since read; the data stays until `dsv gc --remote`.
    #[arg(long, value_name = "NAME")]
    remote: Option<String>,
}

pub(crate) fn rm(cli: &Cli, ui: &Ui, args: &RmArgs) -> anyhow::Result<u8> {
    let mut store = open_store(cli)?;
    if let Some(remote) = &args.remote {
        if args.force {
            anyhow::bail!(error::Usage(
                "--force drops local tags; with --remote, NAME removes every tag of the dataset on the remote"
                    .into()
            ));
        }
        let (dataset, tag) = match args.target.split_once('@') {
            Some((dataset, tag)) => (dataset, Some(tag)),
            None => (args.target.as_str(), None),
        };
        if tag.is_some_and(|t| t.contains('~')) || args.target.contains('~') {
            anyhow::bail!(error::Usage(
                "a remote holds refs, not versions: remove NAME (its head and tags) or NAME@TAG"
                    .into()
            ));
        }
        let report = remote_gc::remove_remote_refs(&mut store, remote, dataset, tag)?;
        ui.report(&report, render::removed_remote_refs)?;
        return Ok(removed_code(&report));
    }
    let mut options = retention::RemoveOptions::default();
    options.force = args.force;
    let report = retention::remove(&mut store, &args.target, &options)?;
    ui.report(&report, render::removed)?;
    Ok(error::SUCCESS)
}

/// Exit 4 when a ref changed under the removal (left as it is), else 0.
pub(crate) fn removed_code(report: &remote_gc::RemoveRemoteReport) -> u8 {
    if report.refs.iter().any(|r| r.status != "deleted") {
        error::CONFLICT
    } else {
        error::SUCCESS
    }
}
