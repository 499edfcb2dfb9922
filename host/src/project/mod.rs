//! A plugin project on disk: what `cojoin plugin new`, `build` and `deploy` work on.
//!
//! - [`template`]: the files of a new project per language, embedded in the binary (pure), and
//!   writing them out.
//! - [`toolchain`]: finding the tool that turns a project into a component, or saying how to
//!   install it.
//! - [`build`]: which language a directory holds, running its toolchain, the component it made.
//! - [`deploy`]: uploading a component to a running host's admin server (`PUT /plugins`).
//!
//! None of it touches the join, Kafka or wasmtime: a project is files and child processes, and a
//! deploy is one HTTP request. The host validates what it is sent.

pub mod build;
pub mod deploy;
pub mod js;
pub mod python;
pub mod template;
pub mod toolchain;

use std::path::PathBuf;

/// The languages a project can be written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lang {
    Python,
    Rust,
    Js,
}

impl Lang {
    pub const ALL: [Lang; 3] = [Lang::Python, Lang::Rust, Lang::Js];

    pub fn name(self) -> &'static str {
        match self {
            Lang::Python => "python",
            Lang::Rust => "rust",
            Lang::Js => "js",
        }
    }
}

impl std::fmt::Display for Lang {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Lang {
    type Err = ProjectError;

    fn from_str(s: &str) -> Result<Lang, ProjectError> {
        match s.to_ascii_lowercase().as_str() {
            "python" | "py" => Ok(Lang::Python),
            "rust" | "rs" => Ok(Lang::Rust),
            "js" | "javascript" => Ok(Lang::Js),
            _ => Err(ProjectError::UnknownLang(s.to_owned())),
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProjectError {
    #[error("unknown language {0:?}: use --lang python, rust or js")]
    UnknownLang(String),
    #[error("plugin name {name:?} {problem}: use a letter, then letters, digits, '-' or '_' (at most 64), e.g. order-paid")]
    BadName { name: String, problem: &'static str },
    #[error("--topics {0}: a project joins 2 to 8 topics (2: world plugin, on-match(key, a, b); 3 or more: world plugin-n, on-match-n(key, events))")]
    BadTopics(usize),
    #[error("{0:?} already exists: choose another name, or give --dir for a new directory")]
    Exists(PathBuf),
    #[error("{path:?}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{0:?} holds no plugin project (no Cargo.toml, app.py or package.json): run in a directory made by `cojoin plugin new`, or give it")]
    NotAProject(PathBuf),
    #[error("{tool} not found (looked in {looked}): {install}")]
    ToolMissing {
        tool: &'static str,
        looked: String,
        install: String,
    },
    #[error("`{command}` failed ({status}){hint}")]
    BuildFailed {
        command: String,
        status: String,
        hint: String,
    },
    #[error("the build finished but wrote no {0:?}: check the build's output above")]
    NoOutput(PathBuf),
}

impl ProjectError {
    fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> ProjectError {
        let path = path.into();
        move |error| ProjectError::Io { path, error }
    }
}
