//! The grader of a build task: takes a submission's sources (applying a patch to them if
//! asked), checks them against the rules of what a server may reach, builds a small program
//! around them against this harness, runs every schedule in that program with a wall-clock
//! limit, and collects the results. The build and every schedule run in sandboxes
//! ([`crate::confine`]).
//!
//! Each schedule runs in a sandbox and a process of its own, so a server that never yields costs
//! only its own schedule (a timeout), and a program that dies without a result line (an abort, an
//! exit) fails that schedule as a panic with the end of its error output.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use faultline_legality::Legality;

use crate::confine;
pub use crate::error::RunnerError;
use crate::task::TaskSpec;
use faultline_sim::grade::GradeReport;
use faultline_sim::plan::Schedule;
use faultline_sim::verdict::{Failure, ScheduleResult};

/// This crate's directory in the build's sandbox: submissions are built against it.
const GUEST_HARNESS_CRATE: &str = "/harness/crates/faultline-sim";
/// The longest a driver's build may take.
const BUILD_TIMEOUT: Duration = Duration::from_secs(1800);
/// Lines of compiler or driver output kept in a result.
const TAIL_LINES: usize = 40;

/// What to grade and how.
#[derive(Debug, Clone)]
pub struct GradeRequest {
    /// The task directory (with `task.toml`).
    pub task_dir: PathBuf,
    /// The submission crate's directory.
    pub submission: PathBuf,
    /// A patch (`git apply` format, paths relative to the crate) applied to a copy first.
    pub patch: Option<PathBuf>,
    /// Only these schedules, by name; all when `None`.
    pub only: Option<Vec<String>>,
    /// Where cargo builds (shared between grades, so dependencies build once).
    pub target_dir: PathBuf,
    /// Wall-clock limit of one schedule.
    pub schedule_timeout: Duration,
    /// Where failed schedules' histories are written, if anywhere.
    pub histories: Option<PathBuf>,
}

fn io(what: &str, e: impl std::fmt::Display) -> RunnerError {
    RunnerError::Io(format!("{what}: {e}"))
}

/// The last lines of `text`.
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n")
}

/// Copies the regular files and directories under `from`; a link or any other kind of file is
/// refused, since it could point the build at a file outside the submission.
fn copy_sources(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|e| format!("creating {}: {e}", to.display()))?;
    let entries =
        std::fs::read_dir(from).map_err(|e| format!("reading {}: {e}", from.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("reading {}: {e}", from.display()))?;
        let kind = entry
            .file_type()
            .map_err(|e| format!("reading {}: {e}", entry.path().display()))?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if kind.is_dir() {
            copy_sources(&src, &dst)?;
        } else if kind.is_file() {
            std::fs::copy(&src, &dst).map_err(|e| format!("copying {}: {e}", src.display()))?;
        } else {
            return Err(format!("{} is not a regular file", src.display()));
        }
    }
    Ok(())
}

/// Takes a submission's `src/` and nothing else: the crate is built with the skeleton's
/// manifest, so a submission cannot add a build script, a dependency or a profile.
fn take_submission(submission: &Path, skeleton: &Path, to: &Path) -> Result<(), String> {
    let src = submission.join("src");
    if !src.is_dir() {
        return Err(format!("{} has no src/ directory", submission.display()));
    }
    copy_sources(&src, &to.join("src"))?;
    std::fs::copy(skeleton.join("Cargo.toml"), to.join("Cargo.toml"))
        .map(|_| ())
        .map_err(|e| format!("copying the skeleton's Cargo.toml: {e}"))
}

