//! The client against the scripted server over real loopback HTTP.

use std::collections::BTreeMap;
use std::time::Duration;

use faultline_model::{
    ApiKey, ErrorKind, FinishReason, Message, ModelClient, ModelConfig, ModelError, ModelRequest,
    PricingTable, Protocol, RetryPolicy, TOOLS_REFUSED, ToolCall, ToolDefinition,
};
use faultline_scripted::{RecordedRequest, Script, ScriptedServer, Step, StepUsage};

const BOTH: [Protocol; 2] = [Protocol::OpenAiChat, Protocol::AnthropicMessages];

/// Short waits so retry tests stay fast; jitter off unless a test wants it.
fn fast_retry(max_retries: u32) -> RetryPolicy {
    RetryPolicy {
        max_retries,
        initial_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(80),
        multiplier: 2.0,
        jitter: 0.0,
        jitter_seed: 1,
        max_retry_after: Duration::from_secs(5),
        max_total_wait: None,
    }
}

fn config(server: &ScriptedServer, protocol: Protocol) -> ModelConfig {
    let base_url = match protocol {
        Protocol::OpenAiChat => server.openai_base_url(),
        Protocol::AnthropicMessages => server.anthropic_base_url(),
    };
    let mut config = ModelConfig::new(protocol, "scripted-model").with_base_url(base_url);
    config.retry = fast_retry(3);
    config.attempt_timeout = Duration::from_secs(5);
    config
}

fn client(config: ModelConfig) -> ModelClient {
    ModelClient::with_resolved_api_key(config, Some(ApiKey::new("test-key"))).unwrap()
}

fn request() -> ModelRequest {
    ModelRequest {
        system: Some("You fix distributed systems.".into()),
        messages: vec![Message::User {
            text: "The leader election test fails.".into(),
        }],
        tool: Some(ToolDefinition::bash("Run a shell command.")),
        max_output_tokens: 256,
        temperature: Some(0.0),
    }
}

async fn serve(steps: Vec<Step>) -> ScriptedServer {
    ScriptedServer::start(Script::new(steps)).await.unwrap()
}

fn error(status: u16) -> Step {
    Step::Error {
        status,
        message: None,
        retry_after: None,
        retry_after_ms: None,
        headers: BTreeMap::new(),
    }
}

fn usage() -> StepUsage {
    StepUsage {
        input: 1200,
        cached_input: 1000,
        cache_write: 0,
        output: 80,
        reasoning: 30,
    }
}

#[tokio::test]
async fn native_tool_call_round_trip_in_both_protocols() {
    for protocol in BOTH {
        let server = serve(vec![Step::ToolCall {
            command: "ls -la".into(),
            text: Some("Looking around.".into()),
            id: Some("call-1".into()),
            raw_arguments: None,
            usage: Some(usage()),
        }])
        .await;
        let response = client(config(&server, protocol))
            .complete(&request())
            .await
            .unwrap();

        assert_eq!(
            response.text.as_deref(),
            Some("Looking around."),
            "{protocol:?}"
        );
        assert_eq!(response.tool_calls.len(), 1);
        let call = &response.tool_calls[0];
        assert_eq!((call.id.as_str(), call.name.as_str()), ("call-1", "bash"));
        assert_eq!(call.command(), Some("ls -la"));
        assert_eq!(response.finish_reason, FinishReason::ToolCalls);
        assert_eq!(response.retry.retries, 0);
        assert!(response.latency <= response.total_time);
        assert_eq!(response.raw["model"], "scripted-model");

        let usage = response.usage.expect("usage reported");
        assert_eq!(usage.input_tokens, 1200, "{protocol:?}");
        assert_eq!(usage.cached_input_tokens, 1000);
        assert_eq!(usage.uncached_input_tokens(), 200);
        assert_eq!(usage.output_tokens, 80);
        match protocol {
            Protocol::OpenAiChat => {
                assert_eq!(usage.reasoning_tokens, Some(30));
                assert_eq!(usage.raw["prompt_tokens"], 1200);
            }
            Protocol::AnthropicMessages => {
                assert_eq!(usage.reasoning_tokens, None);
                assert_eq!(usage.raw["input_tokens"], 200);
            }
        }

        let sent = server.requests();
        assert_eq!(sent.len(), 1);
        let body = &sent[0].body;
        assert_eq!(body["model"], "scripted-model");
        match protocol {
            Protocol::OpenAiChat => {
                assert_eq!(sent[0].path, "/v1/chat/completions");
                assert_eq!(body["messages"][0]["role"], "system");
                assert_eq!(
                    body["messages"][0]["content"],
                    "You fix distributed systems."
                );
                assert_eq!(body["tools"][0]["function"]["name"], "bash");
                assert_eq!(sent[0].headers["authorization"], "Bearer <redacted>");
            }
            Protocol::AnthropicMessages => {
                assert_eq!(sent[0].path, "/v1/messages");
                assert_eq!(body["system"], "You fix distributed systems.");
                assert_eq!(body["max_tokens"], 256);
                assert_eq!(body["tools"][0]["name"], "bash");
                assert_eq!(sent[0].headers["x-api-key"], "<redacted>");
                assert_eq!(sent[0].headers["anthropic-version"], "2023-06-01");
            }
        }
    }
}

