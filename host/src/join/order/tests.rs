//! The task queue's order: timestamps, idle waits, backlogs and the broker's word, replay.

use super::*;

#[test]
fn a_replay_takes_a_record_that_will_not_join_where_the_live_run_did() {
    // Live, F (far future) went first, as soon as it was at the front: F, R0, J1, R1. A
    // replay of the same records must take them in the same order, or J1 would come after
    // R1, be late, and a match made before the restart would be lost.
    let mut q = TaskQueue::new(1_000);
    q.set_replay(Side::LEFT, 0, Some(1));
    q.set_replay(Side::RIGHT, 0, Some(1));
    q.push_admitted(Side::LEFT, ev(0, i64::MAX / 2), Admission::FutureTimestamp);
    q.push(Side::LEFT, ev(1, 100));
    q.push(Side::RIGHT, ev(0, 50));
    q.push(Side::RIGHT, ev(1, 200));
    let order: Vec<_> = std::iter::from_fn(|| q.next_record(0))
        .map(|(side, e, _)| (side, e.offset))
        .collect();
    assert_eq!(
        order,
        [
            (Side::LEFT, 0),
            (Side::RIGHT, 0),
            (Side::LEFT, 1),
            (Side::RIGHT, 1)
        ]
    );
}

#[test]
fn a_record_that_will_not_join_does_not_wait_for_the_other_side() {
    let mut q = TaskQueue::new(1_000);
    // Stamped far ahead, then an ordinary record behind it on the same side; the other
    // side has an older record and then nothing.
    q.push_admitted(Side::LEFT, ev(0, i64::MAX / 2), Admission::FutureTimestamp);
    q.push(Side::LEFT, ev(1, 100));
    q.push(Side::RIGHT, ev(0, 50));
    let order: Vec<_> = std::iter::from_fn(|| q.next_record(0))
        .map(|(side, e, a)| (side, e.offset, a))
        .collect();
    assert_eq!(
        order,
        [
            (Side::LEFT, 0, Admission::FutureTimestamp),
            (Side::RIGHT, 0, Admission::Join),
        ]
    );
    // The ordinary record waits for the empty side as usual.
    assert!(q.next_record(999).is_none());
    assert_eq!(q.next_record(1_000).map(|(_, e, _)| e.offset), Some(1));
}

#[test]
fn a_side_paused_for_backpressure_is_waited_for_however_long_it_takes() {
    let mut q = TaskQueue::new(100);
    q.push(Side::LEFT, ev(0, 10));
    q.push(Side::RIGHT, ev(0, 20));
    q.set_paused(Side::RIGHT, true);
    assert_eq!(q.next(0).map(side_offset), Some((Side::LEFT, 0)));
    q.push(Side::LEFT, ev(1, 30));
    assert_eq!(q.next(0).map(side_offset), Some((Side::RIGHT, 0)));
    // The right side ran dry while paused: its next records are on the broker.
    assert!(q.next(0).is_none());
    assert!(
        q.next(1_000_000).is_none(),
        "max idle must not apply to a paused side"
    );
    // Resumed: it is an ordinary empty side again (max idle from now).
    q.set_paused(Side::RIGHT, false);
    assert!(q.next(1_000_001).is_none());
    assert_eq!(q.next(1_000_101).map(|(_, e)| e.offset), Some(1));
}

#[test]
fn queued_bytes_follow_pushes_and_takes() {
    let mut q = TaskQueue::new(0);
    let (a, b) = (ev(0, 10), ev(1, 20));
    let (fa, fb) = (a.footprint(), b.footprint());
    q.push(Side::LEFT, a);
    q.push(Side::LEFT, b);
    assert_eq!(q.bytes(Side::LEFT), fa + fb);
    assert_eq!(q.bytes(Side::RIGHT), 0);
    q.next(0).unwrap();
    assert_eq!(q.bytes(Side::LEFT), fb);
    q.next(0).unwrap();
    assert_eq!(q.bytes(Side::LEFT), 0);
}

