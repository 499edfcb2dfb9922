//! The Kafka side's pure parts: co-partitioning checks on metadata and assignments, and the
//! producer partitioners whose mismatch breaks a join. The consumer and producer live in
//! [`crate::worker::run`]; nothing here imports the plugin runtime.

pub mod assignment;
pub mod partitioner;
