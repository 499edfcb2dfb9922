//! Records as the join sees them: the events it consumes and the records a plugin asks it to produce.
//!
//! Pure data, independent of Kafka and of the plugin runtime; both sides convert to and from these
//! types. Keys and values are bytes, as in Kafka.

use std::sync::Arc;

/// Which topic of the join an event belongs to: its place in `join.topics`, 0 the first (the
/// left of a two-topic join), at most [`MAX_TOPICS`] − 1. A number, not an enum, so that the
/// queues, the state and the commit points of a task serve any number of topics alike; a
/// two-topic join names its sides [`Side::LEFT`] and [`Side::RIGHT`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Side(u8);

/// The most topics one join takes.
pub const MAX_TOPICS: usize = 8;

impl Side {
    pub const LEFT: Side = Side(0);
    pub const RIGHT: Side = Side(1);

    /// The `index`th topic of a join.
    pub fn of(index: usize) -> Side {
        assert!(
            index < MAX_TOPICS,
            "a join takes at most {MAX_TOPICS} topics"
        );
        Side(index as u8)
    }

    /// The sides of a join of `topics` topics, in order.
    pub fn all(topics: usize) -> impl Iterator<Item = Side> + Clone {
        (0..topics).map(Side::of)
    }

    /// The topic's place in the join: 0 for the first (left), 1 for the second (right), ….
    pub fn index(self) -> usize {
        usize::from(self.0)
    }

    /// The other side of a two-topic join.
    pub fn opposite(self) -> Side {
        debug_assert!(self.0 < 2, "only a two-topic join has an opposite side");
        Side(1 - self.0.min(1))
    }
}

/// `Left` and `Right` for the first two topics, as logs and tests have always named them;
/// `Topic2`, `Topic3`, … for the others.
impl std::fmt::Debug for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            0 => f.write_str("Left"),
            1 => f.write_str("Right"),
            n => write!(f, "Topic{n}"),
        }
    }
}

/// A Kafka record header; Kafka allows a header without a value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    pub key: String,
    pub value: Option<Vec<u8>>,
}

/// One consumed record.
///
/// Kept small (88 bytes), as every consumed record is one until the join state copies it into its
/// packed store (join/store.rs): the topic is shared by every record of a partition, and the byte
/// fields are exact-size boxes, not vectors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub topic: Arc<str>,
    pub partition: i32,
    pub offset: i64,
    /// Milliseconds since the Unix epoch: the join's event time.
    pub timestamp: i64,
    /// `None` for a record without a key (it cannot join).
    pub key: Option<Box<[u8]>>,
    /// `None` for a tombstone.
    pub value: Option<Box<[u8]>>,
    pub headers: Box<[Header]>,
}

impl Event {
    /// The key's bytes; empty for a record without a key (which never reaches the join: a task
    /// sets it aside when it is pushed).
    pub fn key_bytes(&self) -> &[u8] {
        self.key.as_deref().unwrap_or_default()
    }

    /// Bytes this event takes in memory: the struct, its key, value and headers, and an
    /// allocator's ~16 bytes per allocation. What the task queues count against
    /// `memory.queue_bytes`.
    pub fn footprint(&self) -> usize {
        const PER_ALLOCATION: usize = 16;
        let boxed = |len: usize| if len == 0 { 0 } else { len + PER_ALLOCATION };
        std::mem::size_of::<Event>()
            + boxed(self.key.as_ref().map_or(0, |k| k.len()))
            + boxed(self.value.as_ref().map_or(0, |v| v.len()))
            + boxed(self.headers.len() * std::mem::size_of::<Header>())
            + self
                .headers
                .iter()
                .map(|h| boxed(h.key.len()) + boxed(h.value.as_ref().map_or(0, Vec::len)))
                .sum::<usize>()
    }
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

/// One call of the plugin's action, as a batch carries it.
#[derive(Clone, Copy, Debug)]
pub enum Call<'a> {
    Match {
        key: &'a [u8],
        left: &'a Event,
        right: &'a Event,
    },
    Expire {
        key: &'a [u8],
        event: &'a Event,
        side: Side,
    },
    /// A join of three topics or more: one event of each topic, in topic order.
    MatchN {
        key: &'a [u8],
        events: &'a [Arc<Event>],
    },
    /// A `left` join of three topics or more: a first-topic event that left in no match, and
    /// per other topic the partners it found.
    ExpireN {
        key: &'a [u8],
        event: &'a Event,
        partners: &'a [Vec<Arc<Event>>],
    },
}

