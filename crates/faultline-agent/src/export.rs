//! Converting our trajectories for other tools: mini-swe-agent's `traj.json` layout
//! (`trajectory_format: "mini-swe-agent-1.1"`) and Harbor's Agent Trajectory Interchange Format
//! (ATIF, `schema_version: "ATIF-v1.4"`). Only what both sides have is carried over; our own
//! file stays the complete record.

use faultline_schema::trajectory::Role;
use faultline_schema::{ExitStatus, Trajectory};
use serde_json::{Value, json};

/// The release of mini-swe-agent whose `traj.json` layout the export follows.
pub const MINI_VERSION: &str = crate::scaffolds::mini_swe_agent::VERSION;

/// mini-swe-agent's name for how a run ended: its own exit statuses where one means the same
/// (`Submitted`, `LimitsExceeded`, `TimeExceeded`, `RepeatedFormatError`), else ours in its
/// CamelCase style, as it names an exception that ended a run.
pub fn mini_exit_status(status: ExitStatus) -> &'static str {
    match status {
        ExitStatus::Submitted => "Submitted",
        ExitStatus::StepLimit | ExitStatus::CostLimit | ExitStatus::TokenLimit => "LimitsExceeded",
        ExitStatus::WallTimeLimit => "TimeExceeded",
        ExitStatus::FormatErrors => "RepeatedFormatError",
        ExitStatus::ModelError => "ModelError",
        ExitStatus::SandboxError => "SandboxError",
        ExitStatus::AgentError => "AgentError",
        ExitStatus::ResourceLimit => "ResourceLimit",
        ExitStatus::Running => "Running",
    }
}

/// The layout mini-swe-agent writes: `info` (model stats, config, its version, exit status,
/// submission), the conversation as OpenAI-style messages, each assistant message with its
/// step's command, usage, cost and time in `extra` and each command's result with its output
/// and exit code, and the closing `exit` message. An unknown cost is written as 0 (the
/// format's `instance_cost` is a number) with `info.model_stats.cost_unknown` saying so.
pub fn to_mini_swe_agent(t: &Trajectory, submission: Option<&str>) -> Value {
    let started = humantime::parse_rfc3339_weak(&t.started_at)
        .or_else(|_| humantime::parse_rfc3339(&t.started_at))
        .ok()
        .and_then(|at| at.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0.0, |d| d.as_secs_f64());
    let mut steps = t.steps.iter().filter(|s| s.model.is_some());
    let mut current: Option<&faultline_schema::trajectory::Step> = None;
    let mut messages: Vec<Value> = Vec::new();
    for m in &t.messages {
        let mut v = json!({"role": m.role, "content": m.content});
        if !m.tool_calls.is_empty() {
            v["tool_calls"] = m
                .tool_calls
                .iter()
                .map(|c| {
                    json!({"id": c.id, "type": "function",
                           "function": {"name": c.name, "arguments": c.arguments}})
                })
                .collect();
        }
        if let Some(id) = &m.tool_call_id {
            v["tool_call_id"] = json!(id);
        }
        match m.role {
            Role::Assistant => {
                current = steps.next();
                if let Some(step) = current {
                    let model = step.model.as_ref().expect("filtered");
                    let actions: Vec<Value> = step
                        .action
                        .iter()
                        .map(|a| {
                            json!({"command": a.command,
                                   "tool_call_id": m.tool_calls.first().map(|c| &c.id)})
                        })
                        .collect();
                    v["extra"] = json!({
                        "actions": actions,
                        "cost": model.cost_usd.unwrap_or(0.0),
                        "usage": model.raw_usage,
                        "timestamp": started + step.started_secs,
                    });
                }
            }
            Role::Tool | Role::User if current.is_some() => {
                let step = current.take().expect("checked");
                let timestamp = started + step.started_secs;
                v["extra"] = match &step.action {
                    Some(a) => json!({"raw_output": a.output, "returncode": a.exit_code,
                                      "timestamp": timestamp + a.duration_secs}),
                    None => json!({"interrupt_type": "FormatError", "timestamp": timestamp}),
                };
            }
            _ => {}
        }
        messages.push(v);
    }
    if t.messages.is_empty() {
        // An external agent's conversation is its own; its steps (from the model gateway, with
        // the commands its scaffold reported) still say what it asked, did and saw.
        for step in t.steps.iter().filter(|s| s.model.is_some()) {
            let model = step.model.as_ref().expect("filtered");
            let timestamp = started + step.started_secs;
            let actions: Vec<Value> = step
                .action
                .iter()
                .map(|a| json!({"command": a.command}))
                .collect();
            messages.push(json!({
                "role": "assistant",
                "content": step.thought.clone().unwrap_or_default(),
                "extra": {"actions": actions, "cost": model.cost_usd.unwrap_or(0.0),
                          "usage": model.raw_usage, "timestamp": timestamp},
            }));
            if let Some(a) = &step.action {
                messages.push(json!({
                    "role": "tool",
                    "content": a.output,
                    "extra": {"raw_output": a.output, "returncode": a.exit_code,
                              "timestamp": timestamp + a.duration_secs},
                }));
            }
        }
    }
    let status = mini_exit_status(t.exit_status);
    let submission = submission.unwrap_or("");
    messages.push(json!({
        "role": "exit",
        "content": t.error.clone().unwrap_or_else(|| submission.to_string()),
        "extra": {"exit_status": status, "submission": submission},
    }));
    let mut model_stats = json!({
        "instance_cost": t.totals.cost_usd.unwrap_or(0.0),
        "api_calls": t.steps.iter().filter(|s| s.model.is_some()).count(),
    });
    if t.totals.cost_usd.is_none() {
        model_stats["cost_unknown"] = json!(true);
        model_stats["note"] = json!("the model has no price: instance_cost is not its cost");
    }
    json!({
        "info": {
            "model_stats": model_stats,
            "config": {
                "agent": {
                    "step_limit": t.limits.steps,
                    "cost_limit": t.limits.cost_usd.unwrap_or(0.0),
                    "wall_time_limit_seconds": t.limits.wall_secs,
                },
                "agent_type": format!("faultline.{}", t.agent.kind),
                "model": {"model_name": t.agent.model, "settings": t.agent.settings},
                "model_type": format!("faultline.{}", t.agent.protocol.as_deref().unwrap_or("none")),
                "environment": {
                    "cwd": "/workspace",
                    "timeout": t.limits.command_timeout_secs,
                },
                "environment_type": "faultline.bubblewrap",
            },
            "mini_version": MINI_VERSION,
            "exit_status": status,
            "submission": submission,
        },
        "messages": messages,
        "trajectory_format": "mini-swe-agent-1.1",
        "instance_id": t.case_id,
    })
}

