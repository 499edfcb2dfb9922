//! The partitions this host paused, and why: the one record of what librdkafka was told (pure).
//!
//! librdkafka keeps a partition's pause across a revoke and a later assignment, and resuming a
//! partition that is not paused restarts its fetch from a stale position: so every pause is
//! recorded here, a task starting on a partition paused earlier is sought back and resumed, and
//! only paused partitions are resumed. The tasks read which of their sides are paused for
//! backpressure from here each round (an empty side paused is waited for, not idled past).

use std::collections::HashMap;

use crate::event::Side;

/// Why a partition was paused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pause {
    /// Its task's queue for that side passed its share of `memory.queue_bytes`: resumed once
    /// the queue drained to its low mark.
    Backpressure,
    /// A half whose pair this host does not hold: until its pair comes (the task then starts
    /// from its committed points) or it goes too.
    LoneHalf,
    /// Its task stopped under `plugin.failure = "halt"`: until the task is started again.
    Halted,
}

impl Pause {
    /// What a pause is said as in an error.
    pub fn why(self) -> &'static str {
        match self {
            Pause::Backpressure => "backpressure: its task's queue is full",
            Pause::LoneHalf => "until its pair comes",
            Pause::Halted => "a halted task",
        }
    }
}

#[derive(Debug, Default)]
pub struct Paused(HashMap<(Side, i32), Pause>);

impl Paused {
    /// Records a pause of one partition: whether librdkafka must be told (it was not paused).
    /// A halted task's partitions stay paused as halted whatever else pauses them.
    pub fn pause(&mut self, side: Side, p: i32, why: Pause) -> bool {
        match self.0.get(&(side, p)) {
            None => {
                self.0.insert((side, p), why);
                true
            }
            Some(Pause::Halted) => false,
            Some(_) => {
                self.0.insert((side, p), why);
                false
            }
        }
    }

    /// Forgets the pause of a partition being resumed: whether it was paused (librdkafka is
    /// told only then).
    pub fn resume(&mut self, side: Side, p: i32) -> bool {
        self.0.remove(&(side, p)).is_some()
    }

    /// Forgets both partitions of task p (sought back and resumed as it starts).
    pub fn clear_task(&mut self, p: i32) {
        self.0.retain(|(_, q), _| *q != p);
    }

    /// Whether either partition of task p is paused, for whatever reason (since an earlier
    /// assignment, maybe).
    pub fn is_paused(&self, p: i32) -> bool {
        self.0.keys().any(|(_, q)| *q == p)
    }

    /// Whether `side`'s partition of task p is paused for backpressure.
    pub fn is_backpressured(&self, side: Side, p: i32) -> bool {
        self.0.get(&(side, p)) == Some(&Pause::Backpressure)
    }

    /// Per side of a join of `topics` topics, whether task p's partition is paused for
    /// backpressure.
    pub fn backpressured(&self, p: i32, topics: usize) -> Vec<bool> {
        Side::all(topics)
            .map(|s| self.is_backpressured(s, p))
            .collect()
    }

    /// Every partition paused for backpressure, in a stable order.
    pub fn backpressured_sides(&self) -> Vec<(Side, i32)> {
        let mut sides: Vec<(Side, i32)> = self
            .0
            .iter()
            .filter(|(_, why)| **why == Pause::Backpressure)
            .map(|(at, _)| *at)
            .collect();
        sides.sort_unstable_by_key(|(side, p)| (*p, side.index()));
        sides
    }

    /// Forgets every pause (a new consumer knows none).
    pub fn clear(&mut self) {
        self.0.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_is_paused_once_and_resumed_only_when_paused() {
        let mut paused = Paused::default();
        assert!(paused.pause(Side::LEFT, 3, Pause::Backpressure));
        assert!(
            !paused.pause(Side::LEFT, 3, Pause::Backpressure),
            "told once"
        );
        assert_eq!(paused.backpressured(3, 2), [true, false]);
        assert_eq!(paused.backpressured_sides(), [(Side::LEFT, 3)]);
        assert!(paused.resume(Side::LEFT, 3));
        assert!(!paused.resume(Side::LEFT, 3), "not paused any more");
        assert!(!paused.resume(Side::RIGHT, 3), "never paused");
        assert!(!paused.is_paused(3));
    }

    #[test]
    fn a_halted_task_stays_paused_as_halted_and_is_never_resumed_for_backpressure() {
        let mut paused = Paused::default();
        assert!(paused.pause(Side::LEFT, 1, Pause::Backpressure));
        assert!(
            !paused.pause(Side::LEFT, 1, Pause::Halted),
            "librdkafka paused it already"
        );
        assert!(paused.pause(Side::RIGHT, 1, Pause::Halted));
        // Records polled ahead of the halt fill its queue: the pause stays a halt.
        assert!(!paused.pause(Side::RIGHT, 1, Pause::Backpressure));
        assert_eq!(paused.backpressured(1, 2), [false, false]);
        assert!(paused.backpressured_sides().is_empty());
        assert!(paused.is_paused(1));
        paused.clear_task(1);
        assert!(!paused.is_paused(1));
    }

    #[test]
    fn a_lone_half_is_paused_but_not_backpressured() {
        let mut paused = Paused::default();
        assert!(paused.pause(Side::RIGHT, 0, Pause::LoneHalf));
        assert!(paused.is_paused(0));
        assert_eq!(paused.backpressured(0, 2), [false, false]);
        assert!(paused.backpressured_sides().is_empty());
    }

    #[test]
    fn backpressured_sides_come_in_task_then_side_order() {
        let mut paused = Paused::default();
        for (side, p) in [(Side::RIGHT, 2), (Side::LEFT, 2), (Side::LEFT, 0)] {
            paused.pause(side, p, Pause::Backpressure);
        }
        assert_eq!(
            paused.backpressured_sides(),
            [(Side::LEFT, 0), (Side::LEFT, 2), (Side::RIGHT, 2)]
        );
    }
}
