//! The host's configuration file (TOML): every field documented with its default, unknown fields
//! refused, and everything validated before anything connects. Pure: parsing and checks only.
//!
//! ```toml
//! [kafka]
//! bootstrap_servers = "localhost:9092"
//! group_id = "orders-payments"
//! # instance_id = "host-1"            # static membership: stable assignment across restarts
//! # group_protocol = "auto"           # auto | consumer (KIP-848) | classic
//! [kafka.options]                     # raw librdkafka options, applied last
//! "fetch.wait.max.ms" = "100"
//!
//! [join]
//! left = "orders"
//! right = "payments"
//! kind = "left"                       # inner | left | outer
//! window = "5m"
//! grace = "30s"
//!
//! [plugin]
//! path = "build/plugins/order_paid_python.wasm"
//! failure = "dead-letter"             # dead-letter | halt
//!
//! [output]
//! topic = "orders-paid"
//! dead_letter_topic = "orders-payments-dlq"
//! # allowed_topics = ["audit"]        # other topics a plugin record may name (default: any but the inputs)
//! # compression = "zstd"              # none | gzip | snappy | lz4 | zstd: batches cojoin writes
//!
//! [memory]
//! # queue_bytes = "64MiB"             # records consumed, not yet joined (partitions pause beyond)
//! # state_bytes = "1GiB"              # join state in RAM; beyond it, oldest events go to state.dir
//!
//! [state]
//! # dir = "/var/lib/cojoin"           # spilled join state (a cache; default: the system temp dir)
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::join::JoinKind;
use crate::secret::{Options, Secret};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    // The cause is in the message, not an error `source` (which `{:#}` would print again).
    #[error("cannot read config file {path:?}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("config file {path:?}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("config field `{field}`: {problem}; {fix}")]
    Invalid {
        field: &'static str,
        problem: String,
        fix: &'static str,
    },
}

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub kafka: KafkaConfig,
    pub join: JoinConfig,
    pub plugin: PluginConfig,
    pub output: OutputConfig,
    /// Admin HTTP server. Default: on, loopback, port 9464.
    #[serde(default)]
    pub admin: AdminConfig,
    /// What the host may hold in memory of the records it reads.
    #[serde(default)]
    pub memory: MemoryConfig,
    /// Where join state beyond `memory.state_bytes` goes.
    #[serde(default)]
    pub state: StateConfig,
}

/// Memory budgets, per host, over all its tasks. The host's fixed overhead (plugin instances,
/// librdkafka, code) comes on top; README "Memory" gives it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryConfig {
    /// Records consumed but not processed yet, librdkafka's prefetch included. A task whose
    /// queue passes its share has its partitions paused until it drains. Default `"64MiB"`.
    #[serde(default = "default_queue_bytes", with = "byte_size")]
    pub queue_bytes: u64,
    /// Join state kept in RAM; beyond it the oldest events move to files under `state.dir` and are
    /// read back when probed or expired. Default `"1GiB"`; 0 puts every full segment on disk.
    #[serde(default = "default_state_bytes", with = "byte_size")]
    pub state_bytes: u64,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            queue_bytes: default_queue_bytes(),
            state_bytes: default_state_bytes(),
        }
    }
}

fn default_queue_bytes() -> u64 {
    64 << 20
}
fn default_state_bytes() -> u64 {
    1 << 30
}
/// Below this the queues cannot hold a few ordinary records per partition. `state_bytes` has no
/// floor: a tiny one only makes the join slower (every full segment of state goes to disk).
const MIN_QUEUE_BYTES: u64 = 4 << 20;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateConfig {
    /// Directory for spilled join state (a cache: state is rebuilt from Kafka on restart).
    /// Default: `cojoin-state` in the system temp dir.
    #[serde(default)]
    pub dir: Option<PathBuf>,
}

impl StateConfig {
    pub fn dir(&self) -> PathBuf {
        self.dir
            .clone()
            .unwrap_or_else(|| std::env::temp_dir().join("cojoin-state"))
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    /// Serve `/metrics`, `/healthz`, `/readyz`, `/plugins`. Default: true.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Address to listen on; port 0 picks a free one (logged). Default: `"127.0.0.1:9464"`.
    #[serde(default = "default_admin_bind")]
    pub bind: String,
    /// When set, every request but `/healthz` needs `Authorization: Bearer <token>`. Required when
    /// `bind` is not a loopback address. Default: none.
    /// A string, `{ env = "NAME" }` or `{ file = "/path" }` (see [`crate::secret`]).
    #[serde(default)]
    pub token: Option<Secret>,
    /// PEM file of the server's certificate (its chain may follow). With `tls_key`, the server
    /// speaks only HTTPS. Relative paths start from the working directory. Default: none.
    #[serde(default)]
    pub tls_cert: Option<PathBuf>,
    /// PEM file of `tls_cert`'s private key (PKCS#8, RSA or EC; no passphrase). Default: none.
    #[serde(default)]
    pub tls_key: Option<PathBuf>,
    /// PEM file of the CA(s) that sign client certificates: when set, a client must present one
    /// (mutual TLS). Needs `tls_cert` and `tls_key`. Default: none.
    #[serde(default)]
    pub tls_client_ca: Option<PathBuf>,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            enabled: true,
            bind: default_admin_bind(),
            token: None,
            tls_cert: None,
            tls_key: None,
            tls_client_ca: None,
        }
    }
}

/// The files of the admin server's TLS, as the config names them (`admin::tls` reads them).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdminTlsFiles<'a> {
    pub cert: &'a std::path::Path,
    pub key: &'a std::path::Path,
    pub client_ca: Option<&'a std::path::Path>,
}

