//! Dead letters: why a record goes to the dead-letter topic (the header values the sink writes),
//! and the task's two ways of sending one: a record rejected by policy (null key, late, tombstone,
//! future timestamp), and an output that cannot be produced, which the I/O layer reports too.
//! Under the `halt` failure policy a refused output stops the task instead.

use std::sync::Arc;

use super::{ActionFailure, Batch, Emit, PartitionTask};
use crate::config::{FailurePolicy, RecordPolicy};
use crate::event::Event;

/// Why records went to the dead-letter topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeadLetterReason {
    Late,
    /// Stamped further ahead of the wall clock than `join.max_future`.
    FutureTimestamp,
    NullKey,
    Tombstone,
    /// The action failed on every attempt.
    Failed {
        failure: ActionFailure,
        plugin_version: String,
    },
    /// An output of these inputs could not be produced: a topic it may not write to, or one the
    /// producer or broker refused for good (too large, no such topic).
    OutputRefused {
        error: String,
    },
}

impl DeadLetterReason {
    /// The `cojoin.error.kind` header.
    pub fn kind(&self) -> &'static str {
        match self {
            DeadLetterReason::Late => "late",
            DeadLetterReason::FutureTimestamp => "future-timestamp",
            DeadLetterReason::NullKey => "null-key",
            DeadLetterReason::Tombstone => "tombstone",
            DeadLetterReason::Failed { failure, .. } => failure.kind.as_str(),
            DeadLetterReason::OutputRefused { .. } => "output-refused",
        }
    }

    /// The `cojoin.error.message` header.
    pub fn message(&self) -> &str {
        match self {
            DeadLetterReason::Late => "older than stream time - window - grace",
            DeadLetterReason::FutureTimestamp => {
                "stamped further ahead of the host's clock than join.max_future"
            }
            DeadLetterReason::NullKey => "a record without a key cannot join",
            DeadLetterReason::Tombstone => "a record without a value (join.tombstones)",
            DeadLetterReason::Failed { failure, .. } => &failure.message,
            DeadLetterReason::OutputRefused { error } => error,
        }
    }

    /// The `cojoin.plugin.version` header: the version that failed, empty for other reasons.
    pub fn plugin_version(&self) -> &str {
        match self {
            DeadLetterReason::Failed { plugin_version, .. } => plugin_version,
            _ => "",
        }
    }

    /// A failure of the plugin or of its outputs (a warning), rather than a record routed by
    /// policy (expected traffic).
    pub fn is_failure(&self) -> bool {
        matches!(
            self,
            DeadLetterReason::Failed { .. } | DeadLetterReason::OutputRefused { .. }
        )
    }
}

#[derive(Clone, Debug)]
pub struct DeadLetter {
    pub reason: DeadLetterReason,
    /// The input records, to be copied with their topic, partition and offset in headers.
    pub inputs: Vec<Arc<Event>>,
}

impl PartitionTask {
    pub(super) fn reject(
        &mut self,
        batch: &mut Batch,
        policy: RecordPolicy,
        reason: DeadLetterReason,
        event: Event,
    ) {
        if policy == RecordPolicy::DeadLetter {
            self.counters.dead_lettered += 1;
            batch.push(Emit::DeadLetter(DeadLetter {
                reason,
                inputs: vec![Arc::new(event)],
            }));
        }
    }

    /// An output made from `inputs` cannot be produced (`error` says why): under
    /// `plugin.failure = "dead-letter"` the inputs are dead-lettered as `output-refused`, under
    /// `halt` the task halts. The I/O layer calls it for what the producer or broker refused.
    pub fn refused_output(&mut self, batch: &mut Batch, inputs: Vec<Arc<Event>>, error: String) {
        self.counters.refused_outputs += 1;
        match self.policy.failure {
            FailurePolicy::DeadLetter => {
                self.counters.dead_lettered += inputs.len() as u64;
                batch.push(Emit::DeadLetter(DeadLetter {
                    reason: DeadLetterReason::OutputRefused { error },
                    inputs,
                }));
            }
            FailurePolicy::Halt => {
                self.halted.get_or_insert_with(|| {
                    format!(
                        "task {} halted: an output made from key {:?} at offsets {:?} was refused: {error}",
                        self.partition,
                        String::from_utf8_lossy(inputs[0].key_bytes()),
                        inputs.iter().map(|e| (&*e.topic, e.offset)).collect::<Vec<_>>(),
                    )
                });
            }
        }
    }
}
