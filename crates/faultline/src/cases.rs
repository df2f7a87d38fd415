//! `faultline cases ...` and `faultline prepare`.

use crate::Env;
use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use faultline_corpus::{Case, Selection};
use faultline_grade::{ValidateOptions, validate_case};
use faultline_sandbox::Toolchain;
use faultline_schema::validation::{VALIDATION_SCHEMA_VERSION, ValidationReport};
use faultline_schema::{Category, Reasoning};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::SystemTime;

#[derive(Subcommand)]
pub enum CasesCommand {
    /// List cases.
    List {
        #[command(flatten)]
        filter: Filter,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Print a Markdown table.
        #[arg(long)]
        markdown: bool,
        /// Rewrite the table in `<corpus>/README.md` (between its markers).
        #[arg(long)]
        write_readme: bool,
    },
    /// Show one case: its metadata, symptom and bundle (curators only: it shows the labels).
    Show {
        /// The case id.
        case: String,
    },
    /// Record the dependency versions a case resolved (`Cargo.lock`, `oracle/Cargo.lock`) in the
    /// case directory, preparing it first if needed.
    Lock {
        /// Case ids.
        #[arg(required = true)]
        cases: Vec<String>,
    },
    /// Measure how often a case's oracle fails on the buggy version, over seeds 1..=N: the
    /// `buggy_failure_rate` a seeded or looped oracle records in case.toml.
    Measure {
        /// The case id.
        case: String,
        /// Oracle runs (seeds 1..=N).
        #[arg(long, default_value_t = 100)]
        runs: u32,
    },
    /// Validate cases: oracle fails on buggy k/k, passes with the gold patch k/k, regression
    /// tests pass on both, texts within budget and free of leaks.
    Validate(ValidateArgs),
    /// Merge the rows of validation reports made elsewhere (other machines, other checkouts:
    /// the JSON that `validate --markdown` writes) into the report beside `--markdown`.
    MergeValidation {
        /// The Markdown report to update (its JSON is beside it, same name, `.json`).
        #[arg(long)]
        markdown: PathBuf,
        /// Take only these cases' rows from the reports.
        #[arg(long = "case")]
        cases: Vec<String>,
        /// The validation reports (JSON) whose rows to take.
        #[arg(required = true)]
        reports: Vec<PathBuf>,
    },
}

#[derive(Args, Default, Clone)]
pub struct Filter {
    /// Only this system.
    #[arg(long)]
    system: Option<String>,
    /// Only this category.
    #[arg(long)]
    category: Option<Category>,
    /// Only this tier (1 hardest .. 3).
    #[arg(long)]
    tier: Option<u8>,
    /// Only cases whose scenario needs two or more nodes, replicas or peers (cases that do not
    /// record their scenario are left out).
    #[arg(long)]
    multi_node: bool,
    /// Only cases whose scenario reasons across this (`message-order`, `restart`, ...; see
    /// docs/case-format.md).
    #[arg(long)]
    across: Option<Reasoning>,
}

#[derive(Args)]
pub struct ValidateArgs {
    /// Case ids or glob patterns.
    cases: Vec<String>,
    /// Validate every case.
    #[arg(long, conflicts_with = "cases")]
    all: bool,
    /// Validate the cases of a suite (`corpus/suites/<name>.txt`).
    #[arg(long, conflicts_with_all = ["cases", "all"])]
    suite: Option<String>,
    #[command(flatten)]
    filter: Filter,
    /// Oracle runs per version.
    #[arg(short, long, default_value_t = 5)]
    k: u32,
    /// Rebuild workspaces from scratch.
    #[arg(long)]
    force_prepare: bool,
    /// Only the checks that need no build (labels, texts and their budgets, leaks,
    /// duplicates), for quick feedback while writing a case; sources are fetched if missing.
    #[arg(long, conflicts_with_all = ["force_prepare", "markdown", "json"])]
    static_only: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Also write the report as Markdown to this file (for `corpus/VALIDATION.md`), and as
    /// JSON beside it (same name, `.json`), which `--merge` reads back.
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Keep the rows of the existing report (the JSON beside `--markdown`) for cases that this
    /// run did not validate and that still exist, so new cases can be added to
    /// `corpus/VALIDATION.md` without validating every case again. Each row keeps its own date
    /// and case hash, so a changed case shows as stale.
    #[arg(long, requires = "markdown")]
    merge: bool,
}

