//! Human-readable text for each report (the `--json` twin is the report itself).

use std::fmt::Write;
use std::time::{Duration, UNIX_EPOCH};

use indicatif::HumanBytes;

use dsv::catalog::{DatasetSummary, Pin};
use dsv::object::FileProvenance;
use dsv::ops::audit::AuditReport;
use dsv::ops::cache::{CachedVersion, PruneReport};
use dsv::ops::checkout::{Action, CheckoutPlan, CheckoutReport};
use dsv::ops::commit::CommitReport;
use dsv::ops::gc::GcReport;
use dsv::ops::import::ImportReport;
use dsv::ops::inspect::{ShownProvenance, VersionInfo};
use dsv::ops::lineage::LineageAuditReport;
use dsv::ops::rebase::{ConflictReason, RebaseReport, RebaseStatus, WorkspaceFollow};
use dsv::ops::retention::RemoveReport;
use dsv::ops::status::StatusReport;
use dsv::ops::sync::{
    CloneReport, CopyReport, FetchReport, HeadUpdate, PullReport, PushReport, RefCache,
    RemoteListing, Transfer,
};
use dsv::ops::verify::VerifyReport;
use dsv::tree::{Change, ChangeKind, FlatEntry, FlatKind};

/// `n` and a noun, singular for one: `count(1, "file")` is "1 file", `count(2, "file")`
/// "2 files", `count(0, "mismatch")` "0 mismatches".
pub fn count<N>(n: N, noun: &str) -> String
where
    N: std::fmt::Display + PartialEq + From<u8>,
{
    if n == N::from(1) {
        format!("{n} {noun}")
    } else {
        format!("{n} {}", plural(noun))
    }
}

/// A path (or symlink target) of a version as human output shows it, one per line: as it is,
/// unless it holds a control character (a newline would read as two paths, an escape
/// sequence would drive the terminal), a `"` or a `\`; then in double quotes with C escapes
/// (`\n`, `\t`, `\r`, `\a`, `\b`, `\f`, `\v`, `\"`, `\\`, and `\ooo` in octal for the
/// other control bytes), as `git ls-files` quotes a path. `--json` gives the exact name.
pub fn quoted_path(name: &str) -> std::borrow::Cow<'_, str> {
    if !name
        .chars()
        .any(|c| c.is_control() || c == '"' || c == '\\')
    {
        return std::borrow::Cow::Borrowed(name);
    }
    let mut out = String::with_capacity(name.len() + 2);
    out.push('"');
    for c in name.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => {
                let mut bytes = [0u8; 4];
                for byte in c.encode_utf8(&mut bytes).bytes() {
                    let _ = write!(out, "\\{byte:03o}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    std::borrow::Cow::Owned(out)
}

/// The plural of an English noun of this program's output (regular forms only).
fn plural(noun: &str) -> String {
    let consonant_y = noun.ends_with('y')
        && !noun
            .chars()
            .rev()
            .nth(1)
            .is_some_and(|c| "aeiou".contains(c));
    if consonant_y {
        format!("{}ies", &noun[..noun.len() - 1])
    } else if ["s", "x", "ch", "sh"].iter().any(|end| noun.ends_with(end)) {
        format!("{noun}es")
    } else {
        format!("{noun}s")
    }
}

/// A size in bytes for people: `1.50 MiB`.
fn size(bytes: u64) -> String {
    HumanBytes(bytes).to_string()
}

/// How a table column aligns its cells.
#[derive(Clone, Copy, PartialEq)]
enum Align {
    Left,
    Right,
}

/// A table for a terminal: each column as wide as its widest cell (in display columns, so
/// wide and combining characters align), two spaces between columns, numbers and sizes
/// right-aligned, no trailing spaces. Every table of the human output is one of these.
struct Table {
    indent: &'static str,
    align: Vec<Align>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table whose first row names its columns.
    fn new(columns: &[(&str, Align)]) -> Table {
        let mut table = Table::headless(&columns.iter().map(|c| c.1).collect::<Vec<_>>());
        table.row(columns.iter().map(|c| c.0.to_string()).collect());
        table
    }

    /// A table without a header row.
    fn headless(align: &[Align]) -> Table {
        Table {
            indent: "",
            align: align.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Every line starts with `indent`.
    fn indented(mut self, indent: &'static str) -> Table {
        self.indent = indent;
        self
    }

    fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The lines, joined by newlines (no newline at the end).
    fn render(&self) -> String {
        use unicode_width::UnicodeWidthStr;
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let mut widths = vec![0; columns];
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.width());
            }
        }
        let mut lines = Vec::with_capacity(self.rows.len());
        for row in &self.rows {
            let mut line = String::from(self.indent);
            for (i, cell) in row.iter().enumerate() {
                if i > 0 {
                    line.push_str("  ");
                }
                let pad = " ".repeat(widths[i] - cell.width());
                if self.align.get(i) == Some(&Align::Right) {
                    line.push_str(&pad);
                    line.push_str(cell);
                } else {
                    line.push_str(cell);
                    line.push_str(&pad);
                }
            }
            lines.push(line.trim_end().to_string());
        }
        lines.join("\n")
    }
}

/// RFC 3339 in UTC; times humantime cannot show (after the year 9999, as a remote's
/// provenance may claim) as raw seconds.
fn time(seconds: i64) -> String {
    const YEAR_10000: i64 = 253_402_300_800;
    if seconds >= YEAR_10000 {
        return format!("{seconds} s after the epoch");
    }
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(seconds.max(0) as u64))
        .to_string()
}

/// " (tag T)" after a new version's name, when it was tagged.
fn tag_suffix(tag: &Option<String>) -> String {
    tag.as_ref()
        .map(|t| format!(" (tag {t})"))
        .unwrap_or_default()
}

pub fn commit(r: &CommitReport) -> String {
    if !r.created {
        return format!(
            "Nothing changed: {} is still at {}",
            r.dataset,
            r.version.short()
        );
    }
    let tag = tag_suffix(&r.tag);
    format!(
        "Committed {}@{}{tag}: {}, {}\n  read {} ({}), {} unchanged; stored {}, {} in {}\n{}",
        r.dataset,
        r.version.short(),
        count(r.files, "file"),
        HumanBytes(r.bytes),
        count(r.ingest.files_read, "file"),
        HumanBytes(r.ingest.bytes_read),
        r.files_unchanged,
        count(r.ingest.new_chunks, "new chunk"),
        HumanBytes(r.ingest.stored_bytes),
        count(r.packs_written, "pack"),
        r.version
    )
}

pub fn checkout(r: &CheckoutReport) -> String {
    let mut out = format!(
        "Checked out {}{}@{} into {}: {}, {}\n  wrote {} ({}), deleted {}, {} already up to date",
        if r.partial { "part of " } else { "" },
        r.dataset,
        r.version.short(),
        r.dir.display(),
        count(r.files, "file"),
        HumanBytes(r.bytes),
        r.written,
        HumanBytes(r.bytes_written),
        r.deleted,
        r.unchanged
    );
    if r.carried > 0 {
        out.push_str(&format!(
            "\n  kept {} uncommitted change(s) that this version does not touch (`dsv status` lists them)",
            r.carried
        ));
    }
    if r.partial {
        out.push_str("\n  a partial checkout: not recorded as a workspace (status and commit see plain files)");
    }
    out
}

/// The most paths `dsv checkout --dry-run` lists (`--json` lists every one).
const PLAN_PATHS_SHOWN: usize = 100;

