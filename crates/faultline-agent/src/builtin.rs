//! The built-in agent: one model, one `bash` tool, one command per step, until it submits or a
//! limit fires. [`BuiltinAgent::run`] is the whole loop; each turn of it is `step`, which
//! either goes on or ends the trial with a [`Stop`].

use crate::classify::classify;
use crate::conversation::Conversation;
use crate::env::TrialEnv;
use crate::parse::{ParsedAction, parse_action};
use crate::prompts::{SUBMIT_SENTINEL, Templates};
use crate::record::Recorder;
use crate::stop::{Limit, Stop};
use anyhow::Result;
use faultline_model::{
    EncodeCache, ErrorKind, ModelClient, ModelError, ModelResponse, PricingTable, RetryStats,
};
use faultline_sandbox::{ExecRequest, LimitHit, SandboxError};
use faultline_schema::trajectory::{Action, AgentInfo, AgentKind, ModelCall, ResourceLimit, Step};
use faultline_schema::{ActionKind, Limits, Submission, Track};
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Consecutive unparseable replies that end a trial.
pub const MAX_FORMAT_ERRORS: u32 = 3;

/// Output kept of the submission command: enough for any diagnosis or test file.
const SUBMISSION_CAP: usize = 1_000_000;

/// How the built-in agent talks to its model.
#[derive(Debug)]
pub struct BuiltinAgent {
    /// The model client.
    pub client: ModelClient,
    /// Prices; `None` records every cost as unknown.
    pub pricing: Option<PricingTable>,
    /// The prompt templates.
    pub templates: Templates,
    /// Native tool calls (true) or one fenced block per reply (false).
    pub tool_mode: bool,
    /// Output tokens per reply.
    pub max_output_tokens: u32,
    /// Sampling temperature; the provider's default when absent.
    pub temperature: Option<f64>,
    /// Shared across concurrent trials to bound simultaneous model calls; `None` means no bound.
    pub model_permits: Option<std::sync::Arc<tokio::sync::Semaphore>>,
}

/// How a trial of the built-in agent ended.
#[derive(Debug)]
pub struct TrialResult {
    /// What the agent submitted.
    pub submission: Submission,
    /// The complete trajectory (also written to disk when the trial ends).
    pub trajectory: faultline_schema::Trajectory,
    /// Why the trial ended for a reason that is not the agent's (its model's API failed for
    /// good): such a trial is recorded unscored, to be redone.
    pub infra_failure: Option<String>,
}

impl BuiltinAgent {
    /// Identifies this configuration in trajectories and results.
    pub fn info(&self) -> AgentInfo {
        let cfg = self.client.config();
        let mut settings = std::collections::BTreeMap::new();
        settings.insert("prompts".into(), self.templates.fingerprint().into());
        settings.insert("tool_mode".into(), self.tool_mode.into());
        settings.insert("max_output_tokens".into(), self.max_output_tokens.into());
        settings.insert("temperature".into(), serde_json::json!(self.temperature));
        settings.insert("base_url".into(), cfg.effective_base_url().into());
        AgentInfo {
            kind: AgentKind::Builtin,
            name: cfg.model.clone(),
            model: Some(cfg.model.clone()),
            protocol: Some(format!("{:?}", cfg.protocol)),
            settings,
        }
    }

    /// Runs one trial to its end; its steps are logged beside `trajectory_path` as they come and
    /// the trajectory is written there at the end. Errors are only for the harness's own
    /// failures (e.g. a full disk): whatever the model, the agent or the sandbox do ends the
    /// trial with an exit status instead.
    pub async fn run(
        &self,
        env: &TrialEnv,
        trajectory_path: Option<PathBuf>,
    ) -> Result<TrialResult> {
        let mut trial = self.start(env, trajectory_path)?;
        loop {
            match self.step(&mut trial).await? {
                ControlFlow::Continue(()) => {}
                ControlFlow::Break(stop) => return trial.finish(stop),
            }
        }
    }

