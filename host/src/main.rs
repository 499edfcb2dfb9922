//! The `cojoin` command line. Exit codes: 0 ok, 2 fatal (bad input, plugin cannot load),
//! 3 the plugin returned an error, 4 the plugin trapped (or a task halted); `check` exits 1 when
//! it finds a problem, `plugin deploy` when the host refuses the upload.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use cojoin::event::Side;
use cojoin::json::{keyed_event_from_json, output_to_json};
use cojoin::plugin::{CallError, EngineOptions, PluginEngine, PluginLimits, PluginRegistry};

#[derive(Parser)]
#[command(
    name = "cojoin",
    version,
    about = "Join Kafka topics by key; act on every match with a WebAssembly plugin"
)]
struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Work with plugin components.
    #[command(subcommand)]
    Plugin(PluginCommand),
    /// Run a host: join the consumer group, join the topics, call the plugin, produce, commit.
    /// Ctrl-C / SIGTERM finishes the round, commits and leaves the group; a second one exits at once.
    Run {
        /// The host config (TOML); see examples/orders-payments/cojoin.toml.
        #[arg(long)]
        config: PathBuf,
    },
    /// The join on an embedded broker, nothing to install: generated orders and payments, joined
    /// with the example plugin; prints every result as it comes and a summary. Ends after
    /// --events records (and their results) or on Ctrl-C.
    Demo(DemoArgs),
    /// Produce the demo's generated orders and payments to a real broker (topics `orders` and
    /// `payments`, which must exist with equal partition counts), as examples/orders-payments uses.
    Generate {
        /// The broker, host:port[,host:port…].
        #[arg(long)]
        bootstrap: String,
        /// Records to produce (orders and payments).
        #[arg(long, default_value_t = 10_000)]
        events: usize,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// How many times faster than the wall clock event time runs (one order per second of it).
        #[arg(long, default_value_t = 40)]
        speed: i64,
    },
    /// Check a config before running: broker reachable, both topics with equal partition counts,
    /// the plugin loads, and sampled keys sit in the same partition number in both topics.
    /// Exits 1 when a problem is found.
    Check {
        #[arg(long)]
        config: PathBuf,
        /// Records to sample per topic.
        #[arg(long, default_value_t = 10_000)]
        sample: usize,
    },
}

#[derive(Args)]
struct DemoArgs {
    /// Records to generate (orders and payments).
    #[arg(long, default_value_t = 2_000)]
    events: usize,
    /// The plugin to act on each result (an order-paid plugin: Python, Rust or JS).
    #[arg(long, default_value = "build/plugins/order_paid_python.wasm")]
    plugin: PathBuf,
    /// Seed of the generated stream.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print only the summary, not every result.
    #[arg(long)]
    quiet: bool,
    /// Where the admin server (/metrics, /plugins) listens; port 0 picks a free one.
    #[arg(long, default_value = "127.0.0.1:0")]
    admin: String,
}

