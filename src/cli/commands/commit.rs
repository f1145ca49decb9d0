//! `dsv commit`.

use std::path::PathBuf;

use clap::Args;
use dsv::ops::commit;

use super::{compression_level_or, default_author, jobs_or, open_store};
use crate::cli::{Cli, JobsArg, error, render, ui::Ui};

#[derive(Debug, Args)]
pub(crate) struct CommitArgs {
    /// The directory to snapshot (anywhere on disk).
    dir: PathBuf,
    /// The dataset to add a version to (created if new).
    #[arg(short, long)]
    dataset: String,
    /// The commit message.
    #[arg(short, long, default_value = "")]
    message: String,
    /// Tag the new version.
    #[arg(short, long)]
    tag: Option<String>,
    /// Record a new version even when nothing changed.
    #[arg(long)]
    allow_empty: bool,
    /// zstd compression level (1-19; default: the store's core.compression_level, else 3).
    #[arg(long, value_parser = clap::value_parser!(i32).range(1..=19))]
    compression_level: Option<i32>,
    #[command(flatten)]
    jobs: JobsArg,
}

pub(crate) fn run(cli: &Cli, ui: &Ui, args: &CommitArgs) -> anyhow::Result<u8> {
    let mut store = open_store(cli)?;
    let settings = store.config()?;
    let mut options = commit::CommitOptions::new(args.dataset.clone());
    options.message = args.message.clone();
    options.tag = args.tag.clone();
    options.author = Some(default_author());
    options.allow_empty = args.allow_empty;
    options.ingest.jobs = jobs_or(&args.jobs, &settings, options.ingest.jobs);
    options.ingest.compression_level = compression_level_or(
        args.compression_level,
        &settings,
        options.ingest.compression_level,
    );
    let report = commit::commit(&mut store, &args.dir, &options, &ui.reporter())?;
    ui.report(&report, render::commit)?;
    Ok(error::SUCCESS)
}
