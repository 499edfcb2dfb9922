//! `cojoin plugin build`: which language a project is written in, the toolchain command that
//! makes its component, and the component it made (path, size, sha256).
//!
//! The component goes where the project's `cojoin.toml` says the plugin is (`plugin.path`), so
//! `plugin test` and `deploy` find it; it is written aside and renamed in, so a host watching
//! that file never loads half of it.

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use super::toolchain::{self, run, Tool};
use super::{Lang, ProjectError};

/// The component a build made.
#[derive(Debug)]
pub struct Built {
    pub lang: Lang,
    pub path: PathBuf,
    pub bytes: u64,
    pub sha256: String,
    /// Python: the component kept from an earlier build, with the new `app.py` embedded
    /// ([`super::python`]).
    pub app_only: bool,
    /// The component exports `on-batch` (world `plugin-batched`): the host makes many calls in
    /// one.
    pub batched: bool,
}

/// The language of the project in `dir`, from the files `cojoin plugin new` writes.
pub fn detect(dir: &Path) -> Result<Lang, ProjectError> {
    if dir.join("Cargo.toml").is_file() {
        Ok(Lang::Rust)
    } else if dir.join("app.py").is_file() {
        Ok(Lang::Python)
    } else if dir.join("package.json").is_file() {
        Ok(Lang::Js)
    } else {
        Err(ProjectError::NotAProject(dir.to_owned()))
    }
}

/// `plugin.path` of the project's `cojoin.toml`, relative to the project; without one,
/// `build/<directory name>.wasm`. Only that field is read: a config with other mistakes still
/// builds (`plugin test` names them).
pub fn output_path(dir: &Path) -> PathBuf {
    let configured = std::fs::read_to_string(dir.join("cojoin.toml"))
        .ok()
        .and_then(|text| text.parse::<toml::Table>().ok())
        .and_then(|t| Some(t.get("plugin")?.get("path")?.as_str()?.to_owned()));
    match configured {
        Some(path) => dir.join(path),
        None => {
            let name = dir
                .file_name()
                .map_or("plugin".into(), |n| n.to_string_lossy());
            dir.join("build").join(format!("{name}.wasm"))
        }
    }
}

/// Builds the project in `dir` (absolute) with its toolchain, whose output goes to stderr.
pub fn build(dir: &Path) -> Result<Built, ProjectError> {
    let lang = detect(dir)?;
    let out = output_path(dir);
    let parent = out.parent().unwrap_or(dir);
    std::fs::create_dir_all(parent).map_err(ProjectError::io(parent))?;
    let partial = out.with_extension("wasm.partial");
    let program = toolchain::find(Tool::for_lang(lang), dir)?;
    let mut app_only = false;
    let mut batched = false;
    match lang {
        Lang::Python => {
            // The loader serves on_batch (on_batch_n) when built for that world.
            let world = super::python::world(dir)?;
            batched = world != "plugin";
            app_only = super::python::build(dir, &program, &partial, world)?
                == super::python::PythonBuild::AppOnly;
        }
        Lang::Js => batched = super::js::build(dir, &program, &js_entry(dir), &partial)?,
        Lang::Rust => {
            check_wasm_target()?;
            let mut cmd = Command::new(&program);
            cmd.args(["build", "--release", "--target", "wasm32-wasip2"]);
            run(
                cmd,
                dir,
                "; `rustup target add wasm32-wasip2` if the target is missing",
            )?;
            let made = rust_target_dir(dir)
                .join("wasm32-wasip2/release")
                .join(format!("{}.wasm", rust_lib_name(dir)?));
            std::fs::copy(&made, &partial).map_err(|_| ProjectError::NoOutput(made.clone()))?;
        }
    }
    if !partial.is_file() {
        return Err(ProjectError::NoOutput(partial));
    }
    std::fs::rename(&partial, &out).map_err(ProjectError::io(&out))?;
    let bytes = std::fs::read(&out).map_err(ProjectError::io(&out))?;
    Ok(Built {
        lang,
        path: out,
        bytes: bytes.len() as u64,
        sha256: hex::encode(Sha256::digest(&bytes)),
        app_only,
        batched,
    })
}

/// `main` of package.json, else `plugin.js`.
fn js_entry(dir: &Path) -> String {
    std::fs::read(dir.join("package.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v["main"].as_str().map(str::to_owned))
        .unwrap_or_else(|| "plugin.js".to_owned())
}

/// The file name cargo gives the library: the package name with `-` as `_`.
fn rust_lib_name(dir: &Path) -> Result<String, ProjectError> {
    let manifest = dir.join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest).map_err(ProjectError::io(&manifest))?;
    let table: toml::Table = text.parse().map_err(|e| ProjectError::Io {
        path: manifest.clone(),
        error: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
    })?;
    let lib = table.get("lib").and_then(|l| l.get("name"));
    let package = table.get("package").and_then(|p| p.get("name"));
    let name = lib
        .or(package)
        .and_then(|n| n.as_str())
        .ok_or_else(|| ProjectError::Io {
            path: manifest.clone(),
            error: std::io::Error::new(std::io::ErrorKind::InvalidData, "no [package] name"),
        })?;
    Ok(name.replace('-', "_"))
}

/// `$CARGO_TARGET_DIR` when set (as cargo reads it), else the project's `target/`.
fn rust_target_dir(dir: &Path) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(t) => dir.join(t),
        None => dir.join("target"),
    }
}

/// With rustup, the missing target is found before a long build fails on it.
fn check_wasm_target() -> Result<(), ProjectError> {
    let Ok(out) = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
    else {
        return Ok(()); // no rustup: cargo will say it if the target is missing
    };
    let installed = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || installed.lines().any(|l| l.trim() == "wasm32-wasip2") {
        return Ok(());
    }
    Err(ProjectError::ToolMissing {
        tool: "the Rust target wasm32-wasip2",
        looked: "rustup target list --installed".to_owned(),
        install: "run `rustup target add wasm32-wasip2`".to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_project_is_recognised_and_builds_to_its_configured_path() {
        for lang in Lang::ALL {
            let dir = tempfile::tempdir().unwrap();
            let project = dir.path().join("p1");
            let files = super::super::template::files(lang, "p1", 2).unwrap();
            super::super::template::write(&project, &files).unwrap();
            assert_eq!(detect(&project).unwrap(), lang);
            assert_eq!(output_path(&project), project.join("build/p1.wasm"));
            if lang == Lang::Rust {
                assert_eq!(rust_lib_name(&project).unwrap(), "p1");
            }
        }
    }

    #[test]
    fn an_empty_directory_is_not_a_project_and_the_error_says_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let err = detect(dir.path()).unwrap_err().to_string();
        assert!(err.contains("cojoin plugin new"), "{err}");
        assert_eq!(output_path(dir.path()).extension().unwrap(), "wasm");
    }
}
