//! Polling ahead: while the workers run a round's plugin calls, the run loop's thread polls the
//! next records instead of waiting (`pool::run_round_beside`), so the Kafka side and the plugin
//! overlap. The records are handed to the tasks after the round, in the order the loop would
//! have queued them without the overlap: a rebalance callback stops the polling at once (records
//! polled before it go to the tasks of before it, the record of the poll that brought it after
//! the rebalance is applied, as the loop does for any poll). The same buffer takes what a poll
//! returns while the loop waits on the broker ([`Polled::keep_alive`]).

use std::time::Duration;

use crate::kafka::source::{Record, Source};

/// What was polled during a round.
#[derive(Default)]
pub struct Polled {
    /// Polled before any rebalance callback ran, in order.
    pub before: Vec<Record>,
    bytes: usize,
    /// A rebalance callback ran in the last poll: polling stopped there.
    pub rebalance: bool,
    /// The records of the polls after the callback ran (keep-alive polls while the loop waited
    /// on the broker; rdkafka returns none from the poll that runs it).
    pub after: Vec<Record>,
    /// The consumer failed for good: reported once the round is delivered.
    pub error: Option<anyhow::Error>,
}

impl Polled {
    /// How many records it holds.
    pub(super) fn len(&self) -> usize {
        self.before.len() + self.after.len()
    }

    /// Whether the next poll must hand it over before it polls anything (records, a rebalance
    /// or an error a keep-alive poll brought): what is polled after comes after it.
    pub(super) fn holds_anything(&self) -> bool {
        self.len() > 0 || self.rebalance || self.error.is_some()
    }

    /// Drops what it holds of partition p of either topic: task p was sought back to its points,
    /// and the records are fetched again.
    pub(super) fn forget(&mut self, p: i32) {
        for records in [&mut self.before, &mut self.after] {
            records.retain(|r| r.event.partition != p);
        }
        self.bytes = self.before.iter().map(|r| r.event.footprint()).sum();
    }

    /// Polls while `running()` (the workers are busy), up to `max_records` and `max_bytes`
    /// (`memory.queue_bytes`' share for it), and stops at a rebalance or an error.
    pub fn poll_while(
        &mut self,
        source: &Source,
        running: &dyn Fn() -> bool,
        max_records: usize,
        max_bytes: usize,
    ) {
        while running()
            && self.before.len() < max_records
            && self.bytes < max_bytes
            && !self.rebalance
            && self.error.is_none()
        {
            // A short wait: the probe is read again soon after the workers finish.
            self.keep(source, source.poll(Duration::from_millis(1)));
        }
    }

    /// One poll without waiting, while the loop waits on the broker (a delivery, a commit):
    /// librdkafka leaves the group when the consumer is not polled for `max.poll.interval.ms`,
    /// and the transactional producer is fenced with it. The record it returns, if any, is kept
    /// as [`Polled::poll_while`] keeps one (a poll every half second adds two records a second at
    /// most, beyond the byte share).
    pub fn keep_alive(&mut self, source: &Source) {
        if self.error.is_none() {
            self.keep(source, source.poll(Duration::ZERO));
        }
    }

    /// Keeps what a poll returned: a record before any rebalance callback, or after one (the
    /// callback ran in that poll or an earlier one), or the consumer's error.
    fn keep(&mut self, source: &Source, polled: anyhow::Result<Option<Record>>) {
        match polled {
            Err(e) => self.error = Some(e),
            Ok(record) if self.rebalance || source.rebalance_pending() => {
                self.rebalance = true;
                self.after.extend(record);
            }
            Ok(Some(record)) => {
                self.bytes += record.event.footprint();
                self.before.push(record);
            }
            Ok(None) => {}
        }
    }
}
