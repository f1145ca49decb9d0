//! Output discipline: data on stdout (human text or `--json`), progress and errors on
//! stderr; progress bars only on a terminal, never with `--json` or `--quiet`.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use indicatif::{
    HumanCount, HumanDuration, ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle,
};

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
        to_stdout(|out| {
            serde_json::to_writer_pretty(&mut *out, value).map_err(std::io::Error::from)?;
            writeln!(out)
        })
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
            to_stdout(|out| writeln!(out, "{}", text.as_ref()))?;
        }
        Ok(())
    }

    /// Prints `text` as it is (no newline added) as human output on stdout unless quiet.
    pub fn print(&self, text: &str) -> anyhow::Result<()> {
        if !self.quiet {
            print_raw(text)?;
        }
        Ok(())
    }

    /// Prints a note for the user on stderr (human output only, unless quiet): something they
    /// should know that is not the command's result.
    pub fn note(&self, text: impl AsRef<str>) -> anyhow::Result<()> {
        if !self.quiet && !self.json {
            // Redacted as errors are: a note may echo an argument.
            let text = crate::redact_message(text.as_ref());
            writeln!(std::io::stderr().lock(), "note: {text}")?;
        }
        Ok(())
    }

    /// A progress reporter for the library.
    pub fn reporter(&self) -> Bar {
        Bar {
            enabled: self.progress,
            bar: Mutex::new(None),
            files: Arc::new((AtomicU64::new(0), AtomicU64::new(0))),
        }
    }
}

/// Set once stdout is found closed (the reader of a pipe went away, as `head` does).
static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes a command's output on stdout. A closed stdout ends the output quietly, and only the
/// output: the command goes on to its answer, so its exit status (5 for a store `dsv verify`
/// finds damaged, 1 for a directory `dsv audit` finds different) is the same in a pipe as
/// without one.
/// Whether stdout was found closed (a reader such as `head` went away): a listing that
/// streams may stop walking.
pub fn stdout_closed() -> bool {
    STDOUT_CLOSED.load(Ordering::Relaxed)
}

/// A JSON array written to stdout an element at a time, exactly as `serde_json`'s pretty
/// printer writes the whole array at `indent` levels (two spaces each) inside a document:
/// a listing of millions of entries is never held to be printed.
pub struct JsonArray {
    indent: String,
    written: u64,
    /// What is not yet on stdout: written a block at a time, not a call per element.
    buffer: String,
}

/// Bytes a streamed listing gathers before writing them to stdout.
const STREAM_BLOCK: usize = 1 << 16;

impl JsonArray {
    /// Starts the array (`[`); `indent` is the level its own brackets sit at.
    pub fn start(indent: usize) -> JsonArray {
        JsonArray {
            indent: "  ".repeat(indent),
            written: 0,
            buffer: String::from("["),
        }
    }

    /// Adds one element.
    pub fn push<T: serde::Serialize>(&mut self, item: &T) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(item)?;
        self.buffer
            .push_str(if self.written == 0 { "\n" } else { ",\n" });
        self.written += 1;
        for (i, line) in text.lines().enumerate() {
            if i > 0 {
                self.buffer.push('\n');
            }
            self.buffer.push_str(&self.indent);
            self.buffer.push_str("  ");
            self.buffer.push_str(line);
        }
        if self.buffer.len() >= STREAM_BLOCK {
            print_raw(&std::mem::take(&mut self.buffer))?;
        }
        Ok(())
    }

    /// Adds one element written by the caller: `text` starts it (at the element's
    /// indentation, which this writes), and what the caller writes after this call to
    /// stdout continues it. Writes everything buffered first.
    pub fn push_raw(&mut self, text: &str) -> anyhow::Result<()> {
        self.buffer
            .push_str(if self.written == 0 { "\n" } else { ",\n" });
        self.written += 1;
        self.buffer.push_str(&self.indent);
        self.buffer.push_str("  ");
        self.buffer.push_str(text);
        print_raw(&std::mem::take(&mut self.buffer))
    }

    /// Ends the array (`]`, on a line of its own when it holds anything) and writes what is
    /// left.
    pub fn finish(mut self) -> anyhow::Result<()> {
        if self.written > 0 {
            self.buffer.push('\n');
            self.buffer.push_str(&self.indent);
        }
        self.buffer.push(']');
        print_raw(&self.buffer)
    }
}

