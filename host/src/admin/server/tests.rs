//! The admin server's plumbing, in-process on 127.0.0.1:0: a handler whose PUT answers the length
//! of the body it read, GET "ok", `/healthz` "healthy". Well-behaved clients are ureq; clients
//! that misbehave on the wire (a body that stops, two requests on one connection, waiting for
//! `100 Continue`) are plain sockets, because what they send is the test.

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
            "PUT" => match r.body {
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

/// A fresh client: no connection shared between calls, every call bounded in time.
fn client() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into()
}

/// Status and body of `GET path`.
fn get(addr: &str, path: &str) -> (u16, String) {
    let mut response = client().get(format!("http://{addr}{path}")).call().unwrap();
    let status = response.status().as_u16();
    (status, response.body_mut().read_to_string().unwrap())
}

/// Status and body of an upload of `length` bytes, with a Content-Length.
fn put(addr: &str, length: usize) -> (u16, String) {
    let mut response = client()
        .put(format!("http://{addr}/plugins"))
        .send(vec![b'x'; length])
        .unwrap();
    let status = response.status().as_u16();
    (status, response.body_mut().read_to_string().unwrap())
}

/// A raw connection that has sent `request` and waits at most `secs` for each read.
fn sent(addr: &str, secs: u64, request: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(secs))).unwrap();
    s.write_all(request).unwrap();
    s
}

/// Everything the server sends back to `request` until it closes the connection.
fn exchange(addr: &str, request: &[u8]) -> String {
    let mut s = sent(addr, 10, request);
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// A client that sends an upload's head and the first bytes of its body, then nothing.
fn stalled_upload(addr: &str, length: u64) -> TcpStream {
    sent(
        addr,
        5,
        format!("PUT /plugins HTTP/1.1\r\nContent-Length: {length}\r\n\r\nabc").as_bytes(),
    )
}

/// One answer read off a kept-alive connection: its head, then as many body bytes as its
/// Content-Length says.
fn read_answer(s: &mut TcpStream) -> (String, String) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0);
    let mut body = vec![0; length];
    s.read_exact(&mut body).unwrap();
    (head, String::from_utf8(body).unwrap())
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
    assert_eq!(get(&addr, "/healthz"), (200, "healthy".into()));
    let took = started.elapsed();
    // Before: tiny_http served one request at a time, so this waited for the upload.
    assert!(took < Duration::from_millis(300), "took {took:?}");
    let mut answer = String::new();
    let _ = slow.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("3 of 1000 bytes"), "{answer}");
    assert_eq!(put(&addr, 5), (200, "5 bytes".into()));
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
    assert_eq!(put(&addr, 5), (200, "5 bytes".into()));
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
    assert_eq!(put(&addr, 5), (200, "5 bytes".into()));
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
    let (status, refused) = put(&addr, 500);
    assert_eq!(status, 503, "{refused}");
    assert!(
        refused.contains("500 bytes") && refused.contains("retry"),
        "{refused}"
    );
    for path in ["/healthz", "/metrics", "/readyz"] {
        let started = Instant::now();
        let (status, answer) = get(&addr, path);
        assert_eq!(status, 200, "{path}: {answer}");
        assert!(started.elapsed() < Duration::from_millis(150), "{path}");
    }
    assert_eq!(put(&addr, 100), (200, "100 bytes".into()));
    // The holder's share comes back when it goes.
    drop(holder);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let again = put(&addr, 500);
        if again == (200, "500 bytes".into()) {
            break;
        }
        assert!(Instant::now() < deadline, "{again:?}");
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
    assert_eq!(get(&addr, "/healthz"), (200, "healthy".into()));
    let (status, metrics) = get(&addr, "/metrics");
    assert_eq!(status, 503, "{metrics}");
    assert!(metrics.contains("too many admin connections"), "{metrics}");
    drop(idle);
    // The slots come back once the idle clients go.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let metrics = get(&addr, "/metrics");
        if metrics.0 == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "{metrics:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
}