#[tokio::test]
async fn conversation_continues_with_tool_results() {
    for protocol in BOTH {
        let server = serve(vec![
            Step::ToolCall {
                command: "cat raft.go".into(),
                text: None,
                id: None,
                raw_arguments: None,
                usage: None,
            },
            Step::text("```bash\ngo test ./...\n```"),
        ])
        .await;
        let client = client(config(&server, protocol));
        let mut request = request();
        let first = client.complete(&request).await.unwrap();
        let call_id = first.tool_calls[0].id.clone();
        request.messages.push(first.to_message());
        request.messages.push(Message::ToolResult {
            call_id: call_id.clone(),
            content: "package raft".into(),
        });
        let second = client.complete(&request).await.unwrap();
        assert_eq!(second.text.as_deref(), Some("```bash\ngo test ./...\n```"));
        assert!(second.tool_calls.is_empty());
        assert_eq!(second.finish_reason, FinishReason::Stop);
        assert!(
            second.usage.is_none(),
            "no usage reported means None, not zeros"
        );

        let body = &server.requests()[1].body;
        let messages = body["messages"].as_array().unwrap();
        let last = messages.last().unwrap();
        match protocol {
            Protocol::OpenAiChat => {
                assert_eq!(last["role"], "tool");
                assert_eq!(last["tool_call_id"], call_id.as_str());
                assert_eq!(messages[2]["tool_calls"][0]["id"], call_id.as_str());
            }
            Protocol::AnthropicMessages => {
                assert_eq!(last["role"], "user");
                assert_eq!(last["content"][0]["type"], "tool_result");
                assert_eq!(last["content"][0]["tool_use_id"], call_id.as_str());
                assert_eq!(messages[1]["content"][0]["type"], "tool_use");
            }
        }
    }
}

