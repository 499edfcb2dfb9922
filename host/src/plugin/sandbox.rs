//! The store data of one plugin instance: a WASI p2 context that grants nothing, the memory cap, and
//! the plugin's stdout/stderr and `log` calls routed into the host's log.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::AsyncWrite;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::bindings::host::{Host, Level};
use super::bindings::wit;
use super::limits::MemoryCap;

/// Everything a plugin's store holds.
pub(crate) struct StoreState {
    /// `name@sha256-prefix`, tagging every log line of this plugin.
    pub(crate) label: Arc<str>,
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: MemoryCap,
    /// When the running call (or start-up) must end; a sleep past it traps at once, a block or poll
    /// still waiting at it traps then. Epoch interruption cannot stop a call blocked inside the
    /// host: `time.sleep(60)` ran its 60 s under a 500 ms deadline and held every task of the host
    /// with it.
    pub(crate) call_deadline: Option<Instant>,
    /// The last lines the plugin wrote to stderr, for the message of a crash (a panic's text).
    stderr_tail: Arc<Mutex<Vec<String>>>,
}

/// The error a wait past the call's deadline traps with; sorted as a timeout.
#[derive(Debug, thiserror::Error)]
pub enum SleepPastDeadline {
    /// A clock pollable asked for in this call would be ready only after the deadline.
    #[error("the plugin asked to wait {asked:?} but its call had {left:?} left before its deadline (blocking waits cannot outlast plugin.deadline)")]
    Asked { asked: Duration, left: Duration },
    /// A block or poll was still waiting at the deadline (its pollable may have been made in an
    /// earlier call or in `init`, under another deadline).
    #[error("the plugin blocked {waited:?} on a pollable that was not ready by its call's deadline (blocking waits cannot outlast plugin.deadline)")]
    Blocked { waited: Duration },
}

