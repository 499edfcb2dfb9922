//! What can go wrong when loading or calling a plugin, with messages that name the plugin and the fix.

use std::fmt;
use std::path::PathBuf;

use crate::event::FailureKind;

/// Why a trapped call stopped. After any trap the instance is discarded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TrapKind {
    /// The call ran past its deadline (or out of fuel).
    Timeout,
    /// The plugin tried to grow its memory past the cap.
    Memory,
    /// Any other trap: a panic, `unreachable`, an out-of-bounds access, a host-call failure.
    Crash,
}

impl TrapKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TrapKind::Timeout => "timeout",
            TrapKind::Memory => "memory",
            TrapKind::Crash => "crash",
        }
    }
}

impl From<TrapKind> for FailureKind {
    fn from(kind: TrapKind) -> Self {
        match kind {
            TrapKind::Timeout => FailureKind::Timeout,
            TrapKind::Memory => FailureKind::Memory,
            TrapKind::Crash => FailureKind::Crash,
        }
    }
}

impl fmt::Display for TrapKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The outcome of a call that produced no outputs.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallError {
    /// The plugin ran to completion and returned `err(message)`.
    #[error("plugin {plugin} returned an error: {message}")]
    Plugin { plugin: String, message: String },
    /// The plugin trapped; the instance was discarded and the next call gets a fresh one.
    #[error("plugin {plugin} trapped ({kind}): {message}")]
    Trap {
        plugin: String,
        kind: TrapKind,
        message: String,
    },
    /// No instance could be made to take the call (instantiation or `init` failed).
    #[error("plugin {plugin} could not be instantiated: {message}")]
    Unavailable { plugin: String, message: String },
}

impl CallError {
    /// What kind of failure this is, for metrics, logs and dead-letter headers.
    pub fn kind(&self) -> FailureKind {
        match self {
            CallError::Plugin { .. } => FailureKind::PluginError,
            CallError::Trap { kind, .. } => (*kind).into(),
            CallError::Unavailable { .. } => FailureKind::Unavailable,
        }
    }

    pub fn message(&self) -> &str {
        match self {
            CallError::Plugin { message, .. }
            | CallError::Trap { message, .. }
            | CallError::Unavailable { message, .. } => message,
        }
    }
}

/// Why a plugin version was not loaded. The version that was running, if any, keeps serving.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    // The cause is part of the message, not an error `source`: printed through anyhow's `{:#}`
    // chain it would appear twice ("…: No such file or directory: No such file or directory").
    #[error("cannot read plugin file {path:?}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error(
        "plugin {plugin} is not a valid WebAssembly component: {message}\n\
         hint: build a component (not a core module) for the world cojoin:plugin/plugin@0.1.0 in wit/, \
         e.g. `cargo build --target wasm32-wasip2`, `componentize-py componentize` or `jco componentize`"
    )]
    Compile { plugin: String, message: String },
    #[error(
        "plugin {plugin} does not fit the cojoin:plugin@0.1.0 world: {message}\n\
         hint: it must export init, on-match and on-expire and import nothing but cojoin:plugin/host and WASI p2"
    )]
    WrongWorld { plugin: String, message: String },
    #[error("plugin {plugin} failed to start: {error}")]
    Start { plugin: String, error: CallError },
    #[error("plugin {plugin}: init rejected its configuration: {message}")]
    Init { plugin: String, message: String },
    #[error("cannot set up the plugin engine: {0}")]
    Engine(String),
}
