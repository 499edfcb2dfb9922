//! The Kafka side's pure parts: co-partitioning checks on metadata and assignments, and the
//! producer partitioners whose mismatch breaks a join. The consumer itself comes next; it will use
//! these and never import the plugin runtime.

pub mod assignment;
pub mod partitioner;
