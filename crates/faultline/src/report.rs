//! `faultline report` and `faultline pack`.

use crate::Env;
use anyhow::{Result, bail};
use clap::Args;
use faultline_corpus::Corpus;
use faultline_run::report::Outputs;
use faultline_sandbox::Toolchain;
use faultline_schema::RunDir;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Args)]
pub struct ReportArgs {
    /// A run directory, or an archive made by `faultline pack` (`.tar.gz`).
    run: PathBuf,
    /// Write the self-contained HTML report here.
    #[arg(long)]
    html: Option<PathBuf>,
    /// Write the Markdown report here.
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Write `report.json` here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Where to unpack an archive [default: its path without `.tar.gz`].
    #[arg(long)]
    into: Option<PathBuf>,
    /// Report an unpacked archive as it is, without grading its submissions again.
    #[arg(long)]
    no_regrade: bool,
}

#[derive(Args)]
pub struct PackArgs {
    /// The run directory.
    run: PathBuf,
    /// The archive to write [default: the run directory's path with `.tar.gz`].
    #[arg(short, long)]
    out: Option<PathBuf>,
}

fn strip_archive_suffix(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?.to_str()?;
    let stem = name
        .strip_suffix(".tar.gz")
        .or_else(|| name.strip_suffix(".tgz"))?;
    Some(path.with_file_name(stem))
}

pub async fn report(env: &Env, args: ReportArgs) -> Result<ExitCode> {
    let run_dir = if args.run.is_file() {
        let into = match args
            .into
            .clone()
            .or_else(|| strip_archive_suffix(&args.run))
        {
            Some(d) => d,
            None => bail!(
                "{} is a file but not a .tar.gz archive; give a run directory or an archive made by `faultline pack`",
                args.run.display()
            ),
        };
        if RunDir::new(&into).pack_manifest_path().is_file() {
            eprintln!("using the copy already unpacked at {}", into.display());
        } else {
            let manifest = faultline_run::pack::unpack(&args.run, &into)?;
            eprintln!(
                "unpacked {} files into {}",
                manifest.files.len() + 1,
                into.display()
            );
        }
        into
    } else {
        args.run.clone()
    };
    let run = RunDir::new(&run_dir);
    let unpacked = run.pack_manifest_path().is_file();
    let checked = run.regrade_path().is_file();
    let regrade = unpacked && !checked && !args.no_regrade;
    let corpus = match env.corpus() {
        Ok(c) => c,
        Err(e) if !regrade => {
            eprintln!("warning: {e:#}; the report shows no labeled blocks or source excerpts");
            Corpus::default()
        }
        Err(e) => return Err(e.context("re-grading an archive needs its cases")),
    };
    if regrade {
        faultline_sandbox::check_available().await?;
        let toolchain = Toolchain::detect()?;
        eprintln!("grading the archive's submissions again");
        faultline_run::pack::regrade_unpacked(&run_dir, &corpus, &env.data, &toolchain).await?;
    }
    let defaults = args.html.is_none() && args.markdown.is_none() && args.json.is_none();
    let outputs = if defaults {
        Outputs {
            html: Some(run.report_html_path()),
            markdown: None,
            json: Some(run.report_json_path()),
        }
    } else {
        Outputs {
            html: args.html,
            markdown: args.markdown,
            json: args.json,
        }
    };
    let report = faultline_run::report::write_report(&run_dir, &corpus, &env.data, &outputs)?;
    println!("{}", faultline_report::markdown::terminal(&report));
    for path in [&outputs.html, &outputs.markdown, &outputs.json]
        .into_iter()
        .flatten()
    {
        eprintln!("wrote {}", path.display());
    }
    let differ = report
        .regrade
        .as_ref()
        .is_some_and(|r| !r.differences.is_empty());
    Ok(if differ {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

pub fn pack(args: PackArgs) -> Result<ExitCode> {
    let out = match args.out {
        Some(o) => o,
        None => {
            let dir = args.run.canonicalize()?;
            let name = dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "run".into());
            dir.with_file_name(format!("{name}.tar.gz"))
        }
    };
    let manifest = faultline_run::pack::pack(&args.run, &out)?;
    eprintln!(
        "packed {} files of {} into {}",
        manifest.files.len(),
        args.run.display(),
        out.display()
    );
    Ok(ExitCode::SUCCESS)
}
