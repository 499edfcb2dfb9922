//! The admin server's HTTP/1.1 plumbing: one request per connection, over TCP or TLS
//! ([`super::tls`]), deadlines on the head (the TLS handshake included) and the body, and a cap
//! on connections. Connections are tokio tasks on the admin thread, so idle
//! clients cost no thread; `/healthz` and the GETs are answered on it directly, uploads (read,
//! compiled, swapped for seconds) on a small blocking pool. tiny_http, used before, answered one
//! request at a time (a slow upload held `/healthz` for 19 s) and started a thread for every
//! connection (6,000 idle connections made 6,015 threads).

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::time::{timeout, timeout_at, Instant};
use tokio_rustls::TlsAcceptor;

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
    /// Time to send the whole body.
    pub body_timeout: Duration,
    /// Time a connection past the cap has to send its request line.
    pub overflow_read: Duration,
    /// Largest body accepted.
    pub max_body: u64,
    /// Uploads handled at once (each may compile for seconds); more wait their turn.
    pub upload_threads: usize,
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
        }
    }
}

const MAX_HEAD: usize = 16 * 1024;

/// A connection's bytes: TCP, or TLS over it. Boxed: one code path for both, and an admin
/// request is worth far more than a virtual call.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
type Stream = Box<dyn Io>;

/// Serves until `stop` is set: `serve` answers a request, `healthz` the liveness probe; over TLS
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
    F: Fn(Request<'_>) -> Reply + Send + Sync + 'static,
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
                            tokio::spawn(async move {
                                let deadline = Instant::now() + limits.head_timeout;
                                if let Some(stream) = open(stream, tls.as_ref(), deadline).await {
                                    connection(stream, deadline, limits, serve, &*healthz).await;
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

async fn connection<F, H>(
    mut stream: Stream,
    deadline: Instant,
    limits: Limits,
    serve: Arc<F>,
    healthz: &H,
) where
    F: Fn(Request<'_>) -> Reply + Send + Sync + 'static,
    H: Fn() -> Reply,
{
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
        let reply = serve(Request {
            method: &head.method,
            target: &head.target,
            authorization: head.authorization.as_deref(),
            body: &mut || Err((400, "this request takes no body".to_owned())),
        });
        write_reply(stream, &reply, head_only).await;
        return;
    }
    // An upload: read (only if the route asks, after its token check), compiled and swapped
    // on the blocking pool.
    let runtime = tokio::runtime::Handle::current();
    let answered = tokio::task::spawn_blocking(move || {
        let Head {
            method,
            target,
            authorization,
            content_length,
            mut rest,
        } = head;
        let reply = serve(Request {
            method: &method,
            target: &target,
            authorization: authorization.as_deref(),
            body: &mut || {
                let Some(length) = content_length else {
                    return Err((
                        411,
                        "send the body with a Content-Length (e.g. curl -T plugin.wasm)".to_owned(),
                    ));
                };
                if length > limits.max_body {
                    return Err((
                        413,
                        format!("the upload is larger than {} MiB", limits.max_body >> 20),
                    ));
                }
                runtime.block_on(read_body(
                    &mut stream,
                    &mut rest,
                    length,
                    limits.body_timeout,
                ))
            },
        });
        (stream, reply)
    })
    .await;
    match answered {
        Ok((stream, reply)) => write_reply(stream, &reply, false).await,
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

/// Reads `length` body bytes (the first ones may already be in `start`) within `limit`.
async fn read_body(
    stream: &mut Stream,
    start: &mut Vec<u8>,
    length: u64,
    limit: Duration,
) -> Result<Vec<u8>, (u16, String)> {
    let deadline = Instant::now() + limit;
    let mut body = std::mem::take(start);
    body.truncate(length as usize);
    let mut chunk = vec![0; 64 * 1024];
    while (body.len() as u64) < length {
        let want = chunk.len().min((length - body.len() as u64) as usize);
        match tokio::time::timeout_at(deadline, stream.read(&mut chunk[..want])).await {
            Err(_) => {
                return Err((
                    408,
                    format!(
                        "the upload did not arrive within {} s ({} of {length} bytes)",
                        limit.as_secs_f64(),
                        body.len()
                    ),
                ))
            }
            Ok(Ok(0)) => {
                return Err((
                    400,
                    format!(
                        "the connection closed after {} of {length} bytes",
                        body.len()
                    ),
                ))
            }
            Ok(Ok(n)) => body.extend_from_slice(&chunk[..n]),
            Ok(Err(e)) => return Err((400, format!("reading the upload: {e}"))),
        }
    }
    Ok(body)
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
mod tests {
    use super::*;
    use std::io::{Read as _, Write as _};
    use std::net::TcpStream;
    use std::time::Instant;

    /// A server whose PUT reads the body and answers its length; GET answers "ok".
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

    #[test]
    fn a_slow_upload_holds_no_other_request_and_times_out() {
        let limits = Limits {
            body_timeout: Duration::from_millis(800),
            ..Limits::default()
        };
        let (addr, stop) = serve(limits);
        // Head and 3 of 1000 body bytes, then nothing.
        let mut slow = TcpStream::connect(&addr).unwrap();
        slow.write_all(b"PUT /plugins HTTP/1.1\r\nContent-Length: 1000\r\n\r\nabc")
            .unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let started = Instant::now();
        let health = exchange(&addr, b"GET /healthz HTTP/1.1\r\n\r\n");
        assert!(health.starts_with("HTTP/1.1 200"), "{health}");
        let took = started.elapsed();
        // Before: tiny_http served one request at a time, so this waited for the upload.
        assert!(took < Duration::from_millis(300), "took {took:?}");
        let mut answer = String::new();
        slow.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
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
}
