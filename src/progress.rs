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
pub trait Progress: Send + Sync {
    /// A phase begins; `total` is in `unit`s.
    fn start(&self, phase: &str, total: u64, unit: Unit);
    /// `amount` more units are done.
    fn advance(&self, amount: u64);
    /// The phase is over.
    fn finish(&self);
}

/// Ignores every event.
pub struct NoProgress;

impl Progress for NoProgress {
    fn start(&self, _phase: &str, _total: u64, _unit: Unit) {}
    fn advance(&self, _amount: u64) {}
    fn finish(&self) {}
}
