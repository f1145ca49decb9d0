//! Waiting on the network with a bound on stalls: one rule for import sources
//! (`source`, `--stall-timeout`) and remote reads (`remote`, the `stall_timeout` option).
//!
//! A `StallWatch` counts the bytes that arrive in a window of `stall_timeout`: when the
//! window closes with fewer than [`STALL_BYTES`], the wait ends as [`Ended::Stalled`]. The
//! first window starts when the request does, so a server that accepts the connection but
//! never answers (a frozen process, a black hole behind a load balancer) is caught after
//! `stall_timeout`, retries included, as is one that trickles a byte every few seconds. A
//! wait also ends when the current operation is cancelled ([`crate::interrupt`]) and at an
//! optional deadline. The watch looks at these every `WAIT_TICK` while a future is
//! pending, and whenever bytes arrive.

use std::time::{Duration, Instant};

/// A read is stalled when less than this arrives in one window of its stall timeout: a
/// server that sends a byte every few seconds holds nothing up.
pub const STALL_BYTES: u64 = 1024;

/// How often a wait on the network looks at the cancellation.
pub(crate) const WAIT_TICK: Duration = Duration::from_millis(100);

/// Why a watched wait ended before its future completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The operation was cancelled (map it to `Error::Interrupted`).
    Cancelled,
    /// The deadline passed; carries the timeout it came from.
    Deadline(Duration),
    /// Fewer than [`STALL_BYTES`] arrived in one window of the stall timeout; carries the
    /// bytes that did.
    Stalled {
        /// Bytes that arrived in the window that closed.
        bytes: u64,
    },
}

/// Bytes that arrived since `start`, for the stall check.
#[derive(Debug, Clone, Copy)]
struct Window {
    start: Instant,
    bytes: u64,
}

impl Window {
    fn new() -> Window {
        Window {
            start: Instant::now(),
            bytes: 0,
        }
    }
}

/// Watches waits on one request (or one source) for stalls, a deadline and cancellation.
/// Cheap to clone: a clone starts its own window with [`StallWatch::restart`].
#[derive(Debug, Clone)]
pub(crate) struct StallWatch {
    stall_timeout: Duration,
    /// The instant, and the timeout it comes from.
    deadline: Option<(Instant, Duration)>,
    token: Option<crate::interrupt::CancelToken>,
    window: Window,
}

impl StallWatch {
    /// A watch with `stall_timeout`, an optional deadline (the instant, and the timeout it
    /// comes from, for messages), under the calling thread's cancellation token. Its first
    /// window starts now.
    pub fn new(stall_timeout: Duration, deadline: Option<(Instant, Duration)>) -> StallWatch {
        StallWatch {
            stall_timeout,
            deadline,
            token: crate::interrupt::current(),
            window: Window::new(),
        }
    }

    /// The stall timeout.
    pub fn stall_timeout(&self) -> Duration {
        self.stall_timeout
    }

    /// Starts a new window now (for a new request).
    pub fn restart(&mut self) {
        self.window = Window::new();
    }

    /// Counts `bytes` that arrived; ends when the window closed with too few.
    ///
    /// # Errors
    /// As [`StallWatch::check`].
    pub(crate) fn arrived(&mut self, bytes: u64) -> Result<(), Ended> {
        self.window.bytes = self.window.bytes.saturating_add(bytes);
        self.check(Instant::now())
    }

    /// Ends when the operation was cancelled, the deadline passed or the window closed
    /// with fewer than [`STALL_BYTES`]; opens a new window when it closed with enough.
    ///
    /// # Errors
    /// The [`Ended`] reason.
    pub fn check(&mut self, now: Instant) -> Result<(), Ended> {
        if self
            .token
            .as_ref()
            .is_some_and(crate::interrupt::CancelToken::is_cancelled)
        {
            return Err(Ended::Cancelled);
        }
        if let Some((deadline, timeout)) = self.deadline
            && now >= deadline
        {
            return Err(Ended::Deadline(timeout));
        }
        if now.duration_since(self.window.start) >= self.stall_timeout {
            if self.window.bytes < STALL_BYTES {
                return Err(Ended::Stalled {
                    bytes: self.window.bytes,
                });
            }
            self.window = Window {
                start: now,
                bytes: 0,
            };
        }
        Ok(())
    }

