//! The read-only views of the store's history: `dsv diff`, `dsv log`, `dsv ls`, `dsv show`.

use clap::Args;
use dsv::Revision;
use dsv::ops::inspect;

use super::open_store;
use crate::{
    Cli, error, render,
    ui::{self, Ui},
};
use dsv::tree::{Change, FlatEntry};

#[derive(Debug, Args)]
pub(crate) struct DiffArgs {
    #[arg(help = concat!(
        "The older revision (or the only one: compared with its parent): ",
        revision_syntax!()
    ))]
    old: String,
    /// The newer revision (same syntax).
    new: Option<String>,
    /// Exit with 1 when they differ.
    #[arg(long)]
    exit_code: bool,
    /// One line per changed file with its size before and after, then a summary line.
    #[arg(long)]
    stat: bool,
    /// List a file moved (deleted at one path, added with the same content and mode at
    /// another) as a deletion and an addition, not as `R OLD -> NEW`.
    #[arg(long)]
    no_renames: bool,
}

/// Lists of changes longer than this end with a summary line.
const SUMMARY_AFTER: usize = 20;

pub(crate) fn diff(cli: &Cli, ui: &Ui, args: &DiffArgs) -> anyhow::Result<u8> {
    let store = open_store(cli)?;
    let (older, newer) = match &args.new {
        Some(new) => (Some(Revision::parse(&args.old)?), Revision::parse(new)?),
        None => (None, Revision::parse(&args.old)?),
    };
    if let (Some(older), Some(new)) = (&older, &args.new) {
        tags_for_datasets(&store, &args.old, new, older, &newer)?;
    }
    let sides = inspect::DiffSides::resolve(&store, older.as_ref(), &newer)?;
    // The changes stream: JSON element by element, text a block at a time.
    if ui.json {
        ui::print_raw(&format!(
            "{{\n  \"old\": {},\n  \"new\": {},\n  \"changes\": ",
            serde_json::to_string(&sides.old)?,
            serde_json::to_string(&sides.new)?
        ))?;
    }
    let lines = |block: &[Change]| {
        if args.stat {
            render::diff_stat_lines(block)
        } else if block.is_empty() {
            String::new()
        } else {
            format!("{}\n", render::changes(block, ""))
        }
    };
    let mut found = 0usize;
    let mut totals = render::DiffTotals::default();
    let mut listing = ui::Listing::new(ui, 1, lines);
    let visit = |change: Change| {
        found += 1;
        totals.add(&change);
        listing.push(change)
    };
    let walked = if args.no_renames {
        sides.each(&store, visit)
    } else {
        sides.each_with_renames(&store, visit)
    };
    let trees_read = listing.settle(walked)?.unwrap_or(0);
    let (rest, _) = listing.finish()?;
    if ui.json {
        ui::print_raw(&format!(",\n  \"trees_read\": {trees_read}\n}}\n"))?;
    } else {
        let mut text = lines(&rest);
        if found == 0 {
            text = "no differences\n".into();
        } else if args.stat || found > SUMMARY_AFTER {
            text.push_str(&totals.summary());
            text.push('\n');
        }
        ui.print(&text)?;
    }
    if args.exit_code && found > 0 {
        return Ok(error::DIFFERENCES);
    }
    Ok(error::SUCCESS)
}

/// `dsv diff v1 v2`, two tags where revisions were meant: when neither names a dataset and
/// one dataset has both tags, the error suggests `NAME@v1 NAME@v2`.
fn tags_for_datasets(
    store: &dsv::Store,
    old: &str,
    new: &str,
    older: &Revision,
    newer: &Revision,
) -> anyhow::Result<()> {
    let bare = |text: &str| !text.contains(['@', '~', '^']);
    let catalog = store.catalog();
    if !bare(old) || !bare(new) || catalog.has_dataset(&older.dataset)? {
        return Ok(());
    }
    for dataset in catalog.datasets_with_tag(&older.dataset)? {
        if catalog.tag(&dataset, &newer.dataset)?.is_some() {
            return Err(dsv::Error::DatasetNotFound {
                name: older.dataset.clone(),
                closest: Some(format!(
                    "{dataset}@{} {dataset}@{}",
                    older.dataset, newer.dataset
                )),
            }
            .into());
        }
    }
    Ok(())
}