/// Entries (or changes) a streamed listing renders together as text: a listing up to this
/// long is one table, aligned as a whole; a longer one is aligned block by block.
pub const LISTING_BLOCK: usize = 1024;

/// A listing printed as the library finds it, never held whole: with `--json` the elements
/// of a JSON array ([`JsonArray`]), else text that `render` makes of [`LISTING_BLOCK`] items
/// at a time. The library's walk is stopped (by the error [`Listing::push`] returns) when
/// stdout is closed or cannot be written.
pub struct Listing<'u, T, R> {
    ui: &'u Ui,
    array: Option<JsonArray>,
    block: Vec<T>,
    blocks_printed: u64,
    render: R,
    failure: Option<anyhow::Error>,
}

impl<'u, T: serde::Serialize, R: Fn(&[T]) -> String> Listing<'u, T, R> {
    /// A listing; its JSON array's brackets sit at `json_indent` levels.
    pub fn new(ui: &'u Ui, json_indent: usize, render: R) -> Self {
        Listing {
            ui,
            array: ui.json.then(|| JsonArray::start(json_indent)),
            block: Vec::new(),
            blocks_printed: 0,
            render,
            failure: None,
        }
    }

    /// Adds `item`; an error (for the walk to stop on) once stdout is closed or failed.
    pub fn push(&mut self, item: T) -> dsv::Result<()> {
        let shown = match &mut self.array {
            Some(array) => array.push(&item),
            None => {
                self.block.push(item);
                if self.block.len() < LISTING_BLOCK {
                    return Ok(());
                }
                let text = (self.render)(&self.block);
                self.block.clear();
                self.blocks_printed += 1;
                self.ui.print(&text)
            }
        };
        match shown {
            Ok(()) if stdout_closed() => Err(dsv::Error::Interrupted),
            Ok(()) => Ok(()),
            Err(error) => {
                self.failure = Some(error);
                Err(dsv::Error::Interrupted)
            }
        }
    }

    /// The walk's result `walked`, with the stop this listing asked for undone: `None` when
    /// stdout was closed (the output ends quietly), this listing's own write error when one
    /// stopped it.
    pub fn settle<V>(&mut self, walked: dsv::Result<V>) -> anyhow::Result<Option<V>> {
        if let Some(error) = self.failure.take() {
            return Err(error);
        }
        match walked {
            Err(dsv::Error::Interrupted) if stdout_closed() => Ok(None),
            other => Ok(Some(other?)),
        }
    }

    /// Ends the JSON array; gives the text items not printed yet and whether any block was.
    pub fn finish(self) -> anyhow::Result<(Vec<T>, bool)> {
        if let Some(array) = self.array {
            array.finish()?;
        }
        Ok((self.block, self.blocks_printed > 0))
    }
}

/// Writes raw `text` to stdout (no newline added), as [`Ui::line`] does its lines.
pub fn print_raw(text: &str) -> anyhow::Result<()> {
    to_stdout(|out| out.write_all(text.as_bytes()))
}

fn to_stdout(
    write: impl FnOnce(&mut std::io::StdoutLock<'static>) -> std::io::Result<()>,
) -> anyhow::Result<()> {
    if STDOUT_CLOSED.load(Ordering::Relaxed) {
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    match write(&mut out).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            STDOUT_CLOSED.store(true, Ordering::Relaxed);
            Ok(())
        }
        result => Ok(result?),
    }
}

/// True when output on stderr may be colored: it is a terminal and `NO_COLOR` is unset or
/// empty (<https://no-color.org>).
pub fn color_on_stderr() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Progress on stderr, drawn with indicatif, implementing the library's [`Progress`]: a bar
/// per counted phase, a spinner with its text for each stretch of work without a total.
/// Nothing is drawn unless enabled (see [`Ui::progress`]); whatever is drawn is cleared when
/// the phase ends and when the reporter is dropped, before the command prints its report.
pub struct Bar {
    enabled: bool,
    bar: Mutex<Option<ProgressBar>>,
    /// Files done and in all, for a byte-counted phase that also counts files.
    files: Arc<(AtomicU64, AtomicU64)>,
}

