//! Records pushed in: a future timestamp kept out of the join, and backpressure on the queue.

use super::*;
use crate::task::backpressure::QueueMarks;

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
