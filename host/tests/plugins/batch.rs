//! `on-batch` (world `plugin-batched`): what Python plugins built through cojoin's loader, and
//! JavaScript plugins built with `templates/batch.js` appended, export.

use cojoin::event::{Call, Side};
use cojoin::plugin::{CallError, PluginLimits, TrapKind};

use super::{event, registry};

const BATCHING: [&str; 2] = ["python", "js"];

#[test]
fn a_batch_answers_each_call_as_the_single_calls_do() {
    for lang in BATCHING {
        a_batch_answers_as_single_calls(&format!("order_paid_{lang}.wasm"));
    }
}

fn a_batch_answers_as_single_calls(file: &str) {
    let mut worker = registry(file, PluginLimits::default(), &[])
        .handle()
        .unwrap();
    let (order, payment) = (event("orders", "o-7", 10), event("payments", "o-7", 12));
    let (unpaid, orphan) = (event("orders", "o-8", 11), event("payments", "o-9", 13));
    let calls = [
        Call::Match {
            key: b"o-7",
            left: &order,
            right: &payment,
        },
        Call::Expire {
            key: b"o-8",
            event: &unpaid,
            side: Side::LEFT,
        },
        Call::Expire {
            key: b"o-9",
            event: &orphan,
            side: Side::RIGHT,
        },
    ];
    let batched = worker
        .on_batch(&calls)
        .unwrap_or_else(|| panic!("{file} exports no on-batch"))
        .unwrap();
    let single = vec![
        Ok(worker.on_match(b"o-7", &order, &payment).unwrap()),
        Ok(worker.on_expire(b"o-8", &unpaid, Side::LEFT).unwrap()),
        Ok(worker.on_expire(b"o-9", &orphan, Side::RIGHT).unwrap()),
    ];
    assert_eq!(batched, single, "{file}");
    // The same buffers are reused for a batch of other shapes and sizes.
    let again = worker.on_batch(&calls[1..]).unwrap().unwrap();
    assert_eq!(again, single[1..], "{file}");
    assert_eq!(worker.restarts(), 0, "{file}");
}

#[test]
fn a_component_without_on_batch_is_called_one_by_one() {
    let mut worker = registry("order_paid_rust.wasm", PluginLimits::default(), &[])
        .handle()
        .unwrap();
    let order = event("orders", "o-1", 1);
    let calls = [Call::Expire {
        key: b"o-1",
        event: &order,
        side: Side::LEFT,
    }];
    assert!(worker.on_batch(&calls).is_none());
    assert_eq!(worker.batch_limit(), 1);
}

#[test]
fn an_error_fails_its_call_and_an_exception_fails_the_batch() {
    for lang in BATCHING {
        an_error_and_an_exception(&format!("misbehave_{lang}.wasm"));
    }
}

fn an_error_and_an_exception(file: &str) {
    let mut worker = registry(file, PluginLimits::default(), &[])
        .handle()
        .unwrap();
    let events: Vec<_> = ["ok-1", "err:no such customer", "ok-2", "crash"]
        .iter()
        .map(|k| event("orders", k, 1))
        .collect();
    let call = |i: usize| Call::Expire {
        key: events[i].key_bytes(),
        event: &events[i],
        side: Side::LEFT,
    };
    let results = worker
        .on_batch(&[call(0), call(1), call(2)])
        .unwrap()
        .unwrap();
    assert_eq!(results.len(), 3, "{file}");
    assert_eq!(
        results[0].as_ref().unwrap()[0].value.as_deref(),
        Some(&b"ok-1"[..])
    );
    assert_eq!(results[1], Err("no such customer".to_owned()), "{file}");
    assert_eq!(
        results[2].as_ref().unwrap()[0].value.as_deref(),
        Some(&b"ok-2"[..])
    );
    assert_eq!(worker.restarts(), 0, "{file}: an error keeps the instance");

    match worker.on_batch(&[call(0), call(3)]).unwrap() {
        Err(CallError::Trap {
            kind: TrapKind::Crash,
            message,
            ..
        }) => {
            // Python's traceback names the exception; StarlingMonkey's stack names the line.
            let said = message.contains("crash on purpose") || message.contains("answer@");
            assert!(said, "{file}: {message}");
        }
        other => panic!("{file}: expected a crash trap, got {other:?}"),
    }
    // The next call gets a fresh instance, as after a single call's trap.
    let ok = worker.on_batch(&[call(0), call(2)]).unwrap().unwrap();
    assert_eq!(
        ok[1].as_ref().unwrap()[0].value.as_deref(),
        Some(&b"ok-2"[..])
    );
    assert_eq!(worker.restarts(), 1, "{file}");
}

#[test]
fn the_batch_limit_follows_the_pace_of_the_calls() {
    let mut worker = registry("order_paid_python.wasm", PluginLimits::default(), &[])
        .handle()
        .unwrap();
    // Unknown pace: one call alone first.
    assert_eq!(worker.batch_limit(), 1);
    let order = event("orders", "o-1", 1);
    for _ in 0..20 {
        worker.on_expire(b"o-1", &order, Side::LEFT).unwrap();
    }
    // Calls of tens of microseconds against a 500 ms deadline: the most a batch takes.
    assert_eq!(worker.batch_limit(), cojoin::plugin::instance::MAX_BATCH);
    let slow = registry(
        "order_paid_python.wasm",
        PluginLimits {
            deadline: std::time::Duration::from_micros(100),
            ..PluginLimits::default()
        },
        &[],
    );
    let mut slow = slow.handle().unwrap();
    let _ = slow.on_expire(b"o-1", &order, Side::LEFT);
    // An eighth of 100 us holds less than one call of ~30 us.
    assert_eq!(slow.batch_limit(), 1);
}

#[test]
fn a_batch_past_the_deadline_is_a_timeout_though_each_call_fits() {
    let limits = PluginLimits {
        deadline: std::time::Duration::from_millis(200),
        ..PluginLimits::default()
    };
    let mut worker = registry("misbehave_python.wasm", limits, &[])
        .handle()
        .unwrap();
    let spin = event("orders", "spin:60", 1);
    let call = Call::Expire {
        key: spin.key_bytes(),
        event: &spin,
        side: Side::LEFT,
    };
    // Four calls of 60 ms: 240 ms against the batch's one deadline of 200 ms.
    match worker.on_batch(&[call; 4]).unwrap() {
        Err(CallError::Trap {
            kind: TrapKind::Timeout,
            ..
        }) => {}
        other => panic!("expected a timeout, got {other:?}"),
    }
    // One by one (what the task does next), each fits its own deadline.
    for _ in 0..4 {
        worker
            .on_expire(spin.key_bytes(), &spin, Side::LEFT)
            .unwrap();
    }
    // And at that pace the host makes no batches of them.
    assert_eq!(worker.batch_limit(), 1);
}
