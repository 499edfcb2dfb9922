//! The Python build: componentize-py once, then only `app.py` while nothing else changed.
//!
//! componentize-py takes ~10 s for any change (most of it compiling the interpreter to run the
//! app's imports for its snapshot, with no cache), which would be most of an edit-to-live loop.
//! So the component is built around a small loader (`templates/loader.py`) that imports `app`
//! at build time and serves its `WitWorld`. The result is kept in `build/.cojoin-base/` with a
//! fingerprint of everything but the body of `app.py`: the other Python files, the WIT, the
//! toolchain, the virtualenv, and the import lines of `app.py`. When the fingerprint is
//! unchanged, a build is that component plus the new `app.py` in its `cojoin-init-config` section
//! ([`crate::plugin::embedded`]), which the loader runs at init: no componentize-py, and the host
//! compiles nothing new (the compiled code is cached without that section).
//!
//! What the fast path cannot see, it leaves to a full build: a changed import line, a new or
//! changed module beside `app.py`, a package installed. An import hidden from the fingerprint (in
//! an `exec`, say) fails at init with the file named, and the host keeps the running version.

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use super::ProjectError;
use crate::plugin::embedded;

const LOADER: &str = include_str!("../../templates/loader.py");
const LOADER_MODULE: &str = "cojoin_app_loader";
/// The init config key the loader reads the source from.
const SOURCE_KEY: &str = "cojoin.python.app";

/// How a Python build went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PythonBuild {
    /// componentize-py ran.
    Full,
    /// The kept component with the new `app.py` embedded.
    AppOnly,
}

/// The world a Python project is built for: `plugin-n` when `app.py` defines `on_match_n` (a join
/// of three topics or more), else `plugin-batched` when the project's WIT has it (the loader
/// serves the batches either way), else `plugin` (a project made before batches).
pub fn world(dir: &Path) -> Result<&'static str, ProjectError> {
    let app = dir.join("app.py");
    let source = std::fs::read_to_string(&app).map_err(ProjectError::io(&app))?;
    let defines_n = source
        .lines()
        .any(|l| l.trim_start().starts_with("def on_match_n("));
    Ok(if defines_n {
        "plugin-n"
    } else if super::toolchain::has_batched_world(dir) {
        "plugin-batched"
    } else {
        "plugin"
    })
}

/// Builds the project in `dir` to `out` with componentize-py (`program`) for `world` (from
/// [`world`]), or reuses the kept component when only the body of `app.py` changed.
pub fn build(
    dir: &Path,
    program: &Path,
    out: &Path,
    world: &str,
) -> Result<PythonBuild, ProjectError> {
    let base_dir = dir.join("build/.cojoin-base");
    let base = base_dir.join("base.wasm");
    let fingerprint_file = base_dir.join("fingerprint");
    let app = dir.join("app.py");
    let source = std::fs::read_to_string(&app).map_err(ProjectError::io(&app))?;
    let fingerprint = fingerprint(dir, program, &source, world);
    let kept = std::fs::read_to_string(&fingerprint_file).ok();
    if kept.as_deref() == Some(fingerprint.as_str()) {
        if let Ok(bytes) = std::fs::read(&base) {
            check_syntax(program, dir)?;
            let with_app = embedded::append(&bytes, &[(SOURCE_KEY.to_owned(), source)]);
            std::fs::write(out, with_app).map_err(ProjectError::io(out))?;
            return Ok(PythonBuild::AppOnly);
        }
    }
    std::fs::create_dir_all(&base_dir).map_err(ProjectError::io(&base_dir))?;
    let loader = base_dir.join(format!("{LOADER_MODULE}.py"));
    std::fs::write(&loader, LOADER).map_err(ProjectError::io(&loader))?;
    let _ = std::fs::remove_file(&fingerprint_file);
    let mut cmd = Command::new(program);
    cmd.args(["-d", "wit", "-w", world, "componentize", "-p", "."])
        .arg("-p")
        .arg(&base_dir)
        .arg(LOADER_MODULE)
        .arg("-o")
        .arg(out);
    super::toolchain::run(cmd, dir, "")?;
    std::fs::copy(out, &base).map_err(ProjectError::io(&base))?;
    std::fs::write(&fingerprint_file, fingerprint).map_err(ProjectError::io(&fingerprint_file))?;
    Ok(PythonBuild::Full)
}

/// A syntax error is reported by the build, as componentize-py would, not at the host's init:
/// checked with the Python beside componentize-py (its virtualenv's), when there is one.
fn check_syntax(program: &Path, dir: &Path) -> Result<(), ProjectError> {
    let Some(python) = program
        .parent()
        .map(|bin| bin.join("python3"))
        .filter(|p| p.is_file())
    else {
        return Ok(());
    };
    let mut cmd = Command::new(python);
    cmd.args([
        "-c",
        "import sys; compile(open('app.py', encoding='utf-8').read(), 'app.py', 'exec')",
    ]);
    super::toolchain::run(cmd, dir, ": app.py does not compile")
}

