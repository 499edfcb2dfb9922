use super::writer::producer_config;
use super::*;

fn config(output: &str, options: &str) -> Config {
    Config::parse(&format!(
        r#"
        [kafka]
        bootstrap_servers = "localhost:9092"
        group_id = "g"
        [kafka.options]
        {options}
        [join]
        left = "orders"
        right = "payments"
        window = "5m"
        [plugin]
        path = "p.wasm"
        [output]
        topic = "out"
        dead_letter_topic = "dlq"
        {output}
    "#
    ))
    .unwrap()
}

#[test]
fn the_step_s_producer_defaults_give_way_to_the_user_s_options() {
    let eos = "guarantee = \"exactly-once\"";
    let c = producer_config(&config(eos, ""));
    assert_eq!(c.get("linger.ms"), Some("5"));
    assert_eq!(c.get("transaction.timeout.ms"), Some("10000"));
    assert!(c
        .get("transactional.id")
        .unwrap()
        .starts_with("cojoin-g-repartition-"));
    // Before, the step set both after the user's options: 5 and 10000 whatever they said.
    let c = producer_config(&config(
        eos,
        "\"linger.ms\" = \"50\"\n\"transaction.timeout.ms\" = \"60000\"",
    ));
    assert_eq!(c.get("linger.ms"), Some("50"));
    assert_eq!(c.get("transaction.timeout.ms"), Some("60000"));
    // librdkafka's other name for linger.ms is the user's choice too.
    let c = producer_config(&config("", "\"queue.buffering.max.ms\" = \"40\""));
    assert_eq!(c.get("linger.ms"), None);
    assert_eq!(c.get("queue.buffering.max.ms"), Some("40"));
    assert_eq!(c.get("transactional.id"), None);
}

#[test]
fn a_step_whose_thread_panicked_is_reported_with_the_panic_and_one_told_to_stop_is_not() {
    let mut step = Repartitioner(
        StoppableThread::spawn("test-step", |_| panic!("a queue was empty")).unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let why = loop {
        if let Some(why) = step.stopped() {
            break why;
        }
        assert!(
            Instant::now() < deadline,
            "the panicked thread was never reported"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(why, "its thread panicked: a queue was empty");
    let mut told = Repartitioner(StoppableThread::adopt(
        "test-step",
        Arc::new(AtomicBool::new(true)),
        std::thread::spawn(|| {}),
    ));
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(told.stopped(), None);
}
