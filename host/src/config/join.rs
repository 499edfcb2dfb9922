//! `[join]`: the two topics, the kind and window of the join, where each side's key comes from,
//! and what happens to records the join cannot use.

use std::time::Duration;

use serde::Deserialize;

use super::units::{duration, optional_duration};
use crate::join::JoinKind;

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    #[default]
    Inner,
    Left,
    Outer,
}

impl From<Kind> for JoinKind {
    fn from(kind: Kind) -> Self {
        match kind {
            Kind::Inner => JoinKind::Inner,
            Kind::Left => JoinKind::Left,
            Kind::Outer => JoinKind::Outer,
        }
    }
}

/// What to do with records the join cannot use.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum RecordPolicy {
    /// Count and log them, then skip.
    Drop,
    /// Count them and copy them to the dead-letter topic.
    DeadLetter,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JoinConfig {
    /// Left topic (`a` in `on-match`). Required.
    pub left: String,
    /// Right topic (`b` in `on-match`). Required; must differ from `left`.
    pub right: String,
    /// `inner`, `left` or `outer`. Default: `inner`.
    #[serde(default)]
    pub kind: Kind,
    /// Largest timestamp difference of a matching pair, e.g. `"5m"`. Required.
    #[serde(with = "duration")]
    pub window: Duration,
    /// How long past its window an event waits for out-of-order partners. Default: `"0s"`.
    #[serde(default, with = "duration")]
    pub grace: Duration,
    /// How long a task waits for an empty partition before going on with the other
    /// (Kafka Streams' `max.task.idle.ms`). Default: `"100ms"`.
    #[serde(default = "default_max_idle", with = "duration")]
    pub max_idle: Duration,
    /// How far ahead of the host's clock a record's timestamp may be (Kafka's
    /// `message.timestamp.after.max.ms`); later records are dead-lettered as `future-timestamp`
    /// and do not move stream time. Default: `window + grace`, at least `"1m"`, at most `"1h"`
    /// (`default_max_future`). [`Config::parse`](super::Config::parse) sets it from
    /// `max_future_setting`.
    #[serde(skip)]
    pub max_future: Duration,
    /// `join.max_future` as written, `None` when left out: read once, by
    /// [`Config::parse`](super::Config::parse).
    #[serde(default, rename = "max_future", with = "optional_duration")]
    max_future_setting: Option<Duration>,
    /// Records older than stream time − window − grace. Default: `dead-letter`.
    #[serde(default = "dead_letter")]
    pub late: RecordPolicy,
    /// Records without a key, which cannot join. Default: `dead-letter`.
    #[serde(default = "dead_letter")]
    pub null_keys: RecordPolicy,
    /// Records without a value. `join` passes them to the plugin with `value: none`.
    /// Default: `join`.
    #[serde(default)]
    pub tombstones: TombstonePolicy,
    /// Where a left record's join key comes from: `"record-key"`, or a JSON pointer into its value
    /// (`"/order_id"`), which repartitions the side. A value that is not JSON or lacks the field
    /// follows `null_keys`. Default: `"record-key"`.
    #[serde(default)]
    pub left_key: KeySelector,
    /// The same for the right topic.
    #[serde(default)]
    pub right_key: KeySelector,
    /// `auto`: a side whose key is a field of the value, or whose partition count differs, is
    /// re-keyed into an internal topic `<group>-<topic>-repartition` that the join reads instead;
    /// `always`: both sides are (for producers whose partitioners differ); `never`: such a join
    /// is refused. Default: `auto`.
    #[serde(default)]
    pub repartition: RepartitionPolicy,
    /// Partition count of the internal topics, and so the join's parallelism, when repartitioning.
    /// Default: the count of the side that is not repartitioned, else the larger count.
    #[serde(default)]
    pub partitions: Option<usize>,
}

/// Where a side's join key comes from.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(try_from = "String")]
pub enum KeySelector {
    /// The record's key, as produced.
    #[default]
    RecordKey,
    /// A JSON pointer (RFC 6901) into the value, e.g. `/order_id` or `/customer/id`.
    Pointer(String),
}

impl TryFrom<String> for KeySelector {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        if s == "record-key" {
            Ok(KeySelector::RecordKey)
        } else if s.starts_with('/') && s.len() > 1 {
            Ok(KeySelector::Pointer(s))
        } else {
            Err(format!(
                "{s:?} is neither \"record-key\" nor a JSON pointer into the value; use \"record-key\" or a pointer such as \"/order_id\""
            ))
        }
    }
}

impl KeySelector {
    pub fn is_record_key(&self) -> bool {
        *self == KeySelector::RecordKey
    }
}

impl std::fmt::Display for KeySelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeySelector::RecordKey => f.write_str("record-key"),
            KeySelector::Pointer(p) => f.write_str(p),
        }
    }
}

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum RepartitionPolicy {
    #[default]
    Auto,
    Always,
    Never,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum TombstonePolicy {
    #[default]
    Join,
    Drop,
    DeadLetter,
}

/// `join.max_future` when left out: the window plus its grace. A record accepted ahead of the
/// clock moves stream time at most that far, so a record stamped at the clock afterwards is not
/// late (late is older than stream time − window − grace); with the former fixed hour, one record
/// 59 minutes ahead made every later record of a 10 s window late. At least a minute: producer
/// clocks run a little ahead of the host's, and a record reaches its task a round after the host
/// last read its clock. So a join whose window and grace are under a minute may still see the
/// records of a minute − window − grace late after one a minute ahead, rather than on-time
/// records dead-lettered as future ones. At most an hour, the default before it followed the
/// window: a longer window takes no record from further ahead unless told to. Every join kind
/// (inner, left, outer) has a window, so every join gets this default.
fn default_max_future(window: Duration, grace: Duration) -> Duration {
    const FLOOR: Duration = Duration::from_secs(60);
    const CEILING: Duration = Duration::from_secs(3600);
    window.saturating_add(grace).clamp(FLOOR, CEILING)
}

impl JoinConfig {
    /// Fills in what depends on other fields: `max_future` when left out.
    pub(super) fn resolve_defaults(&mut self) {
        self.max_future = self
            .max_future_setting
            .unwrap_or_else(|| default_max_future(self.window, self.grace));
    }
}

fn default_max_idle() -> Duration {
    Duration::from_millis(100)
}

fn dead_letter() -> RecordPolicy {
    RecordPolicy::DeadLetter
}

/// The most internal partitions `join.partitions` may ask for.
pub(super) const MAX_PARTITIONS: usize = 10_000;
