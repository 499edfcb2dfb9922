//! Pausing: stopping the fetch of a partition and resuming it. Which partitions are paused, and
//! why, is the intake's to know (kafka/intake/paused.rs): librdkafka is not asked.

use anyhow::{Context as _, Result};
use rdkafka::consumer::Consumer;
use rdkafka::TopicPartitionList;

use super::Source;
use crate::event::Side;

impl Source {
    /// Stops fetching one partition; `why` goes into the error.
    pub fn pause_side(&self, side: Side, p: i32, why: &str) -> Result<()> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&self.topics[side.index()], p);
        self.consumer
            .pause(&tpl)
            .with_context(|| format!("pausing {}-{p} ({why})", self.topics[side.index()]))
    }

    /// Fetches a partition paused by [`Source::pause_side`] again, from the next record not yet
    /// polled (librdkafka resumes there). Only for a paused partition: resuming one that is not
    /// restarts its fetch from a stale position.
    pub fn resume_side(&self, side: Side, p: i32) -> Result<()> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&self.topics[side.index()], p);
        self.consumer
            .resume(&tpl)
            .with_context(|| format!("resuming {}-{p}", self.topics[side.index()]))
    }
}
