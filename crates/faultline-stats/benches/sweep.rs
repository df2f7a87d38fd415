//! Times every statistic on a synthetic full sweep (10 configs x 120 cases x
//! 2 conditions x 3 attempts = 7,200 attempts) against a 5 s budget, and times
//! lme4 on the same data when `Rscript` is available.
//!
//! Run with `cargo bench -p faultline-stats --bench sweep`; exits non-zero
//! when over budget or when the GLMM is not faster than lme4.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use faultline_stats::{
    Attribute, BootstrapOptions, CaseInfo, Condition, Result, ResultSet, SweepSpec, bootstrap_mean,
    fit_glmm, paired_bootstrap, simulate_sweep, to_csv,
};

const BUDGET: Duration = Duration::from_secs(5);
const SEED: u64 = 7_200;
fn spec() -> SweepSpec {
    SweepSpec {
        configs: 10,
        cases: 120,
        attempts: 3,
        intercept: -0.7,
        effects: vec![(Condition::context(), 0.8)],
        sd_config: 1.0,
        sd_case: 1.5,
    }
}

/// Elapsed time of each step, printed as a table at the end.
struct Timer(Vec<(&'static str, Duration)>);

impl Timer {
    fn run<T>(&mut self, label: &'static str, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let start = Instant::now();
        let out = f()?;
        self.0.push((label, start.elapsed()));
        Ok(out)
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<bool> {
    let observations = simulate_sweep(&spec(), SEED)?;
    let csv = to_csv(&observations);
    let options = BootstrapOptions::new(SEED);
    let mut timer = Timer(Vec::new());

    let results = timer.run("validate + index 7,200 attempts", || {
        ResultSet::new(observations)
    })?;
    let configs: Vec<String> = results.configs().map(str::to_owned).collect();
    let tiers: BTreeMap<String, CaseInfo> = results
        .cases()
        .enumerate()
        .map(|(i, c)| {
            (
                c.to_owned(),
                CaseInfo {
                    tier: Some(1 + (i % 3) as u32),
                    ..CaseInfo::default()
                },
            )
        })
        .collect();

    let conditions = results.conditions();
    let means = timer.run("case means, pass@1/3, pass^3, tier breakdown", || {
        let mut means = BTreeMap::new();
        for config in &configs {
            for condition in &conditions {
                let scores = results.case_means(config, condition)?;
                black_box(scores.breakdown(Attribute::Tier, &tiers)?);
                black_box(results.case_pass_at_k(config, condition, 1)?.mean());
                black_box(results.case_pass_at_k(config, condition, 3)?.mean());
                black_box(results.case_pass_hat_k(config, condition, 3)?.mean());
                means.insert((config.clone(), condition.clone()), scores);
            }
        }
        Ok(means)
    })?;
    timer.run("20 bootstrap CIs (10k resamples)", || {
        for scores in means.values() {
            black_box(bootstrap_mean(scores, &options)?);
        }
        Ok(())
    })?;
    timer.run("11 paired condition bootstraps", || {
        for config in &configs {
            let context = &means[&(config.clone(), Condition::context())];
            let symptom = &means[&(config.clone(), Condition::symptom())];
            black_box(paired_bootstrap(context, symptom, &options)?);
        }
        let pooled =
            [Condition::context(), Condition::symptom()].map(|c| results.pooled_case_means(&c));
        let [context, symptom] = pooled;
        black_box(paired_bootstrap(&context?, &symptom?, &options)?.histogram(40)?);
        Ok(())
    })?;
    timer.run("90 paired config-vs-config bootstraps", || {
        for condition in &conditions {
            for (i, a) in configs.iter().enumerate() {
                for b in &configs[i + 1..] {
                    let first = &means[&(a.clone(), condition.clone())];
                    let second = &means[&(b.clone(), condition.clone())];
                    black_box(paired_bootstrap(first, second, &options)?.histogram(40)?);
                }
            }
        }
        Ok(())
    })?;
    let fit = timer.run("GLMM (Laplace)", || fit_glmm(&results))?;

    let total: Duration = timer.0.iter().map(|(_, d)| *d).sum();
    println!("faultline-stats sweep bench: {} attempts", results.len());
    for (label, d) in &timer.0 {
        println!("  {label:<45} {:>9.3} ms", d.as_secs_f64() * 1e3);
    }
    println!(
        "  {:<45} {:>9.3} ms (budget {} s)",
        "total",
        total.as_secs_f64() * 1e3,
        BUDGET.as_secs()
    );
    let glmm_time = timer.0.last().map_or(Duration::ZERO, |(_, d)| *d);
    let Some(c) = fit.context_effect() else {
        eprintln!("error: the sweep has no context condition");
        return Ok(false);
    };
    println!(
        "ours: beta_condition {:.6} (SE {:.6}), sd_config {:.6}, sd_case {:.6}, logLik {:.4} ({} deviance evaluations)",
        c.estimate, c.std_error, fit.sd_config, fit.sd_case, fit.log_likelihood, fit.evaluations
    );

    let mut ok = total < BUDGET;
    match lme4(&csv) {
        Some((numbers, wall)) => {
            let glmer = numbers.get("glmer_seconds").copied().unwrap_or(f64::NAN);
            for (label, prefix) in [("lme4", ""), ("lme4 tolPwrss=1e-13", "tight_")] {
                let get = |k: &str| {
                    let key = format!("{prefix}{k}");
                    numbers.get(&key).copied().unwrap_or(f64::NAN)
                };
                println!(
                    "{label}: beta_condition {:.6} (SE {:.6}), sd_config {:.6}, sd_case {:.6}, logLik {:.4}",
                    get("beta_conditioncontext"),
                    get("se_conditioncontext"),
                    get("sd_config"),
                    get("sd_case"),
                    get("loglik")
                );
            }
            let ratio = glmer / glmm_time.as_secs_f64();
            println!(
                "GLMM: ours {:.1} ms, lme4 glmer {:.1} ms (Rscript wall {:.2} s incl. startup and a second fit): lme4/ours = {ratio:.1}x",
                glmm_time.as_secs_f64() * 1e3,
                glmer * 1e3,
                wall.as_secs_f64()
            );
            ok &= ratio > 1.0;
        }
        None => println!("lme4: Rscript or lme4 not available, comparison skipped"),
    }
    println!(
        "{}",
        if ok {
            "within budget"
        } else {
            "OVER BUDGET or slower than lme4"
        }
    );
    Ok(ok)
}

/// Runs the committed reference script on the sweep; `None` when R is missing.
fn lme4(csv: &str) -> Option<(BTreeMap<String, f64>, Duration)> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/fit_lme4.R");
    let path =
        std::env::temp_dir().join(format!("faultline-stats-bench-{}.csv", std::process::id()));
    std::fs::write(&path, csv).ok()?;
    let start = Instant::now();
    let output = Command::new("Rscript").arg(script).arg(&path).output();
    let wall = start.elapsed();
    let _ = std::fs::remove_file(&path);
    let output = output.ok().filter(|o| o.status.success())?;
    let numbers = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            let (key, value) = line.split_once(' ')?;
            Some((key.to_owned(), value.parse().ok()?))
        })
        .collect();
    Some((numbers, wall))
}
