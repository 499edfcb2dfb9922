//! The admin HTTP server: `/metrics` (Prometheus text), `/healthz`, `/readyz`, `GET /plugins`
//! and `PUT /plugins` (a `.wasm` body: validated, swapped in, or refused with the reason).
//!
//! Its own threads ([`server`]), one per connection: it only reads the shared metrics and calls
//! the registry, and a swap compiles for seconds, which must stall neither the join loop nor the
//! other requests. Over HTTPS when `admin.tls_cert` and `admin.tls_key` are set ([`tls`]).

pub mod server;
pub mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, Result};
use serde_json::json;
use sha2::{Digest as _, Sha256};

use crate::config::AdminConfig;
use crate::hotswap::swap_recorded;
use crate::metrics::Metrics;
use crate::plugin::PluginRegistry;

/// `/healthz` fails when the join loop has not finished a round for this long.
const STALL: Duration = Duration::from_secs(30);
/// `/readyz` fails when every batch of the repartition step has failed for this long (the join
/// waits on its internal topic), and `/healthz` for [`STEP_STALL`]: longer, so that a broker
/// outage the host rides out does not get it restarted.
const STEP_UNREADY: Duration = Duration::from_secs(30);
const STEP_STALL: Duration = Duration::from_secs(300);

/// How long every batch of the repartition step has failed for, if it is failing.
fn step_failing(metrics: &Metrics) -> Option<Duration> {
    match metrics.read(|m| m.repartition_failing_since_ms) {
        0 => None,
        since => Some(Duration::from_millis(now_ms().saturating_sub(since))),
    }
}

/// What the server reads; the join loop updates `heartbeat_ms` (Unix ms) every round.
#[derive(Clone)]
pub struct AdminState {
    pub metrics: Arc<Metrics>,
    pub registry: Arc<PluginRegistry>,
    pub heartbeat_ms: Arc<AtomicU64>,
    pub token: Option<String>,
    /// `plugin.path` when it is a directory: uploads are written there, so the watch and a
    /// restart load them. `None`: uploads last until the file changes or the host restarts.
    pub upload_dir: Option<PathBuf>,
}

/// One request, as [`route`] sees it. `body` reads the upload (only `PUT /plugins` calls it);
/// its error is a status and a reason.
pub struct Request<'a> {
    pub method: &'a str,
    /// Path and query, e.g. `/plugins?name=order-paid`.
    pub target: &'a str,
    pub authorization: Option<&'a str>,
    pub body: &'a mut dyn FnMut() -> Result<Vec<u8>, (u16, String)>,
}

pub struct AdminServer {
    pub addr: SocketAddr,
    https: bool,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl AdminServer {
    /// Reads the TLS files (a problem is a config error, before anything connects), binds, and
    /// serves on its own thread until dropped.
    pub fn start(config: &AdminConfig, state: AdminState) -> Result<AdminServer> {
        let tls = tls::server_config(config)?;
        let listener = std::net::TcpListener::bind(&config.bind).map_err(|e| {
            anyhow!(
                "admin server cannot listen on {} (admin.bind): {e}; choose another port, 0 for any free one, or set admin.enabled = false",
                config.bind
            )
        })?;
        let https = tls.is_some();
        let stop = Arc::new(AtomicBool::new(false));
        let (health, health_metrics) = (state.heartbeat_ms.clone(), state.metrics.clone());
        let (addr, thread) = server::start(
            listener,
            server::Limits::default(),
            tls,
            stop.clone(),
            move |request| route(request, &state),
            move || healthz(&health, &health_metrics),
        )?;
        if !https && !addr.ip().is_loopback() {
            tracing::warn!(
                %addr,
                "the admin server speaks plain HTTP off loopback: admin.token and uploads cross the network in clear; set admin.tls_cert and admin.tls_key"
            );
        }
        Ok(AdminServer {
            addr,
            https,
            stop,
            thread: Some(thread),
        })
    }

    pub fn url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }
}

impl Drop for AdminServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A response before it is written: status, content type, body.
#[derive(Debug, PartialEq)]
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
}

impl Reply {
    pub fn text(status: u16, body: impl Into<String>) -> Reply {
        Reply {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.into(),
        }
    }
}

fn text(status: u16, body: impl Into<String>) -> Reply {
    Reply::text(status, body)
}

fn json_reply(status: u16, value: serde_json::Value) -> Reply {
    Reply {
        status,
        content_type: "application/json",
        body: format!("{value:#}\n"),
    }
}

