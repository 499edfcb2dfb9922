//! The wheel `make wheel` builds (packaging/wheel.py): pip installs it into a fresh venv, offline,
//! and the `cojoin` command it gives works on its own: templates included, and the demo with the
//! example plugin the wheel carries, run from a directory that is not the checkout.

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
                cojoin_e2e::plugin("order_paid_python.wasm")
                    .to_str()
                    .unwrap(),
                cojoin_e2e::plugin("order_shipped_python.wasm")
                    .to_str()
                    .unwrap(),
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

    let out = Command::new(&cojoin)
        .args(["demo", "--events", "200", "--quiet"])
        .current_dir(t)
        .env("COJOIN_CACHE_DIR", root().join("target/e2e-plugin-cache"))
        .output()
        .expect("starting cojoin demo");
    let summary = ok("cojoin demo from the wheel", out);
    assert!(summary.contains("events        200 ("), "{summary}");
    let paid: usize = summary
        .lines()
        .find_map(|l| l.strip_prefix("paid          "))
        .and_then(|l| l.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no paid count in {summary}"));
    assert!(paid > 0, "the demo matched nothing: {summary}");

    // The three-topic demo's plugin is installed too.
    let out = Command::new(&cojoin)
        .args(["demo", "--topics", "3", "--events", "200", "--quiet"])
        .current_dir(t)
        .env("COJOIN_CACHE_DIR", root().join("target/e2e-plugin-cache"))
        .output()
        .expect("starting cojoin demo --topics 3");
    let summary = ok("cojoin demo --topics 3 from the wheel", out);
    let shipped: usize = summary
        .lines()
        .find_map(|l| l.strip_prefix("shipped       "))
        .and_then(|l| l.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no shipped count in {summary}"));
    assert!(
        shipped > 0,
        "the three-topic demo matched nothing: {summary}"
    );
}
