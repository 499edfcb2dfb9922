//! `cojoin plugin new / build / test / deploy`: the path a new user takes, from nothing to a plugin
//! live on a running host, run as they would run it: in the project directory, with the
//! project's own test tool, and no file edited.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use cojoin_e2e::demo::RunningDemo;
use cojoin_e2e::{cojoin_bin, cojoin_in, http, ok, plugin, root};
use serde_json::Value;

/// A new `lang` project named `name` in a fresh directory, as `cojoin plugin new` writes it.
fn new_project(name: &str, lang: &str) -> (tempfile::TempDir, PathBuf) {
    new_project_of(name, lang, "2")
}

/// As [`new_project`], joining `topics` topics.
fn new_project_of(name: &str, lang: &str, topics: &str) -> (tempfile::TempDir, PathBuf) {
    let parent = tempfile::tempdir().unwrap();
    let out = cojoin_in(
        parent.path(),
        &["plugin", "new", name, "--lang", lang, "--topics", topics],
    );
    let stdout = ok("plugin new", out);
    assert!(
        stdout.contains("cojoin plugin build"),
        "the next steps are shown: {stdout}"
    );
    let dir = parent.path().join(name);
    (parent, dir)
}

/// `cojoin plugin build` in the project: the component's path and sha256 from what it prints.
fn build(dir: &Path, name: &str) -> (PathBuf, String) {
    let stdout = ok("plugin build", cojoin_in(dir, &["plugin", "build"]));
    let wasm = dir.join(format!("build/{name}.wasm"));
    assert!(
        stdout.starts_with(&format!("built build/{name}.wasm (")),
        "{stdout}"
    );
    // Python and JavaScript components take the host's batches of calls.
    assert!(stdout.contains(", calls in batches"), "{stdout}");
    let sha = stdout
        .split("sha256 ")
        .nth(1)
        .and_then(|s| s.get(..64))
        .unwrap_or_else(|| panic!("no sha256 in {stdout:?}"))
        .to_owned();
    assert!(wasm.is_file());
    (wasm, sha)
}

