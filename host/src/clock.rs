//! The wall clock: milliseconds since the Unix epoch, as the run loop, the metrics, the demo and
//! the admin server read it. Its own module so that none of them imports another for the time.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch by the system clock (which may go back); 0 if the clock is
/// set before 1970.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
