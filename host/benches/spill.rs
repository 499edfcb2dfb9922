//! Join state beyond RAM: the same stream through `JoinState` all in RAM, then spilling to disk
//! past a 64 MiB budget; prints events/s, the store's peak resident and disk bytes, what was
//! spilled and read back, and the process's peak RSS (VmHWM) per mode, and fails if the two modes
//! disagree on the matches or expiries. A figure-printing program, not a timed test.
//!
//! The stream: N events (`SPILL_EVENTS`, default 2,000,000) with 1 KiB values, in timestamp
//! order, one pair per key: the left event at t, its right partner at t + window, so the window
//! holds about half the stream at its peak; one key in ten has no right event and expires
//! unmatched (left join). Each mode runs in a child process (this program run again with
//! `SPILL_MODE` set) so that its VmHWM is its own. Spill files go under `SPILL_DIR` (default: the
//! system temp dir). Under `cargo test` (no `--bench` argument) it runs 20,000 events.

use std::process::{Command, ExitCode};
use std::time::Instant;

use cojoin::event::{Event, Side};
use cojoin::join::{JoinKind, JoinState, JoinWindow, SpillDir};

const VALUE_BYTES: usize = 1_024;
const BUDGET: usize = 64 << 20;
const BASE_TS: i64 = 1_700_000_000_000;

fn main() -> ExitCode {
    if std::env::args().any(|a| a == "--list") {
        return ExitCode::SUCCESS;
    }
    let events: i64 = match std::env::var("SPILL_EVENTS") {
        Ok(n) => n.parse().expect("SPILL_EVENTS is a number of events"),
        Err(_) if std::env::args().any(|a| a == "--bench") => 2_000_000,
        Err(_) => 20_000,
    };
    if let Ok(mode) = std::env::var("SPILL_MODE") {
        run(&mode, events);
        return ExitCode::SUCCESS;
    }
    println!(
        "join state beyond RAM: {events} events, {VALUE_BYTES} B values, left join, \
         budget {} MiB when spilling",
        BUDGET >> 20
    );
    let mut results = Vec::new();
    for mode in ["ram", "spill"] {
        let exe = std::env::current_exe().expect("this program's path");
        let out = Command::new(exe)
            .env("SPILL_MODE", mode)
            .env("SPILL_EVENTS", events.to_string())
            .output()
            .expect("run a mode in a child process");
        let text = String::from_utf8_lossy(&out.stdout);
        print!("{text}");
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
        if !out.status.success() {
            eprintln!("mode {mode} failed: {}", out.status);
            return ExitCode::FAILURE;
        }
        let counts = text
            .lines()
            .find_map(|l| l.strip_prefix("counts "))
            .map(str::to_owned);
        results.push(counts.expect("a mode prints its counts"));
    }
    if results[0] != results[1] {
        eprintln!(
            "the modes disagree: in RAM {}, spilling {}",
            results[0], results[1]
        );
        return ExitCode::FAILURE;
    }
    println!("both modes: {}", results[0]);
    ExitCode::SUCCESS
}

fn run(mode: &str, events: i64) {
    let pairs = events / 2;
    let window_ms = pairs / 2;
    let window = JoinWindow {
        window_ms,
        grace_ms: 0,
    };
    let mut state = JoinState::new(window, JoinKind::Left);
    let base = std::env::var_os("SPILL_DIR").map_or_else(std::env::temp_dir, Into::into);
    if mode == "spill" {
        let dir = SpillDir::create(&base).expect("a spill dir");
        state.spill_to(dir);
        state.set_ram_budget(BUDGET);
    }
    let topics: [std::sync::Arc<str>; 2] = ["orders".into(), "payments".into()];
    let event = |side: Side, key: i64, offset: i64, ts: i64| Event {
        topic: topics[side.index()].clone(),
        partition: 0,
        offset,
        timestamp: BASE_TS + ts,
        key: Some(format!("k-{key:010}").into_bytes().into()),
        value: Some(vec![b'x'; VALUE_BYTES].into()),
        headers: Box::default(),
    };

    let (mut matches, mut expiries, mut inserted) = (0u64, 0u64, 0u64);
    let (mut peak_ram, mut peak_disk, mut peak_held) = (0, 0, 0);
    let mut out = Vec::new();
    let mut insert = |state: &mut JoinState, side, e| {
        state.insert(side, e, &mut out);
        for o in out.drain(..) {
            match o {
                cojoin::join::JoinOutcome::Match { .. } => matches += 1,
                cojoin::join::JoinOutcome::Expired { .. } => expiries += 1,
                other => panic!("a two-topic join, nothing late: {other:?}"),
            }
        }
        inserted += 1;
    };
    let start = Instant::now();
    let mut offsets = [0i64; 2];
    for t in 0..pairs + window_ms {
        if t < pairs {
            insert(&mut state, Side::LEFT, event(Side::LEFT, t, offsets[0], t));
            offsets[0] += 1;
        }
        let k = t - window_ms;
        if k >= 0 && k % 10 != 9 {
            insert(
                &mut state,
                Side::RIGHT,
                event(Side::RIGHT, k, offsets[1], t),
            );
            offsets[1] += 1;
        }
        if t % 1024 == 0 {
            let s = state.store_stats();
            peak_ram = peak_ram.max(s.ram_bytes);
            peak_disk = peak_disk.max(s.disk_bytes);
            peak_held = peak_held.max(state.held().1);
        }
    }
    let elapsed = start.elapsed();
    // Far past the window: everything left expires.
    insert(
        &mut state,
        Side::RIGHT,
        event(Side::RIGHT, -1, offsets[1], 1 << 40),
    );
    let stats = state.store_stats();
    let mib = |b: usize| b as f64 / (1 << 20) as f64;
    println!(
        "{mode:>5}: {:.0} events/s ({inserted} in {:.2} s); held at peak {:.0} MiB; store peak \
         in RAM {:.1} MiB, on disk {:.0} MiB; spilled {:.0} MiB, read back {:.0} MiB; \
         disk after the end {} B; VmHWM {}",
        inserted as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64(),
        mib(peak_held),
        mib(peak_ram),
        mib(peak_disk),
        mib(stats.spilled_bytes_total as usize),
        mib(stats.read_back_bytes_total as usize),
        stats.disk_bytes,
        vm_hwm(),
    );
    println!("counts {matches} matches, {expiries} expiries");
}

/// The process's peak resident set, as /proc/self/status gives it.
fn vm_hwm() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .map(|v| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into())
}
