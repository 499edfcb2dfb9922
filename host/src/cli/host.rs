//! `cojoin run`, `check` and `demo`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use cojoin::demo::Shop;
use cojoin::plugin::PluginLimits;

use super::{configured_plugin_path, default_cache_dir, load_plugin, on_signal, open_registry};

#[derive(Args)]
pub(crate) struct DemoArgs {
    /// Topics to join: 2 (orders and payments, as examples/orders-payments) or 3 (orders,
    /// payments and shipments in one join, as examples/orders-payments-shipments).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(2..=3))]
    topics: u8,
    /// Records to generate (orders, payments and, with --topics 3, shipments).
    #[arg(long, default_value_t = 2_000)]
    events: usize,
    /// The plugin to act on each result: an order-paid plugin (Python, Rust or JS), with
    /// --topics 3 an order-shipped one [default: build/plugins/order_paid_python.wasm, or
    /// order_shipped_python.wasm, in a checkout, else the one installed with the wheel].
    #[arg(long)]
    plugin: Option<PathBuf>,
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

/// Every problem found, including a config that does not parse, a plugin that does not load and
/// a broker that does not answer, is a `PROBLEM:` line and exit code 1.
pub(crate) fn check(config_path: &std::path::Path, sample: usize) -> Result<ExitCode> {
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

pub(crate) fn run_host(config_path: &std::path::Path) -> Result<ExitCode> {
    let mut config = cojoin::config::Config::from_file(config_path)?;
    let registry = load_plugin(&config, config_path, None)?;
    registry.check_world(config.join.topics.len())?;
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
                admin_config.token.as_ref().map(|t| t.expose().to_owned()),
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

pub(crate) fn demo(args: DemoArgs) -> Result<ExitCode> {
    let shop = Shop::with_topics(args.topics.into())
        .with_context(|| format!("the demo joins 2 or 3 topics, not {}", args.topics))?;
    let plugin = demo_plugin(args.plugin, shop.plugin_file())?;
    let registry = open_registry(
        &plugin,
        PluginLimits::default(),
        default_cache_dir(),
        vec![],
    )?;
    registry.check_world(shop.topics().len())?;
    let stop = on_signal(
        "stopping: the summary follows (Ctrl-C again to exit at once)",
        "second signal: exiting at once",
    )?;
    let options = cojoin::demo::DemoOptions {
        shop,
        events: args.events,
        seed: args.seed,
        print: !args.quiet,
        admin_bind: args.admin,
    };
    let summary = cojoin::demo::run(&options, registry, &stop)?;
    print!("{summary}");
    Ok(ExitCode::SUCCESS)
}

/// The given plugin, else the example plugin `file` where a checkout builds it (`make plugins`)
/// or where the wheel installs it (`<venv>/share/cojoin/plugins/`, beside `<venv>/bin/cojoin`).
fn demo_plugin(given: Option<PathBuf>, file: &str) -> Result<PathBuf> {
    if let Some(path) = given {
        anyhow::ensure!(path.exists(), "plugin {path:?} not found");
        return Ok(path);
    }
    let checkout = PathBuf::from("build/plugins").join(file);
    let installed = std::env::current_exe().ok().and_then(|exe| {
        Some(
            exe.parent()?
                .parent()?
                .join("share/cojoin/plugins")
                .join(file),
        )
    });
    let mut looked = vec![checkout.clone()];
    looked.extend(installed.clone());
    [Some(checkout), installed]
        .into_iter()
        .flatten()
        .find(|p| p.is_file())
        .with_context(|| {
            format!(
                "the example plugin {file} is not in {looked:?}: in a checkout, build it with `make plugins`; or give --plugin <component.wasm>"
            )
        })
}
