//! `cojoin plugin test`: runs a recorded stream (JSON lines, one event each) through the real
//! tasks and plugin, without Kafka, and reports what would be produced.

use std::collections::{BTreeMap, HashSet};

use crate::config::Config;
use crate::event::Side;
use crate::join::{CommitPoint, MAX_ORIGINS};
use crate::task::{Action, Batch, Emit, PartitionTask, TaskCounters};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    #[error("line {line}: {message}")]
    Line { line: usize, message: String },
}

/// Everything a replay produced, in order, with the counters summed over tasks.
pub struct ReplayResult {
    pub emits: Vec<Emit>,
    pub counters: TaskCounters,
    pub halted: Vec<String>,
}

/// Events are routed by topic (one of `join.topics`, or the left and right topics) and partition;
/// with a join key taken from the value (`join.left_key` / `right_key` / `keys`) they are
/// re-keyed, all in one task; so are they with a global table (`join.table.scope`).
pub fn replay(
    config: &Config,
    lines: &str,
    action: &mut dyn Action,
) -> Result<ReplayResult, ReplayError> {
    let mut policy = crate::wiring::task_policy(config);
    // A global table: every stream record sees every row, so the recording goes to one task,
    // whose table keeps the latest rows in the recording's timestamp order.
    let global = config.join.table_is_global();
    if global {
        let latest = crate::join::table::TableMode::Latest;
        policy.table = Some(crate::task::TableJoin::CoPartitioned(latest));
    }
    // A recording is judged against the clock of the replay, as a host would judge it live.
    let wall_clock = crate::clock::now_ms() as i64;
    let mut tasks: BTreeMap<i32, PartitionTask> = BTreeMap::new();
    // Per task, the (side, partition) pairs sent to it: a join state holds events of at most
    // MAX_ORIGINS, a bound only a recording keyed from the value can reach (one task takes all).
    let mut origins: BTreeMap<i32, HashSet<(Side, i32)>> = BTreeMap::new();
    for (n, line) in lines.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let err = |message: String| ReplayError::Line {
            line: n + 1,
            message,
        };
        let event = crate::json::event_from_json(line).map_err(|e| err(e.to_string()))?;
        let topics = &config.join.topics;
        let Some(index) = topics.iter().position(|t| **t == *event.topic) else {
            return Err(err(match topics.len() {
                2 => format!(
                    "topic {:?} is neither join.left ({:?}) nor join.right ({:?})",
                    event.topic, config.join.left, config.join.right
                ),
                _ => format!(
                    "topic {:?} is not one of join.topics {topics:?}",
                    event.topic
                ),
            }));
        };
        let side = Side::of(index);
        let mut event = event;
        let selector = config.join.selector(side);
        // A key from the value: as the repartition step re-keys a record (one without the field
        // goes on keyless, to the null-key policy), and every event to one task, since the
        // recording's partitions are not the internal topic's.
        let partition = if config.join.keys_from_records() && !global {
            event.partition
        } else {
            if !selector.is_record_key() {
                let key = crate::repartition::key::select(
                    selector,
                    event.key.as_deref(),
                    event.value.as_deref(),
                )
                .ok();
                event.key = key.map(Vec::into_boxed_slice);
            }
            0
        };
        let sent = origins.entry(partition).or_default();
        if sent.len() == MAX_ORIGINS && !sent.contains(&(side, event.partition)) {
            return Err(err(format!(
                "topic {:?} partition {} makes {} (topic, partition) pairs in one task, more than the {MAX_ORIGINS} a join state holds (with a join key from the value, join.left_key or join.right_key, every event of the recording goes to one task): give the events fewer distinct partitions, e.g. \"partition\": 0, or split the recording",
                event.topic,
                event.partition,
                MAX_ORIGINS + 1,
            )));
        }
        sent.insert((side, event.partition));
        let start = vec![CommitPoint::new(0, [], None); topics.len()];
        tasks
            .entry(partition)
            .or_insert_with(|| {
                let mut task = PartitionTask::new(partition, policy.clone(), &start);
                task.set_wall_clock(wall_clock);
                task
            })
            .push(side, event);
    }
    let mut result = ReplayResult {
        emits: Vec::new(),
        counters: TaskCounters::default(),
        halted: Vec::new(),
    };
    for task in tasks.values_mut() {
        // The recording is complete: when one partition runs dry, let the idle wait pass at
        // once rather than wait for records that will never come.
        let mut now = 0;
        task.set_wall_clock(wall_clock);
        while (task.queued() > 0 || task.parked_until().is_some()) && task.halted().is_none() {
            // A failed call waiting for its retry: the replay's clock moves to it at once.
            now = now.max(task.parked_until().unwrap_or(now));
            let batch: Batch = task.run(now, action);
            result.emits.extend(batch.emits.iter().cloned());
            task.acknowledge(batch);
            now += policy.max_idle_ms + 1;
        }
        result.counters.add(&task.counters);
        result.halted.extend(task.halted().map(str::to_owned));
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Event, OutputRecord};
    use crate::task::ActionFailure;

    /// Answers every match with one record; the test reads the inputs the emit carries.
    struct Matched;

    impl Action for Matched {
        fn on_match(
            &mut self,
            key: &[u8],
            _left: &Event,
            _right: &Event,
        ) -> Result<Vec<OutputRecord>, ActionFailure> {
            Ok(vec![OutputRecord {
                topic: None,
                key: Some(key.to_vec()),
                value: Some(b"matched".to_vec()),
                headers: vec![],
            }])
        }

        fn on_expire(
            &mut self,
            _key: &[u8],
            _event: &Event,
            _side: Side,
        ) -> Result<Vec<OutputRecord>, ActionFailure> {
            Ok(vec![])
        }

        fn version(&self) -> String {
            "matched@1".into()
        }
    }

    /// Keys from the value: every event of the recording goes to one task.
    fn keyed_from_value() -> Config {
        Config::parse(
            r#"
            [kafka]
            bootstrap_servers = "localhost:9092"
            group_id = "g"
            [join]
            left = "orders"
            right = "payments"
            left_key = "/id"
            right_key = "/id"
            window = "5m"
            [plugin]
            path = "p.wasm"
            [output]
            topic = "out"
            dead_letter_topic = "dlq"
            "#,
        )
        .expect("a valid config")
    }

    fn line(topic: &str, partition: i32, id: &str) -> String {
        format!(
            r#"{{"topic": "{topic}", "partition": {partition}, "offset": 0, "timestamp": 1700000000000, "key": "k", "value": {{"id": "{id}"}}}}"#
        )
    }

    #[test]
    fn a_recording_keyed_from_the_value_with_many_partitions_joins_with_their_origins() {
        // 300 order partitions (more than the 256 a u8 index held: that panicked), and a payment
        // on one more partition matching the order of the last one.
        let mut lines: Vec<String> = (0..300)
            .map(|p| line("orders", p, &format!("o-{p}")))
            .collect();
        lines.push(line("payments", 7, "o-299"));
        let result = replay(&keyed_from_value(), &lines.join("\n"), &mut Matched).unwrap();
        let inputs: Vec<(String, i32)> = result
            .emits
            .iter()
            .flat_map(|e| match e {
                Emit::Output { inputs, .. } => inputs.clone(),
                Emit::DeadLetter(d) => panic!("unexpected dead letter {d:?}"),
            })
            .map(|e| (e.topic.to_string(), e.partition))
            .collect();
        assert_eq!(
            inputs,
            [("orders".to_owned(), 299), ("payments".to_owned(), 7)]
        );
    }

    #[test]
    fn more_partitions_than_a_join_state_holds_is_an_error_naming_the_line_and_the_limit() {
        let pairs = i32::try_from(MAX_ORIGINS).unwrap();
        // Both topics count: half the pairs of each, then one more.
        let mut lines: Vec<String> = (0..pairs / 2)
            .flat_map(|p| [line("orders", p, "a"), line("payments", p, "a")])
            .collect();
        // A pair already sent is no new one.
        lines.push(line("orders", 0, "a"));
        lines.push(line("payments", -1, "a"));
        let Err(e) = replay(&keyed_from_value(), &lines.join("\n"), &mut Matched) else {
            panic!("{} pairs were taken", MAX_ORIGINS + 1);
        };
        let message = e.to_string();
        assert!(
            message.starts_with(&format!("line {}: ", MAX_ORIGINS + 2)),
            "{message}"
        );
        assert!(message.contains("\"payments\" partition -1"), "{message}");
        assert!(
            message.contains(&format!("the {MAX_ORIGINS} a join state holds")),
            "{message}"
        );
        assert!(message.contains("split the recording"), "{message}");
    }
}
