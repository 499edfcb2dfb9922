use std::time::Duration;

use super::*;
use crate::config::{FailurePolicy, RecordPolicy, TombstonePolicy};

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
            inputs: ["left".into(), "right".into()],
            internal: vec!["g-left-repartition".into(), "g-right-repartition".into()],
            allowed: None,
        },
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
pub(super) const FRESH: [CommitPoint; 2] = [CommitPoint {
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

#[test]
fn a_match_is_produced_and_counts_as_processed_once_acknowledged() {
    let mut task = PartitionTask::new(0, policy(), FRESH);
    let mut plugin = FakePlugin::default();
    task.push(Side::Left, ev(Side::Left, 0, "o1", 100));
    task.push(Side::Right, ev(Side::Right, 0, "o1", 105));
    let batch = task.run(0, &mut plugin);
    assert_eq!(values(&batch), ["out paid"]);
    // Not acknowledged yet: nothing may be committed past the records.
    assert_eq!(
        task.commit_points()
            .map(|p| (p.offset, p.processed_through)),
        [(0, None), (0, None)]
    );
    task.acknowledge(batch);
    // Acknowledged, but both events are still held in their window: commit stays at them, and
    // processed-through says a restart must not act on them again.
    assert_eq!(
        task.commit_points()
            .map(|p| (p.offset, p.processed_through)),
        [(0, Some(0)), (0, Some(0))]
    );
}

#[test]
fn a_failing_call_is_retried_with_backoff_then_dead_lettered_and_the_rest_goes_on() {
    let mut task = PartitionTask::new(0, policy(), FRESH);
    let mut plugin = FakePlugin::default();
    task.push(Side::Left, ev(Side::Left, 0, "bad1", 100));
    task.push(Side::Right, ev(Side::Right, 0, "bad1", 101));
    task.push(Side::Left, ev(Side::Left, 1, "ok", 102));
    task.push(Side::Right, ev(Side::Right, 1, "ok", 103));
    let bad_calls = |plugin: &FakePlugin| {
        plugin
            .calls
            .iter()
            .filter(|c| c.starts_with("match bad1"))
            .count()
    };
    // The first attempt fails: the task parks for the backoff instead of sleeping, and nothing
    // after the failed record (the right one, which made the match) is done, nor does it count
    // as processed; the left record before it is, and the commit stays at both.
    let batch = task.run(0, &mut plugin);
    assert!(batch.emits.is_empty(), "{:?}", values(&batch));
    assert!(!batch.is_full(), "a parked task has nothing to do now");
    task.acknowledge(batch);
    assert_eq!(
        task.commit_points()
            .map(|p| (p.offset, p.processed_through)),
        [(0, Some(0)), (0, None)]
    );
    assert_eq!(bad_calls(&plugin), 1);
    assert!(!plugin.calls.iter().any(|c| c.contains("ok")));
    let mut now = 0;
    let mut waits = Vec::new();
    while let Some(until) = task.parked_until() {
        // Before its time, a run returns at once and makes no call.
        let calls = plugin.calls.len();
        assert!(task.run(until - 1, &mut plugin).emits.is_empty());
        assert_eq!(plugin.calls.len(), calls);
        waits.push(until - now);
        now = until;
        let batch = task.run(now, &mut plugin);
        if task.parked_until().is_some() {
            assert!(batch.emits.is_empty());
            task.acknowledge(batch);
            continue;
        }
        // The last attempt failed: dead-lettered exactly as before, then the rest goes on.
        let v = values(&batch);
        assert!(
            v[0].starts_with("dlq Failed") && v[0].contains("fake@1") && v[0].ends_with("[0, 0]"),
            "{v:?}"
        );
        assert_eq!(v[1], "out paid");
        task.acknowledge(batch);
    }
    // 100 ms, then 200 ms (the clock also counts the run's own time, a few ms at most).
    assert_eq!(waits.len(), 2, "{waits:?}");
    assert!(
        (100..150).contains(&waits[0]) && (200..250).contains(&waits[1]),
        "{waits:?}"
    );
    assert_eq!(bad_calls(&plugin), 3);
    assert_eq!(task.counters.failed_calls, 3);
    assert_eq!(task.counters.dead_lettered, 2);
    assert_eq!(task.counters.matches, 2, "a retried match counts once");
    assert_eq!(
        task.commit_points()
            .map(|p| (p.offset, p.processed_through)),
        [(0, Some(1)), (0, Some(1))]
    );
}

#[test]
fn the_backoff_doubles_up_to_its_cap() {
    let second = Duration::from_secs(1);
    let sequence: Vec<u64> = (1..=8)
        .map(|retry| backoff_before(second, retry).as_secs())
        .collect();
    assert_eq!(sequence, [1, 2, 4, 8, 16, 30, 30, 30]);
    assert_eq!(backoff_before(second, u32::MAX), MAX_BACKOFF);
    assert_eq!(
        backoff_before(Duration::from_millis(100), 2),
        Duration::from_millis(200)
    );

    // A task's parked waits follow it.
    let mut task = PartitionTask::new(
        0,
        TaskPolicy {
            retries: 7,
            backoff: second,
            ..policy()
        },
        FRESH,
    );
    let mut plugin = FakePlugin::default();
    task.push(Side::Left, ev(Side::Left, 0, "bad", 100));
    task.push(Side::Right, ev(Side::Right, 0, "bad", 101));
    let mut now = 0;
    let mut waits = Vec::new();
    task.run(now, &mut plugin);
    while let Some(until) = task.parked_until() {
        waits.push((until - now + 500) / 1000);
        now = until;
        task.run(now, &mut plugin);
    }
    assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30]);
    assert_eq!(task.counters.failed_calls, 8);
}

