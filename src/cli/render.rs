//! Human-readable text for each report (the `--json` twin is the report itself).

use std::fmt::Write;
use std::time::{Duration, UNIX_EPOCH};

use indicatif::HumanBytes;

use dsv::catalog::{DatasetSummary, Pin};
use dsv::object::FileProvenance;
use dsv::ops::audit::AuditReport;
use dsv::ops::cache::{CachedVersion, PruneReport};
use dsv::ops::checkout::CheckoutReport;
use dsv::ops::commit::CommitReport;
use dsv::ops::gc::{GcReport, RemoveReport};
use dsv::ops::import::ImportReport;
use dsv::ops::inspect::{ShownProvenance, VersionInfo};
use dsv::ops::status::StatusReport;
use dsv::ops::sync::{
    CloneReport, FetchReport, HeadUpdate, PullReport, PushReport, RefCache, RemoteListing, Transfer,
};
use dsv::ops::verify::VerifyReport;
use dsv::tree::{Change, ChangeKind, FlatEntry, FlatKind};

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
        "Committed {}@{}{tag}: {} files, {}\n  read {} files ({}), {} unchanged; stored {} new chunks, {} in {} packs\n{}",
        r.dataset,
        r.version.short(),
        r.files,
        HumanBytes(r.bytes),
        r.ingest.files_read,
        HumanBytes(r.ingest.bytes_read),
        r.files_unchanged,
        r.ingest.new_chunks,
        HumanBytes(r.ingest.stored_bytes),
        r.packs_written,
        r.version
    )
}

pub fn checkout(r: &CheckoutReport) -> String {
    let mut out = format!(
        "Checked out {}{}@{} into {}: {} files, {}\n  wrote {} ({}), deleted {}, {} already up to date",
        if r.partial { "part of " } else { "" },
        r.dataset,
        r.version.short(),
        r.dir.display(),
        r.files,
        HumanBytes(r.bytes),
        r.written,
        HumanBytes(r.bytes_written),
        r.deleted,
        r.unchanged
    );
    if r.partial {
        out.push_str("\n  a partial checkout: not recorded as a workspace (status and commit see plain files)");
    }
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
        };
        let entry = change.new.as_ref().or(change.old.as_ref());
        let suffix = if entry.is_some_and(|e| e.kind == FlatKind::Dir) {
            "/"
        } else {
            ""
        };
        let _ = writeln!(out, "{letter} {}{suffix}", change.path);
    }
    out.pop();
    out
}

pub fn status(r: &StatusReport) -> String {
    let at = match (&r.dataset, &r.version) {
        (Some(d), Some(v)) => format!("{d}@{}", v.short()),
        _ => "no version".into(),
    };
    if r.changes.is_empty() {
        format!("Clean: {} matches {at}", r.dir.display())
    } else {
        format!(
            "{} differs from {at}:\n{}",
            r.dir.display(),
            changes(&r.changes, "")
        )
    }
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
            version.files,
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
    let mut out = format!(
        "{:<24} {:>8} {:>8} {:>12}  {}\n",
        "DATASET", "VERSIONS", "FILES", "SIZE", "HEAD"
    );
    for d in datasets {
        let head = d.head.map(|h| h.short()).unwrap_or_else(|| "-".into());
        let _ = writeln!(
            out,
            "{:<24} {:>8} {:>8} {:>12}  {head}",
            d.name,
            d.versions,
            d.files,
            HumanBytes(d.bytes).to_string()
        );
    }
    out.pop();
    out
}

pub fn entries(entries: &[FlatEntry]) -> String {
    let mut out = String::new();
    for e in entries {
        let (kind, suffix) = match &e.kind {
            FlatKind::File { executable: false } => ('-', String::new()),
            FlatKind::File { executable: true } => ('x', String::new()),
            FlatKind::Dir => ('d', "/".to_string()),
            FlatKind::Symlink { target } => ('l', format!(" -> {target}")),
        };
        let _ = writeln!(out, "{kind} {:>12} {}{suffix}", e.size, e.path);
    }
    out.pop();
    out
}

pub fn repair(r: &dsv::ops::repair::RepairReport) -> String {
    let mut out = format!(
        "Rebuilt the catalog of {}: {} packs, {} objects, {} versions; restored {} heads, {} tags, {} remotes, {} pins, {} removals from the ref log",
        r.store.display(),
        r.packs,
        r.objects,
        r.versions,
        r.heads,
        r.tags,
        r.remotes,
        r.pins,
        r.removed
    );
    if let Some(old) = &r.old_catalog {
        let _ = write!(out, "\nThe old catalog is kept as {}", old.display());
    }
    for pack in &r.damaged_packs {
        let _ = write!(out, "\nwarning: damaged pack not indexed: {pack}");
    }
    if !r.missing_versions.is_empty() {
        let _ = write!(
            out,
            "\nwarning: the ref log names {} versions no pack holds: {}",
            r.missing_versions.len(),
            r.missing_versions.join(", ")
        );
    }
    if !r.ref_log_bad_lines.is_empty() {
        let _ = write!(
            out,
            "\nwarning: {} ref log lines did not parse (a line torn by a crash is harmless)",
            r.ref_log_bad_lines.len()
        );
    }
    if r.remotes > 0 {
        out.push_str("\nRun `dsv fetch` to learn the remotes' contents again");
    }
    out
}

