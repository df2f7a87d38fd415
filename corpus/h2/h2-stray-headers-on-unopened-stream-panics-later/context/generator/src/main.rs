//! Produces context/gateway-capture.md: the frames of two connections between the h2 client and
//! the misbehaving gateway, as the gateway side saw them, and what the client application got.
//! The runs are the oracle's (`run` with plans built by hand, as in the report); this program adds
//! a panic hook (the panic's message and location) and the formatting.
//! Run from context/generator: `cargo run -q > ../gateway-capture.md`.

#[path = "../../../oracle/tests/stray_headers.rs"]
#[allow(dead_code)]
mod scenario;

use scenario::{Log, Plan, Stray};
use std::sync::{Arc, Mutex};

static PANIC: Mutex<Option<String>> = Mutex::new(None);

fn short(file: &str) -> String {
    match file.rfind("/src/") {
        Some(i) => file[i + 1..].to_string(),
        None => file.to_string(),
    }
}

fn main() {
    std::panic::set_hook(Box::new(|info| {
        let at = info
            .location()
            .map(|l| format!("{}:{}:{}", short(l.file()), l.line(), l.column()))
            .unwrap_or_default();
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        *PANIC.lock().unwrap() = Some(format!("panicked at h2 0.3.6 {at}: {msg}"));
    }));

    println!("# Gateway-side capture of two client connections\n");
    println!("`<-` frame from the h2 client, `->` frame from the gateway. The client sends one GET at a time and awaits its answer.\n");
    let runs = [
        ("Connection 1: stray frame names the next stream id", Plan { requests: 5, stray_before_answer: 1, ahead: 1, stray: Stray::ConnectionHeader }),
        ("Connection 2: stray frame names a stream id two requests ahead", Plan { requests: 6, stray_before_answer: 0, ahead: 2, stray: Stray::TransferEncoding }),
    ];
    for (title, plan) in runs {
        let log = Arc::new(Mutex::new(Log::default()));
        *PANIC.lock().unwrap() = None;
        let l2 = log.clone();
        let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(scenario::run(plan, l2))
        }));
        let log = log.lock().unwrap().clone();
        println!("## {title}\n");
        println!("```");
        for f in &log.frames {
            println!("{f}");
        }
        println!("```\n");
        for (i, a) in log.answers.iter().enumerate() {
            println!("- request {}: {}", i + 1, match a { Ok(s) => format!("status {s}"), Err(e) => format!("error: {e}") });
        }
        match res {
            Err(_) => println!(
                "- request {}: the client application {}\n",
                log.answers.len() + 1,
                PANIC.lock().unwrap().clone().unwrap_or_default()
            ),
            Ok(()) => println!(),
        }
    }
}
