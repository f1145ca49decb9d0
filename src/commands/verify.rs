//! `dsv verify`.

use clap::Args;
use dsv::ops::verify;

use super::open_store;
use crate::{Cli, error, render, ui::Ui};

#[derive(Debug, Args)]
pub(crate) struct VerifyArgs {
    /// Also reassemble every file of every version and check it against its id. With
    /// --remote: download every pack whole and check it against its id and index, and prove
    /// every file map of every ref against its file id.
    #[arg(long)]
    full: bool,
    /// Check remote NAME instead: each ref's whole closure is in its packs, and its packs
    /// check (first and last frame of each, or every byte with --full).
    #[arg(long, value_name = "NAME")]
    remote: Option<String>,
}

pub(crate) fn run(cli: &Cli, ui: &Ui, args: &VerifyArgs) -> anyhow::Result<u8> {
    if let Some(remote) = &args.remote {
        let mut store = open_store(cli)?;
        let mut options = dsv::ops::sync::remote_gc::RemoteVerifyOptions::default();
        options.full = args.full;
        let report =
            dsv::ops::sync::remote_gc::verify_remote(&mut store, remote, &options, &ui.reporter())?;
        ui.report(&report, render::verify_remote)?;
        if !report.problems.is_empty() {
            return Ok(error::CORRUPT);
        }
        return Ok(error::SUCCESS);
    }
    let store = open_store(cli)?;
    let options = verify::VerifyOptions { full: args.full };
    let report = verify::verify(&store, &options, &ui.reporter())?;
    ui.report(&report, render::verify)?;
    if !report.problems.is_empty() {
        return Ok(error::CORRUPT);
    }
    Ok(error::SUCCESS)
}
