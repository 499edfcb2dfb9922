//! An Apache Kafka broker started as a separate process for one test or benchmark (the
//! single-node KRaft broker of `tests/kafka/broker.sh`, on free loopback ports with a fresh log
//! directory), and the Kafka clients the tests use around it: admin, producer, reader.
//!
//! A broker is plaintext ([`Kafka::start`]) or secured ([`Kafka::start_secured`]: TLS, SASL,
//! mTLS and ACLs, see the script's header). On a secured broker every helper here connects as the
//! super user `admin` (SASL_SSL, SCRAM-SHA-512), so a test sets up topics and reads results as
//! usual; [`Kafka::cojoin_kafka_settings`] gives what the host under test needs to connect as the
//! unprivileged user `cojoin`, and `crate::acl` what `cojoin` may do.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::ClientContext;
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{DeliveryResult, Headers, Message};
use rdkafka::producer::{
    BaseProducer, BaseRecord, DefaultProducerContext, Producer, ProducerContext, ThreadedProducer,
};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientConfig;

use crate::stream::Record;

/// How long a broker may take to serve: a cold JVM on two busy cores takes 5-10 s.
const START_TIMEOUT: Duration = Duration::from_secs(90);

/// `tests/kafka/broker.sh`, the one place that knows how to run the broker.
pub fn broker_script() -> PathBuf {
    crate::root().join("tests/kafka/broker.sh")
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One broker process; stopped (SIGKILL, its data is throwaway) when dropped.
pub struct Kafka {
    child: Child,
    /// Where the helpers connect: the plaintext listener, or a secured broker's SASL_SSL one.
    pub bootstrap: String,
    /// The broker's own log (stdout and stderr).
    pub log: PathBuf,
    /// A secured broker's listeners and credentials; `None` for a plaintext broker.
    pub security: Option<Security>,
    /// How it was started, to start it again ([`Kafka::restart`]).
    command: Vec<String>,
    secured: bool,
}

/// What clients need to reach a secured broker (made afresh by `tests/kafka/broker.sh` at every
/// start, under its log directory).
#[derive(Clone, Debug)]
pub struct Security {
    /// The SASL_SSL listener (SCRAM-SHA-256, SCRAM-SHA-512, PLAIN, OAUTHBEARER), `127.0.0.1:port`.
    pub sasl_ssl: String,
    /// The SSL listener, which requires a client certificate (mTLS), `127.0.0.1:port`.
    pub ssl: String,
    /// The test CA (PEM) that signed the broker's and the clients' certificates.
    pub ca: PathBuf,
    /// The super user.
    pub admin: Credentials,
    /// The user the host under test connects as; it may do what ACLs grant `User:cojoin`.
    pub cojoin: Credentials,
}

/// One user of a secured broker: the same name for SCRAM, PLAIN, OAUTHBEARER and its certificate
/// (CN=`user`), so each way of logging in is the same principal `User:<user>`.
#[derive(Clone, Debug)]
pub struct Credentials {
    pub user: String,
    /// `<user>-secret-<random hex>`, new at each broker start: a test can search output for it.
    pub password: String,
    /// The file that holds the password (for a config's `{ file = "…" }`).
    pub password_file: PathBuf,
    /// The client certificate (PEM), signed by [`Security::ca`].
    pub certificate: PathBuf,
    /// Its private key (PEM, unencrypted).
    pub key: PathBuf,
}

/// How a client authenticates to a secured broker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Auth {
    /// SASL_SSL with SCRAM-SHA-512.
    Scram512,
    /// SASL_SSL with SCRAM-SHA-256.
    Scram256,
    /// SASL_SSL with PLAIN (the password checked against the broker's JAAS config).
    Plain,
    /// The SSL listener with a client certificate.
    Mtls,
    /// SASL_SSL with OAUTHBEARER, an unsigned JWT from librdkafka's built-in token maker (the
    /// broker's default validator accepts any; tests only).
    OAuthBearer,
}

impl Auth {
    pub const ALL: [Auth; 5] = [
        Auth::Scram512,
        Auth::Scram256,
        Auth::Plain,
        Auth::Mtls,
        Auth::OAuthBearer,
    ];
}