/// `/healthz`: 200 while the join loop finishes rounds and the repartition step (if any)
/// writes, 503 once either has stalled.
fn healthz(heartbeat_ms: &AtomicU64, metrics: &Metrics) -> Reply {
    let age = now_ms().saturating_sub(heartbeat_ms.load(Ordering::Relaxed));
    if age > STALL.as_millis() as u64 {
        return text(
            503,
            format!("the join loop has not run for {} s\n", age / 1000),
        );
    }
    match step_failing(metrics).filter(|d| *d > STEP_STALL) {
        Some(d) => text(
            503,
            format!(
                "every batch of the repartition step has failed for {} s (see the log)\n",
                d.as_secs()
            ),
        ),
        None => text(200, "ok\n"),
    }
}

/// Whether `authorization` is `Bearer <token>`. The scheme in any case (RFC 7235: `bearer` is
/// `Bearer`); the token compared by SHA-256 digest in constant time, so that how long a refusal
/// takes tells neither how much of a guess was right nor the token's length. Spaces around the
/// token do not count (the config check trims them too).
fn bearer_matches(authorization: Option<&str>, token: &str) -> bool {
    let Some((scheme, given)) = authorization.and_then(|a| a.trim().split_once(' ')) else {
        return false;
    };
    let (given, expected) = (Sha256::digest(given.trim()), Sha256::digest(token.trim()));
    let differ = given
        .iter()
        .zip(expected.iter())
        .fold(0u8, |acc, (a, b)| acc | (a ^ b));
    // black_box: the optimiser may not turn the fold into a loop that stops at the first byte.
    scheme.eq_ignore_ascii_case("bearer") & (std::hint::black_box(differ) == 0)
}

/// The name of an upload: `PUT /plugins/<file>.wasm` (what `curl -T file.wasm URL/plugins/`
/// sends) or `PUT /plugins?name=<name>`; else "upload".
fn upload_name(target: &str) -> Option<String> {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let named = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("name="))
        .or_else(|| path.strip_prefix("/plugins/"))
        .filter(|n| !n.is_empty())?;
    let name = named.strip_suffix(".wasm").unwrap_or(named);
    // A file name, never a path: it may be written into the plugin directory.
    let ok = !name.is_empty()
        && name.len() <= 100
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !name.starts_with('.');
    ok.then(|| name.to_owned())
}

/// Routes one request.
pub fn route(request: Request<'_>, state: &AdminState) -> Reply {
    let (method, target) = (request.method, request.target);
    let path = target.split('?').next().unwrap_or("");
    if path == "/healthz" {
        if method != "GET" && method != "HEAD" {
            return text(405, format!("{method} is not allowed on {path}: use GET\n"));
        }
        return healthz(&state.heartbeat_ms, &state.metrics);
    }
    if let Some(token) = &state.token {
        if !bearer_matches(request.authorization, token) {
            return text(
                401,
                "missing or wrong bearer token (Authorization: Bearer <admin.token>)\n",
            );
        }
    }
    let plugins = path == "/plugins" || path.starts_with("/plugins/");
    match (method, path) {
        ("GET", "/metrics") => Reply {
            status: 200,
            content_type: crate::metrics::CONTENT_TYPE,
            body: state.metrics.render(),
        },
        ("GET", "/readyz") => match step_failing(&state.metrics).filter(|d| *d > STEP_UNREADY) {
            Some(d) => text(
                503,
                format!(
                    "not ready: every batch of the repartition step has failed for {} s (see the log)\n",
                    d.as_secs()
                ),
            ),
            None if state.metrics.read(|m| m.processing) => text(200, "ready\n"),
            None => text(503, "not ready: no task assigned yet (joining the group)\n"),
        },
        ("GET", "/plugins") => json_reply(200, plugins_json(state)),
        ("PUT", _) if plugins => upload(request, state),
        (_, "/metrics" | "/readyz") => text(405, format!("{method} is not allowed on {path}\n")),
        _ if plugins => text(
            405,
            format!("{method} is not allowed on {path}: GET or PUT /plugins\n"),
        ),
        _ => text(
            404,
            "not found: try /metrics, /healthz, /readyz, GET or PUT /plugins\n",
        ),
    }
}

