//! The model gateway: an agent that brings its own scaffold (mini-swe-agent, a coding CLI, a
//! script) calls its model through this loopback HTTP server instead of the provider, so that
//! the provider's key never reaches the agent, every call is metered exactly as the built-in
//! agent's are, and the trial's limits hold whatever the scaffold does.
//!
//! One gateway serves one trial. It speaks the protocol of the configured model (OpenAI chat
//! completions at `/v1/chat/completions`, or Anthropic messages at `/v1/messages`), accepts only
//! the trial's own key, replaces the request's `model` with the configured one, and forwards the
//! call through [`ModelClient::forward`] (the same retries, timeouts and decoding as the built-in
//! agent). A request with `"stream": true` is answered as server-sent events made from the
//! complete reply (see [`sse`]). Each call is reported to the trial as a [`GatewayEvent`]; when a
//! limit is reached or the provider fails for good, the gateway refuses every further call and
//! reports why it stopped, once.

pub mod sse;

use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use bytes::Bytes;
use faultline_model::{ErrorKind, ModelClient, ModelError, ModelPrice, ModelResponse, Protocol};
use faultline_schema::Limits;
use faultline_schema::trajectory::{GatewayRequest, LimitFired, LimitKind, ModelCall, Tokens};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Request bodies larger than this are refused.
const MAX_REQUEST_BYTES: usize = 64 * 1024 * 1024;

/// What a gateway needs to serve one trial.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// The upstream model.
    pub client: Arc<ModelClient>,
    /// The model's price; `None` records every cost as unknown.
    pub price: Option<ModelPrice>,
    /// The trial's limits; the gateway enforces all but the wall clock, which the trial's runner
    /// holds by killing the agent.
    pub limits: Limits,
}

/// Something the trial's runner must know, in the order it happened.
#[derive(Debug, Clone, PartialEq)]
pub enum GatewayEvent {
    /// A call was answered (successfully or with the provider's error).
    Call(Box<GatewayCall>),
    /// The gateway stopped serving; every later call is refused.
    Stopped(GatewayStop),
}

/// One model call through the gateway.
#[derive(Debug, Clone, PartialEq)]
pub struct GatewayCall {
    /// Seconds from the gateway's start to the call's arrival.
    pub started_secs: f64,
    /// Usage, cost, timing and what was asked, as the trajectory records it.
    pub model: ModelCall,
    /// The reply's text, when it had any.
    pub text: Option<String>,
    /// Seconds lost to a call that failed for good for a reason that is not the agent's (its
    /// attempts and the waits between them), which the working time does not count; the waits
    /// of calls that succeeded after retries are in [`ModelCall::retry_wait_secs`].
    pub lost_secs: f64,
}

/// Why a gateway stopped serving.
#[derive(Debug, Clone, PartialEq)]
pub enum GatewayStop {
    /// A limit of the trial was reached.
    Limit(LimitFired),
    /// The provider failed for good (down, overloaded past the retry budget, or answering outside
    /// its protocol): not the agent's failure.
    Infrastructure(String),
}

/// Where a gateway listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A TCP port on the host's loopback, for agents that run on the host.
    Loopback(SocketAddr),
    /// A Unix socket, for agents in a sandbox, which reach it through a port of their own
    /// loopback (`faultline_sandbox::LoopbackRelay`).
    Socket(PathBuf),
}

/// A running gateway. Dropping it stops the server.
#[derive(Debug)]
pub struct Gateway {
    endpoint: Endpoint,
    key: String,
    protocol: Protocol,
    model: String,
    shared: Arc<Shared>,
    events: mpsc::UnboundedReceiver<GatewayEvent>,
    server: JoinHandle<()>,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// The running totals the limits are checked against.
#[derive(Debug)]
struct Meter {
    calls: u32,
    tokens: u64,
    cost_usd: f64,
    cost_unknown: bool,
    waiting_secs: f64,
    stopped: Option<GatewayStop>,
}

#[derive(Debug)]
struct Shared {
    config: GatewayConfig,
    key: String,
    started: Instant,
    meter: Mutex<Meter>,
    events: mpsc::UnboundedSender<GatewayEvent>,
}

impl Gateway {
    /// Starts a gateway on a free loopback port with a fresh random key.
    pub async fn start(config: GatewayConfig) -> std::io::Result<Gateway> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        Ok(Self::serving(
            config,
            Endpoint::Loopback(addr),
            Listener::Tcp(listener),
        ))
    }

