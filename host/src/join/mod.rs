//! The join engine's core: windowed join state per task, the order in which a task takes records
//! from its two partitions, and offset bookkeeping. No Kafka, no plugins, no async runtime; the only
//! I/O is the state store's spill files on local disk past `memory.state_bytes` (store/spill.rs),
//! a cache the state can always be rebuilt without.
//!
//! - [`state`]: `JoinState`, one task's buffered events per key, stream time, matches and expiries,
//!   for 2 to 8 topics.
//! - [`multi`]: `MultiJoinState`, the N-way join's reference model, which `JoinState`'s tests
//!   check it against.
//! - [`order`]: `TaskQueue`, which of the task's two partitions to take the next record from.
//! - [`table`]: `TableState`, one task's table side (issue 33): rows by key, versioned or latest,
//!   for stream–table joins; not wired yet.
//! - [`offsets`]: `CommitPoint` and `ReplayBounds`: what to commit, and what to suppress on replay.

pub mod multi;
pub mod offsets;
pub mod order;
pub mod state;
mod store;
pub mod table;

pub use offsets::{CommitPoint, ReplayBounds};
pub use order::{Admission, TaskQueue, BACKLOG_WAIT_MS};
pub use state::{JoinKind, JoinOutcome, JoinState, JoinWindow};
pub use store::{SpillDir, StoreStats, MAX_ORIGINS};
