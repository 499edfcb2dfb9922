//! The admin HTTP server: `/metrics` (Prometheus text), `/healthz`, `/readyz`, `GET /plugins`
//! and `PUT /plugins` (a `.wasm` body: validated, swapped in, or refused with the reason).
//!
//! Blocking (tiny_http) on its own thread: it only reads the shared metrics and calls the
//! registry, and a swap compiles for seconds, which must not stall the join loop.

use std::io::Read as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, Result};
use serde_json::json;

use crate::config::AdminConfig;
use crate::hotswap::swap_recorded;
use crate::metrics::Metrics;
use crate::plugin::PluginRegistry;

/// A larger upload is refused before it is read.
const MAX_UPLOAD: u64 = 512 << 20;
/// `/healthz` fails when the join loop has not finished a round for this long.
const STALL: Duration = Duration::from_secs(30);

/// What the server reads; the join loop updates `heartbeat_ms` (Unix ms) every round.
#[derive(Clone)]
pub struct AdminState {
    pub metrics: Arc<Metrics>,
    pub registry: Arc<PluginRegistry>,
    pub heartbeat_ms: Arc<AtomicU64>,
    pub token: Option<String>,
}

pub struct AdminServer {
    pub addr: SocketAddr,
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
    pub fn start(config: &AdminConfig, state: AdminState) -> Result<AdminServer> {
        let server = tiny_http::Server::http(&config.bind).map_err(|e| {
            anyhow!(
                "admin server cannot listen on {} (admin.bind): {e}; choose another port, 0 for any free one, or set admin.enabled = false",
                config.bind
            )
        })?;
        let addr = server
            .server_addr()
            .to_ip()
            .ok_or_else(|| anyhow!("admin server bound to a non-IP address"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("admin".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    match server.recv_timeout(Duration::from_millis(200)) {
                        Ok(Some(request)) => handle(request, &state),
                        Ok(None) => {}
                        Err(e) => tracing::warn!("admin server: {e}"),
                    }
                }
            })?;
        Ok(AdminServer {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
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

fn text(status: u16, body: impl Into<String>) -> Reply {
    Reply {
        status,
        content_type: "text/plain; charset=utf-8",
        body: body.into(),
    }
}

fn json_reply(status: u16, value: serde_json::Value) -> Reply {
    Reply {
        status,
        content_type: "application/json",
        body: format!("{value:#}\n"),
    }
}

fn handle(mut request: tiny_http::Request, state: &AdminState) {
    let method = request.method().as_str().to_owned();
    let path = request.url().split('?').next().unwrap_or("").to_owned();
    let auth = request
        .headers()
        .iter()
        .find(|h| h.field.equiv("Authorization"))
        .map(|h| h.value.as_str().to_owned());
    let length = request.body_length();
    let reply = route(&method, &path, auth.as_deref(), state, || {
        if length.is_some_and(|n| n as u64 > MAX_UPLOAD) {
            return Err(format!(
                "the upload is larger than {} MiB",
                MAX_UPLOAD >> 20
            ));
        }
        let mut body = Vec::new();
        request
            .as_reader()
            .take(MAX_UPLOAD + 1)
            .read_to_end(&mut body)
            .map_err(|e| format!("reading the upload: {e}"))?;
        if body.len() as u64 > MAX_UPLOAD {
            return Err(format!(
                "the upload is larger than {} MiB",
                MAX_UPLOAD >> 20
            ));
        }
        Ok(body)
    });
    let header =
        tiny_http::Header::from_bytes("Content-Type", reply.content_type).expect("a valid header");
    let response = tiny_http::Response::from_string(reply.body)
        .with_status_code(reply.status)
        .with_header(header);
    if let Err(e) = request.respond(response) {
        tracing::debug!("admin response not delivered: {e}");
    }
}

/// Routes one request. `body` reads the upload (only `PUT /plugins` calls it).
pub fn route(
    method: &str,
    path: &str,
    auth: Option<&str>,
    state: &AdminState,
    body: impl FnOnce() -> Result<Vec<u8>, String>,
) -> Reply {
    if path == "/healthz" {
        if method != "GET" && method != "HEAD" {
            return text(405, format!("{method} is not allowed on {path}: use GET\n"));
        }
        let age = now_ms().saturating_sub(state.heartbeat_ms.load(Ordering::Relaxed));
        return if age <= STALL.as_millis() as u64 {
            text(200, "ok\n")
        } else {
            text(
                503,
                format!("the join loop has not run for {} s\n", age / 1000),
            )
        };
    }
    if let Some(token) = &state.token {
        let expected = format!("Bearer {token}");
        if auth != Some(expected.as_str()) {
            return text(
                401,
                "missing or wrong bearer token (Authorization: Bearer <admin.token>)\n",
            );
        }
    }
    match (method, path) {
        ("GET", "/metrics") => Reply {
            status: 200,
            content_type: "text/plain; version=0.0.4; charset=utf-8",
            body: state.metrics.render(),
        },
        ("GET", "/readyz") => {
            if state.metrics.read(|m| m.processing) {
                text(200, "ready\n")
            } else {
                text(503, "not ready: no task assigned yet (joining the group)\n")
            }
        }
        ("GET", "/plugins") => json_reply(200, plugins_json(state)),
        ("PUT", "/plugins") => {
            let bytes = match body() {
                Ok(b) => b,
                Err(e) => return json_reply(413, json!({ "error": e })),
            };
            if bytes.is_empty() {
                return json_reply(
                    400,
                    json!({ "error": "empty body: send the .wasm component, e.g. curl -T plugin.wasm" }),
                );
            }
            match swap_recorded(&state.registry, &state.metrics, &bytes, "PUT /plugins") {
                Ok(_) => json_reply(200, plugins_json(state)),
                Err(e) => json_reply(
                    422,
                    json!({
                        "error": e.to_string(),
                        "running": state.registry.current().label.to_string(),
                    }),
                ),
            }
        }
        (_, "/metrics" | "/readyz" | "/plugins") => {
            text(405, format!("{method} is not allowed on {path}\n"))
        }
        _ => text(
            404,
            "not found: try /metrics, /healthz, /readyz, GET or PUT /plugins\n",
        ),
    }
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
        (stats.count, stats.failures, m.swaps, m.swaps_refused)
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
