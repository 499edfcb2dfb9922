//! The admin server's plumbing, in-process on 127.0.0.1:0: a handler whose PUT answers the length
//! of the body it read, GET "ok", `/healthz` "healthy"; clients are plain blocking sockets.

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{start, Limits};
use crate::admin::{Reply, Request};

fn serve(limits: Limits) -> (String, Arc<AtomicBool>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (addr, _thread) = start(
        listener,
        limits,
        None,
        stop.clone(),
        |r: Request<'_>| match r.method {
            "PUT" => match (r.body)() {
                Ok(b) => Reply::text(200, format!("{} bytes", b.len())),
                Err((status, why)) => Reply::text(status, why),
            },
            _ => Reply::text(200, "ok"),
        },
        || Reply::text(200, "healthy"),
    )
    .unwrap();
    (addr.to_string(), stop)
}

fn exchange(addr: &str, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// A client that sends an upload's head and the first bytes of its body, then nothing.
fn stalled_upload(addr: &str, length: u64) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "PUT /plugins HTTP/1.1\r\nContent-Length: {length}\r\n\r\nabc"
    )
    .unwrap();
    s
}

fn put(length: usize) -> Vec<u8> {
    let mut request =
        format!("PUT /plugins HTTP/1.1\r\nContent-Length: {length}\r\n\r\n").into_bytes();
    request.resize(request.len() + length, b'x');
    request
}

#[test]
fn a_slow_upload_holds_no_other_request_and_times_out() {
    let limits = Limits {
        body_timeout: Duration::from_millis(800),
        ..Limits::default()
    };
    let (addr, stop) = serve(limits);
    let mut slow = stalled_upload(&addr, 1000);
    std::thread::sleep(Duration::from_millis(100));
    let started = Instant::now();
    let health = exchange(&addr, b"GET /healthz HTTP/1.1\r\n\r\n");
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    let took = started.elapsed();
    // Before: tiny_http served one request at a time, so this waited for the upload.
    assert!(took < Duration::from_millis(300), "took {took:?}");
    let mut answer = String::new();
    let _ = slow.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("3 of 1000 bytes"), "{answer}");
    let done = exchange(
        &addr,
        b"PUT /plugins HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
    );
    assert!(done.ends_with("5 bytes"), "{done}");
    stop.store(true, Ordering::Relaxed);
}

/// Issue 29: each body trickling in held one of the `upload_threads` until `body_timeout`, so
/// four of them held out a fifth upload for as long.
#[test]
fn slow_uploaders_do_not_hold_out_a_legitimate_upload() {
    let limits = Limits {
        upload_threads: 4,
        body_timeout: Duration::from_secs(30),
        // Long enough that the minimum rate does not end them during the test: what must free
        // the way is that a body still on its way holds no pool thread.
        body_grace: Duration::from_secs(30),
        ..Limits::default()
    };
    let (addr, stop) = serve(limits);
    let slow: Vec<TcpStream> = (0..4).map(|_| stalled_upload(&addr, 1000)).collect();
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    let done = exchange(&addr, &put(5));
    assert!(done.ends_with("5 bytes"), "{done:?}");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "took {took:?}");
    drop(slow);
    stop.store(true, Ordering::Relaxed);
}

/// Issue 29: a body that stops arriving is cut off once it falls below the minimum rate, not at
/// `body_timeout`, and the upload waiting for its share of the budget then goes through.
#[test]
fn a_body_below_the_minimum_rate_is_cut_off_and_frees_its_budget() {
    let limits = Limits {
        max_body: 1000,
        upload_budget: 1000,
        budget_wait: Duration::from_secs(5),
        min_body_rate: 1000,
        body_grace: Duration::from_millis(300),
        body_timeout: Duration::from_secs(30),
        ..Limits::default()
    };
    let (addr, stop) = serve(limits);
    let mut slow = stalled_upload(&addr, 1000);
    std::thread::sleep(Duration::from_millis(100));
    let started = Instant::now();
    let done = exchange(&addr, &put(5));
    assert!(done.ends_with("5 bytes"), "{done:?}");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "took {took:?}");
    let mut answer = String::new();
    let _ = slow.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    assert!(
        answer.contains("too slowly") && answer.contains("3 of 1000 bytes"),
        "{answer}"
    );
    stop.store(true, Ordering::Relaxed);
}

/// Issue 29: four 500 MB uploads at once took 1.9 GB; the bodies held at once now fit in
/// `upload_budget`, an upload that does not fit is told to retry, and nothing else waits.
#[test]
fn uploads_together_hold_at_most_the_budget_and_other_requests_are_unaffected() {
    let limits = Limits {
        max_body: 1000,
        upload_budget: 1000,
        budget_wait: Duration::from_millis(200),
        body_timeout: Duration::from_secs(30),
        body_grace: Duration::from_secs(30),
        ..Limits::default()
    };
    let (addr, stop) = serve(limits);
    let holder = stalled_upload(&addr, 800);
    std::thread::sleep(Duration::from_millis(100));
    let refused = exchange(&addr, &put(500));
    assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
    assert!(
        refused.contains("500 bytes") && refused.contains("retry"),
        "{refused}"
    );
    for path in ["/healthz", "/metrics", "/readyz"] {
        let started = Instant::now();
        let answer = exchange(&addr, format!("GET {path} HTTP/1.1\r\n\r\n").as_bytes());
        assert!(answer.starts_with("HTTP/1.1 200"), "{path}: {answer}");
        assert!(started.elapsed() < Duration::from_millis(150), "{path}");
    }
    let small = exchange(&addr, &put(100));
    assert!(small.ends_with("100 bytes"), "{small}");
    // The holder's share comes back when it goes.
    drop(holder);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let again = exchange(&addr, &put(500));
        if again.ends_with("500 bytes") {
            break;
        }
        assert!(Instant::now() < deadline, "{again}");
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
}

#[test]
fn idle_connections_past_the_cap_are_refused_but_healthz_still_answers() {
    let limits = Limits {
        max_connections: 8,
        ..Limits::default()
    };
    let (addr, stop) = serve(limits);
    let idle: Vec<TcpStream> = (0..40)
        .map(|_| TcpStream::connect(&addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let health = exchange(&addr, b"GET /healthz HTTP/1.1\r\n\r\n");
    assert!(
        health.starts_with("HTTP/1.1 200") && health.ends_with("healthy"),
        "{health}"
    );
    let metrics = exchange(&addr, b"GET /metrics HTTP/1.1\r\n\r\n");
    assert!(metrics.starts_with("HTTP/1.1 503"), "{metrics}");
    assert!(metrics.contains("too many admin connections"), "{metrics}");
    drop(idle);
    // The slots come back once the idle clients go.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let metrics = exchange(&addr, b"GET /metrics HTTP/1.1\r\n\r\n");
        if metrics.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(Instant::now() < deadline, "{metrics}");
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
}

#[test]
fn a_body_without_length_or_too_large_is_refused_before_it_is_read() {
    let limits = Limits {
        max_body: 10,
        ..Limits::default()
    };
    let (addr, stop) = serve(limits);
    let chunked = exchange(
        &addr,
        b"PUT /plugins HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    );
    assert!(chunked.starts_with("HTTP/1.1 411"), "{chunked}");
    let large = exchange(
        &addr,
        b"PUT /plugins HTTP/1.1\r\nContent-Length: 11\r\n\r\n",
    );
    assert!(large.starts_with("HTTP/1.1 413"), "{large}");
    stop.store(true, Ordering::Relaxed);
}
