//! What the join benchmark makes of its runs: one [`Figures`] per system and run, folded into one
//! [`Summary`] per system (medians over the runs, the match check over every run), and the text of
//! the report's table. Pure, so the library compiles this file too (`tests/lib.rs`) and its unit
//! tests run with `cargo test -p cojoin-e2e --lib`.

/// What one system did in one run.
#[derive(Debug, Default, Clone)]
pub struct Figures {
    pub system: String,
    pub records: u64,
    pub matches: u64,
    /// First record to last.
    pub seconds: f64,
    pub cpu_seconds: f64,
    pub peak_rss_mib: f64,
    /// CPU seconds the broker used while this system ran: on 2 cores, what it leaves the system.
    pub broker_cpu_seconds: f64,
    /// Why it produced no figures.
    pub failed: Option<String>,
}

impl Figures {
    pub fn rate(&self) -> f64 {
        self.records as f64 / self.seconds.max(1e-9)
    }

    pub fn matches_per_s(&self) -> f64 {
        self.matches as f64 / self.seconds.max(1e-9)
    }
}

/// The median of `xs` (the mean of the middle two when their number is even); `None` when empty.
pub fn median(xs: &[f64]) -> Option<f64> {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// One system over all its runs: a row of the report.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub system: String,
    /// Records/s of each run that did not fail, in run order.
    pub rates: Vec<f64>,
    /// Medians over the runs that did not fail (NaN when every run failed).
    pub rate: f64,
    pub matches_per_s: f64,
    pub matches: f64,
    pub cpu_seconds: f64,
    pub peak_rss_mib: f64,
    pub broker_cpu_seconds: f64,
    /// `-` (no match count expected), `ok` (every run gave the expected count) or which runs did not.
    pub check: String,
    /// When any run failed: in how many, and the first one's reason.
    pub failed: Option<String>,
}

/// Folds the runs of one system, in run order (run 1 first), into its row; `expected` is the match
/// count every run must report, `None` for a system that does not join (the bare consumer).
pub fn summarize(system: &str, runs: &[Figures], expected: Option<u64>) -> Summary {
    let ok: Vec<&Figures> = runs.iter().filter(|f| f.failed.is_none()).collect();
    let med = |x: fn(&Figures) -> f64| {
        median(&ok.iter().map(|f| x(f)).collect::<Vec<_>>()).unwrap_or(f64::NAN)
    };
    let failures: Vec<(usize, &str)> = runs
        .iter()
        .enumerate()
        .filter_map(|(i, f)| f.failed.as_deref().map(|r| (i + 1, r)))
        .collect();
    let failed = failures.first().map(|(run, reason)| {
        format!(
            "FAILED in {} of {} runs (first in run {run}): {reason}",
            failures.len(),
            runs.len()
        )
    });
    let check = match expected {
        None => "-".to_owned(),
        Some(expected) => {
            let wrong: Vec<String> = runs
                .iter()
                .enumerate()
                .filter(|(_, f)| f.failed.is_none() && f.matches != expected)
                .map(|(i, f)| format!("run {} gave {}", i + 1, f.matches))
                .collect();
            if wrong.is_empty() {
                "ok".to_owned()
            } else {
                format!("WRONG: {}; expected {expected} matches", wrong.join(", "))
            }
        }
    };
    Summary {
        system: system.to_owned(),
        rates: ok.iter().map(|f| f.rate()).collect(),
        rate: med(Figures::rate),
        matches_per_s: med(Figures::matches_per_s),
        matches: med(|f| f.matches as f64),
        cpu_seconds: med(|f| f.cpu_seconds),
        peak_rss_mib: med(|f| f.peak_rss_mib),
        broker_cpu_seconds: med(|f| f.broker_cpu_seconds),
        check,
        failed,
    }
}

/// The report's table: a header line, then one line per summary, aligned (the bracketed column of
/// each run's records/s is as wide as its widest entry).
pub fn table(rows: &[Summary]) -> Vec<String> {
    let runs: Vec<String> = rows
        .iter()
        .map(|s| {
            let each: Vec<String> = s.rates.iter().map(|r| format!("{r:.0}")).collect();
            format!("[{}]", each.join(" "))
        })
        .collect();
    let w = runs.iter().map(String::len).chain([4]).max().unwrap_or(4);
    // The systems' names, at least 20 wide (the stream-table data set's are longer).
    let n = rows
        .iter()
        .map(|s| s.system.len())
        .chain([20])
        .max()
        .unwrap_or(20);
    let mut lines = vec![format!(
        "{:<n$} {:>12} {:<w$} {:>12} {:>9} {:>9} {:>10} {:>12}  {}",
        "system",
        "records/s",
        "runs",
        "matches/s",
        "matches",
        "CPU s",
        "peak MiB",
        "broker CPU s",
        "check"
    )];
    for (s, runs) in rows.iter().zip(runs) {
        lines.push(match &s.failed {
            Some(failed) => format!("{:<n$} {failed}", s.system),
            None => format!(
                "{:<n$} {:>12.0} {runs:<w$} {:>12.0} {:>9.0} {:>9.2} {:>10.1} {:>12.2}  {}",
                s.system,
                s.rate,
                s.matches_per_s,
                s.matches,
                s.cpu_seconds,
                s.peak_rss_mib,
                s.broker_cpu_seconds,
                s.check
            ),
        });
    }
    lines
}

