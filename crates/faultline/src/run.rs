//! `faultline run`, and the reports a run directory gets.

use crate::Env;
use crate::cases::Filter;
use anyhow::{Context, Result, bail};
use clap::Args;
use faultline_agent::scaffolds::PACKAGES;
use faultline_agent::{AgentMount, Baseline, ExternalAgent, GatewayModel, Templates};
use faultline_corpus::Corpus;
use faultline_model::{
    DEFAULT_ATTEMPT_TIMEOUT, ModelClient, ModelConfig, PricingTable, Protocol, RetryPolicy,
};
use faultline_run::build::BuildTask;
use faultline_run::progress::ProgressStats;
use faultline_run::{AgentSpec, Progress, ProgressEvent, RunConfig, Shard};
use faultline_sandbox::Toolchain;
use faultline_schema::{Condition, GradingSettings, Limits, Outcome, RunDir, Track};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Args)]
pub struct RunArgs {
    /// Case ids or glob patterns [default: the smoke suite].
    cases: Vec<String>,
    /// Run every case.
    #[arg(long, conflicts_with = "cases")]
    all: bool,
    /// Run the cases of a suite (`corpus/suites/<name>.txt`).
    #[arg(long, conflicts_with_all = ["cases", "all"])]
    suite: Option<String>,
    #[command(flatten)]
    filter: Filter,
    /// An agent, repeatable: `baselines` (all five),
    /// `baseline:null|gold|bm25|stacktrace|everything`,
    /// `model:NAME` (the built-in agent; see --protocol, --base-url), `mini-swe-agent` or
    /// `aider` (on --model; installed into the data directory on first use), or
    /// `external:NAME=COMMAND` [default: a model agent if --model or FAULTLINE_MODEL is set,
    /// otherwise the baselines].
    #[arg(long = "agent")]
    agents: Vec<String>,
    /// Shorthand for `--agent model:NAME`; with external agents, the model their gateway
    /// serves.
    #[arg(long, env = "FAULTLINE_MODEL")]
    model: Option<String>,
    /// A file or directory an external agent needs (its virtualenv, a node prefix, a binary),
    /// mounted read-only into its sandbox: `HOST` (seen at the same path) or `HOST:GUEST`;
    /// repeatable.
    #[arg(long = "agent-mount")]
    agent_mounts: Vec<AgentMount>,
    /// Run external agents on the host instead of in the sandbox, beside the fixed crates and
    /// the oracles: recorded, and their scores reported as not comparable.
    #[arg(long)]
    agents_on_host: bool,
    /// Wire protocol of model agents: `openai` (chat completions; vLLM, llama.cpp, ollama...)
    /// or `anthropic` (messages).
    #[arg(long, env = "FAULTLINE_PROTOCOL", default_value = "openai")]
    protocol: String,
    /// Base URL of the model API (an OpenAI-compatible server: `http://host:8000/v1`).
    #[arg(long, env = "FAULTLINE_BASE_URL")]
    base_url: Option<String>,
    /// Environment variable holding the API key (needed with --base-url).
    #[arg(long, env = "FAULTLINE_API_KEY_ENV")]
    api_key_env: Option<String>,
    /// Retries of a failed model call (429, 5xx, timeouts, lost connections) before the trial
    /// ends as an infrastructure error.
    #[arg(long, default_value_t = RetryPolicy::default().max_retries)]
    max_retries: u32,
    /// Seconds one model call may spend on failed attempts and the waits between them before it
    /// fails for good (an infrastructure error), whatever --max-retries allows [default: no
    /// bound but --max-retries].
    #[arg(long)]
    max_retry_wait: Option<u64>,
    /// Seconds one attempt of a model call may take, from connecting to its last byte; a slow
    /// but healthy model stays well within the default.
    #[arg(long, default_value_t = DEFAULT_ATTEMPT_TIMEOUT.as_secs())]
    call_timeout: u64,
    /// Act through one fenced bash block per reply instead of native tool calls.
    #[arg(long)]
    text_mode: bool,
    /// Output tokens per model reply.
    #[arg(long, default_value_t = 4096)]
    max_output_tokens: u32,
    /// Sampling temperature [default: the provider's].
    #[arg(long)]
    temperature: Option<f64>,
    /// System prompt template (Jinja) [default: built in].
    #[arg(long)]
    system_prompt: Option<PathBuf>,
    /// Task prompt template (Jinja) [default: built in].
    #[arg(long)]
    task_prompt: Option<PathBuf>,
    /// Pricing table (TOML) [default: built in].
    #[arg(long)]
    pricing: Option<PathBuf>,
    /// Tracks, comma-separated: diagnose, repair and reproduce on the cases' bugs; build on the
    /// build tasks (an agent implements a protocol, graded on hidden fault schedules).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "diagnose,repair,reproduce,build"
    )]
    tracks: Vec<Track>,
    /// Build tasks, comma-separated ids (`raft-kv`, `flex-kv`) [default: every task in the
    /// corpus's `build/`].
    #[arg(long, value_delimiter = ',')]
    tasks: Vec<String>,
    /// Hidden schedules graded per build task [default: all] (fewer for a quick look; the run's
    /// lock records it).
    #[arg(long)]
    build_schedules: Option<usize>,
    /// Conditions, comma-separated: `symptom` (the baseline), `curated` (the case's bundle; also
    /// read as `context`), `irrelevant` (another case's bundle of the same system), `static`
    /// (the static-analysis provider), `model:NAME` (a model writes the bundle; on --base-url and
    /// --protocol as model agents), or an external provider's name (see --provider). The build
    /// track's conditions are its aids: `task` (the text alone), `unit-tests`, `simulator`,
    /// `simulator-checker` and `tla`; each track runs the conditions of its kind.
    #[arg(long, value_delimiter = ',', default_value = "symptom,curated,task")]
    conditions: Vec<Condition>,
    /// An external context provider, NAME=PROGRAM: its condition's name and an executable that
    /// writes 1 to 3 Markdown files (docs/providers.md). Repeatable.
    #[arg(long = "provider", value_name = "NAME=PROGRAM")]
    providers: Vec<String>,
    /// Attempts per case, track and condition (model and external agents).
    #[arg(long, default_value_t = 3)]
    attempts: u32,
    /// Attempts for baselines, which are deterministic.
    #[arg(long, default_value_t = 1)]
    baseline_attempts: u32,
    /// Trials (sandboxes) at once.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Model calls at once, over all trials.
    #[arg(long, default_value_t = 4)]
    model_workers: usize,
    /// Steps (model calls) per trial.
    #[arg(long, default_value_t = 450)]
    steps: u32,
    /// Dollars per trial (`0` for none).
    #[arg(long, default_value_t = 5.0)]
    cost: f64,
    /// Tokens per trial.
    #[arg(long)]
    tokens: Option<u64>,
    /// Wall-clock seconds per trial.
    #[arg(long, default_value_t = 1800)]
    wall_secs: u64,
    /// Working seconds per trial (wall time minus waiting on model retries).
    #[arg(long)]
    working_secs: Option<u64>,
    /// Seconds one command may run.
    #[arg(long, default_value_t = 300)]
    command_timeout: u64,
    /// Characters of command output shown to the agent.
    #[arg(long, default_value_t = 10_000)]
    output_cap: usize,
    /// The run's seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Further seeds a repair must pass on seeded oracles.
    #[arg(long, default_value_t = 5)]
    robustness_seeds: u32,
    /// Runs per version when grading reproducers.
    #[arg(long, default_value_t = 3)]
    reproduction_k: u32,
    /// The run directory; running the same command again resumes it.
    #[arg(long, default_value = "runs/default")]
    out: PathBuf,
    /// Run only this shard, `INDEX/COUNT` [default: from JOB_COMPLETION_INDEX with
    /// FAULTLINE_SHARD_COUNT, or SLURM_ARRAY_TASK_ID with SLURM_ARRAY_TASK_COUNT].
    #[arg(long)]
    shard: Option<Shard>,
    /// Continue a run directory whose configuration differs.
    #[arg(long)]
    force: bool,
    /// Redo trials that ended in an infrastructure error.
    #[arg(long)]
    retry_infra: bool,
}

