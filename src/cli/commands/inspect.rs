//! The read-only views of the store's history: `dsv diff`, `dsv log`, `dsv ls`, `dsv show`.

use clap::Args;
use dsv::Revision;
use dsv::ops::inspect;
use dsv::tree::{Change, ChangeKind, FlatEntry, FlatKind};
use indicatif::HumanBytes;

use super::open_store;
use crate::cli::{Cli, error, render, ui::Ui};

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
}

/// Lists of changes longer than this end with a summary line.
const SUMMARY_AFTER: usize = 20;

pub(crate) fn diff(cli: &Cli, ui: &Ui, args: &DiffArgs) -> anyhow::Result<u8> {
    let store = open_store(cli)?;
    let (older, newer) = match &args.new {
        Some(new) => (Some(Revision::parse(&args.old)?), Revision::parse(new)?),
        None => (None, Revision::parse(&args.old)?),
    };
    let report = inspect::diff(&store, older.as_ref(), &newer)?;
    if ui.json {
        ui.json(&report)?;
    } else if args.stat {
        ui.line(stat(&report.changes))?;
    } else {
        let mut text = render::changes(&report.changes, "no differences");
        if report.changes.len() > SUMMARY_AFTER {
            text.push('\n');
            text.push_str(&summary(&report.changes));
        }
        ui.line(text)?;
    }
    if args.exit_code && !report.changes.is_empty() {
        return Ok(error::DIFFERENCES);
    }
    Ok(error::SUCCESS)
}

/// Files (not directories) among `changes`: (added, modified, deleted, bytes before, bytes
/// after).
fn totals(changes: &[Change]) -> (usize, usize, usize, u64, u64) {
    let mut totals = (0, 0, 0, 0, 0);
    for change in changes {
        let is_dir = |e: &Option<FlatEntry>| e.as_ref().is_some_and(|e| e.kind == FlatKind::Dir);
        if is_dir(&change.old) || is_dir(&change.new) {
            continue;
        }
        match change.change {
            ChangeKind::Added => totals.0 += 1,
            ChangeKind::Modified => totals.1 += 1,
            ChangeKind::Deleted => totals.2 += 1,
        }
        totals.3 += change.old.as_ref().map_or(0, |e| e.size);
        totals.4 += change.new.as_ref().map_or(0, |e| e.size);
    }
    totals
}

/// "3 files changed: 1 added, 1 modified, 1 deleted; 1.2 MiB → 1.5 MiB".
fn summary(changes: &[Change]) -> String {
    let (added, modified, deleted, before, after) = totals(changes);
    let files = added + modified + deleted;
    format!(
        "{files} file{} changed: {added} added, {modified} modified, {deleted} deleted; {} → {}",
        if files == 1 { "" } else { "s" },
        HumanBytes(before),
        HumanBytes(after)
    )
}

/// `diff --stat`: each changed file with its sizes, then the summary.
fn stat(changes: &[Change]) -> String {
    if changes.is_empty() {
        return "no differences".into();
    }
    let rows: Vec<(String, String)> = changes
        .iter()
        .map(|c| {
            let size = |e: &Option<FlatEntry>| match e {
                None => "-".to_string(),
                Some(e) if e.kind == FlatKind::Dir => "dir".to_string(),
                Some(e) => HumanBytes(e.size).to_string(),
            };
            (
                c.path.clone(),
                format!("{} → {}", size(&c.old), size(&c.new)),
            )
        })
        .collect();
    let width = rows
        .iter()
        .map(|(p, _)| p.chars().count())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for (path, sizes) in rows {
        let pad = width - path.chars().count();
        out.push_str(&format!(" {path}{} | {sizes}\n", " ".repeat(pad)));
    }
    out.push_str(&summary(changes));
    out
}

#[derive(Debug, Args)]
pub(crate) struct LogArgs {
    /// The dataset.
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
    let versions = inspect::log(&store, &args.dataset, args.limit)?;
    if args.oneline {
        ui.report(versions.as_slice(), oneline)?;
    } else {
        ui.report(versions.as_slice(), render::log)?;
    }
    Ok(error::SUCCESS)
}

/// `log --oneline`: `<short id> (head, tag: v1) message`.
fn oneline(versions: &[inspect::VersionInfo]) -> String {
    let head = versions
        .first()
        .filter(|v| !v.off_head_line)
        .map(|v| v.record.id);
    versions
        .iter()
        .map(|v| {
            let mut marks: Vec<String> = Vec::new();
            if Some(v.record.id) == head {
                marks.push("head".into());
            }
            marks.extend(v.tags.iter().map(|t| format!("tag: {t}")));
            if v.removed_at.is_some() {
                marks.push("removed".into());
            }
            if v.off_head_line {
                marks.push("other line".into());
            }
            let marks = if marks.is_empty() {
                String::new()
            } else {
                format!(" ({})", marks.join(", "))
            };
            let message = v.record.version.message.lines().next().unwrap_or("");
            format!("{}{marks} {message}", v.record.id.short())
                .trim_end()
                .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
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
            let entries = inspect::ls(&store, &Revision::parse(revision)?, path)?;
            ui.report(entries.as_slice(), render::entries)?;
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
