//! The wheel `make wheel` builds (packaging/wheel.py): pip installs it into a fresh venv, offline,
//! and the `cojoin` command it gives works on its own, templates included.

use std::path::Path;
use std::process::{Command, Output};

use cojoin_e2e::{cojoin_bin, ok, root};

fn run(program: impl AsRef<std::ffi::OsStr>, args: &[&str], dir: &Path) -> Output {
    Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("starting a command")
}

#[test]
fn pip_install_of_the_wheel_gives_a_working_cojoin_command() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let bin = cojoin_bin();
    ok(
        "packaging/wheel.py",
        run(
            "python3",
            &[
                root().join("packaging/wheel.py").to_str().unwrap(),
                bin.to_str().unwrap(),
                root().join("host/Cargo.toml").to_str().unwrap(),
                "wheels",
            ],
            t,
        ),
    );
    let wheel = std::fs::read_dir(t.join("wheels"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .expect("a .whl in the output directory");
    ok(
        "python3 -m venv",
        run("python3", &["-m", "venv", "venv"], t),
    );
    // --no-index: the wheel has no dependencies, and nothing is fetched.
    ok(
        "pip install",
        run(
            t.join("venv/bin/pip"),
            &["install", "--quiet", "--no-index", wheel.to_str().unwrap()],
            t,
        ),
    );
    let cojoin = t.join("venv/bin/cojoin");
    let version = ok("cojoin --version", run(&cojoin, &["--version"], t));
    assert!(version.starts_with("cojoin "), "{version}");
    ok(
        "cojoin plugin new",
        run(&cojoin, &["plugin", "new", "from-pip", "--lang", "rust"], t),
    );
    assert!(t.join("from-pip/src/lib.rs").is_file());
    assert!(t.join("from-pip/wit/plugin.wit").is_file());
}