#[test]
fn once_an_empty_side_was_waited_for_the_other_side_runs_on_without_waiting_per_record() {
    // The left topic is done (nothing more will come); the right has a backlog. One wait of
    // max idle, then the right side's records go one after another: waiting again for each
    // took one record per max idle per task (10 records/s at the default 100 ms).
    let mut q = TaskQueue::new(100);
    for offset in 0..5 {
        q.push(Side::RIGHT, ev(offset, 10 * offset));
    }
    assert!(q.next(0).is_none());
    assert_eq!(drain(&mut q, 100).len(), 5);
    // Both sides had nothing: the next lone record waits again.
    q.push(Side::RIGHT, ev(5, 60));
    assert!(q.next(150).is_none());
    assert_eq!(q.next(250).map(|(_, e)| e.offset), Some(5));
    // A record of the waited-for side resets the wait.
    q.push(Side::LEFT, ev(0, 70));
    q.push(Side::RIGHT, ev(6, 80));
    assert_eq!(q.next(250).map(|(s, _)| s), Some(Side::LEFT));
    assert!(
        q.next(300).is_none(),
        "the left side is empty again: a new wait"
    );
    assert_eq!(q.next(400).map(|(_, e)| e.offset), Some(6));
}

/// A task whose left side the consumer's cache says is caught up (end 1 after offset 0).
fn left_caught_up_by_the_cache() -> TaskQueue {
    let mut q = live(100);
    q.push(Side::LEFT, ev(0, 0));
    q.set_end_offset(Side::LEFT, Some(1));
    q.set_end_offset(Side::RIGHT, Some(3));
    for offset in 0..3 {
        q.push(Side::RIGHT, ev(offset, 1000 + offset));
    }
    assert_eq!(q.next(0).map(side_offset), Some((Side::LEFT, 0)));
    q
}

/// [`left_caught_up_by_the_cache`] once max idle (100 ms from 0) passed: it wants the broker's
/// word on the left side.
fn left_asked_about() -> TaskQueue {
    let mut q = left_caught_up_by_the_cache();
    assert!(q.next(0).is_none());
    assert!(q.next(100).is_none());
    assert_eq!(q.end_offsets_wanted(), [true, false]);
    q
}

#[test]
fn a_side_the_cache_calls_caught_up_is_not_gone_past_before_the_broker_says_so() {
    let mut q = left_caught_up_by_the_cache();
    assert!(q.next(50).is_none(), "within max idle");
    assert_eq!(q.end_offsets_wanted(), [false, false]);
    assert!(q.next(150).is_none(), "max idle passed: ask first");
    assert_eq!(q.end_offsets_wanted(), [true, false]);
    // A fetch came back late: the broker holds offsets 1 and 2 of the left partition.
    q.confirm_end_offset(Side::LEFT, Some(3));
    assert_eq!(q.end_offsets_wanted(), [false, false]);
    assert!(
        q.next(5_000).is_none(),
        "a backlog on the broker is waited for"
    );
    q.push(Side::LEFT, ev(1, 500));
    q.push(Side::LEFT, ev(2, 1500));
    // In timestamp order: nothing of the left side became late.
    assert_eq!(
        drain(&mut q, 5_000),
        [
            (Side::LEFT, 1),
            (Side::RIGHT, 0),
            (Side::RIGHT, 1),
            (Side::RIGHT, 2)
        ]
    );
    assert_eq!(
        q.next(5_000).map(side_offset),
        None,
        "the left record waits for the right side"
    );
}

#[test]
fn a_side_the_broker_says_is_caught_up_is_gone_past_with_what_was_queued_by_then() {
    let mut q = left_asked_about();
    q.confirm_end_offset(Side::LEFT, Some(1));
    // Queued after the answer: it may have been written beside left records the broker did
    // not have yet (the failure this prevents: a fetch of one partition late on a busy
    // machine, the other side's next records taken past it, its records then late).
    q.push(Side::RIGHT, ev(3, 1003));
    assert_eq!(drain(&mut q, 100).len(), 3, "no new question per record");
    assert!(q.next(100).is_none());
    assert_eq!(q.end_offsets_wanted(), [true, false]);
    q.confirm_end_offset(Side::LEFT, Some(1));
    assert_eq!(q.next(100).map(side_offset), Some((Side::RIGHT, 3)));
    assert!(q.next(100).is_none(), "both sides empty");
    // A new wait (both sides emptied, then a lone record) waits max idle, then asks again.
    q.push(Side::RIGHT, ev(4, 2000));
    assert!(q.next(200).is_none());
    assert_eq!(q.end_offsets_wanted(), [false, false]);
    assert!(q.next(300).is_none());
    assert_eq!(q.end_offsets_wanted(), [true, false]);
}

