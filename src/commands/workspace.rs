//! `dsv workspace ls|forget`: the directories this store committed from or checked out into.

use std::path::PathBuf;

use clap::Subcommand;

use super::open_store;
use crate::{Cli, error, render, ui::Ui};

#[derive(Debug, Subcommand)]
pub(crate) enum WorkspaceCommand {
    /// List workspaces: path, dataset, version, whether the directory still exists, when it
    /// was last committed or checked out.
    ///
    /// A record follows its directory (device and inode): a directory deleted and made again
    /// at the same path is not the old workspace, and shows as not existing.
    ///
    /// Examples:
    ///   dsv workspace ls
    ///   dsv workspace ls --json
    #[command(verbatim_doc_comment)]
    Ls,
    /// Forget a workspace (DIR need not exist): its version is no longer held by it, and its
    /// stat cache goes. The directory and its files are left as they are (but for the store link
    /// a checkout outside the store's tree wrote).
    ///
    /// Examples:
    ///   dsv workspace forget data/
    ///   dsv rm mnist@v1   # once no workspace holds it
    #[command(verbatim_doc_comment)]
    Forget {
        /// The directory.
        dir: PathBuf,
    },
}

pub(crate) fn run(cli: &Cli, ui: &Ui, command: &WorkspaceCommand) -> anyhow::Result<u8> {
    match command {
        WorkspaceCommand::Ls => {
            let store = open_store(cli)?;
            let workspaces = dsv::ops::workspace::list(&store)?;
            ui.report(workspaces.as_slice(), render::workspaces)?;
        }
        WorkspaceCommand::Forget { dir } => {
            let mut store = open_store(cli)?;
            let forgotten = dsv::ops::workspace::forget(&mut store, dir)?;
            if ui.json {
                ui.json(&forgotten)?;
            } else {
                ui.line(format!("Forgot the workspace {}", forgotten.path))?;
            }
        }
    }
    Ok(error::SUCCESS)
}
