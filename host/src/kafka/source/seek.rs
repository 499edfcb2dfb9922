//! Seeking: moving fetch positions back, so that records polled and not handed to a task are
//! fetched again — one partition, or both of a task at its starting points before it resumes
//! (what a half read while it waited for its pair was dropped).

use anyhow::{Context as _, Result};
use rdkafka::consumer::Consumer;
use rdkafka::{Offset, TopicPartitionList};

use super::{Source, TIMEOUT};
use crate::event::Side;
use crate::join::CommitPoint;

impl Source {
    /// Moves one partition's fetch position to `offset` (records polled from it and not handed
    /// to its task are fetched again).
    pub fn seek_side(&self, side: Side, p: i32, offset: i64) -> Result<()> {
        let topic = &self.topics[side.index()];
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, p, Offset::Offset(offset))
            .context("building a seek list")?;
        let sought = self
            .consumer
            .seek_partitions(tpl, TIMEOUT)
            .with_context(|| format!("moving {topic}-{p} back to offset {offset}"))?;
        for e in sought.elements() {
            e.error()
                .with_context(|| format!("moving {topic}-{p} back to offset {offset}"))?;
        }
        Ok(())
    }

    /// Moves partition p of every topic back to where task p starts and fetches them: what was
    /// read of a half while it waited for its pair was dropped, and a partition paused earlier
    /// (librdkafka keeps a pause across a revoke) fetches again.
    pub fn rewind_and_resume(&self, p: i32, start: &[CommitPoint]) -> Result<()> {
        let mut tpl = TopicPartitionList::new();
        for (topic, point) in self.topics.iter().zip(start) {
            tpl.add_partition_offset(topic, p, Offset::Offset(point.offset))
                .context("building a seek list")?;
        }
        let sought = self
            .consumer
            .seek_partitions(tpl.clone(), TIMEOUT)
            .with_context(|| format!("moving task {p} back to its committed offsets"))?;
        for e in sought.elements() {
            e.error().with_context(|| {
                format!("moving {}-{p} back to its committed offset", e.topic())
            })?;
        }
        self.consumer
            .resume(&tpl)
            .with_context(|| format!("resuming task {p}"))
    }
}
