//! Co-partitioning: partition p of the left topic and partition p of the right topic form task p,
//! and must be owned by the same host. The range assignor guarantees it when every member subscribes
//! to both topics and the partition counts are equal; it fails silently otherwise, so both are
//! checked — counts when a host starts (`run` and `check`), pairs on every assignment. A topic
//! that grows while hosts run is not noticed until a host restarts.

use std::collections::BTreeSet;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AssignmentError {
    #[error(
        "topics not co-partitioned: {left} has {left_count} partitions, {right} has {right_count}; \
         a key-partitioned join needs equal counts. Fix: give both topics the same partition count \
         (e.g. `kafka-topics --alter --topic {smaller} --partitions {larger}`; note that adding \
         partitions moves keys, so reprocess or repartition existing data)"
    )]
    CountMismatch {
        left: String,
        left_count: usize,
        right: String,
        right_count: usize,
        smaller: String,
        larger: usize,
    },
    #[error(
        "{topic} has no partitions (does it exist?); create it with as many partitions as {other}"
    )]
    Empty { topic: String, other: String },
    #[error(
        "partition {partition} of {held} is assigned to this host but partition {partition} of \
         {missing} is not: the group's members do not all subscribe to both topics with the range \
         assignor. Fix: run every member with the same join topics and \
         partition.assignment.strategy=range"
    )]
    Unpaired {
        partition: i32,
        held: String,
        missing: String,
    },
    #[error("assigned partition {partition} of {topic}, which is not a joined topic")]
    Foreign { topic: String, partition: i32 },
}

/// Startup check on topic metadata.
pub fn check_counts(
    left: &str,
    left_count: usize,
    right: &str,
    right_count: usize,
) -> Result<(), AssignmentError> {
    for (topic, count, other) in [(left, left_count, right), (right, right_count, left)] {
        if count == 0 {
            return Err(AssignmentError::Empty {
                topic: topic.to_owned(),
                other: other.to_owned(),
            });
        }
    }
    if left_count != right_count {
        let smaller = if left_count < right_count {
            left
        } else {
            right
        };
        return Err(AssignmentError::CountMismatch {
            left: left.to_owned(),
            left_count,
            right: right.to_owned(),
            right_count,
            smaller: smaller.to_owned(),
            larger: left_count.max(right_count),
        });
    }
    Ok(())
}

/// The tasks (partition numbers) of an assignment, refusing one where a partition of one topic
/// comes without the same partition of the other.
pub fn tasks<'a>(
    left: &str,
    right: &str,
    assigned: impl IntoIterator<Item = (&'a str, i32)>,
) -> Result<Vec<i32>, AssignmentError> {
    let (mut l, mut r) = (BTreeSet::new(), BTreeSet::new());
    for (topic, partition) in assigned {
        if topic == left {
            l.insert(partition);
        } else if topic == right {
            r.insert(partition);
        } else {
            return Err(AssignmentError::Foreign {
                topic: topic.to_owned(),
                partition,
            });
        }
    }
    if let Some(&p) = l.difference(&r).next() {
        return Err(AssignmentError::Unpaired {
            partition: p,
            held: left.to_owned(),
            missing: right.to_owned(),
        });
    }
    if let Some(&p) = r.difference(&l).next() {
        return Err(AssignmentError::Unpaired {
            partition: p,
            held: right.to_owned(),
            missing: left.to_owned(),
        });
    }
    Ok(l.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unequal_counts_are_refused_naming_topics_counts_and_fix() {
        let err = check_counts("orders", 6, "payments", 4)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("topics not co-partitioned: orders has 6 partitions, payments has 4"),
            "{err}"
        );
        assert!(err.contains("--topic payments --partitions 6"), "{err}");
        assert!(check_counts("orders", 6, "payments", 6).is_ok());
        assert!(matches!(
            check_counts("orders", 0, "payments", 6),
            Err(AssignmentError::Empty { .. })
        ));
    }

    #[test]
    fn an_assignment_is_a_set_of_paired_partitions() {
        let a = [
            ("orders", 2),
            ("payments", 2),
            ("orders", 0),
            ("payments", 0),
        ];
        assert_eq!(tasks("orders", "payments", a).unwrap(), [0, 2]);
        let err = tasks("orders", "payments", [("orders", 1), ("payments", 2)]).unwrap_err();
        assert_eq!(
            err,
            AssignmentError::Unpaired {
                partition: 1,
                held: "orders".into(),
                missing: "payments".into()
            }
        );
        assert!(tasks("orders", "payments", [("other", 0)]).is_err());
        assert_eq!(tasks("orders", "payments", []).unwrap(), Vec::<i32>::new());
    }
}
