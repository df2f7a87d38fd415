//! mini-swe-agent (the scaffold both seed benchmarks ran their models through) as a first-class
//! agent: [`VERSION`] from the Python package registry, installed once into the data directory,
//! driven by our `mini_swe_agent.py` with its bundled `mini.yaml` prompts and bash tool, inside
//! the sandbox, against the gateway. Its `traj.json` is read back to give each of our steps (one
//! per model call) the command the agent ran and what it saw.

use crate::record::Recorder;
use crate::scaffolds::Scaffold;
use crate::scaffolds::python::Package;
use faultline_schema::trajectory::{Action, ActionSource};
use serde_json::Value;
use std::collections::HashMap;

/// The release used; results name it in the agent's settings.
pub const VERSION: &str = "2.4.6";

/// What mini-swe-agent's agent submits with: the output after this line is its submission.
pub const SENTINEL: &str = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT";

/// The release, and our driver for it.
pub const PACKAGE: Package = Package {
    name: "mini-swe-agent",
    distribution: "mini-swe-agent",
    version: VERSION,
    driver: include_str!("mini_swe_agent.py"),
    scaffold: Scaffold::MiniSweAgent,
};

/// Gives each recorded step the command mini-swe-agent ran after that model call and what the
/// command printed, from its `traj.json`; a call whose reply it could not use gets its format
/// error. Calls are matched by the provider's response id, which both records keep.
pub fn attach_actions(traj: &Value, rec: &mut Recorder) {
    let messages = traj["messages"].as_array().map_or(&[][..], Vec::as_slice);
    let mut by_response: HashMap<String, (Option<Action>, Option<String>)> = HashMap::new();
    for (i, message) in messages.iter().enumerate() {
        let extra = &message["extra"];
        let Some(id) = extra["response"]["id"].as_str() else {
            continue;
        };
        if message["role"] == "assistant" {
            let commands: Vec<&str> = extra["actions"]
                .as_array()
                .map_or(&[][..], Vec::as_slice)
                .iter()
                .filter_map(|a| a["command"].as_str())
                .collect();
            let results: Vec<&Value> = messages[i + 1..]
                .iter()
                .take_while(|m| m["role"] == "tool")
                .collect();
            let output: String = results
                .iter()
                .filter_map(|m| m["extra"]["raw_output"].as_str())
                .collect();
            let exit_code = results
                .last()
                .and_then(|m| m["extra"]["returncode"].as_i64())
                .and_then(|c| i32::try_from(c).ok());
            let action = (!commands.is_empty()).then(|| {
                let command = commands.join("\n");
                Action {
                    kind: crate::classify::classify(&command),
                    command,
                    source: ActionSource::ToolCall,
                    exit_code,
                    timed_out: false,
                    output,
                    elided_chars: 0,
                    duration_secs: 0.0,
                    limit: None,
                }
            });
            by_response.insert(id.to_string(), (action, None));
        } else if extra["interrupt_type"] == "FormatError" {
            let error = message["content"].as_str().unwrap_or_default().to_string();
            by_response.insert(id.to_string(), (None, Some(error)));
        }
    }
    for index in 0..rec.trajectory.steps.len() {
        let id = rec.trajectory.steps[index]
            .model
            .as_ref()
            .and_then(|m| m.request.as_ref())
            .and_then(|r| r.response_id.clone());
        if let Some((action, format_error)) = id.and_then(|id| by_response.remove(&id)) {
            rec.attach(index, action, format_error);
        }
    }
}