impl AdminConfig {
    /// The TLS files when `tls_cert` and `tls_key` are both set, `None` when neither is; an error
    /// when only one is, or when `tls_client_ca` is set without them. Names only: the files are
    /// read when the server starts.
    pub fn tls_files(&self) -> Result<Option<AdminTlsFiles<'_>>, ConfigError> {
        let invalid = |field, problem: &str, fix| ConfigError::Invalid {
            field,
            problem: problem.to_owned(),
            fix,
        };
        const BOTH: &str =
            "set both admin.tls_cert and admin.tls_key (PEM files), or neither for plain HTTP";
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Ok(Some(AdminTlsFiles {
                cert,
                key,
                client_ca: self.tls_client_ca.as_deref(),
            })),
            (Some(_), None) => Err(invalid(
                "admin.tls_key",
                "is missing but admin.tls_cert is set",
                BOTH,
            )),
            (None, Some(_)) => Err(invalid(
                "admin.tls_cert",
                "is missing but admin.tls_key is set",
                BOTH,
            )),
            (None, None) if self.tls_client_ca.is_some() => Err(invalid(
                "admin.tls_client_ca",
                "is set but admin.tls_cert and admin.tls_key are not (client certificates are checked only over TLS)",
                "set admin.tls_cert and admin.tls_key too, or remove admin.tls_client_ca",
            )),
            (None, None) => Ok(None),
        }
    }
}

fn yes() -> bool {
    true
}
fn default_admin_bind() -> String {
    "127.0.0.1:9464".into()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    /// Comma-separated `host:port` list. Required.
    pub bootstrap_servers: String,
    /// Consumer group shared by every host of this join. Required.
    pub group_id: String,
    /// Static membership (`group.instance.id`): a restarted host gets its tasks back without a
    /// rebalance. Default: none.
    #[serde(default)]
    pub instance_id: Option<String>,
    /// The consumer group protocol. Default: `auto`.
    #[serde(default)]
    pub group_protocol: GroupProtocol,
    /// Raw librdkafka options, applied after cojoin's own (so they win); a value may come from
    /// the environment or a file, `{ env = "NAME" }` / `{ file = "/path" }` (see
    /// [`crate::secret`]). Default: none.
    #[serde(default)]
    pub options: Options,
}

/// How the group assigns partitions to hosts.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum GroupProtocol {
    /// The new protocol where the broker enables it (Apache Kafka 4.0 and later), else classic.
    #[default]
    Auto,
    /// KIP-848: the broker assigns with its sticky, co-partitioning `range` assignor, and moves
    /// partitions one at a time; tasks that stay keep running through a rebalance.
    Consumer,
    /// librdkafka's eager `range` assignor: every rebalance stops and restarts every task.
    Classic,
}

