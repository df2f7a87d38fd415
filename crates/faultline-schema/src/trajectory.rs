//! `trajectory.json`: everything an agent did in one trial, format version 1. Written atomically
//! after every step, so a killed run leaves a readable trajectory up to its last step.

use crate::task::{Condition, Limits, Track};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Format version of [`Trajectory`].
pub const TRAJECTORY_SCHEMA_VERSION: u32 = 1;

/// How a trial ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExitStatus {
    /// The agent submitted.
    Submitted,
    /// The step limit was reached.
    StepLimit,
    /// The cost limit was reached.
    CostLimit,
    /// The token limit was reached.
    TokenLimit,
    /// The wall-clock (or working-time) limit was reached.
    WallTimeLimit,
    /// Three consecutive replies could not be parsed into an action.
    FormatErrors,
    /// The model API failed (after retries, or with an error that is not retried).
    ModelError,
    /// The sandbox could not run a command.
    SandboxError,
    /// An external agent exited with an error, or without a submission.
    AgentError,
    /// The agent's commands wrote past the sandbox's disk limit (the sandbox was killed).
    ResourceLimit,
    /// The trial is still running (a trajectory written mid-run).
    Running,
}

impl ExitStatus {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            ExitStatus::Submitted => "submitted",
            ExitStatus::StepLimit => "step_limit",
            ExitStatus::CostLimit => "cost_limit",
            ExitStatus::TokenLimit => "token_limit",
            ExitStatus::WallTimeLimit => "wall_time_limit",
            ExitStatus::FormatErrors => "format_errors",
            ExitStatus::ModelError => "model_error",
            ExitStatus::SandboxError => "sandbox_error",
            ExitStatus::AgentError => "agent_error",
            ExitStatus::ResourceLimit => "resource_limit",
            ExitStatus::Running => "running",
        }
    }

    /// Whether the failure lies with the infrastructure rather than the agent.
    pub fn is_infra(self) -> bool {
        matches!(self, ExitStatus::SandboxError)
    }
}

/// What kind of thing an action did, for action distributions.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ActionKind {
    /// Reading files (`cat`, `sed -n`, `head`, `less`, `nl`).
    Read,
    /// Searching (`grep`, `rg`, `find`, `ls`).
    Search,
    /// Changing files (`sed -i`, redirections into files, `patch`, heredocs).
    Edit,
    /// Building (`cargo build`, `cargo check`).
    Build,
    /// Running tests (`cargo test`, `cargo nextest`).
    Test,
    /// Running programs (`cargo run`, scripts, binaries).
    Run,
    /// The submission command.
    Submit,
    /// Anything else.
    Other,
}

/// What sort of agent a configuration is.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum AgentKind {
    /// The built-in loop with a model.
    Builtin,
    /// A command run for every trial.
    External,
    /// A baseline (null, gold, a localizer).
    Baseline,
    /// Patches imported from a predictions file.
    Imported,
}

impl AgentKind {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            AgentKind::Builtin => "builtin",
            AgentKind::External => "external",
            AgentKind::Baseline => "baseline",
            AgentKind::Imported => "imported",
        }
    }
}

impl std::fmt::Display for AgentKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Identifies the agent configuration of a trial.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentInfo {
    /// `builtin`, `external`, `baseline` or `imported`.
    pub kind: AgentKind,
    /// A short name for tables (the model, the command, or the baseline).
    pub name: String,
    /// The model id sent to the API (built-in agent).
    pub model: Option<String>,
    /// The wire protocol (built-in agent).
    pub protocol: Option<String>,
    /// Everything else that defines the configuration (prompt template hashes, temperature...).
    #[serde(default)]
    pub settings: BTreeMap<String, serde_json::Value>,
}

/// Token counts of one call or a sum of calls. Each count is absent when the API did not
/// report it.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct Tokens {
    /// All prompt tokens, cached ones included.
    pub input: u64,
    /// Prompt tokens served from the provider's cache.
    pub cached_input: u64,
    /// Prompt tokens written to the provider's cache.
    pub cache_write: u64,
    /// Output tokens, reasoning included.
    pub output: u64,
    /// Reasoning tokens, where reported.
    pub reasoning: u64,
}

impl Tokens {
    /// Input plus output.
    pub fn total(&self) -> u64 {
        self.input + self.output
    }

