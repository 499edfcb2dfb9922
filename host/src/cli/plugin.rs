//! `cojoin plugin call / test / new / build / deploy`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use cojoin::event::Side;
use cojoin::json::{keyed_event_from_json, output_to_json};
use cojoin::plugin::{CallError, PluginLimits};

use super::{default_cache_dir, load_plugin, open_registry};

#[derive(Args)]
pub(crate) struct NewArgs {
    /// The plugin's name: a letter, then letters, digits, '-' or '_'.
    name: String,
    /// The language: python, rust or js.
    #[arg(long, default_value = "python", value_parser = parse_lang)]
    lang: cojoin::project::Lang,
    /// Where to write the project [default: ./<name>]; must not exist.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// How many topics the join has: 2 (world plugin: on-match(key, a, b)) or 3 to 8 (world
    /// plugin-n: on-match-n(key, events), one event per topic).
    #[arg(long, default_value_t = 2)]
    topics: usize,
}

fn parse_lang(s: &str) -> Result<cojoin::project::Lang, String> {
    s.parse()
        .map_err(|e: cojoin::project::ProjectError| e.to_string())
}

#[derive(Args)]
pub(crate) struct DeployArgs {
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
pub(crate) struct TestArgs {
    /// The plugin component (.wasm) [default: plugin.path of the config].
    plugin: Option<PathBuf>,
    /// The host config (join topics, window, policies, plugin limits).
    #[arg(long, default_value = "cojoin.toml")]
    config: PathBuf,
    /// Events as JSON lines, each with the topic (one of join.topics, or join.left / join.right)
    /// and partition.
    #[arg(long)]
    events: PathBuf,
}

#[derive(Args)]
pub(crate) struct CallArgs {
    /// The plugin component (.wasm).
    plugin: PathBuf,
    /// Left event as JSON: {"topic", "partition", "offset", "timestamp", "key", "value", "headers"}.
    #[arg(long)]
    a: Option<PathBuf>,
    /// Right event as JSON (same form as --a).
    #[arg(long)]
    b: Option<PathBuf>,
    /// A plugin of world plugin-n (three topics or more): one event per topic, in join.topics
    /// order, as JSON files (same form as --a); repeat it. With --partners, on-expire-n of the
    /// one --event given.
    #[arg(long = "event", conflicts_with_all = ["a", "b"])]
    events: Vec<PathBuf>,
    /// With one --event: on-expire-n's partners, a JSON file holding one list of events per
    /// other topic in order, e.g. [[{...payment...}], []].
    #[arg(long, requires = "events")]
    partners: Option<PathBuf>,
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

fn read_event(path: &PathBuf) -> Result<cojoin::event::Event> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read event file {path:?}"))?;
    keyed_event_from_json(&text).with_context(|| format!("event file {path:?}"))
}

/// On-expire-n's partners: a JSON array with one array of events per other topic.
fn read_partners(path: &PathBuf) -> Result<Vec<Vec<std::sync::Arc<cojoin::event::Event>>>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read partners file {path:?}"))?;
    let lists: Vec<Vec<serde_json::Value>> = serde_json::from_str(&text).with_context(|| {
        format!("partners file {path:?}: expected one JSON array of events per other topic, e.g. [[{{...}}], []]")
    })?;
    lists
        .into_iter()
        .map(|list| {
            (list.into_iter())
                .map(|e| {
                    keyed_event_from_json(&e.to_string())
                        .map(std::sync::Arc::new)
                        .with_context(|| format!("partners file {path:?}"))
                })
                .collect()
        })
        .collect()
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

pub(crate) fn call(args: CallArgs) -> Result<ExitCode> {
    let a = args.a.as_ref().map(read_event).transpose()?;
    let b = args.b.as_ref().map(read_event).transpose()?;
    let events: Vec<std::sync::Arc<cojoin::event::Event>> = (args.events.iter())
        .map(|path| read_event(path).map(std::sync::Arc::new))
        .collect::<Result<_>>()?;
    let partners = args.partners.as_ref().map(read_partners).transpose()?;
    if a.is_none() && b.is_none() && events.is_empty() {
        anyhow::bail!(
            "give --a and --b (on-match), or one of them (on-expire); for a plugin of world \
             plugin-n, --event once per topic (on-match-n), or one --event and --partners \
             (on-expire-n)"
        );
    }
    if partners.is_some() && events.len() != 1 {
        anyhow::bail!("--partners goes with one --event, the first topic's (on-expire-n)");
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
        (None, None) => match &partners {
            Some(partners) => {
                let event = &events[0];
                worker.on_expire_n(event.key_bytes(), event, partners)
            }
            None => worker.on_match_n(events[0].key_bytes(), &events),
        },
        (Some(a), Some(b)) => {
            if a.key != b.key {
                tracing::warn!("--a and --b have different keys; calling with the key of --a");
            }
            worker.on_match(a.key_bytes(), a, b)
        }
        (Some(a), None) => worker.on_expire(a.key_bytes(), a, Side::LEFT),
        (None, Some(b)) => worker.on_expire(b.key_bytes(), b, Side::RIGHT),
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

pub(crate) fn test(args: TestArgs) -> Result<ExitCode> {
    use cojoin::task::Emit;

    let config = cojoin::config::Config::from_file(&args.config)?;
    let events = std::fs::read_to_string(&args.events)
        .with_context(|| format!("cannot read events file {:?}", args.events))?;
    let registry = load_plugin(&config, &args.config, args.plugin.as_deref())?;
    registry.check_world(config.join.topics.len())?;
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
    if c.table_updates + c.table_misses + c.table_too_old > 0 {
        eprintln!(
            "table updates {}, stream records without a row {}, too old for the history {}",
            c.table_updates, c.table_misses, c.table_too_old
        );
    }
    for reason in &result.halted {
        eprintln!("{reason}");
    }
    Ok(if result.halted.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(4)
    })
}

pub(crate) fn new(args: NewArgs) -> Result<ExitCode> {
    use cojoin::project::template;

    let files = template::files(args.lang, &args.name, args.topics)?;
    let dir = args.dir.unwrap_or_else(|| PathBuf::from(&args.name));
    template::write(&dir, &files)?;
    let test = match args.lang {
        cojoin::project::Lang::Python => "python -m pytest",
        cojoin::project::Lang::Rust => "cargo test",
        cojoin::project::Lang::Js => "node --test",
    };
    println!(
        "created {} ({}, {} topics, {} files); next:",
        dir.display(),
        args.lang,
        args.topics,
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

pub(crate) fn build(dir: &std::path::Path) -> Result<ExitCode> {
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
    let mut how = String::new();
    if built.app_only {
        how.push_str(", app.py only");
    }
    if built.batched {
        how.push_str(", calls in batches");
    }
    println!(
        "built {} ({}{how}, {:.1} MB, sha256 {})",
        shown.display(),
        built.lang,
        built.bytes as f64 / 1e6,
        built.sha256
    );
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn deploy(args: DeployArgs) -> Result<ExitCode> {
    use cojoin::project::deploy::{deploy, DeployError, Outcome};

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
    let outcome = match deploy(&args.admin, token.as_deref(), &name, &bytes) {
        Ok(outcome) => outcome,
        // The upload did not happen, or its answer is unknown: the host's side, not the input
        // (exit 2 is a bad input: no component file, a malformed URL).
        Err(e @ (DeployError::Unreachable { .. } | DeployError::BadAnswer { .. })) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(1));
        }
        Err(e) => return Err(e.into()),
    };
    match outcome {
        Outcome::Live(v) => {
            println!(
                "live on {}: {} generation {} sha256 {}",
                args.admin,
                v["name"].as_str().unwrap_or("?"),
                v["generation"],
                v["sha256"].as_str().unwrap_or("?")
            );
            match &v["persisted"] {
                // The host could not write it: its reason.
                serde_json::Value::String(why) if why.starts_with("not persisted") => {
                    println!("{why}: it serves until the host restarts")
                }
                serde_json::Value::String(file) => println!("kept by the host as {file}"),
                _ => println!("not kept by the host: it serves until its plugin.path changes or it restarts (point plugin.path at a directory to keep uploads)"),
            }
            if let Some(note) = v["note"].as_str() {
                println!("{note}");
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
