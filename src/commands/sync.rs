//! Moving versions between this store and its remotes: `dsv push`, `dsv pull`, `dsv fetch`,
//! `dsv clone`, and `dsv rebase` (local versions replayed onto a remote's or another version).

use std::path::PathBuf;

use clap::Args;
use dsv::Revision;
use dsv::config::Config;
use dsv::ops::sync;

use super::{jobs_or, open_store, parse_options};
use crate::{Cli, JobsArg, RemoteArg, error, render, ui::Ui};

#[derive(Debug, Args)]
pub(crate) struct PushArgs {
    #[arg(value_name = "REV", help = concat!(
        "Push only these versions, one per dataset (default: every dataset's head): ",
        revision_syntax!()
    ))]
    revisions: Vec<String>,
    #[command(flatten)]
    remote: RemoteArg,
    /// Replace the remote's head (and tags) even when that drops versions from it.
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    jobs: JobsArg,
}

/// `push --json`: the report, and when a dataset was refused, an `error` object as every
/// failing command's (its message names each refusal; the hints are theirs).
#[derive(serde::Serialize)]
struct PushOutput<'a> {
    #[serde(flatten)]
    report: &'a sync::PushReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<serde_json::Value>,
}

pub(crate) fn push(cli: &Cli, ui: &Ui, args: &PushArgs) -> anyhow::Result<u8> {
    let mut store = open_store(cli)?;
    let (name, requests) = remote_and_requests(&store, &args.remote, &args.jobs)?;
    let revisions = args
        .revisions
        .iter()
        .map(|r| Revision::parse(r))
        .collect::<Result<Vec<_>, _>>()?;
    let mut options = sync::PushOptions::default();
    options.force = args.force;
    options.requests = requests;
    let report = sync::push(&mut store, &name, &revisions, &options, &ui.reporter())?;
    // Each dataset was pushed on its own; the refused ones are errors (exit 4), the others
    // went through.
    let refused: Vec<&sync::PushedDataset> =
        report.datasets.iter().filter(|d| d.refused()).collect();
    let message = |d: &sync::PushedDataset| d.error.clone().unwrap_or_default();
    let error = (!refused.is_empty()).then(|| {
        let message = match refused.as_slice() {
            [one] => message(one),
            several => format!(
                "{} of {} datasets refused: {}",
                several.len(),
                report.datasets.len(),
                several
                    .iter()
                    .map(|d| message(d))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        };
        let hints: Vec<String> = refused.iter().filter_map(|d| d.hint.clone()).collect();
        serde_json::json!({
            "kind": dsv::error::ErrorKind::Conflict.name(),
            "message": message,
            "causes": [],
            "hints": hints,
        })
    });
    let output = PushOutput {
        report: &report,
        error,
    };
    ui.report(&output, |o| render::push(o.report))?;
    for dataset in &refused {
        eprintln!("error: {}", message(dataset));
        if let Some(hint) = &dataset.hint {
            eprintln!("\nhint: {hint}");
        }
    }
    Ok(if refused.is_empty() {
        error::SUCCESS
    } else {
        error::CONFLICT
    })
}

#[derive(Debug, Args)]
pub(crate) struct CopyArgs {
    #[arg(
        required = true,
        value_name = "REV",
        help = "The versions to copy, as the source remote names them: DATASET (its head), \
                DATASET@TAG (the tag too), DATASET@ID-PREFIX, each with ~N for the Nth parent"
    )]
    revisions: Vec<String>,
    /// The remote to copy from (a name from `dsv remote ls`).
    #[arg(long, value_name = "REMOTE")]
    from: String,
    /// The remote to copy to.
    #[arg(long, value_name = "REMOTE")]
    to: String,
    /// Replace the destination's head (and tags) even when that drops versions from it.
    #[arg(long)]
    force: bool,
    /// Print what would be copied and how each ref would move; write nothing to the
    /// destination and move no ref.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    jobs: JobsArg,
}