impl<'a> Call<'a> {
    pub fn key(&self) -> &'a [u8] {
        match *self {
            Call::Match { key, .. }
            | Call::Expire { key, .. }
            | Call::MatchN { key, .. }
            | Call::ExpireN { key, .. } => key,
        }
    }

    /// The events the call is made on.
    pub fn events(&self) -> Vec<&'a Event> {
        match *self {
            Call::Match { left, right, .. } => vec![left, right],
            Call::Expire { event, .. } => vec![event],
            Call::MatchN { events, .. } => events.iter().map(|e| &**e).collect(),
            Call::ExpireN {
                event, partners, ..
            } => std::iter::once(event)
                .chain(partners.iter().flatten().map(|e| &**e))
                .collect(),
        }
    }
}

/// A key as a log line can show it: the text when it is short printable UTF-8, else hex
/// (`0x…`); long keys are cut with `…`.
pub fn printable_key(key: &[u8]) -> String {
    const MAX: usize = 64;
    match std::str::from_utf8(key) {
        Ok(text) if !text.chars().any(char::is_control) => {
            let mut shown: String = text.chars().take(MAX).collect();
            if shown.len() < text.len() {
                shown.push('…');
            }
            shown
        }
        _ => {
            let mut shown = format!("0x{}", hex::encode(&key[..key.len().min(MAX / 2)]));
            if key.len() > MAX / 2 {
                shown.push('…');
            }
            shown
        }
    }
}

/// `topic/partition@offset` of each event, for a log line.
pub fn positions<'a>(events: impl IntoIterator<Item = &'a Event>) -> String {
    events
        .into_iter()
        .map(|e| format!("{}/{}@{}", e.topic, e.partition, e.offset))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::{printable_key, Event};

    #[test]
    fn an_event_stays_small() {
        // Every record in flight between the consumer and the join state is one.
        assert_eq!(std::mem::size_of::<Event>(), 88);
    }

    #[test]
    fn keys_print_as_text_when_they_can_and_as_hex_otherwise() {
        assert_eq!(printable_key(b"order-7"), "order-7");
        assert_eq!(printable_key(&[0xff, 0x00, 0x10]), "0xff0010");
        assert_eq!(printable_key(b"a\nb"), "0x610a62");
        assert_eq!(printable_key(&[b'x'; 70]).chars().count(), 65);
        assert!(printable_key(&[0u8; 40]).ends_with('…'));
    }
}

/// Why a plugin call produced no records, as dead-letter headers, logs and metrics name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FailureKind {
    /// The plugin returned `err(message)`; its instance is kept.
    PluginError,
    /// The call ran past its deadline (or out of fuel), or asked to wait past it.
    Timeout,
    /// The plugin tried to grow its memory past the cap.
    Memory,
    /// Any other trap: a panic, `unreachable`, an out-of-bounds access.
    Crash,
    /// No instance could be made to take the call (instantiation or `init` failed).
    Unavailable,
}

impl FailureKind {
    /// The label: `plugin-error`, `timeout`, `memory`, `crash` or `unavailable`.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::PluginError => "plugin-error",
            FailureKind::Timeout => "timeout",
            FailureKind::Memory => "memory",
            FailureKind::Crash => "crash",
            FailureKind::Unavailable => "unavailable",
        }
    }
}

impl std::fmt::Display for FailureKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
