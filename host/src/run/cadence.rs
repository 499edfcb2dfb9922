//! When the loop commits: every `output.commit_interval`, and under exactly-once sooner when the
//! host is idle with outputs in the open transaction.
//!
//! A `read_committed` reader sees an output only once its transaction commits, so at a low rate
//! the interval alone is the latency (on average half of it, at worst all). A commit blocks the
//! loop for a few broker round trips (~6 ms on the test broker): while records keep the loop busy
//! that time is taken from processing, which is what the interval amortises; while the loop waits
//! for records anyway it costs nothing. So a transaction holding outputs commits as soon as the
//! loop spent at least a quarter of the time since the last commit waiting (in its polls, or for
//! the broker's end offsets), no sooner than [`EARLY_FLOOR`] after it (which bounds the
//! transactions per second a trickle of records makes). At full throughput the polls do not wait
//! and the interval alone decides. A half rather than a quarter left the exactly-once p99 of
//! `make bench-latency` at 71 ms (one run of 20 s): at 100 orders/s the loop handles records every
//! few milliseconds and rarely idles half the time; with a quarter, 55 ms.

use std::time::Duration;

/// The least time between two commits made early.
pub const EARLY_FLOOR: Duration = Duration::from_millis(10);

/// An early commit needs at least 1 / IDLE_SHARE of the time since the last one spent waiting.
const IDLE_SHARE: u32 = 4;

/// The loop's commit clock: time since the last commit, and how much of it the polls waited.
#[derive(Debug)]
pub struct Cadence {
    interval: Duration,
    /// Commit early when idle (exactly-once: outputs are held back until the commit).
    early: bool,
    since: Duration,
    idle: Duration,
}

impl Cadence {
    pub fn new(interval: Duration, early: bool) -> Self {
        Cadence {
            interval,
            early,
            since: Duration::ZERO,
            idle: Duration::ZERO,
        }
    }

    /// `took` passed, `waited` of it in a poll waiting for records.
    pub fn pass(&mut self, took: Duration, waited: Duration) {
        self.since += took;
        self.idle += waited.min(took);
    }

    /// A commit was made: the clock starts again.
    pub fn committed(&mut self) {
        self.since = Duration::ZERO;
        self.idle = Duration::ZERO;
    }

    /// Whether to commit now; `pending` says whether the open transaction holds outputs.
    pub fn due(&self, pending: bool) -> bool {
        self.since >= self.interval
            || (self.early
                && pending
                && self.since >= EARLY_FLOOR
                && self.since <= self.idle * IDLE_SHARE)
    }

    /// How long a quiet poll may wait without holding a commit back: until the interval ends,
    /// or, with outputs pending under early commits, until the wait makes the commit due (the
    /// wait is idle time: after `w` more, (idle + w) · k ≥ since + w once
    /// w ≥ (since − k · idle) / (k − 1), k = [`IDLE_SHARE`]).
    pub fn until_due(&self, pending: bool) -> Duration {
        let to_interval = self.interval.saturating_sub(self.since);
        if !(self.early && pending) {
            return to_interval;
        }
        let to_floor = EARLY_FLOOR.saturating_sub(self.since);
        let to_idle = self.since.saturating_sub(self.idle * IDLE_SHARE) / (IDLE_SHARE - 1);
        to_floor.max(to_idle).min(to_interval)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn at_least_once_commits_at_the_interval_only() {
        let mut c = Cadence::new(1000 * MS, false);
        c.pass(500 * MS, 500 * MS);
        assert!(!c.due(true));
        assert_eq!(c.until_due(true), 500 * MS);
        c.pass(500 * MS, Duration::ZERO);
        assert!(c.due(false));
        c.committed();
        assert!(!c.due(true));
        assert_eq!(c.until_due(false), 1000 * MS);
    }

    #[test]
    fn an_idle_loop_commits_pending_outputs_after_the_floor() {
        let mut c = Cadence::new(100 * MS, true);
        c.pass(4 * MS, 3 * MS);
        assert!(!c.due(true), "before the floor");
        assert_eq!(c.until_due(true), 6 * MS);
        c.pass(8 * MS, 8 * MS);
        assert!(c.due(true), "12 ms, 11 of them waiting");
        assert!(
            !c.due(false),
            "nothing in the transaction: the interval decides"
        );
        assert_eq!(c.until_due(false), 88 * MS);
    }

    #[test]
    fn a_quiet_poll_waits_until_its_wait_makes_the_commit_due() {
        let mut c = Cadence::new(100 * MS, true);
        c.pass(40 * MS, 4 * MS);
        assert!(!c.due(true));
        // 8 ms more of waiting: 12 of 48 ms idle.
        assert_eq!(c.until_due(true), 8 * MS);
        c.pass(7 * MS, 7 * MS);
        assert!(!c.due(true), "11 of 47 ms");
        c.pass(MS, MS);
        assert!(c.due(true));
        let mut c = Cadence::new(100 * MS, true);
        c.pass(90 * MS, Duration::ZERO);
        assert_eq!(c.until_due(true), 10 * MS, "the interval comes first");
    }

    #[test]
    fn a_busy_loop_waits_for_the_interval() {
        let mut c = Cadence::new(100 * MS, true);
        for _ in 0..9 {
            c.pass(10 * MS, 2 * MS);
            assert!(!c.due(true), "{c:?}");
        }
        c.pass(10 * MS, Duration::ZERO);
        assert!(c.due(true));
        assert!(c.due(false));
    }

    #[test]
    fn a_quarter_idle_is_enough_and_waits_count_only_within_their_round() {
        let mut c = Cadence::new(100 * MS, true);
        c.pass(20 * MS, 5 * MS);
        assert!(c.due(true));
        let mut c = Cadence::new(100 * MS, true);
        // A wait cannot exceed the time it is part of.
        c.pass(20 * MS, 50 * MS);
        c.pass(60 * MS, Duration::ZERO);
        assert!(c.due(true), "20 of 80 ms");
        c.pass(MS, Duration::ZERO);
        assert!(!c.due(true), "20 of 81 ms");
    }

    #[test]
    fn an_interval_below_the_floor_is_kept() {
        let c = Cadence::new(5 * MS, true);
        assert_eq!(c.until_due(true), 5 * MS);
        let mut c = Cadence::new(5 * MS, true);
        c.pass(5 * MS, Duration::ZERO);
        assert!(c.due(false));
    }
}
