//! Regenerates `../replica-trace.md`: the oracle's report scenario (three peers, the third
//! receives the second's update first) and one seeded shuffled delivery, each run in a child
//! process so that an abort can be recorded. Run: `cargo run --quiet > ../replica-trace.md`

#[path = "../../../oracle/tests/out_of_order.rs"]
#[allow(dead_code)]
mod scenario;

use loro::{ImportStatus, LoroDoc, LoroValue, VersionVector};
use std::process::Command;
use std::sync::Mutex;

/// The table cells of the import in progress, for the panic hook.
static CURRENT: Mutex<String> = Mutex::new(String::new());

fn vv(v: &VersionVector) -> String {
    let mut e: Vec<(u64, i32)> = v.iter().map(|(p, c)| (*p, *c)).collect();
    e.sort();
    let parts: Vec<String> = e.iter().map(|(p, c)| format!("{p}:{c}")).collect();
    format!("{{{}}}", parts.join(", "))
}

fn show(v: &LoroValue) -> String {
    match v {
        LoroValue::Map(m) => {
            let mut e: Vec<(&String, &LoroValue)> = m.iter().collect();
            e.sort_by(|a, b| a.0.cmp(b.0));
            let parts: Vec<String> = e.iter().map(|(k, v)| format!("{k}: {}", show(v))).collect();
            format!("{{{}}}", parts.join(", "))
        }
        LoroValue::List(l) => {
            let parts: Vec<String> = l.iter().map(show).collect();
            format!("[{}]", parts.join(", "))
        }
        LoroValue::String(s) => format!("{:?}", s.as_str()),
        LoroValue::I64(i) => i.to_string(),
        LoroValue::Double(d) => d.to_string(),
        other => format!("{other:?}"),
    }
}

fn pending(s: &ImportStatus) -> String {
    match &s.pending {
        None => "-".into(),
        Some(r) => {
            let mut e: Vec<(u64, i32, i32)> = r.iter().map(|(p, (a, b))| (*p, *a, *b)).collect();
            e.sort();
            let parts: Vec<String> = e.iter().map(|(p, a, b)| format!("{p}:{a}..{b}")).collect();
            parts.join(", ")
        }
    }
}

fn blob(bytes: &[u8]) -> String {
    let m = LoroDoc::decode_import_blob_meta(bytes, false).unwrap();
    format!(
        "{} .. {}, {} change(s), {} bytes",
        vv(&m.partial_start_vv),
        vv(&m.partial_end_vv),
        m.change_num,
        bytes.len()
    )
}

fn hook() {
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let at = info
            .location()
            .map(|l| {
                let f = l.file();
                if f.starts_with("/rustc/") {
                    "the Rust standard library".to_string()
                } else {
                    let f = f.rfind("src/").map_or(f, |i| &f[i..]);
                    format!("loro-internal {f}:{}:{}", l.line(), l.column())
                }
            })
            .unwrap_or_default();
        let mut cur = CURRENT.lock().unwrap_or_else(|e| e.into_inner());
        println!("| {} | **panic**: {msg} ({at}) |", cur);
        *cur = " | ".to_string();
    }));
}

fn child_report() {
    hook();
    let (_a, b, from_a, from_b) = scenario::report_scenario();
    println!("| update | content |");
    println!("|---|---|");
    println!("| A1 (peer 1) | {} |", blob(&from_a));
    println!("| B1 (peer 2) | {} |", blob(&from_b));
    println!("\nPeer 2 after B1: `{}`\n", show(&b.get_deep_value()));
    println!("Peer 3 receives B1, then A1:\n");
    println!("| step | import | result |");
    println!("|---|---|---|");
    let c = scenario::new_peer(3);
    for (step, (name, bytes)) in [("B1", &from_b), ("A1", &from_a)].into_iter().enumerate() {
        *CURRENT.lock().unwrap() = format!("{} | {name}", step + 1);
        let s = c.import(bytes).unwrap();
        println!(
            "| {} | {name} | pending {}; version after {} |",
            step + 1,
            pending(&s),
            vv(&c.oplog_vv())
        );
    }
    println!("\nPeer 3 value: `{}`", show(&c.get_deep_value()));
}

fn child_shuffled(k: u64) {
    hook();
    let mut rng = scenario::Rng::new(k);
    let h = scenario::build_history(&mut rng, 3, 8);
    let order = scenario::shuffled_order(&mut rng, h.updates.len());
    println!("| update | what the peer did | content |");
    println!("|---|---|---|");
    for u in &h.updates {
        let (name, what) = u.label.split_once(": ").unwrap();
        println!("| {name} | {what} | {} |", blob(&u.bytes));
    }
    let names: Vec<String> = order.iter().map(|i| format!("u{i}")).collect();
    println!("\nDelivery order at replica 500: {}\n", names.join(", "));
    println!("| step | import | result |");
    println!("|---|---|---|");
    let mut step = 0;
    scenario::deliver_observed(
        &h,
        &order,
        500,
        &mut |u| {
            step += 1;
            let name = u.label.split_once(':').unwrap().0;
            *CURRENT.lock().unwrap() = format!("{step} | {name}");
        },
        &mut |_, r, s| {
            let cur = CURRENT.lock().unwrap().clone();
            println!("| {cur} | pending {}; version after {} |", pending(s), vv(&r.oplog_vv()));
        },
    );
    println!("\nAll updates delivered.");
}

fn run_child(args: &[&str]) -> (String, String) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let end = if out.status.success() {
        "exited normally".to_string()
    } else {
        use std::os::unix::process::ExitStatusExt;
        match out.status.signal() {
            Some(6) => "the process aborted (SIGABRT)".to_string(),
            Some(s) => format!("the process was killed by signal {s}"),
            None => format!("the process exited with status {}", out.status.code().unwrap()),
        }
    };
    (text, end)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("--child-report") => return child_report(),
        Some("--child-shuffled") => return child_shuffled(args[2].parse().unwrap()),
        _ => {}
    }
    println!("# Replica trace (loro 1.13.1)\n");
    println!("Every commit is exported as its own update (`ExportMode::updates` from the version");
    println!("before the commit) and imported with `LoroDoc::import` on the receiving replica.\n");
    println!("## Three peers\n");
    println!("Peer 1 adds an ordinary map `doc.settings`; peer 2 imports that, then writes into a");
    println!("mergeable text `title` under it (`ensure_mergeable_text`).\n");
    let (text, end) = run_child(&["--child-report"]);
    print!("{text}");
    println!("\nEnd of run: {end}.\n");
    for k in 1..=40u64 {
        let (text, end) = run_child(&["--child-shuffled", &k.to_string()]);
        if end.contains("abort") {
            println!("## Shuffled delivery (history {k}, 3 peers)\n");
            print!("{text}");
            println!("\nEnd of run: {end}.");
            return;
        }
    }
    println!("No shuffled delivery aborted.");
}