pub fn verify(r: &VerifyReport) -> String {
    let mut out = format!(
        "Checked {} packs ({}), {} objects, {} versions",
        r.packs,
        HumanBytes(r.pack_bytes),
        r.objects,
        r.versions
    );
    if !r.unreferenced_packs.is_empty() {
        let _ = write!(
            out,
            "\n{} pack files are not in the catalog (left by an interrupted commit, transfer or gc; gc deletes them once older than its grace period, unless they hold versions the ref log names)",
            r.unreferenced_packs.len()
        );
    }
    if !r.unrecorded_versions.is_empty() {
        let _ = write!(
            out,
            "\n{} versions in those packs are named by the ref log but not recorded (a commit killed before it finished, or a catalog restored from an older copy): gc keeps them; `dsv repair` records them",
            r.unrecorded_versions.len()
        );
    }
    if r.files_rehashed > 0 {
        let _ = write!(
            out,
            "\n{} files ({}) reassembled and hashed whole",
            r.files_rehashed,
            HumanBytes(r.bytes_rehashed)
        );
    }
    if r.files_on_remotes > 0 {
        let _ = write!(
            out,
            "\n{} files have their data on a remote only (fetched when a checkout needs them)",
            r.files_on_remotes
        );
    }
    if r.problems.is_empty() {
        out.push_str("\nThe store is consistent.");
    } else {
        let _ = write!(out, "\n{} problems:", r.problems.len());
        for p in &r.problems {
            let _ = write!(out, "\n  {p}");
        }
    }
    out
}

fn transfer(t: &Transfer, verb: &str) -> String {
    format!(
        "{verb} {} in {} packs, {} requests",
        HumanBytes(t.bytes),
        t.packs,
        t.requests
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
    let mut out = String::new();
    for record in remotes {
        let _ = write!(out, "{}\t{}", record.name, record.url);
        for (key, value) in &record.options {
            let _ = write!(out, " {key}={value}");
        }
        out.push('\n');
        for r in &record.refs {
            let _ = writeln!(
                out,
                "  {}/{}\t{}",
                record.name,
                ref_label(&r.dataset, r.tag.as_deref()),
                r.version.short()
            );
        }
    }
    out.trim_end().to_string()
}

pub fn push(r: &PushReport) -> String {
    let mut out = String::new();
    for pushed in &r.refs {
        let previous = pushed
            .previous
            .map(|p| format!("{}..", p.short()))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{}/{}\t{previous}{}\t{}",
            r.remote,
            ref_label(&pushed.dataset, pushed.tag.as_deref()),
            pushed.version.short(),
            pushed.status
        );
    }
    if r.refs.is_empty() {
        out.push_str("nothing to push: no dataset has a version yet\n");
    }
    out.push_str(&transfer(&r.transfer, "uploaded"));
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
    let head = match r.head {
        Some(HeadUpdate::Moved) => format!("{} is now at {}", r.dataset, r.version.short()),
        Some(HeadUpdate::UpToDate) => format!("{} is already at {}", r.dataset, r.version.short()),
        _ => format!(
            "{d}'s local head was kept: it has versions {v} lacks. To combine them: `dsv checkout {d}@{v} DIR`, bring your changes into DIR, then `dsv commit` in DIR (the new version descends from {v}) and `dsv push`; or take theirs with `dsv reset {d} {v}`",
            d = r.dataset,
            v = r.version.short()
        ),
    };
    format!("{}\n{head}", fetched(r))
}

pub fn fetch(r: &FetchReport) -> String {
    let mut out = String::new();
    for reference in &r.refs {
        let _ = writeln!(
            out,
            "{}/{}\t{}",
            r.remote,
            ref_label(&reference.dataset, reference.tag.as_deref()),
            reference.version.short()
        );
    }
    let _ = write!(
        out,
        "{} refs ({} changed), {} new packs; {}",
        r.refs.len(),
        r.changed_refs,
        r.new_packs,
        transfer(&r.transfer, "downloaded")
    );
    out
}

pub fn clone(r: &CloneReport) -> String {
    let mut out = format!("Cloned {} into {}\n", r.url, r.store.display());
    for (dataset, version) in &r.datasets {
        let _ = writeln!(out, "  {dataset}\t{}", version.short());
    }
    out.push_str(&transfer(&r.transfer, "downloaded metadata:"));
    out
}