#[derive(Args)]
pub struct PrepareArgs {
    /// Case ids or glob patterns.
    cases: Vec<String>,
    /// Prepare every case (for a data directory that shards then share read-only).
    #[arg(long, conflicts_with = "cases")]
    all: bool,
    /// Prepare the cases of a suite (`corpus/suites/<name>.txt`).
    #[arg(long, conflicts_with_all = ["cases", "all"])]
    suite: Option<String>,
    #[command(flatten)]
    filter: Filter,
    /// Rebuild from scratch even if a prepared workspace matches.
    #[arg(long)]
    force: bool,
}

pub async fn run(env: &Env, cmd: CasesCommand) -> Result<ExitCode> {
    match cmd {
        CasesCommand::List {
            filter,
            json,
            markdown,
            write_readme,
        } => list_cases(env, filter, json, markdown, write_readme),
        CasesCommand::Show { case } => show(env, &case),
        CasesCommand::Validate(args) => validate(env, args).await,
        CasesCommand::MergeValidation {
            markdown,
            cases,
            reports,
        } => merge_validation(env, &markdown, &cases, &reports),
        CasesCommand::Lock { cases } => lock(env, &cases).await,
        CasesCommand::Measure { case, runs } => crate::measure::measure(env, &case, runs).await,
    }
}

pub fn selection(patterns: Vec<String>, f: Filter) -> Selection {
    Selection {
        patterns,
        system: f.system,
        category: f.category,
        tier: f.tier,
        multi_node: f.multi_node,
        across: f.across,
    }
}

/// The cases a command names by ids or patterns, `--all` or `--suite`, and the filters; at
/// least one, or an error saying how to name them (`verb` is what the command does to them).
fn chosen<'a>(
    corpus: &'a faultline_corpus::Corpus,
    ids: &[String],
    all: bool,
    suite: Option<&str>,
    filter: Filter,
    verb: &str,
) -> Result<Vec<&'a Case>> {
    let patterns = match suite {
        Some(name) => corpus.suite(name)?,
        None => ids.to_vec(),
    };
    if patterns.is_empty() && !all {
        bail!("name the cases to {verb}, or pass --all or --suite NAME");
    }
    let cases = corpus
        .select(&selection(patterns, filter))
        .map_err(anyhow::Error::msg)?;
    if cases.is_empty() {
        bail!("no case matches");
    }
    Ok(cases)
}

fn list_cases(
    env: &Env,
    filter: Filter,
    json: bool,
    markdown: bool,
    write_readme: bool,
) -> Result<ExitCode> {
    let corpus = env.corpus()?;
    let loaded = all_loaded(&corpus);
    let cases = corpus
        .select(&selection(vec![], filter))
        .map_err(anyhow::Error::msg)?;
    let manifests: Vec<_> = cases.iter().map(|c| &c.manifest).collect();
    let caught = recorded_decoys(&corpus.root)?;
    if write_readme {
        let path = corpus.root.join("README.md");
        let text = std::fs::read_to_string(&path)?;
        let Some(new) = faultline_report::corpus::with_table(&text, &manifests, &caught) else {
            bail!("{} lacks the generated-table markers", path.display());
        };
        faultline_schema::io::write_atomic(&path, new.as_bytes())?;
        eprintln!("wrote {} ({} cases)", path.display(), manifests.len());
        return Ok(loaded);
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&manifests)?);
        return Ok(loaded);
    }
    let t = faultline_report::corpus::table(&manifests, &caught);
    if markdown {
        print!("{}", t.to_markdown());
    } else {
        println!("{}", t.to_terminal());
        println!("{} cases", cases.len());
    }
    Ok(loaded)
}