pub(crate) fn copy(cli: &Cli, ui: &Ui, args: &CopyArgs) -> anyhow::Result<u8> {
    let mut store = open_store(cli)?;
    let requests = jobs_or(&args.jobs, &store.config()?, dsv::remote::DEFAULT_JOBS);
    let mut options = sync::CopyOptions::default();
    options.force = args.force;
    options.requests = requests;
    options.dry_run = args.dry_run;
    let report = sync::copy(
        &mut store,
        &args.revisions,
        &args.from,
        &args.to,
        &options,
        &ui.reporter(),
    )?;
    ui.report(&report, render::copy)?;
    Ok(error::SUCCESS)
}

#[derive(Debug, Args)]
pub(crate) struct PullArgs {
    #[arg(help = concat!(
        "The version, as the remote names it (default: the dataset of the workspace holding \
         the current directory): ",
        revision_syntax!()
    ))]
    revision: Option<String>,
    #[command(flatten)]
    remote: RemoteArg,
    /// Only the files whose path matches GLOB (repeatable), e.g. 'train/**'.
    #[arg(long, value_name = "GLOB", conflicts_with = "rebase")]
    include: Vec<String>,
    /// When both sides have new versions, replay the local ones onto the remote's (they
    /// must have changed other paths; conflicts are listed, exit 4, and nothing changes).
    #[arg(long)]
    rebase: bool,
    /// Print what a pull would do (the version, the head, the chunks to download, the
    /// tags); download and change nothing. With --rebase, also what would be replayed
    /// (after fetching the version's metadata when this store lacks it).
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    resolve: ResolveArgs,
    #[command(flatten)]
    jobs: JobsArg,
}

pub(crate) fn pull(cli: &Cli, ui: &Ui, args: &PullArgs) -> anyhow::Result<u8> {
    let mut store = open_store(cli)?;
    let (name, requests) = remote_and_requests(&store, &args.remote, &args.jobs)?;
    let current = std::env::current_dir()?;
    let revision = match &args.revision {
        Some(revision) => Revision::parse(revision)?,
        None => {
            let dataset = dsv::ops::workspace::enclosing(&store, &current)?
                .and_then(|w| w.dataset)
                .ok_or_else(|| {
                    error::Usage(
                        "name the dataset to pull (`dsv pull NAME`): the current directory is in no workspace"
                            .into(),
                    )
                })?;
            Revision::parse(&dataset)?
        }
    };
    let target = sync::RemoteRevision {
        remote: name,
        revision,
    };
    let mut options = sync::PullOptions::new(requests);
    options.include.clone_from(&args.include);
    options.rebase = args.rebase;
    options.dry_run = args.dry_run;
    options.resolution = args.resolve.resolution()?;
    if !args.rebase && options.resolution != dsv::ops::rebase::Resolution::default() {
        return Err(
            error::Usage("--ours and --theirs settle a rebase: add --rebase".into()).into(),
        );
    }
    options.workspace = Some(current);
    options.jobs = jobs_or(&args.jobs, &store.config()?, options.jobs);
    let report = sync::pull(&mut store, &target, &options, &ui.reporter())?;
    ui.report(&report, render::pull)?;
    Ok(match &report.rebase {
        Some(rebase) => refused_by_conflicts(rebase),
        None => error::SUCCESS,
    })
}

#[derive(Debug, Args)]
pub(crate) struct RebaseArgs {
    #[arg(help = concat!(
        "The version to replay the local versions onto: a remote's (REMOTE/NAME[@REV], fetched \
         first) or this store's: ",
        revision_syntax!()
    ))]
    onto: String,
    /// The dataset whose head is rebased (default: ONTO's).
    #[arg(short, long, value_name = "NAME")]
    dataset: Option<String>,
    /// Print what would be replayed (and any conflicts); change nothing.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    resolve: ResolveArgs,
    #[command(flatten)]
    jobs: JobsArg,
}

/// How a rebase settles the paths both lines changed (`dsv rebase`, `dsv pull --rebase`).
#[derive(Debug, Args)]
pub(crate) struct ResolveArgs {
    /// Where both lines changed a path, keep the local side: every such path, or with
    /// --ours=PATH (repeatable) only PATH and what lies below it.
    #[arg(
        long,
        value_name = "PATH",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "",
        action = clap::ArgAction::Append
    )]
    ours: Vec<String>,
    /// Where both lines changed a path, take ONTO's (the remote's) side: every such path, or
    /// with --theirs=PATH (repeatable) only PATH and what lies below it.
    #[arg(
        long,
        value_name = "PATH",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "",
        action = clap::ArgAction::Append
    )]
    theirs: Vec<String>,
}

