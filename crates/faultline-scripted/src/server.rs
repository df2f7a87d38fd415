//! The HTTP server: accepts model calls on loopback, records them, and answers
//! from the script.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::fs::File;
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderName, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

use crate::render::{self, Action, Protocol, Reply};
use crate::script::{Script, ScriptError, ScriptMode};

/// Request bodies larger than this are refused; no agent prompt comes close.
const MAX_REQUEST_BYTES: usize = 64 * 1024 * 1024;

/// One request as the server saw it, kept so tests can assert on what a
/// client actually sent and when.
#[derive(Debug, Clone, Serialize)]
pub struct RecordedRequest {
    /// Zero-based arrival order.
    pub index: usize,
    /// Milliseconds between server start and the arrival of the full request.
    pub received_ms: u64,
    /// The HTTP method.
    pub method: String,
    /// The request path.
    pub path: String,
    /// The protocol the path belongs to; `None` for unknown paths.
    pub protocol: Option<Protocol>,
    /// Headers with lower-case names. Credentials (`authorization`,
    /// `x-api-key`, `api-key`) are redacted so a request log never holds a
    /// key; the `Bearer` scheme word is kept.
    pub headers: BTreeMap<String, String>,
    /// The JSON body; a body that is not JSON is kept as a JSON string.
    pub body: Value,
    /// The zero-based script step that answered; `None` when the request was
    /// refused or the script had run out.
    pub step: Option<usize>,
}

/// Settings for [`ScriptedServer::start_with`].
#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    /// The port to bind on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// Append every request as one JSON line to this file, so a test driving
    /// the binary from outside can inspect what was sent.
    pub request_log: Option<PathBuf>,
    /// Keep no requests in memory (then [`ScriptedServer::requests`] is empty): every request
    /// carries the whole conversation, so a long scripted run would otherwise hold a quadratic
    /// amount of text, which matters when the server shares a process with what a bench measures.
    pub forget_requests: bool,
    /// Answer 401 to model calls that do not carry this key (as `Authorization: Bearer` or
    /// `x-api-key`), as a provider does; recorded headers never show keys, so this is how a test
    /// checks which key a client sent.
    pub require_key: Option<String>,
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The script cannot be served.
    #[error(transparent)]
    Script(#[from] ScriptError),
    /// Binding the socket or opening the request log failed. The message names the cause, which
    /// is therefore not also the `source`.
    #[error("scripted server I/O: {0}")]
    Io(std::io::Error),
}

/// A running scripted model server on 127.0.0.1. Stops when dropped.
#[derive(Debug)]
pub struct ScriptedServer {
    addr: SocketAddr,
    state: Arc<State>,
    accept: JoinHandle<()>,
}

#[derive(Debug)]
struct State {
    script: Script,
    require_key: Option<String>,
    started: Instant,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    global_cursor: usize,
    conversation_cursors: HashMap<String, usize>,
    replies_made: u64,
    requests: Vec<RecordedRequest>,
    recorded: usize,
    forget: bool,
    log: Option<File>,
}

impl State {
    /// The lock is only held for bookkeeping that cannot panic halfway, so a
    /// poisoned lock still holds consistent data.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl ScriptedServer {
    /// Starts a server for `script` on a free port.
    pub async fn start(script: Script) -> Result<Self, ServerError> {
        Self::start_with(script, ServerOptions::default()).await
    }

    /// Starts a server for `script` with explicit options.
    pub async fn start_with(script: Script, options: ServerOptions) -> Result<Self, ServerError> {
        script.validate()?;
        let log = match &options.request_log {
            Some(path) => Some(File::create(path).map_err(ServerError::Io)?),
            None => None,
        };
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, options.port))
            .await
            .map_err(ServerError::Io)?;
        let addr = listener.local_addr().map_err(ServerError::Io)?;
        let state = Arc::new(State {
            script,
            require_key: options.require_key,
            started: Instant::now(),
            inner: Mutex::new(Inner {
                log,
                forget: options.forget_requests,
                ..Inner::default()
            }),
        });
        let accept = tokio::spawn(accept_loop(listener, Arc::clone(&state)));
        Ok(Self {
            addr,
            state,
            accept,
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL an OpenAI-compatible client appends `/chat/completions` to.
    pub fn openai_base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The base URL an Anthropic client appends `/v1/messages` to.
    pub fn anthropic_base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state.lock().requests.clone()
    }

    /// Stops accepting and drops all open connections, including hung ones.
    pub async fn shutdown(mut self) {
        self.accept.abort();
        // The accept task owns the connection tasks; once it has ended they
        // have been aborted too. A cancelled join is the expected outcome.
        let _ = (&mut self.accept).await;
    }
}

impl Drop for ScriptedServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<State>) {
    // Dropping this set (when the loop's task is aborted) aborts every
    // connection, which is how hung requests are released.
    let mut connections = JoinSet::new();
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            // Accept errors (for example too many open files) are transient;
            // the next accept may succeed.
            Err(_) => continue,
        };
        let state = Arc::clone(&state);
        connections.spawn(async move {
            let service = service_fn(move |request| handle(Arc::clone(&state), request));
            // A client that goes away mid-request is normal (timeouts).
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
        while connections.try_join_next().is_some() {}
    }
}

