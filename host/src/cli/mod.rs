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
        cache_max_bytes: cache_max_bytes(std::env::var("COJOIN_CACHE_MAX_MIB").ok().as_deref())?,
        fuel: limits.fuel.is_some(),
        ..EngineOptions::default()
    })?;
    Ok(PluginRegistry::from_file(engine, path, limits, config)?)
}

/// The compile caches' cap from `$COJOIN_CACHE_MAX_MIB` (unset: 4096); 0 stores nothing.
fn cache_max_bytes(mib: Option<&str>) -> Result<u64> {
    let Some(mib) = mib else {
        return Ok(cojoin::plugin::DEFAULT_CACHE_MAX_BYTES);
    };
    mib.trim()
        .parse::<u64>()
        .ok()
        .and_then(|m| m.checked_mul(1 << 20))
        .with_context(|| {
            format!("COJOIN_CACHE_MAX_MIB={mib:?}: expected a whole number of MiB, such as 4096 (0 keeps no compiled code)")
        })
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

#[cfg(test)]
mod tests {
    use super::cache_max_bytes;

    #[test]
    fn the_cache_cap_comes_from_the_environment_in_mib_and_a_bad_value_names_the_variable() {
        assert_eq!(
            cache_max_bytes(None).unwrap(),
            cojoin::plugin::DEFAULT_CACHE_MAX_BYTES
        );
        assert_eq!(cache_max_bytes(Some("512")).unwrap(), 512 << 20);
        assert_eq!(cache_max_bytes(Some("0")).unwrap(), 0);
        for bad in ["4G", "-1", "", "99999999999999999"] {
            let e = cache_max_bytes(Some(bad)).unwrap_err().to_string();
            assert!(
                e.contains("COJOIN_CACHE_MAX_MIB") && e.contains("MiB"),
                "{bad}: {e}"
            );
        }
    }
}