#[test]
fn a_side_the_broker_does_not_answer_for_is_waited_for_and_asked_again_up_to_the_backlog_wait() {
    // Before, no answer let the task go on as if the side were caught up: on a busy machine a
    // 1 s ask can time out while the broker holds that side's records, which then come late.
    // (First supposed to be the cause of 51 late orders in CI; that was producer skew.)
    let mut q = left_asked_about();
    q.confirm_end_offset(Side::LEFT, None);
    assert!(q.next(1_100).is_none(), "no answer is not 'caught up'");
    assert_eq!(q.end_offsets_wanted(), [true, false], "asked again");
    q.confirm_end_offset(Side::LEFT, None);
    // The left records arrive: the wait was worth it, nothing is late.
    q.push(Side::LEFT, ev(1, 1001));
    assert_eq!(drain(&mut q, 1_200), [(Side::RIGHT, 0), (Side::LEFT, 1)]);
    // The left side empty again: the right records (1001, 1002) are within max idle of its
    // latest (1001), so no wall-clock wait, but an ask first.
    assert!(q.next(1_250).is_none());
    assert_eq!(q.end_offsets_wanted(), [true, false]);
}

#[test]
fn a_side_never_answered_for_is_given_up_after_the_backlog_wait_until_it_moves() {
    let mut q = left_asked_about();
    q.confirm_end_offset(Side::LEFT, None);
    // The clock of the first wait after the unanswered ask starts the bound.
    assert!(q.next(200).is_none());
    q.confirm_end_offset(Side::LEFT, None);
    assert!(q.next(200 + BACKLOG_WAIT_MS - 1).is_none());
    assert_eq!(q.end_offsets_wanted(), [true, false]);
    q.confirm_end_offset(Side::LEFT, None);
    let now = 200 + BACKLOG_WAIT_MS;
    assert_eq!(
        drain(&mut q, now).len(),
        3,
        "given up: the queued records go on"
    );
    // Later ones too, without asking, until the left side moves.
    q.push(Side::RIGHT, ev(5, 2000));
    assert!(q.next(now).is_none(), "a new wait: max idle first");
    assert_eq!(drain(&mut q, now + 100), [(Side::RIGHT, 5)]);
    assert_eq!(q.end_offsets_wanted(), [false, false]);
}

#[test]
fn an_offline_replay_asks_no_broker() {
    let mut q = TaskQueue::new(100);
    q.push(Side::RIGHT, ev(0, 0));
    assert!(q.next(0).is_none());
    assert_eq!(q.next(100).map(side_offset), Some((Side::RIGHT, 0)));
    assert_eq!(q.end_offsets_wanted(), [false, false]);
}

fn ev(offset: i64, ts: i64) -> Event {
    Event {
        topic: "t".into(),
        partition: 0,
        offset,
        timestamp: ts,
        key: Some(b"k".to_vec().into()),
        value: None,
        headers: Box::default(),
    }
}

fn drain(q: &mut TaskQueue, now: i64) -> Vec<(Side, i64)> {
    std::iter::from_fn(|| q.next(now))
        .map(side_offset)
        .collect()
}

fn side_offset((side, event): (Side, Event)) -> (Side, i64) {
    (side, event.offset)
}

/// A live task's queue (no replay on either side) idling at most `max_idle_ms`.
fn live(max_idle_ms: i64) -> TaskQueue {
    let mut q = TaskQueue::new(max_idle_ms);
    q.set_replay(Side::LEFT, 0, None);
    q.set_replay(Side::RIGHT, 0, None);
    q
}

