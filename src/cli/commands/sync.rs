//! Moving versions between this store and its remotes: `dsv push`, `dsv pull`, `dsv fetch`,
//! `dsv clone`.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use dsv::ops::sync;
use dsv::{Revision, Store};

use super::{jobs_or, open_store, parse_options};
use crate::cli::{Cli, JobsArg, RemoteArg, error, render, ui::Ui};

#[derive(Debug, Args)]
pub(crate) struct PushArgs {
    /// Push only this dataset's version (default: every dataset's head).
    revision: Option<String>,
    #[command(flatten)]
    remote: RemoteArg,
    /// Replace the remote's head (and tags) even when that drops versions from it.
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    jobs: JobsArg,
}

pub(crate) fn push(cli: &Cli, ui: &Ui, args: &PushArgs) -> anyhow::Result<u8> {
    let mut store = open_store(cli)?;
    let name = remote_name(&store, &args.remote)?;
    let revision = args.revision.as_deref().map(Revision::parse).transpose()?;
    let report = sync::push(
        &mut store,
        &name,
        revision.as_ref(),
        args.force,
        jobs_or(&args.jobs, dsv::remote::DEFAULT_JOBS),
        &ui.reporter(),
    )?;
    ui.report(&report, render::push)?;
    Ok(error::SUCCESS)
}

#[derive(Debug, Args)]
pub(crate) struct PullArgs {
    /// NAME or NAME@REV on the remote (a tag, an id prefix, `latest`).
    revision: String,
    #[command(flatten)]
    remote: RemoteArg,
    /// Only the files whose path matches GLOB (repeatable), e.g. 'train/**'.
    #[arg(long, value_name = "GLOB")]
    include: Vec<String>,
    #[command(flatten)]
    jobs: JobsArg,
}

pub(crate) fn pull(cli: &Cli, ui: &Ui, args: &PullArgs) -> anyhow::Result<u8> {
    let mut store = open_store(cli)?;
    let name = remote_name(&store, &args.remote)?;
    let target = sync::RemoteRevision {
        remote: name,
        revision: Revision::parse(&args.revision)?,
    };
    let include = glob_set(&args.include)?;
    let report = sync::pull(
        &mut store,
        &target,
        include.as_ref(),
        jobs_or(&args.jobs, dsv::remote::DEFAULT_JOBS),
        &ui.reporter(),
    )?;
    ui.report(&report, render::pull)?;
    Ok(error::SUCCESS)
}

#[derive(Debug, Args)]
pub(crate) struct FetchArgs {
    #[command(flatten)]
    remote: RemoteArg,
    #[command(flatten)]
    jobs: JobsArg,
}

pub(crate) fn fetch(cli: &Cli, ui: &Ui, args: &FetchArgs) -> anyhow::Result<u8> {
    let mut store = open_store(cli)?;
    let name = remote_name(&store, &args.remote)?;
    let report = sync::fetch(
        &mut store,
        &name,
        jobs_or(&args.jobs, dsv::remote::DEFAULT_JOBS),
        &ui.reporter(),
    )?;
    ui.report(&report, render::fetch)?;
    Ok(error::SUCCESS)
}

#[derive(Debug, Args)]
pub(crate) struct CloneArgs {
    /// The remote's URL.
    url: String,
    /// Where to create the store (default: the URL's last path element).
    dir: Option<PathBuf>,
    /// A backend setting as KEY=VALUE (repeatable); credentials come from the environment.
    #[arg(long = "option", value_name = "KEY=VALUE")]
    options: Vec<String>,
    #[command(flatten)]
    jobs: JobsArg,
}

pub(crate) fn clone(ui: &Ui, args: &CloneArgs) -> anyhow::Result<u8> {
    let dir = match &args.dir {
        Some(dir) => dir.clone(),
        None => PathBuf::from(clone_dir_name(&args.url)?),
    };
    dsv::walk::check_workspace_dir(&dir)?;
    let report = sync::clone(
        &args.url,
        &dir,
        &parse_options(&args.options)?,
        jobs_or(&args.jobs, dsv::remote::DEFAULT_JOBS),
        &ui.reporter(),
    )?;
    ui.report(&report, render::clone)?;
    Ok(error::SUCCESS)
}

/// `--remote NAME`, else `origin`, else the only remote.
fn remote_name(store: &Store, arg: &RemoteArg) -> anyhow::Result<String> {
    if let Some(name) = &arg.name {
        return Ok(name.clone());
    }
    let remotes = store.catalog().remotes()?;
    match remotes.as_slice() {
        [only] => Ok(only.name.clone()),
        _ if remotes.iter().any(|r| r.name == "origin") => Ok("origin".into()),
        [] => anyhow::bail!("this store has no remote; add one with `dsv remote add origin URL`"),
        _ => anyhow::bail!(
            "this store has several remotes and none is called origin; pass --remote NAME"
        ),
    }
}

/// The `--include` globs as one set, or `None` when there are none.
fn glob_set(globs: &[String]) -> anyhow::Result<Option<globset::GlobSet>> {
    if globs.is_empty() {
        return Ok(None);
    }
    let mut builder = globset::GlobSetBuilder::new();
    for glob in globs {
        builder.add(
            globset::GlobBuilder::new(glob)
                .literal_separator(true)
                .build()
                .with_context(|| format!("invalid --include pattern {glob:?}"))?,
        );
    }
    Ok(Some(builder.build()?))
}

/// The directory `clone URL` creates: the URL's last path element (`s3://b/team/mnist` →
/// `mnist`, `s3://b` → `b`). An element that names no new directory (`.`, `..`, nothing,
/// `.dsv`, the scheme of `file:///`) is refused: the store would land in the current or
/// parent directory.
fn clone_dir_name(url: &str) -> anyhow::Result<String> {
    let path = url.split_once("://").map_or(url, |(_, rest)| rest);
    let name = path.trim_end_matches('/').rsplit('/').next().unwrap_or("");
    if dsv::object::check_name(name).is_err() || dsv::walk::check_reserved_name(name).is_err() {
        anyhow::bail!(
            "cannot name a directory after {url:?} (its last path element is {name:?}); give one: dsv clone URL DIR"
        );
    }
    Ok(name.to_string())
}
