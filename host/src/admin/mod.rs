//! The admin HTTP server: `/metrics` (Prometheus text), `/healthz`, `/readyz`, `GET /plugins`
//! and `PUT /plugins` (a `.wasm` body: validated, swapped in, or refused with the reason).
//!
//! Its own thread, running hyper on a tokio runtime ([`server`]), with a small blocking pool for
//! uploads: it only reads the shared metrics and calls the registry, and a swap compiles for
//! seconds, which must stall neither the join loop nor the other requests. An upload's body is
//! received first ([`body`]: a byte budget all uploads share, a minimum rate, with a
//! Content-Length or chunked), then swapped in and kept ([`upload`]). Over HTTPS when
//! `admin.tls_cert` and `admin.tls_key` are set ([`tls`]). What each request gets is decided by
//! a pure `route`, unit-tested without a socket.

mod body;
mod limits;
pub mod server;
pub mod tls;
mod upload;

use crate::stoppable::StoppableThread;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use anyhow::{anyhow, Result};
use serde_json::json;
use sha2::{Digest as _, Sha256};

use crate::config::AdminConfig;
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
    metrics.repartition_failing_seconds.elapsed()
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

/// One request, as [`route`] sees it: no HTTP framing left, so that routing is tested without a
/// socket.
pub struct Request<'a> {
    pub method: &'a str,
    /// Path and query, e.g. `/plugins?name=order-paid`.
    pub target: &'a str,
    pub authorization: Option<&'a str>,
    /// An upload's body, received whole, or why it was not (a status and a reason: too large,
    /// too slow, no room); empty for other requests, whose bodies are not read.
    pub body: Result<Vec<u8>, (u16, String)>,
}

pub struct AdminServer {
    pub addr: SocketAddr,
    https: bool,
    _thread: StoppableThread,
}

pub use crate::clock::now_ms;

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
            AdminRoutes(state),
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
            _thread: StoppableThread::adopt("admin server", stop, thread),
        })
    }

    pub fn url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
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

/// What a request's head asks for, once its token is checked: an answer it gets whatever the
/// host's state (a refusal), or one read from the state.
#[derive(Debug, PartialEq)]
enum Routed {
    Refused(Reply),
    Healthz,
    Metrics,
    Readyz,
    Plugins,
    /// An authorized upload, named: it needs its body.
    Upload(String),
}

/// Routes one request.
pub fn route(request: Request<'_>, state: &AdminState) -> Reply {
    let routed = route_head(
        request.method,
        request.target,
        request.authorization,
        state.token.as_deref(),
    );
    match routed {
        Routed::Refused(reply) => reply,
        Routed::Healthz => healthz(&state.heartbeat_ms, &state.metrics),
        Routed::Metrics => Reply {
            status: 200,
            content_type: crate::metrics::CONTENT_TYPE,
            body: state.metrics.render(),
        },
        Routed::Readyz => match step_failing(&state.metrics).filter(|d| *d > STEP_UNREADY) {
            Some(d) => text(
                503,
                format!(
                    "not ready: every batch of the repartition step has failed for {} s (see the log)\n",
                    d.as_secs()
                ),
            ),
            None if state.metrics.processing() => text(200, "ready\n"),
            None => text(503, "not ready: no task assigned yet (joining the group)\n"),
        },
        Routed::Plugins => json_reply(200, plugins_json(state)),
        Routed::Upload(name) => upload::upload(&name, request.body, state),
    }
}

