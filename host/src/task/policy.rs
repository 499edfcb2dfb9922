//! What a task is told by the configuration: how it treats records it cannot use and calls that
//! fail, and where a plugin's records may go. Kept apart from the task, as wiring.rs builds it
//! from the config and the checks on output topics are rules of their own.

use std::time::Duration;

use crate::config::{FailurePolicy, RecordPolicy, TombstonePolicy};
use std::sync::Arc;

use crate::join::table::{SharedTable, TableMode};
use crate::join::{JoinKind, JoinWindow};

/// How a task treats records it cannot use and calls that fail.
#[derive(Clone, Debug)]
pub struct TaskPolicy {
    pub window: JoinWindow,
    pub kind: JoinKind,
    pub max_idle_ms: i64,
    /// How far past the wall clock a record's timestamp may be; later ones are rejected and do
    /// not move stream time (`join.max_future`).
    pub max_future_ms: i64,
    pub late: RecordPolicy,
    pub null_keys: RecordPolicy,
    pub tombstones: TombstonePolicy,
    pub failure: FailurePolicy,
    pub retries: u32,
    pub backoff: Duration,
    pub outputs: OutputTopics,
    /// A table join: the right side is a table (`join.table`).
    pub table: Option<TableJoin>,
}

/// A table join's table, as a task sees it.
#[derive(Clone, Debug)]
pub enum TableJoin {
    /// Co-partitioned: the task holds its table partition's rows itself, kept this way.
    CoPartitioned(TableMode),
    /// Global: every task of the host looks rows up in one view of the whole table (latest
    /// rows), kept by the host's table reader; the task reads the stream alone.
    Global(Arc<SharedTable>),
}

/// Where a plugin's records may go. Never to the join's own input topics: a plugin writing there
/// feeds the join its own results (one pair fed itself 21 times); nor to the repartition step's
/// internal topics, which feed the join too (14 matches from one pair in 15 s). With `allowed`
/// set (`output.allowed_topics`), only to those and the default output topic.
#[derive(Clone, Debug, Default)]
pub struct OutputTopics {
    /// The join's input topics, every one of `join.topics`.
    pub inputs: Vec<String>,
    /// The internal topics the join could read (`<group>-<topic>-repartition` of either side,
    /// whether or not that side is repartitioned now: the names are the host's).
    pub internal: Vec<String>,
    pub allowed: Option<Vec<String>>,
}

impl OutputTopics {
    /// Why a record naming `topic` (`None`: the default output topic) may not be produced.
    pub fn refusal(&self, topic: Option<&str>) -> Option<String> {
        let topic = topic?;
        if self.inputs.iter().any(|t| t == topic) {
            return Some(format!(
                "the plugin wrote to {topic:?}, an input topic of this join; that would feed the join its own \
                 results (write to output.topic or another topic)"
            ));
        }
        if self.internal.iter().any(|t| t == topic) {
            return Some(format!(
                "the plugin wrote to {topic:?}, an internal topic of this join (its repartition \
                 step's); the join reads it, so that would feed the join its own results (write \
                 to output.topic or another topic)"
            ));
        }
        match &self.allowed {
            Some(allowed) if !allowed.iter().any(|t| t == topic) => Some(format!(
                "the plugin wrote to {topic:?}, which is not in output.allowed_topics {allowed:?} \
                 (add it there, or write to output.topic)"
            )),
            _ => None,
        }
    }
}
