//! Offset bookkeeping: what a task may commit for each of its partitions, and how far processing got.
//!
//! The source topics are the log of the join state. For each partition a task commits
//! - the **commit offset**: the smallest offset it still needs — a record buffered but not
//!   processed, or held in the join state (a restart must read it again to rebuild the state) — or,
//!   when it needs none, the next offset to consume;
//! - **processed-through**: the highest offset whose outcomes were all acted on (plugin called,
//!   outputs acknowledged), carried in the commit metadata.
//!
//! A new owner consumes from the commit offset. Records up to processed-through are replay: they
//! rebuild the state and their outcomes are suppressed, because the previous owner acted on them:
//! - a match is suppressed when both of its events are replay;
//! - an expiry or a late report is suppressed when the record whose insertion caused it is replay.
//!
//! Replay of both partitions runs before any new record (see [`super::order`]), so at its end the
//! stream time is the one the previous owner had at its commit, when it had already acted on every
//! expiry up to that stream time. Duplicates are limited to outcomes of records processed after the
//! last commit; nothing is lost.

use super::state::JoinOutcome;
use crate::event::Side;

/// What to commit for one partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommitPoint {
    pub offset: i64,
    pub processed_through: Option<i64>,
}

/// Prefix of the commit metadata; a different prefix is not ours (or a future format) and is
/// treated as "no progress recorded".
const METADATA_PREFIX: &str = "cojoin/1 processed-through=";

impl CommitPoint {
    /// `next_offset`: the next offset to consume; `needed`: offsets buffered or held.
    pub fn new(
        next_offset: i64,
        needed: impl IntoIterator<Item = i64>,
        processed_through: Option<i64>,
    ) -> Self {
        let offset = needed.into_iter().fold(next_offset, i64::min);
        CommitPoint {
            offset,
            processed_through: processed_through.filter(|&p| p >= offset),
        }
    }

    /// The commit metadata string.
    pub fn metadata(&self) -> String {
        match self.processed_through {
            Some(p) => format!("{METADATA_PREFIX}{p}"),
            None => String::new(),
        }
    }

    /// Reads processed-through back from commit metadata. Anything unrecognised — including the
    /// empty metadata some brokers return — means "none recorded": every record from the commit
    /// offset on is then treated as new, which may repeat outcomes but never loses one.
    pub fn parse_metadata(metadata: &str) -> Option<i64> {
        metadata.strip_prefix(METADATA_PREFIX)?.parse().ok()
    }
}

/// Processed-through offsets of a task's partitions, one per topic of the join, after a restart.
#[derive(Clone, Debug, Default)]
pub struct ReplayBounds {
    through: Vec<Option<i64>>,
}

impl ReplayBounds {
    /// The processed-through offset of each topic's partition, in the join's topic order.
    pub fn new(through: impl IntoIterator<Item = Option<i64>>) -> Self {
        ReplayBounds {
            through: through.into_iter().collect(),
        }
    }

    /// Whether the record at `offset` of `side` was processed by the previous owner.
    pub fn is_replay(&self, side: Side, offset: i64) -> bool {
        let bound = self.through.get(side.index()).copied().flatten();
        bound.is_some_and(|b| offset <= b)
    }

    /// Whether `outcome`, caused by inserting the record at `offset` of `side`, was already acted
    /// on by the previous owner.
    pub fn suppresses(&self, side: Side, offset: i64, outcome: &JoinOutcome) -> bool {
        match outcome {
            JoinOutcome::Match { left, right } => {
                self.is_replay(Side::LEFT, left.offset) && self.is_replay(Side::RIGHT, right.offset)
            }
            JoinOutcome::MatchN { events } => events
                .iter()
                .enumerate()
                .all(|(topic, e)| self.is_replay(Side::of(topic), e.offset)),
            JoinOutcome::Expired { .. }
            | JoinOutcome::Late { .. }
            | JoinOutcome::ExpiredN { .. } => self.is_replay(side, offset),
        }
    }
}

#[cfg(test)]
mod tests;
