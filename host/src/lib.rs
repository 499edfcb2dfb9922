//! cojoin: join Kafka topics by key and run a sandboxed WebAssembly component on every match.
//!
//! # Layout
//!
//! - [`acl`]: the Kafka permissions a config needs, and how to grant them (pure).
//! - [`admin`]: the admin HTTP server — `/metrics`, `/healthz`, `/readyz`, `GET`/`PUT /plugins`.
//! - [`check`]: `cojoin check` — broker, topics, co-partitioning, producer partitioners.
//! - [`clock`]: the wall clock (milliseconds since the Unix epoch).
//! - [`config`]: the TOML configuration, its defaults and validation (pure).
//! - [`demo`]: `cojoin demo` — the join on an embedded mock broker with a generated stream.
//! - [`event`]: the records the join handles — pure data shared by every other module.
//! - [`join`]: the pure join core — windowed state, record order within a task, offsets.
//! - [`hotswap`]: swapping the running plugin from a watched file or an upload, counted in metrics.
//! - [`json`]: the JSON forms of events and outputs used by the command line.
//! - [`kafka`]: the Kafka side — client configuration, the source (consumer, rebalances, commits),
//!   the sink (outputs and dead letters, acknowledgements, refusals), and its pure parts:
//!   co-partitioning checks and producer partitioners.
//! - [`metrics`]: what a running host counts, encoded as OpenMetrics text by prometheus-client.
//! - [`plugin`]: the WebAssembly side — engine, sandbox, instances, hot-swap registry.
//!   It depends on `event` only; the Kafka side will not import it, nor it the Kafka side.
//! - [`project`]: a plugin project on disk — `cojoin plugin new` (embedded templates), `build`
//!   (the language's toolchain) and `deploy` (an upload to a running host's admin server).
//! - [`repartition`]: which sides of a join are re-keyed into internal topics (a field of the value
//!   as key, unequal partition counts), and a record's join key. Pure.
//! - [`quiet`]: a complaint said once, then at most every 30 s with how many were held back.
//! - [`replay`]: `cojoin plugin test` — a recorded stream through the real tasks and plugin.
//! - [`report`]: each thing in a host's life (group joined, tasks assigned, commits, swaps), logged
//!   and counted in one place.
//! - [`run`]: `cojoin run` — the loop from the Kafka source through the tasks and the plugin to
//!   the Kafka sink; the plugin as a task's action.
//! - [`secret`]: passwords and tokens in the config, inline or from the environment or a file,
//!   never printed. Pure but for reading that variable or file.
//! - [`stoppable`]: a background thread told to stop and joined when dropped.
//! - [`task`]: `PartitionTask`, one co-partitioned task: join core + an action, emitting what to
//!   produce and what to commit. Pure; the plugin is behind its `Action` trait.
//! - [`wiring`]: the config turned into task policies and plugin limits.
//! - `main.rs`, `cli/`: the `cojoin` command line.

pub mod acl;
pub mod admin;
pub mod check;
pub mod clock;
pub mod config;
pub mod demo;
pub mod event;
pub mod hotswap;
pub mod join;
pub mod json;
pub mod kafka;
pub mod metrics;
pub mod plugin;
pub mod project;
pub mod quiet;
pub mod repartition;
pub mod replay;
pub mod report;
pub mod run;
pub mod secret;
pub mod stoppable;
pub mod task;
pub mod wiring;
