//! Converting our trajectories for other tools: mini-swe-agent's `traj.json` layout
//! (`trajectory_format: "mini-swe-agent-1.1"`) and Harbor's Agent Trajectory Interchange Format
//! (ATIF, `schema_version: "ATIF-v1.4"`). Only what both sides have is carried over; our own
//! file stays the complete record.

use faultline_schema::Trajectory;
use faultline_schema::trajectory::Role;
use serde_json::{Value, json};

/// The mini-swe-agent layout: `info` (model stats, config, exit status, submission) and the
/// conversation as OpenAI-style messages.
pub fn to_mini_swe_agent(t: &Trajectory, submission: Option<&str>) -> Value {
    let messages: Vec<Value> = t
        .messages
        .iter()
        .map(|m| {
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
            v
        })
        .collect();
    json!({
        "info": {
            "model_stats": {
                "instance_cost": t.totals.cost_usd,
                "api_calls": t.steps.iter().filter(|s| s.model.is_some()).count(),
            },
            "config": {
                "agent_type": format!("faultline-{}", t.agent.kind),
                "model": {"model_name": t.agent.model, "settings": t.agent.settings},
                "environment_type": "faultline-bubblewrap",
                "limits": t.limits,
            },
            "exit_status": t.exit_status.as_str(),
            "submission": submission.unwrap_or(""),
        },
        "messages": messages,
        "trajectory_format": "mini-swe-agent-1.1",
        "instance_id": t.case_id,
    })
}

/// Harbor's ATIF: one agent step per model call, with its tool call, the observation and the
/// per-call metrics; the task prompt as a user step.
pub fn to_atif(t: &Trajectory) -> Value {
    let mut steps = Vec::new();
    let mut next_id = 1;
    for m in t
        .messages
        .iter()
        .filter(|m| matches!(m.role, Role::System | Role::User))
        .take(2)
    {
        steps.push(json!({"step_id": next_id, "source": m.role, "message": m.content}));
        next_id += 1;
    }
    for s in &t.steps {
        let call_id = format!("call_{}", s.index);
        let mut step = json!({
            "step_id": next_id,
            "source": "agent",
            "model_name": t.agent.model,
            "message": s.thought.clone().unwrap_or_default(),
        });
        next_id += 1;
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
    let tok = &t.totals.tokens;
    json!({
        "schema_version": "ATIF-v1.4",
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
            "total_steps": t.totals.steps,
        },
        "extra": {"exit_status": t.exit_status.as_str(), "case_id": t.case_id},
    })
}
