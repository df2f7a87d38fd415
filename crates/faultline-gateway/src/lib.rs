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

mod serve;
use serve::Listener;
pub mod sse;

use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use faultline_model::{ModelClient, ModelPrice, ModelResponse, Protocol};
use faultline_schema::Limits;
use faultline_schema::trajectory::{LimitFired, LimitKind, ModelCall, Spent, Tokens};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

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
    /// Hold each admitted call until the trial has seen it arrive ([`GatewayEvent::Arrived`]):
    /// while its agent waits for the answer, the workspace shows what its last command did.
    pub hold_calls: bool,
}

/// Something the trial's runner must know, in the order it happened.
#[derive(Debug)]
pub enum GatewayEvent {
    /// A call was admitted and, with [`GatewayConfig::hold_calls`], waits to be forwarded until
    /// this is let go (or dropped).
    Arrived(Arrival),
    /// A call was answered (successfully or with the provider's error).
    Call(Box<GatewayCall>),
    /// The gateway stopped serving; every later call is refused.
    Stopped(GatewayStop),
}

/// A call held at the gateway until the trial lets it go.
#[derive(Debug)]
pub struct Arrival(Option<tokio::sync::oneshot::Sender<()>>);

impl Arrival {
    /// Lets the call be forwarded.
    pub fn proceed(mut self) {
        if let Some(go) = self.0.take() {
            let _ = go.send(());
        }
    }
}

/// How long a held call waits for the trial before it is forwarded anyway.
const HOLD_PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);

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
pub(crate) struct Meter {
    calls: u32,
    tokens: u64,
    cost_usd: f64,
    cost_unknown: bool,
    waiting_secs: f64,
    stopped: Option<GatewayStop>,
}

#[derive(Debug)]
pub(crate) struct Shared {
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
        let server = tokio::spawn(serve::serve(listener, shared.clone()));
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

    /// The limit that refuses the next call, checked before it is forwarded.
    fn limit_reached(&self, meter: &Meter) -> Option<LimitFired> {
        let wall_secs = self.started.elapsed().as_secs_f64();
        self.config.limits.first_reached(&Spent {
            steps: meter.calls,
            cost_usd: (!meter.cost_unknown).then_some(meter.cost_usd),
            tokens: meter.tokens,
            wall_secs,
            working_secs: wall_secs - meter.waiting_secs,
        })
    }

    /// Marks the gateway stopped (once) and tells the runner.
    fn stop(&self, meter: &mut Meter, stop: GatewayStop) {
        if meter.stopped.is_none() {
            meter.stopped = Some(stop.clone());
            let _ = self.events.send(GatewayEvent::Stopped(stop));
        }
    }
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

pub(crate) fn tokens(u: &faultline_model::Usage) -> Tokens {
    Tokens {
        input: u.input_tokens,
        cached_input: u.cached_input_tokens,
        cache_write: u.cache_write_tokens,
        output: u.output_tokens,
        reasoning: u.reasoning_tokens.unwrap_or(0),
    }
}

/// The option of `faultline run` that sets a limit, as users know it.
pub(crate) fn limit_name(limit: LimitKind) -> &'static str {
    match limit {
        LimitKind::Steps => "steps",
        LimitKind::CostUsd => "cost",
        LimitKind::Tokens => "tokens",
        LimitKind::WallSecs => "wall-time",
        LimitKind::WorkingSecs => "working-time",
    }
}
