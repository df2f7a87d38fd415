//! Request bodies of a growing conversation, encoded once per message: every call sends the
//! whole conversation, and encoding it anew each time makes a long trial's calls cost more and
//! more of the harness's own time. What was encoded stays encoded; each call encodes only what
//! is new (and, for Anthropic, the last turn, which can still grow and carries the cache mark).

use bytes::Bytes;
use serde_json::Value;

use crate::config::{ModelConfig, Protocol};
use crate::types::{Message, ModelRequest};
use crate::{anthropic, openai};

/// The encoded body of one conversation, kept between its calls: `{…,"messages":[` and every
/// message encoded so far, to which a call adds only what is new. The body is sent from this
/// buffer itself, without a copy, and taken back after the call ([`EncodeCache::take_back`]).
/// A conversation that changed other than by growing, or a request whose other fields changed,
/// is encoded anew.
#[derive(Debug, Default)]
pub struct EncodeCache {
    /// The body up to the messages' first element: everything but the messages, and the opening
    /// of their array (for OpenAI, the system message too).
    start: Vec<u8>,
    /// `start`, then the encoded messages (OpenAI: one element each; Anthropic: the closed
    /// turns), comma-separated.
    buffer: Vec<u8>,
    /// Whether `buffer` holds any element after the array's opening.
    has_elements: bool,
    /// How many of the conversation's messages the buffer holds.
    covered: usize,
    /// The last message the buffer holds, to tell a grown conversation from a changed one.
    last: Option<Message>,
}

/// A body lent out of an [`EncodeCache`], to be given back after the call.
#[derive(Debug)]
pub(crate) struct LentBody {
    /// The whole body.
    pub(crate) bytes: Bytes,
    /// Where the cached part ends.
    cached: usize,
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
    ) -> Result<LentBody, String> {
        let (rest, head) = match config.protocol {
            Protocol::OpenAiChat => (
                openai::encode_rest(config, request),
                request.system.as_deref().map(openai::system_message),
            ),
            Protocol::AnthropicMessages => (anthropic::encode_rest(config, request), None),
        };
        let mut start = serde_json::to_vec(&Value::Object(rest)).map_err(|e| e.to_string())?;
        // `{...}` becomes `{...,"messages":[`; the rest always holds the model.
        start.pop();
        start.extend_from_slice(b",\"messages\":[");
        if let Some(head) = &head {
            serde_json::to_writer(&mut start, head).map_err(|e| e.to_string())?;
        }
        let grown = start == self.start
            && self.buffer.len() >= start.len()
            && self.covered <= request.messages.len()
            && (self.covered == 0
                || self.last.as_ref() == Some(&request.messages[self.covered - 1]));
        if !grown {
            *self = EncodeCache {
                buffer: start.clone(),
                has_elements: head.is_some(),
                start,
                ..EncodeCache::default()
            };
        }
        let new = &request.messages[self.covered..];
        let tail = match config.protocol {
            Protocol::OpenAiChat => {
                for message in new {
                    self.push(&openai::encode_message(message))?;
                }
                self.covered = request.messages.len();
                None
            }
            Protocol::AnthropicMessages => {
                let mut groups = anthropic::group(new, self.covered)?;
                let open = groups.pop();
                for group in groups {
                    self.covered += group.messages;
                    self.push(&group.into_message(false))?;
                }
                open.map(|g| g.into_message(config.anthropic_prompt_caching))
            }
        };
        self.last = self
            .covered
            .checked_sub(1)
            .map(|i| request.messages[i].clone());
        let mut body = std::mem::take(&mut self.buffer);
        let cached = body.len();
        if let Some(tail) = tail {
            if self.has_elements {
                body.push(b',');
            }
            serde_json::to_writer(&mut body, &tail).map_err(|e| e.to_string())?;
        }
        body.extend_from_slice(b"]}");
        Ok(LentBody {
            bytes: Bytes::from(body),
            cached,
        })
    }

    /// Takes back a body lent by [`Self::body`] once nothing else holds it; if something still
    /// does, the next call encodes the conversation anew.
    pub(crate) fn take_back(&mut self, lent: LentBody) {
        match lent.bytes.try_into_mut() {
            Ok(bytes) => {
                let mut buffer = Vec::from(bytes);
                buffer.truncate(lent.cached);
                self.buffer = buffer;
            }
            Err(_) => *self = EncodeCache::default(),
        }
    }

    fn push(&mut self, value: &Value) -> Result<(), String> {
        if self.has_elements {
            self.buffer.push(b',');
        }
        self.has_elements = true;
        serde_json::to_writer(&mut self.buffer, value).map_err(|e| e.to_string())
    }
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
                let lent = cache.body(&config, &r).unwrap();
                let body: Value = serde_json::from_slice(&lent.bytes).unwrap();
                assert_eq!(body, full(&config, &r), "{:?} after {n}", config.protocol);
                cache.take_back(lent);
            }
            assert!(cache.covered > 0);
            assert!(!cache.buffer.is_empty(), "the buffer came back");
        }
    }

    #[test]
    fn a_changed_conversation_or_protocol_is_encoded_anew() {
        let all = conversation();
        let configs = configs();
        let mut cache = EncodeCache::new();
        let r = request(all.clone());
        let lent = cache.body(&configs[0], &r).unwrap();
        cache.take_back(lent);
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
            let lent = cache.body(config, &r).unwrap();
            let body: Value = serde_json::from_slice(&lent.bytes).unwrap();
            assert_eq!(body, full(config, &r));
            cache.take_back(lent);
        }
    }
}

#[cfg(test)]
mod lending {
    use super::*;

    #[test]
    fn a_body_still_held_elsewhere_is_not_taken_back() {
        let config = ModelConfig::new(Protocol::OpenAiChat, "m");
        let r = ModelRequest {
            system: None,
            messages: vec![Message::User { text: "hi".into() }],
            tool: None,
            max_output_tokens: 10,
            temperature: None,
        };
        let mut cache = EncodeCache::new();
        let lent = cache.body(&config, &r).unwrap();
        let held = lent.bytes.clone();
        cache.take_back(lent);
        assert_eq!(cache.covered, 0, "the cache starts over");
        let again = cache.body(&config, &r).unwrap();
        assert_eq!(again.bytes, held);
    }
}