impl StoreState {
    /// Refuses a wait of `asked` that would outlast the deadline.
    fn check_wait(&self, asked: Duration) -> wasmtime::Result<()> {
        let Some(deadline) = self.call_deadline else {
            return Ok(());
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if asked > left {
            return Err(wasmtime::Error::new(SleepPastDeadline::Asked {
                asked,
                left,
            }));
        }
        Ok(())
    }
}

/// Runs a blocking `wasi:io/poll` wait (`wait`, borrowing the store's table) to its end or to the
/// call's deadline, whichever comes first; at the deadline it traps. Checking the wait when a
/// pollable is made is not enough: one made in `init` (10 s) and kept in a static was blocked on
/// for its full 9.5 s under a 500 ms call deadline.
fn bounded_wait<R>(
    state: &mut StoreState,
    wait: impl FnOnce(
        &mut ResourceTable,
    ) -> Pin<Box<dyn Future<Output = wasmtime::Result<R>> + Send + '_>>,
) -> wasmtime::Result<R> {
    let deadline = state.call_deadline;
    let wait = wait(&mut state.table);
    let Some(deadline) = deadline else {
        return wasmtime_wasi::runtime::in_tokio(wait);
    };
    let started = Instant::now();
    // Made inside `in_tokio`: the timer needs the runtime it enters. `timeout_at` polls the wait
    // before the timer, so a pollable already ready never traps.
    let until = tokio::time::Instant::from_std(deadline);
    match wasmtime_wasi::runtime::in_tokio(async { tokio::time::timeout_at(until, wait).await }) {
        Ok(result) => result,
        Err(_elapsed) => Err(wasmtime::Error::new(SleepPastDeadline::Blocked {
            waited: started.elapsed(),
        })),
    }
}

/// Replaces WASI's `subscribe-duration` and `subscribe-instant` with versions that trap at once
/// when the wait would outlast the call's deadline, and `wasi:io/poll`'s blocking `poll` and
/// `pollable.block` with versions that trap at the deadline (the pollable may come from an earlier
/// call). Those are the only ways a plugin can block: it has no files, sockets, or input (stdin is
/// closed), and its stdout/stderr are always ready, so `wasi:io/streams`' blocking calls return at
/// once.
pub(crate) fn bound_waits(
    linker: &mut wasmtime::component::Linker<StoreState>,
) -> wasmtime::Result<()> {
    use wasmtime::component::Resource;
    use wasmtime_wasi::clocks::WasiClocksView;
    use wasmtime_wasi::p2::bindings::clocks::monotonic_clock::Host;
    // The async implementations; the sync ones wasmtime-wasi links only wrap them in `in_tokio`.
    use wasmtime_wasi::p2::bindings::io::poll::{Host as PollHost, HostPollable};
    use wasmtime_wasi::p2::DynPollable;

    linker.allow_shadowing(true);
    let mut clock = linker.instance("wasi:clocks/monotonic-clock@0.2.12")?;
    clock.func_wrap(
        "subscribe-duration",
        |mut store, (nanos,): (u64,)| -> wasmtime::Result<(Resource<DynPollable>,)> {
            let state: &mut StoreState = store.data_mut();
            state.check_wait(Duration::from_nanos(nanos))?;
            Ok((state.clocks().subscribe_duration(nanos)?,))
        },
    )?;
    clock.func_wrap(
        "subscribe-instant",
        |mut store, (when,): (u64,)| -> wasmtime::Result<(Resource<DynPollable>,)> {
            let state: &mut StoreState = store.data_mut();
            let now = state.clocks().now()?;
            state.check_wait(Duration::from_nanos(when.saturating_sub(now)))?;
            Ok((state.clocks().subscribe_instant(when)?,))
        },
    )?;
    // The version wasmtime-wasi 48 defines; plugins' imports of any 0.2.x resolve to it.
    let mut poll = linker.instance("wasi:io/poll@0.2.12")?;
    poll.func_wrap(
        "[method]pollable.block",
        |mut store, (pollable,): (Resource<DynPollable>,)| {
            bounded_wait(store.data_mut(), |table| {
                Box::pin(async move { HostPollable::block(table, pollable).await })
            })
        },
    )?;
    poll.func_wrap(
        "poll",
        |mut store, (pollables,): (Vec<Resource<DynPollable>>,)| -> wasmtime::Result<(Vec<u32>,)> {
            bounded_wait(store.data_mut(), |table| {
                Box::pin(async move { Ok((PollHost::poll(table, pollables).await?,)) })
            })
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

impl StoreState {
    /// No preopened directories, no environment, no arguments, no network: only clocks, random
    /// and the two output streams.
    pub(crate) fn new(label: Arc<str>, memory_cap: usize) -> Self {
        let stderr = LogStream::new(label.clone(), "stderr");
        let stderr_tail = stderr.tail.clone();
        let wasi = WasiCtx::builder()
            .stdout(LogStream::new(label.clone(), "stdout"))
            .stderr(stderr)
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        StoreState {
            label,
            wasi,
            table: ResourceTable::new(),
            limiter: MemoryCap::new(memory_cap),
            call_deadline: None,
            stderr_tail,
        }
    }

    /// What the plugin wrote to stderr since the last call to this (complete lines, the last
    /// few), joined with " | "; empty if nothing.
    pub(crate) fn take_stderr_tail(&self) -> String {
        let mut tail = self.stderr_tail.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::take(&mut *tail).join(" | ")
    }
}

impl WasiView for StoreState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

// The types interface has no functions to provide.
impl wit::Host for StoreState {}

impl Host for StoreState {
    fn log(&mut self, level: Level, message: String) {
        let plugin = &*self.label;
        match level {
            Level::Trace => tracing::trace!(target: "cojoin::plugin", plugin, "{message}"),
            Level::Debug => tracing::debug!(target: "cojoin::plugin", plugin, "{message}"),
            Level::Info => tracing::info!(target: "cojoin::plugin", plugin, "{message}"),
            Level::Warn => tracing::warn!(target: "cojoin::plugin", plugin, "{message}"),
            Level::Error => tracing::error!(target: "cojoin::plugin", plugin, "{message}"),
        }
    }
}

/// Longest partial line kept before it is logged anyway, so a plugin printing without newlines
/// cannot grow the host's memory.
const MAX_LINE: usize = 16 * 1024;

/// A plugin's stdout or stderr: complete lines go to the host log at info level.
#[derive(Clone)]
struct LogStream {
    label: Arc<str>,
    stream: &'static str,
    pending: Arc<Mutex<Vec<u8>>>,
    /// The last [`TAIL_LINES`] lines, each cut at [`TAIL_LINE`] bytes.
    tail: Arc<Mutex<Vec<String>>>,
}

const TAIL_LINES: usize = 6;
const TAIL_LINE: usize = 300;

impl LogStream {
    fn new(label: Arc<str>, stream: &'static str) -> Self {
        LogStream {
            label,
            stream,
            pending: Arc::default(),
            tail: Arc::default(),
        }
    }

    fn write_bytes(&self, bytes: &[u8]) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.extend_from_slice(bytes);
        while let Some(end) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            self.emit(&line[..line.len() - 1]);
        }
        if pending.len() > MAX_LINE {
            let line = std::mem::take(&mut *pending);
            self.emit(&line);
        }
    }

    fn emit(&self, line: &[u8]) {
        if line.is_empty() {
            return;
        }
        let text = String::from_utf8_lossy(line);
        {
            let mut tail = self.tail.lock().unwrap_or_else(|e| e.into_inner());
            if tail.len() == TAIL_LINES {
                tail.remove(0);
            }
            let mut cut = text.trim_end().to_owned();
            if cut.len() > TAIL_LINE {
                let end = (0..=TAIL_LINE)
                    .rev()
                    .find(|&i| cut.is_char_boundary(i))
                    .unwrap_or(0);
                cut.truncate(end);
                cut.push('…');
            }
            tail.push(cut);
        }
        tracing::info!(target: "cojoin::plugin", plugin = &*self.label, stream = self.stream, "{text}");
    }
}

impl IsTerminal for LogStream {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for LogStream {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[async_trait::async_trait]
impl Pollable for LogStream {
    async fn ready(&mut self) {}
}

impl OutputStream for LogStream {
    fn write(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        self.write_bytes(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StreamError> {
        Ok(())
    }

    fn check_write(&mut self) -> Result<usize, StreamError> {
        Ok(MAX_LINE)
    }
}

impl AsyncWrite for LogStream {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.write_bytes(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
