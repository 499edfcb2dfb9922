//! What a task's start asks of the broker — its committed points, the end offsets of its
//! partitions — asked without leaving the group. librdkafka leaves the group when the consumer is
//! not polled for `max.poll.interval.ms`; one ask that waits out its timeout (10 s) while a
//! broker is away used to take all of it (a host left the group after an aborted transaction's
//! rewind, under load). Each ask here waits at most [`ASKED_ONCE`] and is asked again, the
//! consumer polled between, until it answers or its bound passed.
//!
//! What those polls return is kept with the records polled ahead ([`super::ahead`]) and handed
//! over first by the next poll; a task then sought back to its points forgets what was polled
//! of it meanwhile (fetched again), and a task whose partition a poll revoked meanwhile is not
//! started (its records are the next owner's).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Result;
use rdkafka::consumer::Consumer;

use super::Intake;
use crate::event::Side;
use crate::join::CommitPoint;
use crate::kafka::timeouts;

/// How long one ask waits before the consumer is polled and it is asked again.
const ASKED_ONCE: Duration = Duration::from_secs(1);

impl Intake {
    /// Asks `ask` (each waiting at most [`ASKED_ONCE`]) until it answers or `within` passed,
    /// polling the consumer between asks: the last answer.
    fn asking<T>(
        &mut self,
        within: Duration,
        mut ask: impl FnMut(&Self, Duration) -> Result<T>,
    ) -> Result<T> {
        let deadline = Instant::now() + within;
        loop {
            let asked = Instant::now();
            let answer = ask(self, ASKED_ONCE);
            if answer.is_ok() || Instant::now() >= deadline {
                self.keep_alive();
                return answer;
            }
            // An ask refused at once is not asked again at once.
            std::thread::sleep(ASKED_ONCE.saturating_sub(asked.elapsed()));
            self.keep_alive();
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
    }

    /// End offsets of task p's partitions as the broker reports them now (under read_committed,
    /// the last stable offsets): the floor below which the consumer's cached end offsets are
    /// stale. 0 for a side not answered within [`timeouts::REQUEST`] (the first fetch tells).
    pub(super) fn end_offsets_at_start(&mut self, p: i32) -> [i64; 2] {
        [Side::Left, Side::Right].map(|side| {
            let topic = self.source.topic(side).to_owned();
            let asked = self.asking(timeouts::REQUEST, |me, wait| {
                Ok(me.watermarks.fetch_watermarks(&topic, p, wait)?)
            });
            match asked {
                Ok((_, high)) => high,
                Err(e) => {
                    tracing::warn!(
                        topic,
                        partition = p,
                        "end offset not known until the first fetch: {e}"
                    );
                    0
                }
            }
        })
    }
}
