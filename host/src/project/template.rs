//! The files of a new plugin project, per language: embedded in the binary from `host/templates/`
//! (so `cojoin plugin new` needs nothing else installed), with `{{name}}` replaced by the
//! plugin's name. Every project also gets the WIT contract, a `cojoin.toml` for
//! `cojoin plugin test`, and sample events.

use std::path::{Path, PathBuf};

use super::{Lang, ProjectError};

/// One file of a project: its path inside the project and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectFile {
    pub path: &'static str,
    pub text: String,
}

/// Where `include_str!` finds a template, relative to this file.
macro_rules! template {
    ($path:literal) => {
        include_str!(concat!("../../templates/", $path))
    };
}

const COMMON: [(&str, &str); 5] = [
    ("wit/plugin.wit", include_str!("../../../wit/plugin.wit")),
    ("cojoin.toml", template!("common/cojoin.toml")),
    (
        "samples/events.jsonl",
        template!("common/samples/events.jsonl"),
    ),
    ("samples/order.json", template!("common/samples/order.json")),
    (
        "samples/payment.json",
        template!("common/samples/payment.json"),
    ),
];

const PYTHON: [(&str, &str); 10] = [
    ("app.py", template!("python/app.py")),
    ("README.md", template!("python/README.md")),
    (".gitignore", template!("python/gitignore")),
    ("tests/conftest.py", template!("python/tests/conftest.py")),
    ("tests/test_app.py", template!("python/tests/test_app.py")),
    (
        "tests/stand_ins/componentize_py_types.py",
        template!("python/tests/stand_ins/componentize_py_types.py"),
    ),
    (
        "tests/stand_ins/wit_world/__init__.py",
        template!("python/tests/stand_ins/wit_world/__init__.py"),
    ),
    (
        "tests/stand_ins/wit_world/imports/__init__.py",
        template!("python/tests/stand_ins/wit_world/imports/__init__.py"),
    ),
    (
        "tests/stand_ins/wit_world/imports/types.py",
        template!("python/tests/stand_ins/wit_world/imports/types.py"),
    ),
    (
        "tests/stand_ins/wit_world/imports/host.py",
        template!("python/tests/stand_ins/wit_world/imports/host.py"),
    ),
];

const RUST: [(&str, &str); 4] = [
    // Not named Cargo.toml in the repository, where cargo would take it for a package.
    ("Cargo.toml", template!("rust/Cargo.toml.tmpl")),
    ("src/lib.rs", template!("rust/src/lib.rs")),
    ("README.md", template!("rust/README.md")),
    (".gitignore", template!("rust/gitignore")),
];

const JS: [(&str, &str); 5] = [
    ("plugin.js", template!("js/plugin.js")),
    ("package.json", template!("js/package.json")),
    ("test/plugin.test.js", template!("js/test/plugin.test.js")),
    ("README.md", template!("js/README.md")),
    (".gitignore", template!("js/gitignore")),
];

/// A name is used as a directory, a Rust package, an upload name and inside generated text.
pub fn check_name(name: &str) -> Result<(), ProjectError> {
    let bad = |problem| {
        Err(ProjectError::BadName {
            name: name.to_owned(),
            problem,
        })
    };
    if name.is_empty() || name.len() > 64 {
        return bad("is empty or too long");
    }
    if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return bad("does not start with a letter");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return bad("holds characters other than letters, digits, '-' and '_'");
    }
    // Cargo refuses these as package names (they clash with the standard crates).
    if ["test", "core", "std", "alloc", "proc_macro"].contains(&name) {
        return bad("is a name Rust reserves");
    }
    Ok(())
}

/// The files of a new `lang` project named `name`.
pub fn files(lang: Lang, name: &str) -> Result<Vec<ProjectFile>, ProjectError> {
    check_name(name)?;
    let own: &[(&'static str, &'static str)] = match lang {
        Lang::Python => &PYTHON,
        Lang::Rust => &RUST,
        Lang::Js => &JS,
    };
    Ok(own
        .iter()
        .chain(COMMON.iter())
        .map(|&(path, text)| ProjectFile {
            path,
            text: text.replace("{{name}}", name),
        })
        .collect())
}

/// Writes a new project into `dir`, which must not exist yet (nothing is overwritten).
pub fn write(dir: &Path, files: &[ProjectFile]) -> Result<(), ProjectError> {
    if dir.exists() {
        return Err(ProjectError::Exists(dir.to_owned()));
    }
    for file in files {
        let path: PathBuf = dir.join(file.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(ProjectError::io(parent))?;
        }
        std::fs::write(&path, &file.text).map_err(ProjectError::io(&path))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_language_gets_the_contract_a_config_samples_and_its_name_everywhere() {
        for lang in Lang::ALL {
            let files = files(lang, "fraud-check").unwrap();
            let paths: Vec<_> = files.iter().map(|f| f.path).collect();
            for common in ["wit/plugin.wit", "cojoin.toml", "samples/events.jsonl"] {
                assert!(paths.contains(&common), "{lang}: {paths:?}");
            }
            for f in &files {
                assert!(
                    !f.text.contains("{{"),
                    "{lang} {}: a placeholder left",
                    f.path
                );
            }
            let config = files.iter().find(|f| f.path == "cojoin.toml").unwrap();
            let config = crate::config::Config::parse(&config.text).unwrap();
            assert_eq!(
                config.plugin.path,
                std::path::Path::new("build/fraud-check.wasm")
            );
        }
    }

    #[test]
    fn the_sample_events_are_what_plugin_test_and_call_read() {
        let files = files(Lang::Python, "p").unwrap();
        let text = |path: &str| files.iter().find(|f| f.path == path).unwrap().text.clone();
        for line in text("samples/events.jsonl").lines() {
            crate::json::event_from_json(line).unwrap();
        }
        for path in ["samples/order.json", "samples/payment.json"] {
            crate::json::keyed_event_from_json(&text(path)).unwrap();
        }
    }

    #[test]
    fn a_name_that_is_not_a_plain_identifier_is_refused_with_the_rule() {
        for bad in ["", "1st", "a/b", "../x", "a b", "test", &"x".repeat(65)] {
            let err = check_name(bad).unwrap_err().to_string();
            assert!(err.contains("e.g. order-paid"), "{bad:?}: {err}");
        }
        check_name("order_paid-2").unwrap();
    }
}
