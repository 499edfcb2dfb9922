//! Repartitioning: which sides of a join are re-keyed into internal topics, and why; a record's
//! new key ([`key`]); the order the step writes what it holds in ([`merge`]). Pure; the Kafka
//! side is `kafka::repartitioner`.
//!
//! A side is repartitioned when its join key is a field of the value (`join.left_key` /
//! `right_key`), when the two topics' partition counts differ, or when `join.partitions` asks
//! for another count than it has. Its records are written, re-keyed, with murmur2 (Java's
//! partitioner, as Kafka Streams writes its repartition topics) to
//! `<group>-<topic>-repartition`, keeping timestamp and headers; the join reads that topic in its
//! place. With unequal counts and no field selected, the side with fewer partitions is the one
//! repartitioned, to the larger count: the other side is read as it is, and the join keeps the
//! larger parallelism.

pub mod key;
pub mod merge;

use crate::config::{JoinConfig, KeySelector, RepartitionPolicy};
use crate::event::Side;

/// A side that is re-keyed into an internal topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidePlan {
    pub side: Side,
    /// The topic it is read from.
    pub source: String,
    /// The internal topic it is written to and the join reads.
    pub internal: String,
    pub key: KeySelector,
    /// Why, for logs and `cojoin check`.
    pub why: String,
}

/// What the join reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The topics the join consumes, in `join.topics` order: a source topic or an internal one.
    pub join_topics: Vec<String>,
    /// The join's partition count (of every topic it reads).
    pub partitions: usize,
    /// The repartitioned sides (none, one or both).
    pub sides: Vec<SidePlan>,
}

impl Plan {
    /// The partition counts of the topics the join reads, from the source topics' counts: an
    /// internal topic has the plan's count (the step creates it so, or refuses to start).
    pub fn join_counts(&self, source_counts: &[usize]) -> Vec<usize> {
        (Side::all(self.join_topics.len()))
            .map(|side| {
                if self.sides.iter().any(|s| s.side == side) {
                    self.partitions
                } else {
                    source_counts[side.index()]
                }
            })
            .collect()
    }
}

/// The internal topic of `topic` for the join group `group`.
pub fn internal_topic(group: &str, topic: &str) -> String {
    format!("{group}-{topic}-repartition")
}

