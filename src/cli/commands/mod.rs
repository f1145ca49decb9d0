//! One module per command (as uv's `commands/`): each takes its parsed arguments, calls
//! the library and renders the report, returning the exit code. Helpers shared by several
//! commands turn command-line text into the library's typed options.

pub(crate) mod audit;
pub(crate) mod cache;
pub(crate) mod cat;
pub(crate) mod checkout;
pub(crate) mod commit;
pub(crate) mod config;
pub(crate) mod docs;
pub(crate) mod export;
pub(crate) mod gc;
pub(crate) mod import;
pub(crate) mod init;
pub(crate) mod inspect;
pub(crate) mod mount;
pub(crate) mod pin;
pub(crate) mod remote;
pub(crate) mod repair;
pub(crate) mod reset;
pub(crate) mod shards;
pub(crate) mod status;
pub(crate) mod sync;
pub(crate) mod tag;
pub(crate) mod verify;
pub(crate) mod workspace;

use std::path::{Path, PathBuf};

use anyhow::Context;
use dsv::Store;
use dsv::config::Config;

use super::{Cli, JobsArg};

/// The directory `--store` names (or `DSV_STORE`), else the current directory.
fn store_start(cli: &Cli) -> anyhow::Result<PathBuf> {
    match &cli.store {
        Some(path) => Ok(path.clone()),
        None => std::env::current_dir().context("cannot read the current directory"),
    }
}

/// Opens the store `--store` names, or the nearest one above the current directory.
fn open_store(cli: &Cli) -> anyhow::Result<Store> {
    Ok(Store::discover(&store_start(cli)?)?)
}

/// `--jobs`, else the store's setting `core.jobs` (`dsv config`), else `default`, within
/// the library's bounds.
fn jobs_or(jobs: &JobsArg, settings: &Config, default: usize) -> usize {
    dsv::parallel::clamp_jobs(jobs.jobs.or(settings.core.jobs).unwrap_or(default))
}

/// `--compression-level`, else the store's setting `core.compression_level`, else the
/// library's default.
fn compression_level_or(flag: Option<i32>, settings: &Config, default: i32) -> i32 {
    flag.or(settings.core.compression_level).unwrap_or(default)
}

/// Tells the library where the AWS profile is, as the AWS CLI finds it: `AWS_PROFILE` (else
/// `AWS_DEFAULT_PROFILE`), `AWS_CONFIG_FILE`, `AWS_SHARED_CREDENTIALS_FILE`, `HOME`. The
/// files are read only when an S3 remote or import is opened.
pub(crate) fn use_aws_profile_from_environment() {
    dsv::remote::aws_profile::set_source(Some(
        dsv::remote::aws_profile::AwsProfileSource::from_variables(|name| std::env::var_os(name)),
    ));
}

/// `KEY=VALUE` settings.
fn parse_options(options: &[String]) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    options
        .iter()
        .map(|option| {
            let (key, value) = option.split_once('=').ok_or_else(|| {
                anyhow::anyhow!("--option must look like KEY=VALUE, got {option:?}")
            })?;
            Ok((key.trim().to_string(), value.to_string()))
        })
        .collect()
}

/// The paths of a manifest: one per line, blank lines and surrounding spaces ignored.
pub(super) fn read_list(path: &Path) -> anyhow::Result<Vec<String>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the list {}", path.display()))?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect())
}

/// `DSV_AUTHOR`, else `$USER@hostname`, else "unknown".
fn default_author() -> String {
    if let Ok(author) = std::env::var("DSV_AUTHOR")
        && !author.is_empty()
    {
        return author;
    }
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "unknown".into());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    if host.is_empty() {
        user
    } else {
        format!("{user}@{host}")
    }
}
