//! `dsv mount`: a version as a read-only FUSE file system, in the foreground.

use std::path::PathBuf;

use clap::Args;

use super::open_store;
use crate::cli::{Cli, SelectArgs, error, render, ui::Ui};

#[derive(Debug, Args)]
pub(crate) struct MountArgs {
    #[arg(help = concat!("The revision: ", revision_syntax!()))]
    revision: String,
    /// An existing, empty directory to mount on.
    mountpoint: PathBuf,
    #[command(flatten)]
    select: SelectArgs,
    /// Threads serving file system requests.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=256))]
    threads: u16,
}

pub(crate) fn run(cli: &Cli, ui: &Ui, args: &MountArgs) -> anyhow::Result<u8> {
    let selection = args.select.selection()?;
    let engine = dsv::read::ReadEngine::new(open_store(cli)?, Default::default());
    let mut options = dsv::mount::MountOptions::default();
    options.threads = usize::from(args.threads);
    let mut shown = Ok(());
    let info = dsv::mount::mount(
        &engine,
        &args.revision,
        &selection,
        &args.mountpoint,
        &options,
        &mut |info| shown = ui.report(info, render::mounted),
    )?;
    shown?;
    if !ui.json {
        ui.line(format!("Unmounted {}", info.mountpoint.display()))?;
    }
    Ok(error::SUCCESS)
}
