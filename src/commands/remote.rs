//! `dsv remote add|ls|rm|order`: the remotes this store knows, and the order reads ask them in.

use clap::Subcommand;
use dsv::ops::sync;

use super::{open_store, parse_options};
use crate::{Cli, error, render, ui::Ui};

#[derive(Debug, Subcommand)]
pub(crate) enum RemoteCommand {
    /// Add a remote. Credentials are read from the environment (AWS_*, AZURE_*, GOOGLE_*)
    /// when it is used, never stored. It is read last (after the remotes added before it)
    /// unless --first.
    ///
    /// Examples:
    ///   dsv remote add origin s3://my-bucket/datasets --option aws_region=eu-west-1
    ///   dsv remote add origin gs://my-bucket/datasets
    ///   dsv remote add origin az://my-container/datasets
    ///   dsv remote add backup file:///mnt/nfs/dsv
    ///   dsv remote add near s3://bucket-near-the-gpus/datasets --first   # read from it first
    #[command(verbatim_doc_comment)]
    Add {
        /// Its name, e.g. origin.
        name: String,
        /// s3://bucket/prefix, gs://bucket/prefix, az://container/prefix or file:///path.
        url: String,
        /// A backend setting as KEY=VALUE (repeatable), e.g. aws_region=eu-west-1.
        #[arg(long = "option", value_name = "KEY=VALUE")]
        options: Vec<String>,
        /// Read from it before every other remote (default: after them).
        #[arg(long)]
        first: bool,
        /// Add it without checking that it answers and its bucket exists (one listing of
        /// its refs; a file:// remote is never contacted).
        #[arg(long)]
        no_check: bool,
    },
    /// List the remotes in read order (the order reads ask them for data this store lacks),
    /// with their URLs, options and refs as last fetched.
    ///
    /// Examples:
    ///   dsv remote ls
    ///   dsv remote ls --json
    #[command(verbatim_doc_comment)]
    Ls,
    /// Set the read order: checkout, pull, mount, cat and Python reads ask the remotes for
    /// data this store lacks in this order, and fall back to the next on a miss or a
    /// failure. The remotes named go first, in the order given; the others follow in the
    /// order they had. Push, pull and fetch still talk to the remote named, or the default.
    ///
    /// Examples:
    ///   dsv remote order near                # read from near first
    ///   dsv remote order near origin backup  # the whole order
    #[command(verbatim_doc_comment)]
    Order {
        /// The remotes to read first, first read first.
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Remove a remote from this store (nothing on the remote is deleted).
    ///
    /// Examples:
    ///   dsv remote rm backup
    #[command(verbatim_doc_comment)]
    Rm {
        /// The remote.
        name: String,
    },
}

pub(crate) fn run(cli: &Cli, ui: &Ui, command: &RemoteCommand) -> anyhow::Result<u8> {
    let mut store = open_store(cli)?;
    match command {
        RemoteCommand::Add {
            name,
            url,
            options,
            first,
            no_check,
        } => {
            if !*no_check {
                sync::check_remote(&store, name, url, &parse_options(options)?)?;
            }
            let record =
                sync::add_remote_placed(&mut store, name, url, &parse_options(options)?, *first)?;
            if ui.json {
                ui.json(&record)?;
            } else {
                let read = if *first { " (read first)" } else { "" };
                ui.line(format!(
                    "Added remote {} at {}{read}",
                    record.name, record.url
                ))?;
            }
        }
        RemoteCommand::Ls => {
            let listed = sync::list_remotes(&store)?;
            ui.report(listed.as_slice(), render::remotes)?;
        }
        RemoteCommand::Order { names } => {
            let order = sync::order_remotes(&mut store, names)?;
            if ui.json {
                ui.json(&order)?;
            } else {
                let names: Vec<&str> = order.iter().map(|r| r.name.as_str()).collect();
                ui.line(format!("Read order: {}", names.join(", ")))?;
            }
        }
        RemoteCommand::Rm { name } => {
            sync::remove_remote(&mut store, name)?;
            if ui.json {
                ui.json(&serde_json::json!({ "removed": name }))?;
            } else {
                ui.line(format!("Removed remote {name}"))?;
            }
        }
    }
    Ok(error::SUCCESS)
}
