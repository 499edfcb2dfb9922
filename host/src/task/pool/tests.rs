use std::thread::ThreadId;
use std::time::{Duration, Instant};

use super::*;
use crate::config::{FailurePolicy, RecordPolicy, TombstonePolicy};
use crate::event::{Event, OutputRecord, Side};
use crate::join::{JoinKind, JoinWindow};
use crate::task::tests::FRESH;
use crate::task::{ActionFailure, Emit, TaskPolicy};

/// Answers every match with "left+right" offsets (or fails it, when `fails` or on a key starting
/// with "bad"), and notes which thread it ran on and the key.
struct Echo {
    threads: Vec<ThreadId>,
    keys: Vec<String>,
    fails: bool,
    /// How long each call takes.
    pause: Duration,
}

impl Action for Echo {
    fn on_match(
        &mut self,
        key: &[u8],
        left: &Event,
        right: &Event,
    ) -> Result<Vec<OutputRecord>, ActionFailure> {
        self.threads.push(std::thread::current().id());
        self.keys.push(String::from_utf8_lossy(key).into_owned());
        std::thread::sleep(self.pause);
        if self.fails || key.starts_with(b"bad") {
            return Err(ActionFailure {
                kind: crate::event::FailureKind::Crash,
                message: "boom".into(),
            });
        }
        Ok(vec![OutputRecord {
            topic: None,
            key: Some(key.to_vec()),
            value: Some(format!("{}+{}", left.offset, right.offset).into_bytes()),
            headers: vec![],
        }])
    }

    fn on_expire(
        &mut self,
        _: &[u8],
        _: &Event,
        _: Side,
    ) -> Result<Vec<OutputRecord>, ActionFailure> {
        Ok(vec![])
    }

    fn version(&self) -> String {
        "echo@1".into()
    }
}

fn echo() -> Echo {
    Echo {
        threads: Vec::new(),
        keys: Vec::new(),
        fails: false,
        pause: Duration::ZERO,
    }
}

fn policy() -> TaskPolicy {
    TaskPolicy {
        window: JoinWindow {
            window_ms: 1_000,
            grace_ms: 0,
        },
        kind: JoinKind::Inner,
        max_idle_ms: 0,
        max_future_ms: 3_600_000,
        late: RecordPolicy::DeadLetter,
        null_keys: RecordPolicy::DeadLetter,
        tombstones: TombstonePolicy::Drop,
        failure: FailurePolicy::DeadLetter,
        retries: 0,
        backoff: Duration::ZERO,
        outputs: Default::default(),
        table: None,
    }
}

/// `tasks` tasks, each with `pairs` matching left/right pairs queued.
fn tasks(tasks: i32, pairs: i64) -> Vec<PartitionTask> {
    (0..tasks)
        .map(|p| {
            let mut task = PartitionTask::new(p, policy(), FRESH);
            push_pairs(&mut task, 0..pairs, "k");
            task
        })
        .collect()
}

/// Matching left/right pairs at `offsets`, keyed `<prefix><offset>`.
fn push_pairs(task: &mut PartitionTask, offsets: std::ops::Range<i64>, prefix: &str) {
    for i in offsets {
        for side in [Side::LEFT, Side::RIGHT] {
            task.push(
                side,
                Event {
                    topic: format!("{side:?}").into(),
                    partition: task.partition,
                    offset: i,
                    timestamp: 1_000 + i,
                    key: Some(format!("{prefix}{i}").into_bytes().into()),
                    value: Some(b"v".to_vec().into()),
                    headers: Box::default(),
                },
            );
        }
    }
}

/// Every emit of a round as text, in the order returned.
fn outputs(batches: &[(i32, Batch)]) -> Vec<String> {
    batches
        .iter()
        .flat_map(|(p, b)| {
            b.emits.iter().map(move |e| match e {
                Emit::Output { record: r, .. } => format!(
                    "{p}: {}",
                    String::from_utf8_lossy(r.value.as_deref().unwrap())
                ),
                Emit::DeadLetter(d) => format!("{p}: dead letter {:?}", d.reason),
            })
        })
        .collect()
}

