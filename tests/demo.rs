//! `cojoin demo` running in the background, as a host to deploy plugins to: its admin URL, and
//! the result lines it prints, as they come.

use std::io::BufRead as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::{cojoin_bin, root};

/// Records in a demo that outlives any test or benchmark here (the demo produces in compressed
/// real time: this is many minutes of it).
const EVENTS: &str = "2000000";

pub struct RunningDemo {
    child: Child,
    /// The admin server's base URL, e.g. `http://127.0.0.1:40123`.
    pub admin: String,
    lines: Receiver<String>,
}

impl RunningDemo {
    /// Starts the demo with `plugin` and waits for its admin URL (30 s at most).
    pub fn start(plugin: &Path) -> RunningDemo {
        let mut child = Command::new(cojoin_bin())
            .args(["demo", "--events", EVENTS, "--plugin"])
            .arg(plugin)
            .env("COJOIN_CACHE_DIR", root().join("target/e2e-plugin-cache"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting cojoin demo");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut demo = RunningDemo {
            child,
            admin: String::new(),
            lines,
        };
        let line = demo
            .wait_for(Duration::from_secs(30), |l| l.contains("admin: "))
            .expect("the demo prints its admin URL within 30 s");
        let url = line.split("admin: ").nth(1).unwrap();
        demo.admin = url.split("/metrics").next().unwrap_or(url).to_owned();
        demo
    }

    /// The first line printed from now on that `matches`, or None after `timeout`.
    pub fn wait_for(
        &mut self,
        timeout: Duration,
        matches: impl Fn(&str) -> bool,
    ) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if matches(&line) => return Some(line),
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    /// Forgets the lines printed so far.
    pub fn skip_printed(&mut self) {
        while self.lines.try_recv().is_ok() {}
    }
}

impl Drop for RunningDemo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
