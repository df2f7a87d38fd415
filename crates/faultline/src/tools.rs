//! `faultline shell` and `faultline export`.

use crate::Env;
use anyhow::{Result, bail};
use clap::{Args, ValueEnum};
use faultline_agent::TrialEnv;
use faultline_sandbox::Toolchain;
use faultline_schema::submission::SUBMISSION_FILES;
use faultline_schema::{Condition, Limits, Task, Track, Trajectory};
use std::path::PathBuf;
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
        trial_id: Task::trial_id(case.id(), Track::Repair, Condition::Symptom, 0),
        case_id: case.id().into(),
        track: Track::Repair,
        condition: Condition::Symptom,
        attempt: 0,
        seed: 0,
        crate_name: case.manifest.source.crate_name().into(),
        bundle_files: Vec::new(),
        limits: Limits::default(),
    };
    let trial = TrialEnv::create(case, &prepared, task, &env.data, &toolchain)?;
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
    /// A `trajectory.json` written by faultline.
    trajectory: PathBuf,
    /// The target format.
    #[arg(long, value_enum)]
    format: ExportFormat,
}

pub fn export(args: ExportArgs) -> Result<ExitCode> {
    let t: Trajectory = faultline_schema::io::read_json(&args.trajectory, "trajectory")?;
    let dir = args
        .trajectory
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default();
    let submission = SUBMISSION_FILES
        .iter()
        .find_map(|n| std::fs::read_to_string(dir.join(n)).ok());
    let out = match args.format {
        ExportFormat::Mini => faultline_agent::export::to_mini_swe_agent(&t, submission.as_deref()),
        ExportFormat::Atif => faultline_agent::export::to_atif(&t),
    };
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(ExitCode::SUCCESS)
}