#[test]
fn a_parked_record_holds_back_its_earlier_outputs_and_the_records_after_it() {
    // R0 matches L0 and L1; the call on L1 fails once.
    let mut task = PartitionTask::new(0, policy(), FRESH);
    let mut plugin = FakePlugin {
        fail_left: vec![1],
        ..FakePlugin::default()
    };
    task.push(Side::Left, ev(Side::Left, 0, "k", 100));
    task.push(Side::Left, ev(Side::Left, 1, "k", 101));
    task.push(Side::Right, ev(Side::Right, 0, "k", 102));
    task.push(Side::Right, ev(Side::Right, 1, "after", 103));
    task.push(Side::Left, ev(Side::Left, 2, "after", 104));
    let batch = task.run(0, &mut plugin);
    // L0's output waits with its record: a record is produced whole.
    assert!(batch.emits.is_empty(), "{:?}", values(&batch));
    task.acknowledge(batch);
    // L0 and L1 are processed; R0 is not, and the commit stays at it.
    assert_eq!(
        task.commit_points()
            .map(|p| (p.offset, p.processed_through)),
        [(0, Some(1)), (0, None)]
    );
    assert_eq!(plugin.calls, ["match k 0+0", "match k 1+0"]);
    plugin.fail_left.clear();
    let until = task.parked_until().expect("parked");
    let batch = task.run(until, &mut plugin);
    assert_eq!(values(&batch), ["out paid", "out paid", "out paid"]);
    // L0's call was not made again; the later record after R0.
    assert_eq!(
        plugin.calls,
        [
            "match k 0+0",
            "match k 1+0",
            "match k 1+0",
            "match after 2+1"
        ]
    );
    assert_eq!(task.counters.matches, 3);
    task.acknowledge(batch);
    assert_eq!(task.parked_until(), None);
    let points = task.commit_points();
    assert_eq!(points.map(|p| p.processed_through), [Some(2), Some(1)]);
}

