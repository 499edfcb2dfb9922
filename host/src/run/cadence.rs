//! When the loop commits: every `output.commit_interval`, and under exactly-once sooner when the
//! loop has caught up with outputs in the open transaction.
//!
//! A `read_committed` reader sees an output only once its transaction commits, so at a low rate
//! the interval alone is the latency (on average half of it, at worst all). A commit blocks the
//! loop for a few broker round trips (~4 ms on the test broker, 15 ms at the p99): while records
//! keep the loop busy that time is taken from processing, which is what the interval amortises;
//! once the loop has caught up (its poll had to wait for the next record) it costs nothing. So a
//! transaction holding outputs commits as soon as a poll waited, no sooner than [`EARLY_FLOOR`]
//! after the last commit (which bounds the transactions per second a trickle of records makes).
//! At full throughput the polls do not wait and the interval alone decides; in between, each
//! early commit takes loop time, the polls wait less, and commits come less often.
//!
//! A rule on the share of time waited (a quarter since the last commit, the rule before this one)
//! missed it at 100 orders/s: a round that produced outputs waits several milliseconds for their
//! acknowledgements, so a loop that was mostly waiting on the broker did not count as idle, and
//! commits came 40-100 ms apart (exactly-once p99 64-73 ms in `make bench-latency`).

use std::time::Duration;

/// The least time between two commits made early.
pub const EARLY_FLOOR: Duration = Duration::from_millis(10);

/// A poll that waited this long found nothing to do: the loop had caught up.
const CAUGHT_UP: Duration = Duration::from_micros(500);

/// How long a quiet poll waits, past the floor, to learn that the loop caught up.
const CAUGHT_UP_WAIT: Duration = Duration::from_millis(1);

/// The loop's commit clock: time since the last commit, and whether the last poll waited.
#[derive(Debug)]
pub struct Cadence {
    interval: Duration,
    /// Commit early when caught up (exactly-once: outputs are held back until the commit).
    early: bool,
    since: Duration,
    caught_up: bool,
}

impl Cadence {
    pub fn new(interval: Duration, early: bool) -> Self {
        Cadence {
            interval,
            early,
            since: Duration::ZERO,
            caught_up: false,
        }
    }

    /// A lap of the loop took `took`, `waited` of it in a poll waiting for records.
    pub fn pass(&mut self, took: Duration, waited: Duration) {
        self.since += took;
        self.caught_up = waited >= CAUGHT_UP;
    }

    /// A commit was made: the clock starts again.
    pub fn committed(&mut self) {
        self.since = Duration::ZERO;
        self.caught_up = false;
    }

    /// Whether to commit now; `pending` says whether the open transaction holds outputs.
    pub fn due(&self, pending: bool) -> bool {
        self.since >= self.interval
            || (self.early && pending && self.caught_up && self.since >= EARLY_FLOOR)
    }

    /// How long a quiet poll may wait without holding a commit back: until the interval ends,
    /// or, with outputs pending under early commits, until the floor has passed and the wait
    /// shows the loop caught up.
    pub fn until_due(&self, pending: bool) -> Duration {
        let to_interval = self.interval.saturating_sub(self.since);
        if !(self.early && pending) {
            return to_interval;
        }
        let to_floor = EARLY_FLOOR.saturating_sub(self.since);
        to_floor.max(CAUGHT_UP_WAIT).min(to_interval)
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
    fn a_caught_up_loop_commits_pending_outputs_after_the_floor() {
        let mut c = Cadence::new(100 * MS, true);
        c.pass(4 * MS, 3 * MS);
        assert!(!c.due(true), "before the floor");
        assert_eq!(c.until_due(true), 6 * MS);
        c.pass(8 * MS, 2 * MS);
        assert!(c.due(true), "12 ms, and the last poll waited");
        assert!(
            !c.due(false),
            "nothing in the transaction: the interval decides"
        );
        assert_eq!(c.until_due(false), 88 * MS);
    }

    #[test]
    fn rounds_spent_on_acknowledgements_do_not_hold_a_commit_back() {
        // 100 orders/s under exactly-once: each round waits ~10 ms for its outputs'
        // acknowledgements and its poll a few ms for the next record.
        let mut c = Cadence::new(100 * MS, true);
        c.pass(3 * MS, 3 * MS);
        c.pass(10 * MS, Duration::ZERO);
        assert!(!c.due(true), "the last lap's poll found a record at once");
        assert_eq!(c.until_due(true), CAUGHT_UP_WAIT);
        c.pass(13 * MS, 3 * MS);
        assert!(
            c.due(true),
            "26 ms, 6 of them waiting, the last poll waited"
        );
    }

    #[test]
    fn a_quiet_poll_past_the_floor_waits_only_to_learn_it_caught_up() {
        let mut c = Cadence::new(100 * MS, true);
        c.pass(40 * MS, Duration::ZERO);
        assert!(!c.due(true));
        assert_eq!(c.until_due(true), CAUGHT_UP_WAIT);
        c.pass(CAUGHT_UP_WAIT, CAUGHT_UP_WAIT);
        assert!(c.due(true));
        let mut c = Cadence::new(100 * MS, true);
        c.pass(99 * MS + MS / 2, Duration::ZERO);
        assert_eq!(c.until_due(true), MS / 2, "the interval comes first");
    }

    #[test]
    fn a_busy_loop_waits_for_the_interval() {
        let mut c = Cadence::new(100 * MS, true);
        for _ in 0..9 {
            // Records are there at every poll: it returns within microseconds.
            c.pass(10 * MS, Duration::from_micros(100));
            assert!(!c.due(true), "{c:?}");
        }
        c.pass(10 * MS, Duration::ZERO);
        assert!(c.due(true));
        assert!(c.due(false));
    }

    #[test]
    fn a_commit_starts_the_clock_again() {
        let mut c = Cadence::new(100 * MS, true);
        c.pass(20 * MS, 5 * MS);
        assert!(c.due(true));
        c.committed();
        assert!(!c.due(true));
        c.pass(5 * MS, 5 * MS);
        assert!(!c.due(true), "5 ms after the commit: before the floor");
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