/// librdkafka options the new group protocol does not have (the broker owns them); set with
/// them, librdkafka refuses to create the consumer.
pub const CLASSIC_ONLY_OPTIONS: [&str; 4] = [
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "partition.assignment.strategy",
    "group.protocol.type",
];

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
    /// (`default_max_future`). [`Config::parse`] sets it from `max_future_setting`.
    #[serde(skip)]
    pub max_future: Duration,
    /// `join.max_future` as written, `None` when left out: read once, by [`Config::parse`].
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
    fn resolve_defaults(&mut self) {
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

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum FailurePolicy {
    /// Retry, then copy the inputs to the dead-letter topic with the error in headers.
    #[default]
    DeadLetter,
    /// Retry, then stop the task (pause its partitions); other tasks keep running.
    Halt,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginConfig {
    /// The plugin component (`.wasm`). Required.
    pub path: PathBuf,
    /// Per-call deadline. Default: `"500ms"`.
    #[serde(default = "default_deadline", with = "duration")]
    pub deadline: Duration,
    /// Memory cap per instance in MiB. Default: 256.
    #[serde(default = "default_memory_mib")]
    pub memory_mib: usize,
    /// Fuel per call; turns fuel metering on. Default: none.
    #[serde(default)]
    pub fuel: Option<u64>,
    /// After a failed call: `dead-letter` or `halt`. Default: `dead-letter`.
    #[serde(default)]
    pub failure: FailurePolicy,
    /// Attempts after the first failed one, at most [`MAX_RETRIES`]. Default: 2.
    #[serde(default = "default_retries")]
    pub retries: u32,
    /// Wait before the first retry; doubles each time, up to [`crate::task::MAX_BACKOFF`] (30 s).
    /// The task waits off its worker. Default: `"100ms"`.
    #[serde(default = "default_backoff", with = "duration")]
    pub backoff: Duration,
    /// Passed to the plugin's `init`. Default: empty.
    #[serde(default)]
    pub config: BTreeMap<String, String>,
    /// Threads that run tasks, each with its own plugin instance (and its own `memory_mib`).
    /// Default: the machine's cores.
    #[serde(default)]
    pub workers: Option<usize>,
    /// Watch `path` and swap in a new file (written in place or renamed in) without a restart.
    /// When `path` is a directory, its newest `.wasm` file is the plugin. Default: true.
    #[serde(default = "yes")]
    pub watch: bool,
}

impl PluginConfig {
    /// `workers`, or the machine's cores.
    pub fn workers(&self) -> usize {
        self.workers
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// The longest one record may be held by a call that keeps failing before its inputs are
    /// dead-lettered (or its task halts): every backoff, plus every attempt taking its deadline.
    pub fn worst_case_per_record(&self) -> Duration {
        let backoffs = (1..=self.retries)
            .map(|retry| crate::task::backoff_before(self.backoff, retry))
            .fold(Duration::ZERO, Duration::saturating_add);
        backoffs.saturating_add(self.deadline.saturating_mul(self.retries.saturating_add(1)))
    }
}

/// The most retries of a failed call `plugin.retries` may ask for.
pub const MAX_RETRIES: u32 = 100;

/// librdkafka's default `max.poll.interval.ms`.
const DEFAULT_MAX_POLL_INTERVAL: Duration = Duration::from_secs(300);

fn default_deadline() -> Duration {
    Duration::from_millis(500)
}
/// The most memory a plugin instance may be given: wasm32 addresses 4 GiB.
pub const MAX_MEMORY_MIB: usize = 4096;

fn default_memory_mib() -> usize {
    256
}
fn default_retries() -> u32 {
    2
}
fn default_backoff() -> Duration {
    Duration::from_millis(100)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputConfig {
    /// Topic for plugin records that name none. Required.
    pub topic: String,
    /// Topic for dead letters; required when any policy is `dead-letter`. Default: none.
    #[serde(default)]
    pub dead_letter_topic: Option<String>,
    /// When set, the only topics besides `topic` a plugin record may name; others are refused
    /// (their inputs dead-lettered as `output-refused`). Default: any topic but the join's inputs.
    #[serde(default)]
    pub allowed_topics: Option<Vec<String>>,
    /// `at-least-once` (outputs produced, then offsets committed) or `exactly-once` (outputs and
    /// offsets in one Kafka transaction per commit interval). Default: `at-least-once`.
    #[serde(default)]
    pub guarantee: Guarantee,
    /// How often offsets are committed (with exactly-once: how often a transaction is committed,
    /// which is the latency a `read_committed` reader sees). Default: `"1s"`, or `"100ms"` with
    /// exactly-once (as Kafka Streams).
    #[serde(default, with = "optional_duration")]
    pub commit_interval: Option<Duration>,
    /// The codec of every batch cojoin writes: outputs, dead letters and the repartition step's
    /// internal topics (librdkafka's `compression.type`, which `kafka.options` may still set and
    /// then wins). Inputs are read whatever codec wrote them. Default: `none`.
    #[serde(default)]
    pub compression: Compression,
}

/// A producer's codec, as librdkafka (and the Java client) name it.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Compression {
    #[default]
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Compression {
    /// The value of librdkafka's `compression.type`.
    pub fn as_str(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

/// What a downstream reader can count on.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Guarantee {
    /// A crash repeats the outputs made since the last commit.
    #[default]
    AtLeastOnce,
    /// Outputs and the input offsets they come from are committed together: a `read_committed`
    /// reader sees each output once, even across crashes and rebalances.
    ExactlyOnce,
}

impl OutputConfig {
    /// The commit interval in force: the configured one, else the guarantee's default.
    pub fn commit_interval(&self) -> Duration {
        self.commit_interval.unwrap_or(match self.guarantee {
            Guarantee::AtLeastOnce => Duration::from_secs(1),
            Guarantee::ExactlyOnce => Duration::from_millis(100),
        })
    }
}

/// Where in the file and what is wrong, without the excerpt of the file that toml's own message
/// quotes: the line may hold an inline password.
fn parse_error(text: &str, e: &toml::de::Error) -> String {
    match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let line_start = before.rfind('\n').map_or(0, |i| i + 1);
            let column = before.len() - line_start + 1;
            // Name the field (its table and key), never its value.
            let table = before[..line_start]
                .lines()
                .rev()
                .map(str::trim)
                .find(|l| l.starts_with('['))
                .unwrap_or("");
            let this_line = text[line_start..].lines().next().unwrap_or("");
            let field = match this_line.split_once('=') {
                Some((key, _)) if !key.trim().starts_with('[') => format!("{table} {}", key.trim()),
                _ => table.to_owned(),
            };
            format!(
                "line {line}, column {column} ({}): {}",
                field.trim(),
                e.message().trim_end()
            )
        }
        None => e.message().trim_end().to_owned(),
    }
}

impl Config {
    pub fn from_file(path: &std::path::Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
            path: path.to_owned(),
            error,
        })?;
        Self::parse(&text).map_err(|e| match e {
            ConfigError::Parse { message, .. } => ConfigError::Parse {
                path: path.to_owned(),
                message,
            },
            other => other,
        })
    }

    /// `max.poll.interval.ms` as `kafka.options` sets it, or librdkafka's default.
    fn max_poll_interval(&self) -> Duration {
        self.kafka
            .options
            .get("max.poll.interval.ms")
            .and_then(|ms| ms.trim().parse().ok())
            .map_or(DEFAULT_MAX_POLL_INTERVAL, Duration::from_millis)
    }

    /// Parses and validates.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let mut config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: PathBuf::new(),
            message: parse_error(text, &e),
        })?;
        config.join.resolve_defaults();
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field, problem: &str, fix| {
            Err(ConfigError::Invalid {
                field,
                problem: problem.to_owned(),
                fix,
            })
        };
        if self.kafka.bootstrap_servers.trim().is_empty() {
            return invalid(
                "kafka.bootstrap_servers",
                "is empty",
                "give host:port of at least one broker",
            );
        }
        if self.kafka.group_id.trim().is_empty() {
            return invalid(
                "kafka.group_id",
                "is empty",
                "name the consumer group all hosts of this join share",
            );
        }
        for set in ["group.protocol", "group.remote.assignor"] {
            if self.kafka.options.contains_key(set) {
                return invalid(
                    "kafka.options",
                    &format!("sets {set:?}, which cojoin sets itself"),
                    "remove it and set kafka.group_protocol = \"auto\", \"consumer\" or \"classic\"",
                );
            }
        }
        if self.kafka.group_protocol == GroupProtocol::Consumer {
            if let Some(set) = CLASSIC_ONLY_OPTIONS
                .iter()
                .find(|o| self.kafka.options.contains_key(**o))
            {
                return invalid(
                    "kafka.options",
                    &format!("sets {set:?}, which the consumer group protocol (KIP-848) does not have: the broker decides it (group.consumer.session.timeout.ms, group.consumer.heartbeat.interval.ms)"),
                    "remove it, or set kafka.group_protocol = \"classic\"",
                );
            }
        }
        for (field, topic) in [
            ("join.left", &self.join.left),
            ("join.right", &self.join.right),
        ] {
            if topic.trim().is_empty() {
                return invalid(field, "is empty", "name the topic to join");
            }
        }
        if self.join.left == self.join.right {
            return invalid(
                "join.right",
                "is the same topic as join.left",
                "join two different topics",
            );
        }
        if self.join.repartition == RepartitionPolicy::Never {
            for (field, selector) in [
                ("join.left_key", &self.join.left_key),
                ("join.right_key", &self.join.right_key),
            ] {
                if !selector.is_record_key() {
                    return invalid(
                        field,
                        &format!("is {selector}, a field of the value, which needs repartitioning, but join.repartition is \"never\""),
                        "set join.repartition = \"auto\", or key the records by that field when producing them",
                    );
                }
            }
        }
        if self.join.partitions == Some(0) {
            return invalid(
                "join.partitions",
                "is zero",
                "give the internal topics' partition count, e.g. 6, or leave it out",
            );
        }
        // 100000 was taken: as many internal partitions on the broker, and as many tasks.
        if let Some(n) = self.join.partitions.filter(|n| *n > MAX_PARTITIONS) {
            return invalid(
                "join.partitions",
                &format!("is {n}, more than {MAX_PARTITIONS} (each is a partition of every internal topic on the broker and a task on some host)"),
                "give the internal topics' partition count, e.g. the input topics' count, or leave it out",
            );
        }
        if self.join.window.is_zero() {
            return invalid(
                "join.window",
                "is zero",
                "give the largest timestamp difference of a match, e.g. \"5m\"",
            );
        }
        if self.plugin.memory_mib == 0 {
            return invalid(
                "plugin.memory_mib",
                "is zero",
                "give a cap in MiB, e.g. 256",
            );
        }
        if self.plugin.memory_mib > MAX_MEMORY_MIB {
            // Checked before it becomes bytes: a larger number shifted into bytes wrapped around
            // to a tiny cap (17592186044417 MiB became 1 MiB) and was accepted.
            return invalid(
                "plugin.memory_mib",
                &format!(
                    "is {} MiB, more than a 32-bit Wasm memory can address ({MAX_MEMORY_MIB} MiB)",
                    self.plugin.memory_mib
                ),
                "give a cap in MiB up to 4096, e.g. 256",
            );
        }
        if self.plugin.workers == Some(0) {
            return invalid(
                "plugin.workers",
                "is zero",
                "give the number of threads running tasks, e.g. 2, or leave it out for one per core",
            );
        }
        if self.plugin.deadline.is_zero() {
            return invalid(
                "plugin.deadline",
                "is zero",
                "give a per-call deadline, e.g. \"500ms\"",
            );
        }
        if self.plugin.retries > MAX_RETRIES {
            return invalid(
                "plugin.retries",
                &format!(
                    "is {}, more than {MAX_RETRIES} (a failed call is made again that many times before its inputs are dead-lettered)",
                    self.plugin.retries
                ),
                "give at most 100 retries, e.g. 2",
            );
        }
        if self.plugin.backoff > crate::task::MAX_BACKOFF {
            return invalid(
                "plugin.backoff",
                &format!(
                    "is {:?}, more than the {:?} a retry waits at most (the backoff doubles up to that)",
                    self.plugin.backoff,
                    crate::task::MAX_BACKOFF
                ),
                "give the wait before the first retry, at most \"30s\", e.g. \"100ms\"",
            );
        }
        let worst = self.plugin.worst_case_per_record();
        let max_poll = self.max_poll_interval();
        if worst > max_poll {
            return invalid(
                "plugin.retries",
                &format!(
                    "is {} with plugin.backoff = {:?} and plugin.deadline = {:?}: one record may be held {worst:?} (the backoffs, doubling up to {:?}, plus {} calls of up to the deadline) before its inputs are dead-lettered, longer than max.poll.interval.ms ({max_poll:?}), Kafka's bound on how long a consumer may take over a record it polled. The task waits off its worker (the other tasks go on), but its partitions commit nothing past that record meanwhile",
                    self.plugin.retries,
                    self.plugin.backoff,
                    self.plugin.deadline,
                    crate::task::MAX_BACKOFF,
                    u64::from(self.plugin.retries) + 1,
                ),
                "lower plugin.retries, plugin.backoff or plugin.deadline (or raise max.poll.interval.ms in kafka.options)",
            );
        }
        if self.output.topic.trim().is_empty() {
            return invalid(
                "output.topic",
                "is empty",
                "name the topic plugin records go to by default",
            );
        }
        let inputs = [&self.join.left, &self.join.right];
        let named = [
            ("output.topic", Some(&self.output.topic)),
            (
                "output.dead_letter_topic",
                self.output.dead_letter_topic.as_ref(),
            ),
        ];
        for (field, topic) in named {
            if let Some(topic) = topic.filter(|t| inputs.contains(t)) {
                return invalid(
                    field,
                    &format!("is {topic:?}, an input topic of the join (it would feed the join its own records)"),
                    "name a topic other than join.left and join.right",
                );
            }
        }
        if let Some(topic) = self
            .output
            .allowed_topics
            .iter()
            .flatten()
            .find(|t| inputs.contains(t))
        {
            return invalid(
                "output.allowed_topics",
                &format!("lists {topic:?}, an input topic of the join (it would feed the join its own results)"),
                "leave join.left and join.right out of it",
            );
        }
        if self.admin.enabled {
            let Ok(addr) = self.admin.bind.parse::<std::net::SocketAddr>() else {
                return invalid(
                    "admin.bind",
                    "is not an address",
                    "give ip:port, e.g. \"127.0.0.1:9464\" (port 0 picks a free one)",
                );
            };
            let token = self.admin.token.as_ref().map(|t| t.expose().trim());
            if !addr.ip().is_loopback() && token.is_none_or(str::is_empty) {
                // An empty token would let any request with `Authorization: Bearer ` through.
                return invalid(
                    "admin.token",
                    "is missing or empty but admin.bind is not a loopback address (anyone who reaches it could swap the plugin)",
                    "set admin.token to a secret, or bind to 127.0.0.1",
                );
            }
            self.admin.tls_files()?;
        }
        let dead_letters = self.join.late == RecordPolicy::DeadLetter
            || self.join.null_keys == RecordPolicy::DeadLetter
            || self.join.tombstones == TombstonePolicy::DeadLetter
            || self.plugin.failure == FailurePolicy::DeadLetter;
        if dead_letters && self.output.dead_letter_topic.is_none() {
            return invalid(
                "output.dead_letter_topic",
                "is missing but a policy is dead-letter (the defaults for join.late, join.null_keys and plugin.failure are)",
                "set output.dead_letter_topic, or set those policies to drop / halt",
            );
        }
        if self.output.commit_interval().is_zero() {
            return invalid(
                "output.commit_interval",
                "is zero",
                "give the time between commits, e.g. \"100ms\" or \"1s\"",
            );
        }
        if self.memory.queue_bytes < MIN_QUEUE_BYTES {
            return invalid(
                "memory.queue_bytes",
                &format!(
                    "is {} bytes, below the 4 MiB a host needs to hold a few records per partition",
                    self.memory.queue_bytes
                ),
                "give at least \"4MiB\" (e.g. \"64MiB\")",
            );
        }
        if self.output.guarantee == Guarantee::ExactlyOnce {
            if let Some(set) = ["transactional.id", "enable.idempotence", "isolation.level"]
                .iter()
                .find(|o| self.kafka.options.contains_key(**o))
            {
                return invalid(
                    "kafka.options",
                    &format!("sets {set:?}, which output.guarantee = \"exactly-once\" sets itself"),
                    "remove it",
                );
            }
        }
        Ok(())
    }
}