#[test]
fn takes_the_older_record_while_both_sides_have_data() {
    let mut q = TaskQueue::new(100);
    q.push(Side::LEFT, ev(0, 10));
    q.push(Side::LEFT, ev(1, 30));
    q.push(Side::RIGHT, ev(0, 20));
    q.push(Side::RIGHT, ev(1, 40));
    assert_eq!(q.next(0).map(side_offset), Some((Side::LEFT, 0)));
    assert_eq!(q.next(0).map(side_offset), Some((Side::RIGHT, 0)));
    assert_eq!(q.next(0).map(side_offset), Some((Side::LEFT, 1)));
    // Right alone now: waits for the left side up to max idle.
    assert!(q.next(0).is_none());
    assert!(q.next(99).is_none());
    assert_eq!(q.next(100).map(side_offset), Some((Side::RIGHT, 1)));
}

#[test]
fn an_empty_side_with_records_on_the_broker_is_waited_for_beyond_max_idle() {
    let mut q = live(100);
    q.push(Side::LEFT, ev(0, 5_000));
    // The right partition holds offsets 0..3 on the broker, none fetched yet.
    q.set_end_offset(Side::RIGHT, Some(3));
    assert!(q.next(0).is_none());
    assert!(
        q.next(5_000).is_none(),
        "max idle must not apply to a known backlog"
    );
    q.push(Side::RIGHT, ev(0, 1_000));
    assert_eq!(q.next(5_001).map(side_offset), Some((Side::RIGHT, 0)));
    // Offsets 1 and 2 are awaited.
    assert!(q.next(5_102).is_none());
    q.push(Side::RIGHT, ev(1, 1_100));
    q.push(Side::RIGHT, ev(2, 1_200));
    assert_eq!(drain(&mut q, 5_102).len(), 2);
    // Caught up with what the broker reported: max idle applies again, then the broker is
    // asked whether that is still so.
    assert!(q.next(5_103).is_none());
    assert!(q.next(5_203).is_none());
    assert_eq!(q.end_offsets_wanted(), [false, true]);
    q.confirm_end_offset(Side::RIGHT, Some(3));
    assert_eq!(q.next(5_203).map(side_offset), Some((Side::LEFT, 0)));
}

#[test]
fn a_side_whose_last_offset_was_i64_max_has_no_backlog_at_that_end() {
    // offset + 1 wrapped to i64::MIN: an end offset of i64::MAX looked like a backlog
    // and the other side waited BACKLOG_WAIT_MS instead of max idle.
    let mut q = TaskQueue::new(0);
    q.set_end_offset(Side::LEFT, Some(i64::MAX));
    q.set_end_offset(Side::RIGHT, Some(1));
    q.push(Side::LEFT, ev(i64::MAX, 10));
    q.push(Side::RIGHT, ev(0, 20));
    assert_eq!(drain(&mut q, 0), [(Side::LEFT, i64::MAX)]);
    assert_eq!(q.end_offsets_wanted(), [true, false]);
    q.confirm_end_offset(Side::LEFT, Some(i64::MAX));
    assert_eq!(drain(&mut q, 0), [(Side::RIGHT, 0)]);
}

#[test]
fn an_empty_side_never_fetched_is_waited_for_until_its_end_offset_is_known() {
    let mut q = live(100);
    q.push(Side::LEFT, ev(0, 5_000));
    q.set_end_offset(Side::RIGHT, None);
    assert!(q.next(1_000).is_none());
    assert!(
        q.next(5_000).is_none(),
        "max idle must not apply before the first fetch"
    );
    // The first fetch response says the partition is empty: max idle applies (and the broker
    // says so too when asked).
    q.set_end_offset(Side::RIGHT, Some(0));
    assert!(q.next(5_000).is_none());
    q.confirm_end_offset(Side::RIGHT, Some(0));
    assert_eq!(q.next(5_000).map(side_offset), Some((Side::LEFT, 0)));
}

