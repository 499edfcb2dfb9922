//! `cojoin run` processes for the broker tests: a config written for the test's broker, one
//! process per host with its JSON log in a file, kill -9, SIGTERM and restart, the assignments it
//! logged.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A join config for a broker at `bootstrap`: `orders` left-joined with `payments` in a 10 s
/// window, short group timeouts so that a killed host's tasks move within seconds.
///
/// `max_idle` is 1 s, not the default 100 ms: the tests replay minutes of event time in about a
/// second, so a fetch of one partition that lags the other's by more than 100 ms (seen on tansu
/// under three hosts: 4-7 orders dead-lettered as late per run, about one run in three) spans more
/// than the window. Users replaying a backlog need the same (Kafka Streams: max.task.idle.ms).
pub fn join_config(bootstrap: &str, group: &str, plugin: &Path, kind: &str) -> String {
    join_config_for("classic", bootstrap, group, plugin, kind)
}

/// [`join_config`] for a group protocol: `classic` with a 6 s session timeout (client side),
/// `consumer` (KIP-848), whose session timeout the broker sets (10 s in tests/kafka/broker.sh), or
/// `auto` (the broker's choice, with the broker's session timeout).
pub fn join_config_for(
    protocol: &str,
    bootstrap: &str,
    group: &str,
    plugin: &Path,
    kind: &str,
) -> String {
    let group_settings = match protocol {
        "classic" => {
            "group_protocol = \"classic\"\n[kafka.options]\n\"session.timeout.ms\" = \"6000\"\n\"heartbeat.interval.ms\" = \"500\"\n\"max.poll.interval.ms\" = \"10000\""
        }
        "consumer" => {
            "group_protocol = \"consumer\"\n[kafka.options]\n\"max.poll.interval.ms\" = \"10000\""
        }
        "auto" => "group_protocol = \"auto\"\n[kafka.options]\n\"max.poll.interval.ms\" = \"10000\"",
        other => panic!("no group protocol {other:?}"),
    };
    format!(
        r#"
[kafka]
bootstrap_servers = "{bootstrap}"
group_id = "{group}"
{group_settings}
[join]
left = "orders"
right = "payments"
kind = "{kind}"
window = "10s"
max_idle = "1s"
[plugin]
path = "{plugin}"
retries = 1
backoff = "50ms"
[output]
topic = "orders-paid"
dead_letter_topic = "dlq"
[admin]
bind = "127.0.0.1:0"
"#,
        plugin = plugin.display()
    )
}

/// Partitions held of the left and the right topic.
type Held = (Vec<i32>, Vec<i32>);

/// One `cojoin run` process; dropping it kills the process.
#[must_use = "dropping a HostProcess kills it"]
pub struct HostProcess {
    pub name: String,
    config: PathBuf,
    pub log: PathBuf,
    child: Option<Child>,
    /// Logs of earlier runs of this host (before a kill), kept for the assignment check.
    runs: Vec<PathBuf>,
}

impl HostProcess {
    pub fn start(dir: &Path, name: &str, config_text: &str) -> HostProcess {
        let config = dir.join(format!("{name}.toml"));
        std::fs::write(&config, config_text).unwrap();
        let mut host = HostProcess {
            name: name.to_owned(),
            config,
            log: PathBuf::new(),
            child: None,
            runs: Vec::new(),
        };
        host.spawn(dir);
        host
    }

