//! The build track's command line: grade a submission on a task's hidden schedules, list the
//! schedules, or time grading the reference.
//!
//! ```text
//! faultline-sim grade --task DIR --submission DIR [--patch FILE] [--only NAME,...]
//!                     [--out FILE] [--histories DIR] [--target-dir DIR]
//!                     [--schedule-timeout SECS] [--online]
//! faultline-sim schedules --task DIR
//! faultline-sim bench --task DIR [--submission DIR] [--target-dir DIR]
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use faultline_sim::grade::GradeReport;
use faultline_sim::runner::{GradeRequest, grade_submission, write_report};
use faultline_sim::task::TaskSpec;

const USAGE: &str = "usage:
  faultline-sim grade --task DIR --submission DIR [--patch FILE] [--only NAME,...] [--out FILE]
                      [--histories DIR] [--target-dir DIR] [--schedule-timeout SECS] [--online]
  faultline-sim schedules --task DIR
  faultline-sim bench --task DIR [--submission DIR] [--target-dir DIR]";

/// Flags and their values; `--online` alone takes none.
fn flags(args: &[String]) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let Some(name) = flag.strip_prefix("--") else {
            return Err(format!("unexpected argument {flag}"));
        };
        let value = if name == "online" {
            String::new()
        } else {
            it.next()
                .ok_or_else(|| format!("{flag} needs a value"))?
                .clone()
        };
        out.insert(name.to_string(), value);
    }
    Ok(out)
}

fn request(flags: &BTreeMap<String, String>, submission: PathBuf) -> Result<GradeRequest, String> {
    let known = [
        "task",
        "submission",
        "patch",
        "only",
        "out",
        "histories",
        "target-dir",
        "schedule-timeout",
        "online",
    ];
    if let Some(unknown) = flags.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(format!("unknown flag --{unknown}"));
    }
    let task_dir = PathBuf::from(flags.get("task").ok_or("--task is required")?);
    let timeout = match flags.get("schedule-timeout") {
        Some(s) => s
            .parse()
            .map_err(|_| format!("--schedule-timeout {s} is not seconds"))?,
        None => 60,
    };
    let target_dir = match flags.get("target-dir") {
        Some(dir) => PathBuf::from(dir),
        None => default_target_dir(),
    };
    Ok(GradeRequest {
        task_dir,
        submission,
        patch: flags.get("patch").map(PathBuf::from),
        only: flags
            .get("only")
            .map(|s| s.split(',').map(str::to_string).collect()),
        target_dir,
        schedule_timeout: Duration::from_secs(timeout),
        histories: flags.get("histories").map(PathBuf::from),
        online: flags.contains_key("online"),
    })
}

/// A directory of its own inside the workspace's target directory.
fn default_target_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    target.join("build-track")
}

fn summary(report: &GradeReport) -> String {
    if let Some(error) = &report.build_error {
        return format!("{}: did not build\n{error}", report.submission);
    }
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    for failure in report.schedules.iter().filter_map(|s| s.failure.as_ref()) {
        *kinds.entry(failure.kind()).or_default() += 1;
    }
    format!(
        "{}: passed {}/{} ({:.1}%), failures {kinds:?}; build {:.1} s, run {:.1} s",
        report.submission,
        report.passed,
        report.total,
        100.0 * report.share_passed,
        report.build_seconds,
        report.run_seconds
    )
}

fn grade(flags: &BTreeMap<String, String>) -> Result<(), String> {
    let submission = PathBuf::from(flags.get("submission").ok_or("--submission is required")?);
    let request = request(flags, submission)?;
    let report = grade_submission(&request).map_err(|e| e.to_string())?;
    if let Some(out) = flags.get("out") {
        write_report(&report, Path::new(out)).map_err(|e| e.to_string())?;
    }
    println!("{}", summary(&report));
    Ok(())
}

fn schedules(flags: &BTreeMap<String, String>) -> Result<(), String> {
    let dir = PathBuf::from(flags.get("task").ok_or("--task is required")?);
    let spec = TaskSpec::load(&dir).map_err(|e| e.to_string())?;
    let json = serde_json::to_string_pretty(&spec.hidden_schedules()).map_err(|e| e.to_string())?;
    println!("{json}");
    Ok(())
}

/// Grades the reference twice: the time of each run, and whether every schedule's history
/// came out the same.
fn bench(flags: &BTreeMap<String, String>) -> Result<(), String> {
    let task = PathBuf::from(flags.get("task").ok_or("--task is required")?);
    let submission = flags
        .get("submission")
        .map(PathBuf::from)
        .unwrap_or_else(|| task.join("reference"));
    let request = request(flags, submission)?;
    let first = grade_submission(&request).map_err(|e| e.to_string())?;
    println!("{}", summary(&first));
    let second = grade_submission(&request).map_err(|e| e.to_string())?;
    println!("{}", summary(&second));
    let same = first
        .schedules
        .iter()
        .zip(&second.schedules)
        .filter(|(a, b)| a.history_sha256 == b.history_sha256 && a.passed == b.passed)
        .count();
    let ops: u64 = first
        .schedules
        .iter()
        .map(|s| u64::from(s.operations))
        .sum();
    println!(
        "reruns identical: {same}/{}; {} schedules, {ops} operations graded in {:.1} s and {:.1} s",
        first.schedules.len(),
        first.total,
        first.run_seconds,
        second.run_seconds
    );
    if same == first.schedules.len() {
        Ok(())
    } else {
        Err("a rerun differed".into())
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let outcome = match args.split_first() {
        Some((command, rest)) => flags(rest).and_then(|f| match command.as_str() {
            "grade" => grade(&f),
            "schedules" => schedules(&f),
            "bench" => bench(&f),
            other => Err(format!("unknown command {other}")),
        }),
        None => Err("no command".into()),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("{message}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}
