//! Exactly-once: what the sink remembers about outputs of an aborted transaction until the replay
//! makes them again: those the broker refused for good (refused again before they are sent, their
//! inputs dead-lettered, or every replay would abort again) and those refused with others in one
//! request (sent alone by the replay, and only refused if refused then).
//!
//! An entry is used once: the replay that meets it applies it and forgets it. One the replay never
//! meets (its task went to another host, which finds out on its own) is forgotten after
//! [`FORGET_AFTER`]. Forgetting too early costs one more aborted transaction, never a record: the
//! broker refuses the output again and it is remembered again.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long an entry the replay has not met is kept.
pub(super) const FORGET_AFTER: Duration = Duration::from_secs(3600);

/// Outputs by their identity (sink's `output_identity`), with why they were refused and when.
#[derive(Debug, Default)]
pub(super) struct Remembered {
    entries: HashMap<String, (String, Instant)>,
}

impl Remembered {
    pub(super) fn insert(&mut self, identity: String, why: String, now: Instant) {
        self.entries
            .retain(|_, (_, since)| now.saturating_duration_since(*since) < FORGET_AFTER);
        self.entries.insert(identity, (why, now));
    }

    /// Why `identity` was refused, forgetting it: the caller applies the refusal now. Callers ask
    /// [`Remembered::is_empty`] first, which spares them making the identity string per output.
    pub(super) fn take(&mut self, identity: &str) -> Option<String> {
        self.entries.remove(identity).map(|(why, _)| why)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_applied_once_then_forgotten() {
        let mut remembered = Remembered::default();
        let now = Instant::now();
        remembered.insert("out-1".into(), "too large".into(), now);
        assert_eq!(remembered.take("out-2"), None);
        assert_eq!(remembered.take("out-1").as_deref(), Some("too large"));
        assert_eq!(remembered.take("out-1"), None);
        assert!(remembered.is_empty());
    }

    #[test]
    fn entries_the_replay_never_meets_are_forgotten_after_an_hour() {
        let mut remembered = Remembered::default();
        let start = Instant::now();
        for i in 0..1000 {
            remembered.insert(format!("out-{i}"), "refused".into(), start);
        }
        remembered.insert("late".into(), "refused".into(), start + FORGET_AFTER / 2);
        assert_eq!(remembered.len(), 1001);
        remembered.insert("later".into(), "refused".into(), start + FORGET_AFTER);
        assert_eq!(remembered.len(), 2, "only the two within the hour are kept");
        assert!(remembered.take("late").is_some());
        assert!(remembered.take("out-0").is_none());
    }
}