async fn handle(
    state: Arc<State>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let method = request.method().to_string();
    let path = request.uri().path().to_string();
    let headers = recorded_headers(request.headers());
    let key_accepted = state
        .require_key
        .as_deref()
        .is_none_or(|key| carries_key(request.headers(), key));
    let protocol = match path.as_str() {
        "/v1/chat/completions" | "/chat/completions" => Some(Protocol::OpenAi),
        "/v1/messages" => Some(Protocol::Anthropic),
        _ => None,
    };
    let body = match Limited::new(request.into_body(), MAX_REQUEST_BYTES)
        .collect()
        .await
    {
        Ok(collected) => collected.to_bytes(),
        Err(err) => {
            return Ok(plain(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("faultline-scripted: cannot read request body: {err}"),
            ));
        }
    };
    let json = serde_json::from_slice::<Value>(&body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));

    let mut recorded = RecordedRequest {
        index: 0,
        received_ms: u64::try_from(state.started.elapsed().as_millis()).unwrap_or(u64::MAX),
        method,
        path,
        protocol,
        headers,
        body: json,
        step: None,
    };

    let action = match protocol {
        None => {
            record(&state, recorded);
            return Ok(plain(
                StatusCode::NOT_FOUND,
                "faultline-scripted: unknown path; use /v1/chat/completions or /v1/messages",
            ));
        }
        Some(protocol) => {
            if recorded.method != "POST" {
                record(&state, recorded);
                return Ok(plain(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "faultline-scripted: model calls must be POST requests",
                ));
            }
            if !key_accepted {
                record(&state, recorded);
                return Ok(to_response(render::unauthorized(protocol)));
            }
            match check_request(protocol, &recorded) {
                Err(reason) => {
                    record(&state, recorded);
                    Action::Reply(render::bad_request(protocol, &reason))
                }
                Ok(model) => {
                    let mut inner = state.lock();
                    let cursor = match state.script.mode {
                        ScriptMode::Global => &mut inner.global_cursor,
                        ScriptMode::PerConversation => inner
                            .conversation_cursors
                            .entry(conversation_key(protocol, &recorded.body))
                            .or_default(),
                    };
                    let position = *cursor;
                    *cursor += 1;
                    let action = match state.script.steps.get(position) {
                        Some(step) => {
                            recorded.step = Some(position);
                            inner.replies_made += 1;
                            render::render(step, protocol, &model, inner.replies_made)
                        }
                        None => {
                            Action::Reply(render::exhausted(protocol, state.script.steps.len()))
                        }
                    };
                    record_locked(&mut inner, recorded);
                    action
                }
            }
        }
    };

    match action {
        Action::Reply(reply) => Ok(to_response(reply)),
        Action::Hang => std::future::pending().await,
    }
}

/// Checks that a request carries what the real API requires, so a client bug
/// shows up as a clear 400 instead of a silently accepted call. Returns the
/// requested model name.
fn check_request(protocol: Protocol, request: &RecordedRequest) -> Result<String, String> {
    let body = request
        .body
        .as_object()
        .ok_or("request body is not a JSON object")?;
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .ok_or("request has no string field `model`")?;
    if !body.get("messages").is_some_and(Value::is_array) {
        return Err("request has no array field `messages`".into());
    }
    if protocol == Protocol::Anthropic {
        if !body.get("max_tokens").is_some_and(Value::is_u64) {
            return Err("request has no integer field `max_tokens`".into());
        }
        if !request.headers.contains_key("anthropic-version") {
            return Err("request has no `anthropic-version` header".into());
        }
    }
    Ok(model.to_string())
}

/// The system prompt plus the first user message: stable across the turns of
/// one conversation and different between tasks.
fn conversation_key(protocol: Protocol, body: &Value) -> String {
    let messages = body["messages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let first_with_role = |role: &str| {
        messages
            .iter()
            .find(|m| m["role"] == role)
            .map(|m| content_text(&m["content"]))
            .unwrap_or_default()
    };
    let system = match protocol {
        Protocol::OpenAi => first_with_role("system"),
        Protocol::Anthropic => content_text(&body["system"]),
    };
    format!("{system}\u{0}{}", first_with_role("user"))
}

/// The text of a message content that is either a string or a list of blocks.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Whether a request carries `key` as a bearer token or an API-key header.
fn carries_key(headers: &hyper::HeaderMap, key: &str) -> bool {
    let bearer = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let api_key = headers.get("x-api-key").and_then(|v| v.to_str().ok());
    bearer == Some(key) || api_key == Some(key)
}

fn recorded_headers(headers: &hyper::HeaderMap) -> BTreeMap<String, String> {
    headers
        .iter()
        .map(|(name, value)| {
            let name = name.as_str().to_ascii_lowercase();
            let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
            let value = match name.as_str() {
                "authorization" => match value.split_once(' ') {
                    Some((scheme, _)) => format!("{scheme} <redacted>"),
                    None => "<redacted>".to_string(),
                },
                "x-api-key" | "api-key" => "<redacted>".to_string(),
                _ => value,
            };
            (name, value)
        })
        .collect()
}

fn record(state: &State, recorded: RecordedRequest) {
    record_locked(&mut state.lock(), recorded);
}

fn record_locked(inner: &mut Inner, mut recorded: RecordedRequest) {
    recorded.index = inner.recorded;
    inner.recorded += 1;
    if let Some(log) = inner.log.as_mut() {
        // A failing request log must not change what the client sees; the
        // in-memory record stays authoritative.
        if let Ok(line) = serde_json::to_string(&recorded) {
            let _ = writeln!(log, "{line}").and_then(|()| log.flush());
        }
    }
    if !inner.forget {
        inner.requests.push(recorded);
    }
}

fn to_response(reply: Reply) -> Response<Full<Bytes>> {
    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = Response::new(Full::new(Bytes::from(reply.body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    // Script headers were checked by `Script::validate`; anything still
    // unrepresentable is left out rather than failing the reply.
    for (name, value) in reply.headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            headers.append(name, value);
        }
    }
    response
}

fn plain(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(message.to_string())));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    response
}
