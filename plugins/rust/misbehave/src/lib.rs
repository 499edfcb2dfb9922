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
//! - `escape…`: tries to read a file, the environment, the arguments and to open a socket to the
//!   address in config `connect` (or 127.0.0.1:9), and reports what happened
//! - anything else: one record echoing the key
//!
//! Config `fail-init = yes` makes `init` fail.

wit_bindgen::generate!({ path: "../../../wit", world: "plugin" });

use std::cell::RefCell;


struct Misbehave;

thread_local! {
    static CONNECT: RefCell<String> = RefCell::new("127.0.0.1:9".to_owned());
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
