//! The build track in a run: an agent implements a task's protocol under an aid, and the
//! submission (its `src/`) is graded by `faultline-build` on the task's hidden fault schedules.
//! Baselines: `null` submits the skeleton, `gold` the task's reference.
//!
//! A trial's `case` index points into the run's build tasks, its condition is an aid.

use crate::plan::PlannedTrial;
use anyhow::{Context, Result};
use faultline_agent::{BuiltinAgent, EnvError, ExternalAgent, TrialEnv, TrialResult};
use faultline_build::catalog::Catalog;
use faultline_build::runner::{GradeRequest, RunnerError, grade_submission};
use faultline_build::task::TaskSpec;
use faultline_build::trial::{TrialTemplate, aid_files};
use faultline_corpus::gold::diff_workspace;
use faultline_corpus::workspace::copy::copy_preserving;
use faultline_corpus::{BundleFile, DataDir};
use faultline_sandbox::Toolchain;
use faultline_schema::grade::{GRADE_SCHEMA_VERSION, GradeInputs};
use faultline_schema::run::{LockedCase, RUN_SCHEMA_VERSION};
use faultline_schema::{
    Aid, BuildScores, Category, Grade, Outcome, ResultRecord, Submission, Task, Trajectory,
};
use faultline_sim::grade::GradeReport;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// The file in a trial directory holding the grader's per-schedule report.
pub const BUILD_REPORT_FILE: &str = "build-report.json";
/// Wall-clock seconds one hidden schedule may take.
const SCHEDULE_TIMEOUT: Duration = Duration::from_secs(300);

/// A build task of the corpus (`corpus/build/<id>`).
#[derive(Debug, Clone)]
pub struct BuildTask {
    /// The task's directory.
    pub dir: PathBuf,
    /// Its `task.toml`.
    pub spec: TaskSpec,
    /// Its `task.md`, what the agent is shown.
    pub text: String,
    /// Its category, as the records file it.
    pub category: Category,
}

impl BuildTask {
    /// Loads the task in `dir`.
    pub fn load(dir: &Path) -> Result<BuildTask> {
        let spec = TaskSpec::load(dir)?;
        let text = std::fs::read_to_string(dir.join("task.md"))
            .with_context(|| format!("reading {}/task.md", dir.display()))?;
        let category = spec
            .category
            .parse()
            .map_err(|e: String| anyhow::anyhow!("{}/task.toml: category: {e}", dir.display()))?;
        Ok(BuildTask {
            dir: dir.to_path_buf(),
            spec,
            text,
            category,
        })
    }

    /// Every task under `root` (`corpus/build`), by id; none when it does not exist.
    pub fn all(root: &Path) -> Result<Vec<BuildTask>> {
        let Ok(entries) = std::fs::read_dir(root) else {
            return Ok(Vec::new());
        };
        let mut dirs: Vec<PathBuf> = entries
            .filter_map(|e| Some(e.ok()?.path()))
            .filter(|p| p.join(faultline_build::task::TASK_FILE).is_file())
            .collect();
        dirs.sort();
        dirs.iter().map(|d| BuildTask::load(d)).collect()
    }

    /// The task's id.
    pub fn id(&self) -> &str {
        &self.spec.id
    }

    /// The task as a lock records it: the hash of its directory (text, skeleton, schedules,
    /// reference, variants), so a run is not resumed over a changed task.
    pub fn locked(&self) -> Result<LockedCase> {
        let mut files = Vec::new();
        for entry in walkdir::WalkDir::new(&self.dir).sort_by_file_name() {
            let entry = entry?;
            let in_target = entry.path().components().any(|c| c.as_os_str() == "target");
            if entry.file_type().is_file() && !in_target {
                files.push(entry.into_path());
            }
        }
        let mut hasher = Sha256::new();
        for path in files {
            let rel = path.strip_prefix(&self.dir).unwrap_or(&path);
            let bytes = std::fs::read(&path)?;
            hasher.update(rel.to_string_lossy().as_bytes());
            hasher.update((bytes.len() as u64).to_le_bytes());
            hasher.update(&bytes);
        }
        Ok(LockedCase {
            id: self.id().into(),
            sha256: hex::encode(hasher.finalize()),
        })
    }

    /// The gold baseline's submission: the reference's `src/` as a diff against the skeleton's.
    pub fn reference_patch(&self) -> Result<String> {
        source_diff(
            &self.dir.join("skeleton/src"),
            &self.dir.join("reference/src"),
        )
    }
}

/// The diff of `src/` from `pristine` to `current`, with paths under `src/`.
pub fn source_diff(pristine: &Path, current: &Path) -> Result<String> {
    let mut diff = diff_workspace(pristine, current)?;
    for file in &mut diff.files {
        file.path = format!("src/{}", file.path);
    }
    Ok(diff.unified())
}

