//! Reproducibility: `dsv audit` and `dsv lock`.

use std::path::PathBuf;

use clap::Args;
use dsv::Revision;
use dsv::ops::{audit, ingest::IngestOptions};

use super::{jobs_or, open_store};
use crate::cli::{Cli, JobsArg, error, render, ui::Ui};

#[derive(Debug, Args)]
pub(crate) struct AuditArgs {
    /// The directory (with --lock: the directory holding DIR/NAME for each dataset).
    dir: PathBuf,
    /// Compare with this revision instead.
    #[arg(long, value_name = "REV", conflicts_with = "lock")]
    against: Option<String>,
    /// Compare DIR/NAME with each version this lock file pins.
    #[arg(long, value_name = "FILE")]
    lock: Option<PathBuf>,
    /// Re-hash every file instead of trusting the stat cache.
    #[arg(long)]
    full: bool,
    #[command(flatten)]
    jobs: JobsArg,
}

pub(crate) fn audit(cli: &Cli, ui: &Ui, args: &AuditArgs) -> anyhow::Result<u8> {
    let progress = ui.reporter();
    let mut store = open_store(cli)?;
    let jobs = jobs_or(&args.jobs, IngestOptions::default().jobs);
    let dir = &args.dir;
    let full = args.full;
    match &args.lock {
        Some(lock_path) => {
            let lock = audit::read_lock(lock_path)?;
            let pinned = audit::resolve_lock(&mut store, lock_path, &lock, jobs, &progress)?;
            let mut reports = Vec::new();
            for (dataset, version) in &pinned {
                let target = Some((dataset.as_str(), *version, "lock"));
                reports.push(audit::audit(
                    &store,
                    &dir.join(dataset),
                    target,
                    full,
                    jobs,
                    &progress,
                )?);
            }
            let identical = reports.iter().all(|r| r.identical);
            if ui.json {
                ui.json(&serde_json::json!({
                    "lock": lock_path, "identical": identical, "datasets": reports
                }))?;
            } else {
                for report in &reports {
                    ui.line(render::audit(report))?;
                }
            }
            if !identical {
                return Ok(error::DIFFERENCES);
            }
        }
        None => {
            let target = match &args.against {
                Some(text) => {
                    let revision = Revision::parse(text)?;
                    let id = revision.resolve(store.catalog())?;
                    Some((revision.dataset, id))
                }
                None => None,
            };
            let report = audit::audit(
                &store,
                dir,
                target.as_ref().map(|(d, id)| (d.as_str(), *id, "revision")),
                full,
                jobs,
                &progress,
            )?;
            ui.report(&report, render::audit)?;
            if !report.identical {
                return Ok(error::DIFFERENCES);
            }
        }
    }
    Ok(error::SUCCESS)
}

#[derive(Debug, Args)]
pub(crate) struct LockArgs {
    /// One revision per dataset.
    #[arg(required = true, value_name = "REVISION")]
    revisions: Vec<String>,
}

pub(crate) fn lock(cli: &Cli, ui: &Ui, args: &LockArgs) -> anyhow::Result<u8> {
    let store = open_store(cli)?;
    let revisions = args
        .revisions
        .iter()
        .map(|r| Revision::parse(r))
        .collect::<Result<Vec<_>, _>>()?;
    let lock = audit::lock(&store, &revisions)?;
    // The lock file is JSON whatever the output mode: it is meant to be redirected.
    ui.json(&lock)?;
    Ok(error::SUCCESS)
}
