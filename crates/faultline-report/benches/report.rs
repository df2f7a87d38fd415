//! Times the whole report of a synthetic full sweep (10 configurations x 120 cases x 3 attempts
//! x 2 conditions = 7,200 trials): aggregation, pass@k, every 10,000-resample case and paired
//! bootstrap (groups, breakdowns, condition effects, all pairs of configurations), the GLMM, and
//! the Markdown and HTML renderings, against a 5 s budget.
//!
//! Run with `cargo bench -p faultline-report --bench report`; exits non-zero over budget. The
//! GLMM against lme4 on the same data is `cargo bench -p faultline-stats --bench sweep`.

use faultline_report::summary::{Options, build};
use faultline_report::{html, markdown, synthetic};
use faultline_stats::{Condition, SweepSpec};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const BUDGET: Duration = Duration::from_secs(5);

fn main() -> ExitCode {
    let spec = SweepSpec {
        configs: 10,
        cases: 120,
        attempts: 3,
        intercept: -0.7,
        effects: vec![(Condition::context(), 0.8)],
        sd_config: 1.0,
        sd_case: 1.5,
    };
    let records = match synthetic::records(&spec, 7_200) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let start = Instant::now();
    let report = build(&records, None, &Options::default());
    let statistics = start.elapsed();
    let start = Instant::now();
    let md = markdown::markdown(&report);
    let page = html::render(&html::HtmlInputs {
        title: "bench",
        report: &report,
        trials: &[],
        cases: &[],
    });
    let rendering = start.elapsed();
    let Ok(page) = page else {
        eprintln!("error: the HTML report did not render");
        return ExitCode::FAILURE;
    };
    let bootstraps = report.groups.len()
        + report
            .groups
            .iter()
            .map(|g| g.breakdowns.len())
            .sum::<usize>()
        + report.condition_effects.len()
        + report.comparisons.len();
    println!("faultline-report bench: {} trials", records.len());
    println!(
        "  statistics ({bootstraps} bootstraps of 10,000 resamples, {} GLMM fits) {:>9.1} ms",
        report.glmm.len(),
        statistics.as_secs_f64() * 1e3
    );
    println!(
        "  Markdown ({} kB) and HTML ({} kB)                          {:>9.1} ms",
        md.len() / 1000,
        page.len() / 1000,
        rendering.as_secs_f64() * 1e3
    );
    let total = statistics + rendering;
    println!(
        "  total {:>9.1} ms (budget {} s)",
        total.as_secs_f64() * 1e3,
        BUDGET.as_secs()
    );
    if let Some(fit) = report.glmm.first().and_then(|g| g.fit.as_ref()) {
        for e in &fit.effects {
            println!(
                "  GLMM {} effect {:.4} (SE {:.4}), sd agent {:.4}, sd case {:.4}",
                e.condition,
                e.coefficient.estimate,
                e.coefficient.std_error,
                fit.sd_agent,
                fit.sd_case
            );
        }
    }
    if total < BUDGET {
        ExitCode::SUCCESS
    } else {
        println!("OVER BUDGET");
        ExitCode::FAILURE
    }
}
