//! The scripted server driven over raw HTTP/1.1, independent of any client
//! library, so its wire shapes are checked on their own.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use faultline_scripted::{
    Protocol, Script, ScriptError, ScriptMode, ScriptedServer, ServerOptions, Step, StepUsage,
};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A reply as raw parts.
struct Reply {
    status: u16,
    headers: BTreeMap<String, String>,
    body: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap()
    }
}

/// Sends one request on a fresh connection and reads the whole reply.
async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Reply {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|line| line.split_once(": "))
        .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
        .collect();
    Reply {
        status,
        headers,
        body: body.to_string(),
    }
}

fn openai_body(system: &str, user: &str) -> String {
    json!({
        "model": "m",
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]
    })
    .to_string()
}

fn anthropic_body(system: &str, user: &str) -> String {
    json!({
        "model": "m",
        "max_tokens": 10,
        "system": system,
        "messages": [{"role": "user", "content": [{"type": "text", "text": user}]}]
    })
    .to_string()
}

async fn openai(server: &ScriptedServer, body: &str) -> Reply {
    send(
        server.addr(),
        "POST",
        "/v1/chat/completions",
        &[("authorization", "Bearer sk-secret")],
        body,
    )
    .await
}

async fn anthropic(server: &ScriptedServer, body: &str) -> Reply {
    send(
        server.addr(),
        "POST",
        "/v1/messages",
        &[
            ("x-api-key", "sk-secret"),
            ("anthropic-version", "2023-06-01"),
        ],
        body,
    )
    .await
}

fn reply_text(reply: &Reply) -> String {
    let body = reply.json();
    match body["choices"][0]["message"]["content"].as_str() {
        Some(text) => text.to_string(),
        None => body["content"][0]["text"].as_str().unwrap().to_string(),
    }
}

const USAGE: StepUsage = StepUsage {
    input: 1000,
    cached_input: 600,
    cache_write: 100,
    output: 50,
    reasoning: 20,
};

#[tokio::test]
async fn tool_calls_in_each_protocols_shape() {
    let step = Step::ToolCall {
        command: "grep -rn leader .".into(),
        text: None,
        id: None,
        raw_arguments: None,
        usage: Some(USAGE),
    };
    let server = ScriptedServer::start(Script::new(vec![step.clone(), step]))
        .await
        .unwrap();

    let reply = openai(&server, &openai_body("s", "u")).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.headers["content-type"], "application/json");
    let body = reply.json();
    let choice = &body["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["content"], Value::Null);
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"]["name"], "bash");
    let arguments: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(arguments, json!({"command": "grep -rn leader ."}));
    assert_eq!(
        body["usage"],
        json!({
            "prompt_tokens": 1000, "completion_tokens": 50, "total_tokens": 1050,
            "prompt_tokens_details": {"cached_tokens": 600},
            "completion_tokens_details": {"reasoning_tokens": 20}
        })
    );

    let reply = anthropic(&server, &anthropic_body("s", "u")).await;
    assert_eq!(reply.status, 200);
    let body = reply.json();
    assert_eq!(body["type"], "message");
    assert_eq!(body["stop_reason"], "tool_use");
    let block = &body["content"][0];
    assert_eq!(block["type"], "tool_use");
    assert_eq!(block["name"], "bash");
    assert_eq!(block["input"], json!({"command": "grep -rn leader ."}));
    assert_ne!(
        block["id"], call["id"],
        "generated ids differ between replies"
    );
    assert_eq!(
        body["usage"],
        json!({
            "input_tokens": 300, "cache_read_input_tokens": 600,
            "cache_creation_input_tokens": 100, "output_tokens": 50
        })
    );
}