    /// Opens a trial: its record, with the workspace's diff at the start as the baseline that
    /// edits are detected against, and the conversation, with the rendered prompts.
    fn start<'e>(&self, env: &'e TrialEnv, trajectory_path: Option<PathBuf>) -> Result<Trial<'e>> {
        let mut rec =
            Recorder::new(&env.task, self.info(), trajectory_path).starting_from(env.diff()?.1);
        let model = &self.client.config().model;
        if self.pricing.as_ref().and_then(|p| p.price(model)).is_none() {
            rec = rec.unpriced();
        }
        let prompts =
            self.templates
                .render(&env.task, &env.symptom, &env.bundle, self.tool_mode)?;
        Ok(Trial {
            env,
            rec,
            conversation: Conversation::new(prompts, self.tool_mode),
            encoded: EncodeCache::new(),
            format_errors: 0,
        })
    }

    /// One step: check the limits, ask the model, run the command of its reply (or tell it why
    /// there is none), and record the step.
    async fn step(&self, trial: &mut Trial<'_>) -> Result<ControlFlow<Stop>> {
        if let Some(limit) = Limit::first_reached(trial.limits(), &trial.rec) {
            return Ok(ControlFlow::Break(Stop::Limit(limit)));
        }
        let started = trial.rec.elapsed();
        let reply = match self.ask(trial).await {
            Ok(reply) => reply,
            Err(stop) => return Ok(ControlFlow::Break(stop)),
        };
        trial.conversation.push_reply(&reply);
        let acted = match parse_action(&reply) {
            Ok(action) => match trial.execute(&reply, &action).await {
                Ok(ran) => Ok(ran),
                Err(e) => return Ok(ControlFlow::Break(Stop::SandboxError(e))),
            },
            Err(why) => {
                trial.conversation.reject(&reply, &why);
                Err(why)
            }
        };
        trial.record(started, self.model_call(&reply), &reply, acted)
    }

    /// Asks the model for its next turn, for no longer than the trial has left. A call that
    /// fails for good ends the trial, its billed cost (if any) counted.
    async fn ask(&self, trial: &mut Trial<'_>) -> Result<ModelResponse, Stop> {
        let request = trial
            .conversation
            .lend_request(self.max_output_tokens, self.temperature);
        let failed_attempts = AtomicU32::new(0);
        let remaining = trial.remaining();
        let encoded = &mut trial.encoded;
        let call = async {
            let _permit = match &self.model_permits {
                Some(p) => Some(p.acquire().await.expect("the semaphore is never closed")),
                None => None,
            };
            self.client
                .complete_cached(&request, encoded, &failed_attempts)
                .await
        };
        let started = std::time::Instant::now();
        let outcome = tokio::time::timeout(remaining, call).await;
        trial.conversation.give_back(request);
        let failed = failed_attempts.load(Ordering::Relaxed);
        match outcome {
            // The trial's time ran out inside a call the provider kept failing (a server that
            // stalls or errs while the client retries): its outage, not the agent's time.
            Err(_) if failed > 0 => {
                trial.rec.add_lost_time(started.elapsed().as_secs_f64());
                Err(Stop::ModelError(ModelError::Transport {
                    kind: ErrorKind::Timeout,
                    message: format!(
                        "the trial's time ran out while the call was being retried after \
                         {failed} failed attempt(s)"
                    ),
                    retry: RetryStats {
                        retries: failed,
                        ..RetryStats::default()
                    },
                }))
            }
            Err(_) => Err(Stop::Limit(Limit::WallTime(trial.limits().wall_secs))),
            Ok(Err(e)) => {
                if let Some(usage) = e.billed_usage() {
                    trial.rec.add_unstepped_cost(self.cost(usage));
                }
                trial.rec.add_lost_time(started.elapsed().as_secs_f64());
                Err(Stop::ModelError(e))
            }
            Ok(Ok(reply)) => Ok(reply),
        }
    }

    fn cost(&self, usage: &faultline_model::Usage) -> Option<f64> {
        self.pricing
            .as_ref()
            .and_then(|p| p.cost(&self.client.config().model, usage))
    }

    fn model_call(&self, r: &ModelResponse) -> ModelCall {
        faultline_gateway::model_call(r, r.usage.as_ref().and_then(|u| self.cost(u)))
    }
}

/// One trial of the built-in agent in progress.
struct Trial<'e> {
    env: &'e TrialEnv,
    rec: Recorder,
    conversation: Conversation,
    /// The conversation as encoded for the model so far.
    encoded: EncodeCache,
    /// Consecutive replies without a command.
    format_errors: u32,
}

/// A command that ran, and what it means for the trial.
struct Ran {
    action: Action,
    /// What was submitted (the output after the sentinel line), if the command submitted.
    submitted: Option<String>,
    /// The sandbox's resource limit it ran into, if any.
    limit: Option<LimitHit>,
}