    fn spawn(&mut self, dir: &Path) {
        self.log = dir.join(format!("{}.run{}.log", self.name, self.runs.len()));
        self.runs.push(self.log.clone());
        let file = std::fs::File::create(&self.log).unwrap();
        let child = Command::new(crate::cojoin_bin())
            .args(["--log-format", "json", "run", "--config"])
            .arg(&self.config)
            .env(
                "COJOIN_CACHE_DIR",
                crate::root().join("target/e2e-plugin-cache"),
            )
            // COJOIN_E2E_LOG: a finer filter for a diagnosis, e.g. "info,cojoin::report=debug".
            .env(
                "COJOIN_LOG",
                std::env::var("COJOIN_E2E_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("starting cojoin run");
        self.child = Some(child);
    }

    /// SIGKILL: no revoke, no flush, no commit.
    pub fn kill9(&mut self) {
        let mut child = self.child.take().expect("host running");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// SIGTERM, as a supervisor stops a host: it should finish, commit and leave the group.
    pub fn terminate(&mut self) {
        self.signal("TERM");
    }

    /// Sends signal `name` (`STOP`, `CONT`, `TERM`) to the process.
    pub fn signal(&self, name: &str) {
        crate::broker::signal(self.child.as_ref().expect("host running").id(), name);
    }

    /// Whether the process has exited (and then forgets it, so that it can be restarted).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        let status = self.child.as_mut()?.try_wait().unwrap()?;
        self.child = None;
        Some(status)
    }

    /// A new process for the same host, as a supervisor would start after a crash.
    pub fn restart(&mut self, dir: &Path) {
        assert!(self.child.is_none(), "{} is still running", self.name);
        self.spawn(dir);
    }

    /// Whether a process of this host was started and not killed or found exited (it may have
    /// exited since: see [`HostProcess::is_running`]).
    pub fn is_started(&self) -> bool {
        self.child.is_some()
    }

    /// Whether the process is still running (it has not exited on its own).
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }

    /// Waits for the process to exit on its own; its exit status and log text.
    pub fn wait_exit(&mut self, timeout: Duration) -> (std::process::ExitStatus, String) {
        let child = self.child.as_mut().expect("host running");
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                self.child = None;
                return (status, std::fs::read_to_string(&self.log).unwrap());
            }
            assert!(
                Instant::now() < deadline,
                "{} still running after {timeout:?}",
                self.name
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// What this host held after each assignment and each revoke it logged, over all its runs
    /// (each run starts holding nothing), in order: (left, right) partitions.
    pub fn assignments(&self) -> Vec<(Vec<i32>, Vec<i32>)> {
        self.group_log().into_iter().map(|(held, _)| held).collect()
    }

    /// What the current run (since the last start or restart) holds after its latest assignment
    /// or revoke; `None` before it logged one. Unlike `assignments().last()`, not the last run's:
    /// a run just restarted has not set its SIGTERM handler yet.
    pub fn held_in_this_run(&self) -> Option<Held> {
        group_log_of(std::slice::from_ref(self.runs.last()?))
            .pop()
            .map(|(held, _)| held)
    }

    /// Every "assignment" and "partitions revoked" line of every run, with what was held after
    /// it, and the tasks started right after it (before the next such line).
    fn group_log(&self) -> Vec<(Held, Vec<i32>)> {
        group_log_of(&self.runs)
    }

    /// Every task this host started, in order, over all its runs.
    pub fn tasks_started(&self) -> Vec<i32> {
        self.group_log()
            .into_iter()
            .flat_map(|(_, started)| started)
            .collect()
    }

    /// Tasks this host started while it did not hold both their partitions (must be none).
    pub fn tasks_started_unpaired(&self) -> Vec<i32> {
        self.group_log()
            .into_iter()
            .flat_map(|((left, right), started)| {
                started
                    .into_iter()
                    .filter(move |p| !(left.contains(p) && right.contains(p)))
            })
            .collect()
    }

    /// The admin server's URL this run logged, once it has.
    pub fn admin_url(&self, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(url) = logged_admin_url(&self.log) {
                return url;
            }
            assert!(
                Instant::now() < deadline,
                "{} logged no admin URL:\n{}",
                self.name,
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The log of every run, for a failure message.
    pub fn log_text(&self) -> String {
        self.runs
            .iter()
            .map(|log| std::fs::read_to_string(log).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n--- restart ---\n")
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The admin server's URL a `cojoin run` JSON log at `path` announced, if it has yet.
pub fn logged_admin_url(path: &Path) -> Option<String> {
    log_lines(path).into_iter().find_map(|l| {
        (l["fields"]["message"]
            .as_str()?
            .starts_with("admin server listening"))
        .then(|| l["fields"]["url"].as_str().map(str::to_owned))?
    })
}

fn log_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// `"[0, 3]"` (a Debug-printed Vec) → `[0, 3]`.
fn parse_list(text: &str) -> Vec<i32> {
    text.trim_matches(|c| c == '[' || c == ']')
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect()
}

/// Waits until the hosts' latest assignments cover partitions `0..partitions` exactly once
/// each, every host holding the same partition numbers of both topics.
pub fn wait_for_stable_group(hosts: &[&HostProcess], partitions: i32, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let latest: Vec<_> = hosts.iter().map(|h| h.assignments().pop()).collect();
        if latest.iter().all(Option::is_some) {
            let mut held: Vec<i32> = latest
                .iter()
                .flatten()
                .flat_map(|(l, _)| l.clone())
                .collect();
            held.sort_unstable();
            let all_paired = latest
                .iter()
                .flatten()
                .all(|(l, r)| l == r && !l.is_empty());
            if all_paired && held == (0..partitions).collect::<Vec<_>>() {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "group not stable after {timeout:?}: latest assignments {latest:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// [`HostProcess::group_log`] of the run logs `runs`.
///
/// A group that reads one topic (the stream of a join with a global table) logs its partitions
/// as `stream`: they are read as both sides, a one-topic task being whole by itself.
fn group_log_of(runs: &[PathBuf]) -> Vec<(Held, Vec<i32>)> {
    let mut out: Vec<(Held, Vec<i32>)> = Vec::new();
    for log in runs {
        let (mut left, mut right) = (Vec::new(), Vec::new());
        for line in log_lines(log) {
            let field = |name: &str| parse_list(line["fields"][name].as_str().unwrap_or(""));
            let sides = || match line["fields"]["stream"].as_str() {
                Some(stream) => (parse_list(stream), parse_list(stream)),
                None => (field("left"), field("right")),
            };
            match line["fields"]["message"].as_str() {
                Some("assignment") => {
                    (left, right) = sides();
                }
                Some("partitions revoked") => {
                    let (l, r) = sides();
                    left.retain(|p| !l.contains(p));
                    right.retain(|p| !r.contains(p));
                }
                Some("task assigned") => {
                    if let (Some(last), Some(task)) =
                        (out.last_mut(), line["fields"]["task"].as_i64())
                    {
                        last.1.push(task as i32);
                    }
                    continue;
                }
                _ => continue,
            }
            out.push(((left.clone(), right.clone()), Vec::new()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn debug_printed_lists_parse() {
        assert_eq!(super::parse_list("[0, 3]"), vec![0, 3]);
        assert_eq!(super::parse_list("[]"), Vec::<i32>::new());
    }
}