impl Security {
    /// The bootstrap address and the librdkafka options with which `who` connects by `how`.
    pub fn settings(&self, who: &Credentials, how: Auth) -> (String, Vec<(String, String)>) {
        let ca = self.ca.display().to_string();
        let sasl = |mechanism: &str| {
            vec![
                ("security.protocol", "SASL_SSL".to_owned()),
                ("sasl.mechanism", mechanism.to_owned()),
                ("ssl.ca.location", ca.clone()),
            ]
        };
        let (bootstrap, options) = match how {
            Auth::Scram512 | Auth::Scram256 | Auth::Plain => {
                let mechanism = match how {
                    Auth::Scram512 => "SCRAM-SHA-512",
                    Auth::Scram256 => "SCRAM-SHA-256",
                    _ => "PLAIN",
                };
                let mut options = sasl(mechanism);
                options.push(("sasl.username", who.user.clone()));
                options.push(("sasl.password", who.password.clone()));
                (&self.sasl_ssl, options)
            }
            Auth::OAuthBearer => {
                let mut options = sasl("OAUTHBEARER");
                options.push(("sasl.oauthbearer.config", format!("principal={}", who.user)));
                // Without a token refresh callback of its own, a client needs librdkafka's.
                options.push(("enable.sasl.oauthbearer.unsecure.jwt", "true".to_owned()));
                (&self.sasl_ssl, options)
            }
            Auth::Mtls => (
                &self.ssl,
                vec![
                    ("security.protocol", "SSL".to_owned()),
                    ("ssl.ca.location", ca.clone()),
                    (
                        "ssl.certificate.location",
                        who.certificate.display().to_string(),
                    ),
                    ("ssl.key.location", who.key.display().to_string()),
                ],
            ),
        };
        let options = options
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        (bootstrap.clone(), options)
    }
}

/// `options` as the lines of a TOML table (`"sasl.mechanism" = "SCRAM-SHA-512"`), e.g. under a
/// cojoin config's `[kafka.options]`.
pub fn toml_options(options: &[(String, String)]) -> String {
    let quote = |s: &str| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""));
    options
        .iter()
        .map(|(k, v)| format!("{} = {}\n", quote(k), quote(v)))
        .collect()
}

impl Kafka {
    /// Starts a broker with its data under `dir/kafka`; returns once it answers metadata.
    pub fn start(dir: &Path) -> Kafka {
        Self::start_with_retries(dir, false, "")
    }

    /// [`Kafka::start`] with broker `settings` (`key=value` lines, tests/kafka/broker.sh's
    /// KAFKA_SETTINGS), kept across [`Kafka::restart`].
    pub fn start_with(dir: &Path, settings: &str) -> Kafka {
        Self::start_with_retries(dir, false, settings)
    }

    /// Starts a secured broker (TLS, SASL, mTLS, StandardAuthorizer; see `tests/kafka/broker.sh`)
    /// with its data and key material under `dir/kafka`; returns once it answers the super user.
    pub fn start_secured(dir: &Path) -> Kafka {
        Self::start_with_retries(dir, true, "")
    }

    fn start_with_retries(dir: &Path, secured: bool, settings: &str) -> Kafka {
        // Free ports picked apart can still collide with another process binding in between: the
        // script refuses a taken port, and a second attempt picks new ones.
        let mut last_failure = String::new();
        for _attempt in 0..3 {
            let ports = [free_port(), free_port(), free_port()];
            match Self::try_start(dir, ports, secured, settings) {
                Ok(kafka) => return kafka,
                Err(why) if why.contains("is taken") => last_failure = why,
                Err(why) => panic!("{why}"),
            }
        }
        panic!("{last_failure}")
    }