#[test]
fn under_halt_a_failure_stops_the_task_and_freezes_its_commit_points() {
    let mut task = PartitionTask::new(
        3,
        TaskPolicy {
            failure: FailurePolicy::Halt,
            retries: 0,
            ..policy()
        },
        FRESH,
    );
    let mut plugin = FakePlugin::default();
    task.push(Side::Left, ev(Side::Left, 0, "ok", 100));
    task.push(Side::Right, ev(Side::Right, 0, "ok", 101));
    let batch = task.run(0, &mut plugin);
    task.acknowledge(batch);
    let before = task.commit_points();
    task.push(Side::Left, ev(Side::Left, 1, "bad2", 102));
    task.push(Side::Right, ev(Side::Right, 1, "bad2", 103));
    task.push(Side::Left, ev(Side::Left, 2, "later", 104));
    let batch = task.run(0, &mut plugin);
    assert!(batch.emits.is_empty());
    let reason = task.halted().expect("halted");
    assert!(
        reason.contains("task 3 halted") && reason.contains("bad2") && reason.contains("boom"),
        "{reason}"
    );
    task.acknowledge(batch);
    assert_eq!(task.commit_points(), before);
    assert!(!plugin.calls.iter().any(|c| c.contains("later")));
}

#[test]
fn null_keys_and_late_records_are_dead_lettered_and_tombstones_dropped_by_policy() {
    let mut task = PartitionTask::new(0, policy(), FRESH);
    let mut plugin = FakePlugin::default();
    task.push(
        Side::Left,
        Event {
            key: None,
            ..ev(Side::Left, 0, "", 100)
        },
    );
    task.push(Side::Right, ev(Side::Right, 0, "k", 200));
    task.push(Side::Right, ev(Side::Right, 1, "k", 150)); // late: 150 < 200 - 10
    let mut tomb = ev(Side::Left, 1, "k", 201);
    tomb.value = None;
    task.push(Side::Left, tomb);
    let batch = task.run(0, &mut plugin);
    assert_eq!(values(&batch), ["dlq NullKey [0]", "dlq Late [1]"]);
    assert_eq!(
        (
            task.counters.null_keys,
            task.counters.late,
            task.counters.tombstones
        ),
        (1, 1, 1)
    );
    assert!(plugin.calls.is_empty(), "{:?}", plugin.calls);
}

#[test]
fn expiries_are_acted_on_once_the_window_closes() {
    let mut task = PartitionTask::new(0, policy(), FRESH);
    let mut plugin = FakePlugin::default();
    task.push(Side::Left, ev(Side::Left, 0, "unpaid", 100));
    task.push(Side::Right, ev(Side::Right, 0, "other", 111));
    let batch = task.run(0, &mut plugin);
    assert_eq!(values(&batch), ["out unpaid"]);
    assert_eq!(plugin.calls, ["expire unpaid 0"]);
}

#[test]
fn a_new_owner_rebuilds_state_from_replay_without_acting_twice() {
    let mut first = PartitionTask::new(0, policy(), FRESH);
    let mut plugin = FakePlugin::default();
    let input = [
        (Side::Left, ev(Side::Left, 0, "a", 100)),
        (Side::Right, ev(Side::Right, 0, "a", 104)),
        (Side::Left, ev(Side::Left, 1, "b", 106)),
    ];
    for (side, e) in &input {
        first.push(*side, e.clone());
    }
    let batch = first.run(0, &mut plugin);
    first.acknowledge(batch);
    let committed = first.commit_points();

    // The new owner reads from the committed offsets; a late partner for "b" arrives after.
    let mut second = PartitionTask::new(0, policy(), committed);
    let mut plugin2 = FakePlugin::default();
    for (side, e) in &input {
        if e.offset >= committed[ix(*side)].offset {
            second.push(*side, e.clone());
        }
    }
    second.push(Side::Right, ev(Side::Right, 1, "b", 108));
    let batch = second.run(0, &mut plugin2);
    assert_eq!(
        plugin2.calls,
        ["match b 1+1"],
        "the match of a must not run again"
    );
    assert_eq!(values(&batch), ["out paid"]);
    assert_eq!(second.counters.suppressed, 1);
}