#[derive(Debug, Args)]
pub(crate) struct LogArgs {
    #[arg(
        value_name = "REVISION",
        help = concat!(
            "The dataset (NAME: every version of it), or a revision (that version and its \
             ancestors, as `git log REV`): ",
            revision_syntax!()
        )
    )]
    dataset: String,
    /// Show at most N versions.
    #[arg(short = 'n', long, value_name = "N")]
    limit: Option<usize>,
    /// One line per version: short id, tags, first line of the message.
    #[arg(long)]
    oneline: bool,
}

pub(crate) fn log(cli: &Cli, ui: &Ui, args: &LogArgs) -> anyhow::Result<u8> {
    let store = open_store(cli)?;
    // A bare name lists the whole dataset; any other revision, its line back from there.
    let versions = if args.dataset.contains(['@', '~', '^', ':']) {
        inspect::log_from(&store, &Revision::parse(&args.dataset)?, args.limit)?
    } else {
        inspect::log(&store, &args.dataset, args.limit)?
    };
    if args.oneline {
        ui.report(versions.as_slice(), render::log_oneline)?;
    } else {
        ui.report(versions.as_slice(), render::log)?;
    }
    Ok(error::SUCCESS)
}

#[derive(Debug, Args)]
pub(crate) struct LsArgs {
    #[arg(
        value_name = "REV[:PATH]",
        help = concat!(
            "What to list: nothing for the datasets, REV or REV:PATH for the files of a version \
             (under PATH). REV is ",
            revision_syntax!()
        )
    )]
    target: Option<String>,
}

pub(crate) fn ls(cli: &Cli, ui: &Ui, args: &LsArgs) -> anyhow::Result<u8> {
    let store = open_store(cli)?;
    match &args.target {
        None => {
            let datasets = inspect::datasets(&store)?;
            ui.report(datasets.as_slice(), render::datasets)?;
        }
        Some(target) => {
            let (revision, path) = target.split_once(':').unwrap_or((target, ""));
            // Streamed: JSON element by element, text a table of a block of entries at a
            // time.
            let table = |block: &[FlatEntry]| format!("{}\n", render::entries(block));
            let mut listing = ui::Listing::new(ui, 0, table);
            let walked = inspect::ls_each(&store, &Revision::parse(revision)?, path, |entry| {
                listing.push(entry)
            });
            listing.settle(walked)?;
            let (rest, printed) = listing.finish()?;
            if ui.json {
                ui::print_raw("\n")?;
            } else if !rest.is_empty() || !printed {
                ui.line(render::entries(&rest))?;
            }
        }
    }
    Ok(error::SUCCESS)
}

#[derive(Debug, Args)]
pub(crate) struct ShowArgs {
    #[arg(help = concat!("The revision: ", revision_syntax!()))]
    revision: String,
    /// Also list where each file came from (imported versions): URL, archive member,
    /// ETag, VersionId, Last-Modified, size.
    #[arg(long)]
    provenance: bool,
}

pub(crate) fn show(cli: &Cli, ui: &Ui, args: &ShowArgs) -> anyhow::Result<u8> {
    let store = open_store(cli)?;
    let revision = Revision::parse(&args.revision)?;
    if args.provenance {
        let shown = inspect::show_provenance(&store, &revision)?;
        ui.report(&shown, render::show_provenance)?;
    } else {
        let info = inspect::show(&store, &revision)?;
        ui.report(&info, render::show)?;
    }
    Ok(error::SUCCESS)
}
