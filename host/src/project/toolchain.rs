//! Finding the tool that builds a project's component: an environment variable naming it, then
//! the places a project or a cojoin checkout installs it (`.venv/bin`, `node_modules/.bin`, in
//! the project or a directory above it, or above the `cojoin` binary), then `PATH`. When it is
//! nowhere, the error says how to install it. And running it ([`run`]), and which world of the
//! project's WIT it builds for ([`has_batched_world`]).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{Lang, ProjectError};

/// A build tool: its program name, the variable that overrides where it is, and where a project
/// or a checkout keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tool {
    pub program: &'static str,
    pub env: &'static str,
    /// Paths, relative to a directory, where it is installed locally.
    local: &'static [&'static str],
    install: &'static str,
}

pub const COMPONENTIZE_PY: Tool = Tool {
    program: "componentize-py",
    env: "COJOIN_COMPONENTIZE_PY",
    local: &[".venv/bin/componentize-py"],
    install: "install it with `python3 -m venv .venv && .venv/bin/pip install componentize-py==0.25.1` in the project (or on the PATH), or set COJOIN_COMPONENTIZE_PY to it",
};

pub const COMPONENTIZE_JS: Tool = Tool {
    program: "componentize-js",
    env: "COJOIN_COMPONENTIZE_JS",
    // The project's own, or a cojoin checkout's (plugins/js, installed by `make`).
    local: &[
        "node_modules/.bin/componentize-js",
        "plugins/js/node_modules/.bin/componentize-js",
    ],
    install: "run `npm install` in the project (package.json lists @bytecodealliance/componentize-js 0.23.0), or set COJOIN_COMPONENTIZE_JS to it",
};

pub const CARGO: Tool = Tool {
    program: "cargo",
    env: "COJOIN_CARGO",
    local: &[],
    install: "install Rust with rustup (https://rustup.rs), then `rustup target add wasm32-wasip2`",
};

impl Tool {
    pub fn for_lang(lang: Lang) -> Tool {
        match lang {
            Lang::Python => COMPONENTIZE_PY,
            Lang::Rust => CARGO,
            Lang::Js => COMPONENTIZE_JS,
        }
    }
}

/// Where `tool` may be, in the order they are tried: `project` and its parents, then the
/// directory of the `cojoin` binary (a venv's `bin/`, where pip put both) and its parents, then
/// each `PATH` entry. Pure, so the order is tested.
pub fn candidates(
    tool: Tool,
    project: &Path,
    exe_dir: Option<&Path>,
    path: &[PathBuf],
) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in project.ancestors() {
        out.extend(tool.local.iter().map(|l| dir.join(l)));
    }
    if let Some(exe_dir) = exe_dir {
        out.push(exe_dir.join(tool.program));
        for dir in exe_dir.ancestors() {
            out.extend(tool.local.iter().map(|l| dir.join(l)));
        }
    }
    out.extend(path.iter().map(|dir| dir.join(tool.program)));
    out
}

/// The program to run for `tool`, building `project` (an absolute path).
pub fn find(tool: Tool, project: &Path) -> Result<PathBuf, ProjectError> {
    if let Some(named) = std::env::var_os(tool.env) {
        let named = PathBuf::from(named);
        return if is_executable(&named) {
            Ok(named)
        } else {
            Err(ProjectError::ToolMissing {
                tool: tool.program,
                looked: format!("{}={named:?}, not an executable file", tool.env),
                install: tool.install.to_owned(),
            })
        };
    }
    let exe = std::env::current_exe().ok();
    let exe_dir = exe.as_deref().and_then(Path::parent);
    let path: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    let found = candidates(tool, project, exe_dir, &path)
        .into_iter()
        .find(|p| is_executable(p));
    found.ok_or_else(|| {
        let mut looked = vec![format!("${}", tool.env)];
        if let Some(local) = tool.local.first() {
            looked.push(format!("{local} in {project:?} and above"));
        }
        if let Some(dir) = exe_dir {
            looked.push(format!("next to and above {dir:?}"));
        }
        looked.push("PATH".to_owned());
        ProjectError::ToolMissing {
            tool: tool.program,
            looked: looked.join(", "),
            install: tool.install.to_owned(),
        }
    })
}

/// Runs a toolchain command in `dir`; a failure names the command, its status and `hint`.
pub(super) fn run(mut cmd: Command, dir: &Path, hint: &str) -> Result<(), ProjectError> {
    let shown = format!("{cmd:?}").replace('"', "");
    let status = cmd
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        // The toolchain's chatter goes to stderr: stdout is left for the result line, which
        // scripts read.
        .stdout(std::io::stderr())
        .status()
        .map_err(|e| ProjectError::BuildFailed {
            command: shown.clone(),
            status: e.to_string(),
            hint: hint.to_owned(),
        })?;
    if status.success() {
        Ok(())
    } else {
        Err(ProjectError::BuildFailed {
            command: shown,
            status: status.to_string(),
            hint: hint.to_owned(),
        })
    }
}

/// Whether the project's WIT has the world `plugin-batched` (a project made before it has an
/// older copy in `wit/`, and is built for the world `plugin`).
pub(super) fn has_batched_world(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("wit/plugin.wit"))
        .is_ok_and(|wit| wit.contains("world plugin-batched"))
}

fn is_executable(path: &Path) -> bool {
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        meta.is_file() && meta.permissions().mode() & 0o111 != 0
    }
    #[cfg(not(unix))]
    {
        meta.is_file()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_project_comes_first_then_the_binary_s_venv_and_checkout_then_path() {
        let got = candidates(
            COMPONENTIZE_PY,
            Path::new("/src/cojoin/my-plugin"),
            Some(Path::new("/src/cojoin/target/release")),
            &[PathBuf::from("/usr/bin")],
        );
        let at = |p: &str| {
            got.iter()
                .position(|c| c == Path::new(p))
                .unwrap_or_else(|| panic!("{p} not in {got:?}"))
        };
        assert_eq!(at("/src/cojoin/my-plugin/.venv/bin/componentize-py"), 0);
        assert!(
            at("/src/cojoin/.venv/bin/componentize-py")
                < at("/src/cojoin/target/release/componentize-py")
        );
        assert!(at("/src/cojoin/target/release/componentize-py") < at("/usr/bin/componentize-py"));
        assert_eq!(got.last().unwrap(), Path::new("/usr/bin/componentize-py"));
    }

    #[test]
    fn a_js_project_finds_the_checkout_s_componentize_js() {
        let got = candidates(COMPONENTIZE_JS, Path::new("/src/cojoin/p"), None, &[]);
        assert!(got.contains(&PathBuf::from(
            "/src/cojoin/plugins/js/node_modules/.bin/componentize-js"
        )));
        assert_eq!(
            got[0],
            PathBuf::from("/src/cojoin/p/node_modules/.bin/componentize-js")
        );
    }
}