/// Byte sizes as a number of bytes or as text: `"64MiB"`, `"1GiB"`, `"512KiB"`, `"1000000"`
/// (`KB`, `MB`, `GB` are taken as the binary units too: a budget, not a disk label).
mod byte_size {
    use serde::{Deserialize, Deserializer};

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Given {
        Number(u64),
        Text(String),
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        match Given::deserialize(d)? {
            Given::Number(n) => Ok(n),
            Given::Text(text) => parse(&text).map_err(serde::de::Error::custom),
        }
    }

    pub fn parse(text: &str) -> Result<u64, String> {
        let bad = || {
            format!("{text:?} is not a size: write e.g. \"64MiB\", \"1GiB\" or a number of bytes")
        };
        let t = text.trim();
        let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let n: u64 = t[..digits].parse().map_err(|_| bad())?;
        let shift = match t[digits..].trim().to_ascii_lowercase().as_str() {
            "" | "b" => 0,
            "k" | "kb" | "kib" => 10,
            "m" | "mb" | "mib" => 20,
            "g" | "gb" | "gib" => 30,
            _ => return Err(bad()),
        };
        n.checked_mul(1 << shift).ok_or_else(bad)
    }

    #[cfg(test)]
    #[test]
    fn sizes_parse_and_nonsense_is_refused() {
        assert_eq!(parse("64MiB"), Ok(64 << 20));
        assert_eq!(parse("1 GiB"), Ok(1 << 30));
        assert_eq!(parse("512kb"), Ok(512 << 10));
        assert_eq!(parse("1000"), Ok(1000));
        for nonsense in ["", "MiB", "1.5GiB", "-1", "64 parsecs", "99999999999999GiB"] {
            assert!(parse(nonsense).is_err(), "{nonsense:?} was accepted");
        }
    }
}