    /// `ports`: the clients' listener (plaintext, or SASL_SSL), the controller's, and a secured
    /// broker's SSL listener.
    fn try_start(
        dir: &Path,
        ports: [u16; 3],
        secured: bool,
        settings: &str,
    ) -> Result<Kafka, String> {
        let [port, controller, ssl] = ports;
        let log = dir.join("kafka.log");
        let data = dir.join("kafka");
        let mut args = vec![
            data.display().to_string(),
            port.to_string(),
            controller.to_string(),
        ];
        if secured {
            args.push(ssl.to_string());
        }
        let child = spawn_broker(&args, secured, &log, Some(settings))?;
        let mut kafka = Kafka {
            child,
            bootstrap: format!("127.0.0.1:{port}"),
            log,
            security: None,
            command: args,
            secured,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        if secured {
            kafka.wait_until(deadline, "made its key material", || {
                data.join("users/cojoin.password").exists()
            })?;
            kafka.security = Some(Security::read(&data, port, ssl));
        }
        kafka.wait_serving(deadline, "serving")?;
        Ok(kafka)
    }

    /// Waits until the broker answers metadata (`what` names the wait in a failure).
    fn wait_serving(&mut self, deadline: Instant, what: &str) -> Result<(), String> {
        // The super user's client (SCRAM over TLS) is refused until the broker has its
        // credentials; logging each refusal while it starts would only be noise.
        let consumer: BaseConsumer = self.client().set("log_level", "0").create().unwrap();
        self.wait_until(deadline, what, || {
            consumer
                .fetch_metadata(None, Duration::from_secs(1))
                .is_ok_and(|m| !m.brokers().is_empty())
        })
    }

    /// Restarts the broker as an operator would (SIGTERM, then the same broker again on its data,
    /// listeners and credentials), `down` after it was stopped; returns once it answers metadata
    /// again. How long it was away, from the signal to its first answer.
    pub fn restart(&mut self, down: Duration) -> Duration {
        let stopped = Instant::now();
        signal(self.child.id(), "TERM");
        let deadline = stopped + Duration::from_secs(60);
        while self.child.try_wait().unwrap().is_none() {
            if Instant::now() >= deadline {
                let _ = self.child.kill();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(down.saturating_sub(stopped.elapsed()));
        self.child = spawn_broker(&self.command, self.secured, &self.log, None)
            .unwrap_or_else(|why| panic!("{why}"));
        self.wait_serving(
            Instant::now() + START_TIMEOUT,
            "served again after a restart",
        )
        .unwrap_or_else(|why| panic!("{why}"));
        stopped.elapsed()
    }

    /// The broker's process id (for `kill -STOP`, `kill -CONT`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Polls `done` until it holds; a broker that exits or misses `deadline` is reported with
    /// why (the script's own complaint, the Java version, the log's end).
    fn wait_until(
        &mut self,
        deadline: Instant,
        what: &str,
        mut done: impl FnMut() -> bool,
    ) -> Result<(), String> {
        loop {
            if done() {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                return Err(format!(
                    "the Kafka broker on {} exited ({status}) before {what}; {}",
                    self.bootstrap,
                    self.diagnosis()
                ));
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "the Kafka broker on {} has not {what} after {START_TIMEOUT:?}; {}",
                    self.bootstrap,
                    self.diagnosis()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The librdkafka options with which the helpers connect: none on a plaintext broker, the
    /// super user `admin` over SASL_SSL with SCRAM-SHA-512 on a secured one. With
    /// [`Kafka::producer_with`], for a thread that does not own the `Kafka`.
    pub fn admin_settings(&self) -> Vec<(String, String)> {
        match &self.security {
            None => Vec::new(),
            Some(security) => security.settings(&security.admin, Auth::Scram512).1,
        }
    }

    /// The bootstrap address and librdkafka options (for `[kafka] bootstrap_servers` and
    /// `[kafka.options]`, see [`toml_options`]) with which a cojoin host connects to this secured
    /// broker as `cojoin`, by `how`. Panics on a plaintext broker.
    pub fn cojoin_kafka_settings(&self, how: Auth) -> (String, Vec<(String, String)>) {
        let security = self.security.as_ref().unwrap_or_else(|| {
            panic!(
                "the broker on {} is plaintext: start it with Kafka::start_secured",
                self.bootstrap
            )
        });
        security.settings(&security.cojoin, how)
    }

    /// A client config pointed at this broker, as the super user on a secured one.
    pub(crate) fn client(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &self.bootstrap);
        for (k, v) in self.admin_settings() {
            config.set(k, v);
        }
        config
    }

    /// The Java version and the last lines of the broker's log, for a failure message.
    fn diagnosis(&self) -> String {
        let java = Command::new("java")
            .arg("-version")
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_owned()
            })
            .unwrap_or_else(|e| format!("no java: {e}"));
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let excerpt = lines[lines.len().saturating_sub(30)..].join("\n");
        format!("java: {java}; log {:?} ends with:\n{excerpt}", self.log)
    }

    /// CPU seconds the broker process has used so far (user + system, from /proc): what serving a
    /// benchmark costs the broker on the same cores.
    pub fn cpu_seconds(&self) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()))
            .expect("reading the broker's /proc stat");
        // Fields after the parenthesised command name; utime and stime are the 12th and 13th.
        let rest = &stat[stat.rfind(')').expect("stat has a command name") + 2..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
        // Clock ticks per second: 100 on Linux (sysconf(_SC_CLK_TCK)).
        ticks / 100.0
    }

    /// Creates `topic` with `partitions` partitions and waits until every partition has a leader.
    pub fn create_topic(&self, topic: &str, partitions: i32) {
        self.create_topic_with(topic, partitions, &[]);
    }

    /// A topic with topic-level configs, e.g. `("max.message.bytes", "200")`.
    pub fn create_topic_with(&self, topic: &str, partitions: i32, configs: &[(&str, &str)]) {
        let admin: AdminClient<DefaultClientContext> =
            self.client().create().expect("an admin client");
        let new = configs.iter().fold(
            NewTopic::new(topic, partitions, TopicReplication::Fixed(1)),
            |t, (k, v)| t.set(k, v),
        );
        let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        let results = futures_executor::block_on(admin.create_topics([&new], &options))
            .unwrap_or_else(|e| panic!("creating topic {topic}: {e}"));
        for r in results {
            r.unwrap_or_else(|(t, e)| panic!("creating topic {t}: {e}"));
        }
        self.wait_for_leaders(topic, partitions);
    }

    fn wait_for_leaders(&self, topic: &str, partitions: i32) {
        let consumer: BaseConsumer = self.client().create().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = consumer
                .fetch_metadata(Some(topic), Duration::from_secs(5))
                .ok()
                .and_then(|m| {
                    let t = m.topics().first()?;
                    (t.error().is_none()
                        && t.partitions().len() == partitions as usize
                        && t.partitions().iter().all(|p| p.leader() >= 0))
                    .then_some(())
                })
                .is_some();
            if ready {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "topic {topic}: {partitions} partitions without leaders after 30 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The next offset of each partition of `topic` (its high watermark), from the broker.
    pub fn end_offsets(&self, topic: &str, partitions: i32) -> Vec<i64> {
        self.watermarks(topic, partitions)
            .into_iter()
            .map(|(_, high)| high)
            .collect()
    }

    /// (first offset still there, next offset) of each partition of `topic`.
    pub fn watermarks(&self, topic: &str, partitions: i32) -> Vec<(i64, i64)> {
        let consumer: BaseConsumer = self.client().create().unwrap();
        (0..partitions)
            .map(|p| {
                consumer
                    .fetch_watermarks(topic, p, Duration::from_secs(10))
                    .unwrap_or_else(|e| panic!("watermarks of {topic}-{p}: {e}"))
            })
            .collect()
    }

    /// What `group` has committed for each partition of `topic`: (offset, metadata); offset -1
    /// where nothing is committed.
    pub fn committed(&self, group: &str, topic: &str, partitions: i32) -> Vec<(i64, String)> {
        let consumer: BaseConsumer = self.client().set("group.id", group).create().unwrap();
        let mut tpl = rdkafka::TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition(topic, p);
        }
        let got = consumer
            .committed_offsets(tpl, Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("committed offsets of {group}: {e}"));
        (0..partitions)
            .map(|p| {
                let e = got.find_partition(topic, p).unwrap();
                let offset = match e.offset() {
                    rdkafka::Offset::Offset(o) => o,
                    _ => -1,
                };
                (offset, e.metadata().to_owned())
            })
            .collect()
    }

    pub fn producer(&self, partitioner: &str) -> ThreadedProducer<DefaultProducerContext> {
        Self::producer_with(&self.bootstrap, partitioner, &self.admin_settings())
    }

    /// A producer for the plaintext broker at `bootstrap`, for a thread that does not own the
    /// `Kafka`. Batches as librdkafka does by default.
    pub fn producer_for(
        bootstrap: &str,
        partitioner: &str,
    ) -> ThreadedProducer<DefaultProducerContext> {
        Self::producer_with(bootstrap, partitioner, &[])
    }

    /// [`Kafka::producer_for`] with librdkafka `settings` on top, e.g. [`Kafka::admin_settings`]
    /// for a secured broker.
    pub fn producer_with(
        bootstrap: &str,
        partitioner: &str,
        settings: &[(String, String)],
    ) -> ThreadedProducer<DefaultProducerContext> {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", bootstrap)
            .set("partitioner", partitioner);
        for (k, v) in settings {
            config.set(k, v);
        }
        config
            .create()
            .unwrap_or_else(|e| panic!("a producer for {bootstrap}: {e}"))
    }

    /// Produces one record to `topic` through a new producer with `settings` (e.g. from
    /// [`Kafka::cojoin_kafka_settings`]) and waits for its delivery report: `Ok` once the broker
    /// acknowledged it, else the broker's refusal (`MessageProduction(TopicAuthorizationFailed)`)
    /// or a refused login (`Global(Authentication)`). Gives up after 15 s.
    pub fn try_produce(
        bootstrap: &str,
        settings: &[(String, String)],
        topic: &str,
    ) -> Result<(), KafkaError> {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", bootstrap)
            // A refused topic fails the record at once, a refused login is reported at once
            // (below); anything else that keeps it from the broker fails it here, before the
            // poll below gives up.
            .set("message.timeout.ms", "10000");
        for (k, v) in settings {
            config.set(k, v);
        }
        let producer: BaseProducer<DeliveryReport> = config
            .create_with_context(DeliveryReport::default())
            .unwrap_or_else(|e| panic!("a producer for {bootstrap}: {e}"));
        producer
            .send(BaseRecord::to(topic).key("probe").payload("probe"))
            .map_err(|(e, _)| e)?;
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            producer.poll(Duration::from_millis(100));
            if let Some(result) = producer.context().0.lock().unwrap().take() {
                return result;
            }
        }
        panic!("producing to {topic} on {bootstrap}: no delivery report after 15 s")
    }

    /// Produces `records`, keyed, to their topic; `partition` pins them when given.
    pub fn produce(
        &self,
        producer: &ThreadedProducer<DefaultProducerContext>,
        records: &[Record],
        partition: Option<i32>,
    ) {
        Self::produce_with(producer, records, partition)
    }

    /// [`Kafka::produce`] without the broker at hand.
    pub fn produce_with(
        producer: &ThreadedProducer<DefaultProducerContext>,
        records: &[Record],
        partition: Option<i32>,
    ) {
        for r in records {
            let mut record = BaseRecord::to(r.topic)
                .key(&r.key)
                .payload(&r.value)
                .timestamp(r.timestamp);
            record.partition = partition;
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((e, back)) => {
                        assert!(
                            e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull),
                            "producing to {}: {e}",
                            r.topic
                        );
                        record = back;
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            }
        }
        producer.flush(Duration::from_secs(30)).unwrap();
    }

