//! Executing a run: prepare the cases, run each pending trial (agent, then grader), append its
//! record. Re-running the same command resumes: finished trials are kept, interrupted ones are
//! redone from scratch, a changed configuration is refused unless forced.

use crate::agents::{AgentSpec, agents_on_host};
use crate::build::{self, BuildState};
use crate::bundles::{self, RunBundles};
use crate::lock::{check_lock, lock_of};
use crate::plan::{AgentPlan, PlannedTrial, plan};
use crate::records::record;
use anyhow::{Context, Result, bail};
use faultline_agent::baselines;
use faultline_agent::record::Recorder;
use faultline_agent::{BuiltinAgent, EnvError, ExternalAgent, TrialEnv, TrialResult};
use faultline_corpus::checks::symptom_names;
use faultline_corpus::curated::gold_patch;
use faultline_corpus::gold::TreeDiff;
use faultline_corpus::{Case, DataDir, PrepareOptions, PreparedCase, prepare};
use faultline_grade::{GradeContext, grade_submission};
use faultline_model::ModelClient;
use faultline_sandbox::Toolchain;
use faultline_schema::results::{ResultsLog, latest};
use faultline_schema::task::TASK_SCHEMA_VERSION;
use faultline_schema::trajectory::Trajectory;
use faultline_schema::{
    Condition, ExitStatus, Outcome, ResultRecord, RunDir, Submission, Task, Track, TrialDir,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::{Mutex, Semaphore};

pub use crate::config::RunConfig;
pub use crate::progress::{Progress, ProgressEvent, RunSummary};

struct Shared {
    cfg: RunConfig,
    data: DataDir,
    toolchain: Toolchain,
    prepared: BTreeMap<String, PreparedCase>,
    gold: BTreeMap<String, TreeDiff>,
    names_function: BTreeMap<String, bool>,
    bundles: RunBundles,
    build: BuildState,
    builtins: BTreeMap<String, Arc<BuiltinAgent>>,
    log: Mutex<ResultsLog>,
    /// Why the run stops before its remaining trials: a failure every later trial would meet
    /// the same way (a model server that refuses tool definitions).
    stopped: std::sync::Mutex<Option<String>>,
}

impl Shared {
    fn stopped(&self) -> Option<String> {
        self.stopped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn stop(&self, why: &str) {
        self.stopped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert_with(|| why.to_string());
    }

    /// Keeps what the agent did before the model API failed for good (it is not graded) and
    /// stops the run when no model will accept tools; returns the reason the grade records.
    fn record_model_outage(
        &self,
        dir: &TrialDir,
        trajectory: &Trajectory,
        why: &str,
    ) -> Result<String> {
        dir.write_trajectory(trajectory)?;
        if why.contains(faultline_model::TOOLS_REFUSED) {
            self.stop(why);
        }
        Ok(format!("the model API failed: {why}"))
    }
}

/// Runs (or resumes) a run.
pub async fn run(
    cfg: RunConfig,
    data: DataDir,
    toolchain: Toolchain,
    progress: Arc<dyn Progress>,
) -> Result<RunSummary> {
    let run_dir = RunDir::new(&cfg.out);
    let _writer = run_dir.hold_writer()?;
    cfg.providers.check(&cfg.conditions)?;
    let model_permits = Arc::new(Semaphore::new(cfg.model_workers.max(1)));
    let mut builtins = BTreeMap::new();
    let mut fingerprints = BTreeMap::new();
    for a in &cfg.agents {
        if let AgentSpec::Builtin {
            model,
            templates,
            tool_mode,
            max_output_tokens,
            temperature,
            ..
        } = a
        {
            cfg.pricing
                .check_cost_limit(&model.model, cfg.limits.cost_usd)?;
            fingerprints.insert(a.name(), templates.fingerprint());
            let agent = BuiltinAgent {
                client: ModelClient::new((**model).clone())?,
                pricing: Some(cfg.pricing.clone()),
                templates: templates.clone(),
                tool_mode: *tool_mode,
                max_output_tokens: *max_output_tokens,
                temperature: *temperature,
                model_permits: Some(model_permits.clone()),
            };
            builtins.insert(a.name(), Arc::new(agent));
        }
    }
    for a in &cfg.agents {
        if let AgentSpec::External(ExternalAgent {
            model: Some(model), ..
        }) = a
        {
            cfg.pricing
                .check_cost_limit(&model.client.config().model, cfg.limits.cost_usd)?;
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    for a in &cfg.agents {
        if !seen.insert(a.name()) {
            bail!(
                "two agents are named `{}`; give them distinct names",
                a.name()
            );
        }
    }
    check_lock(&run_dir, &lock_of(&cfg, &fingerprints)?, cfg.force)?;

    let log = run_dir.results()?;
    let done = latest(log.read()?);
    let agent_plans: Vec<AgentPlan> = cfg.agents.iter().map(AgentSpec::plan).collect();
    let case_list: Vec<(String, faultline_schema::OracleKind)> = cfg
        .cases
        .iter()
        .map(|c| (c.id().to_string(), c.manifest.oracle.kind))
        .collect();
    // Each track runs the conditions of its kind: aids on the build track, the others on bugs.
    let bug_tracks: Vec<Track> = cfg
        .tracks
        .iter()
        .copied()
        .filter(|t| *t != Track::Build)
        .collect();
    let bug_conditions: Vec<Condition> = cfg
        .conditions
        .iter()
        .filter(|c| c.aid().is_none())
        .cloned()
        .collect();
    let aids: Vec<Condition> = cfg
        .conditions
        .iter()
        .filter(|c| c.aid().is_some())
        .cloned()
        .collect();
    // A track none of whose conditions was given is skipped, with a warning when other tracks
    // run and an error when it is the only one.
    let run_build = cfg.tracks.contains(&Track::Build) && !aids.is_empty();
    let run_bugs = !bug_tracks.is_empty() && !bug_conditions.is_empty();
    if !run_build && !run_bugs {
        bail!(
            "no track has a condition of its kind: the build track runs under aids (task, \
             unit-tests, simulator, simulator-checker, tla), the others under symptom, curated \
             and the context providers"
        );
    }
    if cfg.tracks.contains(&Track::Build) && !run_build {
        tracing::warn!(
            "the build track is skipped: no aid (task, unit-tests, ...) among the conditions"
        );
    }
    if !bug_tracks.is_empty() && !run_bugs {
        tracing::warn!(
            "the tracks on bugs are skipped: every condition is an aid of the build track"
        );
    }
    let bug_tracks: Vec<Track> = if run_bugs { bug_tracks } else { Vec::new() };
    let mut trials = plan(
        &agent_plans,
        &case_list,
        &bug_tracks,
        &bug_conditions,
        cfg.attempts,
        cfg.baseline_attempts,
        cfg.seed,
        cfg.shard,
    );
    if run_build {
        let tasks: Vec<(String, faultline_schema::OracleKind)> = cfg
            .build_tasks
            .iter()
            .map(|t| (t.id().to_string(), faultline_schema::OracleKind::External))
            .collect();
        trials.extend(plan(
            &agent_plans,
            &tasks,
            &[Track::Build],
            &aids,
            cfg.attempts,
            cfg.baseline_attempts,
            cfg.seed,
            cfg.shard,
        ));
    }
    let is_done = |t: &PlannedTrial| {
        done.get(&t.trial_id)
            .is_some_and(|r| !(cfg.retry_infra && r.outcome == Outcome::InfraError))
    };
    let pending: Vec<PlannedTrial> = trials.iter().filter(|t| !is_done(t)).cloned().collect();
    progress.event(ProgressEvent::Planned {
        total: trials.len(),
        done: trials.len() - pending.len(),
        pending: pending.len(),
    });

    let mut prepared = BTreeMap::new();
    let mut gold = BTreeMap::new();
    let mut names_function = BTreeMap::new();
    let needed: std::collections::BTreeSet<usize> = pending
        .iter()
        .filter(|t| t.track != Track::Build)
        .map(|t| t.case)
        .collect();
    let cases_ready = needed.len();
    let preparing = std::time::Instant::now();
    for ci in needed {
        let case = &cfg.cases[ci];
        progress.event(ProgressEvent::Preparing(case.id().into()));
        let p = prepare(case, &data, &toolchain, &PrepareOptions::default())
            .await
            .with_context(|| format!("preparing {}", case.id()))?;
        names_function.insert(
            case.id().to_string(),
            !symptom_names(case, &p.sources).is_empty(),
        );
        // The gold baseline submits the minimal fix, not the whole release.
        let fix = gold_patch(case, &p.sources).with_context(|| case.id().to_string())?;
        gold.insert(case.id().to_string(), fix.diff);
        prepared.insert(case.id().to_string(), p);
    }
    let ready: Vec<(&Case, &PreparedCase)> = cfg
        .cases
        .iter()
        .filter_map(|c| Some((c, prepared.get(c.id())?)))
        .collect();
    let bundles = bundles::resolve(
        &bundles::Resolver {
            providers: &cfg.providers,
            corpus: &cfg.corpus,
            data: &data,
            toolchain: &toolchain,
            run: &run_dir,
        },
        &ready,
        &bug_conditions,
    )
    .await?;
    let build_needed: Vec<(usize, faultline_schema::Aid)> = pending
        .iter()
        .filter(|t| t.track == Track::Build)
        .filter_map(|t| Some((t.case, t.condition.aid()?)))
        .collect();
    let build_tasks: std::collections::BTreeSet<usize> =
        build_needed.iter().map(|(task, _)| *task).collect();
    for task in build_tasks {
        progress.event(ProgressEvent::Preparing(cfg.build_tasks[task].id().into()));
    }
    let build = {
        let (tasks, aids, data, schedules) = (
            cfg.build_tasks.clone(),
            cfg.build_aids.clone(),
            data.clone(),
            cfg.build_schedules,
        );
        tokio::task::spawn_blocking(move || {
            BuildState::prepare(tasks, &build_needed, aids, &data, schedules)
        })
        .await??
    };
    let prepare_secs = preparing.elapsed().as_secs_f64();
    let before_bundles = pending.len();
    let pending: Vec<PlannedTrial> = pending
        .into_iter()
        .filter(|t| t.track == Track::Build || bundles.allows(cfg.cases[t.case].id(), &t.condition))
        .collect();
    let refused = before_bundles - pending.len();
    for c in &cfg.cases {
        if !names_function.contains_key(c.id()) {
            names_function.insert(c.id().to_string(), false);
        }
    }

    let shared = Arc::new(Shared {
        cfg: cfg.clone(),
        data,
        toolchain,
        prepared,
        gold,
        names_function,
        bundles,
        build,
        builtins,
        log: Mutex::new(log),
        stopped: std::sync::Mutex::new(None),
    });
    let workers = Arc::new(Semaphore::new(cfg.workers.max(1)));
    let mut tasks = tokio::task::JoinSet::new();
    for trial in pending.clone() {
        let shared = shared.clone();
        let workers = workers.clone();
        let progress = progress.clone();
        tasks.spawn(async move {
            let _slot = workers.acquire().await.expect("never closed");
            if shared.stopped().is_some() {
                return anyhow::Ok(());
            }
            progress.event(ProgressEvent::Started(trial.trial_id.clone()));
            let record = run_trial(&shared, &trial).await?;
            shared.log.lock().await.append(&record)?;
            progress.event(ProgressEvent::Finished(Box::new(record)));
            anyhow::Ok(())
        });
    }
    let mut first_error = None;
    while let Some(joined) = tasks.join_next().await {
        if let Err(e) = joined.map_err(anyhow::Error::from).and_then(|r| r) {
            first_error.get_or_insert(e);
        }
    }
    if let Some(e) = first_error {
        return Err(e.context("a trial could not be recorded"));
    }
    if let Some(why) = shared.stopped() {
        bail!(
            "the run stopped before its remaining trials, which would all fail the same way: {why}"
        );
    }
    let all = latest(shared.log.lock().await.read()?);
    let mut outcomes = BTreeMap::new();
    for t in &trials {
        if let Some(r) = all.get(&t.trial_id) {
            *outcomes.entry(r.outcome.as_str().to_string()).or_insert(0) += 1;
        }
    }
    Ok(RunSummary {
        total: trials.len(),
        resumed: trials.len() - pending.len() - refused,
        ran: pending.len(),
        refused,
        outcomes,
        cases_ready,
        prepare_secs,
    })
}

async fn run_trial(s: &Arc<Shared>, t: &PlannedTrial) -> Result<ResultRecord> {
    if t.track == Track::Build {
        return run_build_trial(s, t).await;
    }
    let cfg = &s.cfg;
    let case = &cfg.cases[t.case];
    let agent = &cfg.agents[t.agent];
    let dir = RunDir::new(&cfg.out).trial(&t.trial_id);
    dir.reset()?;
    let bundle = s.bundles.files(case.id(), &t.condition);
    let task = Task {
        schema_version: TASK_SCHEMA_VERSION,
        trial_id: t.trial_id.clone(),
        case_id: case.id().into(),
        track: t.track,
        condition: t.condition.clone(),
        attempt: t.attempt,
        seed: t.seed,
        crate_name: case.manifest.source.crate_name().into(),
        bundle_files: bundle.iter().map(|b| b.name.clone()).collect(),
        limits: cfg.limits.clone(),
    };
    dir.write_task(&task)?;
    let prepared = &s.prepared[case.id()];
    let traj_path = dir.trajectory_path();
    let outcome = match agent {
        AgentSpec::Baseline(b) => {
            let submission = baselines::submit(
                *b,
                t.track,
                case,
                &s.gold[case.id()],
                &baselines::report_text(&case.symptom, &bundle),
                &prepared.stamp.agent.workspace,
            )?;
            let mut rec = Recorder::new(&task, agent.info(None), Some(traj_path.clone()));
            rec.finish(ExitStatus::Submitted, None, None)?;
            Ok(TrialResult {
                submission,
                trajectory: rec.trajectory,
                infra_failure: None,
            })
        }
        // An error of an agent's run, or of the harness making its environment, is the
        // harness's own failure (a trajectory or a copy it could not write, say), not the trial's
        // outcome: it ends the run, and a resumed run redoes the trial.
        AgentSpec::Builtin { .. } | AgentSpec::External(_) => {
            let env = TrialEnv::create(
                case,
                prepared,
                task.clone(),
                bundle.clone(),
                &s.data,
                &s.toolchain,
            );
            match (env, agent) {
                (Ok(env), AgentSpec::External(ext)) => {
                    Ok(ext.run(&env, &dir, Some(traj_path.clone())).await?)
                }
                (Ok(env), _) => {
                    let builtin = &s.builtins[&agent.name()];
                    Ok(builtin.run(&env, Some(traj_path.clone())).await?)
                }
                (Err(EnvError::Unavailable(e)), _) => Err(e),
                (Err(EnvError::Harness(e)), _) => return Err(e),
            }
        }
    };
    let (trajectory, grade) = match outcome {
        // The model's API failed for good: whatever the agent did so far is not graded, and
        // the trial is recorded unscored for `--retry-infra` to redo.
        Ok(TrialResult {
            trajectory,
            infra_failure: Some(why),
            ..
        }) => {
            let why = s.record_model_outage(&dir, &trajectory, &why)?;
            let grade = faultline_grade::grader::infra_error(case, &t.trial_id, t.track, &why)?;
            (trajectory, grade)
        }
        Ok(TrialResult {
            submission,
            trajectory,
            infra_failure: None,
        }) => {
            dir.write_trajectory(&trajectory)?;
            dir.write_submission(&submission)?;
            let ctx = GradeContext {
                case,
                prepared,
                data: &s.data,
                toolchain: &s.toolchain,
            };
            let grade =
                grade_submission(&ctx, &t.trial_id, t.track, &submission, &cfg.grading, true)
                    .await?;
            (trajectory, grade)
        }
        Err(e) => {
            // The agent's environment is unavailable (its template is damaged, or no sandbox can
            // be set up): an infrastructure error, recorded (never as a failure of the agent) so
            // `--retry-infra` can redo it.
            let mut rec = Recorder::new(&task, agent.info(None), Some(traj_path.clone()));
            rec.finish(ExitStatus::SandboxError, None, Some(format!("{e:#}")))?;
            let grade = faultline_grade::grader::infra_error(
                case,
                &t.trial_id,
                t.track,
                &format!("{e:#}"),
            )?;
            (rec.trajectory, grade)
        }
    };
    let mut grade = grade;
    if agent.on_host() {
        grade.protections.push(agents_on_host());
    }
    dir.write_grade(&grade)?;
    Ok(record(
        case,
        t,
        &agent.name(),
        &trajectory,
        &grade,
        s.names_function[case.id()],
    ))
}

/// One build trial: the agent (or baseline) submits `src/`, graded on the task's hidden
/// schedules off the runtime's threads.
async fn run_build_trial(s: &Arc<Shared>, t: &PlannedTrial) -> Result<ResultRecord> {
    let cfg = &s.cfg;
    let build_task = &s.build.tasks[t.case];
    let agent = &cfg.agents[t.agent];
    let dir = RunDir::new(&cfg.out).trial(&t.trial_id);
    dir.reset()?;
    let aid = t
        .condition
        .aid()
        .context("a build trial's condition is an aid")?;
    let task = Task {
        schema_version: TASK_SCHEMA_VERSION,
        trial_id: t.trial_id.clone(),
        case_id: build_task.id().into(),
        track: t.track,
        condition: t.condition.clone(),
        attempt: t.attempt,
        seed: t.seed,
        crate_name: build_task.spec.package.clone(),
        bundle_files: build::bundle_names(&s.build, aid)?,
        limits: cfg.limits.clone(),
    };
    dir.write_task(&task)?;
    let traj_path = dir.trajectory_path();
    let outcome = match agent {
        AgentSpec::Baseline(b) => {
            let patch = match b {
                faultline_agent::Baseline::Gold => build_task.reference_patch()?,
                _ => String::new(),
            };
            let mut rec = Recorder::new(&task, agent.info(None), Some(traj_path.clone()));
            rec.finish(ExitStatus::Submitted, None, None)?;
            Ok(TrialResult {
                submission: Submission::Patch(patch),
                trajectory: rec.trajectory,
                infra_failure: None,
            })
        }
        AgentSpec::Builtin { .. } | AgentSpec::External(_) => {
            match build::trial_env(&s.build, t, task.clone(), &s.data, &s.toolchain)? {
                Ok(env) => {
                    let external = match agent {
                        AgentSpec::External(e) => Some(e),
                        _ => None,
                    };
                    let builtin = s.builtins.get(&agent.name()).map(|a| a.as_ref());
                    Ok(build::run_agent(env, builtin, external, &dir, traj_path.clone()).await?)
                }
                Err(EnvError::Unavailable(e)) => Err(e),
                Err(EnvError::Harness(e)) => return Err(e),
            }
        }
    };
    let (trajectory, grade) = match outcome {
        Ok(TrialResult {
            trajectory,
            infra_failure: Some(why),
            ..
        }) => {
            let why = s.record_model_outage(&dir, &trajectory, &why)?;
            (trajectory, build::infra_grade(&s.build, t, &why)?)
        }
        Ok(TrialResult {
            submission,
            trajectory,
            infra_failure: None,
        }) => {
            dir.write_trajectory(&trajectory)?;
            dir.write_submission(&submission)?;
            let (shared, trial) = (s.clone(), t.clone());
            let (grade, report) = tokio::task::spawn_blocking(move || {
                build::grade(&shared.build, &trial, &submission, &shared.data)
            })
            .await??;
            if let Some(report) = report {
                faultline_build::runner::write_json(
                    &report,
                    &dir.path().join(build::BUILD_REPORT_FILE),
                )?;
            }
            (trajectory, grade)
        }
        Err(e) => {
            let mut rec = Recorder::new(&task, agent.info(None), Some(traj_path.clone()));
            rec.finish(ExitStatus::SandboxError, None, Some(format!("{e:#}")))?;
            (
                rec.trajectory,
                build::infra_grade(&s.build, t, &format!("{e:#}"))?,
            )
        }
    };
    let mut grade = grade;
    if agent.on_host() {
        grade.protections.push(agents_on_host());
    }
    dir.write_grade(&grade)?;
    Ok(build::record(
        build_task,
        t,
        &agent.name(),
        &trajectory,
        &grade,
    ))
}
