//! What the subcommands share: where compiled components are cached, loading the configured
//! plugin, and the Ctrl-C / SIGTERM flag.

pub(crate) mod host;
pub(crate) mod plugin;

use std::path::PathBuf;

use anyhow::{Context, Result};
use cojoin::plugin::{EngineOptions, PluginEngine, PluginLimits, PluginRegistry};

pub(crate) fn default_cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("COJOIN_CACHE_DIR") {
        return Some(dir.into());
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("cojoin"))
}

/// Engine and registry for the plugin a config names; a relative plugin path is relative to the
/// config file.
pub(crate) fn load_plugin(
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
pub(crate) fn configured_plugin_path(
    config: &cojoin::config::Config,
    config_path: &std::path::Path,
) -> PathBuf {
    config_path
        .parent()
        .unwrap_or(std::path::Path::new("."))
        .join(&config.plugin.path)
}

/// An engine (fuel metering on when the limits ask for fuel) and the plugin's registry.
pub(crate) fn open_registry(
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

/// A flag set by the first SIGINT/SIGTERM (saying `first`); the second exits at once (130).
pub(crate) fn on_signal(
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