#[test]
fn a_cached_end_offset_older_than_the_assignment_is_not_trusted() {
    let mut q = live(100);
    q.push(Side::LEFT, ev(0, 5_000));
    // At assignment the broker said 2; the consumer's cache still says 0 from before.
    q.set_end_offset_floor(Side::RIGHT, 2);
    q.set_end_offset(Side::RIGHT, Some(0));
    assert!(q.next(0).is_none());
    assert!(
        q.next(5_000).is_none(),
        "unknown until a fetch response at or past the floor"
    );
    q.set_end_offset(Side::RIGHT, Some(2));
    assert!(q.next(5_001).is_none(), "offsets 0 and 1 are on the broker");
    q.push(Side::RIGHT, ev(0, 100));
    q.push(Side::RIGHT, ev(1, 200));
    assert_eq!(drain(&mut q, 5_001).len(), 2);
    assert!(q.next(5_101).is_none());
    q.confirm_end_offset(Side::RIGHT, Some(2));
    assert_eq!(q.next(5_101).map(side_offset), Some((Side::LEFT, 0)));
}

#[test]
fn a_backlog_that_never_arrives_is_waited_for_only_once() {
    let mut q = live(100);
    q.push(Side::LEFT, ev(0, 10));
    q.push(Side::LEFT, ev(1, 20));
    // A transaction marker at offset 0: the end offset says 1, no record will come.
    q.set_end_offset(Side::RIGHT, Some(1));
    assert!(q.next(0).is_none());
    assert!(q.next(BACKLOG_WAIT_MS - 1).is_none());
    assert_eq!(q.next(BACKLOG_WAIT_MS).map(|(_, e)| e.offset), Some(0));
    // Given up at this offset, and the side was waited for: the next record goes at once.
    assert_eq!(q.next(BACKLOG_WAIT_MS).map(|(_, e)| e.offset), Some(1));
    // Once the side moves on, a new backlog there is waited for again.
    q.push(Side::LEFT, ev(2, 30));
    q.push(Side::RIGHT, ev(1, 25));
    q.set_end_offset(Side::RIGHT, Some(5));
    assert_eq!(
        q.next(BACKLOG_WAIT_MS).map(side_offset),
        Some((Side::RIGHT, 1))
    );
    assert!(
        q.next(BACKLOG_WAIT_MS + 1).is_none(),
        "offsets 2..5 are on the broker"
    );
}

#[test]
fn the_result_does_not_depend_on_which_side_was_fetched_first() {
    let mut a = TaskQueue::new(1_000);
    let mut b = TaskQueue::new(1_000);
    let left = [ev(0, 5), ev(1, 15), ev(2, 25)];
    let right = [ev(0, 10), ev(1, 20), ev(2, 30)];
    for e in &left {
        a.push(Side::LEFT, e.clone());
    }
    for e in &right {
        a.push(Side::RIGHT, e.clone());
        b.push(Side::RIGHT, e.clone());
    }
    for e in &left {
        b.push(Side::LEFT, e.clone());
    }
    // Both drain in timestamp order until one side runs dry, then wait.
    assert_eq!(drain(&mut a, 0), drain(&mut b, 0));
}

#[test]
fn replay_records_of_both_sides_come_before_any_new_record() {
    let mut q = TaskQueue::new(0);
    q.set_replay(Side::LEFT, 0, Some(1));
    q.set_replay(Side::RIGHT, 0, Some(0));
    q.push(Side::LEFT, ev(0, 10));
    q.push(Side::LEFT, ev(1, 50));
    q.push(Side::LEFT, ev(2, 1)); // new, and older than everything
                                  // Right's replay record has not arrived: nothing may be taken yet, even with no idle wait.
    assert!(q.next(1_000).is_none());
    q.push(Side::RIGHT, ev(0, 20));
    assert_eq!(
        drain(&mut q, 1_000),
        [
            (Side::LEFT, 0),
            (Side::RIGHT, 0),
            (Side::LEFT, 1),
            (Side::LEFT, 2)
        ]
    );
    assert!(!q.is_replay(Side::LEFT, 2));
    assert!(q.is_replay(Side::LEFT, 1));
}