#[tokio::test]
async fn errors_carry_status_retry_headers_and_provider_bodies() {
    let step = Step::Error {
        status: 429,
        message: Some("slow down".into()),
        retry_after: Some("Sun, 29 Nov 2026 10:00:07 GMT".into()),
        retry_after_ms: Some(1500),
        headers: BTreeMap::from([("x-should-retry".to_string(), "true".to_string())]),
    };
    let server = ScriptedServer::start(Script::new(vec![
        step.clone(),
        step,
        Step::ContextLength {},
        Step::ContextLength {},
    ]))
    .await
    .unwrap();

    let reply = openai(&server, &openai_body("s", "u")).await;
    assert_eq!(reply.status, 429);
    assert_eq!(
        reply.headers["retry-after"],
        "Sun, 29 Nov 2026 10:00:07 GMT"
    );
    assert_eq!(reply.headers["retry-after-ms"], "1500");
    assert_eq!(reply.headers["x-should-retry"], "true");
    assert_eq!(reply.json()["error"]["message"], "slow down");
    assert_eq!(reply.json()["error"]["type"], "rate_limit_error");

    let reply = anthropic(&server, &anthropic_body("s", "u")).await;
    assert_eq!(reply.status, 429);
    assert_eq!(reply.json()["type"], "error");
    assert_eq!(reply.json()["error"]["message"], "slow down");

    let reply = openai(&server, &openai_body("s", "u")).await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.json()["error"]["code"], "context_length_exceeded");
    let reply = anthropic(&server, &anthropic_body("s", "u")).await;
    assert_eq!(reply.status, 400);
    assert!(
        reply.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("prompt is too long")
    );
}

