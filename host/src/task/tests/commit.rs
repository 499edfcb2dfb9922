//! What counts as processed, and the points to commit: after an acknowledgement, under a halt,
//! for a new owner, and at the last offset.

use super::*;

#[test]
fn a_match_is_produced_and_counts_as_processed_once_acknowledged() {
    let mut task = PartitionTask::new(0, policy(), FRESH);
    let mut plugin = FakePlugin::default();
    task.push(Side::LEFT, ev(Side::LEFT, 0, "o1", 100));
    task.push(Side::RIGHT, ev(Side::RIGHT, 0, "o1", 105));
    let batch = task.run(0, &mut plugin);
    assert_eq!(values(&batch), ["out paid"]);
    // Not acknowledged yet: nothing may be committed past the records.
    assert_eq!(
        task.commit_points()
            .iter()
            .map(|p| (p.offset, p.processed_through))
            .collect::<Vec<_>>(),
        [(0, None), (0, None)]
    );
    task.acknowledge(batch);
    // Acknowledged, but both events are still held in their window: commit stays at them, and
    // processed-through says a restart must not act on them again.
    assert_eq!(
        task.commit_points()
            .iter()
            .map(|p| (p.offset, p.processed_through))
            .collect::<Vec<_>>(),
        [(0, Some(0)), (0, Some(0))]
    );
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
    task.push(Side::LEFT, ev(Side::LEFT, 0, "ok", 100));
    task.push(Side::RIGHT, ev(Side::RIGHT, 0, "ok", 101));
    let batch = task.run(0, &mut plugin);
    task.acknowledge(batch);
    let before = task.commit_points();
    task.push(Side::LEFT, ev(Side::LEFT, 1, "bad2", 102));
    task.push(Side::RIGHT, ev(Side::RIGHT, 1, "bad2", 103));
    task.push(Side::LEFT, ev(Side::LEFT, 2, "later", 104));
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
fn a_new_owner_rebuilds_state_from_replay_without_acting_twice() {
    let mut first = PartitionTask::new(0, policy(), FRESH);
    let mut plugin = FakePlugin::default();
    let input = [
        (Side::LEFT, ev(Side::LEFT, 0, "a", 100)),
        (Side::RIGHT, ev(Side::RIGHT, 0, "a", 104)),
        (Side::LEFT, ev(Side::LEFT, 1, "b", 106)),
    ];
    for (side, e) in &input {
        first.push(*side, e.clone());
    }
    let batch = first.run(0, &mut plugin);
    first.acknowledge(batch);
    let committed = first.commit_points();

    // The new owner reads from the committed offsets; a late partner for "b" arrives after.
    let mut second = PartitionTask::new(0, policy(), &committed);
    let mut plugin2 = FakePlugin::default();
    for (side, e) in &input {
        if e.offset >= committed[side.index()].offset {
            second.push(*side, e.clone());
        }
    }
    second.push(Side::RIGHT, ev(Side::RIGHT, 1, "b", 108));
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
fn a_record_at_the_last_offset_does_not_wrap_the_commit_point() {
    let mut task = PartitionTask::new(0, policy(), FRESH);
    let mut plugin = FakePlugin::default();
    task.push(Side::LEFT, ev(Side::LEFT, i64::MAX, "k", 100));
    task.push(Side::RIGHT, ev(Side::RIGHT, i64::MAX, "k", 101));
    // Queued: the commit stays at the records, not at a next offset wrapped below them.
    assert_eq!(
        task.commit_points()
            .iter()
            .map(|p| (p.offset, p.processed_through))
            .collect::<Vec<_>>(),
        [(i64::MAX, None), (i64::MAX, None)]
    );
    let batch = task.run(0, &mut plugin);
    assert_eq!(values(&batch), ["out paid"]);
    task.acknowledge(batch);
    // Processed and held in their window.
    assert_eq!(
        task.commit_points()
            .iter()
            .map(|p| (p.offset, p.processed_through))
            .collect::<Vec<_>>(),
        [(i64::MAX, Some(i64::MAX)), (i64::MAX, Some(i64::MAX))]
    );
}
