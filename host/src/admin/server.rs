//! The admin server's HTTP/1.1 plumbing: one request per connection, over TCP or TLS
//! ([`super::tls`]), deadlines on the head (the TLS handshake included) and the body, and a cap
//! on connections. Connections are tokio tasks on the admin thread, so idle
//! clients cost no thread; `/healthz` and the GETs are answered on it directly. An upload's body
//! is received there too ([`super::body`]: a byte budget shared by all uploads, a minimum rate),
//! and only the whole body goes to a small blocking pool to be compiled and swapped in.
//! tiny_http, used before, answered one request at a time (a slow upload held `/healthz` for
//! 19 s) and started a thread for every connection (6,000 idle connections made 6,015 threads).

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::time::{timeout, timeout_at, Instant};
use tokio_rustls::TlsAcceptor;

use super::body::{self, UploadBudget};
use super::{tls, Reply, Request};

/// Bounds on what clients may hold.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections served at once; past it a connection gets 503, except `/healthz`, answered
    /// if its request line arrives within [`Limits::overflow_read`].
    pub max_connections: usize,
    /// Time from connecting to the end of the headers: the TLS handshake, the request line and
    /// the headers.
    pub head_timeout: Duration,
    /// Time to send the whole body, once there is room for it in `upload_budget`.
    pub body_timeout: Duration,
    /// Time a connection past the cap has to send its request line.
    pub overflow_read: Duration,
    /// Largest body accepted.
    pub max_body: u64,
    /// Uploads compiled at once (each may take seconds); more wait their turn, their bodies
    /// already received.
    pub upload_threads: usize,
    /// Bytes of upload bodies held at once, all uploads together: each reserves its
    /// Content-Length before its body is read, so concurrent uploads take no more memory than
    /// this between them (one `max_body` by default).
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

const MAX_HEAD: usize = 16 * 1024;

/// A connection's bytes: TCP, or TLS over it. Boxed: one code path for both, and an admin
/// request is worth far more than a virtual call.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
type Stream = Box<dyn Io>;

/// What the server asks of the admin API. A closure `Fn(Request) -> Reply` is one that refuses
/// no upload before its body arrives (enough for tests of the plumbing).
pub trait Routes: Send + Sync + 'static {
    /// Answers a request: at once on the admin thread, except an upload (`PUT`), answered on
    /// the upload pool with its body already received (`request.body` hands it over, or why
    /// it was not received).
    fn answer(&self, request: Request<'_>) -> Reply;

    /// The answer to a `PUT` that is refused on its head alone (token, path, name): given
    /// before the body is read, so a client that may not upload gets no share of the budget.
    fn refuse_before_body(&self, _target: &str, _authorization: Option<&str>) -> Option<Reply> {
        None
    }
}