/// Durations as text: `"250ms"`, `"30s"`, `"5m"`, `"2h"`, or combinations such as `"1m30s"`.
/// The most internal partitions `join.partitions` may ask for.
const MAX_PARTITIONS: usize = 10_000;

mod duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        parse(&text).map_err(serde::de::Error::custom)
    }

    pub fn parse(text: &str) -> Result<Duration, String> {
        let bad = || {
            format!("{text:?} is not a duration: write e.g. \"250ms\", \"30s\", \"5m\", \"1h30m\"")
        };
        let mut rest = text.trim();
        if rest.is_empty() {
            return Err(bad());
        }
        let mut total = Duration::ZERO;
        while !rest.is_empty() {
            let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
            let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
            rest = &rest[digits..];
            let unit_len = rest
                .find(|c: char| c.is_ascii_digit())
                .unwrap_or(rest.len());
            let ms = match &rest[..unit_len] {
                "ms" => 1,
                "s" => 1_000,
                "m" => 60_000,
                "h" => 3_600_000,
                "d" => 86_400_000,
                _ => return Err(bad()),
            };
            // Checked: a sum of many huge parts overflowed and panicked `check`.
            total = n
                .checked_mul(ms)
                .and_then(|ms| total.checked_add(Duration::from_millis(ms)))
                .filter(|t| *t <= MAX)
                .ok_or_else(|| {
                    format!("{text:?} is longer than 100 years, the longest duration taken: write a shorter one")
                })?;
            rest = &rest[unit_len..];
        }
        Ok(total)
    }

    /// The longest duration any setting takes: event times are milliseconds in an `i64`, and a
    /// window or grace longer than this means "for ever" in practice.
    const MAX: Duration = Duration::from_secs(100 * 365 * 86_400);

    #[cfg(test)]
    #[test]
    fn durations_parse_and_nonsense_is_refused() {
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert!(parse("5 minutes").is_err());
        assert!(parse("10").is_err());
        assert!(parse("").is_err());
        // 1100 parts of u64::MAX milliseconds: an overflow panicked check (exit 101).
        let huge = "18446744073709551615ms".repeat(1100);
        assert!(parse(&huge).unwrap_err().contains("longer than 100 years"));
        assert!(parse("36501d")
            .unwrap_err()
            .contains("longer than 100 years"));
        assert_eq!(parse("36500d"), Ok(Duration::from_secs(36_500 * 86_400)));
    }
}

