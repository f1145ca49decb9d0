//! `dsv cache ls|prune`: the local cache of versions.

use clap::Subcommand;
use dsv::ops::cache;

use super::open_store;
use crate::{Cli, error, parse_size, render, ui::Ui};

#[derive(Debug, Subcommand)]
pub(crate) enum CacheCommand {
    /// Per version: bytes only it holds here, bytes shared, last used, pinned, in use, on
    /// which remotes.
    ///
    /// Examples:
    ///   dsv cache ls
    ///   dsv cache ls --json
    #[command(verbatim_doc_comment)]
    Ls,
    /// Evict versions a remote fully holds (least recently used first), then gc. Never
    /// deletes the only copy of data unless --allow-data-loss; never pinned or in-use data.
    ///
    /// Examples:
    ///   dsv cache prune --dry-run
    ///   dsv cache prune --older-than 30d --keep-last 2
    ///   dsv cache prune --max-size 50GB --dataset mnist
    #[command(verbatim_doc_comment)]
    Prune {
        /// Keep the newest N versions of each dataset.
        #[arg(long, default_value_t = 1, value_name = "N")]
        keep_last: usize,
        /// Only versions unused for this long (e.g. 30d).
        #[arg(long, value_name = "AGE", value_parser = humantime::parse_duration)]
        older_than: Option<std::time::Duration>,
        /// Evict until the chunks held here fit in SIZE (e.g. 50GB, 512MiB).
        #[arg(long, value_name = "SIZE", value_parser = parse_size)]
        max_size: Option<u64>,
        /// Only this dataset.
        #[arg(long, value_name = "NAME")]
        dataset: Option<String>,
        /// Remove versions no remote holds instead of skipping them (pins still hold).
        #[arg(long)]
        allow_data_loss: bool,
        /// Print what would be evicted; change nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

pub(crate) fn run(cli: &Cli, ui: &Ui, command: &CacheCommand) -> anyhow::Result<u8> {
    match command {
        CacheCommand::Ls => {
            let store = open_store(cli)?;
            let versions = cache::list(&store)?;
            ui.report(versions.as_slice(), render::cache)?;
        }
        CacheCommand::Prune {
            keep_last,
            older_than,
            max_size,
            dataset,
            allow_data_loss,
            dry_run,
        } => {
            let mut store = open_store(cli)?;
            let mut options = cache::PruneOptions::default();
            options.keep_last = *keep_last;
            options.older_than = *older_than;
            options.max_size = *max_size;
            options.dataset = dataset.clone();
            options.allow_data_loss = *allow_data_loss;
            options.dry_run = *dry_run;
            let report = cache::prune(&mut store, &options, &ui.reporter())?;
            ui.report(&report, render::prune)?;
        }
    }
    Ok(error::SUCCESS)
}
