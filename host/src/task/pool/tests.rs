use std::sync::Mutex;
use std::thread::ThreadId;

use super::*;
use crate::config::{FailurePolicy, RecordPolicy, TombstonePolicy};
use crate::event::{Event, OutputRecord, Side};
use crate::join::{JoinKind, JoinWindow};
use crate::task::tests::FRESH;
use crate::task::{ActionFailure, Emit, TaskPolicy};

/// Answers every match with "left+right" offsets (or fails it, when `fails`), and notes which
/// thread it ran on.
struct Echo {
    threads: Vec<ThreadId>,
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
        std::thread::sleep(self.pause);
        if self.fails {
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
    }
}

/// `tasks` tasks, each with `pairs` matching left/right pairs queued.
fn tasks(tasks: i32, pairs: i64) -> Vec<PartitionTask> {
    (0..tasks)
        .map(|p| {
            let mut task = PartitionTask::new(p, policy(), FRESH);
            for i in 0..pairs {
                for side in [Side::Left, Side::Right] {
                    task.push(
                        side,
                        Event {
                            topic: format!("{side:?}").into(),
                            partition: p,
                            offset: i,
                            timestamp: 1_000 + i,
                            key: Some(format!("k{i}").into_bytes().into()),
                            value: Some(b"v".to_vec().into()),
                            headers: Box::default(),
                        },
                    );
                }
            }
            task
        })
        .collect()
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

fn no_sleep(_: Duration) {}

#[test]
fn several_workers_give_the_same_batches_in_the_same_order_as_one() {
    let mut alone = tasks(6, 50);
    let mut one = [echo()];
    let want = run_round(alone.iter_mut().collect(), &mut one, 0, &no_sleep);

    let mut shared = tasks(6, 50);
    let mut three = [echo(), echo(), echo()];
    let got = run_round(shared.iter_mut().collect(), &mut three, 0, &no_sleep);

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
    let got = run_round(list.iter_mut().collect(), &mut two, 0, &no_sleep);
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
    let got = run_round(few.iter_mut().collect(), &mut two, 0, &no_sleep);
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
    let got = run_round(one_task.iter_mut().collect(), &mut four, 0, &no_sleep);
    assert_eq!(outputs(&got).len(), 100);
    assert_eq!(four[0].threads.len(), 100);
    assert!(four[1..].iter().all(|a| a.threads.is_empty()));
}

#[test]
fn retries_sleep_through_the_given_function_on_every_thread() {
    let slept = Mutex::new(0);
    let sleep = |_: Duration| *slept.lock().unwrap() += 1;
    let mut two_tasks = tasks(2, 40);
    for t in &mut two_tasks {
        t.policy.retries = 1;
    }
    let failing = || Echo {
        fails: true,
        ..echo()
    };
    let mut two = [failing(), failing()];
    let got = run_round(two_tasks.iter_mut().collect(), &mut two, 0, &sleep);
    assert_eq!(*slept.lock().unwrap(), 2 * 40, "one retry per failed match");
    assert!(outputs(&got).iter().all(|o| o.contains("dead letter")));
    assert_eq!(outputs(&got).len(), 2 * 40);
}

#[test]
fn beside_runs_on_the_calling_thread_while_every_group_runs_on_its_own() {
    let mut alone = tasks(6, 50);
    let mut one = [echo()];
    let want = run_round(alone.iter_mut().collect(), &mut one, 0, &no_sleep);

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
    let got = run_round_beside(
        shared.iter_mut().collect(),
        &mut two,
        0,
        &no_sleep,
        Some(&mut beside),
    );
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
    run_round_beside(
        few.iter_mut().collect(),
        &mut two,
        0,
        &no_sleep,
        Some(&mut beside),
    );
    assert!(!called);
}