/// What the build track's trials share in a run.
#[derive(Debug)]
pub struct BuildState {
    /// The tasks, in the run's order (a trial's `case` indexes them).
    pub tasks: Vec<BuildTask>,
    /// Prepared workspaces by task index and aid.
    pub templates: BTreeMap<(usize, Aid), TrialTemplate>,
    /// The aids' files (`corpus/build/aids`).
    pub aids: PathBuf,
    /// Where submissions are built (vendored dependencies and cargo's outputs, shared).
    pub target: PathBuf,
    /// Hidden schedules graded per task: all when `None`.
    pub schedules: Option<usize>,
    /// Grades already made in this run, by task and submission: grading is deterministic, so
    /// one submission (a baseline's, under every aid) is graded once.
    pub graded: Mutex<BTreeMap<String, GradeReport>>,
}

impl BuildState {
    /// Prepares the workspaces the trials need, one per task and aid.
    pub fn prepare(
        tasks: Vec<BuildTask>,
        needed: &[(usize, Aid)],
        aids: PathBuf,
        data: &DataDir,
        schedules: Option<usize>,
    ) -> Result<BuildState> {
        let target = data.root.join("build").join("target");
        let root = data.root.join("build").join("trials");
        let mut templates = BTreeMap::new();
        for &(task, aid) in needed {
            if templates.contains_key(&(task, aid)) {
                continue;
            }
            let t = &tasks[task];
            let template = TrialTemplate::prepare(&t.dir, aid, &aids, &root, &target)
                .with_context(|| format!("preparing {} under the {} aid", t.id(), aid.as_str()))?;
            templates.insert((task, aid), template);
        }
        Ok(BuildState {
            tasks,
            templates,
            aids,
            target,
            schedules,
            graded: Mutex::new(BTreeMap::new()),
        })
    }

    /// Grades `patch` (a diff of `src/` against the skeleton) on `task`'s hidden schedules:
    /// the report, or why the patch could not be applied.
    pub fn grade(
        &self,
        task: &BuildTask,
        patch: &str,
        data: &DataDir,
    ) -> Result<Result<GradeReport, String>> {
        let key = hex::encode(Sha256::digest(
            format!("{}\n{:?}\n{patch}", task.id(), self.schedules).as_bytes(),
        ));
        if let Some(report) = self
            .graded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Ok(Ok(report.clone()));
        }
        let work = data.scratch_dir("build")?;
        let submission = work.path().join("crate");
        copy_preserving(&task.dir.join("skeleton"), &submission)?;
        if !patch.trim().is_empty() {
            let file = work.path().join("submission.diff");
            std::fs::write(&file, patch)?;
            let out = std::process::Command::new("git")
                .args(["apply", "--whitespace=nowarn"])
                .arg(&file)
                .current_dir(&submission)
                .output()
                .context("running git apply")?;
            if !out.status.success() {
                return Ok(Err(String::from_utf8_lossy(&out.stderr).trim().to_string()));
            }
        }
        let only = self.schedules.map(|n| {
            task.spec
                .hidden_schedules()
                .into_iter()
                .take(n)
                .map(|s| s.name)
                .collect()
        });
        let request = GradeRequest {
            task_dir: task.dir.clone(),
            submission,
            patch: None,
            only,
            target_dir: self.target.clone(),
            schedule_timeout: SCHEDULE_TIMEOUT,
            histories: None,
        };
        let report = grade_submission(&request).map_err(|e: RunnerError| anyhow::anyhow!(e))?;
        self.graded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, report.clone());
        Ok(Ok(report))
    }
}

/// The task file a build trial's agent gets, and its environment.
pub fn trial_env(
    state: &BuildState,
    t: &PlannedTrial,
    task: Task,
    data: &DataDir,
    toolchain: &Toolchain,
) -> Result<Result<TrialEnv, EnvError>> {
    let aid = t
        .condition
        .aid()
        .context("a build trial's condition is an aid")?;
    let build_task = &state.tasks[t.case];
    let template = &state.templates[&(t.case, aid)];
    let bundle = aid_files(&state.aids, aid)?
        .into_iter()
        .map(|(name, text)| BundleFile { name, text })
        .collect();
    Ok(TrialEnv::for_build(
        task,
        build_task.text.clone(),
        bundle,
        &template.workspace,
        |workspace| template.sandbox_spec(Some(toolchain.clone()), workspace),
        data,
    ))
}

/// The names of the aid files a trial is shown.
pub fn bundle_names(state: &BuildState, aid: Aid) -> Result<Vec<String>> {
    Ok(aid_files(&state.aids, aid)?
        .into_iter()
        .map(|(name, _)| name)
        .collect())
}

/// Runs a model or external agent on a build trial.
pub async fn run_agent(
    env: TrialEnv,
    builtin: Option<&BuiltinAgent>,
    external: Option<&ExternalAgent>,
    dir: &faultline_schema::TrialDir,
    trajectory: PathBuf,
) -> Result<TrialResult> {
    match (builtin, external) {
        (_, Some(ext)) => ext.run(&env, dir, Some(trajectory)).await,
        (Some(agent), None) => agent.run(&env, Some(trajectory)).await,
        (None, None) => anyhow::bail!("a build trial needs an agent"),
    }
}

