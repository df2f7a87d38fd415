//! `faultline shell` and `faultline export`.

use crate::Env;
use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use faultline_agent::TrialEnv;
use faultline_sandbox::Toolchain;
use faultline_schema::submission::SUBMISSION_FILES;
use faultline_schema::{Condition, Limits, RunDir, Task, Track, Trajectory};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Args)]
pub struct ShellArgs {
    /// The case id.
    case: String,
}

/// Drops a person into the sandbox an agent gets: a fresh copy of the case's workspace, the same
/// mounts, no network.
pub async fn shell(env: &Env, args: ShellArgs) -> Result<ExitCode> {
    let corpus = env.corpus()?;
    let Some(case) = corpus.get(&args.case) else {
        bail!("no case `{}` in {}", args.case, corpus.root.display());
    };
    faultline_sandbox::check_available().await?;
    let toolchain = Toolchain::detect()?;
    let prepared =
        faultline_corpus::prepare(case, &env.data, &toolchain, &Default::default()).await?;
    let task = Task {
        schema_version: 1,
        trial_id: Task::trial_id(case.id(), Track::Repair, &Condition::symptom(), 0),
        case_id: case.id().into(),
        track: Track::Repair,
        condition: Condition::symptom(),
        attempt: 0,
        seed: 0,
        crate_name: case.manifest.source.crate_name().into(),
        bundle_files: Vec::new(),
        limits: Limits::default(),
    };
    let trial = TrialEnv::create(case, &prepared, task, Vec::new(), &env.data, &toolchain)?;
    eprintln!(
        "sandbox for {} (a scratch copy, deleted on exit; no network); `exit` to leave",
        case.id()
    );
    let code = trial.sandbox.interactive(&["/bin/bash", "-i"])?;
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}

#[derive(Clone, Copy, ValueEnum)]
pub enum ExportFormat {
    /// mini-swe-agent's `traj.json` (trajectory_format mini-swe-agent-1.1).
    Mini,
    /// Harbor's Agent Trajectory Interchange Format.
    Atif,
}

#[derive(Args)]
pub struct ExportArgs {
    /// A `trajectory.json` written by faultline, or a run directory (then every trial's, into
    /// `--out`).
    trajectory: PathBuf,
    /// The target format.
    #[arg(long, value_enum)]
    format: ExportFormat,
    /// Where a run's trajectories go, one file per trial (`<trial>.traj.json` for mini, which
    /// mini-swe-agent's inspector opens as a directory; `<trial>.atif.json`) [default: print the
    /// one trajectory].
    #[arg(long)]
    out: Option<PathBuf>,
}

pub fn export(args: ExportArgs) -> Result<ExitCode> {
    if !args.trajectory.is_dir() {
        let out = convert(&args.trajectory, args.format)?;
        let text = serde_json::to_string_pretty(&out)?;
        match &args.out {
            Some(path) => faultline_schema::io::write_atomic(path, text.as_bytes())
                .with_context(|| format!("writing {}", path.display()))?,
            None => println!("{text}"),
        }
        return Ok(ExitCode::SUCCESS);
    }
    let Some(out_dir) = &args.out else {
        bail!("exporting a run directory needs --out DIR");
    };
    let run = RunDir::new(&args.trajectory);
    let log = run.results()?;
    let records = faultline_schema::results::latest(log.read()?);
    if records.is_empty() {
        bail!("{} records no trials", args.trajectory.display());
    }
    std::fs::create_dir_all(out_dir)?;
    let suffix = match args.format {
        ExportFormat::Mini => "traj.json",
        ExportFormat::Atif => "atif.json",
    };
    for id in records.keys() {
        let trial = run.trial(id);
        let out = convert(&trial.trajectory_path(), args.format)?;
        let name = format!("{}.{suffix}", id.replace('/', "__"));
        faultline_schema::io::write_json_atomic(&out_dir.join(&name), &out)?;
    }
    eprintln!(
        "wrote {} trajectories to {}",
        records.len(),
        out_dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// One trajectory in `format`, with the submission kept beside it.
fn convert(path: &Path, format: ExportFormat) -> Result<serde_json::Value> {
    let t: Trajectory = faultline_schema::io::read_json(path, "trajectory")?;
    let dir = path.parent().map(PathBuf::from).unwrap_or_default();
    let submission = SUBMISSION_FILES
        .iter()
        .find_map(|n| std::fs::read_to_string(dir.join(n)).ok());
    Ok(match format {
        ExportFormat::Mini => faultline_agent::export::to_mini_swe_agent(&t, submission.as_deref()),
        ExportFormat::Atif => faultline_agent::export::to_atif(&t),
    })
}
