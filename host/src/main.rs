//! The `cojoin` command line. Exit codes: 0 ok, 2 fatal (bad input, plugin cannot load),
//! 3 the plugin returned an error, 4 the plugin trapped (or a task halted); `check` exits 1 when
//! it finds a problem, `plugin deploy` when the host refuses the upload.

mod cli;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand, ValueEnum};
use cli::host::DemoArgs;
use cli::plugin::{CallArgs, DeployArgs, NewArgs, TestArgs};

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
    /// The join on an embedded broker, nothing to install: generated orders and payments (with
    /// --topics 3, and shipments), joined with the example plugin; prints every result as it comes
    /// and a summary. Ends after --events records (and their results) or on Ctrl-C.
    Demo(DemoArgs),
    /// Produce the demo's generated orders and payments to a real broker (topics `orders` and
    /// `payments`, which must exist; with unequal partition counts the join repartitions one),
    /// as examples/orders-payments uses; with --topics 3, and shipments (topic `shipments`), as
    /// examples/orders-payments-shipments uses.
    Generate {
        /// The broker, host:port[,host:port…].
        #[arg(long)]
        bootstrap: String,
        /// 2: orders and payments; 3: and shipments (the three-topic demo's stream).
        #[arg(long, default_value_t = 2)]
        topics: usize,
        /// Records to produce (orders and payments).
        #[arg(long, default_value_t = 10_000)]
        events: usize,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// How many times faster than the wall clock event time runs (one order per second of it).
        #[arg(long, default_value_t = 40)]
        speed: i64,
    },
    /// Check a config before running: state.dir usable, broker reachable, topics exist, permissions
    /// granted, the plugin loads; then whether a side will be repartitioned and why (a side read as
    /// it is must then be murmur2-partitioned), else that both topics have equal partition counts
    /// and sampled keys sit in the same partition number in both. Exits 1 when a problem is found.
    Check {
        #[arg(long)]
        config: PathBuf,
        /// Records to sample per topic.
        #[arg(long, default_value_t = 10_000)]
        sample: usize,
    },
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
        Command::Plugin(PluginCommand::Call(args)) => cli::plugin::call(args),
        Command::Plugin(PluginCommand::Test(args)) => cli::plugin::test(args),
        Command::Plugin(PluginCommand::New(args)) => cli::plugin::new(args),
        Command::Plugin(PluginCommand::Build { dir }) => cli::plugin::build(&dir),
        Command::Plugin(PluginCommand::Deploy(args)) => cli::plugin::deploy(args),
        Command::Run { config } => cli::host::run_host(&config),
        Command::Demo(args) => cli::host::demo(args),
        Command::Generate {
            bootstrap,
            topics,
            events,
            seed,
            speed,
        } => {
            use anyhow::Context as _;
            let shop = cojoin::demo::Shop::with_topics(topics).with_context(|| {
                format!("--topics {topics}: the demo's stream has 2 or 3 topics")
            })?;
            let stop = std::sync::atomic::AtomicBool::new(false);
            let n = cojoin::demo::generate(shop, &bootstrap, events, seed, speed, &stop)?;
            println!(
                "produced {n} records to {} at {bootstrap}",
                shop.topics().join(", ")
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Check { config, sample } => cli::host::check(&config, sample),
    }
}
