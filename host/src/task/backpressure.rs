//! Backpressure: how much of `memory.queue_bytes` a task's queue may hold before the I/O layer
//! pauses its partitions, and when they resume. Pure: the intake (kafka/intake.rs) pauses and
//! resumes.
//!
//! A sixteenth of the budget goes to librdkafka's prefetch (`queued.max.messages.kbytes`, which
//! also caps `fetch.max.bytes`), an eighth to the records the run loop polls while the workers
//! run a round (handed to the tasks after it); the rest is shared by the tasks, an equal part per
//! side (topic) of each. A side is paused
//! past its high mark and resumed at half of it, not at empty: the records still queued keep the
//! task busy while the first fetch after the resume travels, so a paused task does not stall.
//! Each side has its own marks: pausing the side that is ahead leaves the other fetching, which
//! is what a timestamp-ordered task needs to catch it up.

/// The share of the budget librdkafka's prefetch gets, in bytes. It was a quarter, and the
/// process's peak RSS said it cost several times that (`make bench-join`, 100-byte values, the
/// 64 MiB default: 142 MiB with a 16 MiB prefetch, 105 MiB with 4 MiB, 86 MiB with 2 MiB, at
/// records/s within the runs' spread; BENCHMARKS.md): a smaller prefetch fetches no slower
/// while the tasks hold a backlog.
pub fn prefetch_bytes(queue_bytes: u64) -> u64 {
    queue_bytes / 16
}

/// What librdkafka is told to prefetch (`queued.max.messages.kbytes`): half the share, as it
/// counts the records' keys and values only and holds about twice that — a fetch response
/// beyond the limit, and per record its own bookkeeping, larger than a small record.
pub fn prefetch_limit(queue_bytes: u64) -> u64 {
    prefetch_bytes(queue_bytes) / 2
}

/// The share of the budget for records polled during a round, in bytes.
pub fn polled_ahead_bytes(queue_bytes: u64) -> u64 {
    queue_bytes / 8
}

/// Queued bytes per side of one task at which its partition pauses (`high`) and resumes (`low`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueMarks {
    pub high: usize,
    pub low: usize,
}

impl QueueMarks {
    /// The marks of each side of `tasks` tasks of `sides` topics sharing `queue_bytes`. (Halving
    /// the share whatever the number of topics, as before N-way joins, let a three-topic host
    /// queue 1.5 × its share: `make bench-join-3`'s queues peaked at 67 MB of a 52 MiB share.)
    pub fn new(queue_bytes: u64, tasks: usize, sides: usize) -> Self {
        let for_tasks = queue_bytes - prefetch_bytes(queue_bytes) - polled_ahead_bytes(queue_bytes);
        let per_side = for_tasks / sides.max(1) as u64 / tasks.max(1) as u64;
        let high = usize::try_from(per_side).unwrap_or(usize::MAX).max(1);
        QueueMarks {
            high,
            low: high / 2,
        }
    }

    /// Whether a side with `queued` bytes must pause now (`paused`: it is already).
    pub fn must_pause(&self, queued: usize, paused: bool) -> bool {
        !paused && queued > self.high
    }

    /// Whether a side paused for backpressure with `queued` bytes may resume.
    pub fn may_resume(&self, queued: usize) -> bool {
        queued <= self.low
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_shared_by_prefetch_and_both_sides_of_every_task() {
        let m = QueueMarks::new(64 << 20, 4, 2);
        // 4 MiB prefetch (librdkafka told 2), 8 MiB polled ahead, 52 MiB for the queues, 4
        // tasks, 2 sides: 6.5 MiB.
        assert_eq!(prefetch_bytes(64 << 20), 4 << 20);
        assert_eq!(prefetch_limit(64 << 20), 2 << 20);
        assert_eq!(polled_ahead_bytes(64 << 20), 8 << 20);
        assert_eq!(m.high, 13 << 19);
        assert_eq!(m.low, 13 << 18);
        // No task yet: the whole queue share as one task's.
        assert_eq!(QueueMarks::new(64 << 20, 0, 2).high, 26 << 20);
    }

    #[test]
    fn every_side_of_an_n_way_task_gets_an_equal_part_and_together_no_more_than_the_share() {
        let share = (64u64 << 20) - prefetch_bytes(64 << 20) - polled_ahead_bytes(64 << 20);
        for sides in 2..=8 {
            let m = QueueMarks::new(64 << 20, 6, sides);
            let all = m.high as u64 * 6 * sides as u64;
            assert!(
                all <= share && share - all < 6 * sides as u64,
                "{sides}: {all}"
            );
        }
    }

    #[test]
    fn a_side_pauses_past_its_high_mark_once_and_resumes_at_its_low_mark() {
        let m = QueueMarks {
            high: 300,
            low: 150,
        };
        assert!(!m.must_pause(300, false), "at the high mark");
        assert!(m.must_pause(301, false));
        assert!(!m.must_pause(301, true), "paused already");
        assert!(!m.may_resume(151));
        assert!(m.may_resume(150));
    }
}