#[test]
fn a_record_from_the_far_future_is_dead_lettered_and_does_not_move_stream_time() {
    let mut task = PartitionTask::new(0, policy(), FRESH);
    let mut plugin = FakePlugin::default();
    let wall = 1_000_000;
    task.set_wall_clock(wall);
    // Year-3000-like: far past the wall clock + max_future (1 h).
    task.push(Side::Left, ev(Side::Left, 0, "far", wall + 4_000_000));
    let batch = task.run(0, &mut plugin);
    assert_eq!(values(&batch), ["dlq FutureTimestamp [0]"]);
    assert_eq!(task.counters.future_timestamps, 1);
    assert_eq!(task.counters.dead_lettered, 1);
    task.acknowledge(batch);
    // Records near the wall clock still join: stream time was not moved past their window.
    task.push(Side::Left, ev(Side::Left, 1, "o1", wall));
    task.push(Side::Right, ev(Side::Right, 0, "o1", wall + 5));
    let batch = task.run(0, &mut plugin);
    assert_eq!(values(&batch), ["out paid"]);
    assert_eq!(task.counters.late, 0);
    // Within max_future is no problem.
    task.acknowledge(batch);
    task.push(Side::Left, ev(Side::Left, 2, "soon", wall + 3_000_000));
    let batch = task.run(0, &mut plugin);
    assert!(
        !values(&batch).iter().any(|v| v.contains("FutureTimestamp")),
        "{:?}",
        values(&batch)
    );
    assert_eq!(task.counters.future_timestamps, 1);
}

#[test]
fn an_output_to_an_input_topic_or_outside_the_allowed_ones_dead_letters_its_inputs() {
    let mut task = PartitionTask::new(0, policy(), FRESH);
    let mut plugin = FakePlugin::default();
    for (offset, key) in [(0, "to:left"), (1, "to:audit")] {
        task.push(Side::Left, ev(Side::Left, offset, key, 100));
        task.push(Side::Right, ev(Side::Right, offset, key, 101));
    }
    let batch = task.run(0, &mut plugin);
    let v = values(&batch);
    assert_eq!(v.len(), 2, "{v:?}");
    assert!(
        v[0].starts_with("dlq OutputRefused")
            && v[0].contains("an input topic")
            && v[0].ends_with("[0, 0]"),
        "{v:?}"
    );
    // Without output.allowed_topics, any other topic is the plugin's to choose.
    assert_eq!(v[1], "out paid");
    assert_eq!(task.counters.refused_outputs, 1);
    assert_eq!(task.counters.dead_lettered, 2);

    let allowed = TaskPolicy {
        outputs: OutputTopics {
            inputs: ["left".into(), "right".into()],
            internal: Vec::new(),
            allowed: Some(vec!["orders-paid".into()]),
        },
        ..policy()
    };
    let mut task = PartitionTask::new(0, allowed, FRESH);
    task.push(Side::Left, ev(Side::Left, 0, "to:audit", 100));
    task.push(Side::Right, ev(Side::Right, 0, "to:audit", 101));
    let v = values(&task.run(0, &mut plugin));
    assert!(
        v.len() == 1 && v[0].contains("not in output.allowed_topics"),
        "{v:?}"
    );
}

#[test]
fn an_output_to_an_internal_repartition_topic_dead_letters_its_inputs() {
    let mut task = PartitionTask::new(0, policy(), FRESH);
    let mut plugin = FakePlugin::default();
    task.push(Side::Left, ev(Side::Left, 0, "to:g-right-repartition", 100));
    task.push(
        Side::Right,
        ev(Side::Right, 0, "to:g-right-repartition", 101),
    );
    let v = values(&task.run(0, &mut plugin));
    assert!(
        v.len() == 1 && v[0].starts_with("dlq OutputRefused") && v[0].contains("an internal topic"),
        "{v:?}"
    );
    assert_eq!(task.counters.refused_outputs, 1);
}