    /// A reader of one topic from the beginning, by assignment (no group to join).
    pub fn reader(&self, topic: &str, partitions: i32) -> Reader {
        let consumer: BaseConsumer = self
            .client()
            .set("group.id", "e2e-reader")
            .set("enable.auto.commit", "false")
            .create()
            .unwrap();
        let mut tpl = rdkafka::TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition_offset(topic, p, rdkafka::Offset::Beginning)
                .unwrap();
        }
        consumer.assign(&tpl).unwrap();
        Reader {
            consumer,
            records: Vec::new(),
        }
    }
}

impl Security {
    /// The material `tests/kafka/broker.sh` made in `data` (its log directory) for listeners on
    /// `sasl_ssl` and `ssl`.
    fn read(data: &Path, sasl_ssl: u16, ssl: u16) -> Security {
        let user = |name: &str| {
            let password_file = data.join(format!("users/{name}.password"));
            Credentials {
                user: name.to_owned(),
                password: std::fs::read_to_string(&password_file)
                    .unwrap_or_else(|e| panic!("reading {password_file:?}: {e}")),
                password_file,
                certificate: data.join(format!("tls/{name}.pem")),
                key: data.join(format!("tls/{name}.key")),
            }
        };
        Security {
            sasl_ssl: format!("127.0.0.1:{sasl_ssl}"),
            ssl: format!("127.0.0.1:{ssl}"),
            ca: data.join("tls/ca.pem"),
            admin: user("admin"),
            cojoin: user("cojoin"),
        }
    }
}