/// Decides, from the config and the source topics' partition counts. With `never` (or a topic
/// without partitions) nothing is repartitioned, and the join's own check of its topics' counts
/// refuses unequal ones as before.
/// `counts`: the source topics' partition counts, in `join.topics` order. With unequal counts
/// and no key from a value, the join's count is the largest, and the topics with fewer are
/// repartitioned to it; a topic keyed from its value is always repartitioned, to the largest
/// count of those that are not (or of all, when every topic is).
pub fn plan(join: &JoinConfig, group: &str, counts: &[usize]) -> Plan {
    // A global table is not the group's to read: the join reads the stream alone.
    let read = if join.table_is_global() {
        1
    } else {
        join.topics.len()
    };
    let topics = join.topics[..read].to_vec();
    let keys = &join.selectors[..read];
    let counts = &counts[..read];
    if join.repartition == RepartitionPolicy::Never || counts.contains(&0) {
        return Plan {
            join_topics: topics,
            partitions: counts[0],
            sides: Vec::new(),
        };
    }
    let by_field: Vec<bool> = keys.iter().map(|k| !k.is_record_key()).collect();
    let as_produced = (counts.iter().zip(&by_field))
        .filter(|(_, by_field)| !**by_field)
        .map(|(c, _)| *c)
        .max();
    // A table is read as it is: the stream is re-keyed to the table's count.
    let table_count = (join.table.as_ref())
        .filter(|_| read > 1)
        .map(|_| counts[Side::RIGHT.index()]);
    let partitions = (join.partitions).or(table_count).unwrap_or_else(|| {
        as_produced.unwrap_or_else(|| counts.iter().copied().max().unwrap_or(0))
    });
    let mut sides = Vec::new();
    let mut join_topics = topics.clone();
    for i in 0..topics.len() {
        // A topic read as it is at the join's count, to name in the reason.
        let other = (0..topics.len())
            .find(|&j| j != i && counts[j] == partitions && !by_field[j])
            .unwrap_or(1 - i.min(1));
        let why = if join.repartition == RepartitionPolicy::Always {
            "join.repartition is \"always\"".to_owned()
        } else if by_field[i] {
            let setting = match (topics.len(), i) {
                (2, 0) => "left_key",
                (2, _) => "right_key",
                _ => "join.keys",
            };
            format!("its join key is {} in the value ({setting})", keys[i])
        } else if counts[i] != partitions {
            if join.partitions.is_some() {
                format!(
                    "it has {} partitions, join.partitions is {partitions}",
                    counts[i]
                )
            } else {
                format!(
                    "it has {} partitions, {} has {}",
                    counts[i], topics[other], counts[other]
                )
            }
        } else {
            continue;
        };
        let internal = internal_topic(group, &topics[i]);
        join_topics[i] = internal.clone();
        sides.push(SidePlan {
            side: Side::of(i),
            source: topics[i].clone(),
            internal,
            key: keys[i].clone(),
            why,
        });
    }
    Plan {
        join_topics,
        partitions,
        sides,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn join(extra: &str) -> JoinConfig {
        let text = format!(
            "[kafka]\nbootstrap_servers = \"b:9092\"\ngroup_id = \"g\"\n[join]\nleft = \"orders\"\nright = \"payments\"\nwindow = \"5m\"\n{extra}\n[plugin]\npath = \"p.wasm\"\n[output]\ntopic = \"out\"\ndead_letter_topic = \"dlq\"\n"
        );
        crate::config::Config::parse(&text).unwrap().join
    }

    #[test]
    fn co_partitioned_topics_keyed_by_their_record_key_are_read_as_they_are() {
        let p = plan(&join(""), "g", &[6, 6]);
        assert_eq!(p.join_topics, ["orders".to_owned(), "payments".to_owned()]);
        assert_eq!(p.join_counts(&[6, 6]), [6, 6]);
        assert_eq!((p.partitions, p.sides.len()), (6, 0));
    }

    #[test]
    fn unequal_counts_repartition_the_smaller_side_to_the_larger_count() {
        let p = plan(&join(""), "g", &[6, 4]);
        assert_eq!(
            p.join_topics,
            ["orders".to_owned(), "g-payments-repartition".to_owned()]
        );
        assert_eq!(p.partitions, 6);
        assert_eq!(p.sides[0].why, "it has 4 partitions, orders has 6");
        assert_eq!(p.join_counts(&[6, 4]), [6, 6]);
        let p = plan(&join(""), "g", &[2, 4]);
        assert_eq!(p.sides[0].source, "orders");
        assert_eq!(p.partitions, 4);
    }

    #[test]
    fn a_key_in_the_value_repartitions_that_side_to_the_other_sides_count() {
        let p = plan(&join("right_key = \"/order_id\""), "g", &[6, 4]);
        assert_eq!(p.partitions, 6);
        assert_eq!(p.sides.len(), 1);
        assert_eq!(p.sides[0].key, KeySelector::Pointer("/order_id".into()));
        assert!(p.sides[0].why.contains("/order_id"), "{}", p.sides[0].why);
        // Both sides by field: the larger count; join.partitions overrides, and a side whose
        // count differs from it is repartitioned even when keyed by its record key.
        let both = plan(
            &join("left_key = \"/id\"\nright_key = \"/order_id\""),
            "g",
            &[3, 4],
        );
        assert_eq!((both.partitions, both.sides.len()), (4, 2));
        let always = plan(&join("repartition = \"always\""), "g", &[6, 6]);
        assert_eq!((always.partitions, always.sides.len()), (6, 2));
        let fixed = plan(&join("partitions = 8"), "g", &[8, 4]);
        assert_eq!((fixed.partitions, fixed.sides.len()), (8, 1));
        assert!(fixed.sides[0].why.contains("join.partitions is 8"));
    }

    #[test]
    fn never_reads_the_topics_as_they_are_and_refuses_a_field_key() {
        let p = plan(&join("repartition = \"never\""), "g", &[6, 4]);
        assert_eq!((p.sides.len(), &p.join_topics[1][..]), (0, "payments"));
        let text = "[kafka]\nbootstrap_servers = \"b:9092\"\ngroup_id = \"g\"\n[join]\nleft = \"orders\"\nright = \"payments\"\nwindow = \"5m\"\nrepartition = \"never\"\nright_key = \"/order_id\"\n[plugin]\npath = \"p.wasm\"\n[output]\ntopic = \"out\"\ndead_letter_topic = \"dlq\"\n";
        let err = crate::config::Config::parse(text).unwrap_err().to_string();
        assert!(
            err.contains("join.right_key") && err.contains("auto"),
            "{err}"
        );
        let bad = "[kafka]\nbootstrap_servers = \"b:9092\"\ngroup_id = \"g\"\n[join]\nleft = \"orders\"\nright = \"payments\"\nwindow = \"5m\"\nright_key = \"order_id\"\n[plugin]\npath = \"p.wasm\"\n[output]\ntopic = \"out\"\ndead_letter_topic = \"dlq\"\n";
        let err = crate::config::Config::parse(bad).unwrap_err().to_string();
        assert!(err.contains("/order_id"), "{err}");
    }
}
