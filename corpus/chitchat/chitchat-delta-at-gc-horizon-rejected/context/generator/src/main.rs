//! Prints the bundle: the message trace of the reported three-node run (owner, reader, relay),
//! with the nodes' chitchat log lines, heartbeats elided.

#[path = "../../../oracle/tests/gc_horizon_catchup.rs"]
#[allow(dead_code)]
mod scenario;

use std::io::Write;
use std::sync::Mutex;

use scenario::{check_run, reported_plan, run_plan, Event, Trace};

static LOG: Mutex<Vec<u8>> = Mutex::new(Vec::new());

struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        LOG.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn drain_logs() -> Vec<String> {
    let bytes = std::mem::take(&mut *LOG.lock().unwrap());
    String::from_utf8_lossy(&bytes).lines().map(str::to_string).collect()
}

/// Splits `a: x, b: [y, z], c: "q, r"` into its top-level fields.
fn fields(inner: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let (mut depth, mut quoted, mut start) = (0i32, false, 0usize);
    let bytes = inner.as_bytes();
    let mut push = |piece: &str| {
        if let Some((k, v)) = piece.split_once(": ") {
            out.push((k.trim().to_string(), v.trim().to_string()));
        }
    };
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'"' => quoted = !quoted,
            b'[' | b'{' | b'(' if !quoted => depth += 1,
            b']' | b'}' | b')' if !quoted => depth -= 1,
            b',' if !quoted && depth == 0 => {
                push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    push(&inner[start..]);
    out
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> &'a str {
    fields.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str()).unwrap_or("?")
}

/// Rewrites every innermost `Name { ... }` with `f` applied to its fields.
fn rewrite(text: &str, name: &str, f: impl Fn(&[(String, String)]) -> String) -> String {
    let open = format!("{name} {{ ");
    let mut out = String::new();
    let mut rest = text;
    while let Some(pos) = rest.find(&open) {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + open.len()..];
        let (mut depth, mut end) = (0i32, after.len());
        for (i, c) in after.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    end = i;
                    break;
                }
                '}' => depth -= 1,
                _ => {}
            }
        }
        out.push_str(&f(&fields(after[..end].trim_end())));
        rest = &after[(end + 1).min(after.len())..];
    }
    out.push_str(rest);
    out
}

/// A compact form of a message's Debug output (heartbeats, which follow the owner's gossip
/// ticks, are left out).
fn compact(debug: &str) -> String {
    let mut text = debug.to_string();
    for (name, n) in [("indexer-1", 1), ("searcher-1", 2), ("searcher-2", 3)] {
        text = text.replace(&format!("{name}:171700000{n}:10.2.0.{n}:7280"), name);
    }
    text = rewrite(&text, "NodeDigest", |f| {
        format!("gc {} max {}", field(f, "last_gc_version"), field(f, "max_version"))
    });
    text = rewrite(&text, "KeyValueMutation", |f| {
        let status = field(f, "status");
        let value = field(f, "value").trim_matches('"').to_string();
        let key = field(f, "key").trim_matches('"').to_string();
        match status {
            "Set" => format!("{key}={value}@{}", field(f, "version")),
            other => format!("{key} {other}@{}", field(f, "version")),
        }
    });
    text = rewrite(&text, "NodeDelta", |f| {
        format!(
            "{} (from {}, gc {}, max {}) {}",
            field(f, "chitchat_id"),
            field(f, "from_version_excluded"),
            field(f, "last_gc_version"),
            field(f, "max_version"),
            field(f, "key_values")
        )
    });
    text = rewrite(&text, "Delta", |f| format!("delta {}", field(f, "node_deltas")));
    text = rewrite(&text, "Digest", |f| {
        format!("digest {}", field(f, "node_digests").replace("{", "[").replace("}", "]"))
    });
    text = rewrite(&text, "Syn", |f| field(f, "digest").to_string());
    text = rewrite(&text, "SynAck", |f| format!("{}; {}", field(f, "digest"), field(f, "delta")));
    text = rewrite(&text, "Ack", |f| field(f, "delta").to_string());
    text
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    tracing_subscriber::fmt()
        .with_writer(|| LogWriter)
        .without_time()
        .with_ansi(false)
        .with_max_level(tracing_subscriber::filter::LevelFilter::WARN)
        .init();

    let plan = reported_plan();
    let mut trace = Trace { events: Vec::new(), record_messages: true, logs: Some(drain_logs) };
    let run = run_plan(&plan, &mut trace).await;
    let mut check = Trace::quiet();
    std::panic::set_hook(Box::new(|_| {}));
    let outcome = tokio::spawn(async move {
        check_run(&plan, &run, &mut check).await;
    })
    .await;
    let _ = drain_logs();

    println!("# Message trace: indexer-1 (owner), searcher-1 (reader), searcher-2 (relay)\n");
    println!(
        "chitchat 0.10.0 in one process, in-memory transport; every message is delivered by hand \
         in the order below. indexer-1 gossips and garbage-collects every 25 ms with a 600 ms \
         grace period; the searchers have a one-hour grace period. Messages are shown compactly: \
         a digest lists each node's (last GC version, max version); a delta lists, per node, the \
         version it starts after, its GC and max versions and its key-values (key=value@version). \
         Indented lines are chitchat's own WARN logs.\n"
    );
    println!("```text");
    // The first two exchanges only copy the owner's three keys to both searchers.
    let first_note = trace.events.iter().position(|e| matches!(e, Event::Note(_))).unwrap_or(0);
    for event in &trace.events[first_note..] {
        match event {
            Event::Note(text) => println!("-- {text}"),
            Event::Log(line) => println!("   {line}"),
            Event::Msg { from, to, kind, text, .. } => {
                println!("{from} -> {to} {kind}: {}", compact(text));
            }
        }
    }
    println!("```\n");
    let reader_ok = outcome.is_ok();
    println!(
        "After the last exchange, searcher-1 {} indexer-1's new key `split_0`.",
        if reader_ok { "holds" } else { "still does not hold" }
    );
}
