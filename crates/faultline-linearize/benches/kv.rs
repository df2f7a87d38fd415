//! Times the checker on 100 generated key-value histories of 1,000 operations each (5 clients,
//! 10 keys), which are linearizable by construction, then on the same histories with one read
//! made stale, which are not.
//!
//! Run with `cargo bench -p faultline-linearize --bench kv`; exits non-zero when a verdict is
//! wrong or the 100 linearizable histories take more than the 2-minute budget.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use faultline_linearize::generate::{KvWorkload, kv_history};
use faultline_linearize::models::{KvInput, KvModel, KvOutput};
use faultline_linearize::{CheckOptions, History, Operation, Verdict, check};

const HISTORIES: u64 = 100;
const BUDGET: Duration = Duration::from_secs(120);

/// The history with the last get that read a non-empty value changed to read the empty
/// value although a write to its key completed before the get was called, or `None` when no
/// get qualifies.
fn with_stale_read(history: &History<KvInput, KvOutput>) -> Option<History<KvInput, KvOutput>> {
    let mut ops = history.operations().to_vec();
    let target = (0..ops.len()).rev().find(|&i| {
        let op = &ops[i];
        matches!(op.output(), Some(KvOutput::Get { value }) if !value.is_empty())
            && ops.iter().any(|w| {
                !matches!(w.input, KvInput::Get { .. })
                    && w.input.key() == op.input.key()
                    && w.return_time().is_some_and(|r| r < op.call)
            })
    })?;
    let op: &mut Operation<KvInput, KvOutput> = &mut ops[target];
    if let Some(ret) = op.ret.as_mut() {
        ret.output = KvOutput::Get {
            value: String::new(),
        };
    }
    History::new(ops).ok()
}

fn main() -> ExitCode {
    let workload = KvWorkload::default();
    let histories: Vec<_> = (0..HISTORIES)
        .map(|seed| kv_history(&workload, seed))
        .collect();
    let options = CheckOptions::default();
    let mut wrong = 0;

    let start = Instant::now();
    let mut slowest = Duration::ZERO;
    let mut steps = 0;
    for (seed, h) in histories.iter().enumerate() {
        let one = Instant::now();
        let result = check(&KvModel, h, &options);
        slowest = slowest.max(one.elapsed());
        steps += result.steps;
        if result.verdict != Verdict::Linearizable {
            eprintln!("seed {seed}: {:?}, expected linearizable", result.verdict);
            wrong += 1;
        }
    }
    let legal = start.elapsed();
    println!(
        "{HISTORIES} linearizable histories of {} operations ({} clients, {} keys): {:.3} s total, slowest {:.1} ms, {steps} steps",
        workload.operations,
        workload.clients,
        workload.keys,
        legal.as_secs_f64(),
        slowest.as_secs_f64() * 1e3
    );

    let mutated: Vec<_> = histories.iter().filter_map(with_stale_read).collect();
    let start = Instant::now();
    let mut sizes = Vec::new();
    let mut minimal = 0;
    for h in &mutated {
        let result = check(&KvModel, h, &options);
        match (result.verdict, result.counterexample) {
            (Verdict::Illegal, Some(c)) => {
                sizes.push(c.operations.len() + c.context.len());
                minimal += usize::from(c.one_minimal);
            }
            (verdict, _) => {
                eprintln!("a stale read was judged {verdict:?}");
                wrong += 1;
            }
        }
    }
    sizes.sort_unstable();
    println!(
        "{} histories with a stale read: {:.3} s total with minimization; counterexamples with their context of {}..={} operations (median {}), {minimal} 1-minimal",
        mutated.len(),
        start.elapsed().as_secs_f64(),
        sizes.first().unwrap_or(&0),
        sizes.last().unwrap_or(&0),
        sizes.get(sizes.len() / 2).unwrap_or(&0),
    );

    if wrong > 0 || legal > BUDGET {
        eprintln!(
            "{wrong} wrong verdicts; {:.1} s against a budget of {} s",
            legal.as_secs_f64(),
            BUDGET.as_secs()
        );
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