#[test]
fn several_workers_give_the_same_batches_in_the_same_order_as_one() {
    let mut alone = tasks(6, 50);
    let mut one = [echo()];
    let want = run_round(alone.iter_mut().collect(), &mut one, 0);

    let mut shared = tasks(6, 50);
    let mut three = [echo(), echo(), echo()];
    let got = run_round(shared.iter_mut().collect(), &mut three, 0);

    assert_eq!(
        got.iter().map(|(p, _)| *p).collect::<Vec<_>>(),
        [0, 1, 2, 3, 4, 5]
    );
    assert_eq!(outputs(&got), outputs(&want));
    assert_eq!(outputs(&got).len(), 6 * 50);
    // Workers take whole tasks from a shared list: every call of a worker on one thread, each
    // worker's thread its own, the first worker on the calling thread. Which worker ran which
    // task depends on timing; all 300 calls were made once.
    let calls: usize = three.iter().map(|a| a.threads.len()).sum();
    assert_eq!(calls, 6 * 50);
    let mut threads = std::collections::HashSet::new();
    for action in &three {
        let mine: std::collections::HashSet<ThreadId> = action.threads.iter().copied().collect();
        assert!(mine.len() <= 1, "a worker ran on one thread");
        assert!(action.threads.len() % 50 == 0, "whole tasks");
        threads.extend(mine);
    }
    let busy = three.iter().filter(|a| !a.threads.is_empty()).count();
    assert_eq!(threads.len(), busy, "each worker on a thread of its own");
    if let Some(t) = three[0].threads.first() {
        assert_eq!(*t, std::thread::current().id());
    }
}

#[test]
fn a_worker_free_early_takes_the_next_task() {
    // One long task (40 calls of 5 ms) and five short ones (2 calls each) on two workers: the
    // long one is taken first, and the other worker takes every short one meanwhile. Dealt by
    // position, the long task's worker would have had two short ones too.
    let mut list = tasks(6, 2);
    list[0] = tasks(1, 40).pop().unwrap();
    let slow = || Echo {
        pause: Duration::from_millis(5),
        ..echo()
    };
    let mut two = [slow(), slow()];
    let got = run_round(list.iter_mut().collect(), &mut two, 0);
    assert_eq!(outputs(&got).len(), 40 + 5 * 2);
    let mut counts: Vec<usize> = two.iter().map(|a| a.threads.len()).collect();
    counts.sort_unstable();
    assert_eq!(
        counts,
        [10, 40],
        "one worker took the long task, the other the rest"
    );
}

#[test]
fn a_small_round_keeps_the_deal_but_runs_on_the_calling_thread() {
    let mut few = tasks(4, 2);
    let mut two = [echo(), echo()];
    let got = run_round(few.iter_mut().collect(), &mut two, 0);
    assert_eq!(outputs(&got).len(), 4 * 2);
    // Tasks 0 and 2 on the first worker, 1 and 3 on the second, as in a large round.
    assert_eq!(two[0].threads.len(), 2 * 2);
    assert_eq!(two[1].threads.len(), 2 * 2);
    let here = std::thread::current().id();
    assert!(two.iter().flat_map(|a| &a.threads).all(|t| *t == here));
}

#[test]
fn more_workers_than_tasks_leaves_the_extra_ones_idle() {
    let mut one_task = tasks(1, 100);
    let mut four = [echo(), echo(), echo(), echo()];
    let got = run_round(one_task.iter_mut().collect(), &mut four, 0);
    assert_eq!(outputs(&got).len(), 100);
    assert_eq!(four[0].threads.len(), 100);
    assert!(four[1..].iter().all(|a| a.threads.is_empty()));
}