/// How long and how far a phase must have run before its ETA is shown: an early rate (a
/// first file, a slow start of connections) predicts nothing.
const ETA_AFTER: Duration = Duration::from_secs(3);
const ETA_AFTER_FRACTION: f32 = 0.05;

impl Bar {
    /// Replaces what is drawn (if anything) by `next`.
    fn replace(&self, next: Option<ProgressBar>) {
        let mut slot = self.bar.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = std::mem::replace(&mut *slot, next) {
            old.finish_and_clear();
        }
    }

    fn style(&self, unit: Unit) -> ProgressStyle {
        let template = match unit {
            Unit::Bytes => {
                "{msg:>9} [{wide_bar}] {files}{bytes}/{total_bytes} {binary_bytes_per_sec}{eta_stable}"
            }
            Unit::Files => "{msg:>9} [{wide_bar}] {human_pos}/{human_len} files{eta_stable}",
        };
        let files = Arc::clone(&self.files);
        ProgressStyle::with_template(template)
            .expect("valid template")
            .progress_chars("=> ")
            .with_key(
                "files",
                move |_: &ProgressState, out: &mut dyn std::fmt::Write| {
                    let total = files.1.load(Ordering::Relaxed);
                    if total > 0 {
                        let done = files.0.load(Ordering::Relaxed).min(total);
                        let _ = write!(out, "{}/{} files, ", HumanCount(done), HumanCount(total));
                    }
                },
            )
            .with_key(
                "eta_stable",
                |state: &ProgressState, out: &mut dyn std::fmt::Write| {
                    if state.elapsed() >= ETA_AFTER && state.fraction() >= ETA_AFTER_FRACTION {
                        let _ = write!(out, " eta {}", HumanDuration(state.eta()));
                    }
                },
            )
    }
}

impl Progress for Bar {
    fn start(&self, phase: &str, total: u64, unit: Unit) {
        if !self.enabled {
            return;
        }
        if total == 0 {
            // Nothing to count (every file unchanged, say): no empty bar, only the phase.
            self.phase(phase);
            return;
        }
        // The file count was set before (see `Progress::count_files`), so the bar's first
        // draw shows it: a phase shorter than one redraw (50 ms) showed bytes only.
        self.files.0.store(0, Ordering::Relaxed);
        let bar =
            ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr_with_hz(20));
        bar.set_style(self.style(unit));
        bar.set_message(phase.to_string());
        bar.enable_steady_tick(Duration::from_millis(250));
        self.replace(Some(bar));
    }

    fn advance(&self, amount: u64) {
        if let Some(bar) = self.bar.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            bar.inc(amount);
            // A remote passed over for another: said now, above the bar.
            let fallbacks = dsv::transfer::fallback::take_fallbacks();
            if !fallbacks.is_empty() {
                bar.suspend(|| crate::warn_fallbacks(fallbacks));
            }
        }
    }

    fn finish(&self) {
        self.files.1.store(0, Ordering::Relaxed);
        self.replace(None);
    }

    fn phase(&self, text: &str) {
        if !self.enabled {
            return;
        }
        self.files.1.store(0, Ordering::Relaxed);
        let spinner = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(20));
        spinner.set_style(
            ProgressStyle::with_template("{spinner} {msg}")
                .expect("valid template")
                .tick_chars("|/-\\ "),
        );
        spinner.set_message(format!("{text}..."));
        spinner.enable_steady_tick(Duration::from_millis(100));
        self.replace(Some(spinner));
    }

    fn count_files(&self, total: u64) {
        self.files.1.store(total, Ordering::Relaxed);
        if let Some(bar) = self.bar.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            bar.tick();
        }
    }

    fn file_done(&self) {
        self.files.0.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.replace(None);
    }
}