impl ResolveArgs {
    /// The resolution: a bare flag is every path; `--ours` and `--theirs` both bare is a
    /// usage error.
    fn resolution(&self) -> anyhow::Result<dsv::ops::rebase::Resolution> {
        use dsv::ops::rebase::{Resolution, Side};
        let mut resolution = Resolution::default();
        for (values, side) in [(&self.ours, Side::Ours), (&self.theirs, Side::Theirs)] {
            for value in values {
                if value.is_empty() {
                    if resolution.all.is_some_and(|s| s != side) {
                        return Err(error::Usage(
                            "give --ours or --theirs for every path, not both (name paths: --ours=PATH)".into(),
                        )
                        .into());
                    }
                    resolution.all = Some(side);
                } else {
                    resolution.paths.push((value.clone(), side));
                }
            }
        }
        Ok(resolution)
    }
}

pub(crate) fn rebase(cli: &Cli, ui: &Ui, args: &RebaseArgs) -> anyhow::Result<u8> {
    let mut store = open_store(cli)?;
    let requests = jobs_or(&args.jobs, &store.config()?, dsv::remote::DEFAULT_JOBS);
    let (onto, onto_dataset) = match sync::RemoteRevision::parse(&args.onto)? {
        Some(target) => {
            let prepared =
                sync::prepare_remote_revision(&mut store, &target, None, requests, &ui.reporter())?;
            (prepared.version, prepared.dataset)
        }
        None => {
            let revision = Revision::parse(&args.onto)?;
            (revision.resolve(store.catalog())?, revision.dataset)
        }
    };
    let dataset = args.dataset.clone().unwrap_or(onto_dataset.clone());
    // `--dataset` names a dataset to rebase, never a new one (a typo would otherwise make a
    // dataset holding ONTO's line).
    if dataset != onto_dataset && store.catalog().head_or_none(&dataset)?.is_none() {
        return Err(dsv::Error::DatasetNotFound {
            closest: store.catalog().closest_dataset(&dataset)?,
            name: dataset,
        }
        .into());
    }
    let mut options = dsv::ops::rebase::RebaseOptions::new(args.onto.clone());
    options.dry_run = args.dry_run;
    options.workspace = Some(std::env::current_dir()?);
    options.jobs = jobs_or(&args.jobs, &store.config()?, options.jobs);
    options.requests = requests;
    options.resolution = args.resolve.resolution()?;
    let report = dsv::ops::rebase::rebase(&mut store, &dataset, &onto, &options, &ui.reporter())?;
    ui.report(&report, render::rebase)?;
    Ok(refused_by_conflicts(&report))
}

/// Exit 4 (after the report) when a rebase stopped at conflicts, with the library's error
/// ([`dsv::Error::RebaseConflicts`], its hint included) on stderr.
fn refused_by_conflicts(report: &dsv::ops::rebase::RebaseReport) -> u8 {
    if report.status != dsv::ops::rebase::RebaseStatus::Conflict {
        return error::SUCCESS;
    }
    let refusal = dsv::Error::RebaseConflicts {
        dataset: report.dataset.clone(),
        onto: report.onto.clone(),
        conflicts: report.conflicts.len(),
        one_side_settles: report
            .conflicts
            .iter()
            .all(|c| c.reason == dsv::ops::rebase::ConflictReason::BothChanged),
    };
    let code = error::kind_exit_code(refusal.kind());
    crate::report_refusal(refusal);
    code
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
    let mut options = sync::FetchOptions::default();
    options.requests = requests;
    let report = sync::fetch(&mut store, &name, &options, &ui.reporter())?;
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
    let mut options = sync::CloneOptions::default();
    options.remote_options = parse_options(&args.options)?;
    options.requests = jobs_or(&args.jobs, &Config::default(), dsv::remote::DEFAULT_JOBS);
    let report = sync::clone(&args.url, &dir, &options, &ui.reporter())?;
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