    /// Starts a gateway on a new Unix socket at `path` that any local user may connect to (the
    /// sandbox's uid must; the key, not the socket's mode, is what admits a call).
    pub async fn start_on_socket(config: GatewayConfig, path: &Path) -> std::io::Result<Gateway> {
        let listener = UnixListener::bind(path)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
        Ok(Self::serving(
            config,
            Endpoint::Socket(path.to_path_buf()),
            Listener::Unix(listener),
        ))
    }

    fn serving(config: GatewayConfig, endpoint: Endpoint, listener: Listener) -> Gateway {
        // The key is a secret, not an experimental choice, so it comes from the OS-seeded
        // generator rather than the run's seed.
        let mut secret = [0u8; 24];
        rand::fill(&mut secret);
        let key = format!("fl-trial-{}", hex::encode(secret));
        let (tx, events) = mpsc::unbounded_channel();
        let cost_unknown = config.price.is_none();
        let protocol = config.client.config().protocol;
        let model = config.client.config().model.clone();
        let shared = Arc::new(Shared {
            config,
            key: key.clone(),
            started: Instant::now(),
            meter: Mutex::new(Meter {
                calls: 0,
                tokens: 0,
                cost_usd: 0.0,
                cost_unknown,
                waiting_secs: 0.0,
                stopped: None,
            }),
            events: tx,
        });
        let server = tokio::spawn(serve(listener, shared.clone()));
        Gateway {
            endpoint,
            key,
            protocol,
            model,
            shared,
            events,
            server,
        }
    }

    /// The `HOST:PORT` an agent on the host connects to; none for a gateway on a socket, which
    /// agents reach through a relay at an address of their sandbox.
    pub fn loopback(&self) -> Option<String> {
        match &self.endpoint {
            Endpoint::Loopback(addr) => Some(addr.to_string()),
            Endpoint::Socket(_) => None,
        }
    }

    /// Where the gateway listens.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The trial's key: accepted by this gateway only, worthless anywhere else.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The protocol agents must speak to this gateway: the upstream model's.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// The upstream model's name.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The environment an agent is given to reach its model: the base URLs and keys the common
    /// client libraries read, and faultline's own names for them. `reach` is the `HOST:PORT` the
    /// agent connects to: the gateway's own address on the host, or the relay's port in a
    /// sandbox.
    pub fn agent_env(&self, reach: &str) -> Vec<(String, String)> {
        let openai = format!("http://{reach}/v1");
        let mut env = vec![
            ("FAULTLINE_GATEWAY_URL".to_string(), openai.clone()),
            ("FAULTLINE_GATEWAY_KEY".to_string(), self.key.clone()),
            ("FAULTLINE_MODEL".to_string(), self.model.clone()),
        ];
        match self.protocol {
            Protocol::OpenAiChat => {
                env.push(("OPENAI_BASE_URL".into(), openai.clone()));
                env.push(("OPENAI_API_BASE".into(), openai));
                env.push(("OPENAI_API_KEY".into(), self.key.clone()));
                env.push(("FAULTLINE_PROTOCOL".into(), "openai".into()));
            }
            Protocol::AnthropicMessages => {
                env.push(("ANTHROPIC_BASE_URL".into(), format!("http://{reach}")));
                env.push(("ANTHROPIC_API_KEY".into(), self.key.clone()));
                env.push(("FAULTLINE_PROTOCOL".into(), "anthropic".into()));
            }
        }
        env
    }

    /// The next event; `None` only after the server has gone.
    pub async fn next_event(&mut self) -> Option<GatewayEvent> {
        self.events.recv().await
    }

    /// The next event if one is waiting, without waiting for one.
    pub fn try_next_event(&mut self) -> Result<GatewayEvent, mpsc::error::TryRecvError> {
        self.events.try_recv()
    }

    /// Seconds since the start that were not spent waiting on the provider's retries or on
    /// calls that failed for good: what the working-time limit counts.
    pub fn working_secs(&self) -> f64 {
        let waiting = self.shared.meter().waiting_secs;
        self.shared.started.elapsed().as_secs_f64() - waiting
    }

    /// Seconds spent waiting on retries and failed calls.
    pub fn waiting_secs(&self) -> f64 {
        self.shared.meter().waiting_secs
    }

    /// Stops the gateway because the working-time limit passed between calls (only the trial's
    /// runner can see that); later calls are refused. Returns the stop, unless it had already
    /// stopped.
    pub fn stop_for_working_time(&self) -> Option<GatewayStop> {
        let max = self.shared.config.limits.working_secs?;
        if self.working_secs() < max as f64 {
            return None;
        }
        let stop = GatewayStop::Limit(LimitFired {
            limit: LimitKind::WorkingSecs,
            value: max as f64,
        });
        let mut meter = self.shared.meter();
        if meter.stopped.is_some() {
            return None;
        }
        meter.stopped = Some(stop.clone());
        Some(stop)
    }
}

