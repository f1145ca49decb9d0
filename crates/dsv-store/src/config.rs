//! Store settings: `.dsv/config.toml`, the defaults of options that commands otherwise take
//! as flags every time (`dsv config` reads and writes it).
//!
//! ```toml
//! [core]
//! compression_level = 9   # zstd level of commit and import (1-19; built-in default 3)
//! jobs = 4                # --jobs of commit, import, checkout, push, pull, fetch (1-256)
//! deltas = false          # commit, import, update store every chunk whole (--no-deltas)
//!
//! [remote]
//! default = "backup"      # the remote of push, pull and fetch without --remote
//!
//! [cache]
//! limit = 10737418240     # bytes of fetched data a read keeps here (`dsv cache limit`)
//! ```
//!
//! Precedence: a command-line flag, then this file, then the built-in default. The file is
//! TOML (<https://toml.io/en/v1.0.0>); an unknown section or key, or a value out of range,
//! is an error naming the file and the line, so a typo never goes unnoticed. It holds no
//! credentials (those stay in the environment and the AWS profile files), is at most
//! `MAX_CONFIG_LEN` bytes, and is replaced atomically (temp file, sync, rename) when
//! written, so a reader sees the old file or the new one. Comments in it are not kept when
//! `dsv config set` rewrites it.

use std::fmt;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize};

use crate::error::{Error, IoResultExt, Result};

/// The settings file's name inside the `.dsv` directory.
pub(crate) const CONFIG_FILE: &str = "config.toml";

/// The largest settings file dsv reads, in bytes (64 KiB).
pub(crate) const MAX_CONFIG_LEN: u64 = 64 * 1024;

/// The zstd levels a setting or flag may name.
pub(crate) const COMPRESSION_LEVELS: std::ops::RangeInclusive<i64> = 1..=19;

/// A store's settings; a field that is `None` is not set (the built-in default applies).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[core]`.
    #[serde(default, skip_serializing_if = "Core::is_empty")]
    pub core: Core,
    /// `[remote]`.
    #[serde(default, skip_serializing_if = "RemoteSettings::is_empty")]
    pub remote: RemoteSettings,
    /// `[cache]`.
    #[serde(default, skip_serializing_if = "CacheSettings::is_empty")]
    pub cache: CacheSettings,
}

/// The `[cache]` section (`dsv cache limit` writes it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheSettings {
    /// `limit`: the bytes of packs this store keeps, at most, of data a remote holds
    /// (fetched by reads); least recently used packs are evicted past it. At least 1.
    #[serde(
        default,
        deserialize_with = "cache_limit",
        skip_serializing_if = "Option::is_none"
    )]
    pub limit: Option<u64>,
}

impl CacheSettings {
    fn is_empty(&self) -> bool {
        self == &CacheSettings::default()
    }
}

fn cache_limit<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    let n = i64::deserialize(deserializer)?;
    match u64::try_from(n) {
        Ok(n) if n > 0 => Ok(Some(n)),
        _ => Err(serde::de::Error::custom(
            "limit must be a number of bytes of at least 1",
        )),
    }
}

/// The `[core]` section.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Core {
    /// `compression_level`: the zstd level of commit and import, 1 to 19.
    #[serde(
        default,
        deserialize_with = "compression_level",
        skip_serializing_if = "Option::is_none"
    )]
    pub compression_level: Option<i32>,
    /// `jobs`: parallel workers or requests in flight, 1 to
    /// [`crate::parallel::MAX_JOBS`].
    #[serde(
        default,
        deserialize_with = "jobs",
        skip_serializing_if = "Option::is_none"
    )]
    pub jobs: Option<usize>,
    /// `deltas`: whether commit, import and update store a changed file's new chunks as
    /// deltas against its previous version's chunks (`false`: every chunk whole, as their
    /// `--no-deltas`). Built-in default: true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deltas: Option<bool>,
}

impl Core {
    fn is_empty(&self) -> bool {
        self == &Core::default()
    }
}

/// The `[remote]` section.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteSettings {
    /// `default`: the remote of push, pull and fetch when none is given.
    #[serde(
        default,
        deserialize_with = "remote_name",
        skip_serializing_if = "Option::is_none"
    )]
    pub default: Option<String>,
}