/// The decoy counts of the corpus's validation report, if it has one.
fn recorded_decoys(root: &std::path::Path) -> Result<faultline_report::corpus::DecoysCaught> {
    let path = root.join("VALIDATION.json");
    let Ok(bytes) = std::fs::read(&path) else {
        return Ok(Default::default());
    };
    let report: faultline_schema::validation::ValidationReport = serde_json::from_slice(&bytes)
        .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
    Ok(faultline_report::corpus::decoys_caught(&report))
}

fn show(env: &Env, id: &str) -> Result<ExitCode> {
    let corpus = env.corpus()?;
    let Some(case) = corpus.get(id) else {
        bail!("no case `{id}` in {}", corpus.root.display());
    };
    println!("{}", toml_of(case)?);
    println!("--- symptom.md ---\n{}", case.symptom.trim_end());
    for f in &case.bundle {
        println!("--- context/{} ---\n{}", f.name, f.text.trim_end());
    }
    Ok(ExitCode::SUCCESS)
}

fn toml_of(case: &Case) -> Result<String> {
    Ok(std::fs::read_to_string(case.dir.join("case.toml"))?)
}

async fn validate(env: &Env, args: ValidateArgs) -> Result<ExitCode> {
    let corpus = env.corpus()?;
    let cases = chosen(
        &corpus,
        &args.cases,
        args.all,
        args.suite.as_deref(),
        args.filter,
        "validate",
    )?;
    let duplicates = faultline_corpus::checks::duplicates(&corpus.cases);
    let duplicate_of = |id: &str| -> Vec<String> {
        duplicates
            .iter()
            .filter(|d| d.first == id || d.second == id)
            .map(|d| {
                let other = if d.first == id { &d.second } else { &d.first };
                format!(
                    "the same bug as `{other}`: the same two versions, overlapping blocks {}",
                    d.overlap
                )
            })
            .collect()
    };
    if args.static_only {
        let store = env.data.store();
        let mut failed = 0;
        for case in &cases {
            let sources = store.case_sources(&case.manifest, &case.dir)?;
            let (report, _) = faultline_corpus::checks::static_checks(case, &sources)?;
            let problems: Vec<String> = report
                .problems
                .into_iter()
                .chain(duplicate_of(case.id()))
                .collect();
            if problems.is_empty() {
                println!("{}: ok", case.id());
            } else {
                failed += 1;
                for p in &problems {
                    println!("{}: {p}", case.id());
                }
            }
        }
        eprintln!(
            "{} of {} cases pass the static checks",
            cases.len() - failed,
            cases.len()
        );
        let loaded = all_loaded(&corpus);
        return Ok(if failed == 0 {
            loaded
        } else {
            ExitCode::FAILURE
        });
    }
    faultline_sandbox::check_available().await?;
    let toolchain = Toolchain::detect()?;
    let opts = ValidateOptions {
        k: args.k,
        force_prepare: args.force_prepare,
        decoys: true,
    };
    if let Some(path) = args.markdown.as_deref().filter(|_| args.merge) {
        // The recorded report must take this run's rows before the first case is spent on it.
        merged_over(path, report_of(args.k, Vec::new()), &case_ids(&corpus))?;
    }
    let mut results = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        eprintln!("[{}/{}] validating {} ...", i + 1, cases.len(), case.id());
        let mut r = validate_case(case, &env.data, &toolchain, &opts).await?;
        r.validated_at = Some(now_rfc3339());
        for problem in duplicate_of(case.id()) {
            r.problems.push(problem);
            r.passed = false;
        }
        eprintln!(
            "[{}/{}] {} {} in {:.0}s (buggy fails {}/{}, gold passes {}/{})",
            i + 1,
            cases.len(),
            case.id(),
            if r.passed { "passed" } else { "FAILED" },
            r.wall_secs,
            r.buggy_failures(),
            args.k,
            r.gold_passes(),
            args.k
        );
        results.push(r);
        // Recorded after every case: a validation of the corpus takes hours, and one stopped
        // part-way keeps the rows it finished (`--merge` then adds the rest).
        if let Some(path) = &args.markdown {
            record_validation(
                path,
                args.merge,
                &corpus,
                report_of(args.k, results.clone()),
            )?;
        }
    }
    let report = report_of(args.k, results);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "{}",
            faultline_report::validation::table(&report).to_terminal()
        );
        for c in report.cases.iter().filter(|c| !c.passed) {
            for p in &c.problems {
                println!("{}: {}", c.case_id, p);
            }
        }
    }
    let failed = report.cases.iter().filter(|c| !c.passed).count();
    eprintln!(
        "{} of {} cases pass validation",
        report.cases.len() - failed,
        report.cases.len()
    );
    let loaded = all_loaded(&corpus);
    Ok(if failed == 0 {
        loaded
    } else {
        ExitCode::FAILURE
    })
}

