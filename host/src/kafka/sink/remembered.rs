//! Exactly-once: what the sink remembers about outputs of an aborted transaction until the replay
//! makes them again: those the broker refused for good (refused again before they are sent, their
//! inputs dead-lettered, or every replay would abort again) and those refused with others in one
//! request (sent alone by the replay, and only refused if refused then).
//!
//! An entry is kept while replays meet it: the replay that applies it may itself be aborted for
//! another reason (seen: a replay aborted by records purged from the transaction before it, which
//! forgot the suspects it had met, sent them together again, and looped between the two aborts),
//! so meeting an entry does not forget it. One not met for [`FORGET_AFTER`] (its task went to
//! another host, which finds out on its own, or its inputs were committed) is forgotten at the
//! next insert. Forgetting costs one more aborted transaction, never a record: the broker refuses
//! the output again and it is remembered again.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long an entry no replay has met is kept.
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

    /// Why `identity` was refused, kept for another [`FORGET_AFTER`] from `now`. Callers ask
    /// [`Remembered::is_empty`] first, which spares them making the identity string per output.
    pub(super) fn meet(&mut self, identity: &str, now: Instant) -> Option<String> {
        self.entries.get_mut(identity).map(|(why, since)| {
            *since = now;
            why.clone()
        })
    }

    /// Forgets `identity` (a suspect found refused alone, remembered as refused instead).
    pub(super) fn forget(&mut self, identity: &str) {
        self.entries.remove(identity);
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
    fn an_entry_is_kept_while_replays_meet_it_and_forgotten_on_demand() {
        let mut remembered = Remembered::default();
        let start = Instant::now();
        remembered.insert("out-1".into(), "too large".into(), start);
        remembered.insert("out-2".into(), "too large".into(), start);
        assert_eq!(remembered.meet("out-3", start), None);
        // Met twice (the first replay aborted for another reason): still remembered.
        assert_eq!(
            remembered.meet("out-1", start).as_deref(),
            Some("too large")
        );
        let later = start + FORGET_AFTER - Duration::from_secs(1);
        assert_eq!(
            remembered.meet("out-1", later).as_deref(),
            Some("too large")
        );
        // Meeting renews the hour: out-1 outlives out-2, which no replay met.
        remembered.insert("out-4".into(), "refused".into(), start + FORGET_AFTER);
        assert_eq!(remembered.meet("out-2", start + FORGET_AFTER), None);
        assert!(remembered.meet("out-1", start + FORGET_AFTER).is_some());
        remembered.forget("out-1");
        assert_eq!(remembered.meet("out-1", start + FORGET_AFTER), None);
        assert_eq!(remembered.len(), 1);
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
        assert!(remembered.meet("late", start + FORGET_AFTER).is_some());
        assert!(remembered.meet("out-0", start + FORGET_AFTER).is_none());
    }
}
