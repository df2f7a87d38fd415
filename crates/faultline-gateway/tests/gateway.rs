//! The gateway against the scripted model server over real HTTP: what an agent's client sees,
//! what reaches the provider, and what the trial is told.

use std::sync::Arc;
use std::time::Duration;

use faultline_gateway::{Gateway, GatewayConfig, GatewayEvent, GatewayStop};
use faultline_model::{ApiKey, ModelClient, ModelConfig, PricingTable, Protocol, RetryPolicy};
use faultline_schema::Limits;
use faultline_schema::trajectory::LimitKind;
use faultline_scripted::{Script, ScriptedServer, ServerOptions, Step, StepUsage};
use serde_json::{Value, json};

const MODEL: &str = "upstream-model";
const REAL_KEY: &str = "sk-real-provider-key";

fn text_step(text: &str, input: u64, output: u64) -> Step {
    Step::Text {
        text: text.into(),
        truncated: false,
        usage: Some(StepUsage {
            input,
            output,
            ..StepUsage::default()
        }),
    }
}

fn upstream(server_url: String, protocol: Protocol, max_retries: u32) -> Arc<ModelClient> {
    let mut config = ModelConfig::new(protocol, MODEL).with_base_url(server_url);
    config.retry = RetryPolicy {
        max_retries,
        initial_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(40),
        multiplier: 2.0,
        jitter: 0.0,
        jitter_seed: 1,
        max_retry_after: Duration::from_secs(1),
        max_total_wait: None,
    };
    config.attempt_timeout = Duration::from_secs(10);
    Arc::new(ModelClient::with_resolved_api_key(config, Some(ApiKey::new(REAL_KEY))).unwrap())
}

fn price() -> faultline_model::ModelPrice {
    PricingTable::from_toml_str(&format!(
        "schema_version = 1\ntable_version = \"test\"\nupdated = \"2026-12-01\"\n\n\
         [models.\"{MODEL}\"]\ninput = 1000.0\noutput = 2000.0\nsource = \"test\"\nas_of = \"2026-12-01\"\n"
    ))
    .unwrap()
    .price(MODEL)
    .cloned()
    .unwrap()
}

async fn start(server: &ScriptedServer, protocol: Protocol, limits: Limits) -> Gateway {
    let url = match protocol {
        Protocol::OpenAiChat => server.openai_base_url(),
        Protocol::AnthropicMessages => server.anthropic_base_url(),
    };
    Gateway::start(GatewayConfig {
        client: upstream(url, protocol, 1),
        price: Some(price()),
        limits,
        hold_calls: false,
    })
    .await
    .unwrap()
}

fn openai_url(gateway: &Gateway) -> String {
    format!("{}/v1", root_url(gateway))
}

fn root_url(gateway: &Gateway) -> String {
    format!("http://{}", gateway.loopback().unwrap())
}

