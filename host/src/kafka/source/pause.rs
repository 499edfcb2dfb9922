//! Pausing: stopping the fetch of partitions (a halted task, a half without its pair,
//! backpressure) and resuming them, with the set of partitions this host paused — kept here, not
//! asked of librdkafka (`Source::paused` says why).

use std::collections::HashSet;
use std::sync::Mutex;

use anyhow::{Context as _, Result};
use rdkafka::consumer::Consumer;
use rdkafka::TopicPartitionList;

use super::Source;
use crate::event::Side;

pub(super) fn lock_paused(
    paused: &Mutex<HashSet<(Side, i32)>>,
) -> std::sync::MutexGuard<'_, HashSet<(Side, i32)>> {
    paused.lock().unwrap_or_else(|e| e.into_inner())
}

impl Source {
    /// Stops fetching partition p of both topics (a halted task).
    pub fn pause(&self, p: i32) -> Result<()> {
        for side in [Side::Left, Side::Right] {
            self.pause_side(side, p, "a halted task")?;
        }
        Ok(())
    }

    /// Stops fetching one partition: a half whose pair this host does not hold.
    pub fn pause_half(&self, side: Side, p: i32) -> Result<()> {
        self.pause_side(side, p, "until its pair comes")
    }

    /// Stops fetching one partition; `why` goes into the error.
    pub fn pause_side(&self, side: Side, p: i32, why: &str) -> Result<()> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&self.topics[side as usize], p);
        self.consumer
            .pause(&tpl)
            .with_context(|| format!("pausing {}-{p} ({why})", self.topics[side as usize]))?;
        lock_paused(&self.paused).insert((side, p));
        Ok(())
    }

    /// Fetches a partition paused by [`Source::pause_side`] again, from the next record not yet
    /// polled (librdkafka resumes there). One not paused is left alone.
    pub fn resume_side(&self, side: Side, p: i32) -> Result<()> {
        if !lock_paused(&self.paused).remove(&(side, p)) {
            return Ok(());
        }
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&self.topics[side as usize], p);
        self.consumer
            .resume(&tpl)
            .with_context(|| format!("resuming {}-{p}", self.topics[side as usize]))
    }

    /// Whether either partition of task p is paused (since an earlier assignment, maybe).
    pub fn is_paused(&self, p: i32) -> bool {
        let paused = lock_paused(&self.paused);
        paused.contains(&(Side::Left, p)) || paused.contains(&(Side::Right, p))
    }
}
