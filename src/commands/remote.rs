//! `dsv remote add|ls|rm`: the remotes this store knows.

use clap::Subcommand;
use dsv::ops::sync;

use super::{open_store, parse_options};
use crate::{Cli, error, render, ui::Ui};

#[derive(Debug, Subcommand)]
pub(crate) enum RemoteCommand {
    /// Add a remote. Credentials are read from the environment (AWS_*, AZURE_*, GOOGLE_*)
    /// when it is used, never stored.
    ///
    /// Examples:
    ///   dsv remote add origin s3://my-bucket/datasets --option aws_region=eu-west-1
    ///   dsv remote add origin gs://my-bucket/datasets
    ///   dsv remote add origin az://my-container/datasets
    ///   dsv remote add backup file:///mnt/nfs/dsv
    #[command(verbatim_doc_comment)]
    Add {
        /// Its name, e.g. origin.
        name: String,
        /// s3://bucket/prefix, gs://bucket/prefix, az://container/prefix or file:///path.
        url: String,
        /// A backend setting as KEY=VALUE (repeatable), e.g. aws_region=eu-west-1.
        #[arg(long = "option", value_name = "KEY=VALUE")]
        options: Vec<String>,
    },
    /// List the remotes with their URLs, options and refs as last fetched.
    ///
    /// Examples:
    ///   dsv remote ls
    ///   dsv remote ls --json
    #[command(verbatim_doc_comment)]
    Ls,
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
        RemoteCommand::Add { name, url, options } => {
            let record = sync::add_remote(&mut store, name, url, &parse_options(options)?)?;
            if ui.json {
                ui.json(&record)?;
            } else {
                ui.line(format!("Added remote {} at {}", record.name, record.url))?;
            }
        }
        RemoteCommand::Ls => {
            let listed = sync::list_remotes(&store)?;
            ui.report(listed.as_slice(), render::remotes)?;
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
