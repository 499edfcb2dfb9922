//! Runs one round of a host's tasks on several actions (plugin instances) at once, one thread per
//! action. In a parallel round the workers take tasks from a shared list, largest queue first,
//! each as soon as it is done with the last: tasks' work differs a lot from round to round (a
//! fetch brings one partition's records at a time, and a task may wait for its other side), and
//! a fixed deal left one worker idle while another ran. A task runs on one thread per round, so
//! its records stay in order; it may run on another worker (plugin instance) the next round. A
//! small round runs on the calling thread, dealt by position. A task waiting to retry a failed
//! call holds no worker: its `run` returns at once until its backoff passed (it parked). Pure: no
//! Kafka, no plugin runtime.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::{Action, Batch, PartitionTask};

/// Below this many queued records in a round, the workers take their turns on the calling thread:
/// starting a thread costs tens of microseconds, more than a few plugin calls.
pub const MIN_PARALLEL_RECORDS: usize = 64;

/// Runs every task in `tasks` (ordered by partition) once, and returns each task's batch in the
/// same order.
pub fn run_round<A: Action + Send>(
    tasks: Vec<&mut PartitionTask>,
    actions: &mut [A],
    now_ms: i64,
) -> Vec<(i32, Batch)> {
    run_round_beside(tasks, actions, now_ms, None)
}

/// Work for the calling thread while the workers run a round: called with a probe that says
/// whether any worker is still running; it should return soon after the probe says none is.
pub type Beside<'a> = &'a mut dyn FnMut(&dyn Fn() -> bool);

/// [`run_round`], and when the round is run in parallel, every worker runs on a thread of its
/// own and the calling thread runs `beside` meanwhile (the run loop polls the next records: the
/// plugin calls then overlap the Kafka side instead of waiting for it). A round small enough to
/// run on the calling thread runs there, and `beside` is not called.
pub fn run_round_beside<A: Action + Send>(
    tasks: Vec<&mut PartitionTask>,
    actions: &mut [A],
    now_ms: i64,
    beside: Option<Beside<'_>>,
) -> Vec<(i32, Batch)> {
    assert!(!actions.is_empty(), "a host has at least one worker");
    let workers = actions.len().min(tasks.len()).max(1);
    let queued: usize = tasks.iter().map(|t| t.queued()).sum();
    let mut results: Vec<(usize, i32, Batch)> = Vec::new();
    if queued < MIN_PARALLEL_RECORDS {
        // Dealt by position, one worker after the other on this thread.
        let mut groups: Vec<Vec<(usize, &mut PartitionTask)>> =
            (0..workers).map(|_| Vec::new()).collect();
        for (i, task) in tasks.into_iter().enumerate() {
            groups[i % workers].push((i, task));
        }
        for (group, action) in groups.into_iter().zip(actions.iter_mut()) {
            for (i, task) in group {
                results.push((i, task.partition, task.run(now_ms, action)));
            }
        }
    } else {
        let mut list: Vec<(usize, &mut PartitionTask)> = tasks.into_iter().enumerate().collect();
        // Taken from the end: the largest queue first, ties by position.
        list.sort_by_key(|(i, t)| (t.queued(), std::cmp::Reverse(*i)));
        let list = Mutex::new(list);
        let done = Mutex::new(Vec::new());
        let running = AtomicUsize::new(workers);
        let work = |action: &mut A| {
            // Counted down even if a task panics, so `beside` does not wait on.
            struct Finished<'a>(&'a AtomicUsize);
            impl Drop for Finished<'_> {
                fn drop(&mut self) {
                    self.0.fetch_sub(1, Ordering::Release);
                }
            }
            let _finished = Finished(&running);
            let mut mine = Vec::new();
            loop {
                let next = list.lock().unwrap_or_else(|p| p.into_inner()).pop();
                let Some((i, task)) = next else { break };
                mine.push((i, task.partition, task.run(now_ms, action)));
            }
            done.lock().unwrap_or_else(|p| p.into_inner()).extend(mine);
        };
        let work = &work;
        let mut actions = actions[..workers].iter_mut();
        std::thread::scope(|scope| {
            let handles: Vec<_> = match beside {
                Some(beside) => {
                    let handles: Vec<_> = actions
                        .map(|action| scope.spawn(move || work(action)))
                        .collect();
                    beside(&|| running.load(Ordering::Acquire) > 0);
                    handles
                }
                None => {
                    let first = actions.next().expect("at least one worker");
                    let handles: Vec<_> = actions
                        .map(|action| scope.spawn(move || work(action)))
                        .collect();
                    work(first);
                    handles
                }
            };
            for handle in handles {
                // A panic in a task is a bug; carry it to the host as if it ran here.
                handle
                    .join()
                    .unwrap_or_else(|p| std::panic::resume_unwind(p));
            }
        });
        results = done.into_inner().unwrap_or_else(|p| p.into_inner());
    }
    results.sort_by_key(|(i, _, _)| *i);
    results
        .into_iter()
        .map(|(_, p, batch)| (p, batch))
        .collect()
}

#[cfg(test)]
mod tests;
