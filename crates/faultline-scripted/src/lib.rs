//! A scripted model server for faultline tests.
//!
//! Real HTTP on 127.0.0.1 that speaks both the OpenAI-compatible chat
//! completions format and the Anthropic messages format, answering each call
//! with the next step of a [`Script`]: tool calls, text, errors with retry
//! headers, malformed or oversized bodies, or no answer at all. Every request
//! is recorded, so tests can check what a client sent and when, without
//! mocking the HTTP client.
//!
//! # Script files
//!
//! The binary (`faultline-scripted --script FILE [--port N] [--port-file PATH]
//! [--request-log PATH]`) reads a script as JSON or TOML. Each step names its
//! `kind`; the fields are those of the [`Step`] variants:
//!
//! ```toml
//! mode = "per_conversation"        # or "global" (the default)
//!
//! [[steps]]
//! kind = "error"
//! status = 429
//! retry_after = "1"
//!
//! [[steps]]
//! kind = "tool_call"
//! command = "go test ./raft/..."
//! usage = { input = 1200, cached_input = 1000, output = 80 }
//!
//! [[steps]]
//! kind = "text"
//! text = "Done."
//! ```
//!
//! Other kinds: `context_length`, `malformed`, `raw`, `hang`, `oversized`.
//!
//! # Library use
//!
//! ```no_run
//! # async fn demo() -> Result<(), faultline_scripted::ServerError> {
//! use faultline_scripted::{Script, ScriptedServer, Step};
//!
//! let server = ScriptedServer::start(Script::new(vec![
//!     Step::Error { status: 429, message: None, retry_after: Some("1".into()),
//!                   retry_after_ms: None, headers: Default::default() },
//!     Step::Text { text: "done".into(), truncated: false, usage: None },
//! ]))
//! .await?;
//! let base_url = server.openai_base_url();
//! # let _ = base_url;
//! # Ok(()) }
//! ```

mod render;
mod script;
mod server;

pub use render::Protocol;
pub use script::{Script, ScriptError, ScriptMode, Step, StepUsage};
pub use server::{RecordedRequest, ScriptedServer, ServerError, ServerOptions};