impl Shared {
    fn meter(&self) -> std::sync::MutexGuard<'_, Meter> {
        // The meter's fields are plain counters; a panic elsewhere leaves them usable.
        self.meter.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The limit that refuses the next call, checked before it is forwarded. Costs and tokens
    /// are known only after a call, so a trial overshoots them by at most one call, as the
    /// built-in agent does.
    fn limit_reached(&self, meter: &Meter) -> Option<LimitFired> {
        let limits = &self.config.limits;
        let fired = |limit, value| Some(LimitFired { limit, value });
        if meter.calls >= limits.steps {
            return fired(LimitKind::Steps, limits.steps.into());
        }
        if let Some(max) = limits.cost_usd
            && !meter.cost_unknown
            && meter.cost_usd >= max
        {
            return fired(LimitKind::CostUsd, max);
        }
        if let Some(max) = limits.tokens
            && meter.tokens >= max
        {
            return fired(LimitKind::Tokens, max as f64);
        }
        let elapsed = self.started.elapsed().as_secs_f64();
        if elapsed >= limits.wall_secs as f64 {
            return fired(LimitKind::WallSecs, limits.wall_secs as f64);
        }
        if let Some(max) = limits.working_secs
            && elapsed - meter.waiting_secs >= max as f64
        {
            return fired(LimitKind::WorkingSecs, max as f64);
        }
        None
    }

    /// Marks the gateway stopped (once) and tells the runner.
    fn stop(&self, meter: &mut Meter, stop: GatewayStop) {
        if meter.stopped.is_none() {
            meter.stopped = Some(stop.clone());
            let _ = self.events.send(GatewayEvent::Stopped(stop));
        }
    }
}

enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

async fn serve(listener: Listener, shared: Arc<Shared>) {
    loop {
        match &listener {
            Listener::Tcp(l) => {
                if let Ok((stream, _)) = l.accept().await {
                    tokio::spawn(connection(stream, shared.clone()));
                }
            }
            Listener::Unix(l) => {
                if let Ok((stream, _)) = l.accept().await {
                    tokio::spawn(connection(stream, shared.clone()));
                }
            }
        }
    }
}

async fn connection<S>(stream: S, shared: Arc<Shared>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |request| {
        let shared = shared.clone();
        async move { Ok::<_, Infallible>(handle(&shared, request).await) }
    });
    let _ = http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

/// Which protocol a request's path belongs to.
fn path_protocol(path: &str) -> Option<Protocol> {
    match path.trim_end_matches('/') {
        "/v1/chat/completions" | "/chat/completions" => Some(Protocol::OpenAiChat),
        "/v1/messages" | "/messages" => Some(Protocol::AnthropicMessages),
        _ => None,
    }
}

async fn handle(shared: &Shared, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let upstream = shared.config.client.config().protocol;
    let path = request.uri().path().to_string();
    if request.method() == Method::GET && path.trim_end_matches('/').ends_with("/models") {
        return models(shared, upstream, &request);
    }
    let Some(protocol) = path_protocol(&path) else {
        return error(
            upstream,
            StatusCode::NOT_FOUND,
            "not_found",
            &format!(
                "no such endpoint {path}; this gateway serves {}",
                endpoint(upstream)
            ),
        );
    };
    if !authorized(&shared.key, &request) {
        return error(
            protocol,
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "invalid API key: use this trial's key",
        );
    }
    if protocol != upstream {
        return error(
            protocol,
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            &format!(
                "this trial's model speaks another protocol; call {}",
                endpoint(upstream)
            ),
        );
    }
    if request.method() != Method::POST {
        return error(
            protocol,
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            "use POST",
        );
    }
    let started_secs = shared.started.elapsed().as_secs_f64();
    let bytes = match Limited::new(request.into_body(), MAX_REQUEST_BYTES)
        .collect()
        .await
    {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            return error(
                protocol,
                StatusCode::PAYLOAD_TOO_LARGE,
                "invalid_request_error",
                &format!("request body unreadable or over {MAX_REQUEST_BYTES} bytes: {e}"),
            );
        }
    };
    let body: Value = match serde_json::from_slice(&bytes) {
        Ok(body @ Value::Object(_)) => body,
        _ => {
            return error(
                protocol,
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "the request body is not a JSON object",
            );
        }
    };
    {
        let mut meter = shared.meter();
        if let Some(stop) = meter.stopped.clone() {
            return refusal(protocol, &stop);
        }
        if let Some(limit) = shared.limit_reached(&meter) {
            let stop = GatewayStop::Limit(limit);
            shared.stop(&mut meter, stop.clone());
            return refusal(protocol, &stop);
        }
        // Counted before the call, so concurrent calls cannot all slip under the step limit.
        meter.calls += 1;
    }
    let summary = GatewayRequest {
        stream: body.get("stream").and_then(Value::as_bool).unwrap_or(false),
        messages: body
            .get("messages")
            .and_then(Value::as_array)
            .map_or(0, Vec::len),
        tools: body
            .get("tools")
            .and_then(Value::as_array)
            .map_or(0, Vec::len),
        bytes: bytes.len() as u64,
        status: 200,
        error: None,
        response_id: None,
    };
    let call_started = Instant::now();
    let failed_attempts = AtomicU32::new(0);
    let result = shared.config.client.forward(body, &failed_attempts).await;
    match result {
        Ok(reply) => answered(shared, protocol, started_secs, summary, reply),
        Err(e) => failed(shared, protocol, started_secs, summary, call_started, e),
    }
}

