use super::*;

/// `n` latencies whose p50 is `p50` and p99 is `p99`.
fn latencies(n: usize, p50: f64, p99: f64) -> Vec<f64> {
    let (below_median, below_p99) = (n.div_ceil(2), (n * 99).div_ceil(100));
    (0..n)
        .map(|i| match i {
            i if i < below_median => p50,
            i if i < below_p99 => p99,
            _ => p99 * 2.0,
        })
        .collect()
}

#[test]
fn the_two_topic_summary_reads_as_it_always_has() {
    let summary = DemoSummary {
        shop: Shop::OrdersPayments,
        events: 2000,
        records: vec![("orders", 1053), ("payments", 947)],
        orders: 1053,
        matched: 794,
        unpaid: 259,
        dead_letters: 47,
        match_latency_ms: latencies(794, 58.0, 148.3),
        fates: HashMap::from([
            ("never paid", 106),
            ("paid after the window", 106),
            ("paid in the window", 794),
            ("payment delayed (late record)", 47),
        ]),
        ..DemoSummary::default()
    };
    // README's "make demo" section shows this.
    assert_eq!(
        summary.to_string(),
        "\
== summary
events        2000 (1053 orders, 947 payments)
paid          794 orders matched with their payment
unpaid        259 orders with no payment in the window
dead letters  47 records (late payments) in orders-payments-dlq
still open    0 orders whose window had not closed when the stream ended
latency       p50 58.0 ms, p99 148.3 ms from producing a payment to reading its match (794 matches)
generated     106 never paid, 106 paid after the window, 794 paid in the window, 47 payment delayed (late record)
"
    );
}

#[test]
fn the_three_topic_summary_counts_expiries_by_status_and_open_orders_by_fate() {
    let mut summary = DemoSummary {
        shop: Shop::OrdersPaymentsShipments,
        events: 10,
        records: vec![("orders", 4), ("payments", 3), ("shipments", 3)],
        orders: 4,
        fates: HashMap::from([
            ("paid and shipped in the window", 1),
            ("paid and never shipped", 1),
            ("shipped but never paid", 1),
            ("never paid", 1),
        ]),
        open: HashMap::from([("never paid", 1)]),
        ..DemoSummary::default()
    };
    let read = |json: &str| Reading::parse(json.as_bytes()).unwrap();
    let lines = [
        summary.count(
            &read(r#"{"order_id":"order-00000","status":"shipped","order":{"amount":12.5}}"#),
            Some(3.3),
        ),
        summary.count(
            &read(r#"{"order_id":"order-00001","status":"not-shipped","order":{"amount":7},"payments":1,"shipments":0}"#),
            None,
        ),
        summary.count(
            &read(r#"{"order_id":"order-00002","status":"unpaid","order":{"amount":7},"payments":0,"shipments":1}"#),
            None,
        ),
        summary.count(&read(r#"{"order_id":"x","status":"refunded"}"#), None),
    ];
    assert_eq!(
        lines,
        [
            "  shipped      order-00000     12.50     3.3 ms after the shipment",
            "  NOT SHIPPED  order-00001      7.00  paid, no shipment within 10 s",
            "  UNPAID       order-00002      7.00  no payment within 10 s (shipped all the same)",
            "  refunded  x",
        ]
    );
    assert_eq!(
        summary.to_string(),
        "\
== summary
events        10 (4 orders, 3 payments, 3 shipments)
shipped       1 orders matched with their payment and shipment
not shipped   1 orders paid, with no shipment in the window
unpaid        1 orders with no payment in the window (1 of them shipped)
dead letters  0 records (late shipments) in orders-shipped-dlq
still open    1 orders whose window had not closed when the stream ended (1 never paid)
latency       p50 3.3 ms, p99 3.3 ms from producing a shipment to reading its match (1 matches)
generated     1 never paid, 1 paid and never shipped, 1 paid and shipped in the window, 1 shipped but never paid
"
    );
}

#[test]
fn a_value_that_is_not_a_json_object_is_no_result() {
    assert_eq!(Reading::parse(b"not json"), None);
    assert_eq!(Reading::parse(b"[1]"), None);
}
