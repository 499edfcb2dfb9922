//! Records as the join sees them: the events it consumes and the records a plugin asks it to produce.
//!
//! Pure data, independent of Kafka and of the plugin runtime; both sides convert to and from these
//! types. Keys and values are bytes, as in Kafka.

/// Which side of the join an event belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    Left,
    Right,
}

/// A Kafka record header; Kafka allows a header without a value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    pub key: String,
    pub value: Option<Vec<u8>>,
}

/// One consumed record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    /// Milliseconds since the Unix epoch: the join's event time.
    pub timestamp: i64,
    pub key: Vec<u8>,
    /// `None` for a tombstone.
    pub value: Option<Vec<u8>>,
    pub headers: Vec<Header>,
}

/// A record a plugin returned, to be produced by the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputRecord {
    /// `None` means the host's default output topic.
    pub topic: Option<String>,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<Header>,
}
