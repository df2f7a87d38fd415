//! Prints ../replica-trace.md: the oracle's altered updates from a writer (client 12) reach a
//! replica (client 900), which decodes, applies and then edits the text. The surrogate case aborts
//! the process, so it runs in a child. Run: `cargo run --quiet > ../replica-trace.md`

#[path = "../../../oracle/tests/invalid_utf8.rs"]
#[allow(dead_code, unused_imports)]
mod scenario;

use std::os::unix::process::ExitStatusExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use yrs::updates::decoder::Decode;
use yrs::{Doc, GetString, Text, Transact, Update};

/// Where a panic happened, relative to the crate it happened in, so the text does not depend on
/// where the crate's sources are.
static LOCATION: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

fn panic_message(e: Box<dyn std::any::Any + Send>) -> String {
    let message = e
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    format!("{message} ({})", LOCATION.lock().unwrap())
}

fn deliver(label: &str, writer_text: &str, bytes: &[u8]) {
    let decoded = Update::decode_v1(bytes);
    let decoded_str = match &decoded {
        Ok(_) => "Ok".to_string(),
        Err(e) => format!("Err({e:?})"),
    };
    let Ok(update) = decoded else {
        println!("| {label} | {decoded_str} | | | | |");
        return;
    };
    let replica = Doc::with_client_id(900);
    let text = replica.get_or_insert_text("note");
    let applied = format!("{:?}", replica.transact_mut().apply_update(update));
    let raw = text.get_string(&replica.transact()).into_bytes();
    let len = text.len(&replica.transact());
    let edit = catch_unwind(AssertUnwindSafe(|| {
        text.insert(&mut replica.transact_mut(), 3, "x");
        text.insert(&mut replica.transact_mut(), 1, "x");
        text.remove_range(&mut replica.transact_mut(), 1, 2);
    }))
    .map(|_| "Ok".to_string())
    .unwrap_or_else(|e| format!("panic: {}", panic_message(e)));
    println!(
        "| {label} | {decoded_str} | {applied} | {raw:?} (UTF-8 check: {}) | {len} (writer: {}) | {edit} |",
        if std::str::from_utf8(&raw).is_ok() { "ok" } else { "invalid" },
        writer_text.encode_utf16().count()
    );
}

/// The child's panic report without what varies between machines and runs: paths to the
/// standard library, the thread's id, blank lines.
fn without_paths(stderr: &str) -> String {
    stderr
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let line = match (
                line.find(" (").zip(line.find(") panicked")),
                line.starts_with("thread "),
            ) {
                (Some((open, close)), true) if open < close => {
                    format!("{}{}", &line[..open], &line[close + 1..])
                }
                _ => line.to_string(),
            };
            match (line.find(" at "), line.find("library/")) {
                (Some(at), Some(lib)) if at < lib => {
                    format!("{} at .../{}", &line[..at], &line[lib..])
                }
                _ => line,
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn main() {
    let surrogate = scenario::splice(
        &scenario::text_update(12, "emoji: xyz!"),
        b"xyz",
        &[0xED, 0xA0, 0xBD],
    );
    if std::env::args().nth(1).as_deref() == Some("surrogate") {
        let update = Update::decode_v1(&surrogate).unwrap();
        eprintln!("decode_v1: Ok; applying");
        let replica = Doc::with_client_id(900);
        let _ = replica.transact_mut().apply_update(update);
        eprintln!("applied");
        return;
    }
    std::panic::set_hook(Box::new(|info| {
        if let Some(l) = info.location() {
            let file = l.file();
            let file = file.rfind("/src/").map_or(file, |at| &file[at + 1..]);
            *LOCATION.lock().unwrap() = format!("{file}:{}", l.line());
        }
    }));
    println!("# Replica receiving altered updates\n");
    println!(
        "A writer (client 12) inserts one string into the text `note` and sends its full state\n\
         (`encode_state_as_update_v1`). On the way some bytes inside the string were altered (as they reached\n\
         us from the third-party client); the replica (client 900, default options) decodes and applies the\n\
         result, then makes three local edits.\n"
    );
    println!(
        "| writer text, bytes changed in transit | decode_v1 | apply_update | replica `get_string` bytes | replica `len` | insert(3), insert(1), remove_range(1, 2) |"
    );
    println!("|---|---|---|---|---|---|");
    let accented = scenario::text_update(12, "héllo wörld");
    let ascii = scenario::text_update(12, "plain ascii text");
    deliver(
        "\"héllo wörld\", é = C3 A9 -> C3 41",
        "héllo wörld",
        &scenario::splice(&accented, "é".as_bytes(), &[0xC3, 0x41]),
    );
    deliver(
        "\"plain ascii text\", s -> 80",
        "plain ascii text",
        &scenario::splice(&ascii, b"ascii", &[b'a', 0x80, b'c', b'i', b'i']),
    );
    deliver(
        "\"plain ascii text\", unchanged",
        "plain ascii text",
        &ascii,
    );
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .arg("surrogate")
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&child.stderr);
    let ended = match (child.status.code(), child.status.signal()) {
        (_, Some(signal)) => format!("dies with signal {signal}"),
        (Some(code), _) => format!("exits with status {code}"),
        _ => "ends".to_string(),
    };
    let when = if stderr.contains("decode_v1: Ok") {
        "after `Update::decode_v1` returned"
    } else {
        "while `Update::decode_v1` is still running"
    };
    println!(
        "\nThird case, in a child process (the parent survives): \"emoji: xyz!\" with `xyz` changed to\n\
         `ED A0 BD` (a lone UTF-16 surrogate written the WTF-8 way). The child {ended}\n\
         {when}:\n"
    );
    println!("```text\n{}\n```", without_paths(stderr.trim_end()));
}