/// Where a request goes, from its method, target and `Authorization` alone: pure, so that every
/// refusal (401, 404, 405, a bad upload name) is tested without a host.
fn route_head(
    method: &str,
    target: &str,
    authorization: Option<&str>,
    token: Option<&str>,
) -> Routed {
    let path = target.split('?').next().unwrap_or("");
    if path == "/healthz" {
        if method != "GET" && method != "HEAD" {
            return Routed::Refused(text(
                405,
                format!("{method} is not allowed on {path}: use GET\n"),
            ));
        }
        return Routed::Healthz;
    }
    if let Some(token) = token {
        if !bearer_matches(authorization, token) {
            return Routed::Refused(text(
                401,
                "missing or wrong bearer token (Authorization: Bearer <admin.token>)\n",
            ));
        }
    }
    let plugins = path == "/plugins" || path.starts_with("/plugins/");
    match (method, path) {
        ("GET", "/metrics") => Routed::Metrics,
        ("GET", "/readyz") => Routed::Readyz,
        ("GET", "/plugins") => Routed::Plugins,
        ("PUT", _) if plugins => match upload::name(target) {
            Ok(name) => Routed::Upload(name),
            Err(refused) => Routed::Refused(refused),
        },
        (_, "/metrics" | "/readyz") => {
            Routed::Refused(text(405, format!("{method} is not allowed on {path}\n")))
        }
        _ if plugins => Routed::Refused(text(
            405,
            format!("{method} is not allowed on {path}: GET or PUT /plugins\n"),
        )),
        _ => Routed::Refused(text(
            404,
            "not found: try /metrics, /healthz, /readyz, GET or PUT /plugins\n",
        )),
    }
}

/// The admin API as the server sees it: [`route`], with uploads refused on their head (token,
/// path, name) before their body is received.
struct AdminRoutes(AdminState);

impl server::Routes for AdminRoutes {
    fn answer(&self, request: Request<'_>) -> Reply {
        route(request, &self.0)
    }

    fn refuse_before_body(&self, target: &str, authorization: Option<&str>) -> Option<Reply> {
        match route_head("PUT", target, authorization, self.0.token.as_deref()) {
            Routed::Refused(reply) => Some(reply),
            _ => None,
        }
    }
}

fn plugins_json(state: &AdminState) -> serde_json::Value {
    let v = state.registry.current();
    let loaded_at = v
        .loaded_at
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let (calls, failures) = state.metrics.plugin_calls(&v.label);
    let (swaps, refused) = (
        state.metrics.plugin_swaps.get(),
        state.metrics.plugin_swaps_refused.get(),
    );
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

    fn refused(routed: Routed) -> (u16, String) {
        match routed {
            Routed::Refused(reply) => (reply.status, reply.body),
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn requests_are_routed_on_their_head_alone() {
        let token = Some("s3cret");
        let auth = Some("Bearer s3cret");
        let route =
            |method, target, authorization| route_head(method, target, authorization, token);
        assert_eq!(route("GET", "/metrics", auth), Routed::Metrics);
        assert_eq!(route("GET", "/readyz?verbose", auth), Routed::Readyz);
        assert_eq!(route("GET", "/plugins", auth), Routed::Plugins);
        assert_eq!(
            route("PUT", "/plugins/fraud.wasm", auth),
            Routed::Upload("fraud".into())
        );
        // The liveness probe needs no token: an orchestrator has none.
        assert_eq!(route("GET", "/healthz", None), Routed::Healthz);
        assert_eq!(route("HEAD", "/healthz", None), Routed::Healthz);
        // Without a token configured, none is asked for.
        assert_eq!(route_head("GET", "/metrics", None, None), Routed::Metrics);

        let (status, why) = refused(route("PUT", "/plugins/fraud.wasm", None));
        assert_eq!(status, 401);
        assert!(why.contains("Authorization: Bearer"), "{why}");
        assert_eq!(
            refused(route("GET", "/metrics", Some("Bearer guess"))).0,
            401
        );
        let (status, why) = refused(route("GET", "/nowhere", auth));
        assert_eq!(status, 404);
        assert!(why.contains("try /metrics"), "{why}");
        for (method, target, hint) in [
            ("POST", "/healthz", "use GET"),
            ("PUT", "/metrics", "PUT is not allowed on /metrics"),
            ("DELETE", "/plugins/fraud.wasm", "GET or PUT /plugins"),
            ("POST", "/plugins", "GET or PUT /plugins"),
        ] {
            let (status, why) = refused(route(method, target, auth));
            assert_eq!(status, 405, "{method} {target}");
            assert!(why.contains(hint), "{method} {target}: {why}");
        }
        assert_eq!(refused(route("PUT", "/plugins?name=a/b", auth)).0, 400);
    }
}
