//! Calls on outcomes: expiries, and calls made in batches acting exactly as one by one.

use super::*;
use crate::event::Call;

#[test]
fn expiries_are_acted_on_once_the_window_closes() {
    let mut task = PartitionTask::new(0, policy(), FRESH);
    let mut plugin = FakePlugin::default();
    task.push(Side::LEFT, ev(Side::LEFT, 0, "unpaid", 100));
    task.push(Side::RIGHT, ev(Side::RIGHT, 0, "other", 111));
    let batch = task.run(0, &mut plugin);
    assert_eq!(values(&batch), ["out unpaid"]);
    assert_eq!(plugin.calls, ["expire unpaid 0"]);
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
                    Call::MatchN { key, events } => self.inner.on_match_n(key, events),
                    Call::ExpireN {
                        key,
                        event,
                        partners,
                    } => self.inner.on_expire_n(key, event, partners),
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
        task.push(Side::LEFT, ev(Side::LEFT, i, key, ts));
        task.push(Side::RIGHT, ev(Side::RIGHT, i, key, ts + 1));
        ts += 2;
    }
    let mut null_key = ev(Side::LEFT, keys.len() as i64, "", ts);
    null_key.key = None;
    task.push(Side::LEFT, null_key);
    // Unmatched: expire once the right side moves 10 ms past them, in a run of expiries.
    for (j, key) in ["e1", "e2", "e3"].iter().enumerate() {
        task.push(
            Side::LEFT,
            ev(Side::LEFT, keys.len() as i64 + 1 + j as i64, key, ts + 1),
        );
    }
    task.push(Side::RIGHT, ev(Side::RIGHT, keys.len() as i64, "late", 50));
    task.push(
        Side::RIGHT,
        ev(Side::RIGHT, keys.len() as i64 + 1, "k9", ts + 40),
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
        .iter()
        .map(|p| (p.offset, p.processed_through))
        .collect::<Vec<_>>()
        .try_into()
        .expect("two sides");
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