/// Harbor's ATIF: the system and task prompts as their own steps, then one agent step per model
/// call, with its tool call, the observation and the per-call metrics. A trajectory without
/// model calls (a baseline's, an imported submission's) is one agent step that made none
/// (`llm_call_count: 0`), since a trajectory has at least one step. `final_metrics.total_steps`
/// counts every step; the model calls are `final_metrics.extra.model_calls`.
pub fn to_atif(t: &Trajectory) -> Value {
    let mut steps = Vec::new();
    for m in t
        .messages
        .iter()
        .filter(|m| matches!(m.role, Role::System | Role::User))
        .take(2)
    {
        steps.push(json!({"source": m.role, "message": m.content}));
    }
    for s in &t.steps {
        let call_id = format!("call_{}", s.index);
        let mut step = json!({
            "source": "agent",
            "model_name": t.agent.model,
            "message": s.thought.clone().unwrap_or_default(),
        });
        if let Some(a) = &s.action {
            step["tool_calls"] = json!([{"tool_call_id": call_id, "function_name": "bash",
                                         "arguments": {"command": a.command}}]);
            step["observation"] =
                json!({"results": [{"source_call_id": call_id, "content": a.output}]});
        } else if let Some(e) = &s.format_error {
            step["observation"] = json!({"results": [{"content": e}]});
        }
        if let Some(m) = &s.model {
            let tok = m.tokens.unwrap_or_default();
            step["metrics"] = json!({
                "prompt_tokens": tok.input,
                "completion_tokens": tok.output,
                "cached_tokens": tok.cached_input,
                "cost_usd": m.cost_usd,
            });
        }
        steps.push(step);
    }
    let model_calls = t.steps.iter().filter(|s| s.model.is_some()).count();
    if model_calls == 0 {
        steps.push(json!({
            "source": "agent",
            "llm_call_count": 0,
            "message": format!(
                "{} agent `{}` ended `{}` without calling a model",
                t.agent.kind,
                t.agent.name,
                t.exit_status.as_str()
            ),
        }));
    }
    for (i, step) in steps.iter_mut().enumerate() {
        step["step_id"] = json!(i + 1);
    }
    let tok = &t.totals.tokens;
    json!({
        "schema_version": "ATIF-v1.7",
        "session_id": t.trial_id,
        "agent": {
            "name": format!("faultline-{}", t.agent.kind),
            "version": env!("CARGO_PKG_VERSION"),
            "model_name": t.agent.model,
            "extra": {"name": t.agent.name},
        },
        "steps": steps,
        "final_metrics": {
            "total_prompt_tokens": tok.input,
            "total_completion_tokens": tok.output,
            "total_cached_tokens": tok.cached_input,
            "total_cost_usd": t.totals.cost_usd,
            "total_steps": steps.len(),
            "extra": {"model_calls": model_calls},
        },
        "extra": {"exit_status": t.exit_status.as_str(), "case_id": t.case_id},
    })
}