pub fn checkout_plan(p: &CheckoutPlan) -> String {
    let mut out = format!(
        "Would check out {}{}@{} into {}: {}, {}\n  write {} ({}), delete {}, {} already up to date",
        if p.partial { "part of " } else { "" },
        p.dataset,
        p.version.short(),
        p.dir.display(),
        count(p.files, "file"),
        HumanBytes(p.bytes),
        p.write,
        HumanBytes(p.bytes_to_write),
        p.delete,
        p.unchanged
    );
    if p.carried > 0 {
        out.push_str(&format!(
            "\n  keep {} uncommitted change(s) that this version does not touch",
            p.carried
        ));
    }
    for planned in p.paths.iter().take(PLAN_PATHS_SHOWN) {
        let action = match planned.action {
            Action::Write => "write",
            Action::Replace => "replace",
            Action::Delete => "delete",
            Action::DeleteTree => "delete tree",
            Action::Prune => "prune",
            Action::Carry => "keep yours",
            Action::Conflict => "CONFLICT",
        };
        out.push_str(&format!("\n  {action:<11} {}", planned.path));
    }
    if p.paths.len() > PLAN_PATHS_SHOWN {
        out.push_str(&format!(
            "\n  ... and {} more (--json lists every path)",
            p.paths.len() - PLAN_PATHS_SHOWN
        ));
    }
    if p.refused {
        out.push_str(&format!(
            "\nwould be refused: {} path(s) with uncommitted changes in the way (--force overwrites them)",
            p.conflicts
        ));
    }
    out.push_str("\nnothing was changed (dry run)");
    out
}

pub fn changes(changes: &[Change], none: &str) -> String {
    if changes.is_empty() {
        return none.to_string();
    }
    let mut out = String::new();
    for change in changes {
        let letter = match change.change {
            ChangeKind::Added => 'A',
            ChangeKind::Modified => 'M',
            ChangeKind::Deleted => 'D',
            ChangeKind::Renamed => 'R',
        };
        let entry = change.new.as_ref().or(change.old.as_ref());
        let suffix = if entry.is_some_and(|e| e.kind == FlatKind::Dir) {
            "/"
        } else {
            ""
        };
        let _ = writeln!(out, "{letter} {}{suffix}", change_path(change));
    }
    out.pop();
    out
}

/// A change's path as a listing shows it: `old -> new` for a rename.
fn change_path(change: &Change) -> String {
    match (&change.from, change.change) {
        (Some(from), ChangeKind::Renamed) => {
            format!("{} -> {}", quoted_path(from), quoted_path(&change.path))
        }
        _ => quoted_path(&change.path).into_owned(),
    }
}

/// Files (not directories) among the changes added: how many added, modified, deleted, and
/// their bytes before and after. Kept as a diff streams, for its summary line.
#[derive(Debug, Default, Clone, Copy)]
pub struct DiffTotals {
    added: usize,
    modified: usize,
    deleted: usize,
    renamed: usize,
    before: u64,
    after: u64,
}

impl DiffTotals {
    /// Counts `change` (a directory's change is not counted).
    pub fn add(&mut self, change: &Change) {
        let is_dir = |e: &Option<FlatEntry>| e.as_ref().is_some_and(|e| e.kind == FlatKind::Dir);
        if is_dir(&change.old) || is_dir(&change.new) {
            return;
        }
        match change.change {
            ChangeKind::Added => self.added += 1,
            ChangeKind::Modified => self.modified += 1,
            ChangeKind::Deleted => self.deleted += 1,
            ChangeKind::Renamed => self.renamed += 1,
        }
        self.before += change.old.as_ref().map_or(0, |e| e.size);
        self.after += change.new.as_ref().map_or(0, |e| e.size);
    }

    /// "3 files changed: 1 added, 1 modified, 1 deleted; 1.2 MiB → 1.5 MiB" (with
    /// ", 1 renamed" after "deleted" when files were renamed).
    pub fn summary(&self) -> String {
        let files = self.added + self.modified + self.deleted + self.renamed;
        let renamed = if self.renamed > 0 {
            format!(", {} renamed", self.renamed)
        } else {
            String::new()
        };
        format!(
            "{} changed: {} added, {} modified, {} deleted{renamed}; {} → {}",
            count(files, "file"),
            self.added,
            self.modified,
            self.deleted,
            size(self.before),
            size(self.after)
        )
    }
}

/// `diff --stat`'s lines for `changes` (a block of a streamed diff): each changed file with
/// its sizes, aligned within the block; the summary line follows the last block.
pub fn diff_stat_lines(changes: &[Change]) -> String {
    use unicode_width::UnicodeWidthStr;
    let rows: Vec<(String, String)> = changes
        .iter()
        .map(|c| {
            let size = |e: &Option<FlatEntry>| match e {
                None => "-".to_string(),
                Some(e) if e.kind == FlatKind::Dir => "dir".to_string(),
                Some(e) => size(e.size),
            };
            (
                change_path(c),
                format!("{} → {}", size(&c.old), size(&c.new)),
            )
        })
        .collect();
    let width = rows.iter().map(|(p, _)| p.width()).max().unwrap_or(0);
    let mut out = String::new();
    for (path, sizes) in rows {
        let pad = width - path.width();
        out.push_str(&format!(" {path}{} | {sizes}\n", " ".repeat(pad)));
    }
    out
}