/// Every rule a Rust file under `src/` breaks, as `path:line: rule: what`.
fn rule_violations(crate_dir: &Path) -> Result<Vec<String>, RunnerError> {
    let mut found = Vec::new();
    let mut todo = vec![crate_dir.join("src")];
    while let Some(dir) = todo.pop() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map_err(|e| io(&format!("reading {}", dir.display()), e))?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<_, _>>()
            .map_err(|e| io(&format!("reading {}", dir.display()), e))?;
        entries.sort();
        for path in entries {
            if path.is_dir() {
                todo.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let shown = path.strip_prefix(crate_dir).unwrap_or(&path).display();
            let Ok(text) = std::fs::read_to_string(&path) else {
                found.push(format!("{shown}: not UTF-8 text"));
                continue;
            };
            match faultline_legality::check_build_source(&text) {
                Legality::Legal => {}
                Legality::Unreadable(why) => found.push(format!("{shown}: unreadable: {why}")),
                Legality::Illegal(violations) => found.extend(
                    violations
                        .iter()
                        .map(|v| format!("{shown}:{}: {}: {}", v.line, v.rule, v.found)),
                ),
            }
        }
    }
    Ok(found)
}

/// Points the copied submission's `faultline-sim` dependency at this harness, wherever the
/// submission expected it.
fn point_at_harness(manifest: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(manifest).map_err(|e| format!("no Cargo.toml: {e}"))?;
    let mut doc: toml::Table = toml::from_str(&text).map_err(|e| format!("Cargo.toml: {e}"))?;
    let deps = doc
        .entry("dependencies")
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    let toml::Value::Table(deps) = deps else {
        return Err("Cargo.toml: [dependencies] is not a table".into());
    };
    let mut harness = toml::Table::new();
    harness.insert(
        "path".into(),
        toml::Value::String(GUEST_HARNESS_CRATE.into()),
    );
    deps.insert("faultline-sim".into(), toml::Value::Table(harness));
    let text = toml::to_string(&doc).map_err(|e| format!("Cargo.toml: {e}"))?;
    std::fs::write(manifest, text).map_err(|e| format!("writing Cargo.toml: {e}"))
}

