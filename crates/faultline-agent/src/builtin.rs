//! The built-in agent: one model, one `bash` tool, one command per step, until it submits or a
//! limit fires. The whole loop is [`BuiltinAgent::run`].

use crate::classify::classify;
use crate::env::{Submission, TrialEnv};
use crate::parse::{ActionSource, ParsedAction, parse_action};
use crate::prompts::{SUBMIT_SENTINEL, Templates};
use crate::record::Recorder;
use anyhow::Result;
use faultline_model::{
    Message, ModelClient, ModelRequest, ModelResponse, PricingTable, ToolDefinition,
};
use faultline_sandbox::{ExecRequest, LimitHit};
use faultline_schema::trajectory::{
    Action, AgentInfo, ChatMessage, LimitFired, ModelCall, Step, Tokens, ToolCallRecord,
};
use faultline_schema::{ActionKind, ExitStatus, Track};
use std::path::PathBuf;
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
    /// The complete trajectory (also written to disk after every step).
    pub trajectory: faultline_schema::Trajectory,
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
            kind: "builtin".into(),
            name: cfg.model.clone(),
            model: Some(cfg.model.clone()),
            protocol: Some(format!("{:?}", cfg.protocol)),
            settings,
        }
    }

    /// Runs one trial to its end; the trajectory is written to `trajectory_path` after every
    /// step. Errors are only for the harness's own failures (e.g. a full disk).
    pub async fn run(
        &self,
        env: &TrialEnv,
        trajectory_path: Option<PathBuf>,
    ) -> Result<TrialResult> {
        let task = &env.task;
        let limits = &task.limits;
        let mut rec =
            Recorder::new(task, self.info(), trajectory_path).starting_from(env.diff()?.1);
        let prompts = self
            .templates
            .render(task, &env.symptom, &env.bundle, self.tool_mode)?;
        rec.message("system", &prompts.system);
        rec.message("user", &prompts.task);
        let mut conversation = vec![Message::User {
            text: prompts.task.clone(),
        }];
        let tool = self.tool_mode.then(|| {
            ToolDefinition::bash("Run one shell command in /workspace and return its output.")
        });
        let mut format_errors = 0u32;

        loop {
            if let Some(fired) = limit_reached(&rec, limits) {
                let status = if fired.limit == "steps" {
                    ExitStatus::StepLimit
                } else if fired.limit == "cost_usd" {
                    ExitStatus::CostLimit
                } else if fired.limit == "tokens" {
                    ExitStatus::TokenLimit
                } else {
                    ExitStatus::WallTimeLimit
                };
                rec.finish(status, Some(fired), None)?;
                return Ok(finished(rec, Submission::None));
            }
            let index = rec.trajectory.totals.steps + 1;
            let started = rec.elapsed();
            let request = ModelRequest {
                system: Some(prompts.system.clone()),
                messages: conversation.clone(),
                tool: tool.clone(),
                max_output_tokens: self.max_output_tokens,
                temperature: self.temperature,
            };
            let remaining =
                Duration::from_secs_f64((limits.wall_secs as f64 - rec.elapsed()).max(0.0));
            let call = async {
                let _permit = match &self.model_permits {
                    Some(p) => Some(p.acquire().await.expect("the semaphore is never closed")),
                    None => None,
                };
                self.client.complete(&request).await
            };
            let reply = match tokio::time::timeout(remaining, call).await {
                Err(_) => {
                    let fired = LimitFired {
                        limit: "wall_secs".into(),
                        value: limits.wall_secs as f64,
                    };
                    rec.finish(ExitStatus::WallTimeLimit, Some(fired), None)?;
                    return Ok(finished(rec, Submission::None));
                }
                Ok(Err(e)) => {
                    rec.add_unstepped_cost(
                        e.billed_usage().map(|u| self.cost(u)).unwrap_or(Some(0.0)),
                    );
                    rec.finish(
                        ExitStatus::ModelError,
                        None,
                        Some(format!("{} ({})", e, e.kind().as_str())),
                    )?;
                    return Ok(finished(rec, Submission::None));
                }
                Ok(Ok(r)) => r,
            };
            let model_call = self.model_call(&reply);
            let thought = reply.text.clone().filter(|t| !t.trim().is_empty());
            record_assistant(&mut rec, &reply);
            conversation.push(reply.to_message());

            let parsed = match parse_action(&reply) {
                Ok(p) => p,
                Err(msg) => {
                    format_errors += 1;
                    answer_unexecuted(&mut rec, &mut conversation, &reply, 0, &msg);
                    if reply.tool_calls.is_empty() {
                        rec.message("user", &msg);
                        conversation.push(Message::User { text: msg.clone() });
                    }
                    let (diff, sha) = env.diff()?;
                    rec.push_step(
                        Step {
                            index,
                            started_secs: started,
                            model: Some(model_call),
                            thought,
                            action: None,
                            format_error: Some(msg),
                            diff: None,
                            diff_sha256: sha,
                        },
                        diff,
                    )?;
                    if format_errors >= MAX_FORMAT_ERRORS {
                        rec.finish(ExitStatus::FormatErrors, None, None)?;
                        return Ok(finished(rec, Submission::None));
                    }
                    continue;
                }
            };
            format_errors = 0;
            let kind = classify(&parsed.command);
            let remaining = (limits.wall_secs as f64 - rec.elapsed()).max(1.0);
            let timeout =
                Duration::from_secs_f64((limits.command_timeout_secs as f64).min(remaining));
            let cap = if kind == ActionKind::Submit {
                SUBMISSION_CAP
            } else {
                limits.output_cap_chars
            };
            let req = ExecRequest::bash(format!("exec 2>&1\n{}", parsed.command), timeout).cap(cap);
            let out = match env.exec(&req).await {
                Ok(o) => o,
                Err(e) => {
                    rec.finish(ExitStatus::SandboxError, None, Some(e.to_string()))?;
                    return Ok(finished(rec, Submission::None));
                }
            };
            let submitted = out.exit_code == Some(0)
                && out.stdout.text.lines().next().map(str::trim) == Some(SUBMIT_SENTINEL);
            let limit = out.limit_hit();
            let shown = if submitted {
                out.stdout.text.clone()
            } else {
                observation(
                    out.exit_code,
                    out.timed_out,
                    limit,
                    &out.stdout.text,
                    timeout,
                )
            };
            let action = Action {
                command: parsed.command.clone(),
                kind,
                source: match parsed.source {
                    ActionSource::ToolCall => "tool_call".into(),
                    ActionSource::Text => "text".into(),
                },
                exit_code: out.exit_code,
                timed_out: out.timed_out,
                output: shown.clone(),
                elided_chars: out.stdout.elided_chars,
                duration_secs: out.duration.as_secs_f64(),
                limit: limit.map(|l| l.as_str().to_string()),
            };
            answer(&mut rec, &mut conversation, &parsed, &shown);
            answer_unexecuted(
                &mut rec,
                &mut conversation,
                &reply,
                1,
                "Not executed: run one command per turn.",
            );
            let (diff, sha) = env.diff()?;
            rec.push_step(
                Step {
                    index,
                    started_secs: started,
                    model: Some(model_call),
                    thought,
                    action: Some(action),
                    format_error: None,
                    diff: None,
                    diff_sha256: sha,
                },
                diff.clone(),
            )?;
            if limit == Some(LimitHit::Disk) {
                rec.finish(
                    ExitStatus::ResourceLimit,
                    None,
                    Some("the commands wrote past the sandbox's disk limit".into()),
                )?;
                return Ok(finished(rec, Submission::None));
            }
            if submitted {
                let body = out
                    .stdout
                    .text
                    .split_once('\n')
                    .map(|(_, rest)| rest.to_string())
                    .unwrap_or_default();
                let submission = match task.track {
                    Track::Diagnose => Submission::Diagnosis(body),
                    Track::Reproduce => Submission::Reproducer(body),
                    Track::Repair => Submission::Patch(diff),
                };
                rec.finish(ExitStatus::Submitted, None, None)?;
                return Ok(finished(rec, submission));
            }
        }
    }

    fn cost(&self, usage: &faultline_model::Usage) -> Option<f64> {
        self.pricing
            .as_ref()
            .and_then(|p| p.cost(&self.client.config().model, usage))
    }

    fn model_call(&self, r: &ModelResponse) -> ModelCall {
        ModelCall {
            tokens: r.usage.as_ref().map(|u| Tokens {
                input: u.input_tokens,
                cached_input: u.cached_input_tokens,
                cache_write: u.cache_write_tokens,
                output: u.output_tokens,
                reasoning: u.reasoning_tokens.unwrap_or(0),
            }),
            raw_usage: r.usage.as_ref().map(|u| u.raw.clone()),
            cost_usd: r.usage.as_ref().and_then(|u| self.cost(u)),
            latency_secs: r.total_time.as_secs_f64(),
            retry_wait_secs: r.retry.waiting().as_secs_f64(),
            retries: r.retry.retries,
            finish_reason: Some(format!("{:?}", r.finish_reason).to_lowercase()),
        }
    }
}

