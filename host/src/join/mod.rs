//! The join engine's pure core: windowed join state per task, the order in which a task takes records
//! from its two partitions, and offset bookkeeping. No I/O: no Kafka, no plugins, no async runtime.
//!
//! - [`state`]: `JoinState`, one task's buffered events per key, stream time, matches and expiries.
//! - [`order`]: `TaskQueue`, which of the task's two partitions to take the next record from.
//! - [`offsets`]: `CommitPoint` and `ReplayBounds`: what to commit, and what to suppress on replay.

pub mod offsets;
pub mod order;
pub mod state;
mod store;

pub use offsets::{CommitPoint, ReplayBounds};
pub use order::{Admission, TaskQueue};
pub use state::{JoinKind, JoinOutcome, JoinState, JoinWindow};
