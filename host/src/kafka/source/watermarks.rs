//! Watermarks: the end offsets of a task's partitions as the consumer last saw them in a fetch
//! response (the broker is asked on a client of its own: kafka/intake/asks.rs), and how far
//! the consumer's positions lag behind them.

use std::collections::HashMap;

use rdkafka::consumer::Consumer;
use rdkafka::Offset;

use super::Source;
use crate::event::Side;

impl Source {
    /// End offsets of partition p of every topic as the consumer last saw them in a fetch
    /// response (no broker round trip).
    pub fn cached_end_offsets(&self, p: i32) -> Vec<Option<i64>> {
        (self.topics.iter())
            .map(|t| self.cached_high_watermark(t, p))
            .collect()
    }

    /// The name of one side's topic.
    pub fn topic(&self, side: Side) -> &str {
        &self.topics[side.index()]
    }

    fn cached_high_watermark(&self, topic: &str, p: i32) -> Option<i64> {
        crate::kafka::client::cached_watermarks(&self.consumer, topic, p).map(|(_, high)| high)
    }

    /// The consumer's position per partition and side of its assignment: the offset after the
    /// last record or transaction marker a poll served (librdkafka moves it past markers and
    /// aborted records, which it never delivers). A partition with no position yet is left out.
    pub fn positions(&self) -> HashMap<(i32, Side), i64> {
        let Ok(list) = self.consumer.position() else {
            return HashMap::new();
        };
        list.elements()
            .iter()
            .filter_map(|e| {
                let side = Side::of(self.topics.iter().position(|t| &**t == e.topic())?);
                match e.offset() {
                    Offset::Offset(at) => Some(((e.partition(), side), at)),
                    _ => None,
                }
            })
            .collect()
    }

    /// Records behind the high watermark per task and side, from the cached watermarks and the
    /// consumer's positions.
    pub fn lag(&self, tasks: impl Iterator<Item = i32>) -> HashMap<i32, Vec<Option<i64>>> {
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
            .map(|p| (p, self.topics.iter().map(|t| lag(t, p)).collect()))
            .collect()
    }
}
