//! Helpers shared by the end-to-end suites in `tests/tests/`.

pub mod acl;
pub mod broker;
pub mod demo;
pub mod hosts;
pub mod http;
pub mod outputs;
pub mod plot;
pub mod scenario;
pub mod stream;

/// The join benchmark's medians and table (`benches/join.rs` uses it as `mod summary`), compiled
/// here too only so that its unit tests run with the library's.
#[cfg(test)]
#[allow(dead_code)]
#[path = "benches/join/summary.rs"]
mod join_summary;

use std::path::PathBuf;
use std::process::{Command, Output};

/// The workspace root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The release `cojoin` binary, built by `cargo test --workspace --release` (the host crate's own
/// tests need it) or `make host`.
pub fn cojoin_bin() -> PathBuf {
    let path = std::env::var_os("COJOIN_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/release/cojoin"));
    assert!(
        path.exists(),
        "{path:?} is missing: run `make host` (or `make test`)"
    );
    path
}

/// A built plugin (the host's own tests' helper, one definition for both).
#[path = "../host/tests/support/plugin_path.rs"]
mod plugin_path;
pub use plugin_path::plugin_path as plugin;

/// Runs `cojoin` with `args`, a test-local compile cache and no stdin.
pub fn cojoin(args: &[&str]) -> Output {
    cojoin_in(&root(), args)
}

/// [`cojoin`] run in `dir`.
pub fn cojoin_in(dir: &std::path::Path, args: &[&str]) -> Output {
    let cache = root().join("target/e2e-plugin-cache");
    Command::new(cojoin_bin())
        .args(args)
        .current_dir(dir)
        .env("COJOIN_CACHE_DIR", cache)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("running cojoin")
}

/// The stdout of a command that must have succeeded; otherwise panics with `what`, its status,
/// stdout and stderr.
pub fn ok(what: &str, out: Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// A Java peer of the benchmarks, host/benches/peers/`project` (built by `make bench-join` or
/// `make bench-latency`): `class` of package dev.cojoin.bench on its classes and the jars Maven
/// copied beside them, with BENCH_JAVA_HEAP as -Xmx (default 1g).
pub fn java_peer(project: &str, class: &str) -> Command {
    let app = root()
        .join("host/benches/peers")
        .join(project)
        .join("target");
    let compiled = app
        .join("classes/dev/cojoin/bench")
        .join(format!("{class}.class"));
    assert!(
        compiled.exists(),
        "the {project} peer is not built: run `make bench-join` (mvn package in {app:?}/..)"
    );
    let heap = std::env::var("BENCH_JAVA_HEAP").unwrap_or_else(|_| "1g".into());
    let mut cmd = Command::new("java");
    cmd.arg(format!("-Xmx{heap}"))
        .arg("-cp")
        .arg(format!(
            "{}:{}/*",
            app.join("classes").display(),
            app.join("libs").display()
        ))
        .arg(format!("dev.cojoin.bench.{class}"));
    cmd
}
