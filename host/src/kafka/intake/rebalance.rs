//! Rebalances applied to the tasks: what the consumer's rebalance callbacks recorded becomes, by
//! way of the pairing (kafka/pairing.rs), tasks stopped, lone halves paused, and tasks started
//! from their committed points; each reported. Tasks not named keep running with their state
//! and queue.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::Result;

use super::paused::Pause;
use super::{Intake, Tasks};
use crate::event::Side;
use crate::report::Happened;

/// A task waiting longer than this for its pair is reported (a log line) once.
const WAITING_REPORTED_AFTER: Duration = Duration::from_secs(5);

impl Intake {
    /// Applies what the rebalance callbacks recorded: stops the tasks that lost a partition,
    /// pauses halves without their pair, starts the tasks whose pair is complete from their
    /// committed offsets and processed-through metadata. Returns the tasks started sought back
    /// to their points (what was polled of them before is fetched again).
    pub(super) fn apply_rebalance(&mut self, tasks: &mut impl Tasks) -> Result<BTreeSet<i32>> {
        let mut rewound = BTreeSet::new();
        let rebalanced = self.source.rebalanced();
        if rebalanced.revoked.is_empty() && rebalanced.assigned.is_empty() && !rebalanced.assignment
        {
            return Ok(rewound);
        }
        let now = crate::clock::now_ms() as i64;
        let (changes, mut settled) =
            self.pairing
                .apply(&rebalanced.revoked, &rebalanced.assigned, now);
        if rebalanced.assignment && rebalanced.assigned.is_empty() {
            settled = settled.or(self.pairing.assigned_nothing(now));
        }
        let topics = self.source.topic_count();
        // The partition numbers in `moved`, per topic.
        let numbers = |moved: &[(Side, i32)]| -> Vec<Vec<i32>> {
            Side::all(topics)
                .map(|side| {
                    let mut ps: Vec<i32> = (moved.iter())
                        .filter(|(s, _)| *s == side)
                        .map(|(_, p)| *p)
                        .collect();
                    ps.sort_unstable();
                    ps
                })
                .collect()
        };
        if !rebalanced.revoked.is_empty() {
            Happened::PartitionsRevoked {
                by_topic: &numbers(&rebalanced.revoked),
            }
            .emit(&self.metrics);
        }
        if rebalanced.assignment {
            self.metrics.set_member(self.source.member_id());
            Happened::Assignment {
                held: &self.pairing.held(),
                added: &numbers(&rebalanced.assigned),
            }
            .emit(&self.metrics);
        }
        for &p in &changes.stop {
            if tasks.stop(p) {
                Happened::TaskRevoked { task: p }.emit(&self.metrics);
            }
        }
        for &(side, p) in &changes.pause {
            self.pause(side, p, Pause::LoneHalf)?;
        }
        if !changes.start.is_empty() {
            let new: Vec<i32> = changes.start.iter().map(|(p, _)| *p).collect();
            let starts = self.committed_points(&new)?;
            let ends = self.end_offsets_at_start(&new);
            for (p, waited_ms) in changes.start {
                self.waiting_reported.remove(&p);
                // Revoked by a poll while the points were asked: not started (stopped, as
                // never run, when that rebalance is applied).
                if self.revoked_meanwhile().contains(&p) {
                    continue;
                }
                let start = starts[&p].clone();
                // Paused earlier (a lone half, a full queue, a halted task) and librdkafka keeps
                // that across the revoke: seek to the start and fetch again. A table join's
                // table starts at its beginning, not where the consumer would.
                if waited_ms.is_some() || self.paused.is_paused(p) || self.source.reads_from_start()
                {
                    self.source.rewind_and_resume(p, &start)?;
                    self.ahead.forget(p);
                    self.paused.clear_task(p);
                    rewound.insert(p);
                }
                Happened::TaskAssigned {
                    task: p,
                    start: &start,
                    waited_ms,
                }
                .emit(&self.metrics);
                tasks.start(p, start, ends[&p].clone());
            }
        }
        if let Some(settled) = settled {
            Happened::RebalanceDone {
                took_ms: settled.took_ms,
                tasks: tasks.count(),
            }
            .emit(&self.metrics);
        }
        Ok(rewound)
    }

    /// Says once of each task whose lone half has waited for its pair longer than
    /// [`WAITING_REPORTED_AFTER`]; `topics` names the joined topics.
    pub fn report_waiting(&mut self, topics: &[String]) {
        let now = crate::clock::now_ms() as i64;
        for (p, since) in self.pairing.waiting_since() {
            let waited_ms = now - since;
            if waited_ms >= WAITING_REPORTED_AFTER.as_millis() as i64
                && self.waiting_reported.insert(p)
            {
                Happened::TaskWaiting {
                    task: p,
                    waited_ms,
                    topics,
                }
                .emit(&self.metrics);
            }
        }
    }
}