#[test]
fn the_time_records_waited_for_a_side_is_counted_when_each_wait_ends() {
    let mut q = TaskQueue::new(100);
    q.push(Side::LEFT, ev(0, 10));
    assert!(q.next(1_000).is_none(), "waits for the right side");
    assert!(q.next(1_050).is_none());
    assert_eq!(q.waited_ms(), 0, "still waiting");
    assert_eq!(q.next(1_100).map(|(s, _)| s), Some(Side::LEFT));
    assert_eq!(q.waited_ms(), 100);
    // Nothing queued is no wait.
    assert!(q.next(2_000).is_none());
    q.push(Side::LEFT, ev(1, 20));
    q.push(Side::RIGHT, ev(0, 30));
    assert_eq!(
        drain(&mut q, 5_000),
        [(Side::LEFT, 1)],
        "no wait while both have records"
    );
    assert_eq!(q.waited_ms(), 100);
    assert_eq!(drain(&mut q, 5_100), [(Side::RIGHT, 0)]);
    assert_eq!(q.waited_ms(), 200);
}

/// A task whose left side is caught up by the cache (its latest record, offset 0, stamped 1000)
/// and whose right side then has one record stamped `right_ts`.
fn left_caught_up_then_right_at(right_ts: i64) -> TaskQueue {
    let mut q = live(100);
    q.push(Side::LEFT, ev(0, 1000));
    q.push(Side::RIGHT, ev(0, right_ts));
    q.set_end_offset(Side::LEFT, Some(1));
    q.set_end_offset(Side::RIGHT, Some(1));
    assert_eq!(q.next(0).map(side_offset), Some((Side::LEFT, 0)));
    q
}

#[test]
fn a_record_within_max_idle_of_a_caught_up_sides_latest_goes_once_the_broker_says_so() {
    // Stamped 50 ms after the left side's latest: waiting could only bring left records written
    // at about the same time, which join all the same. No wall-clock wait, but the broker's word.
    let mut q = left_caught_up_then_right_at(1050);
    assert!(q.next(0).is_none());
    assert_eq!(q.end_offsets_wanted(), [true, false], "asked at once");
    q.confirm_end_offset(Side::LEFT, Some(1));
    assert_eq!(q.next(0).map(side_offset), Some((Side::RIGHT, 0)));
    // At max_idle after it, exactly, too.
    let mut q = left_caught_up_then_right_at(1100);
    assert!(q.next(0).is_none());
    q.confirm_end_offset(Side::LEFT, Some(1));
    assert_eq!(q.next(0).map(|(s, _)| s), Some(Side::RIGHT));
}

#[test]
fn a_record_within_max_idle_still_waits_for_records_the_broker_holds() {
    let mut q = left_caught_up_then_right_at(1050);
    assert!(q.next(0).is_none());
    q.confirm_end_offset(Side::LEFT, Some(2));
    assert!(q.next(5_000).is_none(), "a backlog is waited for");
    q.push(Side::LEFT, ev(1, 1020));
    assert_eq!(q.next(5_000).map(side_offset), Some((Side::LEFT, 1)));
}

#[test]
fn a_record_further_ahead_than_max_idle_of_the_empty_sides_latest_waits_max_idle() {
    // As a backlog replayed faster than real time: a few ms of producer skew between the
    // topics is more event time than max_idle, and the left side's records would be late.
    let mut q = left_caught_up_then_right_at(1101);
    assert!(q.next(0).is_none());
    assert_eq!(
        q.end_offsets_wanted(),
        [false, false],
        "not asked before max_idle"
    );
    assert!(q.next(99).is_none());
    assert!(q.next(100).is_none());
    assert_eq!(q.end_offsets_wanted(), [true, false]);
    q.confirm_end_offset(Side::LEFT, Some(1));
    assert_eq!(q.next(100).map(|(s, _)| s), Some(Side::RIGHT));
}

#[test]
fn a_side_no_record_came_from_yet_is_waited_for_max_idle() {
    let mut q = live(100);
    q.set_end_offset(Side::LEFT, Some(0));
    q.set_end_offset(Side::RIGHT, Some(1));
    q.push(Side::RIGHT, ev(0, 1000));
    assert!(q.next(0).is_none());
    assert_eq!(q.end_offsets_wanted(), [false, false]);
    assert!(q.next(100).is_none());
    q.confirm_end_offset(Side::LEFT, Some(0));
    assert_eq!(q.next(100).map(|(s, _)| s), Some(Side::RIGHT));
}

