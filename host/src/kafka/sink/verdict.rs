//! How a failed send or delivery is handled: refused for good, transient, or fatal.

use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

/// How a failed send or delivery is handled.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// This record will never be accepted (too large, no such topic, not allowed): its inputs
    /// are dead-lettered.
    Refused,
    /// The producer cannot go on (an idempotence fatal error): the host stops without committing.
    Fatal,
    /// Not allowed by the broker's ACLs: on a topic the config names the host stops (see
    /// [`Sink::unauthorized`]); on a topic a plugin named, that output is refused.
    Unauthorized,
    /// Anything else (timeouts, a broker away) is sent again.
    Transient,
}

/// Whether the broker refuses a whole produce request for `e` when one record of it is at fault.
pub(crate) fn refuses_whole_request(e: &KafkaError) -> bool {
    use RDKafkaErrorCode as C;
    matches!(
        e.rdkafka_error_code(),
        Some(
            C::MessageSizeTooLarge
                | C::MessageBatchTooLarge
                | C::InvalidMessage
                | C::InvalidRecord
                | C::InvalidTimestamp
                | C::InvalidMessageSize
        )
    )
}

pub(crate) fn verdict(e: &KafkaError) -> Verdict {
    use RDKafkaErrorCode as C;
    match e.rdkafka_error_code() {
        Some(
            C::MessageSizeTooLarge
            | C::InvalidMessageSize
            | C::MessageBatchTooLarge
            | C::InvalidMessage
            | C::InvalidRecord
            | C::InvalidTimestamp
            | C::UnknownTopic
            | C::UnknownTopicOrPartition
            | C::UnknownPartition
            | C::InvalidTopic
            | C::PolicyViolation
            | C::InvalidArgument,
        ) => Verdict::Refused,
        Some(C::TopicAuthorizationFailed) => Verdict::Unauthorized,
        Some(C::Fatal) => Verdict::Fatal,
        _ => Verdict::Transient,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permanent_refusals_are_told_from_transient_failures() {
        let refused = KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge);
        assert_eq!(verdict(&refused), Verdict::Refused);
        let missing = KafkaError::MessageProduction(RDKafkaErrorCode::UnknownTopic);
        assert_eq!(verdict(&missing), Verdict::Refused);
        let timeout = KafkaError::MessageProduction(RDKafkaErrorCode::MessageTimedOut);
        assert_eq!(verdict(&timeout), Verdict::Transient);
        let down = KafkaError::MessageProduction(RDKafkaErrorCode::AllBrokersDown);
        assert_eq!(verdict(&down), Verdict::Transient);
        let fatal = KafkaError::MessageProduction(RDKafkaErrorCode::Fatal);
        assert_eq!(verdict(&fatal), Verdict::Fatal);
    }
}