impl Trial<'_> {
    fn limits(&self) -> &Limits {
        &self.env.task.limits
    }

    /// Wall-clock time left before the trial's limit.
    fn remaining(&self) -> Duration {
        Duration::from_secs_f64((self.limits().wall_secs as f64 - self.rec.elapsed()).max(0.0))
    }

    /// How long the next command may run: its own limit, cut to the trial's remaining time but
    /// never below a second (a command at the very end still gets to say something).
    fn command_timeout(&self) -> Duration {
        Duration::from_secs(self.limits().command_timeout_secs)
            .min(self.remaining().max(Duration::from_secs(1)))
    }

    /// Runs the reply's command in the sandbox and answers the reply with what it printed.
    async fn execute(
        &mut self,
        reply: &ModelResponse,
        parsed: &ParsedAction,
    ) -> Result<Ran, SandboxError> {
        let kind = classify(&parsed.command);
        let timeout = self.command_timeout();
        let cap = if kind == ActionKind::Submit {
            SUBMISSION_CAP
        } else {
            self.limits().output_cap_chars
        };
        let req = ExecRequest::bash(format!("exec 2>&1\n{}", parsed.command), timeout).cap(cap);
        let out = self.env.exec(&req).await?;
        let printed = &out.stdout.text;
        let submitted = (out.exit_code == Some(0)
            && printed.lines().next().map(str::trim) == Some(SUBMIT_SENTINEL))
        .then(|| {
            printed
                .split_once('\n')
                .map(|(_, rest)| rest.to_string())
                .unwrap_or_default()
        });
        let limit = out.limit_hit();
        let shown = match submitted {
            Some(_) => printed.clone(),
            None => observation(out.exit_code, out.timed_out, limit, printed, timeout),
        };
        self.conversation.answer(reply, parsed, &shown);
        let action = Action {
            command: parsed.command.clone(),
            kind,
            source: parsed.source,
            exit_code: out.exit_code,
            timed_out: out.timed_out,
            output: shown,
            elided_chars: out.stdout.elided_chars,
            duration_secs: out.duration.as_secs_f64(),
            limit: limit.map(recorded_limit),
        };
        Ok(Ran {
            action,
            submitted,
            limit,
        })
    }

    /// Records a step (the action it ran, or why the reply held none) and decides whether the
    /// trial goes on.
    fn record(
        &mut self,
        started_secs: f64,
        model: ModelCall,
        reply: &ModelResponse,
        acted: Result<Ran, String>,
    ) -> Result<ControlFlow<Stop>> {
        let (diff, diff_sha256) = self.env.diff()?;
        let (action, format_error, next) = match acted {
            Ok(Ran {
                action,
                submitted,
                limit,
            }) => {
                self.format_errors = 0;
                let next = if limit == Some(LimitHit::Disk) {
                    ControlFlow::Break(Stop::DiskLimit)
                } else if let Some(text) = submitted {
                    ControlFlow::Break(Stop::Submitted(self.submission(text, &diff)))
                } else {
                    ControlFlow::Continue(())
                };
                (Some(action), None, next)
            }
            Err(why) => {
                self.format_errors += 1;
                let next = if self.format_errors >= MAX_FORMAT_ERRORS {
                    ControlFlow::Break(Stop::FormatErrors)
                } else {
                    ControlFlow::Continue(())
                };
                (None, Some(why), next)
            }
        };
        let step = Step {
            index: self.rec.trajectory.totals.steps + 1,
            started_secs,
            model: Some(model),
            thought: reply.text.clone().filter(|t| !t.trim().is_empty()),
            action,
            format_error,
            diff: None,
            diff_sha256,
        };
        self.rec
            .extend_messages(self.conversation.take_unrecorded());
        self.rec.push_step(step, diff)?;
        Ok(next)
    }

    /// What a submitting command submitted, by track: a repair or a build is the workspace's
    /// diff.
    fn submission(&self, text: String, diff: &str) -> Submission {
        match self.env.task.track {
            Track::Diagnose => Submission::Diagnosis(text),
            Track::Reproduce => Submission::Reproducer(text),
            Track::Repair | Track::Build => Submission::Patch(diff.to_string()),
        }
    }

    /// Ends the trial: its exit status, the limit or error behind it, and its last messages are
    /// recorded and written.
    fn finish(mut self, stop: Stop) -> Result<TrialResult> {
        self.rec
            .extend_messages(self.conversation.take_unrecorded());
        self.rec
            .finish(stop.exit_status(), stop.limit_fired(), stop.error())?;
        Ok(TrialResult {
            infra_failure: stop.infra_failure(),
            submission: stop.into_submission(),
            trajectory: self.rec.trajectory,
        })
    }
}

/// A sandbox limit as the trajectory records it.
fn recorded_limit(limit: LimitHit) -> ResourceLimit {
    match limit {
        LimitHit::Processes => ResourceLimit::Processes,
        LimitHit::Memory => ResourceLimit::Memory,
        LimitHit::Disk => ResourceLimit::Disk,
    }
}

/// The observation shown to the model.
fn observation(
    exit_code: Option<i32>,
    timed_out: bool,
    limit: Option<LimitHit>,
    output: &str,
    timeout: Duration,
) -> String {
    let status = match (exit_code, timed_out) {
        (_, true) => format!(
            "The command was killed after {} seconds (time limit).",
            timeout.as_secs()
        ),
        (Some(c), _) => format!("exit code: {c}"),
        (None, _) => "The command was killed by a signal.".into(),
    };
    let limit = match limit {
        Some(LimitHit::Memory) => "\nThe sandbox ran out of memory; a process was killed.",
        Some(LimitHit::Processes) => "\nThe sandbox's process limit refused to start a process.",
        Some(LimitHit::Disk) => "\nThe sandbox was killed for writing past its disk limit.",
        None => "",
    };
    format!("{status}{limit}\n{output}")
}