/// `log --oneline`: `<short id> (head, tag: v1) message`.
pub fn log_oneline(versions: &[VersionInfo]) -> String {
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

/// `tag --list`: `NAME@TAG  SHORTID` per tag, aligned.
pub fn tags(tags: &[dsv::ops::refs::TagInfo]) -> String {
    if tags.is_empty() {
        return "no tags".into();
    }
    let mut table = Table::headless(&[Align::Left, Align::Left]);
    for t in tags {
        table.row(vec![format!("{}@{}", t.dataset, t.tag), t.version.short()]);
    }
    table.render()
}

pub fn status(r: &StatusReport) -> String {
    let at = match (&r.dataset, &r.version) {
        (Some(d), Some(v)) => format!("{d}@{}", v.short()),
        _ => "no version".into(),
    };
    let mut out = if r.changes.is_empty() {
        format!(
            "Clean: {} matches {at}",
            quoted_path(&r.dir.to_string_lossy())
        )
    } else {
        format!(
            "{} differs from {at}:\n{}",
            quoted_path(&r.dir.to_string_lossy()),
            changes(&r.changes, "")
        )
    };
    if let Some(moving) = &r.interrupted_rebase {
        out.push_str(&format!(
            "\na move to the new head (a rebase or pull) was interrupted while this workspace moved to {}@{}: some files above are at that version already; `dsv checkout {}@{} {}` (or the rebase run again) finishes the move",
            moving.dataset,
            moving.to.short(),
            moving.dataset,
            moving.to.short(),
            quoted_path(&r.dir.to_string_lossy())
        ));
    }
    let dataset = r.dataset.as_deref().unwrap_or("NAME");
    let versions = |n: u64| format!("{n} version{}", if n == 1 { "" } else { "s" });
    for head in &r.heads {
        let local = head.name == dataset;
        let line = match (head.ahead, head.behind) {
            (0, behind) if local => format!(
                "behind {} by {} (`dsv checkout {dataset} {}` brings it here)",
                head.name,
                versions(behind),
                r.dir.display()
            ),
            (0, behind) => format!(
                "behind {} by {} (`dsv pull {dataset}` brings them here)",
                head.name,
                versions(behind)
            ),
            (ahead, 0) if local => format!("ahead of {} by {}", head.name, versions(ahead)),
            (ahead, 0) => format!(
                "ahead of {} by {} (`dsv push` sends them)",
                head.name,
                versions(ahead)
            ),
            (ahead, behind) if local => format!(
                "diverged from {}: {} here, {} there",
                head.name,
                versions(ahead),
                versions(behind)
            ),
            (ahead, behind) => format!(
                "diverged from {}: {} here, {} there (`dsv pull {dataset} --rebase` replays yours onto theirs; where both changed a path, add --theirs or --ours to choose)",
                head.name,
                versions(ahead),
                versions(behind)
            ),
        };
        out.push('\n');
        out.push_str(&line);
    }
    out
}

pub fn log(versions: &[VersionInfo]) -> String {
    let mut out = String::new();
    for v in versions {
        let version = &v.record.version;
        let tags = if v.tags.is_empty() {
            String::new()
        } else {
            format!(" (tags: {})", v.tags.join(", "))
        };
        let removed = if v.removed_at.is_some() {
            " (removed)"
        } else {
            ""
        };
        let line = if v.off_head_line {
            " (not on the head's line)"
        } else {
            ""
        };
        let _ = writeln!(out, "version {}{tags}{removed}{line}", v.record.id);
        let _ = writeln!(out, "Author: {}", version.author);
        let _ = writeln!(out, "Date:   {}", time(version.time));
        let _ = writeln!(
            out,
            "Files:  {}, {}",
            count(version.files, "file"),
            HumanBytes(version.bytes)
        );
        if !version.message.is_empty() {
            let _ = writeln!(out);
            for line in version.message.lines() {
                let _ = writeln!(out, "    {line}");
            }
        }
        let _ = writeln!(out);
    }
    out.trim_end().to_string()
}

pub fn show(v: &VersionInfo) -> String {
    let version = &v.record.version;
    let mut out = String::new();
    let _ = writeln!(out, "version  {}", v.record.id);
    let _ = writeln!(out, "dataset  {}", version.dataset);
    let _ = writeln!(
        out,
        "parent   {}",
        version
            .parent
            .map(|p| p.to_hex())
            .unwrap_or_else(|| "(none)".into())
    );
    let _ = writeln!(
        out,
        "tags     {}",
        if v.tags.is_empty() {
            "(none)".into()
        } else {
            v.tags.join(", ")
        }
    );
    let _ = writeln!(out, "tree     {}", version.tree);
    let _ = writeln!(out, "files    {}", version.files);
    let _ = writeln!(
        out,
        "bytes    {} ({})",
        version.bytes,
        HumanBytes(version.bytes)
    );
    let _ = writeln!(out, "author   {}", version.author);
    let _ = writeln!(out, "date     {}", time(version.time));
    let _ = writeln!(out, "source   {}", version.source);
    let _ = write!(out, "message  {}", version.message.trim_end());
    out
}

pub fn datasets(datasets: &[DatasetSummary]) -> String {
    if datasets.is_empty() {
        return "no datasets yet: `dsv commit DIR --dataset NAME` makes one".into();
    }
    let mut table = Table::new(&[
        ("DATASET", Align::Left),
        ("VERSIONS", Align::Right),
        ("FILES", Align::Right),
        ("SIZE", Align::Right),
        ("HEAD", Align::Left),
    ]);
    for d in datasets {
        table.row(vec![
            d.name.clone(),
            d.versions.to_string(),
            d.files.to_string(),
            size(d.bytes),
            d.head.map(|h| h.short()).unwrap_or_else(|| "-".into()),
        ]);
    }
    table.render()
}

pub fn entries(entries: &[FlatEntry]) -> String {
    let mut table = Table::headless(&[Align::Left, Align::Right, Align::Left]);
    for e in entries {
        let (kind, suffix) = match &e.kind {
            FlatKind::File { executable: false } => ('-', String::new()),
            FlatKind::File { executable: true } => ('x', String::new()),
            FlatKind::Dir => ('d', "/".to_string()),
            FlatKind::Symlink { target } => ('l', format!(" -> {}", quoted_path(target))),
        };
        table.row(vec![
            kind.to_string(),
            size(e.size),
            format!("{}{suffix}", quoted_path(&e.path)),
        ]);
    }
    table.render()
}

pub fn repair(r: &dsv::ops::repair::RepairReport) -> String {
    let mut out = format!(
        "Rebuilt the catalog of {}: {}, {}, {}; restored {}, {}, {}, {}, {} from the ref log",
        r.store.display(),
        count(r.packs, "pack"),
        count(r.objects, "object"),
        count(r.versions, "version"),
        count(r.heads, "head"),
        count(r.tags, "tag"),
        count(r.remotes, "remote"),
        count(r.pins, "pin"),
        count(r.removed, "removal")
    );
    if let Some(old) = &r.old_catalog {
        let _ = write!(out, "\nThe old catalog is kept as {}", old.display());
    }
    for pack in &r.damaged_packs {
        let _ = write!(out, "\nwarning: damaged pack not indexed: {pack}");
    }
    for problem in &r.unreadable_deltas {
        let _ = write!(out, "\nwarning: a delta frame does not read: {problem}");
    }
    for copy in &r.copies_passed_over {
        let _ = write!(out, "\nnote: several copies of {copy}");
    }
    for pack in &r.packs_passed_over {
        let _ = write!(
            out,
            "\nnote: pack not indexed, every object it holds is indexed from another copy: {pack}"
        );
    }
    if !r.missing_versions.is_empty() {
        let _ = write!(
            out,
            "\nwarning: the ref log names {} no pack holds: {}",
            count(r.missing_versions.len(), "version"),
            r.missing_versions.join(", ")
        );
    }
    if !r.ref_log_bad_lines.is_empty() {
        let _ = write!(
            out,
            "\nwarning: {} did not parse (a line torn by a crash is harmless)",
            count(r.ref_log_bad_lines.len(), "ref log line")
        );
    }
    for refused in &r.ref_log_refused_lines {
        let place = match refused.line {
            Some(line) => format!("{} line {line}", refused.file),
            None => format!("a row of the old {}", refused.file),
        };
        let _ = write!(
            out,
            "\nwarning: {place} refused, not restored: {}",
            refused.reason
        );
    }
    if r.remotes > 0 {
        out.push_str("\nRun `dsv fetch` to learn the remotes' contents again");
    }
    out
}

pub fn verify(r: &VerifyReport) -> String {
    let mut out = format!(
        "Checked {} ({}), {}, {}",
        count(r.packs, "pack"),
        HumanBytes(r.pack_bytes),
        count(r.objects, "object"),
        count(r.versions, "version")
    );
    if !r.unreferenced_packs.is_empty() {
        let _ = write!(
            out,
            "\n{} not in the catalog (left by an interrupted commit, transfer or gc; gc deletes them once older than its grace period, unless they hold versions the ref log names)",
            count(r.unreferenced_packs.len(), "pack file")
        );
    }
    if !r.unrecorded_versions.is_empty() {
        let _ = write!(
            out,
            "\n{} in those packs named by the ref log but not recorded (a commit killed before it finished, or a catalog restored from an older copy): gc keeps them; `dsv repair` records them",
            count(r.unrecorded_versions.len(), "version")
        );
    }
    if r.files_rehashed > 0 {
        let _ = write!(
            out,
            "\n{} ({}) reassembled and hashed whole",
            count(r.files_rehashed, "file"),
            HumanBytes(r.bytes_rehashed)
        );
    }
    if r.files_on_remotes > 0 {
        let _ = write!(
            out,
            "\n{} on a remote only (fetched when a checkout needs them)",
            count(r.files_on_remotes, "file")
        );
    }
    if !r.unused_unreadable_deltas.is_empty() {
        let _ = write!(
            out,
            "\nunused and unreadable: {} (their chunks are read from other copies)",
            count(r.unused_unreadable_deltas.len(), "delta frame")
        );
    }
    if r.problems.is_empty() {
        out.push_str("\nThe store is consistent.");
    } else {
        let _ = write!(out, "\n{}:", count(r.problems.len(), "problem"));
        for p in &r.problems {
            let _ = write!(out, "\n  {p}");
        }
    }
    out
}

fn transfer(t: &Transfer, verb: &str) -> String {
    format!(
        "{verb} {} in {}, {}",
        HumanBytes(t.bytes),
        count(t.packs, "pack"),
        count(t.requests, "request")
    )
}

fn ref_label(dataset: &str, tag: Option<&str>) -> String {
    match tag {
        Some(tag) => format!("{dataset}@{tag}"),
        None => dataset.to_string(),
    }
}

pub fn remotes(remotes: &[RemoteListing]) -> String {
    if remotes.is_empty() {
        return "no remotes; add one with `dsv remote add origin URL`".into();
    }
    // One table, so the refs' versions line up across remotes.
    let mut table = Table::headless(&[Align::Left, Align::Left]);
    for record in remotes {
        let mut url = record.url.clone();
        for (key, value) in &record.options {
            let _ = write!(url, " {key}={value}");
        }
        table.row(vec![record.name.clone(), url]);
        for r in &record.refs {
            table.row(vec![
                format!(
                    "  {}/{}",
                    record.name,
                    ref_label(&r.dataset, r.tag.as_deref())
                ),
                r.version.short(),
            ]);
        }
    }
    table.render()
}

pub fn push(r: &PushReport) -> String {
    let mut table = Table::headless(&[Align::Left, Align::Left, Align::Left]);
    for pushed in &r.refs {
        let previous = pushed
            .previous
            .map(|p| format!("{}..", p.short()))
            .unwrap_or_default();
        table.row(vec![
            format!(
                "{}/{}",
                r.remote,
                ref_label(&pushed.dataset, pushed.tag.as_deref())
            ),
            format!("{previous}{}", pushed.version.short()),
            pushed.status.to_string(),
        ]);
    }
    // A dataset refused: its local version against the remote's head (the error and its
    // hint follow on stderr).
    for refused in r.datasets.iter().filter(|d| d.refused()) {
        table.row(vec![
            format!("{}/{}", r.remote, refused.dataset),
            refused.version.short(),
            match refused.previous {
                Some(head) => format!(
                    "refused ({}; the remote's head is {})",
                    refused.status,
                    head.short()
                ),
                None => format!("refused ({})", refused.status),
            },
        ]);
    }
    let mut out = table.render();
    if !out.is_empty() {
        out.push('\n');
    }
    if r.datasets.is_empty() {
        out.push_str("nothing to push: no dataset has a version yet\n");
    } else if r.datasets.len() > 1 {
        let of = |status: &str| r.datasets.iter().filter(|d| d.status == status).count();
        let _ = writeln!(
            out,
            "{}: {} pushed, {} up to date, {} refused",
            count(r.datasets.len(), "dataset"),
            of("pushed"),
            of("up-to-date"),
            r.refused
        );
    }
    out.push_str(&transfer(&r.transfer, "uploaded"));
    out
}

pub fn copy(r: &CopyReport) -> String {
    let mut table = Table::headless(&[Align::Left, Align::Left, Align::Left]);
    for moved in &r.refs {
        let previous = moved
            .previous
            .filter(|p| *p != moved.version)
            .map(|p| format!("{}..", p.short()))
            .unwrap_or_default();
        table.row(vec![
            format!(
                "{}/{}",
                r.to,
                ref_label(&moved.dataset, moved.tag.as_deref())
            ),
            format!("{previous}{}", moved.version.short()),
            moved.status.to_string(),
        ]);
    }
    let mut out = table.render();
    if !out.is_empty() {
        out.push('\n');
    }
    let p = &r.planned;
    if r.dry_run {
        if p.objects == 0 {
            let _ = writeln!(out, "{} already holds everything: nothing to copy", r.to);
        } else {
            let _ = writeln!(
                out,
                "{} lacks {} ({}): would copy {} whole and {} from {} ({})",
                r.to,
                count(p.objects, "object"),
                count(p.versions, "version"),
                count(p.whole_packs, "pack"),
                count(p.frames, "frame"),
                count(p.partial_packs, "partly needed pack"),
                HumanBytes(p.bytes),
            );
        }
        let _ = write!(
            out,
            "nothing written, no ref moved (--dry-run); {} to {}, {} to {}",
            count(r.transfer.requests, "request"),
            r.to,
            count(r.source_requests, "request"),
            r.from
        );
        return out;
    }
    if p.objects == 0 {
        let _ = writeln!(out, "{} already holds everything: nothing copied", r.to);
    } else {
        let _ = writeln!(
            out,
            "{} lacked {} ({}): {} copied whole ({} server-side), {} from {}",
            r.to,
            count(p.objects, "object"),
            count(p.versions, "version"),
            count(p.whole_packs, "pack"),
            p.server_side,
            count(p.frames, "frame"),
            count(p.partial_packs, "partly needed pack"),
        );
    }
    let _ = write!(
        out,
        "{}; {} to {}",
        transfer(&r.transfer, "wrote"),
        count(r.source_requests, "request"),
        r.from
    );
    out
}

pub fn fetched(r: &PullReport) -> String {
    let cache = match r.ref_cache {
        RefCache::Hit => "ref unchanged on the remote (cache hit)",
        RefCache::Refresh => "ref refreshed from the remote",
        RefCache::NotARef => "version named by id",
    };
    format!(
        "{}/{}@{}: {cache}; {}",
        r.remote,
        r.dataset,
        r.version.short(),
        transfer(&r.transfer, "downloaded")
    )
}

pub fn pull(r: &PullReport) -> String {
    if let (Some(plan), None) = (&r.plan, &r.rebase) {
        return pull_plan(plan);
    }
    if let Some(rebase) = &r.rebase {
        return format!("{}\n{}", fetched(r), self::rebase(rebase));
    }
    let head = match r.head {
        Some(HeadUpdate::Moved) => format!("{} is now at {}", r.dataset, r.version.short()),
        Some(HeadUpdate::UpToDate) => format!("{} is already at {}", r.dataset, r.version.short()),
        _ => format!(
            "{d}'s local head was kept: it has versions {v} lacks. To combine them: `dsv pull {d} --rebase` replays your versions onto {v} when they changed other paths; or `dsv checkout {d}@{v} DIR`, bring your changes into DIR, then `dsv commit` in DIR (the new version descends from {v}) and `dsv push`; or take theirs with `dsv reset {d} {v}`",
            d = r.dataset,
            v = r.version.short()
        ),
    };
    let mut out = format!("{}\n{head}", fetched(r));
    if let Some(workspace) = &r.workspace {
        out.push('\n');
        out.push_str(&workspace_follow(workspace, &r.dataset));
    }
    out
}

/// `pull --dry-run`: what a pull would do, nothing downloaded.
fn pull_plan(p: &dsv::ops::sync::pull::PullPlan) -> String {
    use dsv::ops::sync::pull::TagAction;
    let cache = match p.ref_cache {
        RefCache::Hit => "ref unchanged since fetched",
        RefCache::Refresh => "a pull would fetch refs and metadata first",
        RefCache::NotARef => "version named by id",
    };
    let mut out = format!(
        "{}/{}@{}: {cache}\n",
        p.remote,
        p.dataset,
        p.version.short()
    );
    let v = p.version.short();
    let head = match p.head {
        Some(HeadUpdate::Moved) => format!("{} would move to {v}", p.dataset),
        Some(HeadUpdate::UpToDate) => format!("{} is already at {v}", p.dataset),
        Some(HeadUpdate::Diverged) => format!(
            "{}'s local head would be kept: it has versions {v} lacks (`--rebase` replays them)",
            p.dataset
        ),
        None => format!(
            "{}'s head: known once {v}'s metadata is here (`dsv fetch --remote {}`)",
            p.dataset, p.remote
        ),
    };
    let _ = writeln!(out, "{head}");
    match (p.missing_objects, p.missing_bytes) {
        (Some(0), _) => out.push_str("would download no chunk: all here\n"),
        (Some(objects), Some(bytes)) => {
            let _ = writeln!(
                out,
                "would download {} ({} in the remote's frames as last recorded)",
                count(objects, "chunk"),
                HumanBytes(bytes)
            );
        }
        _ => out.push_str("chunks to download: known once the metadata is here\n"),
    }
    for tag in &p.tags {
        let action = match tag.action {
            TagAction::Copy => "would be copied",
            TagAction::Kept => "kept (a local tag has the name)",
        };
        let _ = writeln!(
            out,
            "  tag {}@{} ({}): {action}",
            p.dataset,
            tag.tag,
            tag.version.short()
        );
    }
    let _ = write!(
        out,
        "nothing downloaded or changed (--dry-run); {}",
        count(p.requests, "request")
    );
    out
}

/// What happened to the workspace of the current directory when the head moved.
fn workspace_follow(w: &WorkspaceFollow, dataset: &str) -> String {
    let dir = w.dir.display();
    match w.status {
        "moved" => format!("workspace {dir} now holds {dataset}@{}", w.version.short()),
        "would-move" => format!("workspace {dir} would be checked out at the new head"),
        _ => format!(
            "workspace {dir} was left at {dataset}@{}: it has {} uncommitted change(s) (`dsv status` lists them; `dsv checkout {dataset} {dir}` moves it, keeping them where the new head did not change those paths; a commit there before that would replace the rebased head)",
            w.version.short(),
            w.changes
        ),
    }
}

fn conflict_side(change: Option<ChangeKind>) -> &'static str {
    match change {
        None => "unchanged",
        Some(ChangeKind::Added) => "added",
        Some(ChangeKind::Modified) => "modified",
        Some(ChangeKind::Deleted) => "deleted",
        Some(ChangeKind::Renamed) => "renamed",
    }
}