/// The first `model name` of a /proc/cpuinfo text.
pub fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|l| {
        let (key, value) = l.split_once(':')?;
        (key.trim() == "model name").then(|| value.trim().to_owned())
    })
}

// The bench also compiles this file with `--cfg test`, as cargo does for a target without the
// test harness, which drops the #[test]s and would leave their helpers unused.
#[cfg(test)]
#[allow(dead_code)]
mod tests {
    use super::*;

    fn run(system: &str, records: u64, matches: u64, seconds: f64) -> Figures {
        Figures {
            system: system.to_owned(),
            records,
            matches,
            seconds,
            cpu_seconds: seconds * 2.0,
            peak_rss_mib: 100.0 + seconds,
            broker_cpu_seconds: seconds,
            failed: None,
        }
    }

    fn failed(system: &str, reason: &str) -> Figures {
        Figures {
            system: system.to_owned(),
            failed: Some(reason.to_owned()),
            ..Figures::default()
        }
    }

    #[test]
    fn median_of_odd_even_and_none() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[7.0]), Some(7.0));
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[5.0, 5.0, 1.0]), Some(5.0));
    }

    #[test]
    fn summary_takes_medians_over_runs() {
        // 1000 records in 1 s, 0.5 s and 2 s: 1000, 2000 and 500 records/s.
        let runs = [
            run("x", 1000, 250, 1.0),
            run("x", 1000, 250, 0.5),
            run("x", 1000, 250, 2.0),
        ];
        let s = summarize("x", &runs, Some(250));
        assert_eq!(s.rates, vec![1000.0, 2000.0, 500.0]);
        assert_eq!(s.rate, 1000.0);
        assert_eq!(s.matches_per_s, 250.0);
        assert_eq!(s.matches, 250.0);
        assert_eq!(s.cpu_seconds, 2.0);
        assert_eq!(s.peak_rss_mib, 101.0);
        assert_eq!(s.check, "ok");
        assert_eq!(s.failed, None);
        assert_eq!(summarize("bare", &runs, None).check, "-");
    }

    #[test]
    fn summary_names_each_wrong_run() {
        let runs = [
            run("x", 1000, 250, 1.0),
            run("x", 1000, 249, 1.0),
            run("x", 1000, 251, 1.0),
        ];
        assert_eq!(
            summarize("x", &runs, Some(250)).check,
            "WRONG: run 2 gave 249, run 3 gave 251; expected 250 matches"
        );
    }

    #[test]
    fn summary_fails_on_any_failed_run_with_the_first_reason() {
        let runs = [
            run("x", 1000, 250, 1.0),
            failed("x", "first reason"),
            failed("x", "second reason"),
        ];
        let s = summarize("x", &runs, Some(250));
        assert_eq!(
            s.failed.as_deref(),
            Some("FAILED in 2 of 3 runs (first in run 2): first reason")
        );
        assert_eq!(s.rates, vec![1000.0]);
        let all = summarize("x", &[failed("x", "down")], Some(250));
        assert!(all.rate.is_nan());
        assert_eq!(
            all.failed.as_deref(),
            Some("FAILED in 1 of 1 runs (first in run 1): down")
        );
    }

    #[test]
    fn table_columns_line_up() {
        let rows = [
            summarize(
                "bare consumer",
                &[run("b", 2000, 0, 1.0), run("b", 2000, 0, 2.0)],
                None,
            ),
            summarize(
                "cojoin-rust",
                &[run("r", 1000, 250, 1.0), run("r", 1000, 250, 1.0)],
                Some(250),
            ),
            summarize("quixstreams", &[failed("q", "boom")], Some(250)),
        ];
        let lines = table(&rows);
        assert_eq!(lines.len(), 4);
        assert!(lines[1].starts_with("bare consumer"));
        assert!(lines[1].contains(" [2000 1000] "));
        assert!(lines[1].ends_with("  -"));
        assert!(lines[2].contains(" [1000 1000] "));
        assert!(lines[2].ends_with("  ok"));
        assert_eq!(
            lines[3],
            format!(
                "{:<20} FAILED in 1 of 1 runs (first in run 1): boom",
                "quixstreams"
            )
        );
        // Every column after the runs' starts at the same place in the header and the rows.
        let at = |l: &str| l.find("matches/s").map(|i| i + "matches/s".len());
        let end = at(&lines[0]).unwrap();
        for l in &lines[1..3] {
            assert!(l.as_bytes()[end - 1].is_ascii_digit(), "{l}");
            assert_eq!(l.as_bytes()[end], b' ', "{l}");
        }
    }

    #[test]
    fn cpu_model_reads_the_first_model_name() {
        let info =
            "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nprocessor\t: 1\nmodel name\t: other\n";
        assert_eq!(cpu_model(info).as_deref(), Some("AMD EPYC 7B13"));
        assert_eq!(cpu_model("processor\t: 0\nHardware\t: BCM2835\n"), None);
    }
}
