//! The JavaScript build: componentize-js on the entry file, with `onBatch` added
//! (`templates/batch.js`, world `plugin-batched`) when the entry declares `onMatch` and
//! `onExpire` as exported functions or constants: one guest call for many matches saves most of
//! StarlingMonkey's per-call cost (a no-op call: 44 µs alone, 33 µs in batches of 32). An entry
//! declaring `onMatchN` and `onExpireN` (a join of three topics or more) gets `onBatchN`
//! (`templates/batch-n.js`, world `plugin-n`, which requires it).
//!
//! componentize-js takes one file, so the entry and the template are joined into a file beside
//! the entry (`.cojoin-batched.js`, removed after the build), where its relative paths still hold.

use std::path::Path;
use std::process::Command;

use super::toolchain::{has_batched_world, run};
use super::ProjectError;

/// Appended to a plugin's entry file; also used by `make plugins` for the repository's plugins.
const BATCH: &str = include_str!("../../templates/batch.js");
/// Appended to an N-way plugin's entry file.
const BATCH_N: &str = include_str!("../../templates/batch-n.js");

/// The joined file, beside the entry.
const BATCHED_ENTRY: &str = ".cojoin-batched.js";

/// Builds the project in `dir`, whose entry file is `entry`, to `out` with componentize-js
/// (`program`); whether the component takes batches.
pub fn build(dir: &Path, program: &Path, entry: &str, out: &Path) -> Result<bool, ProjectError> {
    let source_path = dir.join(entry);
    let source = std::fs::read_to_string(&source_path).map_err(ProjectError::io(&source_path))?;
    let n_way = declares(&source, "onMatchN") && declares(&source, "onExpireN");
    let batched = n_way || has_batched_world(dir) && declares_exports(&source);
    let joined = source_path.with_file_name(BATCHED_ENTRY);
    let (input, world) = if batched {
        let (batch, world) = if n_way {
            (BATCH_N, "plugin-n")
        } else {
            (BATCH, "plugin-batched")
        };
        std::fs::write(&joined, format!("{source}\n{batch}")).map_err(ProjectError::io(&joined))?;
        (joined.clone(), world)
    } else {
        eprintln!(
            "note: {entry} is built without onBatch (each match is its own call): it does not \
             declare `export function onMatch` and `export function onExpire`, or its wit/ \
             predates the world plugin-batched"
        );
        (source_path, "plugin")
    };
    let mut cmd = Command::new(program);
    cmd.arg(&input)
        // `-d http -d fetch-event` keeps wasi:http out of the imports: the host links none, and
        // a component importing it is refused.
        .args([
            "--wit",
            "wit",
            "--world-name",
            world,
            "-d",
            "http",
            "-d",
            "fetch-event",
            "-o",
        ])
        .arg(out);
    let result = run(cmd, dir, "");
    if batched {
        let _ = std::fs::remove_file(&joined);
    }
    result.map(|()| batched)
}

/// Whether `onMatch` and `onExpire` are bindings of the module's top level that the appended
/// `onBatch` can call.
fn declares_exports(source: &str) -> bool {
    declares(source, "onMatch") && declares(source, "onExpire")
}

/// Whether `name` is a binding of the module's top level: an exported function, constant or
/// variable.
fn declares(source: &str, name: &str) -> bool {
    source.lines().map(str::trim_start).any(|line| {
        [
            "export function ",
            "export const ",
            "export let ",
            "export var ",
        ]
        .iter()
        .any(|prefix| {
            line.strip_prefix(prefix).is_some_and(|rest| {
                rest.strip_prefix(name).is_some_and(|after| {
                    !after.starts_with(|c: char| c.is_alphanumeric() || c == '_' || c == '$')
                })
            })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::{declares, declares_exports};

    #[test]
    fn batching_needs_both_calls_as_top_level_exports() {
        let both =
            "export function onMatch(key, a, b) {}\n  export const onExpire = (k, e, s) => [];";
        assert!(declares_exports(both));
        assert!(!declares_exports("export function onMatch() {}"));
        // Exported under another name: `onMatch` is not a binding of the module.
        assert!(!declares_exports(
            "function m() {}\nfunction e() {}\nexport { m as onMatch, e as onExpire };"
        ));
        assert!(!declares_exports(
            "export function onMatchAll() {}\nexport function onExpire() {}"
        ));
        // The N-way calls are not the two-topic ones.
        let n = "export function onMatchN(k, e) {}\nexport function onExpireN(k, e, p) {}";
        assert!(!declares_exports(n));
        assert!(declares(n, "onMatchN") && declares(n, "onExpireN"));
    }
}