pub fn rebase(r: &RebaseReport) -> String {
    let would = if r.dry_run {
        " (dry run: nothing changed)"
    } else {
        ""
    };
    let mut out = String::new();
    match r.status {
        RebaseStatus::UpToDate => {
            let _ = write!(
                out,
                "{} already holds {} ({}): nothing to rebase",
                r.dataset,
                r.onto,
                r.onto_version.short()
            );
        }
        RebaseStatus::FastForward => {
            let verb = if r.dry_run { "would move" } else { "moved" };
            let _ = write!(
                out,
                "{} {verb} forward to {} ({}): no local versions to replay{would}",
                r.dataset,
                r.onto,
                r.onto_version.short()
            );
        }
        RebaseStatus::Rebased => {
            let verb = if r.dry_run {
                "would replay"
            } else {
                "replayed"
            };
            let kept = r.replayed.iter().filter(|p| p.kept).count();
            let _ = writeln!(
                out,
                "{verb} {kept} local version(s) of {} onto {} ({}){would}",
                r.dataset,
                r.onto,
                r.onto_version.short()
            );
            for c in &r.resolved {
                let side = match c.resolved {
                    Some(dsv::ops::rebase::Side::Ours) => "kept ours",
                    _ => "took theirs",
                };
                let _ = writeln!(
                    out,
                    "  {side}: {} ({} here, {} there)",
                    quoted_path(&c.path),
                    conflict_side(c.ours),
                    conflict_side(c.theirs)
                );
            }
            for step in &r.replayed {
                let to = match (&step.version, step.kept) {
                    (Some(id), _) => id.short(),
                    (None, true) => "(new)".into(),
                    (None, false) => "(dropped: already there)".into(),
                };
                let message = step.message.lines().next().unwrap_or("");
                let _ = writeln!(out, "  {} -> {to}  {message}", step.from.short());
            }
            match &r.head {
                Some(head) if !r.dry_run => {
                    let _ = write!(
                        out,
                        "{} is now at {}; `dsv push` sends the new versions",
                        r.dataset,
                        head.short()
                    );
                }
                _ => {
                    let _ = write!(out, "run it again without --dry-run to make them");
                }
            }
        }
        RebaseStatus::Conflict => {
            let within = r
                .conflict_in
                .map(|id| format!(" (replaying {})", id.short()))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "{} and {} ({}) changed the same paths{within}; nothing was changed:",
                r.dataset,
                r.onto,
                r.onto_version.short()
            );
            let mut table = Table::headless(&[Align::Left, Align::Left]);
            for c in &r.conflicts {
                let detail = match c.reason {
                    ConflictReason::BothChanged => format!(
                        "{} here, {} there",
                        conflict_side(c.ours),
                        conflict_side(c.theirs)
                    ),
                    ConflictReason::FileAndDirectory => {
                        "a file on one side, entries below it on the other".into()
                    }
                };
                table.row(vec![format!("  {}", quoted_path(&c.path)), detail]);
            }
            out.push_str(table.render().trim_end());
        }
    }
    if let Some(workspace) = &r.workspace {
        out.push('\n');
        out.push_str(&workspace_follow(workspace, &r.dataset));
    }
    out
}