    /// Awaits `future` until it completes, or until [`StallWatch::check`] ends the wait
    /// (looked at each [`WAIT_TICK`] and when the stall window or the deadline closes).
    /// Dropping the future cancels the request.
    ///
    /// # Errors
    /// The [`Ended`] reason.
    pub async fn wait<F: Future>(&mut self, future: F) -> Result<F::Output, Ended> {
        self.check(Instant::now())?;
        let mut future = std::pin::pin!(future);
        loop {
            let mut until =
                (Instant::now() + WAIT_TICK).min(self.window.start + self.stall_timeout);
            if let Some((deadline, _)) = self.deadline {
                until = until.min(deadline);
            }
            let outcome = tokio::time::timeout_at(until.into(), future.as_mut()).await;
            let now = Instant::now();
            // Woken late: the task that owns this wait was busy elsewhere (a caller storing
            // what another request brought), not waiting on the server. That time is not
            // the server's, and does not count towards a stall.
            let late = now.saturating_duration_since(until);
            if late > WAIT_TICK {
                self.window.start += late;
            }
            match outcome {
                Ok(output) => return Ok(output),
                Err(_) => self.check(now)?,
            }
        }
    }
}

/// A duration as a user writes it (`60s`, `2m 30s`, `500ms`).
pub(crate) fn humanize(duration: Duration) -> String {
    let seconds = duration.as_secs();
    if seconds == 0 {
        return format!("{}ms", duration.as_millis());
    }
    match (seconds / 60, seconds % 60) {
        (0, s) => format!("{s}s"),
        (m, 0) => format!("{m}m"),
        (m, s) => format!("{m}m {s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_with_too_few_bytes_is_a_stall() {
        let mut watch = StallWatch::new(Duration::from_millis(50), None);
        watch.arrived(STALL_BYTES).unwrap();
        let later = Instant::now() + Duration::from_millis(60);
        // Enough bytes in the first window: a new one opens.
        watch.check(later).unwrap();
        watch.arrived(10).unwrap();
        assert_eq!(
            watch.check(later + Duration::from_millis(60)),
            Err(Ended::Stalled { bytes: 10 })
        );
        assert_eq!(humanize(Duration::from_millis(500)), "500ms");
        assert_eq!(humanize(Duration::from_secs(150)), "2m 30s");
    }

    #[test]
    fn time_the_waiting_task_was_not_polled_is_no_stall() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        // Margins of a second: the thread may be descheduled for a while on a loaded machine.
        let mut watch = StallWatch::new(Duration::from_secs(1), None);
        // The answer is there at once, but the task is busy for longer than the timeout
        // before it looks (a blocking step on the runtime's only thread).
        let answered = runtime.block_on(async {
            let busy = async {
                std::thread::sleep(Duration::from_secs(2));
            };
            // The wait is polled first (it starts its window), then the busy step.
            let (answer, ()) = tokio::join!(
                watch.wait(async {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }),
                busy
            );
            answer
        });
        assert_eq!(answered, Ok(()));
        watch.arrived(10).unwrap();
    }

    #[test]
    fn a_future_that_never_answers_ends_after_the_stall_timeout() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let mut watch = StallWatch::new(Duration::from_millis(200), None);
        let start = Instant::now();
        let ended = runtime.block_on(watch.wait(std::future::pending::<()>()));
        assert_eq!(ended, Err(Ended::Stalled { bytes: 0 }));
        assert!(start.elapsed() < Duration::from_secs(2));
    }
}
