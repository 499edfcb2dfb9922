//! The broker process: finding free ports, starting `tests/kafka/broker.sh` (plaintext or
//! secured, retried when a picked port was taken) and waiting until it serves, restarting it,
//! signalling it, its CPU time, why it failed, and killing it when the [`Kafka`] is dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};

use super::Security;

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
