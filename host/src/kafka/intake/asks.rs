//! What a task's start asks of the broker — its committed points, the end offsets of its
//! partitions — asked without leaving the group. librdkafka leaves the group when the consumer is
//! not polled for `max.poll.interval.ms`; one ask that waits out its timeout (10 s) while a
//! broker is away used to take all of it (a host left the group after an aborted transaction's
//! rewind, under load). Each ask here waits a few seconds at most and is asked again, the
//! consumer polled between, until it answers or its bound passed.
//!
//! What those polls return is kept with the records polled ahead ([`super::ahead`]) and handed
//! over first by the next poll; a task then sought back to its points forgets what was polled
//! of it meanwhile (fetched again), and a task whose partition a poll revoked while its points
//! were asked is not started (its records are the next owner's; one revoked later, while its end
//! offsets are asked, starts and is stopped when that rebalance is applied, its batch dropped).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};

use super::Intake;
use crate::event::Side;
use crate::join::CommitPoint;
use crate::kafka::timeouts;

/// How long the first ask waits before the consumer is polled and it is asked again; each
/// further ask waits twice as long, up to [`ASKED_AT_MOST`].
const ASKED_FIRST: Duration = Duration::from_secs(1);
/// The longest one ask waits without a poll: well under any `max.poll.interval.ms` (at least
/// the session timeout, whose broker minimum is 6 s), yet long enough for a broker that answers
/// slowly, not only for one that answers at once.
const ASKED_AT_MOST: Duration = Duration::from_secs(4);

/// End offsets asked together (for the tasks one rebalance or rewind starts, or by one round):
/// once one went unanswered for its whole bound, the others are not asked (a broker away would
/// otherwise cost that bound per task, with no round or commit meanwhile).
#[derive(Default)]
pub struct EndOffsetAsks {
    unanswered: bool,
}

impl EndOffsetAsks {
    /// What `ask` answers, or `None` without asking once an ask of these went unanswered.
    pub fn ask<T>(&mut self, ask: impl FnOnce() -> Option<T>) -> Option<T> {
        if self.unanswered {
            return None;
        }
        let answer = ask();
        self.unanswered = answer.is_none();
        answer
    }
}

impl Intake {
    /// Asks `ask` (each waiting up to twice as long as the last, from [`ASKED_FIRST`] to
    /// [`ASKED_AT_MOST`]) until it answers or `within` passed, polling the consumer between
    /// asks: the last answer. Stops asking when the consumer failed for good (the next poll
    /// reports it).
    fn asking<T>(
        &mut self,
        within: Duration,
        mut ask: impl FnMut(&Self, Duration) -> Result<T>,
    ) -> Result<T> {
        let deadline = Instant::now() + within;
        let mut wait = ASKED_FIRST;
        loop {
            let asked = Instant::now();
            let answer = ask(self, wait);
            let failed_for_good = self.ahead.error.is_some();
            if answer.is_ok() || failed_for_good || Instant::now() >= deadline {
                self.keep_alive();
                return answer;
            }
            // An ask refused at once is not asked again at once.
            std::thread::sleep(wait.saturating_sub(asked.elapsed()).min(ASKED_FIRST));
            self.keep_alive();
            wait = (wait * 2).min(ASKED_AT_MOST);
        }
    }

    /// The committed points of `tasks`: an error when the coordinator did not answer within
    /// [`timeouts::COORDINATED`].
    pub(super) fn committed_points(
        &mut self,
        tasks: &[i32],
    ) -> Result<HashMap<i32, [CommitPoint; 2]>> {
        self.asking(timeouts::COORDINATED, |me, wait| {
            me.source.committed(tasks, wait)
        })
        .with_context(|| {
            format!(
                "asked for {:?} without an answer (kafka.bootstrap_servers unreachable, or the group coordinator away)",
                timeouts::COORDINATED
            )
        })
    }

    /// End offsets of task p's partitions as the broker reports them now (under read_committed,
    /// the last stable offsets): the floor below which the consumer's cached end offsets are
    /// stale. 0 for a side not answered within [`timeouts::REQUEST`] (the first fetch tells),
    /// and for every side after one was not (`asks`).
    pub(super) fn end_offsets_at_start(&mut self, p: i32, asks: &mut EndOffsetAsks) -> [i64; 2] {
        [Side::Left, Side::Right].map(|side| {
            asks.ask(|| {
                let asked = self.asking(timeouts::REQUEST, |me, wait| {
                    me.broker_end_offset(side, p, wait)
                });
                asked
                    .inspect_err(|e| {
                        tracing::warn!(
                            topic = self.source.topic(side),
                            partition = p,
                            "end offset not known until the first fetch: {e}; the other tasks starting now are not asked"
                        );
                    })
                    .ok()
            })
            .unwrap_or(0)
        })
    }
}