#[test]
fn a_task_that_backs_off_holds_no_worker_and_the_other_tasks_go_on() {
    // Task 0's first pair fails on every attempt (retries 5, backoff 1 s: 31 s of waiting, which
    // used to be slept on a worker while the round, and every other task, waited).
    let mut list = tasks(2, 0);
    push_pairs(&mut list[0], 0..1, "bad");
    push_pairs(&mut list[0], 1..40, "k");
    push_pairs(&mut list[1], 0..40, "k");
    for t in &mut list {
        t.policy.retries = 5;
        t.policy.backoff = Duration::from_secs(1);
    }
    let mut two = [echo(), echo()];
    let bad_calls = |two: &[Echo; 2]| {
        two.iter()
            .flat_map(|a| &a.keys)
            .filter(|k| k.starts_with("bad"))
            .count()
    };
    let started = Instant::now();
    let got = run_round(list.iter_mut().collect(), &mut two, 0);
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        outputs(&got[1..]).len(),
        40,
        "the other task did all its records"
    );
    assert!(got[0].1.emits.is_empty(), "{:?}", outputs(&got[..1]));
    assert_eq!(bad_calls(&two), 1);
    let until = list[0].parked_until().expect("task 0 parked");
    assert!((1_000..1_100).contains(&until), "{until}");
    assert_eq!(list[1].parked_until(), None);
    for (task, (_, batch)) in list.iter_mut().zip(got) {
        task.acknowledge(batch);
    }

    // Meanwhile the other task takes new records at once; the parked one makes no call.
    let mut now = 500;
    push_pairs(&mut list[1], 40..50, "k");
    let got = run_round(list.iter_mut().collect(), &mut two, now);
    assert_eq!(outputs(&got).len(), 10);
    assert_eq!(bad_calls(&two), 1);

    // Each retry once its backoff passed, on a later round; the last attempt dead-letters.
    let mut waits = Vec::new();
    let mut last = Vec::new();
    let mut previous = 0;
    while let Some(until) = list[0].parked_until() {
        assert!(until >= now, "the waits add up");
        waits.push((until - previous + 50) / 1000);
        previous = until;
        now = until;
        let started = Instant::now();
        last = outputs(&run_round(list.iter_mut().collect(), &mut two, now));
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "{:?}",
            started.elapsed()
        );
    }
    assert_eq!(waits, [1, 2, 4, 8, 16]);
    assert_eq!(bad_calls(&two), 6);
    assert_eq!(last.len(), 40, "{last:?}");
    assert!(last[0].starts_with("0: dead letter Failed"), "{last:?}");
    assert!(last[1..]
        .iter()
        .all(|o| o.starts_with("0: ") && !o.contains("dead letter")));
    assert_eq!(
        (
            list[0].counters.failed_calls,
            list[0].counters.dead_lettered,
            list[0].counters.matches
        ),
        (6, 2, 40)
    );
}

#[test]
fn beside_runs_on_the_calling_thread_while_every_group_runs_on_its_own() {
    let mut alone = tasks(6, 50);
    let mut one = [echo()];
    let want = run_round(alone.iter_mut().collect(), &mut one, 0);

    let mut shared = tasks(6, 50);
    let mut two = [echo(), echo()];
    let here = std::thread::current().id();
    let (mut called, mut ended_idle) = (false, false);
    let mut beside = |running: &dyn Fn() -> bool| {
        called = true;
        while running() {
            std::thread::yield_now();
        }
        ended_idle = !running();
    };
    let got = run_round_beside(shared.iter_mut().collect(), &mut two, 0, Some(&mut beside));
    assert_eq!(outputs(&got), outputs(&want));
    assert!(
        called && ended_idle,
        "beside ran, and returned once no worker ran"
    );
    assert!(
        two.iter().flat_map(|a| &a.threads).all(|t| *t != here),
        "no group ran on the calling thread"
    );
    for action in &two {
        let mine: std::collections::HashSet<ThreadId> = action.threads.iter().copied().collect();
        assert!(mine.len() <= 1, "a worker ran on one thread");
    }

    // A small round runs here and never calls beside.
    let mut few = tasks(2, 2);
    let mut called = false;
    let mut beside = |_: &dyn Fn() -> bool| called = true;
    run_round_beside(few.iter_mut().collect(), &mut two, 0, Some(&mut beside));
    assert!(!called);
}
