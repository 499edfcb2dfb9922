//! Tests of the partition task, one file per concern under tests/ (named as the task's own files),
//! on the fake plugin and fixtures here; [`FRESH`] is shared with pool's tests.

use std::time::Duration;

use super::*;
use crate::config::{FailurePolicy, RecordPolicy, TombstonePolicy};
use crate::event::{Event, OutputRecord, Side};
use crate::join::{CommitPoint, JoinKind, JoinWindow};

mod budget;
mod calls;
mod commit;
mod dead_letter;
mod intake;
mod retry;
mod table;

/// Records its calls; fails on keys starting with "bad" (and on matches of the left offsets in
/// `fail_left`); a match on key "to:T" writes to topic T.
#[derive(Default)]
struct FakePlugin {
    calls: Vec<String>,
    fail_left: Vec<i64>,
}

impl Action for FakePlugin {
    fn on_match(
        &mut self,
        key: &[u8],
        left: &Event,
        right: &Event,
    ) -> Result<Vec<OutputRecord>, ActionFailure> {
        let k = String::from_utf8_lossy(key).into_owned();
        self.calls
            .push(format!("match {k} {}+{}", left.offset, right.offset));
        if k.starts_with("bad") || self.fail_left.contains(&left.offset) {
            return Err(ActionFailure {
                kind: crate::event::FailureKind::Crash,
                message: "boom".into(),
            });
        }
        Ok(vec![OutputRecord {
            topic: k.strip_prefix("to:").map(str::to_owned),
            key: Some(key.to_vec()),
            value: Some(b"paid".to_vec()),
            headers: vec![],
        }])
    }

    fn on_expire(
        &mut self,
        key: &[u8],
        event: &Event,
        _side: Side,
    ) -> Result<Vec<OutputRecord>, ActionFailure> {
        self.calls.push(format!(
            "expire {} {}",
            String::from_utf8_lossy(key),
            event.offset
        ));
        Ok(vec![OutputRecord {
            topic: None,
            key: Some(key.to_vec()),
            value: Some(b"unpaid".to_vec()),
            headers: vec![],
        }])
    }

    fn version(&self) -> String {
        "fake@1".into()
    }
}

fn policy() -> TaskPolicy {
    TaskPolicy {
        window: JoinWindow {
            window_ms: 10,
            grace_ms: 0,
        },
        kind: JoinKind::Left,
        max_idle_ms: 0,
        max_future_ms: 3_600_000,
        late: RecordPolicy::DeadLetter,
        null_keys: RecordPolicy::DeadLetter,
        tombstones: TombstonePolicy::Drop,
        failure: FailurePolicy::DeadLetter,
        retries: 2,
        backoff: Duration::from_millis(100),
        outputs: OutputTopics {
            inputs: vec!["left".into(), "right".into()],
            internal: vec!["g-left-repartition".into(), "g-right-repartition".into()],
            allowed: None,
        },
        table: None,
    }
}

fn ev(side: Side, offset: i64, key: &str, ts: i64) -> Event {
    Event {
        topic: format!("{side:?}").to_lowercase().into(),
        partition: 0,
        offset,
        timestamp: ts,
        key: Some(key.as_bytes().to_vec().into()),
        value: Some(b"v".to_vec().into()),
        headers: Box::default(),
    }
}

/// Start points of a task with nothing committed (also used by pool's tests).
pub(super) const FRESH: &[CommitPoint] = &[CommitPoint {
    offset: 0,
    processed_through: None,
}; 2];

fn values(batch: &Batch) -> Vec<String> {
    batch
        .emits
        .iter()
        .map(|e| match e {
            Emit::Output { record: r, .. } => format!(
                "out {}",
                String::from_utf8_lossy(r.value.as_deref().unwrap())
            ),
            Emit::DeadLetter(d) => format!(
                "dlq {:?} {:?}",
                d.reason,
                d.inputs.iter().map(|e| e.offset).collect::<Vec<_>>()
            ),
        })
        .collect()
}
