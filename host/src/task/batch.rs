//! What one `run` hands the I/O layer: the records to produce and dead letters ([`Emit`]), in a
//! [`Batch`] that also carries how far the run got, so that its records count as processed only
//! once the batch is acknowledged.

use std::sync::Arc;

use super::DeadLetter;
use crate::event::{Event, OutputRecord, Side, MAX_TOPICS};

/// Something to produce.
#[derive(Clone, Debug)]
pub enum Emit {
    /// A plugin record (`topic: None` goes to the default output topic) and the inputs it was
    /// made from, dead-lettered if the record cannot be produced.
    Output {
        record: OutputRecord,
        inputs: Vec<Arc<Event>>,
    },
    DeadLetter(DeadLetter),
}

/// An offset per side of the join (unused beyond its topics): a fixed array, copied per record
/// into a [`RunPoint`] without an allocation.
pub(super) type PerSide = [Option<i64>; MAX_TOPICS];

/// What one `run` produced; acknowledge it once every emit is durable.
#[derive(Debug, Default)]
pub struct Batch {
    pub emits: Vec<Emit>,
    pub(super) through: PerSide,
    /// What the emits take in memory, about (their records and input events).
    pub(super) bytes: usize,
    /// The run stopped at its budget: the task may have more records to take now.
    pub(super) full: bool,
    /// The (side, offset) of the events of each outcome acted on, for a task that parks: what it
    /// holds back must stay readable after a restart.
    pub(super) sources: Vec<(Side, i64)>,
}

impl Batch {
    pub fn is_full(&self) -> bool {
        self.full
    }

    pub(super) fn push(&mut self, emit: Emit) {
        let inputs = match &emit {
            Emit::Output { record, inputs } => {
                self.bytes += record.key.as_ref().map_or(0, Vec::len)
                    + record.value.as_ref().map_or(0, Vec::len)
                    + record
                        .headers
                        .iter()
                        .map(|h| h.key.len() + h.value.as_ref().map_or(0, Vec::len))
                        .sum::<usize>();
                inputs
            }
            Emit::DeadLetter(d) => &d.inputs,
        };
        self.bytes += inputs.iter().map(|e| e.footprint()).sum::<usize>();
        self.emits.push(emit);
    }
}

/// What a halt on a record rolls back to: the record it halted on is not processed, nor any
/// after it (their outcomes may already be in the state, as without batching). Parking rolls
/// back the batch too: the emits of the record, made before its failed call, wait with it.
#[derive(Clone, Copy)]
pub(super) struct RunPoint {
    pub(super) through: PerSide,
    pub(super) pending: PerSide,
    pub(super) pending_from: PerSide,
    /// The batch's emits, bytes and sources then.
    pub(super) emits: usize,
    pub(super) bytes: usize,
    pub(super) sources: usize,
}
