//! librdkafka's log lines and errors said through [`crate::quiet`]: once per kind, then at most
//! once per [`crate::quiet::REPEAT`] while they go on (every client context of the host routes
//! them here).

use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;

use crate::quiet::said;

/// A librdkafka log line at warning level or worse, said once per [`crate::quiet::REPEAT`] for its facility
/// (`FAIL`, `REQTMOUT`, …); others are not held back.
pub fn log(level: RDKafkaLogLevel, fac: &str, message: &str) {
    if level as i32 > RDKafkaLogLevel::Warning as i32 {
        return DefaultClientContext.log(level, fac, message);
    }
    if let Some(said) = said(&format!("log {fac}"), || message.to_owned()) {
        DefaultClientContext.log(level, fac, &said);
    }
}

/// A librdkafka error, said once per [`crate::quiet::REPEAT`] for its code.
pub fn error(error: KafkaError, reason: &str) {
    let kind = match error.rdkafka_error_code() {
        Some(code) => format!("error {code:?}"),
        None => format!("error {error}"),
    };
    if let Some(said) = said(&kind, || reason.to_owned()) {
        DefaultClientContext.error(error, &said);
    }
}
