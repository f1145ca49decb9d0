//! `dsv reset` and `dsv rename`: move a dataset's head, or rename the dataset.

use clap::Args;
use dsv::Revision;
use dsv::ops::refs;

use super::open_store;
use crate::{Cli, error, ui::Ui};

#[derive(Debug, Args)]
pub(crate) struct ResetArgs {
    /// The dataset whose head moves.
    dataset: String,
    /// The version it moves to: a tag, an id prefix (4+ hex digits), `latest~N`, or a whole
    /// revision of the dataset (NAME@TAG).
    revision: String,
}

/// `dsv reset NAME REV`.
pub(crate) fn reset(cli: &Cli, ui: &Ui, args: &ResetArgs) -> anyhow::Result<u8> {
    let mut store = open_store(cli)?;
    let revision = if args.revision.contains('@') {
        Revision::parse(&args.revision)?
    } else {
        Revision::parse(&format!("{}@{}", args.dataset, args.revision))?
    };
    let report = refs::reset(&mut store, &args.dataset, &revision)?;
    ui.report(&report, |r| match r.from {
        Some(from) if from == r.to => format!("{} is already at {}", r.dataset, r.to.short()),
        Some(from) => format!(
            "{} moved from {} to {} ({} stays in `dsv log {}`)",
            r.dataset,
            from.short(),
            r.to.short(),
            from.short(),
            r.dataset
        ),
        None => format!("{} is now at {}", r.dataset, r.to.short()),
    })?;
    Ok(error::SUCCESS)
}

#[derive(Debug, Args)]
pub(crate) struct RenameArgs {
    /// The dataset's name now.
    old: String,
    /// Its new name (1 to 100 letters, digits, '.', '_', '-'; not in use).
    new: String,
}

/// `dsv rename OLD NEW`.
pub(crate) fn rename(cli: &Cli, ui: &Ui, args: &RenameArgs) -> anyhow::Result<u8> {
    let mut store = open_store(cli)?;
    refs::rename(&mut store, &args.old, &args.new)?;
    if ui.json {
        ui.json(&serde_json::json!({ "old": args.old, "new": args.new }))?;
    } else {
        ui.line(format!("Renamed dataset {} to {}", args.old, args.new))?;
    }
    Ok(error::SUCCESS)
}
