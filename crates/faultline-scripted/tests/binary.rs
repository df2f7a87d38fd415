//! The `faultline-scripted` binary as an end-to-end test would use it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Kills the server even when an assertion fails first.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for_port(path: &Path, server: &mut Server) -> u16 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            return text.trim().parse().unwrap();
        }
        if let Some(status) = server.0.try_wait().unwrap() {
            panic!("server exited early with {status}");
        }
        assert!(Instant::now() < deadline, "no port file after 10 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn post(port: u16, path: &str, body: &str) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\nanthropic-version: 2023-06-01\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    reply
}

#[test]
fn binary_serves_a_script_file_and_logs_requests() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.toml");
    std::fs::write(
        &script,
        "[[steps]]\nkind = \"tool_call\"\ncommand = \"make test\"\n\n[[steps]]\nkind = \"text\"\ntext = \"done\"\n",
    )
    .unwrap();
    let port_file = dir.path().join("port");
    let log = dir.path().join("requests.jsonl");
    let mut server = Server(
        Command::new(env!("CARGO_BIN_EXE_faultline-scripted"))
            .arg("--script")
            .arg(&script)
            .arg("--port-file")
            .arg(&port_file)
            .arg("--request-log")
            .arg(&log)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let port = wait_for_port(&port_file, &mut server);

    let openai = post(
        port,
        "/v1/chat/completions",
        r#"{"model":"m","messages":[{"role":"user","content":"go"}]}"#,
    );
    assert!(openai.starts_with("HTTP/1.1 200"), "{openai}");
    assert!(openai.contains(r#"\"command\":\"make test\""#), "{openai}");
    let anthropic = post(
        port,
        "/v1/messages",
        r#"{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"go"}]}"#,
    );
    assert!(anthropic.contains(r#""text":"done""#), "{anthropic}");

    let logged = std::fs::read_to_string(&log).unwrap();
    assert_eq!(logged.lines().count(), 2);
}

#[test]
fn binary_rejects_a_bad_script_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.json");
    std::fs::write(&script, r#"{"steps": [{"kind": "nope"}]}"#).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_faultline-scripted"))
        .arg("--script")
        .arg(&script)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("nope"), "{stderr}");
}