fn parse_agents(
    args: &RunArgs,
    templates: &Templates,
    pricing: &PricingTable,
    data: &Path,
) -> Result<Vec<AgentSpec>> {
    let mut specs = args.agents.clone();
    // With external agents, `--model` is the model their gateway serves; otherwise it is the
    // built-in agent's.
    let externals = specs
        .iter()
        .any(|s| s.starts_with("external:") || PACKAGES.iter().any(|p| p.name == s));
    if let Some(m) = &args.model
        && !externals
    {
        specs.push(format!("model:{m}"));
    }
    if specs.is_empty() {
        specs.push("baselines".into());
    }
    let protocol = protocol(args)?;
    let mut out = Vec::new();
    for spec in specs {
        if spec == "baselines" {
            out.extend(Baseline::ALL.into_iter().map(AgentSpec::Baseline));
        } else if let Some(b) = spec.strip_prefix("baseline:") {
            out.push(AgentSpec::Baseline(b.parse().map_err(anyhow::Error::msg)?));
        } else if let Some(m) = spec.strip_prefix("model:") {
            let model = model_config(args, protocol, m)?;
            out.push(AgentSpec::Builtin {
                name: m.to_string(),
                model: Box::new(model),
                templates: templates.clone(),
                tool_mode: !args.text_mode,
                max_output_tokens: args.max_output_tokens,
                temperature: args.temperature,
            });
        } else if let Some(package) = PACKAGES.iter().find(|p| p.name == spec) {
            let Some(m) = &args.model else {
                bail!("{spec} needs a model: add --model NAME (and --base-url, --protocol)");
            };
            let model = GatewayModel {
                client: Arc::new(ModelClient::new(model_config(args, protocol, m)?)?),
                pricing: Some(pricing.clone()),
            };
            let dir = package.install(data)?;
            let mut agent = package.agent(&dir, Some(model));
            agent.on_host = args.agents_on_host;
            out.push(AgentSpec::External(agent));
        } else if let Some(rest) = spec.strip_prefix("external:") {
            let (name, command) = rest
                .split_once('=')
                .context("an external agent is written external:NAME=COMMAND")?;
            let model = match &args.model {
                Some(m) => Some(GatewayModel {
                    client: Arc::new(ModelClient::new(model_config(args, protocol, m)?)?),
                    pricing: Some(pricing.clone()),
                }),
                None => None,
            };
            out.push(AgentSpec::External(ExternalAgent {
                name: name.into(),
                command: command.into(),
                model,
                mounts: args.agent_mounts.clone(),
                on_host: args.agents_on_host,
                scaffold: Default::default(),
            }));
        } else {
            bail!("unknown agent `{spec}`; see `faultline run --help`");
        }
    }
    Ok(out)
}