    /// Adds another count.
    pub fn add(&mut self, o: &Tokens) {
        self.input += o.input;
        self.cached_input += o.cached_input;
        self.cache_write += o.cache_write;
        self.output += o.output;
        self.reasoning += o.reasoning;
    }
}

/// One model call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ModelCall {
    /// Token counts as reported (absent when the reply had no usage).
    pub tokens: Option<Tokens>,
    /// The usage object exactly as the API returned it.
    pub raw_usage: Option<serde_json::Value>,
    /// Dollars, absent when the model's price is unknown (never 0 for unknown).
    pub cost_usd: Option<f64>,
    /// Seconds from request to reply, retries included.
    pub latency_secs: f64,
    /// Seconds spent waiting between retries.
    pub retry_wait_secs: f64,
    /// Number of retries.
    pub retries: u32,
    /// The finish reason the API gave.
    pub finish_reason: Option<String>,
    /// For a call an external agent made through the model gateway: what it asked and how the
    /// gateway answered. Absent for the built-in agent, whose requests are in `messages`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<GatewayRequest>,
}

/// A call through the model gateway, as the gateway saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GatewayRequest {
    /// The agent asked for a streamed answer.
    pub stream: bool,
    /// Messages in the request.
    pub messages: usize,
    /// Tools the request declared.
    pub tools: usize,
    /// Size of the request body.
    pub bytes: u64,
    /// The HTTP status the gateway answered with.
    pub status: u16,
    /// Why the call failed, when it did.
    pub error: Option<String>,
    /// The provider's id of its reply, which a scaffold's own trajectory also keeps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_id: Option<String>,
}

/// Where an action's command came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ActionSource {
    /// A native `bash` tool call.
    ToolCall,
    /// The one fenced block of a plain-text reply.
    Text,
}

/// A resource limit of the sandbox that a command ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ResourceLimit {
    /// Processes and threads alive at once.
    Processes,
    /// Memory of the sandbox's processes together.
    Memory,
    /// New data written to the writable mounts.
    Disk,
}

/// A command the agent ran and what came back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Action {
    /// The shell command.
    pub command: String,
    /// How it was classified.
    pub kind: ActionKind,
    /// `tool_call` or `text` (a fenced block in a plain reply).
    pub source: ActionSource,
    /// Exit code, absent when killed.
    pub exit_code: Option<i32>,
    /// Whether the per-command timeout fired.
    pub timed_out: bool,
    /// The output shown to the agent (capped, head and tail).
    pub output: String,
    /// Characters of output left out.
    pub elided_chars: u64,
    /// Seconds the command took.
    pub duration_secs: f64,
    /// The sandbox's resource limit the command ran into (`processes`, `memory`, `disk`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<ResourceLimit>,
}

/// One step: a model call and the action it produced (if any).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Step {
    /// Step number, from 1.
    pub index: u32,
    /// Seconds since the trial started, at the start of this step.
    pub started_secs: f64,
    /// The model call (absent for external agents' own steps).
    pub model: Option<ModelCall>,
    /// The reply's text (reasoning or commentary).
    pub thought: Option<String>,
    /// The action, absent when the reply could not be parsed.
    pub action: Option<Action>,
    /// Why the reply could not be parsed, if it could not.
    pub format_error: Option<String>,
    /// The workspace diff after this step, present only when it changed.
    pub diff: Option<String>,
    /// SHA-256 of the workspace diff after this step.
    pub diff_sha256: String,
}

/// Who a message of the conversation is from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The system prompt.
    System,
    /// The task and the harness's feedback.
    User,
    /// The model.
    Assistant,
    /// A command's output, answering a tool call.
    Tool,
}

impl Role {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// A message of the conversation, as sent to the model (provider-neutral).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: Role,
    /// The text.
    pub content: String,
    /// Tool calls of an assistant message: id and command.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallRecord>,
    /// For a tool message: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

/// A tool call in the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolCallRecord {
    /// The provider's call id.
    pub id: String,
    /// The tool name.
    pub name: String,
    /// The raw arguments string.
    pub arguments: String,
}

