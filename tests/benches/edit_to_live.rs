//! Edit-to-live for a Python plugin: from saving `app.py` to the new version's first result on a
//! running host, through `cojoin plugin build` and `cojoin plugin deploy` (issue 19's target: under
//! 10 s). The host is `cojoin demo` (embedded broker, results printed as they come); each round
//! changes the status the action writes, so the first printed result carrying the new status is
//! the new version serving. Prints each round's split and the medians. `make bench-edit`.

use std::path::Path;
use std::time::{Duration, Instant};

use cojoin_e2e::demo::RunningDemo;
use cojoin_e2e::{cojoin_in, ok, plugin};

const ROUNDS: usize = 5;

/// Rewrites the status of a match in the template's action, as an editor saving the file would.
fn save_with_status(app: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(app).unwrap();
    let needle = format!("\"status\": \"{from}\"");
    assert!(text.contains(&needle), "{needle} not in {app:?}");
    std::fs::write(app, text.replace(&needle, &format!("\"status\": \"{to}\""))).unwrap();
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn main() {
    let parent = tempfile::tempdir().unwrap();
    ok(
        "plugin new",
        cojoin_in(
            parent.path(),
            &["plugin", "new", "live", "--lang", "python"],
        ),
    );
    let dir = parent.path().join("live");
    // A first build and deploy outside the rounds: what a user has before they start editing.
    ok("plugin build", cojoin_in(&dir, &["plugin", "build"]));
    let mut demo = RunningDemo::start(&plugin("order_paid_rust.wasm"));
    ok(
        "plugin deploy",
        cojoin_in(&dir, &["plugin", "deploy", "--admin", &demo.admin]),
    );
    demo.wait_for(Duration::from_secs(60), |l| l.starts_with("  matched "))
        .expect("the first version serves");

    let mut status = "matched".to_owned();
    // Only the action's body changes: the kept component with the new app.py embedded.
    let body_edits: Vec<Edit> = (1..=ROUNDS)
        .map(|round| -> Edit {
            Box::new(move |app: &Path, status: &mut String| {
                let next = format!("v{round}");
                save_with_status(app, status, &next);
                *status = next;
            })
        })
        .collect();
    rounds(
        "app.py's body edited (what `plugin build` does without componentize-py)",
        body_edits,
        &dir,
        &mut demo,
        &mut status,
    );
    // A new import line: componentize-py runs again, the host compiles what its function cache
    // lacks.
    let import_edits: Vec<Edit> = ["decimal", "fractions", "statistics"]
        .into_iter()
        .enumerate()
        .map(|(i, module)| -> Edit {
            Box::new(move |app: &Path, status: &mut String| {
                let text = std::fs::read_to_string(app).unwrap();
                std::fs::write(app, format!("import {module}\n{text}")).unwrap();
                let next = format!("i{}", i + 1);
                save_with_status(app, status, &next);
                *status = next;
            })
        })
        .collect();
    rounds(
        "an import added to app.py (a full build: componentize-py, then the host compiles)",
        import_edits,
        &dir,
        &mut demo,
        &mut status,
    );
}

type Edit = Box<dyn Fn(&Path, &mut String)>;

/// Each edit, then build and deploy, timed to the first result carrying the new status.
fn rounds(what: &str, edits: Vec<Edit>, dir: &Path, demo: &mut RunningDemo, status: &mut String) {
    let app = dir.join("app.py");
    println!("edit-to-live, Python plugin, {what}: save app.py -> cojoin plugin build -> cojoin plugin deploy -> first result of the new version on a running host (cojoin demo); {} rounds", edits.len());
    println!(
        "{:>5} {:>9} {:>10} {:>16} {:>9}",
        "round", "build s", "deploy s", "first result s", "total s"
    );
    let (mut builds, mut deploys, mut firsts, mut totals) = (vec![], vec![], vec![], vec![]);
    for (round, edit) in edits.iter().enumerate() {
        edit(&app, status);
        let saved = Instant::now();
        ok("plugin build", cojoin_in(dir, &["plugin", "build"]));
        let built = Instant::now();
        ok(
            "plugin deploy",
            cojoin_in(dir, &["plugin", "deploy", "--admin", &demo.admin]),
        );
        let deployed = Instant::now();
        let prefix = format!("  {status} ");
        demo.wait_for(Duration::from_secs(60), |l| l.starts_with(&prefix))
            .unwrap_or_else(|| panic!("no result of version {status} within 60 s of its deploy"));
        let first = Instant::now();
        let s = |a: Instant, b: Instant| (b - a).as_secs_f64();
        let (b, d, f, t) = (
            s(saved, built),
            s(built, deployed),
            s(deployed, first),
            s(saved, first),
        );
        println!("{:>5} {b:>9.2} {d:>10.2} {f:>16.2} {t:>9.2}", round + 1);
        builds.push(b);
        deploys.push(d);
        firsts.push(f);
        totals.push(t);
    }
    println!(
        "{:>5} {:>9.2} {:>10.2} {:>16.2} {:>9.2}   (target: total under 10 s)",
        "med",
        median(builds),
        median(deploys),
        median(firsts),
        median(totals)
    );
}