pub fn fetch(r: &FetchReport) -> String {
    let mut table = Table::headless(&[Align::Left, Align::Left]);
    for reference in &r.refs {
        table.row(vec![
            format!(
                "{}/{}",
                r.remote,
                ref_label(&reference.dataset, reference.tag.as_deref())
            ),
            reference.version.short(),
        ]);
    }
    let mut out = table.render();
    if !out.is_empty() {
        out.push('\n');
    }
    let _ = write!(
        out,
        "{} ({} changed), {}; {}",
        count(r.refs.len(), "ref"),
        r.changed_refs,
        count(r.new_packs, "new pack"),
        transfer(&r.transfer, "downloaded")
    );
    out
}

pub fn clone(r: &CloneReport) -> String {
    let mut out = if r.existing {
        format!(
            "{} is a clone of {} already (made earlier or by another process at the same time); left as it is (`dsv fetch` updates it)\n",
            r.store.display(),
            r.url
        )
    } else {
        format!("Cloned {} into {}\n", r.url, r.store.display())
    };
    let mut table = Table::headless(&[Align::Left, Align::Left]).indented("  ");
    for (dataset, version) in &r.datasets {
        table.row(vec![dataset.clone(), version.short()]);
    }
    if !r.datasets.is_empty() {
        out.push_str(&table.render());
        out.push('\n');
    }
    out.push_str(&transfer(&r.transfer, "downloaded metadata:"));
    out
}

