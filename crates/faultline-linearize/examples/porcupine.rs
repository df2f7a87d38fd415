//! Runs the checker on Porcupine's published test histories and compares every verdict with
//! the one Porcupine's own tests assert.
//!
//! ```text
//! cargo run -p faultline-linearize --release --example porcupine -- <porcupine checkout> [--repeat N] [--no-minimize]
//! ```
//!
//! It reads `test_data/jepsen/etcd_*.log` (register histories from Jepsen's etcd test) and
//! `test_data/kv/*.txt` (key-value histories) under the checkout, and prints per file the
//! verdict, the expected verdict, the time of the check alone (the fastest of `N` runs; parsing
//! excluded) and, for an illegal history, the time and size of its 1-minimal counterexample.
//! It exits non-zero when any verdict disagrees with the expected one.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use faultline_linearize::models::{KvModel, RegisterModel};
use faultline_linearize::porcupine_format::{parse_etcd_log, parse_kv_log};
use faultline_linearize::{CheckOptions, History, Model, Verdict, check, describe};

/// The etcd histories Porcupine's tests assert linearizable, by number.
const ETCD_LINEARIZABLE: [u32; 23] = [
    2, 5, 7, 18, 25, 31, 38, 45, 48, 49, 51, 53, 56, 67, 75, 76, 80, 87, 92, 98, 100, 101, 102,
];
/// The etcd history with no asserted verdict (its Jepsen run never got the cluster up); every
/// other one is asserted not linearizable.
const ETCD_UNASSERTED: u32 = 95;

/// The verdict Porcupine's tests assert for a file, if any.
fn expected(name: &str) -> Option<Verdict> {
    let verdict = |linearizable: bool| {
        if linearizable {
            Verdict::Linearizable
        } else {
            Verdict::Illegal
        }
    };
    if let Some(number) = name
        .strip_prefix("etcd_")
        .and_then(|n| n.strip_suffix(".log"))
    {
        let number: u32 = number.parse().ok()?;
        return (number != ETCD_UNASSERTED).then(|| verdict(ETCD_LINEARIZABLE.contains(&number)));
    }
    // The key-value histories are named `c<clients>-ok.txt` and `c<clients>-bad.txt`.
    match name.strip_suffix(".txt")?.rsplit('-').next()? {
        "ok" => Some(verdict(true)),
        "bad" => Some(verdict(false)),
        _ => None,
    }
}

struct Args {
    checkout: PathBuf,
    repeat: u32,
    minimize: bool,
    only: Option<String>,
    max_steps: Option<u64>,
    show: bool,
}

fn args() -> Result<Args, String> {
    let mut checkout = None;
    let mut repeat = 1;
    let mut minimize = true;
    let mut only = None;
    let mut max_steps = None;
    let mut show = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--repeat" => {
                repeat = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .filter(|&n| n > 0)
                    .ok_or("--repeat takes a positive number")?;
            }
            "--no-minimize" => minimize = false,
            "--show" => show = true,
            "--only" => only = Some(args.next().ok_or("--only takes a file name")?),
            "--max-steps" => {
                max_steps = Some(
                    args.next()
                        .and_then(|n| n.parse().ok())
                        .ok_or("--max-steps takes a number")?,
                );
            }
            _ if checkout.is_none() && !arg.starts_with("--") => {
                checkout = Some(PathBuf::from(arg))
            }
            _ => return Err(format!("unexpected argument {arg:?}")),
        }
    }
    let checkout = checkout.ok_or("usage: porcupine <porcupine checkout> [--repeat N] [--no-minimize] [--show] [--only FILE] [--max-steps N]")?;
    Ok(Args {
        checkout,
        repeat,
        minimize,
        only,
        max_steps,
        show,
    })
}

/// Files of `dir` whose names start with `prefix` and end with `suffix`, sorted.
fn files(dir: &Path, prefix: &str, suffix: &str) -> Result<Vec<PathBuf>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix) && n.ends_with(suffix))
        })
        .collect();
    found.sort();
    Ok(found)
}

#[derive(Default)]
struct Totals {
    files: usize,
    disagreements: usize,
    check: Duration,
    minimize: Duration,
}

