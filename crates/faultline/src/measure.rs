//! `faultline cases measure`: a case's buggy failure rate, measured for its curator to record.

use crate::Env;
use anyhow::{Result, bail};
use faultline_sandbox::Toolchain;
use std::process::ExitCode;

pub async fn measure(env: &Env, id: &str, runs: u32) -> Result<ExitCode> {
    let corpus = env.corpus()?;
    let Some(case) = corpus.get(id) else {
        bail!("no case `{id}` in {}", corpus.root.display());
    };
    faultline_sandbox::check_available().await?;
    let toolchain = Toolchain::detect()?;
    let prepared =
        faultline_corpus::prepare(case, &env.data, &toolchain, &Default::default()).await?;
    eprintln!("{id}: running the oracle on the buggy version with seeds 1..={runs}");
    let measured = faultline_grade::validate::measure_buggy_failure_rate(
        case,
        &prepared,
        &env.data,
        &toolchain,
        runs,
        |seed, verdict| {
            if seed % 10 == 0 || !verdict.is_failure() {
                eprintln!("  seed {seed}: {}", verdict.as_str());
            }
        },
    )
    .await?;
    let verdicts: Vec<String> = measured
        .verdicts
        .iter()
        .map(|(v, n)| format!("{v} {n}"))
        .collect();
    eprintln!(
        "{id}: {} (oracle built in {:.0} s, run in {:.0} s)",
        verdicts.join(", "),
        measured.build_secs,
        measured.run_secs
    );
    if !measured.passing_seeds.is_empty() {
        eprintln!(
            "{id}: the buggy version passed with seeds {:?}; loop the oracle so a false pass is \
             rarer than 1 in 1,000 runs (docs/case-format.md)",
            measured.passing_seeds
        );
    }
    let rate: String = measured.rate.into();
    println!("buggy_failure_rate = \"{rate}\"");
    Ok(ExitCode::SUCCESS)
}