impl RemoteSettings {
    fn is_empty(&self) -> bool {
        self == &RemoteSettings::default()
    }
}

/// One setting, by its dotted key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Setting {
    /// `core.compression_level`.
    CompressionLevel,
    /// `core.jobs`.
    Jobs,
    /// `core.deltas`.
    Deltas,
    /// `remote.default`.
    DefaultRemote,
}

impl Setting {
    /// Every setting, in the order `dsv config list` prints them.
    pub const ALL: [Setting; 4] = [
        Setting::CompressionLevel,
        Setting::Jobs,
        Setting::Deltas,
        Setting::DefaultRemote,
    ];

    /// The dotted key (`core.jobs`).
    pub fn key(self) -> &'static str {
        match self {
            Setting::CompressionLevel => "core.compression_level",
            Setting::Jobs => "core.jobs",
            Setting::Deltas => "core.deltas",
            Setting::DefaultRemote => "remote.default",
        }
    }

    /// The setting named by `key`.
    ///
    /// # Errors
    /// [`Error::UnknownSetting`] listing the known keys.
    pub fn parse(key: &str) -> Result<Setting> {
        Setting::ALL
            .into_iter()
            .find(|s| s.key() == key.trim())
            .ok_or_else(|| Error::UnknownSetting {
                key: key.to_string(),
                known: Setting::ALL.iter().map(|s| s.key()).collect(),
            })
    }
}

impl fmt::Display for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

/// A setting's value: a number, a switch or a name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Value {
    /// A number (compression level, jobs).
    Number(i64),
    /// A switch (deltas).
    Bool(bool),
    /// A name (a remote).
    Text(String),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Number(n) => write!(f, "{n}"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Text(t) => f.write_str(t),
        }
    }
}

impl Config {
    /// The settings file of the store whose `.dsv` directory is `store_root`.
    pub fn path(store_root: &Path) -> PathBuf {
        store_root.join(CONFIG_FILE)
    }

