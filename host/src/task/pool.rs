//! Runs one round of a host's tasks on several actions (plugin instances) at once, one thread per
//! action. Tasks are dealt to actions by their position among the host's tasks, so a task keeps
//! its action (and the plugin instance's memory) until the next rebalance, and its records stay in
//! order. Pure: no Kafka, no plugin runtime.

use std::time::Duration;

use super::{Action, Batch, PartitionTask};

/// Below this many queued records in a round, the workers take their turns on the calling thread:
/// starting a thread costs tens of microseconds, more than a few plugin calls.
pub const MIN_PARALLEL_RECORDS: usize = 64;

/// Runs every task in `tasks` (ordered by partition) once, and returns each task's batch in the
/// same order. `sleep` waits between retries of a failed call.
pub fn run_round<A: Action + Send>(
    tasks: Vec<&mut PartitionTask>,
    actions: &mut [A],
    now_ms: i64,
    sleep: &(dyn Fn(Duration) + Sync),
) -> Vec<(i32, Batch)> {
    assert!(!actions.is_empty(), "a host has at least one worker");
    let workers = actions.len().min(tasks.len()).max(1);
    let mut groups: Vec<Vec<(usize, &mut PartitionTask)>> =
        (0..workers).map(|_| Vec::new()).collect();
    for (i, task) in tasks.into_iter().enumerate() {
        groups[i % workers].push((i, task));
    }
    let queued: usize = groups.iter().flatten().map(|(_, t)| t.queued()).sum();
    let run_group = |group: Vec<(usize, &mut PartitionTask)>, action: &mut A| {
        let mut sleep = |d| sleep(d);
        group
            .into_iter()
            .map(|(i, task)| (i, task.partition, task.run(now_ms, action, &mut sleep)))
            .collect::<Vec<_>>()
    };
    let run_group = &run_group;
    let mut results = Vec::new();
    if queued < MIN_PARALLEL_RECORDS {
        // The same task-to-worker deal, one group after the other on this thread.
        for (group, action) in groups.into_iter().zip(actions.iter_mut()) {
            results.extend(run_group(group, action));
        }
    } else {
        let mut groups = groups.into_iter();
        let (first, others) = actions.split_first_mut().expect("checked non-empty");
        let own = groups.next().expect("at least one group");
        std::thread::scope(|scope| {
            let handles: Vec<_> = groups
                .zip(others.iter_mut())
                .map(|(group, action)| scope.spawn(move || run_group(group, action)))
                .collect();
            results.extend(run_group(own, first));
            for handle in handles {
                // A panic in a task is a bug; carry it to the host as if it ran here.
                results.extend(
                    handle
                        .join()
                        .unwrap_or_else(|p| std::panic::resume_unwind(p)),
                );
            }
        });
    }
    results.sort_by_key(|(i, _, _)| *i);
    results
        .into_iter()
        .map(|(_, p, batch)| (p, batch))
        .collect()
}

#[cfg(test)]
mod tests;
