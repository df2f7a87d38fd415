//! What the gateway and the agent sandbox cost, each against a baseline measured in the same run:
//! a model call through the gateway against the same call made to the scripted server directly
//! (p50 and p99, alternating), the first byte of a streamed answer against a direct call's whole
//! answer, and starting a command in an agent's sandbox (with the relay to a gateway) against
//! starting it on the host. Run: `cargo bench -p faultline-gateway --bench overhead`.

use faultline_gateway::{Gateway, GatewayConfig};
use faultline_model::{ApiKey, ModelClient, ModelConfig, Protocol, RetryPolicy};
use faultline_sandbox::{ExecRequest, LoopbackRelay, Mount, Sandbox, SandboxSpec};
use faultline_schema::Limits;
use faultline_scripted::{Script, ScriptedServer, ServerOptions, Step, StepUsage};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

const CALLS: usize = 1000;
const STARTS: usize = 30;

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() {
    let reply = Step::Text {
        text: "a reply of ordinary length ".repeat(20),
        truncated: false,
        usage: Some(StepUsage {
            input: 2000,
            output: 100,
            ..StepUsage::default()
        }),
    };
    let server = ScriptedServer::start_with(
        Script::new(vec![reply; 3 * CALLS + 10]),
        ServerOptions {
            forget_requests: true,
            ..ServerOptions::default()
        },
    )
    .await
    .unwrap();
    let mut config =
        ModelConfig::new(Protocol::OpenAiChat, "scripted").with_base_url(server.openai_base_url());
    config.retry = RetryPolicy::none();
    let client = ModelClient::with_resolved_api_key(config, Some(ApiKey::new("k"))).unwrap();
    let limits = Limits {
        steps: u32::MAX,
        cost_usd: None,
        ..Limits::default()
    };
    let mut gateway = Gateway::start(GatewayConfig {
        client: Arc::new(client),
        price: None,
        limits,
        hold_calls: false,
    })
    .await
    .unwrap();
    let http = reqwest::Client::new();
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "x".repeat(4000)}]});
    let direct_url = format!("{}/chat/completions", server.openai_base_url());
    let gateway_url = format!("http://{}/v1/chat/completions", gateway.loopback().unwrap());
    let call = |url: String, key: String, body: serde_json::Value| {
        let http = http.clone();
        async move {
            let started = Instant::now();
            let response = http
                .post(url)
                .bearer_auth(key)
                .json(&body)
                .send()
                .await
                .unwrap();
            assert!(response.status().is_success());
            response.bytes().await.unwrap();
            ms(started.elapsed())
        }
    };
    let key = gateway.key().to_string();
    let (mut direct, mut through) = (Vec::new(), Vec::new());
    for _ in 0..CALLS {
        direct.push(call(direct_url.clone(), "k".into(), body.clone()).await);
        through.push(call(gateway_url.clone(), key.clone(), body.clone()).await);
        while gateway.try_next_event().is_ok() {}
    }
    let (d50, d99) = (percentile(&mut direct, 0.5), percentile(&mut direct, 0.99));
    let (g50, g99) = (
        percentile(&mut through, 0.5),
        percentile(&mut through, 0.99),
    );
    println!(
        "model call ({CALLS} each, alternating): direct p50 {d50:.2} ms p99 {d99:.2} ms; \
         through the gateway p50 {g50:.2} ms p99 {g99:.2} ms; overhead p50 {:.2} ms p99 {:.2} ms",
        g50 - d50,
        g99 - d99
    );

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (mut first_byte, mut whole) = (Vec::new(), Vec::new());
    for _ in 0..CALLS / 2 {
        whole.push(call(direct_url.clone(), "k".into(), body.clone()).await);
        let started = Instant::now();
        let mut response = http
            .post(&gateway_url)
            .bearer_auth(&key)
            .json(&streamed)
            .send()
            .await
            .unwrap();
        response.chunk().await.unwrap();
        first_byte.push(ms(started.elapsed()));
        while response.chunk().await.unwrap().is_some() {}
        while gateway.try_next_event().is_ok() {}
    }
    let (w50, f50) = (
        percentile(&mut whole, 0.5),
        percentile(&mut first_byte, 0.5),
    );
    println!(
        "streamed answer: first byte through the gateway p50 {f50:.2} ms, a direct call's whole \
         answer p50 {w50:.2} ms; delay {:.2} ms (the scripted server does not stream, so its \
         whole answer is what a direct stream's first byte would wait for)",
        f50 - w50
    );

    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("workspace");
    std::fs::create_dir(&workspace).unwrap();
    let socket_dir = tempfile::Builder::new().prefix("fl-gw").tempdir().unwrap();
    let socket = socket_dir.path().join("gateway.sock");
    let _socket_gateway = Gateway::start_on_socket(
        GatewayConfig {
            client: Arc::new(
                ModelClient::with_resolved_api_key(
                    ModelConfig::new(Protocol::OpenAiChat, "scripted")
                        .with_base_url(server.openai_base_url()),
                    None,
                )
                .unwrap(),
            ),
            price: None,
            limits: Limits::default(),
            hold_calls: false,
        },
        &socket,
    )
    .await
    .unwrap();
    if faultline_sandbox::supervisor_path().is_err() {
        // A bench builds no binaries of other packages; the relay runs in the supervisor's.
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let built = std::process::Command::new(cargo)
            .args(["build", "--release", "-p", "faultline-sandbox"])
            .args(["--bin", "faultline-supervisor"])
            .status()
            .unwrap();
        assert!(built.success(), "building faultline-supervisor failed");
    }
    let spec = SandboxSpec::new(None, "/workspace")
        .mount(Mount::rw(&workspace, "/workspace"))
        .relay(LoopbackRelay { port: 4000, socket });
    let sandbox = Sandbox::new(spec).unwrap();
    let (mut in_sandbox, mut on_host) = (Vec::new(), Vec::new());
    for _ in 0..STARTS {
        let started = Instant::now();
        let out = sandbox
            .exec(&ExecRequest::bash("true", Duration::from_secs(30)))
            .await
            .unwrap();
        assert!(out.success(), "{out:?}");
        in_sandbox.push(ms(started.elapsed()));
        let started = Instant::now();
        let status = tokio::process::Command::new("bash")
            .args(["-c", "true"])
            .status()
            .await
            .unwrap();
        assert!(status.success());
        on_host.push(ms(started.elapsed()));
    }
    let (s50, h50) = (
        percentile(&mut in_sandbox, 0.5),
        percentile(&mut on_host, 0.5),
    );
    println!(
        "starting an agent command ({STARTS} each): in its sandbox with the relay p50 {s50:.1} ms, \
         on the host p50 {h50:.1} ms; {:.1} ms more",
        s50 - h50
    );
}
