//! The limits a task runs within, set by the run loop from `memory.*` and its round timing: the
//! join state's RAM budget (beyond it, spill files), and how many bytes and how long one `run` may
//! take; and what the state holds against them, for metrics.

use std::sync::Arc;
use std::time::Duration;

use super::PartitionTask;
use crate::join::{SpillDir, StoreStats};

impl PartitionTask {
    /// Events and bytes held in the join state; in a table join, the table's rows and bytes.
    pub fn held(&self) -> (usize, usize) {
        match &self.table {
            Some(table) => (table.state.rows(), table.state.bytes()),
            None => self.state.held(),
        }
    }

    /// Lets the join state (or table) move its oldest events to files in `dir` beyond its RAM
    /// budget.
    pub fn spill_to(&mut self, dir: Arc<SpillDir>) {
        match &mut self.table {
            Some(table) => table.state.spill_to(dir),
            None => self.state.spill_to(dir),
        }
    }

    /// This task's share of `memory.state_bytes`: join state beyond it goes to disk (once
    /// [`PartitionTask::spill_to`] gave it a place).
    pub fn set_state_budget(&mut self, bytes: usize) {
        match &mut self.table {
            Some(table) => table.state.set_ram_budget(bytes),
            None => self.state.set_ram_budget(bytes),
        }
    }

    /// The join state's (or table's) bytes in RAM and on disk, and what moved between them.
    pub fn store_stats(&self) -> StoreStats {
        match &self.table {
            Some(table) => table.state.store_stats(),
            None => self.state.store_stats(),
        }
    }

    /// The bytes a batch may reach before `run` stops taking records (its share of
    /// `memory.queue_bytes`). A single record's outcomes are never split.
    pub fn set_batch_budget(&mut self, bytes: usize) {
        self.batch_budget = bytes;
    }

    /// How long one `run` may take records for: the run loop bounds it so that the workers of a
    /// round finish close together (a task with a large backlog takes several rounds instead of
    /// keeping one worker busy while the others wait). A record's outcomes are never split.
    pub fn set_time_budget(&mut self, budget: Duration) {
        self.time_budget = Some(budget);
    }
}
