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
}

impl Action for Echo {
    fn on_match(
        &mut self,
        key: &[u8],
        left: &Event,
        right: &Event,
    ) -> Result<Vec<OutputRecord>, ActionFailure> {
        self.threads.push(std::thread::current().id());
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
    // Tasks 0 and 3 ran on the first worker, 1 and 4 on the second, 2 and 5 on the third.
    for (w, action) in three.iter().enumerate() {
        assert_eq!(action.threads.len(), 2 * 50, "worker {w}");
    }
    let distinct: std::collections::HashSet<ThreadId> =
        three.iter().map(|a| a.threads[0]).collect();
    assert_eq!(distinct.len(), 3, "each worker ran on a thread of its own");
    assert_eq!(three[0].threads[0], std::thread::current().id());
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
