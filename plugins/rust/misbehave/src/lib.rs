//! A fixture for the sandbox and failure tests: behaves by the key it is called with.
//!
//! - `loop…`: spins forever (must be stopped by the deadline)
//! - `bomb…`: allocates until memory runs out (must hit the memory cap)
//! - `panic…`: panics (a trap)
//! - `error…`: returns an error
//! - `sleep<N>-…`: sleeps N seconds (a blocking WASI wait the call deadline must bound)
//! - `nap…`: sleeps 20 ms, well within any deadline, then answers as below
//! - `giant…`: one record with a 2 MB value (more than a producer accepts by default)
//! - `to:<topic>:…`: one record to `<topic>`
//! - `init-sleep<N>` in config `init-sleep`: `init` sleeps N seconds
//! - config `hold-wait = <ms>`: `init` makes a clock pollable ready in that many milliseconds and
//!   keeps it, for a later call to wait on under its own, shorter deadline:
//!   - `held-block…`: `pollable.block` on it
//!   - `held-poll…`: `wasi:io/poll.poll` on it alone
//!   - `held-or-nap…`: `poll` on it and on a 20 ms pollable made in the call; answers the indexes
//!     that were ready
//! - `escape…`: tries to read a file, the environment, the arguments and to open a socket to the
//!   address in config `connect` (or 127.0.0.1:9), and reports what happened
//! - anything else: one record echoing the key
//!
//! Config `fail-init = yes` makes `init` fail.

wit_bindgen::generate!({ path: "../../../wit", world: "plugin" });

use std::cell::RefCell;

/// Direct bindings to the WASI waits, which `std` only reaches through `thread::sleep`.
mod waits {
    wit_bindgen::generate!({
        inline: r#"
            package cojoin:misbehave-waits;

            world waits {
                import wasi:clocks/monotonic-clock@0.2.0;
            }

            package wasi:io@0.2.0 {
                interface poll {
                    resource pollable {
                        ready: func() -> bool;
                        block: func();
                    }
                    poll: func(in: list<borrow<pollable>>) -> list<u32>;
                }
            }

            package wasi:clocks@0.2.0 {
                interface monotonic-clock {
                    use wasi:io/poll@0.2.0.{pollable};
                    type instant = u64;
                    type duration = u64;
                    now: func() -> instant;
                    resolution: func() -> duration;
                    subscribe-instant: func(when: instant) -> pollable;
                    subscribe-duration: func(when: duration) -> pollable;
                }
            }
        "#,
        generate_all,
    });
    pub use self::wasi::clocks::monotonic_clock::subscribe_duration;
    pub use self::wasi::io::poll::{poll, Pollable};
}

struct Misbehave;

thread_local! {
    static CONNECT: RefCell<String> = RefCell::new("127.0.0.1:9".to_owned());
    /// The pollable made by `init` under config `hold-wait`.
    static HELD: RefCell<Option<waits::Pollable>> = const { RefCell::new(None) };
}

fn out(key: &[u8], value: String) -> OutputRecord {
    OutputRecord {
        topic: None,
        key: Some(key.to_vec()),
        value: Some(value.into_bytes()),
        headers: Vec::new(),
    }
}

fn escape() -> String {
    let file = match std::fs::read_to_string("/etc/passwd") {
        Ok(text) => format!("READ {} bytes", text.len()),
        Err(e) => format!("denied: {e}"),
    };
    let dir = match std::fs::read_dir("/") {
        Ok(entries) => format!("LISTED {} entries", entries.count()),
        Err(e) => format!("denied: {e}"),
    };
    let env: Vec<String> = std::env::vars().map(|(k, _)| k).collect();
    let args: Vec<String> = std::env::args().collect();
    let addr = CONNECT.with(|c| c.borrow().clone());
    let socket = match std::net::TcpStream::connect(&addr) {
        Ok(_) => format!("CONNECTED to {addr}"),
        Err(e) => format!("denied: {e}"),
    };
    format!(
        "file={file}\ndir={dir}\nenv={}\nargs={}\nsocket={socket}",
        env.len(),
        args.len()
    )
}

