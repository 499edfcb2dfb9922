//! `cojoin plugin test`: runs a recorded stream (JSON lines, one event each) through the real
//! tasks and plugin, without Kafka, and reports what would be produced.

use std::collections::BTreeMap;

use crate::config::Config;
use crate::event::Side;
use crate::join::CommitPoint;
use crate::task::{Action, Batch, Emit, PartitionTask, TaskCounters};

#[derive(Debug, thiserror::Error)]
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

/// Events are routed by topic (the config's left or right topic) and partition; with a join key
/// taken from the value (`join.left_key` / `right_key`) they are re-keyed, all in one task.
pub fn replay(
    config: &Config,
    lines: &str,
    action: &mut dyn Action,
) -> Result<ReplayResult, ReplayError> {
    let policy = crate::wiring::task_policy(config);
    // A recording is judged against the clock of the replay, as a host would judge it live.
    let wall_clock = crate::admin::now_ms() as i64;
    let mut tasks: BTreeMap<i32, PartitionTask> = BTreeMap::new();
    for (n, line) in lines.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let err = |message: String| ReplayError::Line {
            line: n + 1,
            message,
        };
        let event = crate::json::event_from_json(line).map_err(|e| err(e.to_string()))?;
        let side = if *event.topic == *config.join.left {
            Side::Left
        } else if *event.topic == *config.join.right {
            Side::Right
        } else {
            return Err(err(format!(
                "topic {:?} is neither join.left ({:?}) nor join.right ({:?})",
                event.topic, config.join.left, config.join.right
            )));
        };
        let mut event = event;
        let selector = [&config.join.left_key, &config.join.right_key][side as usize];
        // A key from the value: as the repartition step re-keys a record (one without the field
        // goes on keyless, to the null-key policy), and every event to one task, since the
        // recording's partitions are not the internal topic's.
        let partition =
            if config.join.left_key.is_record_key() && config.join.right_key.is_record_key() {
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
        let start = [CommitPoint::new(0, [], None); 2];
        tasks
            .entry(partition)
            .or_insert_with(|| {
                let mut task = PartitionTask::new(partition, policy.clone(), start);
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
        while (task.buffered() > 0 || task.parked_until().is_some()) && task.halted().is_none() {
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
