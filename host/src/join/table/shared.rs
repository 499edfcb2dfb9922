//! A table the tasks of a host share: a global table's one view (issue 33), which a reader
//! thread keeps up to date while the tasks' workers look rows up. A mutex around the table
//! itself: its store reads spilled segments back through cells, so it is not `Sync`, and a
//! lookup is a hash probe and a copy of one row (updates are applied in batches, one lock each).

use std::sync::{Mutex, MutexGuard, PoisonError};

use super::{TableLookup, TableState, TableUpdate};
use crate::event::Event;

pub struct SharedTable {
    state: Mutex<TableState>,
}

/// What a batch of table records did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    pub applied: u64,
    pub too_old: u64,
}

impl SharedTable {
    pub fn new(state: TableState) -> Self {
        SharedTable {
            state: Mutex::new(state),
        }
    }

    /// A panic elsewhere while the table was locked leaves it as whole as a task's own table
    /// after a panic: each update is applied or not, so the view is still read.
    fn state(&self) -> MutexGuard<'_, TableState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The row a stream record joins with (see [`TableState::lookup`]).
    pub fn lookup(&self, stream_event: &Event) -> TableLookup {
        self.state().lookup(stream_event)
    }

    /// Applies table records in order, under one lock.
    pub fn upsert_all<'a>(&self, events: impl IntoIterator<Item = &'a Event>) -> Applied {
        let mut state = self.state();
        let mut done = Applied::default();
        for event in events {
            match state.upsert(event) {
                TableUpdate::Applied => done.applied += 1,
                TableUpdate::TooOld => done.too_old += 1,
            }
        }
        done
    }

    /// Keys with a row, and the bytes the table takes (see [`TableState::bytes`]).
    pub fn size(&self) -> (usize, usize) {
        let state = self.state();
        (state.rows(), state.bytes())
    }
}

impl std::fmt::Debug for SharedTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (rows, bytes) = self.size();
        write!(f, "SharedTable {{ rows: {rows}, bytes: {bytes} }}")
    }
}