fn apply_patch(dir: &Path, patch: &Path) -> Result<(), RunnerError> {
    let failed = |message: String| RunnerError::Patch {
        patch: patch.display().to_string(),
        message,
    };
    let patch = std::path::absolute(patch).map_err(|e| failed(e.to_string()))?;
    let out = Command::new("git")
        .args(["apply", "--whitespace=nowarn"])
        .arg(&patch)
        .current_dir(dir)
        .output()
        .map_err(|e| failed(format!("cannot run git: {e}")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(failed(tail(&String::from_utf8_lossy(&out.stderr))))
    }
}

/// Writes the program that runs the schedules on the submission's server, with the paths it
/// has in the build's sandbox.
fn write_driver(work: &Path, spec: &TaskSpec) -> Result<(), RunnerError> {
    let dir = work.join("driver");
    std::fs::create_dir_all(dir.join("src")).map_err(|e| io("creating the driver", e))?;
    let manifest = format!(
        "[package]\nname = {name:?}\nversion = \"0.0.0\"\nedition = \"2024\"\n\
         publish = false\n\n[dependencies]\nfaultline-sim = {{ path = {harness:?} }}\n\
         submission = {{ path = {submission:?}, package = {package:?} }}\n\n[workspace]\n\n\
         [profile.release]\ndebug = false\n",
        name = confine::grade_name(work),
        harness = GUEST_HARNESS_CRATE,
        submission = format!("{}/submission", confine::guest_work(work)),
        package = spec.package,
    );
    let main = format!(
        "fn main() -> std::process::ExitCode {{\n    \
         faultline_sim::driver::main::<submission::{}>()\n}}\n",
        spec.server
    );
    let write = |name: &str, text: &str| {
        std::fs::write(dir.join(name), text)
            .map_err(|e| io(&format!("writing the driver's {name}"), e))
    };
    write("Cargo.toml", &manifest)?;
    write("src/main.rs", &main)?;
    // The workspace's lockfile pins every dependency the harness was tested with.
    let lock = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.lock");
    if lock.exists() {
        std::fs::copy(&lock, dir.join("Cargo.lock")).map_err(|e| io("copying Cargo.lock", e))?;
    }
    Ok(())
}

/// Builds the driver in its sandbox; the executable on the host, or the compiler's complaint.
fn build(work: &Path, request: &GradeRequest) -> Result<Result<PathBuf, String>, RunnerError> {
    std::fs::create_dir_all(&request.target_dir)
        .map_err(|e| io(&format!("creating {}", request.target_dir.display()), e))?;
    let sandbox = confine::build_sandbox(work, &request.target_dir)?;
    let (command, exe) = confine::build_request(work, &request.target_dir, BUILD_TIMEOUT);
    let out = confine::exec(&sandbox, command)?;
    if out.success() {
        Ok(Ok(exe))
    } else if let Some(limit) = out.limit_hit() {
        Ok(Err(format!(
            "the build ran into the sandbox's {} limit",
            limit.name()
        )))
    } else if out.timed_out {
        Ok(Err(format!(
            "the build took over {} s",
            BUILD_TIMEOUT.as_secs()
        )))
    } else {
        Ok(Err(tail(&out.stderr.text)))
    }
}

/// A word no server can guess in advance, starting each result line of one grade.
fn new_marker() -> String {
    use std::hash::{BuildHasher, RandomState};
    let a = RandomState::new().hash_one(std::process::id());
    let b = RandomState::new().hash_one(Instant::now());
    format!("faultline-sim-result-{a:016x}{b:016x}")
}

/// Runs each schedule in a sandbox of its own: the driver reads the marker and that one schedule
/// from standard input, and its result is the line of its output that starts with the marker.
fn run_driver(
    exe: &Path,
    work: &Path,
    schedules: &[Schedule],
    request: &GradeRequest,
) -> Result<Vec<ScheduleResult>, RunnerError> {
    let marker = new_marker();
    let input = work.join("input");
    std::fs::create_dir_all(&input).map_err(|e| io("creating the input directory", e))?;
    let sandbox = confine::run_sandbox(exe, &input, request.histories.as_deref())?;
    let mut results = Vec::with_capacity(schedules.len());
    for schedule in schedules {
        let mut stdin = format!("{marker}\n").into_bytes();
        serde_json::to_writer(&mut stdin, std::slice::from_ref(schedule))
            .map_err(|e| io("encoding a schedule", e))?;
        std::fs::write(input.join("stdin"), stdin).map_err(|e| io("writing a schedule", e))?;
        let command = confine::run_request(request.histories.is_some(), request.schedule_timeout);
        let out = confine::exec(&sandbox, command)?;
        // Anything else on the driver's output is the server's own printing.
        let line = out.stdout.text.lines().rev().find_map(|line| {
            line.strip_prefix(marker.as_str())
                .and_then(|l| l.strip_prefix(' '))
        });
        let result = match line {
            Some(json) => serde_json::from_str(json)
                .map_err(|e| io(&format!("the driver printed {json:?}"), e))?,
            None if out.timed_out => {
                let seconds = request.schedule_timeout.as_secs();
                ScheduleResult::unrun(schedule, Failure::Timeout { seconds })
            }
            None => {
                let why = match out.limit_hit() {
                    Some(limit) => format!("it ran into the sandbox's {} limit", limit.name()),
                    None => format!("exit code {:?}", out.exit_code),
                };
                let message = format!("the driver died ({why}):\n{}", tail(&out.stderr.text));
                ScheduleResult::unrun(schedule, Failure::Panic { message })
            }
        };
        results.push(result);
    }
    Ok(results)
}

/// Grades a submission on the task's hidden schedules (or the named ones).
pub fn grade_submission(request: &GradeRequest) -> Result<GradeReport, RunnerError> {
    let spec = TaskSpec::load(&request.task_dir)?;
    let mut schedules = spec.hidden_schedules();
    if let Some(only) = &request.only {
        if let Some(missing) = only
            .iter()
            .find(|n| !schedules.iter().any(|s| &s.name == *n))
        {
            return Err(RunnerError::UnknownSchedule(missing.clone()));
        }
        schedules.retain(|s| only.contains(&s.name));
    }
    let mut shown = request.submission.display().to_string();
    if let Some(patch) = &request.patch {
        shown = format!("{shown} with {}", patch.display());
    }
    let work = tempfile::Builder::new()
        .prefix("grade-")
        .tempdir()
        .map_err(|e| io("creating a work directory", e))?;
    let submission = work.path().join("submission");
    let skeleton = request.task_dir.join("skeleton");
    if let Err(message) = take_submission(&request.submission, &skeleton, &submission) {
        return Ok(GradeReport::build_failed(
            &spec.id,
            &shown,
            schedules.len(),
            message,
        ));
    }
    if let Some(patch) = &request.patch {
        apply_patch(&submission, patch)?;
    }
    let violations = rule_violations(&submission)?;
    if !violations.is_empty() {
        return Ok(GradeReport::refused(
            &spec.id,
            &shown,
            schedules.len(),
            violations,
        ));
    }
    if let Some(dir) = &request.histories {
        std::fs::create_dir_all(dir).map_err(|e| io("creating the histories directory", e))?;
    }
    if let Err(message) = point_at_harness(&submission.join("Cargo.toml")) {
        return Ok(GradeReport::build_failed(
            &spec.id,
            &shown,
            schedules.len(),
            message,
        ));
    }
    write_driver(work.path(), &spec)?;
    let started = Instant::now();
    let built = build(work.path(), request)?;
    let build_seconds = started.elapsed().as_secs_f64();
    let exe = match built {
        Ok(exe) => exe,
        Err(message) => {
            let mut report = GradeReport::build_failed(&spec.id, &shown, schedules.len(), message);
            report.build_seconds = build_seconds;
            return Ok(report);
        }
    };
    let started = Instant::now();
    let results = run_driver(&exe, work.path(), &schedules, request);
    remove_driver(&request.target_dir, work.path());
    let results = results?;
    let mut report = GradeReport::new(&spec.id, &shown, results, schedules.len());
    report.build_seconds = build_seconds;
    report.run_seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// Removes a grade's driver executables from the shared target directory, which would otherwise
/// keep one per grade. Best effort: a leftover costs only disk.
fn remove_driver(target: &Path, work: &Path) {
    let Ok(release) = confine::cargo_dir(target).map(|d| d.join("release")) else {
        return;
    };
    let name = confine::grade_name(work);
    let _ = std::fs::remove_file(release.join(&name));
    let prefix = format!("{}-", name.replace('-', "_"));
    if let Ok(entries) = std::fs::read_dir(release.join("deps")) {
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

/// Writes `value` to `path` as pretty JSON, atomically (a temporary file renamed over it).
pub fn write_json<T: serde::Serialize>(value: &T, path: &Path) -> Result<(), RunnerError> {
    let failed = |e: &dyn std::fmt::Display| io(&format!("writing {}", path.display()), e);
    let mut json = serde_json::to_vec_pretty(value).map_err(|e| failed(&e))?;
    json.push(b'\n');
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut file = tempfile::NamedTempFile::new_in(dir).map_err(|e| failed(&e))?;
    std::io::Write::write_all(&mut file, &json).map_err(|e| failed(&e))?;
    file.as_file().sync_all().map_err(|e| failed(&e))?;
    file.persist(path).map_err(|e| failed(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_harness_dependency_is_rewritten_and_other_dependencies_kept() {
        let dir = tempfile::tempdir().unwrap();
        let manifest = dir.path().join("Cargo.toml");
        std::fs::write(
            &manifest,
            "[package]\nname = \"x\"\n[dependencies]\nfaultline-sim = { path = \"../../far/away\" }\nserde = \"1\"\n",
        )
        .unwrap();
        point_at_harness(&manifest).unwrap();
        let doc: toml::Table =
            toml::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
        let deps = doc["dependencies"].as_table().unwrap();
        assert_eq!(
            deps["faultline-sim"]["path"].as_str(),
            Some(GUEST_HARNESS_CRATE)
        );
        assert_eq!(deps["serde"].as_str(), Some("1"));
        std::fs::write(&manifest, "[package\n").unwrap();
        assert!(point_at_harness(&manifest).is_err());
    }

    #[test]
    fn tails_keep_the_last_lines() {
        let text: String = (0..100).map(|i| format!("{i}\n")).collect();
        let t = tail(&text);
        assert!(t.starts_with("60\n") && t.ends_with("99"), "{t}");
    }
}