/// Sums over a trajectory.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct Totals {
    /// Steps taken (model calls for the built-in agent).
    pub steps: u32,
    /// Tokens over all calls that reported usage.
    pub tokens: Tokens,
    /// Calls without usage (their tokens are not in `tokens`).
    pub calls_without_usage: u32,
    /// Dollars, absent if any call's price was unknown.
    pub cost_usd: Option<f64>,
    /// Seconds from start to end.
    pub wall_secs: f64,
    /// Wall seconds minus seconds waiting on model retries.
    pub working_secs: f64,
    /// Seconds waiting on the model (latency of all calls).
    pub model_secs: f64,
    /// Seconds running commands.
    pub command_secs: f64,
    /// Steps before the first edit of the workspace (the step whose diff first changed), if any.
    pub steps_to_first_edit: Option<u32>,
    /// Actions per kind.
    pub actions: BTreeMap<ActionKind, u32>,
}

/// A budget of a trial, named as the field of [`Limits`] that sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LimitKind {
    /// Model calls.
    Steps,
    /// Dollars.
    CostUsd,
    /// Input plus output tokens.
    Tokens,
    /// Wall-clock seconds.
    WallSecs,
    /// Wall-clock seconds not spent waiting on model retries.
    WorkingSecs,
}

impl LimitKind {
    /// The exit status of a trial this limit ended.
    pub fn exit_status(self) -> ExitStatus {
        match self {
            LimitKind::Steps => ExitStatus::StepLimit,
            LimitKind::CostUsd => ExitStatus::CostLimit,
            LimitKind::Tokens => ExitStatus::TokenLimit,
            LimitKind::WallSecs | LimitKind::WorkingSecs => ExitStatus::WallTimeLimit,
        }
    }
}

/// Which limit ended the trial, and its value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LimitFired {
    /// `steps`, `cost_usd`, `tokens`, `wall_secs` or `working_secs`.
    pub limit: LimitKind,
    /// The configured value.
    pub value: f64,
}

/// What a trial has used of its [`Limits`] so far.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Spent {
    /// Model calls made.
    pub steps: u32,
    /// Dollars; `None` when the cost is unknown, which no cost limit can judge.
    pub cost_usd: Option<f64>,
    /// Input plus output tokens.
    pub tokens: u64,
    /// Seconds since the trial started.
    pub wall_secs: f64,
    /// Of those, the seconds not spent waiting on model retries or failed calls.
    pub working_secs: f64,
}

impl Limits {
    /// The first limit that stops the next model call, if any, for the built-in agent and the
    /// model gateway alike. Costs and tokens are known only after a call, so a trial overshoots
    /// them by at most one call.
    pub fn first_reached(&self, spent: &Spent) -> Option<LimitFired> {
        let fired = |limit, value| Some(LimitFired { limit, value });
        if spent.steps >= self.steps {
            return fired(LimitKind::Steps, self.steps.into());
        }
        if let (Some(max), Some(usd)) = (self.cost_usd, spent.cost_usd)
            && usd >= max
        {
            return fired(LimitKind::CostUsd, max);
        }
        if let Some(max) = self.tokens
            && spent.tokens >= max
        {
            return fired(LimitKind::Tokens, max as f64);
        }
        if spent.wall_secs >= self.wall_secs as f64 {
            return fired(LimitKind::WallSecs, self.wall_secs as f64);
        }
        if let Some(max) = self.working_secs
            && spent.working_secs >= max as f64
        {
            return fired(LimitKind::WorkingSecs, max as f64);
        }
        None
    }
}

/// The record of one trial.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Trajectory {
    /// Format version; 1.
    pub schema_version: u32,
    /// The trial.
    pub trial_id: String,
    /// The case.
    pub case_id: String,
    /// The track.
    pub track: Track,
    /// The condition.
    pub condition: Condition,
    /// The agent configuration.
    pub agent: AgentInfo,
    /// The budgets.
    pub limits: Limits,
    /// How it ended (`running` while in progress).
    pub exit_status: ExitStatus,
    /// The limit that ended it, if one did.
    pub limit_fired: Option<LimitFired>,
    /// The error message for model or sandbox errors.
    pub error: Option<String>,
    /// Start time (RFC 3339).
    pub started_at: String,
    /// Sums.
    pub totals: Totals,
    /// The conversation.
    pub messages: Vec<ChatMessage>,
    /// The steps.
    pub steps: Vec<Step>,
}
