//! `dsv shards`: which files each of N shards holds.

use std::path::PathBuf;

use clap::Args;

use super::{open_store, read_list};
use crate::cli::{Cli, error, render, ui::Ui};

#[derive(Debug, Args)]
pub(crate) struct ShardsArgs {
    #[arg(help = concat!("The revision: ", revision_syntax!()))]
    revision: String,
    /// How many shards.
    #[arg(value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    count: u32,
    /// Only files matching GLOB (repeatable).
    #[arg(long, value_name = "GLOB")]
    include: Vec<String>,
    /// Only the files listed in LIST (one path per line).
    #[arg(long, value_name = "LIST")]
    files_from: Option<PathBuf>,
}

pub(crate) fn run(cli: &Cli, ui: &Ui, args: &ShardsArgs) -> anyhow::Result<u8> {
    let mut selection = dsv::read::Selection::default();
    selection.include = args.include.clone();
    selection.files_from = args.files_from.as_deref().map(read_list).transpose()?;
    let engine = dsv::read::ReadEngine::new(open_store(cli)?, Default::default());
    let plans = dsv::read::shards(&engine, &args.revision, args.count, &selection)?;
    ui.report(plans.as_slice(), render::shards)?;
    Ok(error::SUCCESS)
}