fn finished(rec: Recorder, submission: Submission) -> TrialResult {
    TrialResult {
        submission,
        trajectory: rec.trajectory,
    }
}

/// The limit that stops the next model call, if any. Costs and tokens are checked after each
/// call, so a trial overshoots by at most one call.
fn limit_reached(rec: &Recorder, limits: &faultline_schema::Limits) -> Option<LimitFired> {
    let t = &rec.trajectory.totals;
    let fired = |limit: &str, value: f64| {
        Some(LimitFired {
            limit: limit.into(),
            value,
        })
    };
    if t.steps >= limits.steps {
        return fired("steps", limits.steps.into());
    }
    if let (Some(max), Some(spent)) = (limits.cost_usd, t.cost_usd)
        && spent >= max
    {
        return fired("cost_usd", max);
    }
    if let Some(max) = limits.tokens
        && t.tokens.total() >= max
    {
        return fired("tokens", max as f64);
    }
    if rec.elapsed() >= limits.wall_secs as f64 {
        return fired("wall_secs", limits.wall_secs as f64);
    }
    if let Some(max) = limits.working_secs
        && rec.working() >= max as f64
    {
        return fired("working_secs", max as f64);
    }
    None
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

fn record_assistant(rec: &mut Recorder, reply: &ModelResponse) {
    rec.push_message(ChatMessage {
        role: "assistant".into(),
        content: reply.text.clone().unwrap_or_default(),
        tool_calls: reply
            .tool_calls
            .iter()
            .map(|c| ToolCallRecord {
                id: c.id.clone(),
                name: c.name.clone(),
                arguments: c.arguments.clone(),
            })
            .collect(),
        tool_call_id: None,
    });
}

/// Sends the observation back: a tool result in tool mode, a user message in text mode.
fn answer(rec: &mut Recorder, conversation: &mut Vec<Message>, action: &ParsedAction, text: &str) {
    match &action.call_id {
        Some(id) => {
            rec.push_message(ChatMessage {
                role: "tool".into(),
                content: text.into(),
                tool_calls: Vec::new(),
                tool_call_id: Some(id.clone()),
            });
            conversation.push(Message::ToolResult {
                call_id: id.clone(),
                content: text.into(),
            });
        }
        None => {
            rec.message("user", text);
            conversation.push(Message::User { text: text.into() });
        }
    }
}

/// Every tool call from `skip` on gets a result saying it was not run (the API requires an
/// answer to each call).
fn answer_unexecuted(
    rec: &mut Recorder,
    conversation: &mut Vec<Message>,
    reply: &ModelResponse,
    skip: usize,
    text: &str,
) {
    for call in reply.tool_calls.iter().skip(skip) {
        rec.push_message(ChatMessage {
            role: "tool".into(),
            content: text.into(),
            tool_calls: Vec::new(),
            tool_call_id: Some(call.id.clone()),
        });
        conversation.push(Message::ToolResult {
            call_id: call.id.clone(),
            content: text.into(),
        });
    }
}
