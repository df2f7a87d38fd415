//! The gateway's HTTP side: accepting connections, admitting a call, forwarding it, and
//! answering in the protocol's shape.

use crate::{
    Arrival, GatewayCall, GatewayEvent, GatewayStop, HOLD_PATIENCE, Shared, limit_name, model_call,
    sse, tokens,
};
use bytes::Bytes;
use faultline_model::{ErrorKind, ModelError, ModelResponse, Protocol};
use faultline_schema::trajectory::{GatewayRequest, ModelCall};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::time::Instant;
use tokio::net::{TcpListener, UnixListener};

/// Request bodies larger than this are refused.
const MAX_REQUEST_BYTES: usize = 64 * 1024 * 1024;

pub(crate) enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

pub(crate) async fn serve(listener: Listener, shared: Arc<Shared>) {
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
    // Errors come in the shape of the protocol the path belongs to, which its client parses.
    let shape = path_protocol(&path).unwrap_or(upstream);
    if !authorized(&shared.key, &request) {
        return error(
            shape,
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "invalid API key: use this trial's key",
        );
    }
    if request.method() == Method::GET && path.trim_end_matches('/').ends_with("/models") {
        return models(shared);
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
    if shared.config.hold_calls {
        let (go, wait) = tokio::sync::oneshot::channel();
        let sent = shared.events.send(GatewayEvent::Arrived(Arrival(Some(go))));
        if sent.is_ok() {
            // A trial that is gone, or that dropped the arrival, lets the call through.
            let _ = tokio::time::timeout(HOLD_PATIENCE, wait).await;
        }
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
    let elapsed = call_started.elapsed().as_secs_f64();
    let retry = e.retry_stats();
    let retry_wait = retry.waiting().as_secs_f64();
    // A failure that is not the agent's costs it no working time: all of the call is lost;
    // otherwise only the waits between attempts are.
    let lost_secs = if infrastructure {
        elapsed - retry_wait
    } else {
        0.0
    };
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
        meter.waiting_secs += retry_wait + lost_secs;
    }
    let _ = shared.events.send(GatewayEvent::Call(Box::new(GatewayCall {
        started_secs,
        model: ModelCall {
            tokens: billed.as_ref().map(tokens),
            raw_usage: billed.as_ref().map(|u| u.raw.clone()),
            cost_usd: cost,
            latency_secs: elapsed,
            retry_wait_secs: retry_wait,
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
fn models(shared: &Shared) -> Response<Full<Bytes>> {
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
