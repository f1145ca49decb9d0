//! `dsv shards`: which files each of N shards holds.

use std::path::PathBuf;

use clap::Args;

use super::{open_store, read_list};
use crate::{
    Cli, error, render,
    ui::{self, Ui},
};

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
    // The table names each shard's first and last path only; JSON streams every path as it
    // is read, never copied.
    let mut table = Vec::new();
    let mut shards = ui.json.then(|| ui::JsonArray::start(0));
    let mut failure = None;
    let mut each = |plan: dsv::read::ShardPlan, paths: &mut dyn Iterator<Item = &str>| {
        let Some(shards) = &mut shards else {
            let first = paths.next().map(str::to_string);
            let last = paths.last().map(str::to_string).or_else(|| first.clone());
            table.push(dsv::read::ShardPlan {
                paths: first.into_iter().chain(last).collect(),
                ..plan
            });
            return Ok(());
        };
        let write = || -> anyhow::Result<()> {
            shards.push_raw(&format!(
                "{{\n    \"index\": {},\n    \"files\": {},\n    \"bytes\": {},\n    \"paths\": ",
                plan.index, plan.files, plan.bytes
            ))?;
            let mut listed = ui::JsonArray::start(2);
            for path in paths {
                listed.push(&path)?;
            }
            listed.finish()?;
            ui::print_raw("\n  }")
        };
        write().map_err(|error| {
            failure = Some(error);
            dsv::Error::Interrupted
        })
    };
    let listed = dsv::read::shards_each(&engine, &args.revision, args.count, &selection, &mut each);
    if let Some(error) = failure {
        return Err(error);
    }
    listed?;
    match shards {
        Some(shards) => {
            shards.finish()?;
            ui::print_raw("\n")?;
        }
        None => ui.line(render::shards(&table))?,
    }
    Ok(error::SUCCESS)
}
