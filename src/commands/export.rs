//! `dsv export`: a version as a deterministic tar stream.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use super::open_store;
use crate::{Cli, SelectArgs, error, render, ui::Ui};

/// The archive formats of `dsv export`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum ExportFormat {
    /// POSIX tar (ustar with GNU long names).
    Tar,
}

#[derive(Debug, Args)]
pub(crate) struct ExportArgs {
    #[arg(help = concat!("The revision: ", revision_syntax!()))]
    revision: String,
    /// The archive format.
    #[arg(long, value_enum, default_value = "tar")]
    format: ExportFormat,
    /// Where to write: a file, or `-` for stdout (the default).
    #[arg(short, long, value_name = "FILE|-", default_value = "-")]
    output: PathBuf,
    #[command(flatten)]
    select: SelectArgs,
}

pub(crate) fn run(cli: &Cli, ui: &Ui, args: &ExportArgs) -> anyhow::Result<u8> {
    let ExportFormat::Tar = args.format;
    let output = &args.output;
    let progress = ui.reporter();
    let selection = args.select.selection()?;
    let engine = dsv::read::ReadEngine::new(open_store(cli)?, Default::default());
    let report = if output.as_os_str() == "-" {
        let stdout = std::io::stdout();
        let mut out = std::io::BufWriter::with_capacity(1 << 20, stdout.lock());
        dsv::ops::export::export_tar(
            &engine,
            &args.revision,
            &selection,
            &mut out,
            None,
            &progress,
        )?
    } else {
        // Never over a store's own files (a pack, the catalog): dsv alone writes there. A
        // symlink is followed (as a shell's `>` does) and its target checked the same way.
        dsv::walk::check_workspace_dir(output)?;
        let is_symlink = std::fs::symlink_metadata(output).is_ok_and(|m| m.is_symlink());
        let target = if is_symlink {
            let resolved = std::fs::canonicalize(output).with_context(|| {
                format!("{} is a symlink to nothing that exists", output.display())
            })?;
            dsv::walk::check_workspace_dir(&resolved)?;
            resolved
        } else {
            output.clone()
        };
        // The archive into `file`, buffered, flushed.
        let write_into = |file: &std::fs::File| -> anyhow::Result<dsv::ops::export::ExportReport> {
            let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
            let report = dsv::ops::export::export_tar(
                &engine,
                &args.revision,
                &selection,
                &mut out,
                Some(output),
                &progress,
            )?;
            out.flush()
                .with_context(|| format!("cannot write {}", output.display()))?;
            Ok(report)
        };
        match std::fs::metadata(&target) {
            // A device or a FIFO (`-o /dev/null`, a pipe): written as it is, never replaced.
            Ok(metadata) if !metadata.is_file() => write_into(
                &std::fs::OpenOptions::new()
                    .write(true)
                    .open(&target)
                    .with_context(|| format!("cannot write {}", output.display()))?,
            )?,
            // A file: written to a new file beside it and renamed over it once whole, so a
            // failed export leaves no half-written archive (and the rename replaces whatever
            // name is there then, never following it).
            _ => {
                let parent = match target.parent() {
                    Some(parent) if !parent.as_os_str().is_empty() => parent,
                    _ => std::path::Path::new("."),
                };
                // The mode a new file gets (0666 less the umask), or the one FILE had.
                let mode = std::fs::metadata(&target).map_or(0o666, |m| {
                    std::os::unix::fs::PermissionsExt::mode(&m.permissions())
                });
                let temp = tempfile::Builder::new()
                    .prefix(".export-")
                    .permissions(std::os::unix::fs::PermissionsExt::from_mode(mode & 0o7777))
                    .tempfile_in(parent)
                    .with_context(|| format!("cannot create a file in {}", parent.display()))?;
                let report = write_into(temp.as_file())?;
                temp.persist(&target)
                    .with_context(|| format!("cannot create {}", output.display()))?;
                report
            }
        }
    };
    // Stdout carries the stream: the report goes to stderr.
    if output.as_os_str() != "-" {
        ui.report(&report, render::export)?;
    }
    Ok(error::SUCCESS)
}
