//! The read-only views of the store's history: `dsv diff`, `dsv log`, `dsv ls`, `dsv show`.

use clap::Args;
use dsv::Revision;
use dsv::ops::inspect;

use super::open_store;
use crate::cli::{Cli, error, render, ui::Ui};

#[derive(Debug, Args)]
pub(crate) struct DiffArgs {
    #[arg(help = concat!(
        "The older revision (or the only one: compared with its parent): ",
        revision_syntax!()
    ))]
    old: String,
    /// The newer revision (same syntax).
    new: Option<String>,
    /// Exit with 1 when they differ.
    #[arg(long)]
    exit_code: bool,
    /// One line per changed file with its size before and after, then a summary line.
    #[arg(long)]
    stat: bool,
}

/// Lists of changes longer than this end with a summary line.
const SUMMARY_AFTER: usize = 20;

pub(crate) fn diff(cli: &Cli, ui: &Ui, args: &DiffArgs) -> anyhow::Result<u8> {
    let store = open_store(cli)?;
    let (older, newer) = match &args.new {
        Some(new) => (Some(Revision::parse(&args.old)?), Revision::parse(new)?),
        None => (None, Revision::parse(&args.old)?),
    };
    let report = inspect::diff(&store, older.as_ref(), &newer)?;
    if ui.json {
        ui.json(&report)?;
    } else if args.stat {
        ui.line(render::diff_stat(&report.changes))?;
    } else {
        let mut text = render::changes(&report.changes, "no differences");
        if report.changes.len() > SUMMARY_AFTER {
            text.push('\n');
            text.push_str(&render::diff_summary(&report.changes));
        }
        ui.line(text)?;
    }
    if args.exit_code && !report.changes.is_empty() {
        return Ok(error::DIFFERENCES);
    }
    Ok(error::SUCCESS)
}

#[derive(Debug, Args)]
pub(crate) struct LogArgs {
    /// The dataset.
    dataset: String,
    /// Show at most N versions.
    #[arg(short = 'n', long, value_name = "N")]
    limit: Option<usize>,
    /// One line per version: short id, tags, first line of the message.
    #[arg(long)]
    oneline: bool,
}

pub(crate) fn log(cli: &Cli, ui: &Ui, args: &LogArgs) -> anyhow::Result<u8> {
    let store = open_store(cli)?;
    let versions = inspect::log(&store, &args.dataset, args.limit)?;
    if args.oneline {
        ui.report(versions.as_slice(), render::log_oneline)?;
    } else {
        ui.report(versions.as_slice(), render::log)?;
    }
    Ok(error::SUCCESS)
}

#[derive(Debug, Args)]
pub(crate) struct LsArgs {
    #[arg(
        value_name = "REV[:PATH]",
        help = concat!(
            "What to list: nothing for the datasets, REV or REV:PATH for the files of a version \
             (under PATH). REV is ",
            revision_syntax!()
        )
    )]
    target: Option<String>,
}

pub(crate) fn ls(cli: &Cli, ui: &Ui, args: &LsArgs) -> anyhow::Result<u8> {
    let store = open_store(cli)?;
    match &args.target {
        None => {
            let datasets = inspect::datasets(&store)?;
            ui.report(datasets.as_slice(), render::datasets)?;
        }
        Some(target) => {
            let (revision, path) = target.split_once(':').unwrap_or((target, ""));
            let entries = inspect::ls(&store, &Revision::parse(revision)?, path)?;
            ui.report(entries.as_slice(), render::entries)?;
        }
    }
    Ok(error::SUCCESS)
}

#[derive(Debug, Args)]
pub(crate) struct ShowArgs {
    #[arg(help = concat!("The revision: ", revision_syntax!()))]
    revision: String,
    /// Also list where each file came from (imported versions): URL, archive member,
    /// ETag, VersionId, Last-Modified, size.
    #[arg(long)]
    provenance: bool,
}

pub(crate) fn show(cli: &Cli, ui: &Ui, args: &ShowArgs) -> anyhow::Result<u8> {
    let store = open_store(cli)?;
    let revision = Revision::parse(&args.revision)?;
    if args.provenance {
        let shown = inspect::show_provenance(&store, &revision)?;
        ui.report(&shown, render::show_provenance)?;
    } else {
        let info = inspect::show(&store, &revision)?;
        ui.report(&info, render::show)?;
    }
    Ok(error::SUCCESS)
}