pub fn audit(r: &AuditReport) -> String {
    let short = |id: Option<dsv::ObjectId>| id.map_or_else(|| "-".to_string(), |id| id.short());
    let size = |s: Option<u64>| s.map_or_else(|| "-".to_string(), |s| HumanBytes(s).to_string());
    let mut out = if r.identical {
        format!(
            "{} is identical to {}@{} ({}, {})",
            r.dir.display(),
            r.dataset,
            r.version.short(),
            count(r.files, "file"),
            HumanBytes(r.bytes)
        )
    } else {
        format!(
            "{} differs from {}@{}: {}",
            r.dir.display(),
            r.dataset,
            r.version.short(),
            count(r.mismatches.len(), "mismatch")
        )
    };
    for m in &r.mismatches {
        let letter = match m.change {
            ChangeKind::Added => 'A',
            ChangeKind::Modified => 'M',
            ChangeKind::Deleted => 'D',
            ChangeKind::Renamed => 'R',
        };
        let _ = write!(
            out,
            "\n{letter} {}  expected {} ({}), found {} ({})",
            quoted_path(&m.path),
            short(m.expected),
            size(m.expected_size),
            short(m.actual),
            size(m.actual_size)
        );
    }
    let how = if r.full {
        "every file re-hashed".to_string()
    } else {
        format!(
            "{} hashed, the rest vouched for by the stat cache",
            count(r.files_hashed, "file")
        )
    };
    let _ = write!(
        out,
        "\n  version {} ({}); {how}; dsv {} at {}, {:.2} s",
        r.version,
        r.claimed_by,
        r.dsv_version,
        time(r.audited_at),
        r.seconds
    );
    out
}

pub fn lineage_audit(r: &LineageAuditReport) -> String {
    let failed = r.checks.iter().filter(|c| !c.ok).count();
    let loader = r
        .loader
        .as_deref()
        .map_or_else(String::new, |l| format!(" ({l})"));
    let mut out = if r.proven {
        let samples = match (r.samples_proven, r.samples_seen) {
            (true, Some(seen)) => format!(", {} proven", count(seen, "sample")),
            (false, Some(seen)) => format!(", {} (count not proven)", count(seen, "sample")),
            _ => String::new(),
        };
        format!(
            "{} is proven: {}@{}{loader}{samples}",
            r.lineage.display(),
            r.dataset,
            r.version.short()
        )
    } else {
        format!(
            "{} does not match: {}@{}{loader}, {} failed",
            r.lineage.display(),
            r.dataset,
            r.version.short(),
            count(failed, "check")
        )
    };
    for c in &r.checks {
        let mark = if c.ok { "ok  " } else { "FAIL" };
        let _ = write!(out, "\n{mark} {:<9} {}", c.check, c.detail);
    }
    let _ = write!(
        out,
        "\n  version {}; dsv {} at {}, {:.2} s",
        r.version,
        r.dsv_version,
        time(r.audited_at),
        r.seconds
    );
    out
}

pub fn gc(r: &GcReport) -> String {
    let verb = if r.dry_run { "Would delete" } else { "Deleted" };
    let mut out = format!(
        "{verb} {}, repack {} and remove {}: {} freed",
        count(r.delete.len(), "pack"),
        r.repack.len(),
        count(
            r.orphans.iter().filter(|o| o.deleted).count(),
            "unnamed pack file"
        ),
        HumanBytes(r.bytes_freed.max(0) as u64)
    );
    let d = &r.deltas;
    if d.rewritten_as_deltas > 0 || d.rewritten_whole > 0 {
        let _ = write!(
            out,
            "\n  {} {} as deltas ({} in {}), {} whole",
            if r.dry_run { "would store" } else { "stored" },
            count(d.rewritten_as_deltas as usize, "chunk"),
            HumanBytes(d.delta_raw_bytes),
            HumanBytes(d.delta_stored_bytes),
            count(d.rewritten_whole as usize, "chunk"),
        );
    }
    for version in &r.leased_versions {
        let _ = write!(
            out,
            "\n  keep version {} whole: a running reader (a mount, an export, a training job) holds a lease on it",
            version.short()
        );
    }
    for p in &r.delete {
        let _ = write!(
            out,
            "\n  delete {} ({})",
            p.pack.short(),
            HumanBytes(p.bytes)
        );
    }
    for p in &r.repack {
        let _ = write!(
            out,
            "\n  repack {} ({}, {} live)",
            p.pack.short(),
            HumanBytes(p.bytes),
            HumanBytes(p.live_bytes)
        );
    }
    for o in &r.orphans {
        let what = if o.deleted {
            "delete"
        } else if o.unreadable {
            "keep (not a readable pack: its contents cannot be accounted for)"
        } else if o.holds_versions {
            "keep (it holds versions the ref log names but the catalog lacks: run `dsv repair`)"
        } else {
            "keep (younger than the grace period)"
        };
        let _ = write!(
            out,
            "\n  {what} unnamed {} ({})",
            o.name,
            HumanBytes(o.bytes)
        );
    }
    let _ = write!(
        out,
        "\n{}, {} removed, {}",
        count(r.live_versions, "live version"),
        r.removed_versions,
        count(r.live_objects, "live object")
    );
    out
}

pub fn removed(r: &RemoveReport) -> String {
    let mut out = format!(
        "Removed {} of {}; run `dsv gc` to free the space",
        count(r.removed.len(), "version"),
        r.dataset
    );
    if !r.tags_dropped.is_empty() {
        let _ = write!(out, "\n  dropped tags: {}", r.tags_dropped.join(", "));
    }
    out
}

pub fn pins(pins: &[Pin]) -> String {
    if pins.is_empty() {
        return "no pins".into();
    }
    let mut table = Table::new(&[
        ("VERSION", Align::Left),
        ("UNTIL", Align::Left),
        ("REASON", Align::Left),
    ]);
    for p in pins {
        table.row(vec![
            format!("{}@{}", p.dataset, p.version.short()),
            p.until.map(time).unwrap_or_else(|| "unpinned".into()),
            p.reason.clone(),
        ]);
    }
    table.render()
}

pub fn export(r: &dsv::ops::export::ExportReport) -> String {
    format!(
        "Exported {} ({}) of version {}",
        count(r.files, "file"),
        HumanBytes(r.bytes),
        r.version.short()
    )
}

#[cfg(feature = "mount")]
pub fn mounted(m: &dsv_mount::MountInfo) -> String {
    format!(
        "Mounted {} (version {}: {}, {}) read-only at {}\nCtrl-C or `fusermount3 -u {}` unmounts it",
        m.revision,
        m.version.short(),
        count(m.files, "file"),
        HumanBytes(m.bytes),
        m.mountpoint.display(),
        m.mountpoint.display()
    )
}

pub fn shards(plans: &[dsv::read::ShardPlan]) -> String {
    let mut table = Table::new(&[
        ("SHARD", Align::Right),
        ("FILES", Align::Right),
        ("SIZE", Align::Right),
        ("FIRST", Align::Left),
        ("LAST", Align::Left),
    ]);
    for p in plans {
        table.row(vec![
            p.index.to_string(),
            p.files.to_string(),
            size(p.bytes),
            p.paths
                .first()
                .map_or("-".into(), |p| quoted_path(p))
                .into_owned(),
            p.paths
                .last()
                .map_or("-".into(), |p| quoted_path(p))
                .into_owned(),
        ]);
    }
    table.render()
}

