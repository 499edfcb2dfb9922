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
//! or end offsets were asked is not started (its records are the next owner's).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context as _, Result};

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
    ) -> Result<HashMap<i32, Vec<CommitPoint>>> {
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

    /// End offsets of the partitions of `tasks` as the broker reports them now (the log end,
    /// asked read_uncommitted: a transaction still open counts), all asked together: the floors below which the
    /// consumer's cached end offsets are stale. 0 for a side not answered within
    /// [`timeouts::REQUEST`] (the first fetch tells).
    pub(super) fn end_offsets_at_start(&mut self, tasks: &[i32]) -> HashMap<i32, Vec<i64>> {
        let mut given = HashMap::new();
        let sides = Side::all(self.source.topic_count());
        let asked = self.asking(timeouts::REQUEST, |me, wait| {
            let wanted: Vec<(i32, Side)> = tasks
                .iter()
                .flat_map(|&p| sides.clone().map(move |side| (p, side)))
                .filter(|w| !given.contains_key(w))
                .collect();
            let answer = me.end_offsets_within(&wanted, wait);
            let complete = answer.given.len() == wanted.len();
            given.extend(answer.given);
            match answer.refused {
                _ if complete => Ok(()),
                Some(why) => Err(anyhow!(why)),
                None => Err(anyhow!("not in the answer")),
            }
        });
        if let Err(e) = asked {
            tracing::warn!(
                "end offsets of tasks {tasks:?} not all known until their first fetch: {e}"
            );
        }
        tasks
            .iter()
            .map(|&p| {
                let end = |side| given.get(&(p, side)).copied().unwrap_or(0);
                (p, sides.clone().map(end).collect())
            })
            .collect()
    }
}