impl<F> Routes for F
where
    F: Fn(Request<'_>) -> Reply + Send + Sync + 'static,
{
    fn answer(&self, request: Request<'_>) -> Reply {
        self(request)
    }
}

/// Serves until `stop` is set: `serve` answers requests, `healthz` the liveness probe; over TLS
/// only when `tls` is given. Returns the bound address and the server's thread.
pub fn start<F, H>(
    listener: TcpListener,
    limits: Limits,
    tls: Option<Arc<rustls::ServerConfig>>,
    stop: Arc<AtomicBool>,
    serve: F,
    healthz: H,
) -> std::io::Result<(SocketAddr, std::thread::JoinHandle<()>)>
where
    F: Routes,
    H: Fn() -> Reply + Send + Sync + 'static,
{
    let addr = listener.local_addr()?;
    listener.set_nonblocking(true)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(limits.upload_threads.max(1))
        .thread_name("admin-upload")
        .build()?;
    let (serve, healthz) = (Arc::new(serve), Arc::new(healthz));
    let budget = Arc::new(UploadBudget::new(limits.upload_budget));
    let tls = tls.map(TlsAcceptor::from);
    let thread = std::thread::Builder::new()
        .name("admin".into())
        .spawn(move || {
            runtime.block_on(async move {
                let listener = match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::error!("admin server: {e}");
                        return;
                    }
                };
                let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
                while !stop.load(Ordering::Relaxed) {
                    let Ok(accepted) = timeout(Duration::from_millis(100), listener.accept()).await
                    else {
                        continue;
                    };
                    let stream = match accepted {
                        Ok((stream, _)) => stream,
                        Err(e) => {
                            tracing::warn!("admin server: accepting a connection: {e}");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let (serve, healthz, tls) = (serve.clone(), healthz.clone(), tls.clone());
                    match slots.clone().try_acquire_owned() {
                        Ok(slot) => {
                            let budget = budget.clone();
                            tokio::spawn(async move {
                                let deadline = Instant::now() + limits.head_timeout;
                                if let Some(stream) = open(stream, tls.as_ref(), deadline).await {
                                    let served = Served {
                                        limits,
                                        serve,
                                        budget,
                                    };
                                    connection(stream, deadline, &served, &*healthz).await;
                                }
                                drop(slot);
                            });
                        }
                        Err(_) => {
                            tokio::spawn(async move {
                                let deadline = Instant::now() + limits.overflow_read;
                                if let Some(stream) = open(stream, tls.as_ref(), deadline).await {
                                    overflow(stream, deadline, limits, healthz).await;
                                }
                            });
                        }
                    }
                }
            });
            // An upload still being read or compiled must not hold the host's shutdown.
            runtime.shutdown_background();
        })?;
    Ok((addr, thread))
}

/// The connection's bytes once it may carry a request: TCP as it is, or TLS once the handshake is
/// done by `deadline`. `None`: nothing to serve (a plain-HTTP client is told to use HTTPS).
async fn open(stream: TcpStream, tls: Option<&TlsAcceptor>, deadline: Instant) -> Option<Stream> {
    let Some(acceptor) = tls else {
        return Some(Box::new(stream));
    };
    match tls::accept(acceptor, stream, deadline).await {
        Ok(stream) => Some(Box::new(stream)),
        Err(tls::Refused::NotTls(stream)) => {
            let reply = Reply::text(
                400,
                "this admin server speaks HTTPS only (admin.tls_cert): use https://\n",
            );
            write_reply(Box::new(stream), &reply, false).await;
            None
        }
        Err(tls::Refused::Dropped) => None,
    }
}

/// A connection past the cap: `/healthz` is answered (a liveness probe must not fail because
/// idle clients hold every slot), anything else gets 503.
async fn overflow<H: Fn() -> Reply>(
    mut stream: Stream,
    deadline: Instant,
    limits: Limits,
    healthz: Arc<H>,
) {
    let reply = match timeout_at(deadline, read_head(&mut stream)).await {
        Ok(Ok(head)) if head.path() == "/healthz" && head.method == "GET" => healthz(),
        _ => Reply::text(
            503,
            format!(
                "too many admin connections (more than {}); try again\n",
                limits.max_connections
            ),
        ),
    };
    write_reply(stream, &reply, false).await;
}

/// What every connection shares: the limits, the routes and the upload budget.
struct Served<F> {
    limits: Limits,
    serve: Arc<F>,
    budget: Arc<UploadBudget>,
}

async fn connection<F: Routes, H: Fn() -> Reply>(
    mut stream: Stream,
    deadline: Instant,
    served: &Served<F>,
    healthz: &H,
) {
    let head = match timeout_at(deadline, read_head(&mut stream)).await {
        Ok(Ok(head)) => head,
        Ok(Err(HeadError::Bad(why))) => {
            write_reply(stream, &Reply::text(400, format!("{why}\n")), false).await;
            return;
        }
        // Closed, or no complete head in time: an idle client.
        Ok(Err(HeadError::Closed)) | Err(_) => return,
    };
    let head_only = head.method == "HEAD";
    if head.path() == "/healthz" && (head.method == "GET" || head_only) {
        write_reply(stream, &healthz(), head_only).await;
        return;
    }
    if head.method != "PUT" {
        // Reads of shared state: quick, answered here.
        let reply = served.serve.answer(Request {
            method: &head.method,
            target: &head.target,
            authorization: head.authorization.as_deref(),
            body: &mut || Err((400, "this request takes no body".to_owned())),
        });
        write_reply(stream, &reply, head_only).await;
        return;
    }
    upload(stream, head, served).await;
}

/// A `PUT`: refused on its head, or its body received here (holding its share of the budget)
/// and only then answered on the blocking pool, where it is compiled and swapped in.
async fn upload<F: Routes>(mut stream: Stream, mut head: Head, served: &Served<F>) {
    let authorization = head.authorization.as_deref();
    if let Some(reply) = served.serve.refuse_before_body(&head.target, authorization) {
        write_reply(stream, &reply, false).await;
        return;
    }
    let limits = &served.limits;
    let received = async {
        let Some(length) = head.content_length else {
            return Err((
                411,
                "send the body with a Content-Length (e.g. curl -T plugin.wasm)".to_owned(),
            ));
        };
        if length > limits.max_body {
            return Err((
                413,
                format!(
                    "the upload ({}) is larger than the {} this host accepts",
                    body::size(length),
                    body::size(limits.max_body)
                ),
            ));
        }
        let room = served.budget.reserve(length, limits.budget_wait).await?;
        let start = std::mem::take(&mut head.rest);
        let body = body::read(&mut stream, start, length, limits).await?;
        Ok((body, room))
    }
    .await;
    let serve = served.serve.clone();
    let answered = tokio::task::spawn_blocking(move || {
        let (mut body, room) = match received {
            Ok((body, room)) => (Ok(body), Some(room)),
            Err(refused) => (Err(refused), None),
        };
        let reply = serve.answer(Request {
            method: &head.method,
            target: &head.target,
            authorization: head.authorization.as_deref(),
            body: &mut || std::mem::replace(&mut body, Ok(Vec::new())),
        });
        // The body's share of the budget comes back once the upload is answered: until then
        // its bytes are still held.
        drop(room);
        reply
    })
    .await;
    match answered {
        Ok(reply) => write_reply(stream, &reply, false).await,
        Err(e) => tracing::error!("admin server: an upload handler failed: {e}"),
    }
}

struct Head {
    method: String,
    target: String,
    authorization: Option<String>,
    content_length: Option<u64>,
    /// Bytes read past the head: the start of the body.
    rest: Vec<u8>,
}

impl Head {
    fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("")
    }
}