#[tokio::test]
async fn invalid_tool_arguments_are_kept_raw() {
    let server = serve(vec![Step::ToolCall {
        command: String::new(),
        text: None,
        id: None,
        raw_arguments: Some(r#"{"command": "ls"#.into()),
        usage: None,
    }])
    .await;
    let response = client(config(&server, Protocol::OpenAiChat))
        .complete(&request())
        .await
        .unwrap();
    let call = &response.tool_calls[0];
    assert_eq!(call.arguments, r#"{"command": "ls"#);
    assert_eq!(call.parsed_arguments, None);
    assert_eq!(call.command(), None);
}

#[tokio::test]
async fn truncated_text_reports_length() {
    for protocol in BOTH {
        let server = serve(vec![Step::Text {
            text: "partial".into(),
            truncated: true,
            usage: None,
        }])
        .await;
        let response = client(config(&server, protocol))
            .complete(&request())
            .await
            .unwrap();
        assert_eq!(response.finish_reason, FinishReason::Length, "{protocol:?}");
    }
}

/// Milliseconds between consecutive recorded requests.
fn gaps(requests: &[RecordedRequest]) -> Vec<u64> {
    requests
        .windows(2)
        .map(|pair| pair[1].received_ms - pair[0].received_ms)
        .collect()
}

#[tokio::test]
async fn retry_after_seconds_is_honoured() {
    let server = serve(vec![
        Step::Error {
            status: 429,
            message: Some("slow down".into()),
            retry_after: Some("1".into()),
            retry_after_ms: None,
            headers: BTreeMap::new(),
        },
        Step::text("ok"),
    ])
    .await;
    let response = client(config(&server, Protocol::OpenAiChat))
        .complete(&request())
        .await
        .unwrap();
    assert_eq!(response.retry.retries, 1);
    assert!(response.retry.backoff >= Duration::from_secs(1));
    assert!(response.total_time >= response.retry.waiting());
    let gap = gaps(&server.requests())[0];
    assert!(
        gap >= 990,
        "retried after {gap} ms, before Retry-After elapsed"
    );
    assert!(gap < 2000, "waited {gap} ms, far longer than asked");
}

#[tokio::test]
async fn anthropic_retry_after_ms_wins_over_retry_after() {
    let server = serve(vec![
        Step::Error {
            status: 529,
            message: Some("Overloaded".into()),
            retry_after: Some("30".into()),
            retry_after_ms: Some(300),
            headers: BTreeMap::new(),
        },
        Step::text("ok"),
    ])
    .await;
    let response = client(config(&server, Protocol::AnthropicMessages))
        .complete(&request())
        .await
        .unwrap();
    assert_eq!(response.retry.retries, 1);
    let gap = gaps(&server.requests())[0];
    assert!((290..5000).contains(&gap), "retried after {gap} ms");
}

#[tokio::test]
async fn retry_after_beyond_the_cap_fails_without_waiting() {
    let server = serve(vec![
        Step::Error {
            status: 429,
            message: None,
            retry_after: Some("3600".into()),
            retry_after_ms: None,
            headers: BTreeMap::new(),
        },
        Step::text("never reached"),
    ])
    .await;
    let err = client(config(&server, Protocol::OpenAiChat))
        .complete(&request())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RateLimited);
    assert!(!err.was_retried());
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn transient_statuses_are_retried_with_backoff() {
    for protocol in BOTH {
        let server = serve(vec![
            error(500),
            error(529),
            error(503),
            error(429),
            Step::text("ok"),
        ])
        .await;
        let mut config = config(&server, protocol);
        config.retry = fast_retry(4);
        let response = client(config).complete(&request()).await.unwrap();
        assert_eq!(response.retry.retries, 4, "{protocol:?}");
        // Exponential waits of 20, 40, 80 (capped) and 80 ms.
        assert!(response.retry.backoff >= Duration::from_millis(220));
        let gaps = gaps(&server.requests());
        assert!(gaps[0] >= 20 && gaps[1] >= 40 && gaps[2] >= 80, "{gaps:?}");
    }
}

#[tokio::test]
async fn giving_up_reports_the_retries() {
    let server = serve(vec![
        error(500),
        error(502),
        error(500),
        Step::text("too late"),
    ])
    .await;
    let mut config = config(&server, Protocol::OpenAiChat);
    config.retry = fast_retry(2);
    let err = client(config).complete(&request()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Server);
    assert!(err.was_retried());
    assert_eq!(err.retry_stats().retries, 2);
    assert!(err.to_string().contains("after 2 retries"), "{err}");
    assert!(matches!(err, ModelError::Status { status: 500, .. }));
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn the_total_wait_budget_ends_retrying_before_the_retry_count_does() {
    let server = serve(vec![error(503); 10]).await;
    let mut config = config(&server, Protocol::OpenAiChat);
    config.retry = RetryPolicy {
        initial_backoff: Duration::from_millis(300),
        max_backoff: Duration::from_millis(300),
        max_total_wait: Some(Duration::from_millis(1000)),
        ..fast_retry(9)
    };
    let err = client(config).complete(&request()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Server);
    // Waits of 300 ms fit at most three times in 1 s with the attempts' own time, and twice
    // unless the machine is slow; never the nine retries the count allows.
    let retries = err.retry_stats().retries;
    assert!((1..=3).contains(&retries), "{err}");
    assert!(
        err.retry_stats().waiting() <= Duration::from_millis(1000),
        "{err}"
    );
    assert_eq!(server.requests().len(), retries as usize + 1);
}

#[tokio::test]
async fn a_refusal_of_tool_definitions_names_the_way_out() {
    let refusal = |text: &str| Step::Error {
        status: 400,
        message: Some(text.into()),
        retry_after: None,
        retry_after_ms: None,
        headers: BTreeMap::new(),
    };
    let server = serve(vec![
        refusal("automatic tool choice needs the server started with a tool call parser"),
        refusal("temperature must be at most 2"),
    ])
    .await;
    let client = client(config(&server, Protocol::OpenAiChat));
    let tools = client.complete(&request()).await.unwrap_err();
    assert_eq!(tools.kind(), ErrorKind::BadRequest);
    assert!(tools.to_string().ends_with(TOOLS_REFUSED), "{tools}");
    let other = client.complete(&request()).await.unwrap_err();
    assert!(!other.to_string().contains("--text-mode"), "{other}");
}

#[tokio::test]
async fn an_anthropic_base_url_ending_in_the_version_is_not_doubled() {
    let server = serve(vec![Step::text("hello")]).await;
    let mut config = config(&server, Protocol::AnthropicMessages);
    config.base_url = Some(format!("{}/v1/", server.anthropic_base_url()));
    let reply = client(config).complete(&request()).await.unwrap();
    assert_eq!(reply.text.as_deref(), Some("hello"));
    assert_eq!(server.requests()[0].path, "/v1/messages");
}

#[tokio::test]
async fn permanent_errors_are_not_retried() {
    let cases = [
        (error(401), ErrorKind::Auth),
        (error(403), ErrorKind::Auth),
        (error(404), ErrorKind::NotFound),
        (Step::ContextLength {}, ErrorKind::ContextLength),
        (error(400), ErrorKind::BadRequest),
        (error(422), ErrorKind::BadRequest),
    ];
    for protocol in BOTH {
        for (step, kind) in cases.clone() {
            let server = serve(vec![step, Step::text("never reached")]).await;
            let err = client(config(&server, protocol))
                .complete(&request())
                .await
                .unwrap_err();
            assert_eq!(err.kind(), kind, "{protocol:?}: {err}");
            assert!(!err.kind().is_retryable());
            assert!(!err.was_retried());
            assert_eq!(server.requests().len(), 1, "{protocol:?} {kind}");
        }
    }
}

#[tokio::test]
async fn server_may_veto_a_retry() {
    let server = serve(vec![
        Step::Error {
            status: 500,
            message: None,
            retry_after: None,
            retry_after_ms: None,
            headers: BTreeMap::from([("x-should-retry".to_string(), "false".to_string())]),
        },
        Step::text("never reached"),
    ])
    .await;
    let err = client(config(&server, Protocol::AnthropicMessages))
        .complete(&request())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Server);
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn hung_attempts_time_out_and_are_retried() {
    let server = serve(vec![
        Step::Hang {},
        Step::text("ok"),
        Step::Hang {},
        Step::Hang {},
    ])
    .await;
    let mut config = config(&server, Protocol::OpenAiChat);
    config.attempt_timeout = Duration::from_millis(250);
    config.retry = fast_retry(1);
    let client = client(config);

    let response = client.complete(&request()).await.unwrap();
    assert_eq!(response.retry.retries, 1);
    assert!(response.retry.failed_attempts >= Duration::from_millis(250));
    // The hung attempt counts as waiting, not as the successful attempt's latency.
    assert!(response.total_time >= response.retry.waiting() + response.latency);

    let err = client.complete(&request()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert_eq!(err.retry_stats().retries, 1);
    assert_eq!(server.requests().len(), 4);
}

#[tokio::test]
async fn connection_refused_is_a_retried_connect_error() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let mut config = ModelConfig::new(Protocol::OpenAiChat, "m")
        .with_base_url(format!("http://127.0.0.1:{port}/v1"));
    config.retry = fast_retry(2);
    let err = ModelClient::with_resolved_api_key(config, None)
        .unwrap()
        .complete(&request())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connect, "{err}");
    assert_eq!(err.retry_stats().retries, 2);
}

#[tokio::test]
async fn malformed_replies_are_clear_errors() {
    let empty_choices =
        r#"{"id":"x","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":0}}"#;
    let cases = [
        (
            Protocol::OpenAiChat,
            Step::Malformed { body: None },
            "not valid JSON",
        ),
        (
            Protocol::AnthropicMessages,
            Step::Malformed { body: None },
            "not valid JSON",
        ),
        (
            Protocol::OpenAiChat,
            Step::Raw {
                status: 200,
                body: empty_choices.into(),
            },
            "empty `choices`",
        ),
        (
            Protocol::OpenAiChat,
            Step::Raw {
                status: 200,
                body: "[1, 2]".into(),
            },
            "not a JSON object",
        ),
        (
            Protocol::AnthropicMessages,
            Step::Raw {
                status: 200,
                body: r#"{"type":"message"}"#.into(),
            },
            "no `content`",
        ),
        (
            Protocol::OpenAiChat,
            Step::Raw {
                status: 200,
                body:
                    r#"{"choices":[{"message":{"content":"x"}}],"usage":{"prompt_tokens":"many"}}"#
                        .into(),
            },
            "prompt_tokens",
        ),
    ];
    for (protocol, step, expected) in cases {
        let server = serve(vec![step, Step::text("never reached")]).await;
        let err = client(config(&server, protocol))
            .complete(&request())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::MalformedResponse, "{err}");
        assert!(err.to_string().contains(expected), "{err}");
        assert_eq!(
            server.requests().len(),
            1,
            "malformed replies are not retried"
        );
    }
}

#[tokio::test]
async fn usage_of_an_unusable_reply_is_still_reported() {
    let body = r#"{"choices":[],"usage":{"prompt_tokens":900,"completion_tokens":12}}"#;
    let server = serve(vec![Step::Raw {
        status: 200,
        body: body.into(),
    }])
    .await;
    let err = client(config(&server, Protocol::OpenAiChat))
        .complete(&request())
        .await
        .unwrap_err();
    let usage = err.billed_usage().expect("usage of a billed call");
    assert_eq!((usage.input_tokens, usage.output_tokens), (900, 12));
}

#[tokio::test]
async fn oversized_replies_are_refused() {
    for protocol in BOTH {
        let server = serve(vec![
            Step::Oversized { bytes: 300_000 },
            Step::text("small"),
        ])
        .await;
        let mut config = config(&server, protocol);
        config.max_response_bytes = 64 * 1024;
        let client = client(config);
        let err = client.complete(&request()).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ResponseTooLarge, "{err}");
        assert!(matches!(err, ModelError::TooLarge { limit: 65_536, .. }));
        // The client stays usable.
        let ok = client.complete(&request()).await.unwrap();
        assert_eq!(ok.text.as_deref(), Some("small"));
    }
}