/// The delivery report of [`Kafka::try_produce`]'s one record, or the refusal of its login.
#[derive(Default)]
struct DeliveryReport(std::sync::Mutex<Option<Result<(), KafkaError>>>);

impl ClientContext for DeliveryReport {
    /// librdkafka keeps a record whose login was refused queued (it retries the login) until the
    /// record times out; the refusal itself comes here, at once.
    fn error(&self, error: KafkaError, _reason: &str) {
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::Authentication) {
            self.0.lock().unwrap().get_or_insert(Err(error));
        }
    }
}

impl ProducerContext for DeliveryReport {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        let outcome = result.as_ref().map(|_| ()).map_err(|(e, _)| e.clone());
        *self.0.lock().unwrap() = Some(outcome);
    }
}

/// Runs `tests/kafka/broker.sh` with `args` and broker `settings` (KAFKA_SETTINGS), its output
/// written to `log`; `None`: the broker made earlier in the same directory, started again with its
/// data and settings (KAFKA_RESTART=1), its output appended.
fn spawn_broker(
    args: &[String],
    secured: bool,
    log: &Path,
    settings: Option<&str>,
) -> Result<Child, String> {
    let again = settings.is_none();
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(again)
        .write(true)
        .truncate(!again)
        .open(log)
        .unwrap();
    let mut command = Command::new(broker_script());
    command.args(args);
    // Set either way: a KAFKA_SECURITY in the test's own environment must not choose.
    command.env(
        "KAFKA_SECURITY",
        if secured { "secured" } else { "plaintext" },
    );
    command.env("KAFKA_RESTART", if again { "1" } else { "0" });
    if let Some(settings) = settings {
        command.env("KAFKA_SETTINGS", settings);
    }
    command
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .map_err(|e| format!("starting {:?}: {e}", broker_script()))
}

