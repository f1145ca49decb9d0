//! Moving versions between this store and its remotes: `dsv push`, `dsv pull`, `dsv fetch`,
//! `dsv clone`.

use std::path::PathBuf;

use clap::Args;
use dsv::Revision;
use dsv::config::Config;
use dsv::ops::sync;

use super::{jobs_or, open_store, parse_options};
use crate::cli::{Cli, JobsArg, RemoteArg, error, render, ui::Ui};

#[derive(Debug, Args)]
pub(crate) struct PushArgs {
    #[arg(help = concat!(
        "Push only this version (default: every dataset's head): ",
        revision_syntax!()
    ))]
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
    let (name, requests) = remote_and_requests(&store, &args.remote, &args.jobs)?;
    let revision = args.revision.as_deref().map(Revision::parse).transpose()?;
    let report = sync::push(
        &mut store,
        &name,
        revision.as_ref(),
        args.force,
        requests,
        &ui.reporter(),
    )?;
    ui.report(&report, render::push)?;
    Ok(error::SUCCESS)
}

#[derive(Debug, Args)]
pub(crate) struct PullArgs {
    #[arg(help = concat!("The version, as the remote names it: ", revision_syntax!()))]
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
    let (name, requests) = remote_and_requests(&store, &args.remote, &args.jobs)?;
    let target = sync::RemoteRevision {
        remote: name,
        revision: Revision::parse(&args.revision)?,
    };
    let report = sync::pull(&mut store, &target, &args.include, requests, &ui.reporter())?;
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
    let (name, requests) = remote_and_requests(&store, &args.remote, &args.jobs)?;
    let report = sync::fetch(&mut store, &name, requests, &ui.reporter())?;
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
        None => sync::default_clone_dir(&args.url)?,
    };
    let report = sync::clone(
        &args.url,
        &dir,
        &parse_options(&args.options)?,
        jobs_or(&args.jobs, &Config::default(), dsv::remote::DEFAULT_JOBS),
        &ui.reporter(),
    )?;
    ui.report(&report, render::clone)?;
    Ok(error::SUCCESS)
}

/// The remote of push, pull and fetch (`--remote`, else the store's `remote.default`, else
/// the only remote or origin) and its requests in flight (`--jobs`, else `core.jobs`).
fn remote_and_requests(
    store: &dsv::Store,
    remote: &RemoteArg,
    jobs: &JobsArg,
) -> anyhow::Result<(String, usize)> {
    let name = sync::default_remote(store, remote.name.as_deref())?;
    let requests = jobs_or(jobs, &store.config()?, dsv::remote::DEFAULT_JOBS);
    Ok((name, requests))
}