/// The wire protocol `--protocol` names, for model agents and model providers alike.
fn protocol(args: &RunArgs) -> Result<Protocol> {
    Ok(match args.protocol.as_str() {
        "openai" => Protocol::OpenAiChat,
        "anthropic" => Protocol::AnthropicMessages,
        other => bail!("unknown protocol `{other}`; use openai or anthropic"),
    })
}

/// The configuration of a model named on the command line, checked before the run starts.
fn model_config(args: &RunArgs, protocol: Protocol, name: &str) -> Result<ModelConfig> {
    let mut model = ModelConfig::new(protocol, name);
    if let Some(url) = &args.base_url {
        model = model.with_base_url(url.clone());
    }
    model.api_key_env = args.api_key_env.clone();
    model.retry.max_retries = args.max_retries;
    model.retry.max_total_wait = args.max_retry_wait.map(Duration::from_secs);
    model.attempt_timeout = Duration::from_secs(args.call_timeout);
    model.validate().map_err(anyhow::Error::msg)?;
    model
        .check_api_key_env(|name| std::env::var(name).ok())
        .map_err(anyhow::Error::msg)?;
    Ok(model)
}

/// The build tasks named (all when none is), an unknown name an error that lists them.
fn select_tasks(all: Vec<BuildTask>, named: &[String]) -> Result<Vec<BuildTask>> {
    if let Some(unknown) = named.iter().find(|n| !all.iter().any(|t| t.id() == *n)) {
        let known: Vec<&str> = all.iter().map(BuildTask::id).collect();
        bail!(
            "no build task `{unknown}`; the corpus has {}",
            known.join(", ")
        );
    }
    Ok(all
        .into_iter()
        .filter(|t| named.is_empty() || named.iter().any(|n| n == t.id()))
        .collect())
}