pub fn workspaces(workspaces: &[dsv::catalog::Workspace]) -> String {
    if workspaces.is_empty() {
        return "no workspaces".into();
    }
    let mut table = Table::new(&[
        ("PATH", Align::Left),
        ("VERSION", Align::Left),
        ("EXISTS", Align::Left),
        ("LAST SEEN", Align::Left),
    ]);
    for w in workspaces {
        let version = match (&w.dataset, &w.version) {
            (Some(d), Some(v)) => format!("{d}@{}", v.short()),
            _ => "-".into(),
        };
        table.row(vec![
            w.path.clone(),
            version,
            if w.exists { "yes" } else { "no" }.into(),
            time(w.last_seen),
        ]);
    }
    table.render()
}

pub fn cache(versions: &[CachedVersion]) -> String {
    if versions.is_empty() {
        return "no versions".into();
    }
    let mut table = Table::new(&[
        ("VERSION", Align::Left),
        ("UNIQUE", Align::Right),
        ("SHARED", Align::Right),
        ("REMOTE-ONLY", Align::Right),
        ("LAST USED", Align::Left),
        ("FLAGS", Align::Left),
    ]);
    for v in versions {
        let mut flags = Vec::new();
        if v.pinned {
            flags.push("pinned".to_string());
        }
        if v.in_use {
            flags.push("in use".to_string());
        }
        if v.evicted {
            flags.push("evicted".to_string());
        }
        if !v.on_remotes.is_empty() {
            flags.push(format!("on {}", v.on_remotes.join(",")));
        }
        table.row(vec![
            format!("{}@{}", v.dataset, v.version.short()),
            size(v.unique_bytes),
            size(v.shared_bytes),
            size(v.remote_only_bytes),
            time(v.last_used),
            flags.join(", "),
        ]);
    }
    table.render()
}

/// `dsv cache limit`: the limit and what the store holds against it.
pub fn cache_limit(s: &dsv::ops::cache::LimitStatus) -> String {
    let limit = match s.limit {
        Some(limit) => format!("Cache limit: {}", size(limit)),
        None => "Cache limit: none".to_string(),
    };
    format!(
        "{limit}\nHeld: {} ({} of it data a remote holds, evictable)",
        size(s.held_bytes),
        size(s.evictable_bytes)
    )
}

pub fn prune(r: &PruneReport) -> String {
    let verb = if r.gc.is_none() {
        "Would prune"
    } else {
        "Pruned"
    };
    let acted = r.actions.iter().filter(|a| a.action != "skipped").count();
    let mut out = format!("{verb} {}", count(acted, "version"));
    for a in &r.actions {
        let reason = a
            .reason
            .as_deref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default();
        let _ = write!(
            out,
            "\n  {} {}@{} ({}){reason}",
            a.action,
            a.dataset,
            a.version.short(),
            HumanBytes(a.bytes)
        );
    }
    if let Some(gc) = &r.gc {
        let _ = write!(out, "\n{} freed", HumanBytes(gc.bytes_freed.max(0) as u64));
    }
    out
}

/// Said on stderr when `import` recorded the URL without the credentials it held.
pub const REDACTED_URL_NOTE: &str = "the URL's credentials (user:password@, or a presigned URL's signature and token) were not recorded: the version's source and provenance name the URL without them, so `dsv update` works only if the URL is public";

pub fn import(r: &ImportReport) -> String {
    let mut out = if r.created {
        let tag = tag_suffix(&r.tag);
        format!(
            "Imported {}@{}{tag}: {}, {}",
            r.dataset,
            r.version.short(),
            count(r.files, "file"),
            HumanBytes(r.bytes)
        )
    } else {
        format!(
            "Nothing changed: {} is still at {} ({} unchanged at the source)",
            r.dataset,
            r.version.short(),
            r.source
        )
    };
    let archive = r
        .archive
        .map(|a| format!(", expanded from {}", a.name()))
        .unwrap_or_default();
    let _ = write!(
        out,
        "\n  source {}: {}, {} read ({}){archive}, {} unchanged; stored {}, {} in {}",
        r.source,
        count(r.objects, "object"),
        r.objects_read,
        HumanBytes(r.bytes_downloaded),
        r.objects_unchanged,
        count(r.ingest.new_chunks, "new chunk"),
        HumanBytes(r.ingest.stored_bytes),
        count(r.packs_written, "pack"),
    );
    if r.created {
        let _ = write!(out, "\n{}", r.version);
    }
    out
}

pub fn show_provenance(s: &ShownProvenance) -> String {
    let mut out = show(&s.version);
    let Some(p) = &s.provenance else {
        out.push_str("\nprovenance (none: this version was committed, not imported)");
        return out;
    };
    let _ = write!(out, "\nprovenance\n  source   {}", p.source);
    let _ = write!(out, "\n  extract  {}", if p.extract { "yes" } else { "no" });
    if let Some(etag) = &p.pinned_etag {
        let _ = write!(out, "\n  pinned   ETag {etag}");
    }
    if let Some(version) = &p.pinned_version_id {
        let _ = write!(out, "\n  pinned   VersionId {version}");
    }
    // Files of one source object (an archive's members) share its identity: show it once.
    let same_object = |a: &FileProvenance, b: &FileProvenance| {
        (&a.url, &a.etag, &a.version_id, a.last_modified, a.size)
            == (&b.url, &b.etag, &b.version_id, b.last_modified, b.size)
    };
    let mut last: Option<&FileProvenance> = None;
    for file in &p.files {
        if !last.is_some_and(|last| same_object(last, file)) {
            let _ = write!(
                out,
                "\n  object   {}\n           etag {}  version {}  modified {}  size {} ({})",
                file.url,
                file.etag.as_deref().unwrap_or("-"),
                file.version_id.as_deref().unwrap_or("-"),
                file.last_modified.map(time).unwrap_or_else(|| "-".into()),
                file.size,
                HumanBytes(file.size)
            );
            last = Some(file);
        }
        match &file.member {
            Some(member) if *member != file.path => {
                let _ = write!(
                    out,
                    "\n    {} (member {})",
                    quoted_path(&file.path),
                    quoted_path(member)
                );
            }
            _ => {
                let _ = write!(out, "\n    {}", quoted_path(&file.path));
            }
        }
    }
    out
}