/// A call as an agent's OpenAI client makes it.
async fn openai_call(gateway: &Gateway, key: &str, body: Value) -> (u16, String) {
    let response = reqwest::Client::new()
        .post(format!("{}/chat/completions", openai_url(gateway)))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

fn chat(text: &str) -> Value {
    json!({"model": "whatever-the-agent-says", "messages": [{"role": "user", "content": text}]})
}

fn calls(gateway: &mut Gateway) -> Vec<GatewayEvent> {
    std::iter::from_fn(|| gateway.try_next_event().ok()).collect()
}

#[tokio::test]
async fn a_call_is_forwarded_with_the_real_key_and_the_configured_model_and_metered() {
    let options = ServerOptions {
        require_key: Some(REAL_KEY.into()),
        ..ServerOptions::default()
    };
    let server =
        ScriptedServer::start_with(Script::new(vec![text_step("hello", 1000, 500)]), options)
            .await
            .unwrap();
    let mut gateway = start(&server, Protocol::OpenAiChat, Limits::default()).await;
    let (status, body) = openai_call(&gateway, gateway.key(), chat("hi")).await;
    assert_eq!(status, 200, "{body}");
    let reply: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(reply["choices"][0]["message"]["content"], "hello");

    let seen = server.requests();
    assert_eq!(seen.len(), 1);
    // The provider requires the real key and answered, so the real key was sent.
    assert_eq!(seen[0].body["model"], MODEL);

    let events = calls(&mut gateway);
    let [GatewayEvent::Call(call)] = events.as_slice() else {
        panic!("one call expected, got {events:?}");
    };
    let tokens = call.model.tokens.unwrap();
    assert_eq!((tokens.input, tokens.output), (1000, 500));
    // 1000 input tokens at $1000/M plus 500 output tokens at $2000/M.
    assert!((call.model.cost_usd.unwrap() - 2.0).abs() < 1e-9);
    let request = call.model.request.as_ref().unwrap();
    assert_eq!((request.messages, request.status), (1, 200));
    assert_eq!(call.text.as_deref(), Some("hello"));
}

#[tokio::test]
async fn a_wrong_key_is_refused_and_nothing_reaches_the_provider() {
    let server = ScriptedServer::start(Script::new(vec![Step::text("never")]))
        .await
        .unwrap();
    let mut gateway = start(&server, Protocol::OpenAiChat, Limits::default()).await;
    for key in [REAL_KEY, "", "fl-trial-guess"] {
        let (status, _) = openai_call(&gateway, key, chat("hi")).await;
        assert_eq!(status, 401, "key {key:?}");
    }
    assert!(server.requests().is_empty());
    assert!(calls(&mut gateway).is_empty());
}

#[tokio::test]
async fn the_other_protocol_and_unknown_paths_get_clear_errors() {
    let server = ScriptedServer::start(Script::new(vec![])).await.unwrap();
    let gateway = start(&server, Protocol::OpenAiChat, Limits::default()).await;
    let client = reqwest::Client::new();
    let anthropic = client
        .post(format!("{}/v1/messages", root_url(&gateway)))
        .header("x-api-key", gateway.key())
        .json(&json!({"model": "m", "max_tokens": 10, "messages": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(anthropic.status().as_u16(), 400);
    let text = anthropic.text().await.unwrap();
    assert!(text.contains("/v1/chat/completions"), "{text}");
    let unknown = client
        .post(format!("{}/v1/embeddings", root_url(&gateway)))
        .bearer_auth(gateway.key())
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status().as_u16(), 404);
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn the_step_limit_refuses_the_next_call_and_stops_the_trial_once() {
    let server = ScriptedServer::start(Script::new(vec![
        text_step("one", 10, 1),
        text_step("two", 10, 1),
        text_step("three", 10, 1),
    ]))
    .await
    .unwrap();
    let limits = Limits {
        steps: 2,
        ..Limits::default()
    };
    let mut gateway = start(&server, Protocol::OpenAiChat, limits).await;
    let key = gateway.key().to_string();
    for _ in 0..2 {
        assert_eq!(openai_call(&gateway, &key, chat("go")).await.0, 200);
    }
    for _ in 0..2 {
        let (status, body) = openai_call(&gateway, &key, chat("go")).await;
        assert_eq!(status, 403);
        assert!(body.contains("steps limit"), "{body}");
    }
    assert_eq!(server.requests().len(), 2);
    let events = calls(&mut gateway);
    let stops: Vec<&GatewayStop> = events
        .iter()
        .filter_map(|e| match e {
            GatewayEvent::Stopped(s) => Some(s),
            GatewayEvent::Call(_) | GatewayEvent::Arrived(_) => None,
        })
        .collect();
    assert_eq!(events.len(), 3, "two calls and one stop: {events:?}");
    let [GatewayStop::Limit(fired)] = stops.as_slice() else {
        panic!("one limit stop expected: {stops:?}");
    };
    assert_eq!((fired.limit, fired.value), (LimitKind::Steps, 2.0));
}

#[tokio::test]
async fn the_cost_limit_fires_after_the_call_that_reaches_it() {
    let server = ScriptedServer::start(Script::new(vec![
        text_step("expensive", 1000, 500),
        text_step("never", 1, 1),
    ]))
    .await
    .unwrap();
    let limits = Limits {
        cost_usd: Some(1.5),
        ..Limits::default()
    };
    let mut gateway = start(&server, Protocol::OpenAiChat, limits).await;
    let key = gateway.key().to_string();
    assert_eq!(openai_call(&gateway, &key, chat("go")).await.0, 200);
    assert_eq!(openai_call(&gateway, &key, chat("go")).await.0, 403);
    let stop = calls(&mut gateway).into_iter().find_map(|e| match e {
        GatewayEvent::Stopped(GatewayStop::Limit(fired)) => Some(fired.limit),
        _ => None,
    });
    assert_eq!(stop, Some(LimitKind::CostUsd));
}

#[tokio::test]
async fn an_outage_past_the_retries_stops_the_trial_as_infrastructure() {
    let server = ScriptedServer::start(Script::new(vec![
        Step::Error {
            status: 503,
            message: None,
            retry_after: None,
            retry_after_ms: None,
            headers: Default::default(),
        };
        3
    ]))
    .await
    .unwrap();
    let mut gateway = start(&server, Protocol::OpenAiChat, Limits::default()).await;
    let key = gateway.key().to_string();
    let (status, body) = openai_call(&gateway, &key, chat("go")).await;
    assert_eq!(status, 502, "{body}");
    // One attempt and one retry reached the provider; later calls are refused at the gateway.
    assert_eq!(server.requests().len(), 2);
    assert_eq!(openai_call(&gateway, &key, chat("again")).await.0, 502);
    assert_eq!(server.requests().len(), 2);
    let events = calls(&mut gateway);
    assert!(
        matches!(&events[..], [GatewayEvent::Call(c), GatewayEvent::Stopped(GatewayStop::Infrastructure(_))] if c.lost_secs > 0.0 && c.model.retries == 1),
        "{events:?}"
    );
}

#[tokio::test]
async fn a_prompt_over_the_context_window_is_the_agents_own_and_passes_through() {
    let server = ScriptedServer::start(Script::new(vec![
        Step::ContextLength {},
        text_step("fits now", 5, 1),
    ]))
    .await
    .unwrap();
    let mut gateway = start(&server, Protocol::OpenAiChat, Limits::default()).await;
    let key = gateway.key().to_string();
    let (status, body) = openai_call(&gateway, &key, chat("huge")).await;
    assert_eq!(status, 400);
    assert!(body.contains("context"), "{body}");
    assert_eq!(openai_call(&gateway, &key, chat("small")).await.0, 200);
    assert!(
        calls(&mut gateway)
            .iter()
            .all(|e| matches!(e, GatewayEvent::Call(_)))
    );
}

#[tokio::test]
async fn a_streamed_request_gets_events_that_reassemble_to_the_reply() {
    for protocol in [Protocol::OpenAiChat, Protocol::AnthropicMessages] {
        let server = ScriptedServer::start(Script::new(vec![Step::ToolCall {
            command: "cargo test".into(),
            text: Some("checking".into()),
            id: None,
            raw_arguments: None,
            usage: Some(StepUsage {
                input: 7,
                output: 3,
                ..StepUsage::default()
            }),
        }]))
        .await
        .unwrap();
        let mut gateway = start(&server, protocol, Limits::default()).await;
        let client = reqwest::Client::new();
        let response = match protocol {
            Protocol::OpenAiChat => {
                let mut body = chat("go");
                body["stream"] = json!(true);
                body["stream_options"] = json!({"include_usage": true});
                client
                    .post(format!("{}/chat/completions", openai_url(&gateway)))
                    .bearer_auth(gateway.key())
                    .json(&body)
            }
            Protocol::AnthropicMessages => client
                .post(format!("{}/v1/messages", root_url(&gateway)))
                .header("x-api-key", gateway.key())
                .json(&json!({"model": "m", "max_tokens": 100, "stream": true,
                              "messages": [{"role": "user", "content": "go"}]})),
        }
        .send()
        .await
        .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        assert_eq!(
            response.headers()["content-type"],
            "text/event-stream",
            "{protocol:?}"
        );
        let stream = response.text().await.unwrap();
        assert!(stream.contains("checking"), "{stream}");
        assert!(stream.contains("cargo test"), "{stream}");
        // The provider was asked without streaming, so the usage is exact.
        let seen = server.requests();
        assert!(seen[0].body.get("stream").is_none(), "{protocol:?}");
        let events = calls(&mut gateway);
        let [GatewayEvent::Call(call)] = events.as_slice() else {
            panic!("{events:?}");
        };
        assert!(call.model.request.as_ref().unwrap().stream);
        assert_eq!(call.model.tokens.unwrap().output, 3);
    }
}

#[tokio::test]
async fn a_held_call_reaches_the_provider_only_once_the_trial_lets_it_go() {
    let server = ScriptedServer::start(Script::new(vec![text_step("answer", 1, 1)]))
        .await
        .unwrap();
    let url = server.openai_base_url();
    let mut gateway = Gateway::start(GatewayConfig {
        client: upstream(url, Protocol::OpenAiChat, 0),
        price: None,
        limits: Limits::default(),
        hold_calls: true,
    })
    .await
    .unwrap();
    let (base, key) = (openai_url(&gateway), gateway.key().to_string());
    let call = tokio::spawn(async move {
        reqwest::Client::new()
            .post(format!("{base}/chat/completions"))
            .bearer_auth(key)
            .json(&chat("hi"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    });
    let Some(GatewayEvent::Arrived(arrival)) = gateway.next_event().await else {
        panic!("the call's arrival comes first");
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(server.requests().is_empty(), "a held call was forwarded");
    arrival.proceed();
    assert_eq!(call.await.unwrap(), 200);
    assert_eq!(server.requests().len(), 1);
    assert!(matches!(
        gateway.next_event().await,
        Some(GatewayEvent::Call(_))
    ));
}