pub async fn run(env: &Env, args: RunArgs) -> Result<ExitCode> {
    let corpus = env.corpus()?;
    let patterns = match (&args.suite, args.all, args.cases.is_empty()) {
        (Some(s), _, _) => corpus.suite(s)?,
        (None, false, true) => corpus.suite("smoke")?,
        _ => args.cases.clone(),
    };
    let selected = corpus
        .select(&crate::cases::selection(patterns, args.filter.clone()))
        .map_err(anyhow::Error::msg)?;
    if selected.is_empty() {
        bail!("no case matches");
    }
    let templates = Templates::load(args.system_prompt.as_deref(), args.task_prompt.as_deref())?;
    let pricing = match &args.pricing {
        Some(p) => PricingTable::load(p)?,
        None => PricingTable::builtin()?,
    };
    let agents = parse_agents(&args, &templates, &pricing, &env.data.root)?;
    let shard = match args.shard {
        Some(s) => Some(s),
        None => Shard::from_env(|k| std::env::var(k).ok()).map_err(anyhow::Error::msg)?,
    };
    let providers = crate::providers::providers(
        &args.providers,
        &args.conditions,
        |name| model_config(&args, protocol(&args)?, name),
        &pricing,
    )?;
    let cfg = RunConfig {
        out: args.out.clone(),
        cases: selected.into_iter().cloned().collect(),
        corpus: corpus.cases.clone(),
        providers,
        agents,
        tracks: args.tracks.clone(),
        conditions: args.conditions.clone(),
        attempts: args.attempts,
        baseline_attempts: args.baseline_attempts,
        limits: Limits {
            steps: args.steps,
            cost_usd: (args.cost > 0.0).then_some(args.cost),
            tokens: args.tokens,
            wall_secs: args.wall_secs,
            working_secs: args.working_secs,
            command_timeout_secs: args.command_timeout,
            output_cap_chars: args.output_cap,
        },
        seed: args.seed,
        workers: args.workers,
        model_workers: args.model_workers,
        shard,
        force: args.force,
        retry_infra: args.retry_infra,
        pricing,
        grading: GradingSettings {
            robustness_seeds: args.robustness_seeds,
            reproduction_k: args.reproduction_k,
        },
        build_tasks: if args.tracks.contains(&Track::Build) {
            select_tasks(BuildTask::all(&corpus.root.join("build"))?, &args.tasks)?
        } else {
            Vec::new()
        },
        build_aids: corpus.root.join("build").join("aids"),
        build_schedules: args.build_schedules,
    };
    faultline_sandbox::check_available().await?;
    let toolchain = Toolchain::detect()?;
    // A killed run leaves its trials' workspaces behind; resuming it reclaims them.
    // Housekeeping only: a scratch space it cannot sweep fails the trials that need it, with
    // the harness's own error.
    match env.data.sweep_scratch() {
        Ok(0) => {}
        Ok(swept) => eprintln!("removed {swept} scratch directories left by killed runs"),
        Err(e) => eprintln!("warning: could not sweep the scratch space: {e:#}"),
    }
    let progress = Arc::new(ConsoleProgress::new());
    let summary = faultline_run::run(cfg, env.data.clone(), toolchain, progress.clone()).await?;
    progress.finish();
    eprintln!(
        "{}",
        crate::bench::cases_ready_line(summary.cases_ready, summary.prepare_secs)
    );
    eprintln!(
        "{} trials: {} already recorded, {} run now{}; outcomes: {}",
        summary.total,
        summary.resumed,
        summary.ran,
        if summary.refused > 0 {
            format!(
                ", {} not run (their bundle was refused; see the report's providers)",
                summary.refused
            )
        } else {
            String::new()
        },
        summary
            .outcomes
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    write_reports(env, &corpus, &args.out)?;
    // Trials the infrastructure failed are unscored: the run is not complete until they are redone.
    let infra = summary
        .outcomes
        .get(Outcome::InfraError.as_str())
        .copied()
        .unwrap_or(0);
    if infra > 0 {
        eprintln!(
            "{infra} trial(s) ended in an infrastructure error (model API or sandbox failure) and \
             are not scored; fix the cause and run the same command with --retry-infra"
        );
        return Ok(ExitCode::from(2));
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints the report of a run directory and writes `leaderboard.md`, `report.json` and
/// `report.html` beside its results.
pub fn write_reports(env: &Env, corpus: &Corpus, out: &Path) -> Result<()> {
    let run = RunDir::new(out);
    let report = faultline_run::report::write_report(
        out,
        corpus,
        &env.data,
        &faultline_run::report::Outputs {
            html: Some(run.report_html_path()),
            markdown: None,
            json: Some(run.report_json_path()),
        },
    )?;
    println!("{}", faultline_report::markdown::terminal(&report));
    faultline_schema::io::write_atomic(
        &run.leaderboard_path(),
        format!(
            "# Leaderboard\n\n{} Attempts are averaged within a case and cases weighted equally; \
             the interval is a 95% case bootstrap (10,000 resamples). The full report is \
             report.html.\n\n{}",
            faultline_report::leaderboard::scores_note(),
            faultline_report::leaderboard::table(&report).to_markdown()
        )
        .as_bytes(),
    )?;
    Ok(())
}

/// Progress on a terminal (a bar) or in logs (a line per trial), drawn from the run's
/// [`ProgressStats`].
struct ConsoleProgress {
    bar: Option<ProgressBar>,
    stats: Mutex<ProgressStats>,
}

impl ConsoleProgress {
    fn new() -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let b = ProgressBar::new(0);
            b.set_style(
                ProgressStyle::with_template("{bar:30} {pos}/{len} trials, ETA {eta} {msg}")
                    .expect("valid template"),
            );
            b
        });
        ConsoleProgress {
            bar,
            stats: Mutex::new(ProgressStats::default()),
        }
    }

    fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }

    fn say(&self, line: String) {
        match &self.bar {
            Some(b) => b.println(line),
            None => eprintln!("{line}"),
        }
    }
}

