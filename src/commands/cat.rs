//! `dsv cat REV:PATH [--range START..END]`.

use std::io::Write;

use clap::Args;

use super::open_store;
use crate::{Cli, error};

#[derive(Debug, Args)]
pub(crate) struct CatArgs {
    #[arg(
        value_name = "REV:PATH",
        help = concat!("REV:PATH, e.g. mnist@v1:train/0.png. REV is ", revision_syntax!())
    )]
    target: String,
    /// `dsv cat REV PATH`, as `git show`'s users type it: refused with `REV:PATH` suggested.
    #[arg(hide = true)]
    path: Option<String>,
    /// Only bytes START..END (END exclusive; either may be omitted).
    #[arg(long, value_name = "START..END")]
    range: Option<String>,
}

pub(crate) fn run(cli: &Cli, args: &CatArgs) -> anyhow::Result<u8> {
    if let Some(path) = &args.path {
        return Err(error::Usage(format!(
            "dsv cat takes one argument, REV:PATH: did you mean `dsv cat {}:{path}`?",
            args.target
        ))
        .into());
    }
    let (revision, path) = args.target.split_once(':').ok_or_else(|| {
        error::Usage("expected REV:PATH, for example mnist@v1:train/0.png".into())
    })?;
    let range = args.range.as_deref().map(parse_range).transpose()?;
    let store = open_store(cli)?;
    let engine = dsv::read::ReadEngine::new(store, Default::default());
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    dsv::ops::cat::cat(&engine, revision, path, range, &mut out)?;
    out.flush()?;
    Ok(error::SUCCESS)
}

/// Parses `START..END`, `START..` or `..END` (bytes, END exclusive).
///
/// # Errors
/// A usage error (exit 2) for a range of another form.
fn parse_range(text: &str) -> Result<std::ops::Range<u64>, error::Usage> {
    let usage = |message: &str| error::Usage(message.into());
    let (start, end) = text
        .split_once("..")
        .ok_or_else(|| usage("--range must look like START..END"))?;
    let start: u64 = if start.is_empty() {
        0
    } else {
        start
            .parse()
            .map_err(|_| usage("--range START is not a number"))?
    };
    let end: u64 = if end.is_empty() {
        u64::MAX
    } else {
        end.parse()
            .map_err(|_| usage("--range END is not a number"))?
    };
    if start > end {
        return Err(usage("--range START must not exceed END"));
    }
    Ok(start..end)
}