fn answered(
    shared: &Shared,
    protocol: Protocol,
    started_secs: f64,
    request: GatewayRequest,
    reply: ModelResponse,
) -> Response<Full<Bytes>> {
    let cost = match (&shared.config.price, &reply.usage) {
        (Some(price), Some(usage)) => price.cost(usage),
        _ => None,
    };
    let stream = request.stream;
    let mut model = model_call(&reply, cost);
    let response_id = reply
        .raw
        .get("id")
        .and_then(Value::as_str)
        .map(str::to_string);
    model.request = Some(GatewayRequest {
        response_id,
        ..request
    });
    {
        let mut meter = shared.meter();
        meter.tokens += reply.usage.as_ref().map_or(0, |u| u.total_tokens());
        match cost {
            Some(c) => meter.cost_usd += c,
            None => meter.cost_unknown = true,
        }
        meter.waiting_secs += reply.retry.waiting().as_secs_f64();
    }
    let _ = shared.events.send(GatewayEvent::Call(Box::new(GatewayCall {
        started_secs,
        model,
        text: reply.text.clone(),
        lost_secs: 0.0,
    })));
    if stream {
        let events = match protocol {
            Protocol::OpenAiChat => sse::openai(&reply.raw),
            Protocol::AnthropicMessages => sse::anthropic(&reply.raw),
        };
        return respond(StatusCode::OK, "text/event-stream", events.into_bytes());
    }
    let body = serde_json::to_vec(&reply.raw).unwrap_or_default();
    respond(StatusCode::OK, "application/json", body)
}

fn failed(
    shared: &Shared,
    protocol: Protocol,
    started_secs: f64,
    mut request: GatewayRequest,
    call_started: Instant,
    e: ModelError,
) -> Response<Full<Bytes>> {
    let kind = e.kind();
    let message = format!("{e} ({})", kind.as_str());
    let infrastructure = !agents_own(kind);
    let status = match &e {
        ModelError::Status { status, .. } if !infrastructure => {
            StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_REQUEST)
        }
        _ if !infrastructure => StatusCode::BAD_REQUEST,
        _ => StatusCode::BAD_GATEWAY,
    };
    request.status = status.as_u16();
    request.error = Some(message.clone());
    let billed = e.billed_usage().cloned();
    let cost = match (&shared.config.price, &billed) {
        (Some(price), Some(usage)) => price.cost(usage),
        _ => None,
    };
    {
        let mut meter = shared.meter();
        meter.tokens += billed.as_ref().map_or(0, |u| u.total_tokens());
        match cost {
            Some(c) => meter.cost_usd += c,
            None if billed.is_some() => meter.cost_unknown = true,
            None => {}
        }
        if infrastructure {
            meter.waiting_secs += call_started.elapsed().as_secs_f64();
        } else {
            meter.waiting_secs += e.retry_stats().waiting().as_secs_f64();
        }
    }
    let retry = e.retry_stats();
    let lost_secs = if infrastructure {
        call_started.elapsed().as_secs_f64() - retry.waiting().as_secs_f64()
    } else {
        0.0
    };
    let _ = shared.events.send(GatewayEvent::Call(Box::new(GatewayCall {
        started_secs,
        model: ModelCall {
            tokens: billed.as_ref().map(tokens),
            raw_usage: billed.as_ref().map(|u| u.raw.clone()),
            cost_usd: cost,
            latency_secs: call_started.elapsed().as_secs_f64(),
            retry_wait_secs: retry.waiting().as_secs_f64(),
            retries: retry.retries,
            finish_reason: None,
            request: Some(request),
        },
        text: None,
        lost_secs,
    })));
    if infrastructure {
        let mut meter = shared.meter();
        shared.stop(&mut meter, GatewayStop::Infrastructure(message.clone()));
    }
    error(protocol, status, kind.as_str(), &message)
}