    /// Reads the settings of the store at `store_root`; no file means no settings.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a file over `MAX_CONFIG_LEN`, not UTF-8, or that does
    /// not parse (with the line); [`Error::Io`] when it cannot be read.
    pub fn load(store_root: &Path) -> Result<Config> {
        let path = Config::path(store_root);
        let file = match crate::store_file::open_read(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Config::default()),
            Err(e) => return Err(e).at(&path),
        };
        let mut bytes = Vec::new();
        file.take(MAX_CONFIG_LEN + 1)
            .read_to_end(&mut bytes)
            .at(&path)?;
        let invalid = |reason: String| Error::InvalidConfig {
            path: path.clone(),
            line: None,
            reason,
        };
        if bytes.len() as u64 > MAX_CONFIG_LEN {
            return Err(invalid(format!(
                "larger than {} KiB",
                MAX_CONFIG_LEN / 1024
            )));
        }
        let text = String::from_utf8(bytes).map_err(|_| invalid("not UTF-8 text".into()))?;
        Config::parse(&path, &text)
    }

    /// Parses the text of a settings file; `path` names it in errors. Pure.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] with the line of the first problem: bad TOML, an unknown
    /// section or key, a value of the wrong type or out of range.
    pub fn parse(path: &Path, text: &str) -> Result<Config> {
        toml::from_str(text).map_err(|e| Error::InvalidConfig {
            path: path.to_path_buf(),
            line: e
                .span()
                .map(|span| text[..span.start.min(text.len())].matches('\n').count() + 1),
            reason: e.message().trim().to_string(),
        })
    }

    /// Writes the settings of the store at `store_root`, replacing the file atomically:
    /// a temp file beside it, synced, renamed over it, and the directory synced.
    ///
    /// # Errors
    /// [`Error::Io`].
    pub fn save(&self, store_root: &Path) -> Result<()> {
        let path = Config::path(store_root);
        let mut text = String::from(
            "# dsv store settings: `dsv config list`, `dsv config set KEY VALUE` (docs/cli.md).\n",
        );
        text.push_str(&toml::to_string(self).map_err(|e| Error::Internal {
            detail: format!("cannot write the settings as TOML: {e}"),
        })?);
        let mut temp = tempfile::Builder::new()
            .prefix(".config.toml.")
            .tempfile_in(store_root)
            .at(store_root)?;
        temp.write_all(text.as_bytes()).at(temp.path())?;
        temp.as_file().sync_all().at(temp.path())?;
        temp.persist(&path).map_err(|e| e.error).at(&path)?;
        std::fs::File::open(store_root)
            .and_then(|dir| dir.sync_all())
            .at(store_root)?;
        Ok(())
    }

    /// The value of `setting`, when set.
    pub fn get(&self, setting: Setting) -> Option<Value> {
        match setting {
            Setting::CompressionLevel => {
                self.core.compression_level.map(|n| Value::Number(n.into()))
            }
            Setting::Jobs => self.core.jobs.map(|n| Value::Number(n as i64)),
            Setting::Deltas => self.core.deltas.map(Value::Bool),
            Setting::DefaultRemote => self.remote.default.clone().map(Value::Text),
        }
    }

    /// Sets `setting` from its text (`"9"`, `"origin"`), checking it as the file is checked.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] naming what the setting takes.
    pub fn set(&mut self, setting: Setting, text: &str) -> Result<()> {
        let invalid = |reason: String| Error::InvalidSetting {
            key: setting.key(),
            value: text.to_string(),
            reason,
        };
        let number = || {
            text.trim()
                .parse::<i64>()
                .map_err(|_| invalid("expected a whole number".into()))
        };
        match setting {
            Setting::CompressionLevel => {
                self.core.compression_level =
                    Some(check_compression_level(number()?).map_err(invalid)?);
            }
            Setting::Jobs => {
                self.core.jobs =
                    Some(check_jobs(number()?).map_err(|e| invalid(format!("expected {e}")))?);
            }
            Setting::Deltas => {
                self.core.deltas = Some(match text.trim() {
                    "true" => true,
                    "false" => false,
                    _ => return Err(invalid("expected true or false".into())),
                });
            }
            Setting::DefaultRemote => {
                self.remote.default =
                    Some(check_remote_name(text).map_err(|e| invalid(format!("expected {e}")))?);
            }
        }
        Ok(())
    }

    /// Unsets `setting`; returns its value before, if it had one.
    pub fn unset(&mut self, setting: Setting) -> Option<Value> {
        let before = self.get(setting);
        match setting {
            Setting::CompressionLevel => self.core.compression_level = None,
            Setting::Jobs => self.core.jobs = None,
            Setting::Deltas => self.core.deltas = None,
            Setting::DefaultRemote => self.remote.default = None,
        }
        before
    }

    /// The settings that are set, in [`Setting::ALL`] order.
    pub fn entries(&self) -> Vec<(Setting, Value)> {
        Setting::ALL
            .into_iter()
            .filter_map(|s| self.get(s).map(|v| (s, v)))
            .collect()
    }
}

fn check_compression_level(n: i64) -> Result<i32, String> {
    if COMPRESSION_LEVELS.contains(&n) {
        Ok(n as i32)
    } else {
        Err(format!(
            "a zstd level from {} to {}",
            COMPRESSION_LEVELS.start(),
            COMPRESSION_LEVELS.end()
        ))
    }
}

fn check_jobs(n: i64) -> Result<usize, String> {
    match usize::try_from(n) {
        Ok(n) if (1..=crate::parallel::MAX_JOBS).contains(&n) => Ok(n),
        _ => Err(format!("a number from 1 to {}", crate::parallel::MAX_JOBS)),
    }
}

fn check_remote_name(name: &str) -> Result<String, String> {
    let name = name.trim();
    if name.is_empty() || name.chars().any(|c| c.is_control() || c == '/') {
        Err("a remote's name (`dsv remote ls` lists them)".into())
    } else {
        Ok(name.to_string())
    }
}

fn compression_level<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i32>, D::Error> {
    check_compression_level(i64::deserialize(d)?)
        .map(Some)
        .map_err(|e| serde::de::Error::custom(format!("compression_level must be {e}")))
}