/// `PUT /plugins`: reads the component, swaps it in, and keeps it where a restart finds it.
fn upload(request: Request<'_>, state: &AdminState) -> Reply {
    let name = match upload_name(request.target) {
        Some(name) => name,
        None if request.target == "/plugins" => "upload".to_owned(),
        None => {
            return json_reply(
                400,
                json!({ "error": "a plugin name may hold letters, digits, '-', '_' and '.' only: PUT /plugins/<name>.wasm or /plugins?name=<name>" }),
            )
        }
    };
    let bytes = match (request.body)() {
        Ok(b) => b,
        Err((status, e)) => return json_reply(status, json!({ "error": e })),
    };
    if bytes.is_empty() {
        return json_reply(
            400,
            json!({ "error": "empty body: send the .wasm component, e.g. curl -T plugin.wasm" }),
        );
    }
    let source = format!("PUT /plugins ({name})");
    match swap_recorded(&state.registry, &state.metrics, &bytes, &name, &source) {
        Ok(version) => {
            let mut reply = plugins_json(state);
            reply["persisted"] = match persist(state, &name, &version.sha256, &bytes) {
                Ok(Some(file)) => json!(file.display().to_string()),
                Ok(None) => json!(false),
                Err(e) => json!(format!("not persisted: {e}")),
            };
            if state.upload_dir.is_none() {
                reply["note"] = json!("plugin.path is a file: this upload serves until that file changes or the host restarts; point plugin.path at a directory to keep uploads");
            }
            json_reply(200, reply)
        }
        Err(e) => json_reply(
            422,
            json!({
                "error": e.to_string(),
                "upload": name,
                "running": state.registry.current().label.to_string(),
            }),
        ),
    }
}

/// Writes an accepted upload into the plugin directory (as a new newest file: the watch sees
/// it as the version already running, a restart loads it). Written aside, then renamed in.
fn persist(
    state: &AdminState,
    name: &str,
    sha256: &str,
    bytes: &[u8],
) -> std::io::Result<Option<PathBuf>> {
    let Some(dir) = &state.upload_dir else {
        return Ok(None);
    };
    let file = dir.join(format!("{name}.wasm"));
    let partial = dir.join(format!(".{name}.{}.partial", &sha256[..12]));
    std::fs::write(&partial, bytes)?;
    std::fs::rename(&partial, &file)?;
    tracing::info!(file = %file.display(), "uploaded plugin kept in the plugin directory");
    Ok(Some(file))
}

fn plugins_json(state: &AdminState) -> serde_json::Value {
    let v = state.registry.current();
    let loaded_at = v
        .loaded_at
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let (calls, failures, swaps, refused) = state.metrics.read(|m| {
        let stats = m.calls.get(&*v.label).cloned().unwrap_or_default();
        let failures: std::collections::BTreeMap<&str, u64> = stats
            .failures
            .iter()
            .map(|(k, n)| (k.as_str(), *n))
            .collect();
        (stats.count, failures, m.swaps, m.swaps_refused)
    });
    json!({
        "name": v.name,
        "sha256": v.sha256,
        "label": v.label.to_string(),
        "generation": v.generation,
        "loaded_at_unix": loaded_at,
        "calls": calls,
        "failures": failures,
        "swaps": swaps,
        "swaps_refused": refused,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_scheme_is_matched_in_any_case_and_the_token_exactly() {
        for given in [
            "Bearer s3cret",
            "bearer s3cret",
            "BEARER s3cret",
            "Bearer   s3cret ",
        ] {
            assert!(bearer_matches(Some(given), "s3cret"), "{given:?}");
        }
        for given in [
            "Bearer s3cre",
            "Bearer s3cret2",
            "Bearer S3CRET",
            "Bearer ",
            "Bearers3cret",
            "Basic s3cret",
            "s3cret",
            "",
        ] {
            assert!(!bearer_matches(Some(given), "s3cret"), "{given:?}");
        }
        assert!(!bearer_matches(None, "s3cret"));
    }

    #[test]
    fn an_upload_is_named_by_its_file_or_query_and_never_by_a_path() {
        assert_eq!(
            upload_name("/plugins/order_paid_v2.wasm").as_deref(),
            Some("order_paid_v2")
        );
        assert_eq!(
            upload_name("/plugins?name=audit-1").as_deref(),
            Some("audit-1")
        );
        assert_eq!(upload_name("/plugins"), None);
        assert_eq!(upload_name("/plugins/..%2Fetc"), None);
        assert_eq!(upload_name("/plugins/.hidden.wasm"), None);
        assert_eq!(upload_name("/plugins?name=a/b"), None);
    }
}