fn report_of(k: u32, cases: Vec<faultline_schema::validation::CaseValidation>) -> ValidationReport {
    ValidationReport {
        schema_version: VALIDATION_SCHEMA_VERSION,
        faultline_version: env!("CARGO_PKG_VERSION").to_string(),
        finished_at: now_rfc3339(),
        k,
        cases,
    }
}

/// Writes `report` to `markdown` (and its JSON), over the rows recorded there when `merge`.
fn record_validation(
    markdown: &std::path::Path,
    merge: bool,
    corpus: &faultline_corpus::Corpus,
    report: ValidationReport,
) -> Result<()> {
    let recorded = if merge {
        merged_over(markdown, report, &case_ids(corpus))?
    } else {
        report
    };
    write_validation(markdown, &recorded)
}

/// The ids of the cases the corpus loaded.
fn case_ids(corpus: &faultline_corpus::Corpus) -> BTreeSet<String> {
    corpus.cases.iter().map(|c| c.id().to_string()).collect()
}

/// `fresh`'s rows over those of the report recorded beside `markdown` (if any), keeping only
/// cases in `existing`.
fn merged_over(
    markdown: &std::path::Path,
    fresh: ValidationReport,
    existing: &BTreeSet<String>,
) -> Result<ValidationReport> {
    let json_path = markdown.with_extension("json");
    if !json_path.exists() {
        return Ok(fresh);
    }
    let previous: ValidationReport =
        faultline_schema::io::read_json(&json_path, "validation report")?;
    faultline_report::validation::merge(previous, fresh, existing).map_err(anyhow::Error::msg)
}

/// Writes a validation report as Markdown and, beside it, as the JSON `--merge` reads back.
fn write_validation(markdown: &std::path::Path, report: &ValidationReport) -> Result<()> {
    let json_path = markdown.with_extension("json");
    faultline_schema::io::write_json_atomic(&json_path, report)?;
    faultline_schema::io::write_atomic(
        markdown,
        faultline_report::validation::markdown(report).as_bytes(),
    )?;
    eprintln!("wrote {} and {}", markdown.display(), json_path.display());
    Ok(())
}