#[test]
fn under_halt_a_refused_output_stops_the_task_before_its_inputs_count_as_processed() {
    let halt = TaskPolicy {
        failure: FailurePolicy::Halt,
        ..policy()
    };
    let mut task = PartitionTask::new(0, halt, FRESH);
    let mut plugin = FakePlugin::default();
    task.push(Side::Left, ev(Side::Left, 0, "to:right", 100));
    task.push(Side::Right, ev(Side::Right, 0, "to:right", 101));
    let batch = task.run(0, &mut plugin);
    assert!(batch.emits.is_empty());
    let reason = task.halted().expect("halted");
    assert!(
        reason.contains("was refused") && reason.contains("\"to:right\""),
        "{reason}"
    );
    task.acknowledge(batch);
    assert_eq!(
        task.commit_points()
            .map(|p| (p.offset, p.processed_through)),
        [(0, None), (0, None)]
    );
}

#[test]
fn a_side_over_its_high_mark_pauses_once_and_resumes_at_its_low_mark_unless_halted() {
    let one = ev(Side::Left, 0, "k", 100).footprint();
    // Paused past three records' worth, resumed at one and a half.
    let marks = QueueMarks {
        high: 3 * one,
        low: 3 * one / 2,
    };
    let mut task = PartitionTask::new(0, policy(), FRESH);
    for offset in 0..3 {
        task.push(Side::Left, ev(Side::Left, offset, "k", 100 + offset));
        assert!(!task.pause_if_full(Side::Left, marks), "at or below high");
    }
    task.push(Side::Left, ev(Side::Left, 3, "k", 103));
    assert!(task.pause_if_full(Side::Left, marks));
    assert!(!task.pause_if_full(Side::Left, marks), "paused already");
    assert!(
        !task.pause_if_full(Side::Right, marks),
        "the other side is empty"
    );
    assert_eq!((task.paused_sides(), task.counters.pauses), (1, 1));
    assert!(task.drained(marks).is_empty(), "four records queued");
    assert_eq!(task.queued_peak_bytes(), 4 * one);

    // The paused side is not idled past while empty: a right record waits with max_idle 0.
    let mut plugin = FakePlugin::default();
    let batch = task.run(0, &mut plugin);
    task.acknowledge(batch);
    task.push(Side::Right, ev(Side::Right, 0, "r", 200));
    let batch = task.run(1_000, &mut plugin);
    assert!(batch.emits.is_empty(), "{:?}", values(&batch));
    assert_eq!(task.queued(), 1);
    assert_eq!(task.drained(marks), [Side::Left]);
    assert_eq!(task.paused_sides(), 0);

    // A halted task's paused sides stay paused.
    let mut halted = PartitionTask::new(
        1,
        TaskPolicy {
            failure: FailurePolicy::Halt,
            retries: 0,
            ..policy()
        },
        FRESH,
    );
    halted.push(Side::Left, ev(Side::Left, 0, "bad", 100));
    halted.push(Side::Right, ev(Side::Right, 0, "bad", 101));
    for offset in 1..5 {
        halted.push(Side::Left, ev(Side::Left, offset, "k", 200));
    }
    assert!(halted.pause_if_full(Side::Left, marks));
    halted.run(0, &mut plugin);
    assert!(halted.halted().is_some());
    assert!(halted
        .drained(QueueMarks {
            high: 1,
            low: usize::MAX
        })
        .is_empty());
}

