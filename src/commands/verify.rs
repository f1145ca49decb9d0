//! `dsv verify`.

use clap::Args;
use dsv::ops::verify;

use super::open_store;
use crate::{Cli, error, render, ui::Ui};

#[derive(Debug, Args)]
pub(crate) struct VerifyArgs {
    /// Also reassemble every file of every version and check it against its id.
    #[arg(long)]
    full: bool,
}

pub(crate) fn run(cli: &Cli, ui: &Ui, args: &VerifyArgs) -> anyhow::Result<u8> {
    let store = open_store(cli)?;
    let options = verify::VerifyOptions { full: args.full };
    let report = verify::verify(&store, &options, &ui.reporter())?;
    ui.report(&report, render::verify)?;
    if !report.problems.is_empty() {
        return Ok(error::CORRUPT);
    }
    Ok(error::SUCCESS)
}