#[tokio::test]
async fn requests_that_cannot_be_sent_fail_before_any_traffic() {
    let server = serve(vec![Step::text("never reached")]).await;
    let client = client(config(&server, Protocol::AnthropicMessages));
    let mut bad = request();
    bad.messages.push(Message::Assistant {
        text: None,
        tool_calls: vec![ToolCall::new("t1", "bash", "not json")],
    });
    let err = client.complete(&bad).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidRequest);
    let zero_tokens = ModelRequest {
        max_output_tokens: 0,
        ..request()
    };
    assert_eq!(
        client.complete(&zero_tokens).await.unwrap_err().kind(),
        ErrorKind::InvalidRequest
    );
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn cost_of_a_real_call_from_the_builtin_table() {
    let server = serve(vec![Step::Text {
        text: "done".into(),
        truncated: false,
        usage: Some(StepUsage {
            input: 10_000,
            cached_input: 8_000,
            cache_write: 1_000,
            output: 500,
            reasoning: 0,
        }),
    }])
    .await;
    let response = client(config(&server, Protocol::AnthropicMessages))
        .complete(&request())
        .await
        .unwrap();
    let usage = response.usage.unwrap();
    let table = PricingTable::builtin().unwrap();
    // Sonnet 4.5: 1000 plain * $3 + 8000 read * $0.30 + 1000 written * $3.75 + 500 out * $15.
    let cost = table.cost("claude-sonnet-4-5", &usage).unwrap();
    let expected = (1000.0 * 3.0 + 8000.0 * 0.3 + 1000.0 * 3.75 + 500.0 * 15.0) / 1e6;
    assert!((cost - expected).abs() < 1e-12, "{cost} vs {expected}");
    assert_eq!(table.cost("scripted-model", &usage), None);
}