fn jobs<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    check_jobs(i64::deserialize(d)?)
        .map(Some)
        .map_err(|e| serde::de::Error::custom(format!("jobs must be {e}")))
}

fn remote_name<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    check_remote_name(&String::deserialize(d)?)
        .map(Some)
        .map_err(|e| serde::de::Error::custom(format!("default must be {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config> {
        Config::parse(Path::new("/s/.dsv/config.toml"), text)
    }

    fn line_of(error: Error) -> (Option<usize>, String) {
        match error {
            Error::InvalidConfig { line, reason, .. } => (line, reason),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_file_parses_into_typed_settings() {
        let config = parse(
            "# comment\n[core]\ncompression_level = 9\njobs = 4\n\n[remote]\ndefault = \"backup\"\n",
        )
        .unwrap();
        assert_eq!(config.core.compression_level, Some(9));
        assert_eq!(config.core.jobs, Some(4));
        assert_eq!(config.remote.default.as_deref(), Some("backup"));
        assert_eq!(parse("").unwrap(), Config::default());
    }

    #[test]
    fn unknown_keys_and_bad_values_name_the_line() {
        let (line, reason) =
            line_of(parse("[core]\njobs = 4\ncompresion_level = 3\n").unwrap_err());
        assert_eq!(line, Some(3));
        assert!(reason.contains("compresion_level"), "{reason}");
        let (line, reason) = line_of(parse("[core]\n\ncompression_level = 25\n").unwrap_err());
        assert_eq!(line, Some(3));
        assert!(reason.contains("1 to 19"), "{reason}");
        let (line, _) = line_of(parse("[core]\njobs = \"four\"\n").unwrap_err());
        assert_eq!(line, Some(2));
        let (line, _) = line_of(parse("[core]\njobs = 0\n").unwrap_err());
        assert_eq!(line, Some(2));
        let (line, _) = line_of(parse("[mystery]\nx = 1\n").unwrap_err());
        assert_eq!(line, Some(1));
        let (line, _) = line_of(parse("[core\n").unwrap_err());
        assert_eq!(line, Some(1));
    }

    #[test]
    fn set_checks_values_as_the_file_does_and_unset_returns_the_old_value() {
        let mut config = Config::default();
        config.set(Setting::Jobs, "8").unwrap();
        config.set(Setting::DefaultRemote, "origin").unwrap();
        assert!(matches!(
            config.set(Setting::CompressionLevel, "0"),
            Err(Error::InvalidSetting {
                key: "core.compression_level",
                ..
            })
        ));
        assert!(config.set(Setting::Jobs, "many").is_err());
        assert!(config.set(Setting::DefaultRemote, " ").is_err());
        assert_eq!(
            config.entries(),
            [
                (Setting::Jobs, Value::Number(8)),
                (Setting::DefaultRemote, Value::Text("origin".into()))
            ]
        );
        assert_eq!(config.unset(Setting::Jobs), Some(Value::Number(8)));
        assert_eq!(config.unset(Setting::Jobs), None);
        assert!(matches!(
            Setting::parse("core.job"),
            Err(Error::UnknownSetting { .. })
        ));
        assert_eq!(
            Setting::parse("remote.default").unwrap(),
            Setting::DefaultRemote
        );
    }

    #[test]
    fn save_and_load_round_trip_atomically_and_big_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Config::load(dir.path()).unwrap(), Config::default());
        let mut config = Config::default();
        config.set(Setting::CompressionLevel, "12").unwrap();
        config.set(Setting::DefaultRemote, "backup").unwrap();
        config.save(dir.path()).unwrap();
        assert_eq!(Config::load(dir.path()).unwrap(), config);
        // Only the file itself is left: no temp file beside it.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [CONFIG_FILE]);
        std::fs::write(
            Config::path(dir.path()),
            "#".repeat(MAX_CONFIG_LEN as usize + 1),
        )
        .unwrap();
        let (line, reason) = line_of(Config::load(dir.path()).unwrap_err());
        assert_eq!(line, None);
        assert!(reason.contains("64 KiB"), "{reason}");
    }
}
