//! Partitions the step could not go back on. After a failed batch the step reads again from each
//! partition's first record written; when that seek fails, the records are gone from memory and
//! the consumer would go on from its fetch position — the next batch would commit past records
//! never written. Such a partition waits instead: paused, whatever it still returns dropped,
//! nothing of it committed, until a seek to the same offset succeeds.

use std::collections::BTreeMap;

/// The partitions waiting for their seek, and the offset each must go back to.
#[derive(Default)]
pub struct Unsought {
    waiting: BTreeMap<(String, i32), i64>,
}

impl Unsought {
    /// A seek of `partition` of `topic` back to `offset` failed.
    pub fn failed(&mut self, topic: &str, partition: i32, offset: i64) {
        self.waiting.insert((topic.to_owned(), partition), offset);
    }

    /// Whether a record of `partition` of `topic` is to be dropped: it waits for its seek.
    pub fn holds(&self, topic: &str, partition: i32) -> bool {
        !self.waiting.is_empty()
            && self
                .waiting
                .keys()
                .any(|(t, p)| t == topic && *p == partition)
    }

    /// Tries each waiting seek again with `seek` (true when it succeeded); the partitions sought
    /// now, to resume, with the offset they went back to.
    pub fn retry(
        &mut self,
        mut seek: impl FnMut(&str, i32, i64) -> bool,
    ) -> Vec<(String, i32, i64)> {
        let sought: Vec<(String, i32, i64)> = self
            .waiting
            .iter()
            .filter(|((topic, p), offset)| seek(topic, *p, **offset))
            .map(|((topic, p), offset)| (topic.clone(), *p, *offset))
            .collect();
        for (topic, p, _) in &sought {
            self.waiting.remove(&(topic.clone(), *p));
        }
        sought
    }

    /// Partitions revoked: their new owner starts from the committed offsets.
    pub fn forget(&mut self, revoked: &[(String, i32)]) {
        for at in revoked {
            self.waiting.remove(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_whose_seek_failed_is_held_until_a_seek_to_the_same_offset_succeeds() {
        let mut unsought = Unsought::default();
        assert!(!unsought.holds("payments", 3));
        unsought.failed("payments", 3, 120);
        assert!(unsought.holds("payments", 3));
        assert!(!unsought.holds("payments", 2) && !unsought.holds("orders", 3));
        let mut tried = Vec::new();
        let sought = unsought.retry(|t, p, o| {
            tried.push((t.to_owned(), p, o));
            false
        });
        assert!(sought.is_empty());
        assert!(
            unsought.holds("payments", 3),
            "still held after a failed retry"
        );
        let sought = unsought.retry(|_, _, o| o == 120);
        assert_eq!(sought, [("payments".to_owned(), 3, 120)]);
        assert!(!unsought.holds("payments", 3));
        assert_eq!(tried, [("payments".to_owned(), 3, 120)]);
    }

    #[test]
    fn a_revoked_partition_no_longer_waits() {
        let mut unsought = Unsought::default();
        unsought.failed("payments", 3, 120);
        unsought.forget(&[("payments".to_owned(), 3)]);
        assert!(!unsought.holds("payments", 3));
        assert!(unsought.retry(|_, _, _| true).is_empty());
    }
}