#[test]
fn the_idle_wait_is_skipped_only_short_of_the_joins_retention() {
    // max_idle 100 ms but window + grace 30 ms: a record 30 ms past the left side's latest
    // would make a left record stamped like that latest late; it waits max_idle.
    let mut q = left_caught_up_then_right_at(1030);
    q.set_retention(30);
    assert!(q.next(0).is_none());
    assert_eq!(q.end_offsets_wanted(), [false, false]);
    let mut q = left_caught_up_then_right_at(1029);
    q.set_retention(30);
    assert!(q.next(0).is_none());
    assert_eq!(q.end_offsets_wanted(), [true, false]);
}

#[test]
fn a_transaction_marker_at_a_sides_end_is_not_waited_for_once_the_position_passed_it() {
    // Left: a record at offset 0, then a commit marker at 1 (end offset 2).
    let mut q = live(100);
    q.push(Side::LEFT, ev(0, 0));
    q.set_end_offset(Side::LEFT, Some(2));
    q.set_end_offset(Side::RIGHT, Some(1));
    q.push(Side::RIGHT, ev(0, 1_000));
    assert_eq!(q.next(0).map(side_offset), Some((Side::LEFT, 0)));
    assert!(
        q.next(5_000).is_none(),
        "before the position is known the marker looks like a backlog"
    );
    // The poll served the marker: the position is past it.
    q.set_position(Side::LEFT, 2);
    assert!(q.next(5_050).is_none(), "max idle first");
    assert!(q.next(5_100).is_none(), "then the broker is asked");
    assert_eq!(q.end_offsets_wanted(), [true, false]);
    q.confirm_end_offset(Side::LEFT, Some(2));
    assert_eq!(q.next(5_100).map(side_offset), Some((Side::RIGHT, 0)));
}

#[test]
fn a_position_behind_the_next_offset_changes_nothing() {
    let mut q = live(100);
    q.push(Side::LEFT, ev(0, 0));
    q.push(Side::LEFT, ev(1, 10));
    q.push(Side::RIGHT, ev(0, 1_000));
    // The broker holds offset 2, not fetched: a position of 1 or 2 (an older report, or the
    // records pushed) must not hide it.
    q.set_end_offset(Side::LEFT, Some(3));
    q.set_end_offset(Side::RIGHT, Some(1));
    q.set_position(Side::LEFT, 1);
    q.set_position(Side::LEFT, 2);
    assert_eq!(drain(&mut q, 0), [(Side::LEFT, 0), (Side::LEFT, 1)]);
    assert!(q.next(5_000).is_none());
    assert!(q.next(29_000).is_none(), "offset 2 is waited for");
    assert_eq!(q.end_offsets_wanted(), [false, false]);
}

#[test]
fn a_read_committed_side_with_an_open_transaction_is_waited_for() {
    // The consumer reads read_committed: its fetches stop at the last stable offset, the first
    // record of a transaction still open (offset 1 here), so its cache says caught up. The
    // broker is asked its log end (kafka/intake.rs asks read_uncommitted): the transaction's
    // records (1 and 2) are there, and waited for until it commits.
    let mut q = left_asked_about();
    q.confirm_end_offset(Side::LEFT, Some(3));
    assert!(
        q.next(5_000).is_none(),
        "the open transaction is waited for"
    );
    // It committed: its records come, the marker (offset 3) after them.
    q.push(Side::LEFT, ev(1, 500));
    q.push(Side::LEFT, ev(2, 1_500));
    q.set_position(Side::LEFT, 4);
    assert_eq!(
        drain(&mut q, 5_000),
        [
            (Side::LEFT, 1),
            (Side::RIGHT, 0),
            (Side::RIGHT, 1),
            (Side::RIGHT, 2)
        ],
        "in timestamp order: none of the transaction's records is late"
    );
}

mod three;