/// Checks one history, prints its line and adds it to `totals`.
fn run<M: Model>(
    model: &M,
    name: &str,
    history: &History<M::Input, M::Output>,
    args: &Args,
    totals: &mut Totals,
) {
    let quick = CheckOptions {
        minimize: false,
        max_steps: args.max_steps,
        ..CheckOptions::default()
    };
    let mut best = Duration::MAX;
    let mut verdict = Verdict::Unknown;
    let mut steps = 0;
    for _ in 0..args.repeat {
        let start = Instant::now();
        let result = check(model, history, &quick);
        best = best.min(start.elapsed());
        (verdict, steps) = (result.verdict, result.steps);
    }
    let mut shrunk = String::new();
    if verdict == Verdict::Illegal && args.minimize {
        let start = Instant::now();
        let options = CheckOptions {
            max_steps: args.max_steps,
            ..CheckOptions::default()
        };
        let result = check(model, history, &options);
        let took = start.elapsed();
        totals.minimize += took;
        if let Some(c) = result.counterexample {
            let minimal = if c.one_minimal {
                "1-minimal"
            } else {
                "not minimal"
            };
            shrunk = format!(
                "  counterexample {} ops + {} context ({minimal}) in {:.1} ms",
                c.operations.len(),
                c.context.len(),
                took.as_secs_f64() * 1e3
            );
            if args.show {
                shrunk.push('\n');
                shrunk.push_str(&describe(model, history, &c.operations));
                if !c.context.is_empty() {
                    shrunk.push_str(
                        "  context (each may have taken effect in its interval, or not at all):\n",
                    );
                    shrunk.push_str(&describe(model, history, &c.context));
                }
            }
        }
    }
    let expect = expected(name);
    let agrees = expect == Some(verdict);
    if expect.is_some() && !agrees {
        totals.disagreements += 1;
    }
    let expect = expect.map_or("none".to_string(), |v| format!("{v:?}"));
    let mark = if agrees || expect == "none" {
        ""
    } else {
        "  <-- DISAGREES"
    };
    println!(
        "{name:<16} {:>5} ops  {:<12} expected {:<12} {:>9.3} ms {steps:>10} steps{shrunk}{mark}",
        history.len(),
        format!("{verdict:?}"),
        expect,
        best.as_secs_f64() * 1e3
    );
    totals.files += 1;
    totals.check += best;
}

fn main() -> ExitCode {
    let args = match args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let data = args.checkout.join("test_data");
    let mut failed = false;
    let mut summary = Vec::new();
    let sets: [(&str, &str, &str); 2] = [("jepsen", "etcd_", ".log"), ("kv", "", ".txt")];
    for (dir, prefix, suffix) in sets {
        let paths = match files(&data.join(dir), prefix, suffix) {
            Ok(paths) if !paths.is_empty() => paths,
            Ok(_) => {
                eprintln!(
                    "no {prefix}*{suffix} files under {}",
                    data.join(dir).display()
                );
                failed = true;
                continue;
            }
            Err(e) => {
                eprintln!("{e}");
                failed = true;
                continue;
            }
        };
        let mut totals = Totals::default();
        for path in paths {
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default()
                .to_string();
            if args.only.as_ref().is_some_and(|only| *only != name) {
                continue;
            }
            let text = match std::fs::read_to_string(&path) {
                Ok(text) => text,
                Err(e) => {
                    eprintln!("{}: {e}", path.display());
                    failed = true;
                    continue;
                }
            };
            let parsed = if dir == "jepsen" {
                parse_etcd_log(&text).map(|h| run(&RegisterModel, &name, &h, &args, &mut totals))
            } else {
                parse_kv_log(&text).map(|h| run(&KvModel, &name, &h, &args, &mut totals))
            };
            if let Err(e) = parsed {
                eprintln!("{}: {e}", path.display());
                failed = true;
            }
        }
        failed |= totals.disagreements > 0;
        summary.push(format!(
            "{dir}: {} files, {} disagreements, checks {:.3} s, counterexamples {:.3} s",
            totals.files,
            totals.disagreements,
            totals.check.as_secs_f64(),
            totals.minimize.as_secs_f64()
        ));
    }
    for line in summary {
        println!("{line}");
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
