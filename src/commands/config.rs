//! `dsv config list|get|set|unset`: the store's settings (`.dsv/config.toml`).

use clap::Subcommand;
use dsv::config::{Config, Setting};

use super::open_store;
use crate::{Cli, error, ui::Ui};

#[derive(Debug, Subcommand)]
pub(crate) enum ConfigCommand {
    /// Print the settings that are set (`KEY = VALUE`, one a line).
    ///
    /// Examples:
    ///   dsv config list
    ///   dsv config list --json
    #[command(verbatim_doc_comment)]
    List,
    /// Print one setting's value; exit 1, printing nothing, when it is not set.
    ///
    /// Examples:
    ///   dsv config get core.jobs
    ///   dsv config get remote.default || echo "no default remote"
    #[command(verbatim_doc_comment)]
    Get {
        /// The setting: core.compression_level, core.jobs, core.deltas or remote.default.
        key: String,
    },
    /// Set a setting (checked as the file is: a level from 1 to 19, jobs from 1 to 256,
    /// deltas true or false, the name of a remote of this store).
    ///
    /// Examples:
    ///   dsv config set core.compression_level 9
    ///   dsv config set core.deltas false
    ///   dsv config set remote.default backup
    #[command(verbatim_doc_comment)]
    Set {
        /// The setting: core.compression_level, core.jobs, core.deltas or remote.default.
        key: String,
        /// Its value.
        value: String,
    },
    /// Remove a setting, so that the built-in default applies again.
    ///
    /// Examples:
    ///   dsv config unset core.jobs
    #[command(verbatim_doc_comment)]
    Unset {
        /// The setting.
        key: String,
    },
}

pub(crate) fn run(cli: &Cli, ui: &Ui, command: &ConfigCommand) -> anyhow::Result<u8> {
    let store = open_store(cli)?;
    let mut config = store.config()?;
    let path = Config::path(store.root());
    match command {
        ConfigCommand::List => {
            let entries = config.entries();
            if ui.json {
                let settings: serde_json::Map<String, serde_json::Value> = entries
                    .iter()
                    .map(|(setting, value)| (setting.key().to_string(), serde_json::json!(value)))
                    .collect();
                ui.json(&serde_json::json!({ "path": path, "settings": settings }))?;
            } else {
                for (setting, value) in &entries {
                    ui.line(format!("{setting} = {value}"))?;
                }
            }
        }
        ConfigCommand::Get { key } => {
            let setting = Setting::parse(key)?;
            let value = config.get(setting);
            if ui.json {
                ui.json(&serde_json::json!({ "key": setting.key(), "value": value }))?;
            } else if let Some(value) = &value {
                ui.line(value.to_string())?;
            }
            if value.is_none() {
                return Ok(NOT_SET);
            }
        }
        ConfigCommand::Set { key, value } => {
            let setting = Setting::parse(key)?;
            if setting == Setting::DefaultRemote {
                // A typo here would send every later push somewhere unexpected.
                store.catalog().remote(value.trim())?;
            }
            let before = config.get(setting);
            config.set(setting, value)?;
            config.save(store.root())?;
            let after = config.get(setting);
            if ui.json {
                ui.json(&serde_json::json!({
                    "key": setting.key(), "value": after, "previous": before,
                }))?;
            } else if let Some(after) = after {
                ui.line(format!("{setting} = {after}"))?;
            }
        }
        ConfigCommand::Unset { key } => {
            let setting = Setting::parse(key)?;
            let before = config.unset(setting);
            if before.is_some() {
                config.save(store.root())?;
            }
            if ui.json {
                ui.json(&serde_json::json!({ "key": setting.key(), "previous": before }))?;
            } else if before.is_some() {
                ui.line(format!("Unset {setting}"))?;
            } else {
                ui.line(format!("{setting} was not set"))?;
            }
        }
    }
    Ok(error::SUCCESS)
}

/// Exit code of `dsv config get` for a setting that is not set (as `git config --get`).
const NOT_SET: u8 = error::DIFFERENCES;
