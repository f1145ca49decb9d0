//! `dsv init`.

use std::path::PathBuf;

use clap::Args;
use dsv::Store;

use crate::{Cli, error, ui::Ui};

#[derive(Debug, Args)]
pub(crate) struct InitArgs {
    /// Where to create it.
    dir: Option<PathBuf>,
    /// Create it even inside another store's tree or one of its workspaces (refused
    /// otherwise: commands run there would stop finding the other store).
    #[arg(long)]
    force: bool,
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
    if !args.force {
        // The store `--store` names, when DIR is given apart from it: its workspaces count.
        let other = args.dir.as_ref().and(cli.store.as_deref());
        Store::check_not_nested(&dir, other)?;
    }
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