/// An optional duration: absent is `None`, present is parsed as [`duration`].
mod optional_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let text = String::deserialize(d)?;
        super::duration::parse(&text)
            .map(Some)
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every section but `[output]`.
    macro_rules! without_output {
        () => {
            r#"
        [kafka]
        bootstrap_servers = "localhost:9092"
        group_id = "g"
        [join]
        left = "orders"
        right = "payments"
        window = "5m"
        [plugin]
        path = "p.wasm"
    "#
        };
    }

    const MINIMAL: &str = concat!(
        without_output!(),
        r#"
        [output]
        topic = "out"
        dead_letter_topic = "dlq"
    "#
    );

    #[test]
    fn a_minimal_file_gets_the_documented_defaults() {
        let c = Config::parse(MINIMAL).unwrap();
        assert_eq!(c.join.kind, Kind::Inner);
        assert_eq!(c.join.grace, Duration::ZERO);
        assert_eq!(c.join.max_idle, Duration::from_millis(100));
        // Left out: the 5 min window plus no grace.
        assert_eq!(c.join.max_future, Duration::from_secs(300));
        assert_eq!(c.join.late, RecordPolicy::DeadLetter);
        assert_eq!(c.plugin.deadline, Duration::from_millis(500));
        assert_eq!(c.plugin.memory_mib, 256);
        assert_eq!(c.plugin.failure, FailurePolicy::DeadLetter);
        assert_eq!(c.plugin.retries, 2);
        assert!(c.plugin.watch);
        assert_eq!(c.plugin.workers, None);
        assert!(c.plugin.workers() >= 1, "one per core");
        assert!(c.admin.enabled);
        assert_eq!(c.admin.bind, "127.0.0.1:9464");
        assert_eq!(c.memory.queue_bytes, 64 << 20);
        assert_eq!(c.memory.state_bytes, 1 << 30);
        assert_eq!(c.state.dir(), std::env::temp_dir().join("cojoin-state"));
        assert_eq!(c.output.compression, Compression::None);
    }

    #[test]
    fn output_compression_takes_librdkafka_s_codec_names_and_refuses_others_by_field() {
        let parse = |output: &str| {
            Config::parse(&format!(
                "{}\n[output]\ntopic = \"out\"\ndead_letter_topic = \"dlq\"\n{output}",
                without_output!()
            ))
        };
        for (text, codec) in [
            ("none", Compression::None),
            ("gzip", Compression::Gzip),
            ("snappy", Compression::Snappy),
            ("lz4", Compression::Lz4),
            ("zstd", Compression::Zstd),
        ] {
            let c = parse(&format!("compression = \"{text}\"")).unwrap();
            assert_eq!(c.output.compression, codec);
            assert_eq!(codec.as_str(), text, "the name librdkafka takes");
        }
        let e = parse("compression = \"brotli\"").unwrap_err().to_string();
        assert!(
            e.contains("[output] compression") && e.contains("brotli") && e.contains("`zstd`"),
            "{e}"
        );
    }

    #[test]
    fn memory_budgets_take_units_and_a_tiny_queue_is_refused_by_name() {
        let with = |memory: &str| format!("{MINIMAL}\n[memory]\n{memory}\n");
        let c = Config::parse(&with("queue_bytes = \"16MiB\"\nstate_bytes = 268435456")).unwrap();
        assert_eq!(
            (c.memory.queue_bytes, c.memory.state_bytes),
            (16 << 20, 256 << 20)
        );
        let err = Config::parse(&with("queue_bytes = \"1KiB\""))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("memory.queue_bytes") && err.contains("4MiB"),
            "{err}"
        );
        // No floor for state: zero puts every full segment of join state on disk.
        let c = Config::parse(&with("state_bytes = 0")).unwrap();
        assert_eq!(c.memory.state_bytes, 0);
        let err = Config::parse(&with("queue_bytes = \"lots\""))
            .unwrap_err()
            .to_string();
        assert!(err.contains("lots") && err.contains("64MiB"), "{err}");
    }

    #[test]
    fn an_admin_server_off_loopback_needs_a_token() {
        let open = format!("{MINIMAL}\n[admin]\nbind = \"0.0.0.0:9464\"\n");
        let err = Config::parse(&open).unwrap_err().to_string();
        assert!(
            err.contains("admin.token") && err.contains("bind to 127.0.0.1"),
            "{err}"
        );
        Config::parse(&format!("{open}token = \"s3cret\"\n")).unwrap();
        for empty in ["", "  "] {
            let err = Config::parse(&format!("{open}token = \"{empty}\"\n"))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("admin.token") && err.contains("empty"),
                "{err}"
            );
        }
        let bad = format!("{MINIMAL}\n[admin]\nbind = \"localhost\"\n");
        let err = Config::parse(&bad).unwrap_err().to_string();
        assert!(
            err.contains("admin.bind") && err.contains("ip:port"),
            "{err}"
        );
    }

    #[test]
    fn admin_tls_needs_both_cert_and_key_and_a_client_ca_needs_them() {
        let admin = |fields: &str| format!("{MINIMAL}\n[admin]\n{fields}\n");
        let cases = [
            ("tls_cert = \"c.pem\"", "admin.tls_key"),
            ("tls_key = \"k.pem\"", "admin.tls_cert"),
            ("tls_client_ca = \"ca.pem\"", "admin.tls_client_ca"),
        ];
        for (fields, field) in cases {
            let err = Config::parse(&admin(fields)).unwrap_err().to_string();
            assert!(
                err.contains(&format!("`{field}`"))
                    && err.contains("admin.tls_cert and admin.tls_key"),
                "{fields}: {err}"
            );
        }
        // Names only: the files are read when the server starts (admin::tls).
        let c = Config::parse(&admin(
            "tls_cert = \"c.pem\"\ntls_key = \"k.pem\"\ntls_client_ca = \"ca.pem\"",
        ))
        .unwrap();
        let files = c.admin.tls_files().unwrap().unwrap();
        assert_eq!(files.cert, std::path::Path::new("c.pem"));
        assert_eq!(files.client_ca, Some(std::path::Path::new("ca.pem")));
        assert_eq!(
            Config::parse(MINIMAL).unwrap().admin.tls_files().unwrap(),
            None
        );
    }

    #[test]
    fn an_unknown_field_is_refused_by_name() {
        let text = MINIMAL.replace("window = \"5m\"", "window = \"5m\"\nwindw = \"1s\"");
        let err = Config::parse(&text).unwrap_err().to_string();
        assert!(err.contains("windw"), "{err}");
    }

    #[test]
    fn join_max_future_left_out_is_window_plus_grace_between_a_minute_and_an_hour() {
        let max_future = |join: &str| {
            let text = MINIMAL.replace("window = \"5m\"", join);
            Config::parse(&text).unwrap().join.max_future
        };
        // The probe's join: a record 59 min ahead was inside the old 1 h default and made every
        // later record of a 10 s window late. Now one more than a minute ahead is refused.
        assert_eq!(
            max_future("window = \"10s\"\ngrace = \"2s\""),
            Duration::from_secs(60)
        );
        assert_eq!(
            max_future("window = \"5m\"\ngrace = \"30s\""),
            Duration::from_secs(330)
        );
        assert_eq!(max_future("window = \"2h\""), Duration::from_secs(3600));
        assert_eq!(
            max_future("window = \"10m\"\ngrace = \"55m\""),
            Duration::from_secs(3600)
        );
        // Set, it is kept as written, whatever the window.
        for (set, kept) in [("1h", 3600), ("3h", 3 * 3600), ("0s", 0)] {
            assert_eq!(
                max_future(&format!("window = \"10s\"\nmax_future = \"{set}\"")),
                Duration::from_secs(kept)
            );
        }
    }

    #[test]
    fn a_bad_duration_names_the_value_and_the_form() {
        let err = Config::parse(&MINIMAL.replace("\"5m\"", "\"5 minutes\""))
            .unwrap_err()
            .to_string();
        assert!(err.contains("5 minutes") && err.contains("30s"), "{err}");
    }

    #[test]
    fn a_memory_cap_past_what_wasm32_addresses_is_refused_not_wrapped() {
        let with = |mib: &str| {
            MINIMAL.replace(
                "path = \"p.wasm\"",
                &format!("path = \"p.wasm\"\nmemory_mib = {mib}"),
            )
        };
        let err = Config::parse(&with("17592186044417"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("plugin.memory_mib") && err.contains("4096"),
            "{err}"
        );
        assert_eq!(
            Config::parse(&with("4096")).unwrap().plugin.memory_mib,
            4096
        );
    }

    #[test]
    fn zero_workers_is_refused_and_a_number_is_kept() {
        let with = |n: &str| {
            MINIMAL.replace(
                "path = \"p.wasm\"",
                &format!("path = \"p.wasm\"\nworkers = {n}"),
            )
        };
        let err = Config::parse(&with("0")).unwrap_err().to_string();
        assert!(
            err.contains("plugin.workers") && err.contains("one per core"),
            "{err}"
        );
        assert_eq!(Config::parse(&with("3")).unwrap().plugin.workers(), 3);
    }

    #[test]
    fn retries_and_backoff_past_their_bounds_or_holding_a_record_too_long_are_refused() {
        let with = |plugin: &str| {
            MINIMAL.replace("path = \"p.wasm\"", &format!("path = \"p.wasm\"\n{plugin}"))
        };
        // The defaults: 100 ms + 200 ms of backoff, three calls of up to 500 ms.
        let c = Config::parse(MINIMAL).unwrap();
        assert_eq!(
            c.plugin.worst_case_per_record(),
            Duration::from_millis(1_800)
        );
        // The issue's settings: 1+2+4+8+16 s and six calls. No longer a stall of the host (the
        // task waits off its worker), and under max.poll.interval.ms: taken.
        let c = Config::parse(&with("retries = 5\nbackoff = \"1s\"")).unwrap();
        assert_eq!(c.plugin.worst_case_per_record(), Duration::from_secs(34));

        let err = Config::parse(&with("retries = 101\nbackoff = \"1ms\""))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`plugin.retries`")
                && err.contains("more than 100")
                && err.contains("at most 100"),
            "{err}"
        );
        let err = Config::parse(&with("backoff = \"31s\""))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`plugin.backoff`")
                && err.contains("30s")
                && err.contains("at most \"30s\""),
            "{err}"
        );
        // 1+2+4+8+16 s, then 30 s (the cap) 15 times: 481 s, past the 300 s default.
        let twenty = with("retries = 20\nbackoff = \"1s\"");
        let err = Config::parse(&twenty).unwrap_err().to_string();
        assert!(
            err.contains("`plugin.retries`")
                && err.contains("max.poll.interval.ms (300s)")
                && err.contains("lower plugin.retries, plugin.backoff or plugin.deadline"),
            "{err}"
        );
        // Kafka told to allow longer: taken.
        let longer = twenty.replace(
            "group_id = \"g\"",
            "group_id = \"g\"\n[kafka.options]\n\"max.poll.interval.ms\" = \"600000\"",
        );
        let c = Config::parse(&longer).unwrap();
        assert_eq!(
            c.plugin.worst_case_per_record(),
            Duration::from_millis(481_000 + 21 * 500)
        );
    }

    #[test]
    fn join_partitions_past_the_bound_is_refused_by_name() {
        let with = |n: &str| {
            MINIMAL.replace(
                "window = \"5m\"",
                &format!("window = \"5m\"\npartitions = {n}"),
            )
        };
        let err = Config::parse(&with("100000")).unwrap_err().to_string();
        assert!(
            err.contains("join.partitions") && err.contains("more than 10000"),
            "{err}"
        );
        assert_eq!(
            Config::parse(&with("64")).unwrap().join.partitions,
            Some(64)
        );
    }

    #[test]
    fn joining_a_topic_with_itself_is_refused() {
        let err = Config::parse(&MINIMAL.replace("\"payments\"", "\"orders\""))
            .unwrap_err()
            .to_string();
        assert!(err.contains("join.right"), "{err}");
    }

    #[test]
    fn dead_letter_policies_need_a_dead_letter_topic() {
        let err = Config::parse(&MINIMAL.replace("dead_letter_topic = \"dlq\"", ""))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("output.dead_letter_topic") && err.contains("drop / halt"),
            "{err}"
        );
        let text = MINIMAL
            .replace("dead_letter_topic = \"dlq\"", "")
            .replace(
                "window = \"5m\"",
                "window = \"5m\"\nlate = \"drop\"\nnull_keys = \"drop\"",
            )
            .replace("path = \"p.wasm\"", "path = \"p.wasm\"\nfailure = \"halt\"");
        Config::parse(&text).unwrap();
    }

    #[test]
    fn a_missing_required_field_is_named() {
        let err = Config::parse(&MINIMAL.replace("group_id = \"g\"", ""))
            .unwrap_err()
            .to_string();
        assert!(err.contains("group_id"), "{err}");
    }

    fn err(output: &str) -> String {
        Config::parse(&format!("{}\n[output]\n{output}", without_output!()))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn outputs_to_the_join_s_own_input_topics_are_refused_with_the_field() {
        let e = err("topic = \"orders\"\ndead_letter_topic = \"dlq\"");
        assert!(
            e.contains("output.topic") && e.contains("input topic"),
            "{e}"
        );
        let e = err("topic = \"out\"\ndead_letter_topic = \"payments\"");
        assert!(e.contains("output.dead_letter_topic"), "{e}");
        let e = err("topic = \"out\"\ndead_letter_topic = \"dlq\"\nallowed_topics = [\"audit\", \"orders\"]");
        assert!(
            e.contains("output.allowed_topics") && e.contains("\"orders\""),
            "{e}"
        );
        let ok = Config::parse(&format!(
            "{}\n[output]\ntopic = \"out\"\ndead_letter_topic = \"dlq\"\nallowed_topics = [\"audit\"]",
            without_output!()
        ))
        .unwrap();
        assert_eq!(ok.output.allowed_topics, Some(vec!["audit".to_owned()]));
    }

    #[test]
    fn exactly_once_commits_every_100_ms_unless_told_and_refuses_options_it_sets() {
        let parse = |output: &str| {
            Config::parse(&format!(
                "{}\n[output]\ntopic = \"out\"\ndead_letter_topic = \"dlq\"\n{output}",
                without_output!()
            ))
        };
        let alo = parse("").unwrap();
        assert_eq!(alo.output.guarantee, Guarantee::AtLeastOnce);
        assert_eq!(alo.output.commit_interval(), Duration::from_secs(1));
        let eos = parse("guarantee = \"exactly-once\"").unwrap();
        assert_eq!(eos.output.commit_interval(), Duration::from_millis(100));
        let eos = parse("guarantee = \"exactly-once\"\ncommit_interval = \"250ms\"").unwrap();
        assert_eq!(eos.output.commit_interval(), Duration::from_millis(250));
        let e = parse("commit_interval = \"0s\"").unwrap_err().to_string();
        assert!(e.contains("output.commit_interval"), "{e}");
        let e = parse("guarantee = \"exactly-twice\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("exactly-twice"), "{e}");
        let e = Config::parse(
            &format!("{}\n[output]\ntopic = \"out\"\ndead_letter_topic = \"dlq\"\nguarantee = \"exactly-once\"", without_output!())
                .replace("[join]", "[kafka.options]\n\"transactional.id\" = \"x\"\n[join]"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("transactional.id"), "{e}");
    }
}
