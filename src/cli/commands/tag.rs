//! `dsv tag`.

use clap::Args;
use dsv::Revision;
use dsv::ops::inspect;

use super::open_store;
use crate::cli::{Cli, error, ui::Ui};

#[derive(Debug, Args)]
pub(crate) struct TagArgs {
    #[arg(help = concat!("The revision to tag: ", revision_syntax!()))]
    revision: String,
    /// The tag.
    tag: String,
    /// Move the tag if it already names another version.
    #[arg(long)]
    force: bool,
}

pub(crate) fn run(cli: &Cli, ui: &Ui, args: &TagArgs) -> anyhow::Result<u8> {
    let mut store = open_store(cli)?;
    let revision = Revision::parse(&args.revision)?;
    let tag = &args.tag;
    let id = inspect::tag(&mut store, &revision, tag, args.force)?;
    if ui.json {
        ui.json(&serde_json::json!({ "dataset": revision.dataset, "tag": tag, "version": id }))?;
    } else {
        ui.line(format!(
            "Tagged {}@{} as {tag}",
            revision.dataset,
            id.short()
        ))?;
    }
    Ok(error::SUCCESS)
}
