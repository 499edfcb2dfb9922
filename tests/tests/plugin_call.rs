//! `cojoin plugin call`: outputs as JSON lines; errors and traps exit non-zero and say why.

use cojoin_e2e::{cojoin, plugin, root};

fn events() -> (String, String) {
    let dir = root().join("examples/events");
    (
        dir.join("order.json").to_string_lossy().into_owned(),
        dir.join("payment.json").to_string_lossy().into_owned(),
    )
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn each_example_plugin_prints_the_paid_order_as_one_json_line() {
    let (order, payment) = events();
    for lang in ["rust", "python", "js"] {
        let wasm = plugin(&format!("order_paid_{lang}.wasm"));
        let out = cojoin(&[
            "plugin",
            "call",
            wasm.to_str().unwrap(),
            "--a",
            &order,
            "--b",
            &payment,
        ]);
        assert!(out.status.success(), "{lang}: {}", stderr(&out));
        let stdout = String::from_utf8(out.stdout).unwrap();
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines.len(), 1, "{lang}: {stdout}");
        let record: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(record["key"], "order-1001");
        let body: serde_json::Value =
            serde_json::from_str(record["value"].as_str().unwrap()).unwrap();
        assert_eq!(body["status"], "paid");
        assert_eq!(body["payment"]["payment_id"], "p-9");
        assert_eq!(body["by"], lang);
    }
}

#[test]
fn only_a_left_event_calls_on_expire() {
    let (order, _) = events();
    let wasm = plugin("order_paid_rust.wasm");
    let out = cojoin(&["plugin", "call", wasm.to_str().unwrap(), "--a", &order]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains(r#"\"status\":\"unpaid\""#));
}

fn key_event(dir: &tempfile::TempDir, key: &str) -> String {
    let path = dir.path().join(format!("{key}.json"));
    std::fs::write(
        &path,
        format!(r#"{{"topic":"orders","key":"{key}","value":"v"}}"#),
    )
    .unwrap();
    path.to_string_lossy().into_owned()
}

#[test]
fn a_plugin_error_exits_3_and_a_trap_exits_4_saying_which() {
    let dir = tempfile::tempdir().unwrap();
    let wasm = plugin("misbehave.wasm");
    let wasm = wasm.to_str().unwrap();

    let e = key_event(&dir, "error-1");
    let out = cojoin(&["plugin", "call", wasm, "--a", &e, "--b", &e]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("returned an error: fixture error for key error-1"),
        "{}",
        stderr(&out)
    );

    let l = key_event(&dir, "loop-1");
    let out = cojoin(&[
        "plugin",
        "call",
        wasm,
        "--a",
        &l,
        "--b",
        &l,
        "--deadline-ms",
        "100",
    ]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("trapped (timeout)"),
        "{}",
        stderr(&out)
    );

    let m = key_event(&dir, "bomb-1");
    let out = cojoin(&[
        "plugin",
        "call",
        wasm,
        "--a",
        &m,
        "--b",
        &m,
        "--memory-mib",
        "32",
    ]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("trapped (memory)"),
        "{}",
        stderr(&out)
    );

    let p = key_event(&dir, "panic-1");
    let out = cojoin(&["plugin", "call", wasm, "--a", &p, "--b", &p]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(stderr(&out).contains("trapped (crash)"), "{}", stderr(&out));
    // The plugin's own panic message reaches the host log, tagged with the plugin.
    assert!(
        stderr(&out).contains("fixture panic for key panic-1"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn bad_inputs_exit_2_naming_the_input() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.wasm");
    std::fs::write(&garbage, b"not wasm at all").unwrap();
    let e = key_event(&dir, "k");
    let out = cojoin(&["plugin", "call", garbage.to_str().unwrap(), "--a", &e]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("not a WebAssembly file"),
        "{}",
        stderr(&out)
    );

    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, r#"{"topic":"orders","value":"no key"}"#).unwrap();
    let wasm = plugin("order_paid_rust.wasm");
    let out = cojoin(&[
        "plugin",
        "call",
        wasm.to_str().unwrap(),
        "--a",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("bad.json") && err.contains("key"), "{err}");

    let out = cojoin(&["plugin", "call", wasm.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("give --a and --b"),
        "{}",
        stderr(&out)
    );

    // A missing file is named, and its cause said once (it was "…: X: X").
    let missing = dir.path().join("missing.wasm");
    let out = cojoin(&["plugin", "call", missing.to_str().unwrap(), "--a", &e]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("missing.wasm"), "{err}");
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
}

#[test]
fn a_three_topic_plugin_takes_one_event_per_topic_and_an_expiry_with_its_partners() {
    let (order, payment) = events();
    let shipment = root().join("examples/events/shipment.json");
    let shipment = shipment.to_str().unwrap();
    let body = |out: &std::process::Output| -> serde_json::Value {
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let record: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
        serde_json::from_str(record["value"].as_str().unwrap()).unwrap()
    };
    for lang in ["rust", "python", "js"] {
        let wasm = plugin(&format!("order_shipped_{lang}.wasm"));
        let wasm = wasm.to_str().unwrap();
        let matched = cojoin(&[
            "plugin", "call", wasm, "--event", &order, "--event", &payment, "--event", shipment,
        ]);
        assert!(matched.status.success(), "{lang}: {}", stderr(&matched));
        let got = body(&matched);
        assert_eq!(got["status"], "shipped", "{lang}");
        assert_eq!(got["shipment"]["carrier"], "post", "{lang}");

        let dir = tempfile::tempdir().unwrap();
        let partners = dir.path().join("partners.json");
        let payment_json = std::fs::read_to_string(&payment).unwrap();
        std::fs::write(&partners, format!("[[{payment_json}], []]")).unwrap();
        let expired = cojoin(&[
            "plugin",
            "call",
            wasm,
            "--event",
            &order,
            "--partners",
            partners.to_str().unwrap(),
        ]);
        assert!(expired.status.success(), "{lang}: {}", stderr(&expired));
        let got = body(&expired);
        assert_eq!(
            (&got["status"], &got["payments"], &got["shipments"]),
            (
                &serde_json::json!("not-shipped"),
                &serde_json::json!(1),
                &serde_json::json!(0)
            ),
            "{lang}"
        );
    }
    // A two-topic plugin given three events says which world it needs.
    let wrong = cojoin(&[
        "plugin",
        "call",
        plugin("order_paid_rust.wasm").to_str().unwrap(),
        "--event",
        &order,
        "--event",
        &payment,
        "--event",
        shipment,
    ]);
    assert!(!wrong.status.success());
    assert!(stderr(&wrong).contains("plugin-n"), "{}", stderr(&wrong));
}