/// `kill -<name> <pid>`.
pub fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{name} {pid}");
}

impl Drop for Kafka {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A record read back: key, value and headers as text.
#[derive(Clone, Debug)]
pub struct ReadRecord {
    /// When the reader got it (for gaps in processing).
    pub arrived: Instant,
    pub key: String,
    pub value: String,
    pub headers: Vec<(String, String)>,
}

impl ReadRecord {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

pub struct Reader {
    consumer: BaseConsumer,
    /// Everything read so far, in arrival order.
    pub records: Vec<ReadRecord>,
}

impl Reader {
    /// Reads until `done(records so far)` holds or `timeout` passes; whether it held.
    pub fn read_while_not(
        &mut self,
        timeout: Duration,
        done: impl Fn(&[ReadRecord]) -> bool,
    ) -> bool {
        let deadline = Instant::now() + timeout;
        while !done(&self.records) {
            if Instant::now() >= deadline {
                return false;
            }
            self.poll_once(Duration::from_millis(100));
        }
        true
    }

    /// Reads until `done(records so far)` holds; panics with `what` after `timeout`.
    pub fn read_until(
        &mut self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&[ReadRecord]) -> bool,
    ) -> &[ReadRecord] {
        let deadline = Instant::now() + timeout;
        while !done(&self.records) {
            assert!(
                Instant::now() < deadline,
                "{what}: not reached after {timeout:?} ({} records read)",
                self.records.len()
            );
            self.poll_once(Duration::from_millis(100));
        }
        &self.records
    }

    /// Reads whatever arrives during `period`.
    pub fn read_for(&mut self, period: Duration) -> &[ReadRecord] {
        let until = Instant::now() + period;
        while Instant::now() < until {
            self.poll_once(Duration::from_millis(100));
        }
        &self.records
    }

    fn poll_once(&mut self, timeout: Duration) {
        let Some(result) = self.consumer.poll(timeout) else {
            return;
        };
        let m = match result {
            Ok(m) => m,
            // The broker away (a test restarting it): the consumer reconnects by itself.
            Err(KafkaError::MessageConsumption(
                RDKafkaErrorCode::BrokerTransportFailure | RDKafkaErrorCode::AllBrokersDown,
            )) => return,
            Err(e) => panic!("reading from Kafka: {e}"),
        };
        let text = |b: Option<&[u8]>| String::from_utf8_lossy(b.unwrap_or_default()).into_owned();
        let headers = m
            .headers()
            .map(|h| {
                h.iter()
                    .map(|h| (h.key.to_owned(), text(h.value)))
                    .collect()
            })
            .unwrap_or_default();
        self.records.push(ReadRecord {
            arrived: Instant::now(),
            key: text(m.key()),
            value: text(m.payload()),
            headers,
        });
    }
}

impl Kafka {
    /// The broker's directory of partition `p` of `topic`, where its log segments are
    /// (`tests/kafka/broker.sh` keeps its data in `<dir>/kafka/data`, beside this log,
    /// `<dir>/kafka.log`).
    pub fn partition_dir(&self, topic: &str, p: i32) -> PathBuf {
        self.log
            .with_file_name("kafka")
            .join("data")
            .join(format!("{topic}-{p}"))
    }

    /// Bytes of the log segments (`*.log`) of `topic`'s partitions on disk: what its records
    /// take, compressed as their producers wrote them.
    pub fn bytes_on_disk(&self, topic: &str, partitions: i32) -> u64 {
        (0..partitions)
            .flat_map(|p| {
                let dir = self.partition_dir(topic, p);
                std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("reading {dir:?}: {e}"))
            })
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|e| e == "log"))
            .map(|path| std::fs::metadata(&path).unwrap().len())
            .sum()
    }
}
