//! `dsv checkout REV DIR` and `dsv checkout --lock FILE DIR`.

use std::path::PathBuf;

use clap::Args;
use dsv::ops::{checkout, compose};

use super::{jobs_or, open_store};
use crate::{Cli, JobsArg, SelectArgs, error, render, ui::Ui};

#[derive(Debug, Args)]
pub(crate) struct CheckoutArgs {
    #[arg(
        value_name = "REVISION",
        required_unless_present = "lock",
        help = concat!(
            "The revision: ",
            revision_syntax!(),
            "; or REMOTE/REV, REV as remote REMOTE names it (origin/mnist@v3), fetching what is \
             missing. With --lock, give only DIR"
        )
    )]
    revision: Option<String>,
    /// Where to materialize it (with --lock: each dataset into DIR/NAME).
    #[arg(required_unless_present = "lock")]
    dir: Option<PathBuf>,
    /// Materialize exactly the versions this lock file pins (see `dsv lock`), or fail.
    #[arg(long, value_name = "FILE")]
    lock: Option<PathBuf>,
    /// Overwrite or delete changes that were never committed.
    #[arg(long)]
    force: bool,
    /// Print what the checkout would do (each path written, replaced, deleted, carried over
    /// or in conflict) and change nothing: no directory made, nothing fetched, no workspace
    /// recorded. Exits 4 when the checkout would be refused for conflicts.
    #[arg(long, conflicts_with = "lock")]
    dry_run: bool,
    #[command(flatten)]
    select: SelectArgs,
    #[command(flatten)]
    jobs: JobsArg,
}

pub(crate) fn run(cli: &Cli, ui: &Ui, args: &CheckoutArgs) -> anyhow::Result<u8> {
    match &args.lock {
        Some(lock_path) => checkout_lock(cli, ui, args, lock_path),
        None => checkout_revision(cli, ui, args),
    }
}

fn options(
    args: &CheckoutArgs,
    settings: &dsv::config::Config,
) -> anyhow::Result<checkout::CheckoutOptions> {
    let mut options = checkout::CheckoutOptions::default();
    options.force = args.force;
    options.jobs = jobs_or(&args.jobs, settings, options.jobs);
    options.selection = args.select.selection()?;
    Ok(options)
}

fn checkout_lock(
    cli: &Cli,
    ui: &Ui,
    args: &CheckoutArgs,
    lock_path: &std::path::Path,
) -> anyhow::Result<u8> {
    let dir = match (&args.revision, &args.dir) {
        (Some(dir), None) => PathBuf::from(dir),
        _ => anyhow::bail!(error::Usage(
            "with --lock, give only the directory: dsv checkout --lock FILE DIR".into()
        )),
    };
    let mut store = open_store(cli)?;
    let settings = store.config()?;
    let options = options(args, &settings)?;
    let requests = jobs_or(&args.jobs, &settings, dsv::remote::DEFAULT_JOBS);
    let report = compose::checkout_lock(
        &mut store,
        lock_path,
        &dir,
        &options,
        requests,
        &ui.reporter(),
    )?;
    if ui.json {
        ui.json(&report)?;
    } else {
        for checkout in &report.datasets {
            ui.line(render::checkout(checkout))?;
        }
    }
    Ok(error::SUCCESS)
}

fn checkout_revision(cli: &Cli, ui: &Ui, args: &CheckoutArgs) -> anyhow::Result<u8> {
    let (Some(revision_text), Some(dir)) = (&args.revision, &args.dir) else {
        anyhow::bail!(error::Usage(
            "give a revision and a directory: dsv checkout REVISION DIR (or --lock FILE DIR)"
                .into()
        ));
    };
    let mut store = open_store(cli)?;
    let settings = store.config()?;
    let options = options(args, &settings)?;
    if args.dry_run {
        let plan =
            compose::plan_from_anywhere(&store, revision_text, dir, &options, &ui.reporter())?;
        ui.report(&plan, render::checkout_plan)?;
        return Ok(if plan.refused {
            error::CONFLICT
        } else {
            error::SUCCESS
        });
    }
    let requests = jobs_or(&args.jobs, &settings, dsv::remote::DEFAULT_JOBS);
    let outcome = compose::checkout_from_anywhere(
        &mut store,
        revision_text,
        dir,
        &options,
        requests,
        &ui.reporter(),
    )?;
    if ui.json {
        ui.json(&outcome)?;
    } else {
        if let Some(fetched) = &outcome.remote {
            ui.line(render::fetched(fetched))?;
        }
        ui.line(render::checkout(&outcome.checkout))?;
    }
    Ok(error::SUCCESS)
}