/// Whether a call that failed for good failed because of what the agent sent: a prompt over the
/// context window, or a request the provider (or the gateway) could not accept. Such an answer
/// is passed to the agent, whose scaffold decides what to do; every other failure (the provider
/// down, overloaded past the retries, misconfigured, or answering outside its protocol) is not
/// the agent's and stops the trial as an infrastructure error.
fn agents_own(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::ContextLength | ErrorKind::BadRequest | ErrorKind::InvalidRequest
    )
}

/// The trajectory's record of a successful call.
pub fn model_call(reply: &ModelResponse, cost_usd: Option<f64>) -> ModelCall {
    ModelCall {
        tokens: reply.usage.as_ref().map(tokens),
        raw_usage: reply.usage.as_ref().map(|u| u.raw.clone()),
        cost_usd,
        latency_secs: reply.total_time.as_secs_f64(),
        retry_wait_secs: reply.retry.waiting().as_secs_f64(),
        retries: reply.retry.retries,
        finish_reason: Some(format!("{:?}", reply.finish_reason).to_lowercase()),
        request: None,
    }
}

fn tokens(u: &faultline_model::Usage) -> Tokens {
    Tokens {
        input: u.input_tokens,
        cached_input: u.cached_input_tokens,
        cache_write: u.cache_write_tokens,
        output: u.output_tokens,
        reasoning: u.reasoning_tokens.unwrap_or(0),
    }
}

/// Whether the request carries the trial's key, as a bearer token or an API-key header.
fn authorized(key: &str, request: &Request<Incoming>) -> bool {
    let headers = request.headers();
    let given = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok()))
        .or_else(|| headers.get("api-key").and_then(|v| v.to_str().ok()));
    given.is_some_and(|given| {
        given.len() == key.len()
            && given
                .bytes()
                .zip(key.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    })
}

fn endpoint(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::OpenAiChat => "POST /v1/chat/completions",
        Protocol::AnthropicMessages => "POST /v1/messages",
    }
}

/// The model list some clients ask for before their first call.
fn models(
    shared: &Shared,
    upstream: Protocol,
    request: &Request<Incoming>,
) -> Response<Full<Bytes>> {
    if !authorized(&shared.key, request) {
        return error(
            upstream,
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "invalid API key: use this trial's key",
        );
    }
    let id = &shared.config.client.config().model;
    let body =
        json!({"object": "list", "data": [{"id": id, "object": "model", "owned_by": "faultline"}]});
    respond(
        StatusCode::OK,
        "application/json",
        body.to_string().into_bytes(),
    )
}

/// The answer to a call after the gateway stopped: a limit is 429-free on purpose (clients
/// retry 429 and 5xx), so a scaffold sees a refusal it will not retry.
fn refusal(protocol: Protocol, stop: &GatewayStop) -> Response<Full<Bytes>> {
    match stop {
        GatewayStop::Limit(fired) => error(
            protocol,
            StatusCode::FORBIDDEN,
            "limit_reached",
            &format!(
                "this trial's {} limit ({}) is reached; no more model calls",
                limit_name(fired.limit),
                fired.value
            ),
        ),
        GatewayStop::Infrastructure(why) => error(
            protocol,
            StatusCode::BAD_GATEWAY,
            "upstream_error",
            &format!("the model API failed: {why}"),
        ),
    }
}

/// The option of `faultline run` that sets a limit, as users know it.
pub fn limit_name(limit: LimitKind) -> &'static str {
    match limit {
        LimitKind::Steps => "steps",
        LimitKind::CostUsd => "cost",
        LimitKind::Tokens => "tokens",
        LimitKind::WallSecs => "wall-time",
        LimitKind::WorkingSecs => "working-time",
    }
}

/// An error in the shape the protocol's clients parse.
fn error(
    protocol: Protocol,
    status: StatusCode,
    kind: &str,
    message: &str,
) -> Response<Full<Bytes>> {
    let body = match protocol {
        Protocol::OpenAiChat => {
            json!({"error": {"message": message, "type": kind, "code": kind}})
        }
        Protocol::AnthropicMessages => {
            json!({"type": "error", "error": {"type": kind, "message": message}})
        }
    };
    respond(status, "application/json", body.to_string().into_bytes())
}

fn respond(status: StatusCode, content_type: &'static str, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}
