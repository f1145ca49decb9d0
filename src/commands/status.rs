//! `dsv status`.

use std::path::PathBuf;

use clap::Args;
use dsv::ops::{ingest::IngestOptions, status};

use super::{jobs_or, open_store};
use crate::{Cli, JobsArg, error, render, ui::Ui};

#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// The workspace directory, or any directory inside it.
    #[arg(default_value = ".")]
    dir: PathBuf,
    /// Exit with 1 when DIR differs from its version.
    #[arg(long)]
    exit_code: bool,
    /// List a file moved (deleted at one path, added with the same content and mode at
    /// another) as a deletion and an addition, not as `R OLD -> NEW`.
    #[arg(long)]
    no_renames: bool,
    #[command(flatten)]
    jobs: JobsArg,
}

pub(crate) fn run(cli: &Cli, ui: &Ui, args: &StatusArgs) -> anyhow::Result<u8> {
    let mut store = open_store(cli)?;
    let jobs = jobs_or(&args.jobs, &store.config()?, IngestOptions::default().jobs);
    let mut options = status::StatusOptions::default();
    options.jobs = jobs;
    let mut report = status::status(&mut store, &args.dir, &options, &ui.reporter())?;
    if !args.no_renames {
        report = report.with_renames();
    }
    ui.report(&report, render::status)?;
    if args.exit_code && !report.changes.is_empty() {
        return Ok(error::DIFFERENCES);
    }
    Ok(error::SUCCESS)
}
