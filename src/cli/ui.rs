//! Output discipline: data on stdout (human text or `--json`), progress and errors on
//! stderr; progress bars only on a terminal, never with `--json` or `--quiet`.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use dsv::progress::{Progress, Unit};

/// How output is printed.
#[derive(Debug, Clone, Copy)]
pub struct Ui {
    /// Machine-readable output on stdout.
    pub json: bool,
    /// No human output except errors.
    pub quiet: bool,
    /// Draw progress bars (stderr is a terminal, not quiet, not json).
    pub progress: bool,
}

impl Ui {
    /// Settings from the global flags and the terminal.
    pub fn new(json: bool, quiet: bool, no_progress: bool) -> Ui {
        let progress = !json && !quiet && !no_progress && std::io::stderr().is_terminal();
        Ui {
            json,
            quiet,
            progress,
        }
    }

    /// Prints `value` as pretty JSON on stdout.
    pub fn json<T: serde::Serialize + ?Sized>(&self, value: &T) -> anyhow::Result<()> {
        let mut out = std::io::stdout().lock();
        serde_json::to_writer_pretty(&mut out, value)?;
        writeln!(out)?;
        Ok(())
    }

    /// Prints `value` as JSON with `--json`, else `text(value)` as human output.
    pub fn report<T: serde::Serialize + ?Sized>(
        &self,
        value: &T,
        text: impl FnOnce(&T) -> String,
    ) -> anyhow::Result<()> {
        if self.json {
            self.json(value)
        } else {
            self.line(text(value))
        }
    }

    /// Prints a line of human output on stdout unless quiet.
    pub fn line(&self, text: impl AsRef<str>) -> anyhow::Result<()> {
        if !self.quiet {
            writeln!(std::io::stdout().lock(), "{}", text.as_ref())?;
        }
        Ok(())
    }

    /// Prints a note for the user on stderr (human output only, unless quiet): something they
    /// should know that is not the command's result.
    pub fn note(&self, text: impl AsRef<str>) -> anyhow::Result<()> {
        if !self.quiet && !self.json {
            writeln!(std::io::stderr().lock(), "note: {}", text.as_ref())?;
        }
        Ok(())
    }

    /// A progress reporter for the library.
    pub fn reporter(&self) -> Bar {
        Bar {
            enabled: self.progress,
            bar: Mutex::new(None),
        }
    }
}

/// An indicatif progress bar on stderr implementing the library's [`Progress`].
pub struct Bar {
    enabled: bool,
    bar: Mutex<Option<ProgressBar>>,
}

impl Progress for Bar {
    fn start(&self, phase: &str, total: u64, unit: Unit) {
        if !self.enabled {
            return;
        }
        let bar =
            ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr_with_hz(20));
        let template = match unit {
            Unit::Bytes => {
                "{msg:>9} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}"
            }
            Unit::Files => "{msg:>9} [{bar:30}] {pos}/{len} files eta {eta}",
        };
        bar.set_style(
            ProgressStyle::with_template(template)
                .expect("valid template")
                .progress_chars("=> "),
        );
        bar.set_message(phase.to_string());
        bar.enable_steady_tick(Duration::from_millis(250));
        *self.bar.lock().expect("progress lock") = Some(bar);
    }

    fn advance(&self, amount: u64) {
        if let Some(bar) = self.bar.lock().expect("progress lock").as_ref() {
            bar.inc(amount);
        }
    }

    fn finish(&self) {
        if let Some(bar) = self.bar.lock().expect("progress lock").take() {
            bar.finish_and_clear();
        }
    }
}
