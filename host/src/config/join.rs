//! `[join]`: the topics (two, `left` and `right`, or 2 to 8 in `topics`), the kind and window of
//! the join, where each topic's key comes from, and what happens to records the join cannot use.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::table::TableConfig;
use super::units::{duration, optional_duration};
use crate::event::{Side, MAX_TOPICS};
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
    /// Left topic (`a` in `on-match`). Required unless `topics` is given; the first of `topics`
    /// when it is.
    #[serde(default)]
    pub left: String,
    /// Right topic (`b` in `on-match`). Required unless `topics` is given; must differ from
    /// `left`. The second of `topics` when it is.
    #[serde(default)]
    pub right: String,
    /// The joined topics, in order, 2 to 8: `["orders", "payments", "shipments"]`, instead of
    /// `left` and `right`. A match is one event of each; the first topic is the one a `left`
    /// join keeps unmatched events of. Three or more take a plugin of world `plugin-n`. After
    /// parsing, it lists the topics whichever way they were given.
    #[serde(default)]
    pub topics: Vec<String>,
    /// With `topics`: where a topic's join key comes from, by topic name, as `left_key`:
    /// `keys = { payments = "/order_id" }`. A topic not named uses the record key.
    #[serde(default)]
    pub keys: BTreeMap<String, KeySelector>,
    /// Per topic of `topics`, its key selector (resolved after parsing).
    #[serde(skip)]
    pub selectors: Vec<KeySelector>,
    /// `inner`, `left` or `outer`. Default: `inner`.
    #[serde(default)]
    pub kind: Kind,
    /// Largest timestamp difference of a matching pair, e.g. `"5m"`. Required, except in a table
    /// join, which has none.
    #[serde(default, with = "duration")]
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
    /// `[join.table]`: the right side is a table, not a stream (see [`TableConfig`]).
    #[serde(default)]
    pub table: Option<TableConfig>,
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

    /// Lists the topics and their key selectors in `topics` and `selectors` whichever way they
    /// were given, and `left`/`right` (with their keys) as the first two: the two-topic code
    /// paths read those. Refuses a file that mixes the two spellings or names a key of a topic
    /// it does not join.
    pub(super) fn resolve_topics(&mut self) -> Result<(), (&'static str, String, &'static str)> {
        if self.topics.is_empty() {
            if self.left.is_empty() || self.right.is_empty() {
                let field = if self.left.is_empty() {
                    "join.left"
                } else {
                    "join.right"
                };
                return Err((
                    field,
                    "is missing".to_owned(),
                    "name the two topics to join (join.left and join.right), or list them in join.topics",
                ));
            }
            if !self.keys.is_empty() {
                return Err((
                    "join.keys",
                    "is set with join.left and join.right".to_owned(),
                    "use join.left_key and join.right_key, or list the topics in join.topics",
                ));
            }
            self.topics = vec![self.left.clone(), self.right.clone()];
            self.selectors = vec![self.left_key.clone(), self.right_key.clone()];
            return Ok(());
        }
        let mixed = !self.left.is_empty()
            || !self.right.is_empty()
            || !self.left_key.is_record_key()
            || !self.right_key.is_record_key();
        if mixed {
            return Err((
                "join.topics",
                "is set with join.left, join.right, join.left_key or join.right_key".to_owned(),
                "give the topics one way: join.topics (with join.keys), or join.left and join.right",
            ));
        }
        if !(2..=MAX_TOPICS).contains(&self.topics.len()) {
            return Err((
                "join.topics",
                format!("lists {} topics", self.topics.len()),
                "list 2 to 8 topics to join",
            ));
        }
        if let Some(unknown) = self.keys.keys().find(|t| !self.topics.contains(t)) {
            return Err((
                "join.keys",
                format!("names {unknown:?}, which is not in join.topics"),
                "name a key per topic of join.topics, e.g. keys = { payments = \"/order_id\" }",
            ));
        }
        self.selectors = (self.topics.iter())
            .map(|t| self.keys.get(t).cloned().unwrap_or_default())
            .collect();
        self.left = self.topics[0].clone();
        self.right = self.topics[1].clone();
        self.left_key = self.selectors[0].clone();
        self.right_key = self.selectors[1].clone();
        Ok(())
    }

    /// Where the join key of `side`'s records comes from.
    pub fn selector(&self, side: Side) -> &KeySelector {
        &self.selectors[side.index()]
    }

    /// Whether every topic's key is its record key (no topic is re-keyed from its value).
    pub fn keys_from_records(&self) -> bool {
        self.selectors.iter().all(KeySelector::is_record_key)
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