/// Everything a build's result depends on except the body of `app.py` (and its world, which
/// `app.py` decides).
fn fingerprint(dir: &Path, program: &Path, app_source: &str, world: &str) -> String {
    let mut h = Sha256::new();
    h.update(LOADER.as_bytes());
    h.update(world.as_bytes());
    h.update(program.as_os_str().as_encoded_bytes());
    if let Ok(meta) = std::fs::metadata(program) {
        h.update(format!("{:?} {}", meta.modified().ok(), meta.len()));
    }
    // componentize-py adds the active virtualenv's site-packages to the path.
    if let Some(venv) = std::env::var_os("VIRTUAL_ENV") {
        h.update(venv.as_encoded_bytes());
        h.update(format!("{:?}", tree_times(Path::new(&venv))));
    }
    for line in app_source.lines().map(str::trim_start) {
        if line.starts_with("import ") || line.starts_with("from ") {
            h.update(line.as_bytes());
            h.update(b"\n");
        }
    }
    for file in inputs(dir) {
        h.update(
            file.strip_prefix(dir)
                .unwrap_or(&file)
                .as_os_str()
                .as_encoded_bytes(),
        );
        h.update(std::fs::read(&file).unwrap_or_default());
    }
    hex::encode(h.finalize())
}

/// The files componentize-py reads from the project besides `app.py`: Python modules and the
/// WIT, skipping the build output, tests, virtualenvs and hidden directories.
fn inputs(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let skipped = name.starts_with('.')
                || matches!(
                    name.as_str(),
                    "build" | "target" | "tests" | "node_modules" | "__pycache__" | "venv"
                );
            if path.is_dir() {
                if !skipped {
                    stack.push(path);
                }
            } else if !(d == dir && name == "app.py")
                && (path.extension().is_some_and(|e| e == "py" || e == "wit"))
            {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// Modification times of a virtualenv's `lib/python*/site-packages` directories: installing or
/// removing a package changes them.
fn tree_times(venv: &Path) -> Vec<std::time::SystemTime> {
    let lib = venv.join("lib");
    let Ok(entries) = std::fs::read_dir(lib) else {
        return Vec::new();
    };
    let mut times: Vec<_> = entries
        .flatten()
        .filter_map(|e| {
            std::fs::metadata(e.path().join("site-packages"))
                .ok()?
                .modified()
                .ok()
        })
        .collect();
    times.sort();
    times
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let files = super::super::template::files(super::super::Lang::Python, "p", 2).unwrap();
        super::super::template::write(&dir.path().join("p"), &files).unwrap();
        dir
    }

    #[test]
    fn an_app_defining_on_match_n_is_built_for_plugin_n_and_a_two_topic_app_with_batches() {
        for (topics, expected) in [(2, "plugin-batched"), (3, "plugin-n")] {
            let tmp = tempfile::tempdir().unwrap();
            let dir = tmp.path().join("p");
            let files = super::super::template::files(super::super::Lang::Python, "p", topics);
            super::super::template::write(&dir, &files.unwrap()).unwrap();
            assert_eq!(world(&dir).unwrap(), expected, "{topics} topics");
        }
    }

    #[test]
    fn the_fingerprint_ignores_the_body_of_app_py_and_nothing_else() {
        let tmp = project();
        let dir = tmp.path().join("p");
        let program = Path::new("/nonexistent/componentize-py");
        let app = std::fs::read_to_string(dir.join("app.py")).unwrap();
        let before = fingerprint(&dir, program, &app, "plugin-batched");

        let body_changed = app.replace("\"matched\"", "\"paid\"");
        assert_ne!(app, body_changed);
        assert_eq!(
            fingerprint(&dir, program, &body_changed, "plugin-batched"),
            before
        );
        // Build output and tests are not inputs.
        std::fs::create_dir_all(dir.join("build/.cojoin-base")).unwrap();
        std::fs::write(dir.join("build/.cojoin-base/x.py"), "x = 1").unwrap();
        std::fs::write(dir.join("tests/test_more.py"), "y = 1").unwrap();
        assert_eq!(fingerprint(&dir, program, &app, "plugin-batched"), before);

        let import_added = format!("import decimal\n{app}");
        assert_ne!(
            fingerprint(&dir, program, &import_added, "plugin-batched"),
            before
        );
        let indented_import = app.replace("    def init", "    import re\n    def init");
        assert_ne!(
            fingerprint(&dir, program, &indented_import, "plugin-batched"),
            before
        );
        std::fs::write(dir.join("helpers.py"), "z = 1").unwrap();
        let with_module = fingerprint(&dir, program, &app, "plugin-batched");
        assert_ne!(with_module, before);
        std::fs::write(dir.join("helpers.py"), "z = 2").unwrap();
        assert_ne!(
            fingerprint(&dir, program, &app, "plugin-batched"),
            with_module
        );
        let wit = dir.join("wit/plugin.wit");
        let mut text = std::fs::read_to_string(&wit).unwrap();
        text.push_str("\n// changed\n");
        std::fs::write(&wit, text).unwrap();
        assert_ne!(
            fingerprint(&dir, program, &app, "plugin-batched"),
            with_module
        );
    }
}
