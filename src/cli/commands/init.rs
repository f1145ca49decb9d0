//! `dsv init`.

use std::path::PathBuf;

use clap::Args;
use dsv::Store;

use crate::cli::{Cli, error, ui::Ui};

#[derive(Debug, Args)]
pub(crate) struct InitArgs {
    /// Where to create it.
    dir: Option<PathBuf>,
}

pub(crate) fn run(cli: &Cli, ui: &Ui, args: &InitArgs) -> anyhow::Result<u8> {
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => cli.store.clone().map_or_else(std::env::current_dir, Ok)?,
    };
    // `init X/.dsv` means the store at X/.dsv, not X/.dsv/.dsv.
    let dir = match dir.file_name() {
        Some(name) if name == dsv::store::STORE_DIR => dir
            .parent()
            .map(std::path::Path::to_path_buf)
            .unwrap_or(dir),
        _ => dir,
    };
    let store = Store::init(&dir)?;
    let root = std::fs::canonicalize(store.root())?;
    if ui.json {
        ui.json(&serde_json::json!({ "store": root }))?;
    } else {
        ui.line(format!(
            "Initialized an empty dsv store in {}",
            root.display()
        ))?;
    }
    Ok(error::SUCCESS)
}
