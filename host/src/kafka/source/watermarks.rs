//! Watermarks: the end offsets of a task's partitions, asked of the broker or as the consumer
//! last saw them in a fetch response, and how far the consumer's positions lag behind them.

use std::collections::HashMap;
use std::time::Duration;

use rdkafka::consumer::Consumer;
use rdkafka::Offset;

use super::{Source, TIMEOUT};
use crate::event::Side;

impl Source {
    /// End offsets of partition p of both topics as the broker reports them now (0 when it does
    /// not answer: the first fetch will tell).
    pub fn end_offsets(&self, p: i32) -> [i64; 2] {
        [0, 1].map(|i| {
            let topic = &self.topics[i];
            match self.consumer.fetch_watermarks(topic, p, TIMEOUT) {
                Ok((_, high)) => high,
                Err(e) => {
                    tracing::warn!(
                        topic = &**topic,
                        partition = p,
                        "end offset not known until the first fetch: {e}"
                    );
                    0
                }
            }
        })
    }

    /// The end offset of partition p of one side as the broker reports it now (under
    /// read_committed, the last stable offset); `None` when it does not answer within `timeout`.
    pub fn end_offset_now(&self, side: Side, p: i32, timeout: Duration) -> Option<i64> {
        let topic = &self.topics[side.index()];
        match self.consumer.fetch_watermarks(topic, p, timeout) {
            Ok((_, high)) => Some(high),
            Err(e) => {
                if let Some(held) = crate::quiet::say("end offset asked") {
                    let said = crate::quiet::with_held(
                        &format!("the end offset of {topic}/{p} was asked and not given: {e}; the task goes on without waiting for it"),
                        held,
                    );
                    tracing::warn!("{said}");
                }
                None
            }
        }
    }

    /// End offsets of partition p of both topics as the consumer last saw them in a fetch
    /// response (no broker round trip).
    pub fn cached_end_offsets(&self, p: i32) -> [Option<i64>; 2] {
        [0, 1].map(|i| self.cached_high_watermark(&self.topics[i], p))
    }

    fn cached_high_watermark(&self, topic: &str, p: i32) -> Option<i64> {
        crate::kafka::client::cached_watermarks(&self.consumer, topic, p).map(|(_, high)| high)
    }

    /// Records behind the high watermark per task and side, from the cached watermarks and the
    /// consumer's positions.
    pub fn lag(&self, tasks: impl Iterator<Item = i32>) -> HashMap<i32, [Option<i64>; 2]> {
        let Ok(positions) = self.consumer.position() else {
            return HashMap::new();
        };
        let lag = |topic: &str, p: i32| -> Option<i64> {
            let high = self.cached_high_watermark(topic, p)?;
            match positions.find_partition(topic, p)?.offset() {
                Offset::Offset(pos) => Some((high - pos).max(0)),
                _ => None,
            }
        };
        tasks
            .map(|p| (p, [lag(&self.topics[0], p), lag(&self.topics[1], p)]))
            .collect()
    }
}