enum HeadError {
    Closed,
    Bad(String),
}

async fn read_head(stream: &mut Stream) -> Result<Head, HeadError> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let end = loop {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return Err(HeadError::Closed),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
        if buf.len() > MAX_HEAD {
            return Err(HeadError::Bad("the request head is too large".into()));
        }
    };
    let rest = buf.split_off(end + 4);
    let text = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut lines = text.split("\r\n");
    let mut parts = lines.next().unwrap_or("").split_whitespace();
    let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
        return Err(HeadError::Bad("not an HTTP request line".into()));
    };
    let mut head = Head {
        method: method.to_owned(),
        target: target.to_owned(),
        authorization: None,
        content_length: None,
        rest,
    };
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("authorization") {
            head.authorization = Some(value.to_owned());
        } else if name.eq_ignore_ascii_case("content-length") {
            head.content_length = Some(
                value
                    .parse()
                    .map_err(|_| HeadError::Bad(format!("bad Content-Length {value:?}")))?,
            );
        }
    }
    Ok(head)
}

async fn write_reply(mut stream: Stream, reply: &Reply, head_only: bool) {
    let reason = match reply.status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Payload Too Large",
        422 => "Unprocessable Entity",
        503 => "Service Unavailable",
        _ => "",
    };
    let mut out = format!(
        "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        reply.status,
        reply.content_type,
        reply.body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(reply.body.as_bytes());
    }
    let write = async {
        stream.write_all(&out).await?;
        stream.shutdown().await?;
        // Drain what the client still sends (an unread body) so that closing does not reset
        // the connection before the client has read the reply.
        let mut sink = [0u8; 4096];
        while stream.read(&mut sink).await? > 0 {}
        std::io::Result::Ok(())
    };
    let _ = timeout(Duration::from_secs(5), write).await;
}

#[cfg(test)]
mod tests;
