//! The conversation of a built-in trial in its two forms: the history sent to the model, in the
//! model client's provider-neutral messages, and the messages the trajectory records. Every turn
//! is added through one method here, so the two cannot drift apart.

use crate::parse::ParsedAction;
use crate::prompts::Prompts;
use faultline_model::{Message, ModelRequest, ModelResponse, ToolCall, ToolDefinition};
use faultline_schema::trajectory::{ChatMessage, Role, ToolCallRecord};

/// What the model is told when a reply holds more than one tool call: only the first runs.
const NOT_EXECUTED: &str = "Not executed: run one command per turn.";

/// Both histories of one trial.
#[derive(Debug)]
pub(crate) struct Conversation {
    /// The system prompt, sent in its own slot of every request.
    system: String,
    /// The `bash` tool in tool mode; in text mode commands come in fenced blocks.
    tool: Option<ToolDefinition>,
    /// Everything sent to the model after the system prompt, oldest first.
    wire: Vec<Message>,
    /// Recorded turns the trajectory has not taken yet (see [`Conversation::take_unrecorded`]).
    unrecorded: Vec<ChatMessage>,
}

impl Conversation {
    /// Opens the conversation with the rendered prompts.
    pub(crate) fn new(prompts: Prompts, tool_mode: bool) -> Conversation {
        let tool = tool_mode.then(|| {
            ToolDefinition::bash("Run one shell command in /workspace and return its output.")
        });
        let unrecorded = vec![text_message(Role::System, prompts.system.clone())];
        let mut conversation = Conversation {
            system: prompts.system,
            tool,
            wire: Vec::new(),
            unrecorded,
        };
        conversation.push_user(prompts.task);
        conversation
    }

    /// The request for the model's next turn. It holds the conversation's messages, lent rather
    /// than copied (a long trial's conversation runs to megabytes): give it back with
    /// [`Conversation::give_back`] before the conversation grows again.
    pub(crate) fn lend_request(
        &mut self,
        max_output_tokens: u32,
        temperature: Option<f64>,
    ) -> ModelRequest {
        ModelRequest {
            system: Some(self.system.clone()),
            messages: std::mem::take(&mut self.wire),
            tool: self.tool.clone(),
            max_output_tokens,
            temperature,
        }
    }

    /// Takes back the messages lent with a request.
    pub(crate) fn give_back(&mut self, request: ModelRequest) {
        self.wire = request.messages;
    }

