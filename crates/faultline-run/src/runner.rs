//! Executing a run: prepare the cases, run each pending trial (agent, then grader), append its
//! record. Re-running the same command resumes: finished trials are kept, interrupted ones are
//! redone from scratch, a changed configuration is refused unless forced.

use crate::agents::{AgentSpec, agents_on_host};
use crate::bundles::{self, RunBundles};
use crate::plan::{AgentPlan, PlannedTrial, Shard, plan};
use crate::records::{locked_cases, record};
use anyhow::{Context, Result, bail};
use faultline_agent::baselines;
use faultline_agent::record::Recorder;
use faultline_agent::{BuiltinAgent, EnvError, ExternalAgent, TrialEnv, TrialResult};
use faultline_context::Providers;
use faultline_corpus::checks::symptom_names;
use faultline_corpus::curated::gold_patch;
use faultline_corpus::gold::TreeDiff;
use faultline_corpus::{Case, DataDir, PrepareOptions, PreparedCase, prepare};
use faultline_grade::{GradeContext, grade_submission};
use faultline_model::{ModelClient, PricingTable};
use faultline_sandbox::Toolchain;
use faultline_schema::results::{ResultsLog, latest};
use faultline_schema::run::RUN_SCHEMA_VERSION;
use faultline_schema::task::TASK_SCHEMA_VERSION;
use faultline_schema::{
    Condition, ExitStatus, GradingSettings, Limits, Outcome, ResultRecord, RunDir, RunLock, Task,
    Track,
};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::{Mutex, Semaphore};

/// Everything a run is configured with.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The run directory.
    pub out: PathBuf,
    /// The cases.
    pub cases: Vec<Case>,
    /// The agent configurations.
    pub agents: Vec<AgentSpec>,
    /// Tracks.
    pub tracks: Vec<Track>,
    /// Conditions.
    pub conditions: Vec<Condition>,
    /// The providers of conditions beyond the built-in ones.
    pub providers: Providers,
    /// Every case of the corpus, for the `irrelevant` control (which shows another case's
    /// bundle).
    pub corpus: Vec<Case>,
    /// Attempts per case, track and condition for model and external agents.
    pub attempts: u32,
    /// Attempts for baselines.
    pub baseline_attempts: u32,
    /// Budgets of every trial.
    pub limits: Limits,
    /// The run's seed.
    pub seed: u64,
    /// Trials (sandboxes) at once.
    pub workers: usize,
    /// Model calls at once, over all trials.
    pub model_workers: usize,
    /// This directory's shard of the run.
    pub shard: Option<Shard>,
    /// Accept a lock that differs from this configuration.
    pub force: bool,
    /// Redo trials whose grade was an infrastructure error.
    pub retry_infra: bool,
    /// Prices for built-in agents.
    pub pricing: PricingTable,
    /// Grading settings.
    pub grading: GradingSettings,
}

/// What a run reports while it works.
#[derive(Debug, Clone)]
pub enum ProgressEvent {
    /// Preparing a case's workspace.
    Preparing(String),
    /// The plan: trials in this shard, already finished, to do now.
    Planned {
        /// Trials in this shard.
        total: usize,
        /// Already finished.
        done: usize,
        /// To run now.
        pending: usize,
    },
    /// A trial started.
    Started(String),
    /// A trial finished and was recorded.
    Finished(Box<ResultRecord>),
}

/// Receives progress events (a terminal display or log lines).
pub trait Progress: Send + Sync {
    /// Called for every event, from any task.
    fn event(&self, e: ProgressEvent);
}

/// What a finished run did.
#[derive(Debug, Clone, Default)]
pub struct RunSummary {
    /// Trials in this shard.
    pub total: usize,
    /// Trials finished before this invocation.
    pub resumed: usize,
    /// Trials run now.
    pub ran: usize,
    /// Trials not run because their condition's bundle was refused for their case.
    pub refused: usize,
    /// Outcomes of all recorded trials.
    pub outcomes: BTreeMap<String, usize>,
    /// Cases this invocation prepared, or checked where they were prepared before.
    pub cases_ready: usize,
    /// Seconds spent preparing (or checking prepared) cases before the first trial.
    pub prepare_secs: f64,
}