#[tokio::test]
async fn malformed_raw_oversized_and_truncated_steps() {
    let server = ScriptedServer::start(Script::new(vec![
        Step::Malformed { body: None },
        Step::Raw {
            status: 200,
            body: r#"{"choices": []}"#.into(),
        },
        Step::Oversized { bytes: 100_000 },
        Step::Text {
            text: "cut".into(),
            truncated: true,
            usage: None,
        },
    ]))
    .await
    .unwrap();
    let body = openai_body("s", "u");
    let reply = openai(&server, &body).await;
    assert_eq!(reply.status, 200);
    assert!(serde_json::from_str::<Value>(&reply.body).is_err());
    assert_eq!(openai(&server, &body).await.body, r#"{"choices": []}"#);
    let big = openai(&server, &body).await;
    assert!(big.body.len() >= 100_000);
    assert_eq!(big.json()["choices"][0]["finish_reason"], "stop");
    let cut = anthropic(&server, &anthropic_body("s", "u")).await;
    assert_eq!(cut.json()["stop_reason"], "max_tokens");
    assert!(
        cut.json().get("usage").is_none(),
        "no usage unless scripted"
    );
}

#[tokio::test]
async fn global_mode_shares_one_cursor_and_reports_exhaustion() {
    let server = ScriptedServer::start(Script::new(vec![Step::text("one"), Step::text("two")]))
        .await
        .unwrap();
    assert_eq!(
        reply_text(&openai(&server, &openai_body("s", "a")).await),
        "one"
    );
    assert_eq!(
        reply_text(&anthropic(&server, &anthropic_body("s", "b")).await),
        "two"
    );
    let reply = openai(&server, &openai_body("s", "a")).await;
    assert_eq!(reply.status, 400);
    assert!(
        reply.body.contains("script exhausted after 2 step(s)"),
        "{}",
        reply.body
    );
    let steps: Vec<_> = server.requests().iter().map(|r| r.step).collect();
    assert_eq!(steps, [Some(0), Some(1), None]);
}

#[tokio::test]
async fn per_conversation_mode_replays_for_each_conversation() {
    let script = Script::per_conversation(vec![
        Step::text("first"),
        Step::text("second"),
        Step::text("third"),
    ]);
    let server = ScriptedServer::start(script).await.unwrap();
    let task_a = openai_body("sys", "task A");
    let task_b = openai_body("sys", "task B");
    assert_eq!(reply_text(&openai(&server, &task_a).await), "first");
    assert_eq!(reply_text(&openai(&server, &task_b).await), "first");
    assert_eq!(reply_text(&openai(&server, &task_a).await), "second");
    // Anthropic's separate system field and block content key the same way.
    let task_a_again = anthropic_body("sys", "task A");
    assert_eq!(
        reply_text(&anthropic(&server, &task_a_again).await),
        "third"
    );
    let other_system = anthropic_body("other sys", "task A");
    assert_eq!(
        reply_text(&anthropic(&server, &other_system).await),
        "first"
    );
    assert_eq!(reply_text(&openai(&server, &task_b).await), "second");
}

#[tokio::test]
async fn bad_requests_are_refused_without_using_a_step() {
    let server = ScriptedServer::start(Script::new(vec![Step::text("kept")]))
        .await
        .unwrap();
    let addr = server.addr();

    let no_version = send(addr, "POST", "/v1/messages", &[], &anthropic_body("s", "u")).await;
    assert_eq!(no_version.status, 400);
    assert!(no_version.body.contains("anthropic-version"));
    let no_max_tokens = json!({"model": "m", "messages": []}).to_string();
    let reply = anthropic(&server, &no_max_tokens).await;
    assert!(reply.body.contains("max_tokens"), "{}", reply.body);
    let reply = openai(&server, "{not json").await;
    assert_eq!(reply.status, 400);
    assert!(reply.body.contains("not a JSON object"));
    let reply = openai(&server, &json!({"messages": []}).to_string()).await;
    assert!(reply.body.contains("`model`"));
    assert_eq!(send(addr, "POST", "/v2/other", &[], "{}").await.status, 404);
    assert_eq!(
        send(addr, "GET", "/v1/chat/completions", &[], "")
            .await
            .status,
        405
    );

    assert_eq!(
        reply_text(&openai(&server, &openai_body("s", "u")).await),
        "kept"
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 7);
    assert_eq!(requests[2].body, Value::String("{not json".into()));
    assert_eq!(requests[4].protocol, None);
    assert!(requests[..6].iter().all(|r| r.step.is_none()));
    assert_eq!(requests[6].step, Some(0));
}

#[tokio::test]
async fn recorded_requests_redact_keys_and_keep_timing() {
    let server = ScriptedServer::start(Script::new(vec![Step::text("a"), Step::text("b")]))
        .await
        .unwrap();
    openai(&server, &openai_body("the system prompt", "u")).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    anthropic(&server, &anthropic_body("s", "u")).await;
    let requests = server.requests();
    assert_eq!(requests[0].protocol, Some(Protocol::OpenAi));
    assert_eq!(requests[0].headers["authorization"], "Bearer <redacted>");
    assert_eq!(
        requests[0].body["messages"][0]["content"],
        "the system prompt"
    );
    assert_eq!(requests[1].protocol, Some(Protocol::Anthropic));
    assert_eq!(requests[1].headers["x-api-key"], "<redacted>");
    assert!(requests[1].received_ms >= requests[0].received_ms + 50);
    let serialized = serde_json::to_string(&requests).unwrap();
    assert!(!serialized.contains("sk-secret"));
}

#[tokio::test]
async fn hang_never_answers_but_is_recorded() {
    let server = ScriptedServer::start(Script::new(vec![Step::Hang {}, Step::text("after")]))
        .await
        .unwrap();
    let body = openai_body("s", "u");
    let hung = tokio::time::timeout(Duration::from_millis(300), openai(&server, &body)).await;
    assert!(hung.is_err(), "a hang step must not answer");
    assert_eq!(server.requests()[0].step, Some(0));
    assert_eq!(reply_text(&openai(&server, &body).await), "after");
    server.shutdown().await;
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn scripts_load_from_json_and_toml() {
    let dir = tempfile::tempdir().unwrap();
    let json = write(
        dir.path(),
        "s.json",
        r#"{"mode": "per_conversation", "steps": [
            {"kind": "tool_call", "command": "ls", "usage": {"input": 10, "output": 2}},
            {"kind": "error", "status": 429, "retry_after": "2"},
            {"kind": "hang"},
            {"kind": "text", "text": "```bash\nmake test\n```"}
        ]}"#,
    );
    let toml = write(
        dir.path(),
        "s.toml",
        r#"
        mode = "per_conversation"
        [[steps]]
        kind = "tool_call"
        command = "ls"
        usage = { input = 10, output = 2 }
        [[steps]]
        kind = "error"
        status = 429
        retry_after = "2"
        [[steps]]
        kind = "hang"
        [[steps]]
        kind = "text"
        text = """
```bash
make test
```"""
        "#,
    );
    let from_json = Script::load(&json).unwrap();
    assert_eq!(from_json.mode, ScriptMode::PerConversation);
    assert_eq!(from_json.steps.len(), 4);
    assert_eq!(Script::load(&toml).unwrap(), from_json);
}

