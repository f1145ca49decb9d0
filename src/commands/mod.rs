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
#[cfg(feature = "mount")]
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

/// Whether commit, import and update make deltas: not with `--no-deltas`, else the store's
/// setting `core.deltas`, else yes.
fn deltas_or(no_deltas: bool, settings: &Config) -> bool {
    !no_deltas && settings.core.deltas.unwrap_or(true)
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

/// `KEY=VALUE` settings. A malformed one is named by its place, never echoed: it may be a
/// credential typed with the wrong separator (`aws_secret_access_key:...`).
fn parse_options(options: &[String]) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    options
        .iter()
        .enumerate()
        .map(|(index, option)| {
            let (key, value) = option.split_once('=').ok_or_else(|| {
                crate::error::Usage(format!(
                    "--option must look like KEY=VALUE, but --option number {} of {} has no `=` \
                     (not shown: it may hold a secret)",
                    index + 1,
                    options.len()
                ))
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

/// Who commits (the library reads no environment: the CLI decides), the first of:
/// - `DSV_AUTHOR`, as it is;
/// - `$USER` (else `$LOGNAME`) at the host name, as before git's identity was consulted, so
///   that a user's versions keep the author they always had;
/// - git's identity, `user.name <user.email>` (either alone when only one is set), read by
///   running `git config`, so that git's every config file counts (`~/.gitconfig`,
///   `$XDG_CONFIG_HOME/git/config`, `/etc/gitconfig`, `GIT_CONFIG_GLOBAL`, includes);
/// - the account name of this process's uid (the password database) at the host name;
/// - "unknown" at the host name.
pub fn default_author() -> String {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    if let Some(author) = var("DSV_AUTHOR") {
        return author;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let at_host = |user: String| {
        if host.is_empty() {
            user
        } else {
            format!("{user}@{host}")
        }
    };
    if let Some(user) = var("USER").or_else(|| var("LOGNAME")) {
        return at_host(user);
    }
    if let Some(identity) = git_identity() {
        return identity;
    }
    if let Ok(Some(user)) = nix::unistd::User::from_uid(nix::unistd::getuid())
        && !user.name.is_empty()
    {
        return at_host(user.name);
    }
    at_host("unknown".into())
}

/// git's `user.name` and `user.email` as `NAME <EMAIL>` (or the one that is set), from
/// `git config` run in the current directory (as `git commit` there would read them); `None`
/// when git is not installed or neither is set.
///
/// Running git rather than parsing `~/.gitconfig` here: git alone knows every file it reads
/// and their precedence (system, `$XDG_CONFIG_HOME/git/config`, global, `GIT_CONFIG_GLOBAL`,
/// the repository's own, `[include]` and `[includeIf]`) and its syntax (quoting, escapes,
/// continuation lines, case-insensitive section names); a parser of one file would disagree
/// with git on some of them.
fn git_identity() -> Option<String> {
    let get = |key: &str| {
        let out = std::process::Command::new("git")
            .args(["config", "--get", key])
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
            .ok()?;
        let value = String::from_utf8(out.stdout).ok()?.trim().to_string();
        (out.status.success() && !value.is_empty()).then_some(value)
    };
    match (get("user.name"), get("user.email")) {
        (Some(name), Some(email)) => Some(format!("{name} <{email}>")),
        (Some(one), None) | (None, Some(one)) => Some(one),
        (None, None) => None,
    }
}
