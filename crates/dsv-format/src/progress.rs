//! Progress reporting: the library reports, the CLI draws (with indicatif); the library never
//! prints.

/// What a progress total counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Bytes.
    Bytes,
    /// Files.
    Files,
}

/// Receives progress events from long operations. Implementations must be cheap: `advance`
/// is called from worker threads once per file.
///
/// Long work that has no total yet (walking a directory, looking up where chunks live,
/// recording in the catalog) is announced with [`Progress::phase`], so a front end can show
/// that something is happening; the library calls it at the start of each such stretch.
pub trait Progress: Send + Sync {
    /// A phase begins; `total` is in `unit`s.
    fn start(&self, phase: &str, total: u64, unit: Unit);
    /// `amount` more units are done.
    fn advance(&self, amount: u64);
    /// The phase is over.
    fn finish(&self);
    /// A stretch of work without a total begins (`text` says what, e.g. "scanning data");
    /// it lasts until the next `phase`, `start` or `finish`.
    fn phase(&self, _text: &str) {}
    /// The phase about to start (or just started), counted in bytes, also counts files:
    /// `total` of them, each reported done with [`Progress::file_done`]. Called before
    /// [`Progress::start`], the count is in the bar's first draw; it lasts until the next
    /// `phase` or `finish`.
    fn count_files(&self, _total: u64) {}
    /// One more file of the phase is done.
    fn file_done(&self) {}
}

/// Ignores every event.
pub struct NoProgress;

impl Progress for NoProgress {
    fn start(&self, _phase: &str, _total: u64, _unit: Unit) {}
    fn advance(&self, _amount: u64) {}
    fn finish(&self) {}
}
