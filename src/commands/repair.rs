//! `dsv repair`: rebuild a lost or damaged catalog.

use dsv::Store;

use super::store_start;
use crate::{Cli, error, render, ui::Ui};

pub(crate) fn run(cli: &Cli, ui: &Ui) -> anyhow::Result<u8> {
    // The catalog may be gone: find the store without opening it.
    let root = Store::find_root(&store_start(cli)?)?;
    let report = dsv::ops::repair::repair(&root, &ui.reporter())?;
    ui.report(&report, render::repair)?;
    Ok(error::SUCCESS)
}
