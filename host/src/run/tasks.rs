//! The tasks this host runs, by partition number, as the intake (kafka/intake.rs) feeds them:
//! started at their committed points with their share of `memory.state_bytes` and this host's
//! spill directory, stopped with their counts kept so that the exported totals never go down.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::event::Side;
use crate::join::{CommitPoint, SpillDir};
use crate::kafka::intake::Tasks;
use crate::kafka::source::Record;
use crate::task::{PartitionTask, TaskCounters, TaskPolicy};

pub(super) struct Held {
    pub map: BTreeMap<i32, PartitionTask>,
    /// Counters of tasks this host no longer holds.
    pub retired: TaskCounters,
    policy: TaskPolicy,
    /// `memory.state_bytes`, shared by the tasks held, and where state beyond it goes.
    state_bytes: u64,
    spill: Arc<SpillDir>,
}

impl Held {
    pub fn new(policy: TaskPolicy, state_bytes: u64, spill: Arc<SpillDir>) -> Self {
        Held {
            map: BTreeMap::new(),
            retired: TaskCounters::default(),
            policy,
            state_bytes,
            spill,
        }
    }

    /// Each task's share of `memory.state_bytes`.
    pub fn state_budget(&self) -> usize {
        usize::try_from(self.state_bytes / self.map.len().max(1) as u64).unwrap_or(usize::MAX)
    }

    /// The counts of every task this host ran, held or not.
    pub fn counters(&self) -> TaskCounters {
        let mut counters = self.retired.clone();
        for task in self.map.values() {
            counters.add(&task.counters);
        }
        counters
    }
}

impl Tasks for Held {
    fn count(&self) -> usize {
        self.map.len()
    }

    fn held(&self) -> Vec<i32> {
        self.map.keys().copied().collect()
    }

    fn queue(&mut self, record: Record) -> Option<usize> {
        let task = self.map.get_mut(&record.event.partition)?;
        task.push(record.side, record.event);
        Some(task.queued_side_bytes(record.side))
    }

    fn queued_bytes(&self, p: i32, side: Side) -> Option<usize> {
        self.map
            .get(&p)
            .filter(|task| task.halted().is_none())
            .map(|task| task.queued_side_bytes(side))
    }

    fn stop(&mut self, p: i32) -> bool {
        match self.map.remove(&p) {
            Some(task) => {
                self.retired.add(&task.counters);
                true
            }
            None => false,
        }
    }

    fn start(&mut self, p: i32, start: Vec<CommitPoint>, end_offsets: Vec<i64>) {
        let mut task = PartitionTask::new(p, self.policy.clone(), &start);
        task.set_wall_clock(crate::clock::now_ms() as i64);
        // The consumer's cached end offsets may predate this assignment (kept from an earlier
        // one): the broker's answer now is the floor below which they are not trusted.
        task.set_end_offset_floors(&end_offsets);
        task.spill_to(self.spill.clone());
        self.map.insert(p, task);
    }
}