/// Runs `wait` on the pollable `init` made (config `hold-wait`).
fn with_held(wait: impl FnOnce(&waits::Pollable) -> String) -> Result<String, String> {
    HELD.with(|held| match &*held.borrow() {
        Some(pollable) => Ok(wait(pollable)),
        None => Err("no held pollable: set config hold-wait".to_owned()),
    })
}

fn act(key: &[u8]) -> Result<Vec<OutputRecord>, String> {
    let k = String::from_utf8_lossy(key);
    if k.starts_with("loop") {
        let mut n: u64 = 0;
        loop {
            n = std::hint::black_box(n.wrapping_add(1));
        }
    } else if k.starts_with("bomb") {
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            hoard.push(vec![1u8; 1 << 20]);
            std::hint::black_box(&hoard);
        }
    } else if k.starts_with("panic") {
        panic!("fixture panic for key {k}");
    } else if k.starts_with("error") {
        Err(format!("fixture error for key {k}"))
    } else if let Some(rest) = k.strip_prefix("sleep") {
        let secs: u64 = rest.split('-').next().and_then(|n| n.parse().ok()).unwrap_or(60);
        std::thread::sleep(std::time::Duration::from_secs(secs));
        Ok(vec![out(key, format!("slept {secs} s"))])
    } else if k.starts_with("nap") {
        std::thread::sleep(std::time::Duration::from_millis(20));
        Ok(vec![out(key, format!("ok {k}"))])
    } else if k.starts_with("giant") {
        Ok(vec![out(key, "x".repeat(2 << 20))])
    } else if let Some(rest) = k.strip_prefix("to:") {
        let topic = rest.split(':').next().unwrap_or_default().to_owned();
        Ok(vec![OutputRecord {
            topic: Some(topic),
            ..out(key, format!("ok {k}"))
        }])
    } else if k.starts_with("held-block") {
        let said = with_held(|p| {
            p.block();
            "held pollable ready".to_owned()
        })?;
        Ok(vec![out(key, said)])
    } else if k.starts_with("held-poll") {
        let said = with_held(|p| format!("ready {:?}", waits::poll(&[p])))?;
        Ok(vec![out(key, said)])
    } else if k.starts_with("held-or-nap") {
        let nap = waits::subscribe_duration(20_000_000);
        let said = with_held(|p| format!("ready {:?}", waits::poll(&[p, &nap])))?;
        Ok(vec![out(key, said)])
    } else if k.starts_with("escape") {
        Ok(vec![out(key, escape())])
    } else {
        Ok(vec![out(key, format!("ok {k}"))])
    }
}

impl Guest for Misbehave {
    fn init(config: Vec<(String, String)>) -> Result<(), String> {
        for (k, v) in config {
            match (k.as_str(), v.as_str()) {
                ("fail-init", "yes") => return Err("fixture init failure (fail-init = yes)".into()),
                ("connect", addr) => CONNECT.with(|c| *c.borrow_mut() = addr.to_owned()),
                ("hold-wait", ms) => {
                    let nanos = ms.parse::<u64>().unwrap_or(9_000) * 1_000_000;
                    let pollable = waits::subscribe_duration(nanos);
                    HELD.with(|held| *held.borrow_mut() = Some(pollable));
                }
                ("init-sleep", secs) => {
                    std::thread::sleep(std::time::Duration::from_secs(secs.parse().unwrap_or(30)))
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn on_match(key: Vec<u8>, _a: Event, _b: Event) -> Result<Vec<OutputRecord>, String> {
        act(&key)
    }

    fn on_expire(key: Vec<u8>, _event: Event, _side: Side) -> Result<Vec<OutputRecord>, String> {
        act(&key)
    }
}

export!(Misbehave);