pub fn remote_gc(r: &dsv::ops::sync::remote_gc::RemoteGcReport) -> String {
    let (mark, delete, rescue, repack) = if r.dry_run {
        ("Would mark", "would delete", "would rescue", "would repack")
    } else {
        ("Marked", "deleted", "rescued", "repacked")
    };
    let mut out = format!(
        "{mark} {} ({}), {delete} {} ({}), {rescue} {}, {repack} {} on remote {}; kept {} ({}) for {}",
        count(r.marked.count, "pack"),
        HumanBytes(r.marked.bytes),
        count(r.deleted.count, "pack"),
        HumanBytes(r.deleted.bytes),
        count(r.rescued.count, "pack"),
        count(r.repacked.count, "pack"),
        r.remote,
        count(r.live.count, "pack"),
        HumanBytes(r.live.bytes),
        count(r.refs, "ref"),
    );
    // Each pack waiting, with the time a run frees it.
    let frees_after = |pack: &dsv::ObjectId| {
        r.frees
            .iter()
            .find(|f| f.packs.contains(pack))
            .map_or(String::new(), |f| {
                format!(" (a run after {} frees it)", gc_time(&f.frees_after))
            })
    };
    let lines: [(&str, &dsv::ops::sync::remote_gc::PackSet); 6] = [
        ("mark", &r.marked),
        ("delete", &r.deleted),
        ("rescue", &r.rescued),
        ("repack", &r.repacked),
        ("wait (marked, grace not over)", &r.waiting),
        ("wait (unreferenced, younger than the grace)", &r.young),
    ];
    for (what, set) in lines {
        for pack in &set.packs {
            let when = if what.starts_with("wait") {
                frees_after(pack)
            } else {
                String::new()
            };
            let _ = write!(out, "\n  {what} {}{when}", pack.short());
        }
    }
    // `--grace` as typed: 24h, not humantime's 1day.
    let grace = if r.grace_seconds > 0 && r.grace_seconds.is_multiple_of(3600) {
        format!("{}h", r.grace_seconds / 3600)
    } else {
        humantime::format_duration(Duration::from_secs(r.grace_seconds)).to_string()
    };
    let _ = write!(
        out,
        "\ngrace {grace}; the remote's clock: {}",
        gc_time(&r.server_time)
    );
    if r.dry_run {
        let _ = write!(out, "\nfrees nothing (--dry-run)");
    } else {
        let _ = write!(out, "\nfreed {} now", HumanBytes(r.freed_bytes));
    }
    for free in &r.frees {
        let packs = format!(
            "{} in {}",
            HumanBytes(free.bytes),
            count(free.count, "pack")
        );
        let when = gc_time(&free.frees_after);
        let them = if free.count == 1 { "it" } else { "them" };
        let line = match (free.state, &free.marks_after) {
            ("now", _) => format!("{packs}: a run now frees {them}"),
            ("unmarked", _) => {
                format!("{packs}: a run now marks {them}, a run after {when} frees {them}")
            }
            ("young", Some(marks)) => format!(
                "{packs} younger than the grace: a run after {} marks {them}, a run a grace after that (from {when}) frees {them}, if no ref names {them} by then",
                gc_time(marks)
            ),
            _ => format!("{packs}: a run after {when} frees {them}"),
        };
        let _ = write!(out, "\n{line}");
    }
    if r.missing_objects > 0 {
        let _ = write!(
            out,
            "\n{} the refs reach are in no pack of the remote: run `dsv verify --remote {}`",
            count(r.missing_objects, "object"),
            r.remote
        );
    }
    if r.deferred {
        let _ = write!(
            out,
            "\nthis run took longer than half the grace before deleting: deletions left to the next run"
        );
    }
    out
}

/// An RFC 3339 time of `gc --remote`'s report (`2026-11-29T22:14:00Z`) as its text shows it:
/// `2026-11-29 22:14 UTC` (the report rounds its times up to the minute).
fn gc_time(rfc3339: &str) -> String {
    match (rfc3339.get(..10), rfc3339.get(11..16)) {
        (Some(day), Some(minute)) if rfc3339.ends_with('Z') => format!("{day} {minute} UTC"),
        _ => rfc3339.to_string(),
    }
}

pub fn removed_remote_refs(r: &dsv::ops::sync::remote_gc::RemoveRemoteReport) -> String {
    let mut out = String::new();
    for reference in &r.refs {
        let name = match &reference.tag {
            Some(tag) => format!("{}@{tag}", reference.dataset),
            None => reference.dataset.clone(),
        };
        if !out.is_empty() {
            out.push('\n');
        }
        if reference.status == "deleted" {
            let _ = write!(
                out,
                "Deleted {}/{name} (was {})",
                r.remote,
                reference.version.short()
            );
        } else {
            let _ = write!(
                out,
                "Left {}/{name}: another writer changed it since it was read (run again to remove what it names now)",
                r.remote
            );
        }
    }
    let _ = write!(
        out,
        "\nrun `dsv gc --remote {}` to free the space",
        r.remote
    );
    out
}

pub fn verify_remote(r: &dsv::ops::sync::remote_gc::RemoteVerifyReport) -> String {
    let mut out = format!(
        "Checked remote {}: {}, {} they reach, {} ({} {}, {})",
        r.remote,
        count(r.refs, "ref"),
        count(r.objects, "object"),
        count(r.packs, "pack"),
        count(r.frames, "frame"),
        if r.full { "read whole" } else { "sampled" },
        HumanBytes(r.bytes)
    );
    if r.full {
        let _ = write!(out, "\n{} proven", count(r.files, "file"));
    }
    if r.marked > 0 {
        let _ = write!(out, "\n{} marked by gc", count(r.marked, "pack"));
    }
    if r.incomplete > 0 {
        let _ = write!(
            out,
            "\n{} incomplete (an upload cut short or a deletion part-way; gc --remote removes them)",
            count(r.incomplete, "pack")
        );
    }
    for problem in &r.problems {
        let _ = write!(out, "\nproblem: {}: {}", problem.what, problem.detail);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_use_real_plurals() {
        assert_eq!(count(1u64, "file"), "1 file");
        assert_eq!(count(0u64, "file"), "0 files");
        assert_eq!(count(2usize, "new chunk"), "2 new chunks");
        assert_eq!(count(3usize, "mismatch"), "3 mismatches");
        assert_eq!(count(2u64, "entry"), "2 entries");
        assert_eq!(count(2u64, "key"), "2 keys");
        assert_eq!(count(1usize, "unnamed pack file"), "1 unnamed pack file");
    }

    /// The interrupted move's line names a rebase or a pull (either leaves it) and quotes
    /// the workspace's directory as every listed path is.
    #[test]
    fn an_interrupted_move_names_rebase_or_pull_and_quotes_the_directory() {
        let dir = std::path::PathBuf::from("/data/ws\nrm -rf");
        let to = dsv::id::ObjectId([2; 32]);
        let report = StatusReport {
            dir: dir.clone(),
            dataset: Some("ds".into()),
            version: Some(dsv::id::ObjectId([1; 32])),
            changes: Vec::new(),
            files_hashed: 0,
            heads: Vec::new(),
            interrupted_rebase: Some(dsv::ops::following::Following {
                workspace: dir.to_string_lossy().into_owned(),
                dataset: "ds".into(),
                from: dsv::id::ObjectId([1; 32]),
                to,
            }),
        };
        let text = status(&report);
        let line = text.lines().last().unwrap();
        assert!(
            line.starts_with("a move to the new head (a rebase or pull) was interrupted"),
            "{text}"
        );
        assert!(
            line.ends_with(&format!("`dsv checkout ds@{} \"/data/ws\\nrm -rf\"` (or the rebase run again) finishes the move", to.short())),
            "{text}"
        );
    }

    #[test]
    fn tables_align_by_display_width_without_trailing_spaces() {
        let mut table = Table::new(&[("NAME", Align::Left), ("SIZE", Align::Right)]);
        table.row(vec!["a".into(), "1 B".into()]);
        table.row(vec!["日本語".into(), "10.00 KiB".into()]);
        table.row(vec!["e\u{301}té".into(), "-".into()]);
        assert_eq!(
            table.render(),
            "NAME         SIZE\na             1 B\n日本語  10.00 KiB\ne\u{301}té             -"
        );
        let mut ragged = Table::headless(&[Align::Left, Align::Left]).indented("  ");
        ragged.row(vec!["long name".into(), String::new()]);
        ragged.row(vec!["x".into(), "y".into()]);
        assert_eq!(ragged.render(), "  long name\n  x          y");
    }
}
