//! Records pushed in: a future timestamp kept out of the join, and a side paused for backpressure.

use super::*;

#[test]
fn a_record_from_the_far_future_is_dead_lettered_and_does_not_move_stream_time() {
    let mut task = PartitionTask::new(0, policy(), FRESH);
    let mut plugin = FakePlugin::default();
    let wall = 1_000_000;
    task.set_wall_clock(wall);
    // Year-3000-like: far past the wall clock + max_future (1 h).
    task.push(Side::LEFT, ev(Side::LEFT, 0, "far", wall + 4_000_000));
    let batch = task.run(0, &mut plugin);
    assert_eq!(values(&batch), ["dlq FutureTimestamp [0]"]);
    assert_eq!(task.counters.future_timestamps, 1);
    assert_eq!(task.counters.dead_lettered, 1);
    task.acknowledge(batch);
    // Records near the wall clock still join: stream time was not moved past their window.
    task.push(Side::LEFT, ev(Side::LEFT, 1, "o1", wall));
    task.push(Side::RIGHT, ev(Side::RIGHT, 0, "o1", wall + 5));
    let batch = task.run(0, &mut plugin);
    assert_eq!(values(&batch), ["out paid"]);
    assert_eq!(task.counters.late, 0);
    // Within max_future is no problem.
    task.acknowledge(batch);
    task.push(Side::LEFT, ev(Side::LEFT, 2, "soon", wall + 3_000_000));
    let batch = task.run(0, &mut plugin);
    assert!(
        !values(&batch).iter().any(|v| v.contains("FutureTimestamp")),
        "{:?}",
        values(&batch)
    );
    assert_eq!(task.counters.future_timestamps, 1);
}

#[test]
fn a_side_paused_for_backpressure_is_waited_for_and_its_bytes_are_counted_per_side() {
    let one = ev(Side::LEFT, 0, "k", 100).footprint();
    let mut task = PartitionTask::new(0, policy(), FRESH);
    for offset in 0..4 {
        task.push(Side::LEFT, ev(Side::LEFT, offset, "k", 100 + offset));
    }
    assert_eq!(task.queued_side_bytes(Side::LEFT), 4 * one);
    assert_eq!(task.queued_side_bytes(Side::RIGHT), 0);
    assert_eq!(task.queued_peak_bytes(), 4 * one);

    // The paused side is not idled past while empty: a right record waits with max_idle 0.
    task.set_backpressured(&[true, false]);
    let mut plugin = FakePlugin::default();
    let batch = task.run(0, &mut plugin);
    task.acknowledge(batch);
    assert_eq!(task.queued_side_bytes(Side::LEFT), 0);
    task.push(Side::RIGHT, ev(Side::RIGHT, 0, "r", 200));
    let batch = task.run(1_000, &mut plugin);
    assert!(batch.emits.is_empty(), "{:?}", values(&batch));
    assert_eq!(task.queued(), 1);
    // Resumed: the empty side is idled past again.
    task.set_backpressured(&[false, false]);
    let batch = task.run(2_000, &mut plugin);
    task.acknowledge(batch);
    assert_eq!(task.queued(), 0);
}
