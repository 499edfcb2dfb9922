//! Limits and isolation: deadline, memory cap, traps, error returns, no escape.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use cojoin::event::FailureKind;
use cojoin::plugin::{CallError, PluginLimits, TrapKind};

use super::{event, registry};

fn limits() -> PluginLimits {
    PluginLimits {
        deadline: Duration::from_millis(200),
        memory_bytes: 64 << 20,
        ..PluginLimits::default()
    }
}

fn call(
    worker: &mut cojoin::plugin::PluginHandle,
    key: &str,
) -> Result<Vec<cojoin::event::OutputRecord>, CallError> {
    worker.on_match(
        key.as_bytes(),
        &event("orders", key, 1),
        &event("payments", key, 2),
    )
}

fn trap_kind(result: Result<Vec<cojoin::event::OutputRecord>, CallError>) -> TrapKind {
    match result {
        Err(CallError::Trap { kind, .. }) => kind,
        other => panic!("expected a trap, got {other:?}"),
    }
}

#[test]
fn a_looping_call_is_stopped_at_its_deadline_and_the_next_call_gets_a_fresh_instance() {
    let mut worker = registry("misbehave.wasm", limits(), &[]).handle().unwrap();
    let started = Instant::now();
    assert_eq!(trap_kind(call(&mut worker, "loop-1")), TrapKind::Timeout);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(200),
        "stopped before its deadline: {took:?}"
    );
    assert!(
        took < Duration::from_secs(2),
        "deadline of 200 ms not enforced: {took:?}"
    );

    let out = call(&mut worker, "ok-1").expect("the call after a timeout succeeds");
    assert_eq!(out[0].value.as_deref(), Some(&b"ok ok-1"[..]));
    assert_eq!(
        worker.restarts(),
        1,
        "the trapped instance must be replaced"
    );
}

#[test]
fn a_memory_bomb_hits_the_cap_and_is_classified_as_memory() {
    // A deadline far from reach: touching 64 MiB took over 200 ms once with the machine loaded
    // (`make test` runs test binaries beside each other), and this test is about the memory cap.
    let limits = PluginLimits {
        deadline: Duration::from_secs(20),
        ..limits()
    };
    let mut worker = registry("misbehave.wasm", limits, &[]).handle().unwrap();
    let err = call(&mut worker, "bomb-1").unwrap_err();
    assert_eq!(err.kind(), FailureKind::Memory, "{err}");
    assert!(
        err.message().contains("memory cap of 67108864 bytes"),
        "{err}"
    );
    assert!(call(&mut worker, "ok-2").is_ok());
    assert_eq!(worker.restarts(), 1);
}

#[test]
fn a_panic_is_a_crash_trap_and_the_instance_is_rebuilt() {
    let mut worker = registry("misbehave.wasm", limits(), &[]).handle().unwrap();
    assert_eq!(trap_kind(call(&mut worker, "panic-1")), TrapKind::Crash);
    assert!(call(&mut worker, "ok-3").is_ok());
    assert_eq!(trap_kind(call(&mut worker, "panic-2")), TrapKind::Crash);
    assert!(call(&mut worker, "ok-4").is_ok());
    assert_eq!(worker.restarts(), 2);
}

#[test]
fn a_panic_s_own_text_is_in_the_trap_message() {
    let mut worker = registry("misbehave.wasm", limits(), &[]).handle().unwrap();
    let err = call(&mut worker, "panic-7").unwrap_err();
    assert_eq!(err.kind(), FailureKind::Crash, "{err}");
    assert!(
        err.message().contains("fixture panic for key panic-7"),
        "{err}"
    );
    // The next crash reports its own stderr, not the first one's.
    let err = call(&mut worker, "panic-8").unwrap_err();
    assert!(
        err.message().contains("panic-8") && !err.message().contains("panic-7"),
        "{err}"
    );
}

#[test]
fn a_sleep_past_the_deadline_traps_as_timeout_at_once_and_a_short_one_runs() {
    let mut worker = registry("misbehave.wasm", limits(), &[]).handle().unwrap();
    let started = Instant::now();
    let err = call(&mut worker, "sleep60-1").unwrap_err();
    let took = started.elapsed();
    assert_eq!(err.kind(), FailureKind::Timeout, "{err}");
    assert!(err.message().contains("asked to wait 60s"), "{err}");
    // Before the fix the call slept its 60 s under a 200 ms deadline.
    assert!(took < Duration::from_secs(1), "took {took:?}");
    let started = Instant::now();
    let out = call(&mut worker, "nap-1").expect("a 20 ms sleep fits a 200 ms deadline");
    assert!(started.elapsed() >= Duration::from_millis(20));
    assert_eq!(out[0].value.as_deref(), Some(&b"ok nap-1"[..]));
    assert_eq!(worker.restarts(), 1);
}

