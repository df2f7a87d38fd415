//! `faultline merge`, `grade` and `import`: commands over results made elsewhere (a cluster's
//! shards, a run to grade again, another harness's predictions).

use crate::Env;
use crate::run::write_reports;
use anyhow::Result;
use clap::Args;
use faultline_sandbox::Toolchain;
use faultline_schema::GradingSettings;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Args)]
pub struct MergeArgs {
    /// The shard directories.
    #[arg(required = true)]
    shards: Vec<PathBuf>,
    /// The merged run directory.
    #[arg(long)]
    out: PathBuf,
}

pub fn merge(env: &Env, args: MergeArgs) -> Result<ExitCode> {
    let dirs: Vec<&Path> = args.shards.iter().map(PathBuf::as_path).collect();
    let n = faultline_run::merge::merge(&dirs, &args.out)?;
    eprintln!("merged {n} trials into {}", args.out.display());
    write_reports(env, &env.corpus()?, &args.out)?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Args)]
pub struct GradeArgs {
    /// The run directory.
    run: PathBuf,
    /// Grade again even when a cached grade of the same submission exists.
    #[arg(long)]
    no_cache: bool,
    /// Further seeds a repair must pass on seeded oracles.
    #[arg(long, default_value_t = 5)]
    robustness_seeds: u32,
    /// Runs per version when grading reproducers.
    #[arg(long, default_value_t = 3)]
    reproduction_k: u32,
}

pub async fn grade(env: &Env, args: GradeArgs) -> Result<ExitCode> {
    let corpus = env.corpus()?;
    faultline_sandbox::check_available().await?;
    let toolchain = Toolchain::detect()?;
    let opts = GradingSettings {
        robustness_seeds: args.robustness_seeds,
        reproduction_k: args.reproduction_k,
    };
    let n = faultline_run::regrade::regrade(
        &args.run,
        &corpus,
        &env.data,
        &toolchain,
        &opts,
        !args.no_cache,
    )
    .await?;
    eprintln!("re-graded {n} trials in {}", args.run.display());
    write_reports(env, &corpus, &args.run)?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Args)]
pub struct ImportArgs {
    /// A SWE-bench predictions file (JSONL: instance_id, model_name_or_path, model_patch; optional
    /// faultline fields condition and attempt).
    predictions: PathBuf,
    /// The run directory to create.
    #[arg(long)]
    out: PathBuf,
}

pub async fn import(env: &Env, args: ImportArgs) -> Result<ExitCode> {
    let corpus = env.corpus()?;
    faultline_sandbox::check_available().await?;
    let toolchain = Toolchain::detect()?;
    let n = faultline_run::regrade::import_predictions(
        &args.predictions,
        &args.out,
        &corpus,
        &env.data,
        &toolchain,
        &GradingSettings::default(),
    )
    .await?;
    eprintln!(
        "imported and graded {n} predictions into {}",
        args.out.display()
    );
    write_reports(env, &corpus, &args.out)?;
    Ok(ExitCode::SUCCESS)
}
