//! The build track's command line: grade a submission on a task's hidden schedules, list the
//! schedules, or time grading the reference.
//!
//! ```text
//! faultline-build grade --task DIR --submission DIR [--patch FILE] [--only NAME,...]
//!                     [--out FILE] [--histories DIR] [--target-dir DIR]
//!                     [--schedule-timeout SECS]
//! faultline-build schedules --task DIR
//! faultline-build bench --task DIR [--submission DIR] [--target-dir DIR]
//! faultline-build catalog --task DIR [--target-dir DIR] [--schedule-timeout SECS]
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use faultline_build::catalog::{CATALOG_FILE, Catalog, VARIANTS_DIR};
use faultline_build::runner::{GradeRequest, grade_submission, write_json};
use faultline_build::task::TaskSpec;
use faultline_sim::grade::GradeReport;

const USAGE: &str = "usage:
  faultline-build grade --task DIR --submission DIR [--patch FILE] [--only NAME,...] [--out FILE]
                      [--histories DIR] [--target-dir DIR] [--schedule-timeout SECS]
  faultline-build schedules --task DIR
  faultline-build bench --task DIR [--submission DIR] [--target-dir DIR]
  faultline-build catalog --task DIR [--target-dir DIR] [--schedule-timeout SECS]";

/// Why the command failed: a command line it cannot use (the usage is shown), or the work.
enum CliError {
    Usage(String),
    Failed(String),
}

impl From<String> for CliError {
    fn from(message: String) -> Self {
        CliError::Failed(message)
    }
}

fn usage(message: impl Into<String>) -> CliError {
    CliError::Usage(message.into())
}

/// Flags and their values.
fn flags(args: &[String]) -> Result<BTreeMap<String, String>, CliError> {
    let mut out = BTreeMap::new();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let Some(name) = flag.strip_prefix("--") else {
            return Err(usage(format!("unexpected argument {flag}")));
        };
        let value = it
            .next()
            .ok_or_else(|| usage(format!("{flag} needs a value")))?
            .clone();
        out.insert(name.to_string(), value);
    }
    Ok(out)
}

fn request(
    flags: &BTreeMap<String, String>,
    submission: PathBuf,
) -> Result<GradeRequest, CliError> {
    let known = [
        "task",
        "submission",
        "patch",
        "only",
        "out",
        "histories",
        "target-dir",
        "schedule-timeout",
    ];
    if let Some(unknown) = flags.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(usage(format!("unknown flag --{unknown}")));
    }
    let task_dir = task_of(flags)?;
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
    })
}

fn task_of(flags: &BTreeMap<String, String>) -> Result<PathBuf, CliError> {
    flags
        .get("task")
        .map(PathBuf::from)
        .ok_or_else(|| usage("--task is required"))
}

/// A directory of its own inside the workspace's target directory.
fn default_target_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    target.join("build-track")
}

fn summary(report: &GradeReport) -> String {
    if !report.rule_violations.is_empty() {
        return format!(
            "{}: refused unbuilt, it breaks the rules of what a server may reach:\n{}",
            report.submission,
            report.rule_violations.join("\n")
        );
    }
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

fn grade(flags: &BTreeMap<String, String>) -> Result<(), CliError> {
    let submission = flags
        .get("submission")
        .map(PathBuf::from)
        .ok_or_else(|| usage("--submission is required"))?;
    let request = request(flags, submission)?;
    let report = grade_submission(&request).map_err(|e| e.to_string())?;
    if let Some(out) = flags.get("out") {
        write_json(&report, Path::new(out)).map_err(|e| e.to_string())?;
    }
    println!("{}", summary(&report));
    // Which catalogued bugs its failures look like, when the task has a catalog.
    if let Ok(catalog) = Catalog::load(&request.task_dir) {
        for r in catalog.resemblance(&report).iter().filter(|r| r.matches()) {
            println!(
                "fails like variant {}: all {} schedules of its signature",
                r.variant, r.of
            );
        }
    }
    Ok(())
}

fn schedules(flags: &BTreeMap<String, String>) -> Result<(), CliError> {
    let dir = task_of(flags)?;
    let spec = TaskSpec::load(&dir).map_err(|e| e.to_string())?;
    let json = serde_json::to_string_pretty(&spec.hidden_schedules()).map_err(|e| e.to_string())?;
    println!("{json}");
    Ok(())
}

/// Grades the reference twice: the time of each run, and whether every schedule's history
/// came out the same.
fn bench(flags: &BTreeMap<String, String>) -> Result<(), CliError> {
    let task = task_of(flags)?;
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
        Err(CliError::Failed("a rerun differed".into()))
    }
}

/// Grades every variant of the task on every hidden schedule and writes the catalog of what
/// catches each one.
fn catalog(flags: &BTreeMap<String, String>) -> Result<(), CliError> {
    let task = task_of(flags)?;
    let spec = TaskSpec::load(&task).map_err(|e| e.to_string())?;
    let request = request(flags, task.join("reference"))?;
    let catalog = Catalog::build(&spec.id, &request).map_err(|e| e.to_string())?;
    let path = task.join(VARIANTS_DIR).join(CATALOG_FILE);
    write_json(&catalog, &path).map_err(|e| e.to_string())?;
    for v in &catalog.variants {
        let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
        for c in &v.caught_by {
            *kinds.entry(c.kind.as_str()).or_default() += 1;
        }
        println!(
            "{}: fails {}/{} schedules {kinds:?}",
            v.name,
            v.caught_by.len(),
            v.schedules
        );
    }
    println!("wrote {}", path.display());
    if catalog.variants.iter().all(|v| !v.caught_by.is_empty()) {
        Ok(())
    } else {
        Err(CliError::Failed("a variant passes every schedule".into()))
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let outcome = match args.split_first() {
        Some((command, rest)) => flags(rest).and_then(|f| match command.as_str() {
            "grade" => grade(&f),
            "schedules" => schedules(&f),
            "bench" => bench(&f),
            "catalog" => catalog(&f),
            other => Err(usage(format!("unknown command {other}"))),
        }),
        None => Err(usage("no command")),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::Usage(message)) => {
            eprintln!("{message}\n{USAGE}");
            ExitCode::from(2)
        }
        Err(CliError::Failed(message)) => {
            eprintln!("{message}");
            ExitCode::FAILURE
        }
    }
}