#[test]
fn a_pollable_made_in_init_cannot_outlast_a_call_s_deadline() {
    // `init` (10 s deadline) makes a 9 s clock pollable and keeps it; the call waits on it under
    // 200 ms, through `pollable.block` and through `wasi:io/poll.poll`.
    for key in ["held-block-1", "held-poll-1"] {
        let mut worker = registry("misbehave.wasm", limits(), &[("hold-wait", "9000")])
            .handle()
            .unwrap();
        let started = Instant::now();
        let result = call(&mut worker, key);
        let took = started.elapsed();
        // Before the fix the call waited the pollable's full 9 s.
        assert!(
            took < Duration::from_secs(3),
            "{key} took {took:?}: {result:?}"
        );
        assert!(
            took >= Duration::from_millis(200),
            "{key} trapped before its deadline: {took:?}"
        );
        let err = result.unwrap_err();
        assert_eq!(err.kind(), FailureKind::Timeout, "{key}: {err}");
        assert!(
            err.message().contains("not ready by its call's deadline"),
            "{err}"
        );
        assert!(call(&mut worker, "ok-9").is_ok());
        assert_eq!(worker.restarts(), 1);
    }
}

#[test]
fn a_pollable_ready_before_the_deadline_is_waited_on() {
    // `poll` answers as soon as one pollable is ready: here the 20 ms one made in the call.
    let mut worker = registry("misbehave.wasm", limits(), &[("hold-wait", "9000")])
        .handle()
        .unwrap();
    let out = call(&mut worker, "held-or-nap-1").expect("a 20 ms pollable fits a 200 ms deadline");
    assert_eq!(out[0].value.as_deref(), Some(&b"ready [1]"[..]));

    // A pollable made in `init` that gets ready within the call's deadline.
    let mut worker = registry("misbehave.wasm", limits(), &[("hold-wait", "100")])
        .handle()
        .unwrap();
    let out = call(&mut worker, "held-block-2").expect("ready within the deadline");
    assert_eq!(out[0].value.as_deref(), Some(&b"held pollable ready"[..]));
    let out = call(&mut worker, "held-poll-2").expect("ready already");
    assert_eq!(out[0].value.as_deref(), Some(&b"ready [0]"[..]));
    assert_eq!(worker.restarts(), 0);
}

#[test]
fn an_init_that_sleeps_past_its_deadline_fails_at_once() {
    let engine = super::engine();
    let limits = PluginLimits {
        init_deadline: Duration::from_secs(2),
        ..limits()
    };
    let started = Instant::now();
    let err = cojoin::plugin::PluginRegistry::from_file(
        engine,
        &super::plugin_path("misbehave.wasm"),
        limits,
        vec![("init-sleep".to_owned(), "30".to_owned())],
    )
    .unwrap_err()
    .to_string();
    let took = started.elapsed();
    assert!(err.contains("asked to wait 30s"), "{err}");
    // Before the fix init slept its 30 s past a 10 s limit.
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

#[test]
fn an_error_return_is_a_plugin_error_and_keeps_the_instance() {
    let mut worker = registry("misbehave.wasm", limits(), &[]).handle().unwrap();
    match call(&mut worker, "error-1") {
        Err(CallError::Plugin { message, .. }) => {
            assert_eq!(message, "fixture error for key error-1")
        }
        other => panic!("expected a plugin error, got {other:?}"),
    }
    assert!(call(&mut worker, "ok-5").is_ok());
    assert_eq!(worker.restarts(), 0, "an error return is not a trap");
}

#[test]
fn on_expire_is_limited_like_on_match() {
    let mut worker = registry("misbehave.wasm", limits(), &[]).handle().unwrap();
    let err = worker
        .on_expire(
            b"loop-2",
            &event("orders", "loop-2", 1),
            cojoin::event::Side::LEFT,
        )
        .unwrap_err();
    assert_eq!(err.kind(), FailureKind::Timeout);
}

#[test]
fn fuel_stops_a_loop_when_enabled() {
    let engine = cojoin::plugin::PluginEngine::new(cojoin::plugin::EngineOptions {
        cache_dir: Some(super::cache_dir()),
        fuel: true,
        ..Default::default()
    })
    .unwrap();
    let limits = PluginLimits {
        deadline: Duration::from_secs(30),
        fuel: Some(10_000_000),
        ..PluginLimits::default()
    };
    let registry = cojoin::plugin::PluginRegistry::from_file(
        engine,
        &super::plugin_path("misbehave.wasm"),
        limits,
        vec![],
    )
    .unwrap();
    let mut worker = registry.handle().unwrap();
    let started = Instant::now();
    let err = call(&mut worker, "loop-3").unwrap_err();
    assert_eq!(err.kind(), FailureKind::Timeout, "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "fuel, not the deadline, stopped it"
    );
    assert!(call(&mut worker, "ok-6").is_ok());
}

#[test]
fn a_plugin_can_read_no_file_no_environment_and_open_no_socket() {
    std::env::set_var("COJOIN_TEST_SECRET", "hunter2");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let mut worker = registry("misbehave.wasm", limits(), &[("connect", &addr)])
        .handle()
        .unwrap();

    let out = call(&mut worker, "escape-1").expect("the escape attempt returns its report");
    let report = String::from_utf8(out[0].value.clone().unwrap()).unwrap();
    let line = |name: &str| {
        report
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("no {name} in report {report:?}"))
            .to_owned()
    };
    assert!(line("file").starts_with("denied"), "{report}");
    assert!(line("dir").starts_with("denied"), "{report}");
    assert_eq!(line("env"), "0", "{report}");
    assert_eq!(line("args"), "0", "{report}");
    assert!(line("socket").starts_with("denied"), "{report}");
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the plugin reached the host's socket: {other:?}"),
    }
}
