//! `cojoin demo`: the embedded broker, the generated shop and the join give exactly the results the
//! generator intended, and the summary says so.

use cojoin_e2e::{cojoin, plugin};

/// The number before `label` on the summary line that starts with `line`.
fn figure(stdout: &str, line: &str) -> usize {
    let text = stdout
        .lines()
        .find(|l| l.starts_with(line))
        .unwrap_or_else(|| panic!("no {line:?} line in:\n{stdout}"));
    text[line.len()..]
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no figure in {text:?}"))
}

/// What the generator intended, from the `generated` line: "868 paid in the window, 44 never paid".
fn generated(stdout: &str, fate: &str) -> usize {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("generated"))
        .expect("a generated line");
    line["generated".len()..]
        .split(',')
        .map(str::trim)
        .find_map(|part| part.strip_suffix(fate)?.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn the_demo_pays_exactly_the_orders_paid_in_their_window_and_dead_letters_the_late_payments() {
    let wasm = plugin("order_paid_rust.wasm");
    let out = cojoin(&[
        "demo",
        "--events",
        "800",
        "--plugin",
        wasm.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success());

    let paid = figure(&stdout, "paid");
    let unpaid = figure(&stdout, "unpaid");
    let open = figure(&stdout, "still open");
    assert_eq!(paid, generated(&stdout, "paid in the window"));
    // Every paid order was printed as it came.
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("  paid ")).count(),
        paid
    );
    assert_eq!(
        unpaid + open,
        generated(&stdout, "paid after the window")
            + generated(&stdout, "payment delayed (late record)")
            + generated(&stdout, "never paid")
    );
    assert!(unpaid > 0, "some windows closed");
    assert_eq!(
        figure(&stdout, "dead letters"),
        generated(&stdout, "payment delayed (late record)")
    );
    assert!(stdout.contains("latency       p50"), "{stdout}");
    assert!(
        stdout.contains("/metrics"),
        "the admin URL is shown: {stdout}"
    );
}
