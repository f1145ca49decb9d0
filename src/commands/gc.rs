//! Freeing space: `dsv rm` (a version's or a dataset's data) and `dsv gc`.

use clap::Args;
use dsv::ops::{gc, retention};

use super::open_store;
use crate::{Cli, error, render, ui::Ui};

#[derive(Debug, Args)]
pub(crate) struct GcArgs {
    /// Print what would be deleted and the bytes freed; delete nothing.
    #[arg(long)]
    dry_run: bool,
    /// Keep pack files the catalog does not name until they are this old.
    #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
    grace: std::time::Duration,
}

pub(crate) fn gc(cli: &Cli, ui: &Ui, args: &GcArgs) -> anyhow::Result<u8> {
    let mut store = open_store(cli)?;
    let options = gc::GcOptions {
        dry_run: args.dry_run,
        grace: args.grace,
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
}

pub(crate) fn rm(cli: &Cli, ui: &Ui, args: &RmArgs) -> anyhow::Result<u8> {
    let mut store = open_store(cli)?;
    let mut options = retention::RemoveOptions::default();
    options.force = args.force;
    let report = retention::remove(&mut store, &args.target, &options)?;
    ui.report(&report, render::removed)?;
    Ok(error::SUCCESS)
}
