//! `dsv cache ls|prune|limit`: the local cache of versions and its size limit.

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
    /// Show or set the store's cache limit: every read that fetches from a remote (cat,
    /// export, mount, Python) then evicts the least recently used data a remote holds until
    /// the store's packs fit. Data no remote holds is never evicted.
    ///
    /// Examples:
    ///   dsv cache limit 10GiB
    ///   dsv cache limit
    ///   dsv cache limit --clear
    #[command(verbatim_doc_comment)]
    Limit {
        /// The limit (e.g. 10GiB, 500MB); `none` removes it. Without it, the limit is shown.
        #[arg(value_name = "SIZE", conflicts_with = "clear")]
        size: Option<String>,
        /// Remove the limit.
        #[arg(long)]
        clear: bool,
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
        CacheCommand::Limit { size, clear } => {
            let mut store = open_store(cli)?;
            let wanted = match size.as_deref() {
                _ if *clear => Some(None),
                Some(text) if text.trim().eq_ignore_ascii_case("none") => Some(None),
                Some(text) => Some(Some(parse_size(text).map_err(|reason| {
                    dsv::Error::InvalidSetting {
                        key: "cache.limit",
                        value: text.to_string(),
                        reason,
                    }
                })?)),
                None => None,
            };
            if let Some(limit) = wanted {
                cache::set_limit(&store, limit)?;
                // What is held over the new limit goes now, as a read would let it go.
                if let Some(limit) = limit {
                    cache::enforce_limit(&mut store, limit, &Default::default())?;
                }
            }
            let status = cache::limit_status(&store)?;
            ui.report(&status, render::cache_limit)?;
        }
    }
    Ok(error::SUCCESS)
}