    /// Adds the model's reply.
    pub(crate) fn push_reply(&mut self, reply: &ModelResponse) {
        self.unrecorded.push(ChatMessage {
            role: Role::Assistant,
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
        self.wire.push(reply.to_message());
    }

    /// Sends back the output of the reply's command: a tool result in tool mode, a user message
    /// in text mode. Any further tool calls of the reply are answered as not run, since the API
    /// requires an answer to each call.
    pub(crate) fn answer(&mut self, reply: &ModelResponse, action: &ParsedAction, output: &str) {
        match &action.call_id {
            Some(id) => self.push_tool_result(id, output),
            None => self.push_user(output.to_string()),
        }
        self.decline(reply.tool_calls.iter().skip(1), NOT_EXECUTED);
    }

    /// Sends back why the reply holds no command: as the answer to each of its tool calls, or
    /// as a user message when it made none.
    pub(crate) fn reject(&mut self, reply: &ModelResponse, why: &str) {
        self.decline(&reply.tool_calls, why);
        if reply.tool_calls.is_empty() {
            self.push_user(why.to_string());
        }
    }

    /// Hands over the recorded turns added since the last call, for the trajectory, which
    /// keeps them from then on (so no message is held twice).
    pub(crate) fn take_unrecorded(&mut self) -> Vec<ChatMessage> {
        std::mem::take(&mut self.unrecorded)
    }

    fn decline<'a>(&mut self, calls: impl IntoIterator<Item = &'a ToolCall>, text: &str) {
        for call in calls {
            self.push_tool_result(&call.id, text);
        }
    }

    fn push_user(&mut self, text: String) {
        self.unrecorded.push(text_message(Role::User, text.clone()));
        self.wire.push(Message::User { text });
    }

    fn push_tool_result(&mut self, call_id: &str, content: &str) {
        self.unrecorded.push(ChatMessage {
            role: Role::Tool,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: Some(call_id.into()),
        });
        self.wire.push(Message::ToolResult {
            call_id: call_id.into(),
            content: content.into(),
        });
    }
}

fn text_message(role: Role, content: String) -> ChatMessage {
    ChatMessage {
        role,
        content,
        tool_calls: Vec::new(),
        tool_call_id: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::parse_action;
    use faultline_model::{FinishReason, RetryStats};
    use std::time::Duration;

    fn reply(text: Option<&str>, calls: Vec<ToolCall>) -> ModelResponse {
        ModelResponse {
            model: None,
            text: text.map(str::to_string),
            reasoning_text: None,
            tool_calls: calls,
            finish_reason: FinishReason::ToolCalls,
            usage: None,
            latency: Duration::ZERO,
            total_time: Duration::ZERO,
            retry: RetryStats::default(),
            raw: serde_json::Value::Null,
        }
    }

    fn conversation(tool_mode: bool) -> Conversation {
        let prompts = Prompts {
            system: "be brief".into(),
            task: "fix it".into(),
        };
        Conversation::new(prompts, tool_mode)
    }

    /// The recorded messages as (role, content, call id), system prompt included.
    fn recorded(c: &mut Conversation) -> Vec<(String, String, Option<String>)> {
        c.take_unrecorded()
            .into_iter()
            .map(|m| (m.role.as_str().to_string(), m.content, m.tool_call_id))
            .collect()
    }

    fn owned(role: &str, content: &str, id: Option<&str>) -> (String, String, Option<String>) {
        (role.into(), content.into(), id.map(str::to_string))
    }

    #[test]
    fn only_the_first_tool_call_runs_and_every_call_is_answered() {
        let mut c = conversation(true);
        let r = reply(
            Some("two at once"),
            vec![
                ToolCall::new("a", "bash", r#"{"command":"ls"}"#),
                ToolCall::new("b", "bash", r#"{"command":"pwd"}"#),
            ],
        );
        c.push_reply(&r);
        c.answer(&r, &parse_action(&r).unwrap(), "src");
        let request = c.lend_request(64, None);
        assert_eq!(request.system.as_deref(), Some("be brief"));
        assert!(request.tool.is_some());
        assert_eq!(
            request.messages,
            [
                Message::User {
                    text: "fix it".into()
                },
                r.to_message(),
                Message::ToolResult {
                    call_id: "a".into(),
                    content: "src".into()
                },
                Message::ToolResult {
                    call_id: "b".into(),
                    content: NOT_EXECUTED.into()
                },
            ]
        );
        assert_eq!(
            recorded(&mut c),
            [
                owned("system", "be brief", None),
                owned("user", "fix it", None),
                owned("assistant", "two at once", None),
                owned("tool", "src", Some("a")),
                owned("tool", NOT_EXECUTED, Some("b")),
            ]
        );
        assert!(c.take_unrecorded().is_empty(), "handed over once");
    }

    #[test]
    fn a_rejected_reply_is_answered_in_its_own_form() {
        let mut c = conversation(true);
        let bad = reply(None, vec![ToolCall::new("a", "python", "{}")]);
        c.push_reply(&bad);
        c.reject(&bad, "use bash");
        let plain = reply(Some("thinking"), vec![]);
        c.push_reply(&plain);
        c.reject(&plain, "no command");
        let wire = c.lend_request(64, None).messages;
        assert_eq!(
            wire[2..],
            [
                Message::ToolResult {
                    call_id: "a".into(),
                    content: "use bash".into()
                },
                plain.to_message(),
                Message::User {
                    text: "no command".into()
                },
            ]
        );
        assert_eq!(
            recorded(&mut c)[2..],
            [
                owned("assistant", "", None),
                owned("tool", "use bash", Some("a")),
                owned("assistant", "thinking", None),
                owned("user", "no command", None),
            ]
        );
    }

    #[test]
    fn a_lent_request_comes_back_whole() {
        let mut c = conversation(true);
        let r = reply(
            Some("look"),
            vec![ToolCall::new("a", "bash", r#"{"command":"ls"}"#)],
        );
        c.push_reply(&r);
        c.answer(&r, &parse_action(&r).unwrap(), "src");
        let lent = c.lend_request(64, None);
        let messages = lent.messages.clone();
        assert_eq!(messages.len(), 3);
        c.give_back(lent);
        assert_eq!(c.lend_request(64, None).messages, messages);
    }

    #[test]
    fn text_mode_offers_no_tool_and_answers_as_the_user() {
        let mut c = conversation(false);
        let r = reply(Some("```bash\nls\n```"), vec![]);
        c.push_reply(&r);
        c.answer(&r, &parse_action(&r).unwrap(), "exit code: 0\nsrc");
        let request = c.lend_request(64, Some(0.5));
        assert!(request.tool.is_none());
        assert_eq!(request.temperature, Some(0.5));
        assert_eq!(
            request.messages.last(),
            Some(&Message::User {
                text: "exit code: 0\nsrc".into()
            })
        );
        assert_eq!(recorded(&mut c).len(), 4);
    }
}