#[test]
fn bad_scripts_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "unknown-kind.json",
            r#"{"steps": [{"kind": "dance"}]}"#,
            "dance",
        ),
        (
            "unknown-field.json",
            r#"{"steps": [{"kind": "hang", "for": 3}]}"#,
            "for",
        ),
        (
            "ok-status.json",
            r#"{"steps": [{"kind": "error", "status": 200}]}"#,
            "step 0",
        ),
        (
            "bad-usage.json",
            r#"{"steps": [{"kind": "hang"}, {"kind": "text", "text": "x",
                "usage": {"input": 5, "cached_input": 6, "output": 1}}]}"#,
            "step 1",
        ),
        (
            "bad-header.json",
            r#"{"steps": [{"kind": "error", "status": 500, "headers": {"bad name": "x"}}]}"#,
            "header name",
        ),
        ("s.yaml", "steps: []", "unknown format"),
    ];
    for (name, text, expected) in cases {
        let path = write(dir.path(), name, text);
        let err = Script::load(&path).expect_err(name);
        assert!(err.to_string().contains(expected), "{name}: {err}");
    }
    let missing = Script::load(&dir.path().join("missing.json")).unwrap_err();
    assert!(matches!(missing, ScriptError::Read { .. }));
}

#[tokio::test]
async fn start_rejects_an_invalid_script() {
    let script = Script::new(vec![Step::Error {
        status: 302,
        message: None,
        retry_after: None,
        retry_after_ms: None,
        headers: BTreeMap::new(),
    }]);
    assert!(ScriptedServer::start(script).await.is_err());
}

#[tokio::test]
async fn request_log_gets_one_json_line_per_request() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("requests.jsonl");
    let options = ServerOptions {
        request_log: Some(log.clone()),
        ..ServerOptions::default()
    };
    let server = ScriptedServer::start_with(Script::new(vec![Step::text("a")]), options)
        .await
        .unwrap();
    openai(&server, &openai_body("s", "u")).await;
    openai(&server, &openai_body("s", "u")).await;
    let lines: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["step"], 0);
    assert_eq!(lines[1]["step"], Value::Null);
    assert_eq!(lines[0]["protocol"], "openai");
}

#[tokio::test]
async fn forgotten_requests_are_still_logged_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("requests.jsonl");
    let options = ServerOptions {
        request_log: Some(log.clone()),
        forget_requests: true,
        ..ServerOptions::default()
    };
    let server =
        ScriptedServer::start_with(Script::new(vec![Step::text("a"), Step::text("b")]), options)
            .await
            .unwrap();
    openai(&server, &openai_body("s", "u")).await;
    openai(&server, &openai_body("s", "u")).await;
    assert!(server.requests().is_empty());
    let indices: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap()["index"].clone())
        .collect();
    assert_eq!(indices, [Value::from(0), Value::from(1)]);
}
