//! The admin server's connections: accepted on the admin thread's tokio runtime, over TCP or TLS
//! ([`super::tls`]), capped in number, and served by hyper's HTTP/1.1 (keep-alive, chunked
//! bodies, `Expect: 100-continue`); what each request gets is [`exchange`]'s. Connections are
//! tokio tasks, so idle clients cost no thread; `/healthz` and the GETs are answered on the admin
//! thread directly, an upload's body is received there too ([`super::body`]), and only the whole
//! body goes to a small blocking pool to be compiled and swapped in.
//! tiny_http, used before the hand-written server, answered one request at a time (a slow upload
//! held `/healthz` for 19 s) and started a thread for every connection; the hand-written server
//! that followed knew neither keep-alive, chunked bodies nor `100-continue` (`curl -T` waited a
//! second for it before sending a plugin).

mod exchange;

use std::convert::Infallible;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::{timeout, Instant};
use tokio_rustls::TlsAcceptor;

use super::body::UploadBudget;
use super::{tls, Reply, Request};

pub use super::limits::Limits;

/// hyper's read buffer per connection, which bounds a request head: 256 connections hold at
/// most 16 MiB of it (hyper's default, ~400 KiB, would allow 100 MiB).
const READ_BUFFER: usize = 64 * 1024;

/// A connection's bytes: TCP, or TLS over it. Boxed: one code path for both, and an admin
/// request is worth far more than a virtual call.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
type Stream = Box<dyn Io>;

/// What the server asks of the admin API. A closure `Fn(Request) -> Reply` is one that refuses
/// no upload before its body arrives (enough for tests of the plumbing).
pub trait Routes: Send + Sync + 'static {
    /// Answers a request: at once on the admin thread, except an upload (`PUT`) whose body was
    /// received (`request.body`), answered on the upload pool. An upload whose body was not
    /// received is answered at once, `request.body` saying why (a status and a reason).
    fn answer(&self, request: Request<'_>) -> Reply;

    /// The answer to a `PUT` that is refused on its head alone (token, path, name): given
    /// before the body is read, so a client that may not upload gets no share of the budget
    /// (and, if it sent `Expect: 100-continue`, sends no body at all).
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
    let served = Arc::new(exchange::Served {
        limits,
        routes: serve,
        healthz,
        budget: UploadBudget::new(limits.upload_budget),
    });
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
                    let (served, tls) = (served.clone(), tls.clone());
                    match slots.clone().try_acquire_owned() {
                        Ok(slot) => {
                            tokio::spawn(async move {
                                let deadline = Instant::now() + limits.head_timeout;
                                if let Some(stream) = open(stream, tls.as_ref(), deadline).await {
                                    connection(stream, served).await;
                                }
                                drop(slot);
                            });
                        }
                        Err(_) => {
                            tokio::spawn(async move {
                                let deadline = Instant::now() + limits.overflow_read;
                                if let Some(stream) = open(stream, tls.as_ref(), deadline).await {
                                    overflow(stream, served).await;
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

/// hyper's HTTP/1.1 for one connection: each head within `head_timeout` (an idle kept-alive
/// connection included), keep-alive as asked.
fn http(head_timeout: Duration, keep_alive: bool) -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(head_timeout)
        .keep_alive(keep_alive)
        // A client that shuts its side after sending (`nc -N`) still gets its answer.
        .half_close(true)
        .max_buf_size(READ_BUFFER);
    builder
}

/// Serves `stream` with `answer` until the client closes it, goes idle past the head timeout,
/// or breaks the protocol (logged at debug: a client's problem, not the host's).
async fn serve_with<A, Fut>(stream: Stream, builder: http1::Builder, answer: A)
where
    A: Fn(hyper::Request<hyper::body::Incoming>) -> Fut,
    Fut: std::future::Future<Output = hyper::Response<exchange::Body>>,
{
    let service = service_fn(|request| {
        let answered = answer(request);
        async move { Ok::<_, Infallible>(answered.await) }
    });
    if let Err(e) = builder
        .serve_connection(TokioIo::new(stream), service)
        .await
    {
        tracing::debug!("admin server: connection ended: {e}");
    }
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
            // Its first byte has come: the rest of its head is on its way, or never comes.
            let timeout = deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(100));
            serve_with(Box::new(stream), http(timeout, false), |_| async {
                exchange::response(Reply::text(
                    400,
                    "this admin server speaks HTTPS only (admin.tls_cert): use https://\n",
                ))
            })
            .await;
            None
        }
        Err(tls::Refused::Dropped) => None,
    }
}

/// A connection within the cap: as many requests as the client sends.
async fn connection<F: Routes, H: Fn() -> Reply + Send + Sync + 'static>(
    stream: Stream,
    served: Arc<exchange::Served<F, H>>,
) {
    let builder = http(served.limits.head_timeout, true);
    serve_with(stream, builder, |request| {
        exchange::answer(request, served.clone())
    })
    .await;
}

/// A connection past the cap: one request, whose head must come within `overflow_read`.
/// `/healthz` is answered (a liveness probe must not fail because idle clients hold every
/// slot), anything else gets 503.
async fn overflow<F: Routes, H: Fn() -> Reply + Send + Sync + 'static>(
    stream: Stream,
    served: Arc<exchange::Served<F, H>>,
) {
    let builder = http(served.limits.overflow_read, false);
    serve_with(stream, builder, |request| {
        let reply = exchange::overflow(&request, &served);
        async move { exchange::response(reply) }
    })
    .await;
}

#[cfg(test)]
mod tests;
