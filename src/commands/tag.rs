//! `dsv tag`: name a version, list the names, delete one.

use clap::Args;
use dsv::Revision;
use dsv::ops::refs;

use super::open_store;
use crate::{Cli, error, render, ui::Ui};

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("mode").args(["list", "delete"]))]
pub(crate) struct TagArgs {
    #[arg(help = concat!(
        "The revision to tag: ",
        revision_syntax!(),
        ". With --list: the dataset whose tags to list; with -d: NAME@TAG (or NAME, then TAG)"
    ))]
    revision: Option<String>,
    /// The tag to give it (1 to 100 letters, digits, '.', '_', '-'; not `latest` or `HEAD`).
    tag: Option<String>,
    /// Move the tag if it already names another version.
    #[arg(long)]
    force: bool,
    /// List the tags (of one dataset, or of all) instead of making one.
    #[arg(short, long)]
    list: bool,
    /// Delete the tag (the version and its data stay).
    #[arg(short, long)]
    delete: bool,
    /// With -d: delete the tag on remote NAME (only if unchanged since read; its data stays
    /// until `dsv gc --remote`).
    #[arg(long, value_name = "NAME", requires = "delete")]
    remote: Option<String>,
}

/// `dsv tag`.
pub(crate) fn run(cli: &Cli, ui: &Ui, args: &TagArgs) -> anyhow::Result<u8> {
    let mut store = open_store(cli)?;
    if args.list {
        if args.tag.is_some() {
            anyhow::bail!(usage("--list takes at most one argument: the dataset"));
        }
        let tags = refs::tags(&store, args.revision.as_deref())?;
        ui.report(tags.as_slice(), render::tags)?;
        return Ok(error::SUCCESS);
    }
    let Some(revision) = &args.revision else {
        anyhow::bail!(usage(
            "give REV TAG to tag a version, --list to list tags, or -d NAME@TAG to delete one"
        ));
    };
    if args.delete {
        let (dataset, tag) = match (&args.tag, revision.split_once('@')) {
            (Some(tag), None) => (revision.as_str(), tag.as_str()),
            (None, Some((dataset, tag))) => (dataset, tag),
            _ => anyhow::bail!(usage("-d takes NAME@TAG (or NAME TAG)")),
        };
        if let Some(remote) = &args.remote {
            let report = dsv::ops::sync::remote_gc::remove_remote_refs(
                &mut store,
                remote,
                dataset,
                Some(tag),
            )?;
            ui.report(&report, render::removed_remote_refs)?;
            return Ok(super::gc::removed_code(&report));
        }
        let deleted = refs::delete_tag(&mut store, dataset, tag)?;
        if ui.json {
            ui.json(&deleted)?;
        } else {
            ui.line(format!(
                "Deleted tag {}@{} (was {})",
                deleted.dataset,
                deleted.tag,
                deleted.version.short()
            ))?;
        }
        return Ok(error::SUCCESS);
    }
    let Some(tag) = &args.tag else {
        anyhow::bail!(usage(
            "name the tag: `dsv tag REV TAG` (or --list, -d NAME@TAG)"
        ));
    };
    let revision = Revision::parse(revision)?;
    let mut options = refs::TagOptions::default();
    options.force = args.force;
    let id = refs::tag(&mut store, &revision, tag, &options)?;
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

fn usage(message: &str) -> error::Usage {
    error::Usage(message.to_string())
}
