//! Co-partitioning: partition p of the left topic and partition p of the right topic form task p,
//! and must be owned by the same host. Both range assignors (librdkafka's for the classic protocol,
//! the broker's for KIP-848) keep them together when every member subscribes to both topics and
//! the partition counts are equal; counts are checked here when a host starts (`run` and
//! `check`), and a task runs only while its host holds both partitions (pairing.rs). A topic that
//! grows while hosts run is not noticed until a host restarts.

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
}

/// Startup check on topic metadata: every topic the join reads, with its partition count, in
/// `join.topics` order. A mismatch names the first topic and the first that differs from it.
pub fn check_counts(topics: &[(&str, usize)]) -> Result<(), AssignmentError> {
    for (i, &(topic, count)) in topics.iter().enumerate() {
        if count == 0 {
            let other = topics[if i == 0 { 1 } else { 0 }].0;
            return Err(AssignmentError::Empty {
                topic: topic.to_owned(),
                other: other.to_owned(),
            });
        }
    }
    let (left, left_count) = topics[0];
    let differs = topics[1..].iter().find(|(_, c)| *c != left_count);
    if let Some(&(right, right_count)) = differs {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unequal_counts_are_refused_naming_topics_counts_and_fix() {
        let err = check_counts(&[("orders", 6), ("payments", 4)])
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("topics not co-partitioned: orders has 6 partitions, payments has 4"),
            "{err}"
        );
        assert!(err.contains("--topic payments --partitions 6"), "{err}");
        assert!(check_counts(&[("orders", 6), ("payments", 6)]).is_ok());
        assert!(matches!(
            check_counts(&[("orders", 0), ("payments", 6)]),
            Err(AssignmentError::Empty { .. })
        ));
    }
}
