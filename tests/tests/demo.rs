//! `cojoin demo`: the embedded broker, the generated shop and the join give exactly the results the
//! generator intended, and the summary says so; for two topics and for three (`--topics 3`).

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

/// The count before `label` in a list "868 paid in the window, 44 never paid"; 0 if absent.
fn count_of(list: &str, label: &str) -> usize {
    list.split(',')
        .filter_map(|part| part.trim().split_once(' '))
        .find(|(_, l)| *l == label)
        .map_or(0, |(n, _)| n.parse().expect("a count"))
}

/// What the generator intended, from the `generated` line: "868 paid in the window, 44 never paid".
fn generated(stdout: &str, fate: &str) -> usize {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("generated"))
        .expect("a generated line");
    count_of(&line["generated".len()..], fate)
}

/// The text in parentheses at the end of the summary line that starts with `line`; empty if none.
fn parenthesized<'a>(stdout: &'a str, line: &str) -> &'a str {
    let text = stdout
        .lines()
        .find(|l| l.starts_with(line))
        .unwrap_or_else(|| panic!("no {line:?} line in:\n{stdout}"));
    text.strip_suffix(')')
        .and_then(|t| t.rsplit_once('('))
        .map_or("", |(_, inner)| inner)
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

/// The three-topic generator's fates, as the summary names them.
const THREE_TOPIC_FATES: [&str; 6] = [
    "paid and shipped in the window",
    "paid and never shipped",
    "shipped after the window",
    "shipment delayed (late record)",
    "never paid",
    "shipped but never paid",
];

#[test]
fn the_three_topic_demo_ships_exactly_the_orders_paid_and_shipped_in_their_window() {
    // The demo's default plugin for three topics, given as the suites find it.
    let wasm = plugin("order_shipped_python.wasm");
    let out = cojoin(&[
        "demo",
        "--topics",
        "3",
        "--events",
        "800",
        "--plugin",
        wasm.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success());

    let shipped = figure(&stdout, "shipped");
    let not_shipped = figure(&stdout, "not shipped");
    let unpaid = figure(&stdout, "unpaid");
    // Orders whose window had not closed when the stream ended, by intended fate.
    let open_list = parenthesized(&stdout, "still open");
    let open = |fate: &str| count_of(open_list, fate);
    let intended =
        |fates: &[&str]| -> usize { fates.iter().map(|f| generated(&stdout, f) - open(f)).sum() };
    assert_eq!(
        shipped,
        generated(&stdout, "paid and shipped in the window")
    );
    assert_eq!(open("paid and shipped in the window"), 0);
    // Every shipped order was printed as it came.
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.starts_with("  shipped "))
            .count(),
        shipped
    );
    // Paid orders that expired: with their payment and without a shipment in their window.
    assert_eq!(
        not_shipped,
        intended(&[
            "paid and never shipped",
            "shipped after the window",
            "shipment delayed (late record)"
        ])
    );
    assert_eq!(unpaid, intended(&["never paid", "shipped but never paid"]));
    // The shipment an unpaid order found is named among its partners.
    let unpaid_shipped: usize = parenthesized(&stdout, "unpaid")
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .expect("unpaid orders that were shipped");
    assert_eq!(unpaid_shipped, intended(&["shipped but never paid"]));
    assert!(unpaid_shipped > 0 && not_shipped > 0 && unpaid > 0);
    assert_eq!(
        figure(&stdout, "dead letters"),
        generated(&stdout, "shipment delayed (late record)")
    );
    assert!(figure(&stdout, "dead letters") > 0);
    // Every open order is one of these.
    assert_eq!(
        figure(&stdout, "still open"),
        THREE_TOPIC_FATES.iter().map(|f| open(f)).sum::<usize>(),
        "{open_list}"
    );
    // One result per order, or none yet: the counts add up to the orders, as the fates do.
    let orders = count_of(parenthesized(&stdout, "events"), "orders");
    assert_eq!(
        shipped + not_shipped + unpaid + figure(&stdout, "still open"),
        orders
    );
    assert_eq!(
        THREE_TOPIC_FATES
            .iter()
            .map(|f| generated(&stdout, f))
            .sum::<usize>(),
        orders
    );
    assert!(stdout.contains("latency       p50"), "{stdout}");
}
