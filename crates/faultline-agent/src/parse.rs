//! Turning a model reply into one shell command, or a format error to send back.

use faultline_model::{FinishReason, ModelResponse};
use faultline_schema::trajectory::ActionSource;
use regex::Regex;
use std::sync::LazyLock;

/// A parsed action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedAction {
    /// The shell command.
    pub command: String,
    /// Where it came from.
    pub source: ActionSource,
    /// The id of the tool call (tool mode).
    pub call_id: Option<String>,
}

static FENCE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?s)```(?:bash|sh|shell)?[ \t]*\n(.*?)\n?```").expect("valid regex")
});

/// Extracts the action of a reply. Tool calls win; without them the text must hold exactly one
/// fenced block. The error is the message sent back to the model.
pub fn parse_action(reply: &ModelResponse) -> Result<ParsedAction, String> {
    if reply.finish_reason == FinishReason::Length {
        return Err(
            "Your reply was cut off because it reached the output token limit. Reply \
                    again, more briefly, with one command."
                .into(),
        );
    }
    if let Some(call) = reply.tool_calls.first() {
        if call.name != "bash" {
            return Err(format!(
                "There is no tool named `{}`; use the `bash` tool with a `command` argument.",
                call.name
            ));
        }
        return match call.command() {
            Some(cmd) if !cmd.trim().is_empty() => Ok(ParsedAction {
                command: cmd.to_string(),
                source: ActionSource::ToolCall,
                call_id: Some(call.id.clone()),
            }),
            _ => Err(format!(
                "The `bash` tool call needs a JSON object with a non-empty string `command`; got `{}`.",
                truncate(&call.arguments, 200)
            )),
        };
    }
    let text = reply.text.as_deref().unwrap_or("");
    let blocks: Vec<&str> = FENCE
        .captures_iter(text)
        .map(|c| c.get(1).map_or("", |m| m.as_str()))
        .collect();
    match blocks.as_slice() {
        [one] if !one.trim().is_empty() => Ok(ParsedAction {
            command: one.to_string(),
            source: ActionSource::Text,
            call_id: None,
        }),
        [] | [_] => Err(
            "No command found. Call the `bash` tool, or put exactly one command in \
                         one ```bash fenced block."
                .into(),
        ),
        many => Err(format!(
            "Found {} fenced blocks; reply with exactly one command per turn.",
            many.len()
        )),
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        format!("{}...", s.chars().take(n).collect::<String>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use faultline_model::{RetryStats, ToolCall};
    use std::time::Duration;

    fn reply(text: Option<&str>, calls: Vec<ToolCall>, finish: FinishReason) -> ModelResponse {
        ModelResponse {
            model: None,
            text: text.map(str::to_string),
            reasoning_text: None,
            tool_calls: calls,
            finish_reason: finish,
            usage: None,
            latency: Duration::ZERO,
            total_time: Duration::ZERO,
            retry: RetryStats::default(),
            raw: serde_json::Value::Null,
        }
    }

    #[test]
    fn tool_calls_and_fenced_blocks() {
        let call = ToolCall::new("c1", "bash", r#"{"command":"ls src"}"#);
        let a = parse_action(&reply(None, vec![call], FinishReason::ToolCalls)).unwrap();
        assert_eq!(
            (a.command.as_str(), a.source),
            ("ls src", ActionSource::ToolCall)
        );

        let t = reply(
            Some("Look first.\n```bash\ncat src/lib.rs\n```\n"),
            vec![],
            FinishReason::Stop,
        );
        assert_eq!(parse_action(&t).unwrap().command, "cat src/lib.rs");
    }

    #[test]
    fn format_errors_explain_themselves() {
        let none = reply(
            Some("I think the bug is in merge."),
            vec![],
            FinishReason::Stop,
        );
        assert!(parse_action(&none).unwrap_err().contains("No command"));
        let two = reply(
            Some("```bash\nls\n```\n```bash\npwd\n```"),
            vec![],
            FinishReason::Stop,
        );
        assert!(parse_action(&two).unwrap_err().contains("2 fenced blocks"));
        let cut = reply(Some("```bash\nls"), vec![], FinishReason::Length);
        assert!(parse_action(&cut).unwrap_err().contains("cut off"));
        let bad = ToolCall::new("c1", "bash", "{not json");
        assert!(
            parse_action(&reply(None, vec![bad], FinishReason::ToolCalls))
                .unwrap_err()
                .contains("JSON object")
        );
        let other = ToolCall::new("c1", "python", r#"{"command":"x"}"#);
        assert!(
            parse_action(&reply(None, vec![other], FinishReason::ToolCalls))
                .unwrap_err()
                .contains("no tool named")
        );
    }
}
