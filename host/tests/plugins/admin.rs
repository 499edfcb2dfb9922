//! The admin API's routes, called directly (no socket): status codes and answers.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use cojoin::admin::{now_ms, route, AdminState, Reply, Request};
use cojoin::plugin::PluginLimits;

use super::registry;

fn state(token: Option<&str>, heartbeat_ms: u64) -> AdminState {
    AdminState {
        metrics: Arc::default(),
        registry: registry("order_paid_rust.wasm", PluginLimits::default(), &[]),
        heartbeat_ms: Arc::new(AtomicU64::new(heartbeat_ms)),
        token: token.map(str::to_owned),
        upload_dir: None,
    }
}

fn call(state: &AdminState, method: &str, target: &str, auth: Option<&str>, body: &[u8]) -> Reply {
    let body = body.to_vec();
    route(
        Request {
            method,
            target,
            authorization: auth,
            body: Ok(body),
        },
        state,
    )
}

#[test]
fn each_route_answers_with_its_status() {
    let s = state(Some("secret"), now_ms());
    let ok = Some("Bearer secret");
    assert_eq!(
        call(&s, "GET", "/healthz", None, b"").status,
        200,
        "no token needed"
    );
    assert_eq!(call(&s, "POST", "/healthz", None, b"").status, 405);
    assert_eq!(call(&s, "GET", "/metrics", None, b"").status, 401);
    assert_eq!(
        call(&s, "GET", "/metrics", Some("Bearer wrong"), b"").status,
        401
    );
    let metrics = call(&s, "GET", "/metrics", ok, b"");
    assert_eq!(metrics.status, 200);
    assert!(
        metrics.body.contains("cojoin_matches_total 0"),
        "{}",
        metrics.body
    );
    assert_eq!(call(&s, "DELETE", "/metrics", ok, b"").status, 405);
    assert_eq!(
        call(&s, "GET", "/readyz", ok, b"").status,
        503,
        "no task assigned yet"
    );
    assert_eq!(call(&s, "GET", "/nowhere", ok, b"").status, 404);
    assert_eq!(call(&s, "DELETE", "/plugins", ok, b"").status, 405);
    let plugins = call(&s, "GET", "/plugins", ok, b"");
    assert_eq!(plugins.status, 200);
    assert!(
        plugins.body.contains("\"name\": \"order_paid_rust\""),
        "{}",
        plugins.body
    );
    assert_eq!(
        call(&s, "PUT", "/plugins", ok, b"").status,
        400,
        "empty body"
    );
    assert_eq!(
        call(&s, "PUT", "/plugins/a%2Fb.wasm", ok, b"x").status,
        400,
        "a name that is a path"
    );
    let refused = call(&s, "PUT", "/plugins/junk.wasm", ok, b"not wasm");
    assert_eq!(refused.status, 422);
    assert!(
        refused.body.contains("\"upload\": \"junk\""),
        "{}",
        refused.body
    );
}

#[test]
fn an_upload_the_server_cannot_read_gets_the_reader_s_status() {
    let s = state(None, now_ms());
    let reply = route(
        Request {
            method: "PUT",
            target: "/plugins",
            authorization: None,
            body: Err((413, "the upload is larger than 512 MiB".to_owned())),
        },
        &s,
    );
    assert_eq!(reply.status, 413);
    assert!(reply.body.contains("larger than 512 MiB"), "{}", reply.body);
}

#[test]
fn healthz_fails_once_the_join_loop_has_stalled_for_30_s() {
    let s = state(None, now_ms() - 31_000);
    let reply = call(&s, "GET", "/healthz", None, b"");
    assert_eq!(reply.status, 503);
    assert!(
        reply.body.contains("has not run for 31 s"),
        "{}",
        reply.body
    );
}
