//! The worker connects the two sides: it feeds consumed records to `PartitionTask`s and runs their
//! matches through the plugin. This is the only module that sees both the plugin runtime and the
//! task logic.
//!
//! - [`action`]: the plugin as a task's `Action`.
//! - [`replay`]: `cojoin plugin test` — a recorded stream through the real matcher and plugin.
//! - [`run`]: `cojoin run` — the consumer, the tasks, the producer and the commits.

pub mod action;
pub mod output;
pub mod replay;
pub mod run;