#[test]
fn a_run_stops_at_its_batch_budget_and_the_next_run_goes_on() {
    let mut task = PartitionTask::new(0, policy(), FRESH);
    let mut plugin = FakePlugin::default();
    for i in 0..10 {
        let key = format!("k{i}");
        task.push(Side::Left, ev(Side::Left, i, &key, 100 + i));
        task.push(Side::Right, ev(Side::Right, i, &key, 100 + i));
    }
    // Room for about one match's output and inputs: each run stops after the record that
    // passed it, and says so.
    task.set_batch_budget(1);
    let mut outputs = 0;
    for _ in 0..10 {
        let batch = task.run(0, &mut plugin);
        assert!(batch.is_full());
        assert_eq!(values(&batch).len(), 1, "{:?}", values(&batch));
        outputs += batch.emits.len();
        task.acknowledge(batch);
    }
    assert_eq!(outputs, 10);
    assert_eq!(task.queued(), 0);
    task.set_batch_budget(usize::MAX);
    assert!(!task.run(0, &mut plugin).is_full());
}

#[test]
fn a_run_stops_at_its_time_budget_and_the_next_run_goes_on() {
    let mut task = PartitionTask::new(0, policy(), FRESH);
    let mut plugin = FakePlugin::default();
    for i in 0..40 {
        let key = format!("k{i}");
        task.push(Side::Left, ev(Side::Left, i, &key, 100 + i));
        task.push(Side::Right, ev(Side::Right, i, &key, 100 + i));
    }
    // No time at all: the clock is read every 16 records, so each run takes 15 (it stops
    // before the 16th) and says it is full; 80 records take 6 runs.
    task.set_time_budget(Duration::ZERO);
    let mut runs = 0;
    let mut outputs = 0;
    loop {
        let before = task.queued();
        let batch = task.run(0, &mut plugin);
        runs += 1;
        let full = batch.is_full();
        outputs += batch.emits.len();
        task.acknowledge(batch);
        if !full {
            break;
        }
        assert_eq!(before - task.queued(), 15);
    }
    assert_eq!((runs, outputs, task.queued()), (6, 40, 0));
}

/// [`FakePlugin`] taking batches of up to `limit` calls, each made as `FakePlugin` would make
/// it; a batch holding a call on key "trap…" fails as a whole (as a trapping guest does).
struct Batching {
    inner: FakePlugin,
    limit: usize,
    sizes: Vec<usize>,
}

impl Batching {
    fn new(limit: usize) -> Self {
        Batching {
            inner: FakePlugin::default(),
            limit,
            sizes: Vec::new(),
        }
    }
}

impl Action for Batching {
    fn on_match(
        &mut self,
        key: &[u8],
        left: &Event,
        right: &Event,
    ) -> Result<Vec<OutputRecord>, ActionFailure> {
        self.inner.on_match(key, left, right)
    }

    fn on_expire(
        &mut self,
        key: &[u8],
        event: &Event,
        side: Side,
    ) -> Result<Vec<OutputRecord>, ActionFailure> {
        self.inner.on_expire(key, event, side)
    }

    fn version(&self) -> String {
        self.inner.version()
    }

    fn batch_limit(&self) -> usize {
        self.limit
    }

