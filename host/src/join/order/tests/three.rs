//! The queue of a three-topic join: the binary rules, applied to every side (issue 32).

use super::{ev, side_offset};
use crate::event::Side;
use crate::join::order::{Admission, TaskQueue, BACKLOG_WAIT_MS};

const A: Side = Side::LEFT;
const B: Side = Side::RIGHT;
fn c() -> Side {
    Side::of(2)
}

/// A live three-topic queue (no replay) idling at most `max_idle_ms`.
fn live3(max_idle_ms: i64) -> TaskQueue {
    let mut q = TaskQueue::with_sides(3, max_idle_ms);
    for side in Side::all(3) {
        q.set_replay(side, 0, None);
    }
    q
}

#[test]
fn takes_the_oldest_front_of_three_and_the_first_topic_on_a_tie() {
    let mut q = live3(100);
    q.push(A, ev(0, 30));
    q.push(B, ev(0, 10));
    q.push(c(), ev(0, 10));
    q.push(c(), ev(1, 40));
    q.push(A, ev(1, 50));
    q.push(B, ev(1, 60));
    let taken: Vec<_> = std::iter::from_fn(|| q.next(0)).map(side_offset).collect();
    // B and C tie at 10: B, the earlier topic, first. Then A 30, C 40, and A 50 with all three
    // sides holding records; B 60 is alone then and waits for the others.
    assert_eq!(taken, [(B, 0), (c(), 0), (A, 0), (c(), 1)]);
    assert!(
        q.next(99).is_none(),
        "C is empty: A 50 waits up to max idle"
    );
    assert_eq!(q.next(100).map(side_offset), Some((A, 1)));
    assert_eq!(q.next(100).map(side_offset), Some((B, 1)));
    assert_eq!(q.len(), 0);
}

#[test]
fn every_empty_side_must_be_confirmed_by_the_broker_before_the_task_goes_on() {
    let mut q = live3(100);
    for side in Side::all(3) {
        q.set_end_offset(side, Some(1));
    }
    q.push(A, ev(0, 0));
    q.push(A, ev(1, 5_000));
    q.set_end_offset(A, Some(2));
    q.push(B, ev(0, 0));
    q.push(c(), ev(0, 0));
    let taken: Vec<_> = std::iter::from_fn(|| q.next(0)).map(side_offset).collect();
    assert_eq!(taken, [(A, 0), (B, 0)]);
    // B is empty, C's record is close behind B's latest: no idle wait, but the broker's word.
    assert_eq!(q.end_offsets_wanted(), [false, true, false]);
    q.confirm_end_offset(B, Some(1));
    assert_eq!(q.next(0).map(side_offset), Some((c(), 0)));
    // A alone, far ahead of B's and C's latest: max idle first, then the broker is asked about
    // C; B's answer holds for A's record, queued before it.
    assert!(q.next(0).is_none());
    assert_eq!(q.end_offsets_wanted(), [false, false, false]);
    assert!(q.next(150).is_none());
    assert_eq!(q.end_offsets_wanted(), [false, false, true]);
    // No answer for C: it still holds the task back, and is asked again.
    q.confirm_end_offset(c(), None);
    assert!(q.next(160).is_none());
    assert_eq!(q.end_offsets_wanted(), [false, false, true]);
    // C answered: nothing more there either. A goes on.
    q.confirm_end_offset(c(), Some(1));
    assert_eq!(q.next(170).map(side_offset), Some((A, 1)));
}

#[test]
fn a_backlog_on_one_empty_side_holds_the_task_while_another_is_caught_up() {
    let mut q = live3(100);
    for side in Side::all(3) {
        q.set_end_offset(side, Some(0));
    }
    q.set_end_offset(c(), Some(5));
    q.push(A, ev(0, 10));
    q.set_end_offset(A, Some(1));
    // B is untracked-empty at its end, C has five records on the broker not fetched yet.
    assert!(q.next(0).is_none());
    assert!(
        q.next(BACKLOG_WAIT_MS - 1).is_none(),
        "C's backlog is waited for"
    );
    assert_eq!(
        q.end_offsets_wanted(),
        [false, true, false],
        "B is asked meanwhile"
    );
    q.confirm_end_offset(B, Some(0));
    assert!(q.next(BACKLOG_WAIT_MS - 1).is_none());
    // C's backlog never came: given up after the backlog wait (as a binary join's), and B's
    // word still holds for A's front record.
    assert_eq!(q.next(BACKLOG_WAIT_MS).map(side_offset), Some((A, 0)));
    assert_eq!(q.end_offsets_wanted(), [false, false, false]);
}

#[test]
fn a_paused_empty_side_among_three_is_waited_for_without_a_timeout() {
    let mut q = live3(100);
    q.push(A, ev(0, 10));
    q.push(B, ev(0, 20));
    q.set_paused(c(), true);
    assert!(q.next(1_000_000).is_none());
    q.set_paused(c(), false);
    assert!(
        q.next(1_000_000).is_none(),
        "the idle wait starts when the pause ends"
    );
    assert_eq!(q.next(1_000_100).map(side_offset), Some((A, 0)));
}

#[test]
fn replay_waits_for_a_side_whose_replay_records_are_still_to_come() {
    let mut q = TaskQueue::with_sides(3, 0);
    q.set_replay(A, 0, Some(1));
    q.set_replay(B, 0, None);
    q.set_replay(c(), 0, Some(0));
    q.push(A, ev(0, 30));
    q.push(A, ev(1, 40));
    q.push(B, ev(0, 5));
    // C's offset 0 is replay, not fetched yet: nothing goes, not even B's older live record.
    assert!(q.next(1_000).is_none());
    q.push(c(), ev(0, 35));
    let taken: Vec<_> = std::iter::from_fn(|| q.next(1_000))
        .map(side_offset)
        .collect();
    // Replay first in timestamp order (A 30, C 35, A 40), then the live record.
    assert_eq!(taken, [(A, 0), (c(), 0), (A, 1), (B, 0)]);
}

#[test]
fn a_record_that_will_not_join_goes_first_on_any_side() {
    let mut q = live3(100);
    q.push(A, ev(0, 10));
    q.push_admitted(c(), ev(0, i64::MAX / 2), Admission::FutureTimestamp);
    assert_eq!(
        q.next_record(0).map(|(s, e, a)| (s, e.offset, a)),
        Some((c(), 0, Admission::FutureTimestamp))
    );
    assert!(q.next(0).is_none());
}
