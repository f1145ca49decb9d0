//! Reproducibility: `dsv audit` and `dsv lock`.

use std::path::PathBuf;

use clap::Args;
use dsv::Revision;
use dsv::ops::{audit, ingest::IngestOptions, lineage, lock_file};

use super::{jobs_or, open_store};
use crate::{Cli, JobsArg, error, render, ui::Ui};

#[derive(Debug, Args)]
pub(crate) struct AuditArgs {
    /// The directory (with --lock: the directory holding DIR/NAME for each dataset; none with
    /// --lineage).
    #[arg(required_unless_present = "lineage")]
    dir: Option<PathBuf>,
    #[arg(
        long,
        value_name = "REV",
        conflicts_with_all = ["lock", "lineage"],
        help = concat!("Compare with this revision instead: ", revision_syntax!())
    )]
    against: Option<String>,
    /// Compare DIR/NAME with each version this lock file pins.
    #[arg(long, value_name = "FILE", conflicts_with = "lineage")]
    lock: Option<PathBuf>,
    /// Replay a lineage record (dsv-lineage.json, written by Python's dsv.lineage) instead of
    /// reading a directory: check its version, root tree and selection against this store
    /// (fetching the version's metadata from a remote the record names when it is not here),
    /// recompute the loader's order and prove the samples it says were seen.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["full", "dir"])]
    lineage: Option<PathBuf>,
    /// Re-hash every file instead of trusting the stat cache.
    #[arg(long)]
    full: bool,
    #[command(flatten)]
    jobs: JobsArg,
}

pub(crate) fn audit(cli: &Cli, ui: &Ui, args: &AuditArgs) -> anyhow::Result<u8> {
    let progress = ui.reporter();
    let mut store = open_store(cli)?;
    let jobs = jobs_or(&args.jobs, &store.config()?, IngestOptions::default().jobs);
    if let Some(record) = &args.lineage {
        let report = lineage::audit_lineage(&mut store, record, jobs, &progress)?;
        ui.report(&report, render::lineage_audit)?;
        return Ok(if report.proven {
            error::SUCCESS
        } else {
            error::DIFFERENCES
        });
    }
    // Required by clap unless --lineage is given.
    let Some(dir) = args.dir.as_deref() else {
        return Err(error::Usage("give the directory to audit, or --lineage FILE".into()).into());
    };
    let options = audit::AuditOptions {
        full: args.full,
        jobs,
    };
    let identical = match &args.lock {
        Some(lock_path) => {
            let report = audit::audit_lock(&mut store, lock_path, dir, &options, &progress)?;
            if ui.json {
                ui.json(&report)?;
            } else {
                for report in &report.datasets {
                    ui.line(render::audit(report))?;
                }
            }
            report.identical
        }
        None => {
            let against = args.against.as_deref().map(Revision::parse).transpose()?;
            let report = audit::audit_against(&store, dir, against.as_ref(), &options, &progress)?;
            ui.report(&report, render::audit)?;
            report.identical
        }
    };
    if !identical {
        return Ok(error::DIFFERENCES);
    }
    Ok(error::SUCCESS)
}

#[derive(Debug, Args)]
pub(crate) struct LockArgs {
    #[arg(
        required = true,
        value_name = "REVISION",
        help = concat!(
            "One revision per dataset: ",
            revision_syntax!(),
            "; or REMOTE/REV, REV as remote REMOTE named it when last fetched (origin/covid@v10)"
        )
    )]
    revisions: Vec<String>,
}

pub(crate) fn lock(cli: &Cli, ui: &Ui, args: &LockArgs) -> anyhow::Result<u8> {
    let store = open_store(cli)?;
    let lock = lock_file::lock_named(&store, &args.revisions)?;
    // The lock file is JSON whatever the output mode: it is meant to be redirected.
    ui.json(&lock)?;
    Ok(error::SUCCESS)
}
