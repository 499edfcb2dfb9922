//! What the admin server lets clients hold: connections, time for a request head and a body,
//! body size and rate, upload memory. Apart from the server so that the body reader
//! ([`super::body`]) depends on these numbers only, not on the server that uses it.

use std::time::Duration;

/// Bounds on what clients may hold.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections served at once; past it a connection gets 503, except `/healthz`, answered
    /// if its request head arrives within [`Limits::overflow_read`].
    pub max_connections: usize,
    /// Time to finish the TLS handshake once connected, and then to send each request head
    /// (request line and headers), counted from the end of the previous answer on a kept-alive
    /// connection: so an idle connection is closed after it.
    pub head_timeout: Duration,
    /// Time to send the whole body, once there is room for it in `upload_budget`.
    pub body_timeout: Duration,
    /// Time a connection past the cap has to send its request head.
    pub overflow_read: Duration,
    /// Largest body accepted, with a Content-Length or chunked.
    pub max_body: u64,
    /// Uploads compiled at once (each may take seconds); more wait their turn, their bodies
    /// already received.
    pub upload_threads: usize,
    /// Bytes of upload bodies held at once, all uploads together: each reserves its
    /// Content-Length before its body is read (a chunked one reserves as it grows), so
    /// concurrent uploads take no more memory than this between them (one `max_body` by
    /// default).
    pub upload_budget: u64,
    /// How long an upload waits for room in `upload_budget` before it gets 503.
    pub budget_wait: Duration,
    /// Slowest average rate (bytes/s) a body may arrive at once `body_grace` has passed: so a
    /// client must keep sending to keep its share of the budget. Low enough for any link an
    /// upload is sent over.
    pub min_body_rate: u64,
    /// Time a body may take before `min_body_rate` applies (a client's slow start).
    pub body_grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 256,
            head_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(120),
            overflow_read: Duration::from_millis(500),
            max_body: 512 << 20,
            upload_threads: 4,
            upload_budget: 512 << 20,
            budget_wait: Duration::from_secs(15),
            min_body_rate: 256 << 10,
            body_grace: Duration::from_secs(10),
        }
    }
}