/// The grade of a build submission: pass when every graded schedule passed, the share passed as
/// the score, the failures by kind and the catalogued bugs it fails like.
pub fn grade(
    state: &BuildState,
    t: &PlannedTrial,
    submission: &Submission,
    data: &DataDir,
) -> Result<(Grade, Option<GradeReport>)> {
    let task = &state.tasks[t.case];
    let started = Instant::now();
    let text = match submission {
        Submission::Patch(p) => p.as_str(),
        Submission::None => "",
        other => anyhow::bail!("a build trial submitted {other:?}, not a patch"),
    };
    let mut g = new_grade(task, t, text)?;
    let report = match state.grade(task, text, data)? {
        Err(why) => {
            g.outcome = Outcome::PatchError;
            g.reason = format!("the submission does not apply to the skeleton: {why}");
            g.score = Some(0.0);
            None
        }
        Ok(report) => {
            let catalog = Catalog::load(&task.dir).ok();
            g.build = Some(scores(&report, catalog.as_ref()));
            g.score = Some(report.share_passed);
            (g.outcome, g.reason) = if !report.rule_violations.is_empty() {
                (
                    Outcome::Illegal,
                    format!(
                        "the sources break {} rule(s), first: {}",
                        report.rule_violations.len(),
                        report.rule_violations[0]
                    ),
                )
            } else if report.build_error.is_some() {
                (Outcome::BuildError, "the submission does not build".into())
            } else if report.passed == report.total && report.total > 0 {
                (
                    Outcome::Pass,
                    format!("passed all {} hidden schedules", report.total),
                )
            } else {
                (
                    Outcome::FailOracle,
                    format!(
                        "passed {} of {} hidden schedules",
                        report.passed, report.total
                    ),
                )
            };
            Some(report)
        }
    };
    g.wall_secs = started.elapsed().as_secs_f64();
    g.graded_at = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    Ok((g, report))
}

/// A grade not yet decided, `infra_error` until it is.
fn new_grade(task: &BuildTask, t: &PlannedTrial, submission: &str) -> Result<Grade> {
    Ok(Grade {
        schema_version: GRADE_SCHEMA_VERSION,
        trial_id: t.trial_id.clone(),
        case_id: task.id().into(),
        track: t.track,
        outcome: Outcome::InfraError,
        reason: String::new(),
        score: None,
        diagnosis: None,
        repair: None,
        reproduction: None,
        build: None,
        inputs: GradeInputs {
            submission_sha256: hex::encode(Sha256::digest(submission.as_bytes())),
            case_sha256: task.locked()?.sha256,
            faultline_version: env!("CARGO_PKG_VERSION").into(),
        },
        graded_at: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
        wall_secs: 0.0,
        protections: Vec::new(),
    })
}

/// The grade of a build trial whose agent never submitted through no fault of its own (the
/// model's API failed, no sandbox could be made): unscored, for `--retry-infra` to redo.
pub fn infra_grade(state: &BuildState, t: &PlannedTrial, why: &str) -> Result<Grade> {
    let mut g = new_grade(&state.tasks[t.case], t, "")?;
    g.reason = why.to_string();
    Ok(g)
}

/// The build scores of a grader's report.
fn scores(report: &GradeReport, catalog: Option<&Catalog>) -> BuildScores {
    let mut failures = BTreeMap::new();
    for s in &report.schedules {
        if let Some(f) = &s.failure {
            *failures.entry(f.kind().to_string()).or_insert(0) += 1;
        }
    }
    BuildScores {
        passed: report.passed,
        total: report.total,
        linearizability_violations: failures.get("linearizability").copied().unwrap_or(0),
        failures,
        resembles: catalog
            .map(|c| {
                c.resemblance(report)
                    .into_iter()
                    .filter(|r| r.matches())
                    .map(|r| r.variant)
                    .collect()
            })
            .unwrap_or_default(),
        build_error: report.build_error.clone(),
        rule_violations: report.rule_violations.clone(),
    }
}

/// The results line of a build trial.
pub fn record(
    task: &BuildTask,
    t: &PlannedTrial,
    agent: &str,
    traj: &Trajectory,
    grade: &Grade,
) -> ResultRecord {
    ResultRecord {
        schema_version: RUN_SCHEMA_VERSION,
        trial_id: t.trial_id.clone(),
        case_id: task.id().into(),
        system: "build".into(),
        category: task.category,
        tier: task.spec.tier,
        symptom_names_function: false,
        track: t.track,
        condition: t.condition.clone(),
        attempt: t.attempt,
        agent: agent.to_string(),
        exit_status: traj.exit_status,
        outcome: grade.outcome,
        score: grade.score,
        build: grade.build.clone(),
        block_coverage: None,
        block_precision: None,
        file_coverage: None,
        tokens: traj.totals.tokens,
        cost_usd: traj.totals.cost_usd,
        steps: traj.totals.steps,
        steps_to_first_edit: traj.totals.steps_to_first_edit,
        wall_secs: traj.totals.wall_secs,
        working_secs: traj.totals.working_secs,
        actions: traj.totals.actions.clone(),
        finished_at: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
    }
}