#[derive(Subcommand)]
enum PluginCommand {
    /// Call a plugin once and print the records it returns, one JSON object per line.
    ///
    /// With --a and --b: on-match(key of a, a, b). With only --a: on-expire of a left event; with
    /// only --b: on-expire of a right event.
    Call(CallArgs),
    /// Run a recorded stream through the real matcher and plugin, without Kafka, and print what
    /// would be produced (JSON lines; dead letters carry "dead_letter"). A summary goes to stderr.
    Test(TestArgs),
    /// Write a new plugin project: the action, its unit test, the WIT contract, a cojoin.toml and
    /// sample events for `plugin test` and `plugin call`, and a README.
    New(NewArgs),
    /// Build a project's component with its language's toolchain (componentize-py, cargo,
    /// componentize-js) to the project's plugin.path; prints the path, size and sha256.
    Build {
        /// The project directory.
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
    /// Upload a component to a running host, which validates it and swaps it in; prints the
    /// version now live, or why the host refused it (then exits 1).
    Deploy(DeployArgs),
}

#[derive(Args)]
struct NewArgs {
    /// The plugin's name: a letter, then letters, digits, '-' or '_'.
    name: String,
    /// The language: python, rust or js.
    #[arg(long, default_value = "python", value_parser = parse_lang)]
    lang: cojoin::project::Lang,
    /// Where to write the project [default: ./<name>]; must not exist.
    #[arg(long)]
    dir: Option<PathBuf>,
}

fn parse_lang(s: &str) -> Result<cojoin::project::Lang, String> {
    s.parse()
        .map_err(|e: cojoin::project::ProjectError| e.to_string())
}

#[derive(Args)]
struct DeployArgs {
    /// The component [default: plugin.path of ./cojoin.toml, what `plugin build` wrote].
    wasm: Option<PathBuf>,
    /// The host's admin server (admin.bind).
    #[arg(long, default_value = "http://127.0.0.1:9464")]
    admin: String,
    /// The host's admin.token, when it has one [default: $COJOIN_ADMIN_TOKEN].
    #[arg(long)]
    token: Option<String>,
    /// The version's name on the host [default: the file name without .wasm].
    #[arg(long)]
    name: Option<String>,
}

#[derive(Args)]
struct TestArgs {
    /// The plugin component (.wasm) [default: plugin.path of the config].
    plugin: Option<PathBuf>,
    /// The host config (join topics, window, policies, plugin limits).
    #[arg(long, default_value = "cojoin.toml")]
    config: PathBuf,
    /// Events as JSON lines, each with the topic (join.left or join.right) and partition.
    #[arg(long)]
    events: PathBuf,
}

#[derive(Args)]
struct CallArgs {
    /// The plugin component (.wasm).
    plugin: PathBuf,
    /// Left event as JSON: {"topic", "partition", "offset", "timestamp", "key", "value", "headers"}.
    #[arg(long)]
    a: Option<PathBuf>,
    /// Right event as JSON (same form as --a).
    #[arg(long)]
    b: Option<PathBuf>,
    /// A plugin config entry passed to init, as key=value; repeatable.
    #[arg(long = "config", value_name = "KEY=VALUE")]
    config: Vec<String>,
    #[command(flatten)]
    limits: LimitArgs,
}

#[derive(Args)]
struct LimitArgs {
    /// Per-call deadline in milliseconds.
    #[arg(long, default_value_t = 500)]
    deadline_ms: u64,
    /// Memory cap of the instance in MiB (1 to 4096: what a 32-bit Wasm memory addresses).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=4096))]
    memory_mib: u64,
    /// Fuel per call (turns fuel metering on).
    #[arg(long)]
    fuel: Option<u64>,
    /// Directory of compiled components [default: $COJOIN_CACHE_DIR, else ~/.cache/cojoin].
    #[arg(long)]
    cache_dir: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    match run(cli.command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("COJOIN_LOG")
        // By default, warnings and one line for each thing an operator follows: the admin URL,
        // joining the group, tasks assigned and revoked, plugin loads and swaps.
        .unwrap_or_else(|_| {
            tracing_subscriber::EnvFilter::new("warn,cojoin::plugin=info,cojoin::report=info")
        });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn run(command: Command) -> Result<ExitCode> {
    match command {
        Command::Plugin(PluginCommand::Call(args)) => plugin_call(args),
        Command::Plugin(PluginCommand::Test(args)) => plugin_test(args),
        Command::Plugin(PluginCommand::New(args)) => plugin_new(args),
        Command::Plugin(PluginCommand::Build { dir }) => plugin_build(&dir),
        Command::Plugin(PluginCommand::Deploy(args)) => plugin_deploy(args),
        Command::Run { config } => run_host(&config),
        Command::Demo(args) => demo(args),
        Command::Generate {
            bootstrap,
            events,
            seed,
            speed,
        } => {
            let stop = std::sync::atomic::AtomicBool::new(false);
            let n = cojoin::demo::generate(&bootstrap, events, seed, speed, &stop)?;
            println!("produced {n} records to orders and payments at {bootstrap}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Check { config, sample } => check(&config, sample),
    }
}

fn default_cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("COJOIN_CACHE_DIR") {
        return Some(dir.into());
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("cojoin"))
}

fn read_event(path: &PathBuf) -> Result<cojoin::event::Event> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read event file {path:?}"))?;
    keyed_event_from_json(&text).with_context(|| format!("event file {path:?}"))
}

fn parse_config(entries: &[String]) -> Result<Vec<(String, String)>> {
    entries
        .iter()
        .map(|entry| {
            entry
                .split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .with_context(|| format!("--config {entry:?}: expected KEY=VALUE"))
        })
        .collect()
}

fn plugin_call(args: CallArgs) -> Result<ExitCode> {
    let a = args.a.as_ref().map(read_event).transpose()?;
    let b = args.b.as_ref().map(read_event).transpose()?;
    if a.is_none() && b.is_none() {
        anyhow::bail!("give --a and --b (on-match), or one of them (on-expire)");
    }
    let limits = PluginLimits {
        deadline: Duration::from_millis(args.limits.deadline_ms),
        memory_bytes: (args.limits.memory_mib as usize) << 20,
        fuel: args.limits.fuel,
        ..PluginLimits::default()
    };
    let cache_dir = args.limits.cache_dir.or_else(default_cache_dir);
    let registry = open_registry(&args.plugin, limits, cache_dir, parse_config(&args.config)?)?;
    let mut worker = registry.handle()?;
    let result = match (&a, &b) {
        (Some(a), Some(b)) => {
            if a.key != b.key {
                tracing::warn!("--a and --b have different keys; calling with the key of --a");
            }
            worker.on_match(a.key_bytes(), a, b)
        }
        (Some(a), None) => worker.on_expire(a.key_bytes(), a, Side::Left),
        (None, Some(b)) => worker.on_expire(b.key_bytes(), b, Side::Right),
        (None, None) => unreachable!("checked above"),
    };
    match result {
        Ok(records) => {
            for record in &records {
                println!("{}", output_to_json(record));
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e @ CallError::Plugin { .. }) => {
            eprintln!("error: {e}");
            Ok(ExitCode::from(3))
        }
        Err(e) => {
            eprintln!("error: {e}");
            Ok(ExitCode::from(4))
        }
    }
}

/// Engine and registry for the plugin a config names; a relative plugin path is relative to the
/// config file.
fn load_plugin(
    config: &cojoin::config::Config,
    config_path: &std::path::Path,
    wasm: Option<&std::path::Path>,
) -> Result<std::sync::Arc<PluginRegistry>> {
    let limits = cojoin::wiring::plugin_limits(config);
    let path = match wasm {
        Some(p) => p.to_owned(),
        None => cojoin::hotswap::resolve(&configured_plugin_path(config, config_path))
            .with_context(|| format!("plugin.path {:?}", config.plugin.path))?,
    };
    let plugin_config = config.plugin.config.clone().into_iter().collect();
    open_registry(&path, limits, default_cache_dir(), plugin_config)
}

/// `plugin.path`, relative to the config file's directory.
fn configured_plugin_path(
    config: &cojoin::config::Config,
    config_path: &std::path::Path,
) -> PathBuf {
    config_path
        .parent()
        .unwrap_or(std::path::Path::new("."))
        .join(&config.plugin.path)
}

/// An engine (fuel metering on when the limits ask for fuel) and the plugin's registry.
fn open_registry(
    path: &std::path::Path,
    limits: PluginLimits,
    cache_dir: Option<PathBuf>,
    config: Vec<(String, String)>,
) -> Result<std::sync::Arc<PluginRegistry>> {
    let engine = PluginEngine::new(EngineOptions {
        cache_dir,
        fuel: limits.fuel.is_some(),
        ..EngineOptions::default()
    })?;
    Ok(PluginRegistry::from_file(engine, path, limits, config)?)
}

/// Every problem found, including a config that does not parse, a plugin that does not load and
/// a broker that does not answer, is a `PROBLEM:` line and exit code 1.
fn check(config_path: &std::path::Path, sample: usize) -> Result<ExitCode> {
    let problem = |e: anyhow::Error| {
        println!("PROBLEM: {e:#}");
        Ok(ExitCode::from(1))
    };
    let config = match cojoin::config::Config::from_file(config_path) {
        Ok(config) => config,
        Err(e) => return problem(e.into()),
    };
    println!("config {config_path:?}: valid");
    match load_plugin(&config, config_path, None) {
        Ok(registry) => println!(
            "plugin {}: loads, init accepts its config",
            registry.current().label
        ),
        Err(e) => return problem(e),
    }
    let report = match cojoin::check::check(&config, sample) {
        Ok(report) => report,
        Err(e) => return problem(e),
    };
    for line in &report.lines {
        println!("{line}");
    }
    for problem in &report.problems {
        println!("PROBLEM: {problem}");
    }
    Ok(if report.problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// A flag set by the first SIGINT/SIGTERM (saying `first`); the second exits at once (130).
fn on_signal(
    first: &'static str,
    second: &'static str,
) -> Result<std::sync::Arc<std::sync::atomic::AtomicBool>> {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    ctrlc::set_handler(move || {
        if flag.swap(true, std::sync::atomic::Ordering::SeqCst) {
            eprintln!("{second}");
            std::process::exit(130);
        }
        eprintln!("{first}");
    })
    .context("installing the signal handler")?;
    Ok(stop)
}

fn run_host(config_path: &std::path::Path) -> Result<ExitCode> {
    let mut config = cojoin::config::Config::from_file(config_path)?;
    let registry = load_plugin(&config, config_path, None)?;
    let shutdown = on_signal(
        "shutting down: finishing the round, committing, leaving the group",
        "second signal: exiting at once (uncommitted work will be replayed)",
    )?;
    let watched = configured_plugin_path(&config, config_path);
    let watch = config.plugin.watch;
    let admin_config = std::mem::take(&mut config.admin);
    let host = cojoin::run::Host::new(config, registry.clone());
    let _admin = if admin_config.enabled {
        let server = cojoin::admin::AdminServer::start(
            &admin_config,
            host.admin_state(
                admin_config.token.clone(),
                watched.is_dir().then(|| watched.clone()),
            ),
        )?;
        cojoin::report::Happened::AdminListening { url: &server.url() }.emit(&host.metrics);
        Some(server)
    } else {
        None
    };
    let _watch = watch.then(|| {
        cojoin::hotswap::FileWatch::start(
            watched,
            registry,
            host.metrics.clone(),
            std::time::Duration::from_millis(250),
            std::time::Duration::from_millis(500),
        )
    });
    host.run(&shutdown)?;
    Ok(ExitCode::SUCCESS)
}

fn demo(args: DemoArgs) -> Result<ExitCode> {
    if !args.plugin.exists() {
        anyhow::bail!(
            "plugin {:?} not found: build the example plugins with `make plugins` (or give --plugin)",
            args.plugin
        );
    }
    let registry = open_registry(
        &args.plugin,
        PluginLimits::default(),
        default_cache_dir(),
        vec![],
    )?;
    let stop = on_signal(
        "stopping: the summary follows (Ctrl-C again to exit at once)",
        "second signal: exiting at once",
    )?;
    let options = cojoin::demo::DemoOptions {
        events: args.events,
        seed: args.seed,
        print: !args.quiet,
        admin_bind: args.admin,
    };
    let s = cojoin::demo::run(&options, registry, &stop)?;
    println!("== summary");
    println!(
        "events        {} ({} orders, {} payments)",
        s.events,
        s.orders,
        s.events - s.orders
    );
    println!("paid          {} orders matched with their payment", s.paid);
    println!(
        "unpaid        {} orders with no payment in the window",
        s.unpaid
    );
    println!(
        "dead letters  {} records (late payments) in orders-payments-dlq",
        s.dead_letters
    );
    println!(
        "still open    {} orders whose window had not closed when the stream ended",
        s.open
    );
    match (s.latency_quantile(0.5), s.latency_quantile(0.99)) {
        (Some(p50), Some(p99)) => println!(
            "latency       p50 {p50:.1} ms, p99 {p99:.1} ms from producing a payment to reading its match ({} matches)",
            s.match_latency_ms.len()
        ),
        _ => println!("latency       no match measured"),
    }
    let mut fates: Vec<_> = s.fates.iter().collect();
    fates.sort();
    let fates: Vec<String> = fates.iter().map(|(k, v)| format!("{v} {k}")).collect();
    println!("generated     {}", fates.join(", "));
    Ok(ExitCode::SUCCESS)
}

fn plugin_test(args: TestArgs) -> Result<ExitCode> {
    use cojoin::task::Emit;

    let config = cojoin::config::Config::from_file(&args.config)?;
    let events = std::fs::read_to_string(&args.events)
        .with_context(|| format!("cannot read events file {:?}", args.events))?;
    let registry = load_plugin(&config, &args.config, args.plugin.as_deref())?;
    let mut worker = cojoin::run::action::MeteredAction::new(registry.handle()?);
    let result = cojoin::replay::replay(&config, &events, &mut worker)
        .with_context(|| format!("events file {:?}", args.events))?;
    let dlq = config.output.dead_letter_topic.clone();
    for emit in &result.emits {
        let line = match emit {
            Emit::Output { record, .. } => {
                let mut v = output_to_json(record);
                if record.topic.is_none() {
                    v["topic"] = serde_json::json!(config.output.topic);
                }
                v
            }
            Emit::DeadLetter(d) => {
                let reason = d.reason.kind();
                let error = d.reason.is_failure().then(|| {
                    serde_json::json!({"message": d.reason.message(), "plugin": d.reason.plugin_version()})
                });
                let inputs: Vec<_> = d
                    .inputs
                    .iter()
                    .map(|e| serde_json::json!({"topic": &*e.topic, "partition": e.partition, "offset": e.offset}))
                    .collect();
                serde_json::json!({"dead_letter": reason, "topic": dlq, "error": error, "inputs": inputs})
            }
        };
        println!("{line}");
    }
    let c = &result.counters;
    eprintln!(
        "records {}, matches {}, expiries {}, late {}, future timestamps {}, null keys {}, tombstones {}, failed calls {}, refused outputs {}, dead-lettered {}",
        c.records, c.matches, c.expiries, c.late, c.future_timestamps, c.null_keys, c.tombstones, c.failed_calls, c.refused_outputs, c.dead_lettered
    );
    for reason in &result.halted {
        eprintln!("{reason}");
    }
    Ok(if result.halted.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(4)
    })
}

fn plugin_new(args: NewArgs) -> Result<ExitCode> {
    use cojoin::project::template;

    let files = template::files(args.lang, &args.name)?;
    let dir = args.dir.unwrap_or_else(|| PathBuf::from(&args.name));
    template::write(&dir, &files)?;
    let test = match args.lang {
        cojoin::project::Lang::Python => "python -m pytest",
        cojoin::project::Lang::Rust => "cargo test",
        cojoin::project::Lang::Js => "node --test",
    };
    println!(
        "created {} ({}, {} files); next:",
        dir.display(),
        args.lang,
        files.len()
    );
    println!("  cd {}", dir.display());
    println!("  {test:<50} # the unit tests, no Wasm");
    println!(
        "  {:<50} # the component, build/{}.wasm",
        "cojoin plugin build", args.name
    );
    println!(
        "  {:<50} # the sample stream through the join",
        "cojoin plugin test --events samples/events.jsonl"
    );
    println!(
        "  {:<50} # live on a running host",
        "cojoin plugin deploy --admin http://127.0.0.1:9464"
    );
    Ok(ExitCode::SUCCESS)
}

fn plugin_build(dir: &std::path::Path) -> Result<ExitCode> {
    let absolute =
        std::path::absolute(dir).with_context(|| format!("project directory {dir:?}"))?;
    let built = cojoin::project::build::build(&absolute)?;
    // The path as the user named the project: `build/x.wasm` when built in place.
    let inside = built.path.strip_prefix(&absolute).unwrap_or(&built.path);
    let shown = if dir == std::path::Path::new(".") {
        inside.to_owned()
    } else {
        dir.join(inside)
    };
    println!(
        "built {} ({}, {:.1} MB, sha256 {})",
        shown.display(),
        built.lang,
        built.bytes as f64 / 1e6,
        built.sha256
    );
    Ok(ExitCode::SUCCESS)
}

fn plugin_deploy(args: DeployArgs) -> Result<ExitCode> {
    use cojoin::project::deploy::{deploy, Outcome};

    let wasm = match args.wasm {
        Some(path) => path,
        None => cojoin::project::build::output_path(std::path::Path::new(".")),
    };
    let bytes = std::fs::read(&wasm).with_context(|| {
        format!(
            "cannot read the component {wasm:?}: give its path, or run `cojoin plugin build` first"
        )
    })?;
    let name = match args.name {
        Some(name) => name,
        None => wasm
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .with_context(|| format!("{wasm:?} has no file name: give --name"))?,
    };
    let token = args
        .token
        .or_else(|| std::env::var("COJOIN_ADMIN_TOKEN").ok());
    match deploy(&args.admin, token.as_deref(), &name, &bytes)? {
        Outcome::Live(v) => {
            println!(
                "live on {}: {} generation {} sha256 {}",
                args.admin,
                v["name"].as_str().unwrap_or("?"),
                v["generation"],
                v["sha256"].as_str().unwrap_or("?")
            );
            match &v["persisted"] {
                serde_json::Value::String(file) => println!("kept by the host as {file}"),
                _ => println!("not kept by the host: it serves until its plugin.path changes or it restarts (point plugin.path at a directory to keep uploads)"),
            }
            Ok(ExitCode::SUCCESS)
        }
        Outcome::Refused { error, running } => {
            eprintln!("refused by {}: {error}", args.admin);
            eprintln!("still running: {running}");
            Ok(ExitCode::from(1))
        }
        Outcome::Failed { status, body } => {
            eprintln!("{} answered {status}: {body}", args.admin);
            Ok(ExitCode::from(1))
        }
    }
}