#[test]
fn a_body_without_length_or_chunks_or_too_large_is_refused_before_it_is_read() {
    let limits = Limits {
        max_body: 10,
        ..Limits::default()
    };
    let (addr, stop) = serve(limits);
    let bare = exchange(&addr, b"PUT /plugins HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert!(bare.starts_with("HTTP/1.1 411"), "{bare}");
    assert!(bare.contains("Content-Length or chunked"), "{bare}");
    // The head alone: the answer comes before the body, which is never sent. (The server
    // still reads what body comes for a while, so that a client sending it sees the answer:
    // read the answer, not to the end of the connection.)
    let mut s = sent(
        &addr,
        2,
        b"PUT /plugins HTTP/1.1\r\nContent-Length: 11\r\n\r\n",
    );
    let (head, body) = read_answer(&mut s);
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    assert!(body.contains("larger than"), "{body}");
    stop.store(true, Ordering::Relaxed);
}

/// Before, bodies had to come with a Content-Length (411 otherwise); a chunked one is held to
/// the same `max_body` as it arrives.
#[test]
fn a_chunked_upload_is_received_and_one_past_the_limit_refused() {
    let limits = Limits {
        max_body: 100_000,
        ..Limits::default()
    };
    let (addr, stop) = serve(limits);
    let send = |length: usize| {
        // A reader of unknown length: ureq sends it chunked.
        let mut body = std::io::repeat(b'x').take(length as u64);
        let mut response = client()
            .put(format!("http://{addr}/plugins"))
            .send(ureq::SendBody::from_reader(&mut body))
            .unwrap();
        let status = response.status().as_u16();
        (status, response.body_mut().read_to_string().unwrap())
    };
    assert_eq!(send(100_000), (200, "100000 bytes".into()));
    let (status, refused) = send(300_000);
    assert_eq!(status, 413, "{refused}");
    assert!(
        refused.contains("chunked") && refused.contains("100000 bytes"),
        "{refused}"
    );
    // By hand, in two chunks, on the wire.
    let raw = exchange(
        &addr,
        b"PUT /plugins HTTP/1.1\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
    );
    assert!(
        raw.starts_with("HTTP/1.1 200") && raw.ends_with("11 bytes"),
        "{raw}"
    );
    stop.store(true, Ordering::Relaxed);
}

/// `curl -T` sends `Expect: 100-continue` and waited a second for an answer the hand-written
/// server never gave before sending the body. Now the body is asked for once it is admitted, and
/// an upload refused on its head is answered without its body being sent.
#[test]
fn an_upload_expecting_100_continue_is_asked_for_its_body_or_refused_without_it() {
    let limits = Limits {
        max_body: 10,
        ..Limits::default()
    };
    let (addr, stop) = serve(limits);
    let mut s = sent(
        &addr,
        5,
        b"PUT /plugins HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n",
    );
    // Nothing of the body has been sent: what comes back first must be the invitation.
    let (interim, _) = read_answer(&mut s);
    assert!(interim.starts_with("HTTP/1.1 100 Continue"), "{interim}");
    s.write_all(b"hello").unwrap();
    let (head, body) = read_answer(&mut s);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(body, "5 bytes");

    let mut s = sent(
        &addr,
        5,
        b"PUT /plugins HTTP/1.1\r\nContent-Length: 11\r\nExpect: 100-continue\r\n\r\n",
    );
    let (head, body) = read_answer(&mut s);
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    assert!(body.contains("larger than"), "{body}");
    stop.store(true, Ordering::Relaxed);
}

/// The hand-written server answered one request per connection; now a client keeps its
/// connection for the next, until it has been idle for `head_timeout`.
#[test]
fn requests_share_a_kept_alive_connection_until_it_goes_idle() {
    let limits = Limits {
        head_timeout: Duration::from_millis(500),
        ..Limits::default()
    };
    let (addr, stop) = serve(limits);
    let mut s = sent(&addr, 5, b"GET /metrics HTTP/1.1\r\nHost: admin\r\n\r\n");
    let (head, body) = read_answer(&mut s);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(body, "ok");
    s.write_all(b"PUT /plugins HTTP/1.1\r\nHost: admin\r\nContent-Length: 5\r\n\r\nhello")
        .unwrap();
    let (head, body) = read_answer(&mut s);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(body, "5 bytes");
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: admin\r\n\r\n")
        .unwrap();
    assert_eq!(read_answer(&mut s).1, "healthy");
    // Idle now: closed once the head timeout has passed, so that it holds no slot.
    let idle = Instant::now();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    let took = idle.elapsed();
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(3),
        "closed after {took:?}: {rest:?}"
    );
    stop.store(true, Ordering::Relaxed);
}

/// `cojoin plugin deploy`'s client against the admin server's plumbing, in-process: an upload
/// answered, one refused on its size before its body is sent, and a host that is not there.
#[test]
fn an_upload_reaches_the_admin_server_and_its_refusals_come_back() {
    use crate::project::deploy::{deploy, DeployError, Outcome};

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let limits = Limits {
        max_body: 1000,
        ..Limits::default()
    };
    let answer = |r: Request<'_>| match (r.authorization, r.body) {
        (Some("Bearer s3cret"), Ok(bytes)) => Reply {
            status: 200,
            content_type: "application/json",
            body: serde_json::json!({ "target": r.target, "bytes": bytes.len() }).to_string(),
        },
        (_, Ok(_)) => Reply::text(401, "missing or wrong bearer token\n"),
        (_, Err((status, why))) => Reply::text(status, why),
    };
    let (addr, _thread) = start(listener, limits, None, stop.clone(), answer, || {
        Reply::text(200, "ok")
    })
    .unwrap();
    let url = format!("http://{addr}");
    assert_eq!(
        deploy(&url, Some("s3cret"), "fraud", b"\0asm").unwrap(),
        Outcome::Live(serde_json::json!({ "target": "/plugins/fraud.wasm", "bytes": 4 }))
    );
    assert_eq!(
        deploy(&url, Some("guess"), "fraud", b"\0asm").unwrap(),
        Outcome::Failed {
            status: 401,
            body: "missing or wrong bearer token".into()
        }
    );
    match deploy(&url, Some("s3cret"), "big", &vec![0; 5000]).unwrap() {
        Outcome::Failed { status: 413, body } => {
            assert!(body.contains("larger than"), "{body}")
        }
        other => panic!("{other:?}"),
    }
    stop.store(true, Ordering::Relaxed);
    // A port nothing listens on (bound, then let go).
    let gone = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap();
    let error = deploy(&format!("http://{gone}"), None, "fraud", b"\0asm").unwrap_err();
    assert!(matches!(error, DeployError::Unreachable { .. }), "{error}");
    assert!(error.to_string().contains("is the host running"), "{error}");
}
