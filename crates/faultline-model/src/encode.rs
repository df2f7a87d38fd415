//! Request bodies of a growing conversation, encoded once per message: every call sends the
//! whole conversation, and encoding it anew each time makes a long trial's calls cost more and
//! more of the harness's own time. What was encoded stays encoded; each call encodes only what
//! is new (and, for Anthropic, the last turn, which can still grow and carries the cache mark).

use serde_json::Value;

use crate::config::{ModelConfig, Protocol};
use crate::types::{Message, ModelRequest};
use crate::{anthropic, openai};

/// The encoded prefix of one conversation, kept between its calls. A conversation that changed
/// other than by growing (or a different protocol or caching setting) is encoded anew.
#[derive(Debug, Default)]
pub struct EncodeCache {
    /// What the prefix was encoded for.
    key: Option<(Protocol, bool)>,
    /// The encoded messages (OpenAI: one element each; Anthropic: the closed turns), as JSON
    /// array elements joined by commas.
    prefix: Vec<u8>,
    /// How many of the conversation's messages the prefix holds.
    covered: usize,
    /// The last message the prefix holds, to tell a grown conversation from a changed one.
    last: Option<Message>,
}

impl EncodeCache {
    /// An empty cache, for a new conversation.
    pub fn new() -> EncodeCache {
        EncodeCache::default()
    }

    /// The request body, as [`crate::ModelClient::complete`] would send it.
    pub(crate) fn body(
        &mut self,
        config: &ModelConfig,
        request: &ModelRequest,
    ) -> Result<Vec<u8>, String> {
        let key = (config.protocol, config.anthropic_prompt_caching);
        let grown = self.key == Some(key)
            && self.covered <= request.messages.len()
            && (self.covered == 0
                || self.last.as_ref() == Some(&request.messages[self.covered - 1]));
        if !grown {
            *self = EncodeCache {
                key: Some(key),
                ..EncodeCache::default()
            };
        }
        let new = &request.messages[self.covered..];
        let (rest, head, tail) = match config.protocol {
            Protocol::OpenAiChat => {
                for message in new {
                    push_element(&mut self.prefix, &openai::encode_message(message))?;
                }
                self.covered = request.messages.len();
                let head = request.system.as_deref().map(openai::system_message);
                (openai::encode_rest(config, request), head, None)
            }
            Protocol::AnthropicMessages => {
                let mut groups = anthropic::group(new, self.covered)?;
                let open = groups.pop();
                for group in groups {
                    self.covered += group.messages;
                    push_element(&mut self.prefix, &group.into_message(false))?;
                }
                let tail = open.map(|g| g.into_message(config.anthropic_prompt_caching));
                (anthropic::encode_rest(config, request), None, tail)
            }
        };
        self.last = self
            .covered
            .checked_sub(1)
            .map(|i| request.messages[i].clone());
        let mut body = serde_json::to_vec(&Value::Object(rest)).map_err(|e| e.to_string())?;
        // `{...}` becomes `{...,"messages":[...]}`; the rest always holds the model.
        body.pop();
        body.extend_from_slice(b",\"messages\":[");
        let mut elements = Vec::new();
        if let Some(head) = head {
            push_element(&mut elements, &head)?;
        }
        if !self.prefix.is_empty() {
            if !elements.is_empty() {
                elements.push(b',');
            }
            elements.extend_from_slice(&self.prefix);
        }
        if let Some(tail) = tail {
            push_element(&mut elements, &tail)?;
        }
        body.extend_from_slice(&elements);
        body.extend_from_slice(b"]}");
        Ok(body)
    }
}

/// Appends `value` to comma-separated JSON array elements.
fn push_element(elements: &mut Vec<u8>, value: &Value) -> Result<(), String> {
    if !elements.is_empty() {
        elements.push(b',');
    }
    serde_json::to_writer(&mut *elements, value).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{ToolCall, ToolDefinition};

    fn request(messages: Vec<Message>) -> ModelRequest {
        ModelRequest {
            system: Some("system prompt".into()),
            messages,
            tool: Some(ToolDefinition::bash("run")),
            max_output_tokens: 100,
            temperature: Some(0.0),
        }
    }

    /// A conversation as the built-in agent grows it: a task, then replies with tool calls,
    /// their results, a rejected reply and a user note.
    fn conversation() -> Vec<Message> {
        let mut m = vec![Message::User {
            text: "the task".into(),
        }];
        for i in 0..4 {
            m.push(Message::Assistant {
                text: Some(format!("thinking {i}")),
                tool_calls: vec![ToolCall::new(
                    format!("c{i}"),
                    "bash",
                    format!("{{\"command\":\"ls {i}\"}}"),
                )],
            });
            m.push(Message::ToolResult {
                call_id: format!("c{i}"),
                content: format!("output {i}"),
            });
            if i == 2 {
                m.push(Message::User {
                    text: "a note".into(),
                });
            }
        }
        m
    }

    fn configs() -> Vec<ModelConfig> {
        let mut cached = ModelConfig::new(Protocol::AnthropicMessages, "m");
        cached.anthropic_prompt_caching = true;
        let mut uncached = ModelConfig::new(Protocol::AnthropicMessages, "m");
        uncached.anthropic_prompt_caching = false;
        vec![
            ModelConfig::new(Protocol::OpenAiChat, "m"),
            cached,
            uncached,
        ]
    }

    fn full(config: &ModelConfig, r: &ModelRequest) -> Value {
        match config.protocol {
            Protocol::OpenAiChat => openai::encode(config, r).unwrap(),
            Protocol::AnthropicMessages => anthropic::encode(config, r).unwrap(),
        }
    }

    #[test]
    fn a_growing_conversation_encodes_as_it_would_whole() {
        let all = conversation();
        for config in configs() {
            let mut cache = EncodeCache::new();
            for n in 1..=all.len() {
                let r = request(all[..n].to_vec());
                let body: Value =
                    serde_json::from_slice(&cache.body(&config, &r).unwrap()).unwrap();
                assert_eq!(body, full(&config, &r), "{:?} after {n}", config.protocol);
            }
            assert!(cache.covered > 0);
        }
    }

    #[test]
    fn a_changed_conversation_or_protocol_is_encoded_anew() {
        let all = conversation();
        let configs = configs();
        let mut cache = EncodeCache::new();
        let r = request(all.clone());
        cache.body(&configs[0], &r).unwrap();
        let mut changed = all.clone();
        changed[3] = Message::User {
            text: "rewritten".into(),
        };
        changed.truncate(5);
        for (config, r) in [
            (&configs[0], request(changed.clone())),
            (&configs[1], request(all.clone())),
            (&configs[0], request(all[..2].to_vec())),
        ] {
            let body: Value = serde_json::from_slice(&cache.body(config, &r).unwrap()).unwrap();
            assert_eq!(body, full(config, &r));
        }
    }
}
