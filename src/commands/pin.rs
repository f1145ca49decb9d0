//! Pins, which keep versions from removal: `dsv pin`, `dsv unpin`, `dsv pins`.

use clap::Args;
use dsv::Revision;
use dsv::ops::retention;

use super::open_store;
use crate::{Cli, error, render, ui::Ui};

#[derive(Debug, Args)]
pub(crate) struct PinArgs {
    #[arg(help = concat!("The revision: ", revision_syntax!()))]
    revision: String,
    /// Why (shown by `dsv pins`).
    #[arg(long, default_value = "")]
    reason: String,
    /// Until when: an RFC 3339 time (2026-12-01T00:00:00Z) or a duration from now (7d).
    #[arg(long, value_name = "TIME")]
    until: Option<String>,
}

pub(crate) fn pin(cli: &Cli, ui: &Ui, args: &PinArgs) -> anyhow::Result<u8> {
    let until = args.until.as_deref().map(parse_until).transpose()?;
    let mut store = open_store(cli)?;
    let pin = retention::pin(
        &mut store,
        &Revision::parse(&args.revision)?,
        &args.reason,
        until,
    )?;
    ui.report(&pin, |p| {
        format!("Pinned {}@{}", p.dataset, p.version.short())
    })?;
    Ok(error::SUCCESS)
}

#[derive(Debug, Args)]
pub(crate) struct UnpinArgs {
    #[arg(help = concat!("The revision: ", revision_syntax!()))]
    revision: String,
}

pub(crate) fn unpin(cli: &Cli, ui: &Ui, args: &UnpinArgs) -> anyhow::Result<u8> {
    let mut store = open_store(cli)?;
    let id = retention::unpin(&mut store, &Revision::parse(&args.revision)?)?;
    ui.report(&serde_json::json!({ "unpinned": id }), |_| {
        format!("Unpinned {}", id.short())
    })?;
    Ok(error::SUCCESS)
}

pub(crate) fn pins(cli: &Cli, ui: &Ui) -> anyhow::Result<u8> {
    let store = open_store(cli)?;
    let pins = store.catalog().pins()?;
    ui.report(pins.as_slice(), render::pins)?;
    Ok(error::SUCCESS)
}

/// `--until`: an RFC 3339 time or a duration from now; Unix seconds.
fn parse_until(text: &str) -> anyhow::Result<i64> {
    let when = match humantime::parse_rfc3339_weak(text) {
        Ok(time) => time,
        Err(_) => {
            let duration = humantime::parse_duration(text).map_err(|_| {
                error::Usage(format!(
                    "--until {text:?} is neither a time (2026-12-01T00:00:00Z) nor a duration (7d)"
                ))
            })?;
            std::time::SystemTime::now() + duration
        }
    };
    Ok(when
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0))
}
