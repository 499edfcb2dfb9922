//! Running a system under GNU time: its figures from the JSON line it prints last, its CPU
//! seconds and peak RSS from GNU time's own line.

use std::process::{Command, Stdio};

use super::summary::Figures;

/// Runs `cmd` under GNU time; its last stdout line is a JSON object with records, matches, seconds.
pub(crate) fn timed(system: &str, cmd: &mut Command) -> Figures {
    let (v, cpu_seconds, peak_rss_mib) = match timed_json(system, cmd) {
        Ok(done) => done,
        // The run goes on with the other systems; the table says this one failed, and why.
        Err(failed) => {
            return Figures {
                system: system.to_owned(),
                failed: Some(failed),
                ..Figures::default()
            }
        }
    };
    Figures {
        system: system.to_owned(),
        records: v["records"].as_u64().unwrap_or(0),
        matches: v["matches"].as_u64().unwrap_or(0),
        seconds: v["seconds"].as_f64().unwrap_or(0.0),
        cpu_seconds,
        peak_rss_mib,
        ..Figures::default()
    }
}

/// Runs `cmd` under GNU time: the JSON object of its last stdout line beginning with `{`, its CPU
/// seconds and its peak RSS MiB; or, when it printed none, its last line of stderr.
pub(crate) fn timed_json(
    system: &str,
    cmd: &mut Command,
) -> Result<(serde_json::Value, f64, f64), String> {
    eprintln!("running {system}…");
    let program = cmd.get_program().to_owned();
    let args: Vec<_> = cmd.get_args().map(ToOwned::to_owned).collect();
    let out = Command::new("/usr/bin/time")
        .args(["-f", "TIME %U %S %M"])
        .arg(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running /usr/bin/time");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stdout.lines().rev().find(|l| l.starts_with('{'));
    let Some(Ok(v)) = line.map(serde_json::from_str::<serde_json::Value>) else {
        eprintln!("{system} printed no result:\n{stdout}\n{stderr}");
        let last = stderr
            .lines()
            .rfind(|l| !l.starts_with("TIME") && !l.starts_with("Command exited"));
        return Err(last.unwrap_or("no output").to_owned());
    };
    let (cpu_seconds, peak_rss_mib) = gnu_time(&stderr);
    Ok((v, cpu_seconds, peak_rss_mib))
}

/// (user + system CPU seconds, peak RSS MiB) from GNU time's `TIME %U %S %M` line.
pub(crate) fn gnu_time(stderr: &str) -> (f64, f64) {
    let line = stderr
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("TIME "))
        .unwrap_or("0 0 0");
    let n: Vec<f64> = line
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    (
        n.first().unwrap_or(&0.0) + n.get(1).unwrap_or(&0.0),
        n.get(2).unwrap_or(&0.0) / 1024.0,
    )
}