fn merge_validation(
    env: &Env,
    markdown: &std::path::Path,
    only: &[String],
    reports: &[PathBuf],
) -> Result<ExitCode> {
    let corpus = env.corpus()?;
    let existing = case_ids(&corpus);
    let mut taken = BTreeSet::new();
    let mut recorded = None;
    for path in reports {
        let mut report: ValidationReport =
            faultline_schema::io::read_json(path, "validation report")?;
        report
            .cases
            .retain(|c| only.is_empty() || only.contains(&c.case_id));
        for c in &report.cases {
            if !existing.contains(&c.case_id) {
                bail!(
                    "{} has a row for `{}`, which is not in the corpus",
                    path.display(),
                    c.case_id
                );
            }
            taken.insert(c.case_id.clone());
        }
        recorded = Some(match recorded {
            None => merged_over(markdown, report, &existing)?,
            Some(so_far) => faultline_report::validation::merge(so_far, report, &existing)
                .map_err(anyhow::Error::msg)?,
        });
    }
    if let Some(missing) = only.iter().find(|c| !taken.contains(*c)) {
        bail!("no report given has a row for `{missing}`");
    }
    let recorded = recorded.expect("at least one report is required");
    write_validation(markdown, &recorded)?;
    eprintln!(
        "merged {} rows: {}",
        taken.len(),
        taken.into_iter().collect::<Vec<_>>().join(", ")
    );
    Ok(all_loaded(&corpus))
}

/// Failure when a case directory of the corpus did not load: a curator's command must not
/// pass over a case it could not read (each was named in a warning when the corpus loaded).
fn all_loaded(corpus: &faultline_corpus::Corpus) -> ExitCode {
    if corpus.errors.is_empty() {
        return ExitCode::SUCCESS;
    }
    eprintln!(
        "error: {} case director{} of {} did not load (see the warnings above)",
        corpus.errors.len(),
        if corpus.errors.len() == 1 { "y" } else { "ies" },
        corpus.root.display()
    );
    ExitCode::FAILURE
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

async fn lock(env: &Env, ids: &[String]) -> Result<ExitCode> {
    let corpus = env.corpus()?;
    faultline_sandbox::check_available().await?;
    let toolchain = Toolchain::detect()?;
    for id in ids {
        let Some(case) = corpus.get(id) else {
            bail!("no case `{id}` in {}", corpus.root.display());
        };
        let prepared =
            faultline_corpus::prepare(case, &env.data, &toolchain, &Default::default()).await?;
        let written = faultline_corpus::workspace::resolve::record_locks(case, &prepared)?;
        if written.is_empty() {
            println!("{id}: lockfiles already recorded");
        }
        for w in written {
            println!("{id}: wrote {}", w.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn prepare(env: &Env, args: PrepareArgs) -> Result<ExitCode> {
    let corpus = env.corpus()?;
    let cases = chosen(
        &corpus,
        &args.cases,
        args.all,
        args.suite.as_deref(),
        args.filter,
        "prepare",
    )?;
    faultline_sandbox::check_available().await?;
    let toolchain = Toolchain::detect()?;
    let started = std::time::Instant::now();
    for (i, case) in cases.iter().enumerate() {
        let at = format!("[{}/{}]", i + 1, cases.len());
        eprintln!("{at} preparing {} ...", case.id());
        let prepared = faultline_corpus::prepare(
            case,
            &env.data,
            &toolchain,
            &faultline_corpus::PrepareOptions { force: args.force },
        )
        .await
        .with_context(|| format!("preparing {}", case.id()))?;
        let s = &prepared.stamp;
        if let Some(found) = &prepared.repaired {
            println!("{at} {}: {found}; rebuilt it", case.id());
        }
        println!(
            "{at} {} {} {} ({} vendored packages{})",
            case.id(),
            if prepared.reused {
                "checked"
            } else {
                "prepared"
            },
            s.agent.workspace.display(),
            s.vendored_packages,
            if s.removed.is_empty() {
                String::new()
            } else {
                format!("; removed {}", s.removed.join(", "))
            }
        );
    }
    if cases.len() > 1 {
        eprintln!(
            "{} cases ready in {} in {:.0}s",
            cases.len(),
            env.data.root.display(),
            started.elapsed().as_secs_f64()
        );
    }
    Ok(ExitCode::SUCCESS)
}