pub fn audit(r: &AuditReport) -> String {
    let short = |id: Option<dsv::ObjectId>| id.map_or_else(|| "-".to_string(), |id| id.short());
    let size = |s: Option<u64>| s.map_or_else(|| "-".to_string(), |s| HumanBytes(s).to_string());
    let mut out = if r.identical {
        format!(
            "{} is identical to {}@{} ({} files, {})",
            r.dir.display(),
            r.dataset,
            r.version.short(),
            r.files,
            HumanBytes(r.bytes)
        )
    } else {
        format!(
            "{} differs from {}@{}: {} mismatches",
            r.dir.display(),
            r.dataset,
            r.version.short(),
            r.mismatches.len()
        )
    };
    for m in &r.mismatches {
        let letter = match m.change {
            ChangeKind::Added => 'A',
            ChangeKind::Modified => 'M',
            ChangeKind::Deleted => 'D',
        };
        let _ = write!(
            out,
            "\n{letter} {}  expected {} ({}), found {} ({})",
            m.path,
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
            "{} files hashed, the rest vouched for by the stat cache",
            r.files_hashed
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

pub fn gc(r: &GcReport) -> String {
    let verb = if r.dry_run { "Would delete" } else { "Deleted" };
    let mut out = format!(
        "{verb} {} packs, repack {} and remove {} unnamed pack files: {} freed",
        r.delete.len(),
        r.repack.len(),
        r.orphans.iter().filter(|o| o.deleted).count(),
        HumanBytes(r.bytes_freed.max(0) as u64)
    );
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
        "\n{} live versions, {} removed, {} live objects",
        r.live_versions, r.removed_versions, r.live_objects
    );
    out
}

pub fn removed(r: &RemoveReport) -> String {
    let mut out = format!(
        "Removed {} version(s) of {}; run `dsv gc` to free the space",
        r.removed.len(),
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
    let mut out = String::new();
    for p in pins {
        let until = p.until.map(time).unwrap_or_else(|| "until unpinned".into());
        let _ = writeln!(
            out,
            "{}@{}\t{until}\t{}",
            p.dataset,
            p.version.short(),
            p.reason
        );
    }
    out.trim_end().to_string()
}

pub fn export(r: &dsv::read::ExportReport) -> String {
    format!(
        "Exported {} files ({}) of version {}",
        r.files,
        HumanBytes(r.bytes),
        r.version.short()
    )
}

pub fn mounted(m: &dsv::mount::MountInfo) -> String {
    format!(
        "Mounted {} (version {}: {} files, {}) read-only at {}\nCtrl-C or `fusermount3 -u {}` unmounts it",
        m.revision,
        m.version.short(),
        m.files,
        HumanBytes(m.bytes),
        m.mountpoint.display(),
        m.mountpoint.display()
    )
}

pub fn shards(plans: &[dsv::read::ShardPlan]) -> String {
    let mut out = String::from("SHARD\tFILES\tBYTES\tFIRST\tLAST");
    for p in plans {
        let _ = write!(
            out,
            "\n{}\t{}\t{}\t{}\t{}",
            p.index,
            p.files,
            p.bytes,
            p.paths.first().map_or("-", String::as_str),
            p.paths.last().map_or("-", String::as_str)
        );
    }
    out
}

pub fn workspaces(workspaces: &[dsv::catalog::Workspace]) -> String {
    if workspaces.is_empty() {
        return "no workspaces".into();
    }
    let mut out = String::from("PATH\tVERSION\tEXISTS\tLAST SEEN");
    for w in workspaces {
        let version = match (&w.dataset, &w.version) {
            (Some(d), Some(v)) => format!("{d}@{}", v.short()),
            _ => "-".into(),
        };
        let _ = write!(
            out,
            "\n{}\t{version}\t{}\t{}",
            w.path,
            if w.exists { "yes" } else { "no" },
            time(w.last_seen)
        );
    }
    out
}

pub fn cache(versions: &[CachedVersion]) -> String {
    if versions.is_empty() {
        return "no versions".into();
    }
    let mut out = String::from("VERSION\tUNIQUE\tSHARED\tREMOTE-ONLY\tLAST USED\tFLAGS");
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
        let _ = write!(
            out,
            "\n{}@{}\t{}\t{}\t{}\t{}\t{}",
            v.dataset,
            v.version.short(),
            HumanBytes(v.unique_bytes),
            HumanBytes(v.shared_bytes),
            HumanBytes(v.remote_only_bytes),
            time(v.last_used),
            flags.join(" ")
        );
    }
    out
}

pub fn prune(r: &PruneReport) -> String {
    let verb = if r.gc.is_none() {
        "Would prune"
    } else {
        "Pruned"
    };
    let acted = r.actions.iter().filter(|a| a.action != "skipped").count();
    let mut out = format!("{verb} {acted} versions");
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
            "Imported {}@{}{tag}: {} files, {}",
            r.dataset,
            r.version.short(),
            r.files,
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
        "\n  source {}: {} objects, {} read ({}){archive}, {} unchanged; stored {} new chunks, {} in {} packs",
        r.source,
        r.objects,
        r.objects_read,
        HumanBytes(r.bytes_downloaded),
        r.objects_unchanged,
        r.ingest.new_chunks,
        HumanBytes(r.ingest.stored_bytes),
        r.packs_written,
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
                let _ = write!(out, "\n    {} (member {member})", file.path);
            }
            _ => {
                let _ = write!(out, "\n    {}", file.path);
            }
        }
    }
    out
}
