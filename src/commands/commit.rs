//! `dsv commit`.

use std::path::PathBuf;

use clap::Args;
use dsv::ops::commit;

use super::{compression_level_or, default_author, deltas_or, jobs_or, open_store};
use crate::{Cli, JobsArg, error, render, ui::Ui};

#[derive(Debug, Args)]
pub(crate) struct CommitArgs {
    /// The directory to snapshot (anywhere on disk); default: the workspace holding the
    /// current directory (its root).
    dir: Option<PathBuf>,
    /// The dataset to add a version to (created if new); default: the one the workspace
    /// holds. Needed for a directory's first commit, or to commit it to another dataset.
    #[arg(short, long)]
    dataset: Option<String>,
    /// The commit message.
    #[arg(short, long, default_value = "")]
    message: String,
    /// Tag the new version.
    #[arg(short, long)]
    tag: Option<String>,
    /// Record a new version even when nothing changed.
    #[arg(long)]
    allow_empty: bool,
    /// Commit a directory inside another workspace of the same dataset (refused otherwise:
    /// the version would hold only that subdirectory, and it would become a nested
    /// workspace).
    #[arg(long)]
    force: bool,
    /// Leave out paths matching GLOB (repeatable; gitignore syntax, relative to the
    /// directory: '*.tmp', 'cache/'). For a lasting rule, write it in a `.dsvignore` file
    /// (obeyed by commit and status, like git's .gitignore).
    #[arg(long, value_name = "GLOB")]
    exclude: Vec<String>,
    /// zstd compression level (1-19; default: the store's core.compression_level, else 3).
    #[arg(long, value_parser = clap::value_parser!(i32).range(1..=19))]
    compression_level: Option<i32>,
    /// Store every new chunk whole: no delta against the parent version's chunks (by
    /// default a changed file's new chunks are stored as deltas when that saves at least
    /// half; the store's core.deltas = false does the same as this flag).
    #[arg(long)]
    no_deltas: bool,
    #[command(flatten)]
    jobs: JobsArg,
}

pub(crate) fn run(cli: &Cli, ui: &Ui, args: &CommitArgs) -> anyhow::Result<u8> {
    let mut store = open_store(cli)?;
    let settings = store.config()?;
    let current_dir = std::env::current_dir()?;
    let (dir, dataset) = dsv::ops::workspace::commit_target(
        &store,
        args.dir.as_deref(),
        args.dataset.as_deref(),
        &current_dir,
    )?;
    let mut options = commit::CommitOptions::new(dataset);
    options.message = args.message.clone();
    options.tag = args.tag.clone();
    options.author = Some(default_author());
    options.allow_empty = args.allow_empty;
    options.allow_nested = args.force;
    options.exclude = args.exclude.clone();
    options.ingest.jobs = jobs_or(&args.jobs, &settings, options.ingest.jobs);
    options.ingest.deltas = deltas_or(args.no_deltas, &settings);
    options.ingest.compression_level = compression_level_or(
        args.compression_level,
        &settings,
        options.ingest.compression_level,
    );
    let report = commit::commit(&mut store, &dir, &options, &ui.reporter())?;
    if report.new_dataset {
        ui.note(format!("new dataset {}", report.dataset))?;
    }
    if let Some(head) = report.replaced_head {
        ui.note(format!(
            "the head of {} was {}, which this version does not descend from (the workspace held another version); that line stays in `dsv log {}`, and `dsv reset {} {}` moves the head back",
            report.dataset,
            head.short(),
            report.dataset,
            report.dataset,
            head.short()
        ))?;
    }
    ui.report(&report, render::commit)?;
    Ok(error::SUCCESS)
}