    fn call_batch(
        &mut self,
        calls: &[Call<'_>],
    ) -> Option<Vec<Result<Vec<OutputRecord>, ActionFailure>>> {
        assert!(calls.len() <= self.limit, "a batch past the limit");
        self.sizes.push(calls.len());
        if calls.iter().any(|c| c.key().starts_with(b"trap")) {
            return None;
        }
        Some(
            calls
                .iter()
                .map(|call| match *call {
                    Call::Match { key, left, right } => self.inner.on_match(key, left, right),
                    Call::Expire { key, event, side } => self.inner.on_expire(key, event, side),
                })
                .collect(),
        )
    }
}

/// Emits, counters, retry waits (ms) and commit points (offset, processed-through) of the runs
/// until the task has nothing parked.
type MixedRun = (Vec<String>, TaskCounters, Vec<i64>, [(i64, Option<i64>); 2]);

/// Matches, a failing match, a batch that fails whole, a null key (dead-lettered between
/// calls), a late record, and expiries, pushed to a task; the runs' emits, counters, waits and
/// commit points.
fn run_mixed(action: &mut dyn Action, failure: FailurePolicy) -> MixedRun {
    let mut task = PartitionTask::new(
        0,
        TaskPolicy {
            failure,
            ..policy()
        },
        FRESH,
    );
    let keys = ["k1", "k2", "bad1", "k3", "trap1", "k4", "k5", "k6"];
    let mut ts = 100;
    for (i, key) in keys.iter().enumerate() {
        let i = i as i64;
        task.push(Side::Left, ev(Side::Left, i, key, ts));
        task.push(Side::Right, ev(Side::Right, i, key, ts + 1));
        ts += 2;
    }
    let mut null_key = ev(Side::Left, keys.len() as i64, "", ts);
    null_key.key = None;
    task.push(Side::Left, null_key);
    // Unmatched: expire once the right side moves 10 ms past them, in a run of expiries.
    for (j, key) in ["e1", "e2", "e3"].iter().enumerate() {
        task.push(
            Side::Left,
            ev(Side::Left, keys.len() as i64 + 1 + j as i64, key, ts + 1),
        );
    }
    task.push(Side::Right, ev(Side::Right, keys.len() as i64, "late", 50));
    task.push(
        Side::Right,
        ev(Side::Right, keys.len() as i64 + 1, "k9", ts + 40),
    );
    let mut waits = Vec::new();
    let mut emitted = Vec::new();
    let mut now = 0;
    loop {
        let batch = task.run(now, action);
        emitted.extend(values(&batch));
        task.acknowledge(batch);
        let Some(until) = task.parked_until() else {
            break;
        };
        // Rounded to the backoff's 100 ms: the clock counts the run's own time too.
        waits.push((until - now) / 100 * 100);
        now = until;
    }
    let points = task
        .commit_points()
        .map(|p| (p.offset, p.processed_through));
    (emitted, task.counters.clone(), waits, points)
}

#[test]
fn batched_calls_emit_count_and_commit_as_calls_one_by_one() {
    for failure in [FailurePolicy::DeadLetter, FailurePolicy::Halt] {
        let mut single = FakePlugin::default();
        let expected = run_mixed(&mut single, failure);
        for limit in [2, 3, 32] {
            let mut batching = Batching::new(limit);
            let mut got = run_mixed(&mut batching, failure);
            if failure == FailurePolicy::Halt {
                // Records after the one halted on were taken (into the state, not processed):
                // only the counts differ.
                got.1 = expected.1.clone();
            }
            assert_eq!(got, expected, "limit {limit}, {failure:?}");
            assert!(
                batching.sizes.iter().any(|&n| n > 1),
                "limit {limit}, {failure:?}: no batch of more than one call: {:?}",
                batching.sizes
            );
            if failure == FailurePolicy::DeadLetter {
                // Every call is made as often as one by one: a failed call's retries are single
                // calls, and a batch failing whole is made again one call at a time.
                let mut want = single.calls.clone();
                let mut have = batching.inner.calls.clone();
                want.sort();
                have.sort();
                want.dedup();
                have.dedup();
                assert_eq!(have, want, "limit {limit}");
            }
        }
    }
    // The scenario has what it is meant to: outputs, a dead-lettered failure, a null key, a late
    // record and expiries; under halt, the task stopped at bad1 with less emitted.
    let (emitted, counters, waits, _) =
        run_mixed(&mut FakePlugin::default(), FailurePolicy::DeadLetter);
    assert_eq!(counters.null_keys, 1, "{emitted:?}");
    assert_eq!(counters.late, 1, "{emitted:?}");
    assert_eq!(counters.expiries, 3, "{emitted:?}");
    assert_eq!(waits, [100, 200]);
    assert!(
        emitted.iter().any(|e| e.starts_with("dlq Failed")),
        "{emitted:?}"
    );
    let (halted, ..) = run_mixed(&mut FakePlugin::default(), FailurePolicy::Halt);
    assert_eq!(halted, ["out paid", "out paid"]);
}