impl Progress for ConsoleProgress {
    fn event(&self, e: ProgressEvent) {
        let now = Instant::now();
        let mut s = self.stats.lock().expect("not poisoned");
        s.record(&e, now);
        match e {
            ProgressEvent::Preparing(case) => {
                drop(s);
                self.say(format!("preparing {case}"));
            }
            ProgressEvent::Planned {
                total,
                done,
                pending,
            } => {
                if let Some(b) = &self.bar {
                    b.set_length(total as u64);
                    b.set_position(done as u64);
                }
                drop(s);
                self.say(format!(
                    "{total} trials: {done} already recorded, {pending} to run"
                ));
            }
            ProgressEvent::Started(_) => {}
            ProgressEvent::Finished(r) => {
                let eta = s.eta_secs(now);
                let cost = if s.cost_unknown {
                    format!("${:.2}+?", s.cost_usd)
                } else {
                    format!("${:.2}", s.cost_usd)
                };
                let counts: Vec<String> =
                    s.outcomes.iter().map(|(k, v)| format!("{k} {v}")).collect();
                let status = format!(
                    "running {}, infra errors {}, {cost}, {}",
                    s.running,
                    s.infra_errors,
                    counts.join(" ")
                );
                let line = format!(
                    "[{}/{}] {} -> {} ({:.0}s); {status}; ETA {}",
                    s.done,
                    s.total,
                    r.trial_id,
                    r.outcome.as_str(),
                    r.wall_secs,
                    eta.map_or("?".into(), |e| format!("{:.0}s", e))
                );
                if let Some(b) = &self.bar {
                    b.set_position(s.done as u64);
                    b.set_message(status);
                    b.println(format!("{} -> {}", r.trial_id, r.outcome.as_str()));
                } else {
                    eprintln!("{line}");
                }
            }
        }
    }
}
