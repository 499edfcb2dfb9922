//! The repartition step's verdicts on records the broker refused (pure: no Kafka). A re-keyed
//! record over the producer's or the internal topic's limit was retried every second for ever
//! while the join waited on the internal topic. As the sink does: a record refused in a request
//! with others is written again alone first (the broker refuses a whole request for one record
//! in it); refused alone, it is dead-lettered; its dead letter refused, it is sent again without
//! the value, then without key and headers (their digest in headers), so that it always fits.

use std::collections::HashMap;

use crate::kafka::sink::Stripped;

/// A source record: its side (index in the plan's sides), partition, offset. No topic name: a
/// position is made for every record the step writes.
pub type Pos = (usize, i32, i64);

/// What the step does with a record the broker refused before.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Write it to its internal topic in a request of its own.
    Alone,
    /// Dead-letter it, leaving out what the dead-letter topic refused before.
    DeadLetter(Stripped),
}

#[derive(Debug)]
struct Refusal {
    why: String,
    refused_alone: bool,
    stripped: Stripped,
}

#[derive(Default)]
pub struct Refusals {
    by_pos: HashMap<Pos, Refusal>,
}

impl Refusals {
    /// What to do with the record at `pos` (`None`: write it as usual), and why.
    pub fn next(&self, pos: &Pos) -> Option<(Next, &str)> {
        let r = self.by_pos.get(pos)?;
        let next = if r.refused_alone {
            Next::DeadLetter(r.stripped)
        } else {
            Next::Alone
        };
        Some((next, &r.why))
    }

    /// Writing the record at `pos` to its internal topic was refused for good, `alone` in its
    /// request or with others.
    pub fn write_refused(&mut self, pos: Pos, why: String, alone: bool) {
        let r = self.by_pos.entry(pos).or_insert(Refusal {
            why: String::new(),
            refused_alone: false,
            stripped: Stripped::Nothing,
        });
        r.why = why;
        r.refused_alone |= alone;
    }

    /// Written alone after all: one of its companions was at fault.
    pub fn written(&mut self, pos: &Pos) {
        if self.by_pos.get(pos).is_some_and(|r| !r.refused_alone) {
            self.by_pos.remove(pos);
        }
    }

    /// Its dead letter was refused: the next one leaves out more, which is returned. `None`
    /// when nothing is left to leave out (the dead-letter topic refuses everything).
    pub fn dead_letter_refused(&mut self, pos: &Pos) -> Option<Stripped> {
        let r = self.by_pos.get_mut(pos)?;
        r.stripped = r.stripped.more()?;
        Some(r.stripped)
    }

    /// Its dead letter is committed: nothing more to remember.
    pub fn forget(&mut self, pos: &Pos) {
        self.by_pos.remove(pos);
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.by_pos.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pos(offset: i64) -> Pos {
        (1, 0, offset)
    }

    #[test]
    fn a_record_refused_with_others_is_written_alone_then_dead_lettered_stripping_more_each_time() {
        let mut r = Refusals::default();
        assert_eq!(r.next(&pos(1)), None);
        r.write_refused(pos(1), "too large".into(), false);
        assert_eq!(r.next(&pos(1)), Some((Next::Alone, "too large")));
        r.write_refused(pos(1), "too large alone".into(), true);
        assert_eq!(
            r.next(&pos(1)),
            Some((Next::DeadLetter(Stripped::Nothing), "too large alone"))
        );
        r.dead_letter_refused(&pos(1));
        assert_eq!(
            r.next(&pos(1)).map(|n| n.0),
            Some(Next::DeadLetter(Stripped::Value))
        );
        assert_eq!(
            r.dead_letter_refused(&pos(1)),
            Some(Stripped::KeyValueAndHeaders)
        );
        assert_eq!(
            r.next(&pos(1)).map(|n| n.0),
            Some(Next::DeadLetter(Stripped::KeyValueAndHeaders))
        );
        assert_eq!(
            r.dead_letter_refused(&pos(1)),
            None,
            "nothing more to leave out"
        );
        r.forget(&pos(1));
        assert_eq!(r.len(), 0);
    }

    #[test]
    fn a_companion_written_alone_is_forgotten_and_a_record_refused_alone_is_not() {
        let mut r = Refusals::default();
        r.write_refused(pos(1), "batch too large".into(), false);
        r.write_refused(pos(2), "batch too large".into(), false);
        r.written(&pos(1));
        assert_eq!(r.next(&pos(1)), None);
        r.write_refused(pos(2), "too large".into(), true);
        r.written(&pos(2));
        assert_eq!(
            r.next(&pos(2)).map(|n| n.0),
            Some(Next::DeadLetter(Stripped::Nothing))
        );
    }
}