/// `cojoin plugin test` on the generated samples, with the generated config: what each key
/// became.
fn replay_outcomes(dir: &Path) -> Vec<(String, String)> {
    let out = cojoin_in(dir, &["plugin", "test", "--events", "samples/events.jsonl"]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let stdout = ok("plugin test", out);
    assert!(
        stderr.contains("records 5, matches 2, expiries 1"),
        "{stderr}"
    );
    let mut outcomes: Vec<(String, String)> = stdout
        .lines()
        .map(|l| {
            let line: Value = serde_json::from_str(l).unwrap();
            let body: Value = serde_json::from_str(line["value"].as_str().unwrap()).unwrap();
            (
                body["key"].as_str().unwrap().to_owned(),
                body["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    outcomes.sort();
    outcomes
}

fn expected_outcomes() -> Vec<(String, String)> {
    [
        ("order-1", "matched"),
        ("order-2", "unmatched"),
        ("order-3", "matched"),
    ]
    .map(|(k, s)| (k.to_owned(), s.to_owned()))
    .to_vec()
}

/// `cojoin plugin deploy` of the project's build to a running demo: the host's `/plugins` then
/// names the project's component, and the demo's results become the template's ("matched"
/// instead of the example's "paid").
fn deploy_and_see_it_serve(dir: &Path, name: &str, sha: &str) -> RunningDemo {
    let mut demo = RunningDemo::start(&plugin("order_paid_rust.wasm"));
    assert!(
        demo.wait_for(Duration::from_secs(60), |l| l.starts_with("  paid "))
            .is_some(),
        "the demo serves the example plugin first"
    );
    let deployed = ok(
        "plugin deploy",
        cojoin_in(dir, &["plugin", "deploy", "--admin", &demo.admin]),
    );
    assert!(
        deployed.contains(&format!("{name} generation 2 sha256 {sha}")),
        "{deployed}"
    );
    let live: Value =
        serde_json::from_str(&http::get(&format!("{}/plugins", demo.admin)).body).unwrap();
    assert_eq!(
        (live["name"].as_str(), live["sha256"].as_str()),
        (Some(name), Some(sha))
    );
    demo.skip_printed();
    assert!(
        demo.wait_for(Duration::from_secs(60), |l| l.starts_with("  matched "))
            .is_some(),
        "the host's results are the new plugin's within 60 s of the deploy"
    );
    demo
}

#[test]
fn a_new_python_plugin_passes_its_tests_builds_replays_and_goes_live_on_a_running_host() {
    let (_parent, dir) = new_project("hello", "python");

    // The unit tests, under ordinary CPython with the template's stand-ins (pytest from `make`).
    let python = root().join(".venv/bin/python");
    assert!(python.exists(), "{python:?} is missing: run `make` first");
    let out = Command::new(&python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .current_dir(&dir)
        .output()
        .unwrap();
    let stdout = ok("pytest", out);
    assert!(stdout.contains("3 passed"), "{stdout}");

    let (_wasm, sha) = build(&dir, "hello");
    assert_eq!(replay_outcomes(&dir), expected_outcomes());
    let call = ok(
        "plugin call",
        cojoin_in(
            &dir,
            &[
                "plugin",
                "call",
                "build/hello.wasm",
                "--a",
                "samples/order.json",
                "--b",
                "samples/payment.json",
            ],
        ),
    );
    assert!(call.contains(r#"\"status\":\"matched\""#), "{call}");

    let mut demo = deploy_and_see_it_serve(&dir, "hello", &sha);

    // Only the body of app.py changes: the build reuses the component with the new source
    // embedded (no componentize-py), and the host serves it once deployed.
    let app = dir.join("app.py");
    let text = std::fs::read_to_string(&app).unwrap();
    std::fs::write(
        &app,
        text.replace("\"status\": \"matched\"", "\"status\": \"edited\""),
    )
    .unwrap();
    let rebuilt = ok("plugin build", cojoin_in(&dir, &["plugin", "build"]));
    assert!(
        rebuilt.starts_with("built build/hello.wasm (python, app.py only, "),
        "{rebuilt}"
    );
    let replayed = ok(
        "plugin test",
        cojoin_in(
            &dir,
            &["plugin", "test", "--events", "samples/events.jsonl"],
        ),
    );
    assert_eq!(
        replayed.matches(r#"\"status\":\"edited\""#).count(),
        2,
        "{replayed}"
    );
    ok(
        "plugin deploy",
        cojoin_in(&dir, &["plugin", "deploy", "--admin", &demo.admin]),
    );
    demo.skip_printed();
    assert!(
        demo.wait_for(Duration::from_secs(60), |l| l.starts_with("  edited "))
            .is_some(),
        "the edited app.py serves on the host"
    );

    // What the host refuses is reported with its reason, and the exit code says so.
    let broken = dir.join("build/broken.wasm");
    std::fs::write(&broken, b"not a component").unwrap();
    let out = cojoin_in(
        &dir,
        &[
            "plugin",
            "deploy",
            "build/broken.wasm",
            "--admin",
            &demo.admin,
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("refused by") && stderr.contains("still running: hello@"),
        "{stderr}"
    );
}

/// Rust and JS projects share a cargo target directory across runs, so only the first run
/// compiles wit-bindgen.
fn shared_cargo_target() -> PathBuf {
    root().join("target/e2e-plugin-projects")
}

#[test]
fn a_new_rust_plugin_passes_cargo_test_builds_replays_and_goes_live() {
    let (_parent, dir) = new_project("hello-rs", "rust");
    let out = Command::new("cargo")
        .args(["test", "--quiet"])
        .current_dir(&dir)
        .env("CARGO_TARGET_DIR", shared_cargo_target())
        .output()
        .unwrap();
    let stdout = ok("cargo test", out);
    assert!(stdout.contains("3 passed"), "{stdout}");
    let out = Command::new(cojoin_bin())
        .args(["plugin", "build"])
        .current_dir(&dir)
        .env("CARGO_TARGET_DIR", shared_cargo_target())
        .output()
        .unwrap();
    let stdout = ok("plugin build", out);
    assert!(
        stdout.starts_with("built build/hello-rs.wasm (rust"),
        "{stdout}"
    );
    let sha = stdout.split("sha256 ").nth(1).unwrap()[..64].to_owned();
    assert_eq!(replay_outcomes(&dir), expected_outcomes());
    deploy_and_see_it_serve(&dir, "hello-rs", &sha);
}

#[test]
fn a_new_js_plugin_passes_node_test_builds_replays_and_goes_live() {
    let (_parent, dir) = new_project("hello-js", "js");
    let stdout = ok(
        "node --test",
        Command::new("node")
            .arg("--test")
            .current_dir(&dir)
            .output()
            .unwrap(),
    );
    assert!(stdout.contains("# pass 3"), "{stdout}");
    // componentize-js comes from the checkout (plugins/js, installed by `make`), found through
    // the cojoin binary's location.
    let (_wasm, sha) = build(&dir, "hello-js");
    assert_eq!(replay_outcomes(&dir), expected_outcomes());
    deploy_and_see_it_serve(&dir, "hello-js", &sha);
}

/// `plugin deploy`'s exit codes, as the README gives them: 1 when the host cannot be reached (the
/// upload did not happen: exit 2 before), 2 when the input is bad (no component file).
#[test]
fn deploy_exits_1_when_the_host_is_unreachable_and_2_for_a_missing_component() {
    let wasm = cojoin_e2e::plugin("order_paid_rust.wasm");
    let admin = format!("http://127.0.0.1:{}", cojoin_e2e::broker::free_port());
    let out = cojoin_e2e::cojoin(&[
        "plugin",
        "deploy",
        wasm.to_str().unwrap(),
        "--admin",
        &admin,
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot reach the admin server at {admin}")),
        "{stderr}"
    );
    let out = cojoin_e2e::cojoin(&["plugin", "deploy", "no-such.wasm", "--admin", &admin]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("cannot read the component"), "{stderr}");
}

/// `cojoin plugin new --topics 3` in `lang`, run as a user would: the project's unit tests pass
/// (`unit`: program, arguments, what its summary says), `plugin build` makes a component of the
/// world plugin-n taking batches, the generated samples replay to two matches and two orders left
/// with the partners they found, and `plugin call` takes one event per topic. (Not deployed: the
/// demo host joins two topics, and a plugin-n component is refused there by its world.)
fn a_new_n_way_project(lang: &str, name: &str, unit: (&Path, &[&str], &str)) {
    let (_parent, dir) = new_project_of(name, lang, "3");
    let in_project = |program: &Path, args: &[&str]| {
        Command::new(program)
            .args(args)
            .current_dir(&dir)
            .env("CARGO_TARGET_DIR", shared_cargo_target())
            .output()
            .unwrap()
    };
    let (program, args, passed) = unit;
    let stdout = ok("unit tests", in_project(program, args));
    assert!(stdout.contains(passed), "{stdout}");
    let stdout = ok(
        "plugin build",
        in_project(&cojoin_bin(), &["plugin", "build"]),
    );
    assert!(
        stdout.starts_with(&format!("built build/{name}.wasm ({lang}")),
        "{stdout}"
    );
    // The build knows it for the languages it adds the batch call to (a Rust plugin writes its own).
    if lang != "rust" {
        assert!(stdout.contains(", calls in batches"), "{stdout}");
    }

    let out = cojoin_in(
        &dir,
        &["plugin", "test", "--events", "samples/events.jsonl"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let stdout = ok("plugin test", out);
    assert!(
        stderr.contains("records 9, matches 2, expiries 2"),
        "{stderr}"
    );
    let mut outcomes: Vec<(String, String, Value)> = stdout
        .lines()
        .map(|l| {
            let line: Value = serde_json::from_str(l).unwrap();
            let body: Value = serde_json::from_str(line["value"].as_str().unwrap()).unwrap();
            let detail = if body["status"] == "matched" {
                body["events"].clone()
            } else {
                body["partners"].clone()
            };
            (
                body["key"].as_str().unwrap().to_owned(),
                body["status"].as_str().unwrap().to_owned(),
                detail,
            )
        })
        .collect();
    outcomes.sort_by(|a, b| a.0.cmp(&b.0));
    let all =
        |amount| serde_json::json!([{"amount": amount}, {"method": "card"}, {"carrier": "post"}]);
    assert_eq!(
        outcomes,
        [
            ("order-1", "matched", all(20)),
            ("order-2", "unmatched", serde_json::json!([0, 0])),
            ("order-3", "unmatched", serde_json::json!([1, 0])),
            ("order-4", "matched", all(12)),
        ]
        .map(|(k, s, d)| (k.to_owned(), s.to_owned(), d))
    );

    let wasm = format!("build/{name}.wasm");
    let call = [
        "plugin",
        "call",
        &wasm,
        "--event",
        "samples/orders.json",
        "--event",
        "samples/payments.json",
        "--event",
        "samples/shipments.json",
    ];
    let called = ok("plugin call", cojoin_in(&dir, &call));
    assert!(called.contains(r#"\"status\":\"matched\""#), "{called}");
}

#[test]
fn a_new_three_topic_python_plugin_passes_its_tests_builds_for_plugin_n_and_replays() {
    let python = root().join(".venv/bin/python");
    let args = ["-m", "pytest", "-q", "-p", "no:cacheprovider"];
    a_new_n_way_project("python", "trio-py", (&python, &args, "3 passed"));
}

#[test]
fn a_new_three_topic_rust_plugin_passes_cargo_test_builds_for_plugin_n_and_replays() {
    let args = ["test", "--quiet"];
    a_new_n_way_project("rust", "trio-rs", (Path::new("cargo"), &args, "3 passed"));
}

#[test]
fn a_new_three_topic_js_plugin_passes_node_test_builds_for_plugin_n_and_replays() {
    a_new_n_way_project(
        "js",
        "trio-js",
        (Path::new("node"), &["--test"], "# pass 3"),
    );
}
