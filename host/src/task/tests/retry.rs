//! A failed call: retried after a doubling backoff while the task parks, holding back its record
//! and what came after it.

use super::*;

#[test]
fn a_failing_call_is_retried_with_backoff_then_dead_lettered_and_the_rest_goes_on() {
    let mut task = PartitionTask::new(0, policy(), FRESH);
    let mut plugin = FakePlugin::default();
    task.push(Side::LEFT, ev(Side::LEFT, 0, "bad1", 100));
    task.push(Side::RIGHT, ev(Side::RIGHT, 0, "bad1", 101));
    task.push(Side::LEFT, ev(Side::LEFT, 1, "ok", 102));
    task.push(Side::RIGHT, ev(Side::RIGHT, 1, "ok", 103));
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
            .iter()
            .map(|p| (p.offset, p.processed_through))
            .collect::<Vec<_>>(),
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
            .iter()
            .map(|p| (p.offset, p.processed_through))
            .collect::<Vec<_>>(),
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
    task.push(Side::LEFT, ev(Side::LEFT, 0, "bad", 100));
    task.push(Side::RIGHT, ev(Side::RIGHT, 0, "bad", 101));
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
    task.push(Side::LEFT, ev(Side::LEFT, 0, "k", 100));
    task.push(Side::LEFT, ev(Side::LEFT, 1, "k", 101));
    task.push(Side::RIGHT, ev(Side::RIGHT, 0, "k", 102));
    task.push(Side::RIGHT, ev(Side::RIGHT, 1, "after", 103));
    task.push(Side::LEFT, ev(Side::LEFT, 2, "after", 104));
    let batch = task.run(0, &mut plugin);
    // L0's output waits with its record: a record is produced whole.
    assert!(batch.emits.is_empty(), "{:?}", values(&batch));
    task.acknowledge(batch);
    // L0 and L1 are processed; R0 is not, and the commit stays at it.
    assert_eq!(
        task.commit_points()
            .iter()
            .map(|p| (p.offset, p.processed_through))
            .collect::<Vec<_>>(),
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
    assert_eq!(
        points
            .iter()
            .map(|p| p.processed_through)
            .collect::<Vec<_>>(),
        [Some(2), Some(1)]
    );
}