fn lock_of(cfg: &RunConfig, templates: &BTreeMap<String, String>) -> Result<RunLock> {
    Ok(RunLock {
        schema_version: RUN_SCHEMA_VERSION,
        faultline_version: env!("CARGO_PKG_VERSION").into(),
        agents: cfg
            .agents
            .iter()
            .map(|a| a.info(templates.get(&a.name()).cloned()))
            .collect(),
        limits: cfg.limits.clone(),
        seed: cfg.seed,
        attempts: cfg.attempts,
        baseline_attempts: cfg.baseline_attempts,
        tracks: cfg.tracks.clone(),
        conditions: cfg.conditions.clone(),
        providers: cfg
            .conditions
            .iter()
            .filter(|c| c.has_bundle())
            .map(|c| Ok((c.to_string(), cfg.providers.version(c)?)))
            .collect::<Result<_>>()?,
        cases: locked_cases(&cfg.cases)?,
        pricing: Some(cfg.pricing.table_version.clone()),
        grading: cfg.grading,
        shard: cfg.shard.map(|s| s.to_string()),
        protections: {
            let mut records = faultline_grade::protections::in_force();
            if cfg.agents.iter().any(AgentSpec::on_host) {
                records.push(agents_on_host());
            }
            records
        },
    })
}

/// Writes the lock, or checks an existing one; a difference is refused unless `force`.
fn check_lock(run: &RunDir, lock: &RunLock, force: bool) -> Result<()> {
    let path = run.lock_path();
    // A lock that cannot be read is replaced, as one that is missing.
    if let Ok(Some(existing)) = run.read_lock() {
        if &existing != lock {
            let a = serde_json::to_value(&existing)?;
            let b = serde_json::to_value(lock)?;
            let changed: Vec<String> = b
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(k, v)| a.get(k.as_str()) != Some(*v))
                .map(|(k, _)| k.clone())
                .collect();
            let changed_cases: Vec<&str> = lock
                .cases
                .iter()
                .filter(|c| {
                    existing
                        .cases
                        .iter()
                        .any(|e| e.id == c.id && e.sha256 != c.sha256)
                })
                .map(|c| c.id.as_str())
                .collect();
            let cases_note = if changed_cases.is_empty() {
                String::new()
            } else {
                format!(
                    "; the files of {} hash differently than when the run started (a changed \
                     symptom, context bundle, oracle, labels or case.toml, or a run made before \
                     the hash covered them all), so trials before and after would not compare",
                    changed_cases.join(", ")
                )
            };
            if !force {
                bail!(
                    "{} was made with a different configuration (changed: {}){cases_note}; \
                     use another --out directory, or --force to continue with the new one",
                    path.display(),
                    changed.join(", ")
                );
            }
            tracing::warn!(
                "continuing {} under a changed configuration: {}{cases_note}",
                run.root().display(),
                changed.join(", ")
            );
        } else {
            return Ok(());
        }
    }
    run.write_lock(lock)?;
    Ok(())
}

struct Shared {
    cfg: RunConfig,
    data: DataDir,
    toolchain: Toolchain,
    prepared: BTreeMap<String, PreparedCase>,
    gold: BTreeMap<String, TreeDiff>,
    names_function: BTreeMap<String, bool>,
    bundles: RunBundles,
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
    let trials = plan(
        &agent_plans,
        &case_list,
        &cfg.tracks,
        &cfg.conditions,
        cfg.attempts,
        cfg.baseline_attempts,
        cfg.seed,
        cfg.shard,
    );
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
    let needed: std::collections::BTreeSet<usize> = pending.iter().map(|t| t.case).collect();
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
        &cfg.conditions,
    )
    .await?;
    let prepare_secs = preparing.elapsed().as_secs_f64();
    let before_bundles = pending.len();
    let pending: Vec<PlannedTrial> = pending
        .into_iter()
        .filter(|t| bundles.allows(cfg.cases[t.case].id(), &t.condition))
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

async fn run_trial(s: &Shared, t: &PlannedTrial) -> Result<ResultRecord> {
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
            dir.write_trajectory(&trajectory)?;
            if why.contains(faultline_model::TOOLS_REFUSED) {
                s.stop(&why);
            }
            let grade = faultline_grade::grader::infra_error(
                case,
                &t.trial_id,
                t.track,
                &format!("the model API failed: {why}"),
            )?;
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
