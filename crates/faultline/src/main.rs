//! The `faultline` command: argument parsing and wiring over the library crates.

mod bench;
mod bench_store;
mod cases;
mod measure;
mod providers;
mod report;
mod results;
mod run;
mod tools;

#[cfg(test)]
mod doc_commands;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use faultline_corpus::{Corpus, DataDir};
use std::path::PathBuf;
use std::process::ExitCode;

/// A benchmark and harness for LLM agents on real distributed-systems bugs.
#[derive(Parser)]
#[command(name = "faultline", version, about)]
struct Cli {
    /// The corpus directory.
    #[arg(
        long,
        global = true,
        env = "FAULTLINE_CORPUS",
        default_value = "corpus"
    )]
    corpus: PathBuf,
    /// Where sources, workspaces and scratch files are kept
    /// [default: $XDG_CACHE_HOME/faultline or ~/.cache/faultline].
    #[arg(long, global = true, env = "FAULTLINE_DATA")]
    data: Option<PathBuf>,
    /// Keep scratch copies and the grade cache here and use the data directory read-only: for
    /// shards that share one prepared data directory (see `prepare --all`).
    #[arg(long, global = true, env = "FAULTLINE_SCRATCH")]
    scratch: Option<PathBuf>,
    #[command(flatten)]
    sandbox: SandboxLimitArgs,
    #[command(subcommand)]
    command: Command,
}

/// Resource limits of every sandbox the command creates (agents, grading, validation); a
/// limit a command runs into is recorded, never worked around. `none` turns one off.
#[derive(clap::Args)]
struct SandboxLimitArgs {
    /// Memory of one sandbox's processes together (such as 8G, 512M) [default: 8G].
    #[arg(long, global = true, env = "FAULTLINE_SANDBOX_MEMORY", value_parser = parse_limit)]
    sandbox_memory: Option<Limit>,
    /// New data a sandbox may write to its writable mounts, and its largest file [default: 8G].
    #[arg(long, global = true, env = "FAULTLINE_SANDBOX_DISK", value_parser = parse_limit)]
    sandbox_disk: Option<Limit>,
    /// Size of a sandbox's /tmp and of each of its scratch directories [default: 1G].
    #[arg(long, global = true, env = "FAULTLINE_SANDBOX_TMP", value_parser = parse_limit)]
    sandbox_tmp: Option<Limit>,
    /// Processes and threads alive at once in one sandbox [default: 1024].
    #[arg(long, global = true, env = "FAULTLINE_SANDBOX_PROCESSES", value_parser = parse_limit)]
    sandbox_processes: Option<Limit>,
}

/// A size or count given on the command line; `None` is `none` (no limit).
#[derive(Debug, Clone, Copy)]
struct Limit(Option<u64>);

fn parse_limit(text: &str) -> Result<Limit, String> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("none") {
        return Ok(Limit(None));
    }
    let (digits, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("`{text}` is not a number with an optional K, M or G, or `none`"))?;
    let shift = match unit
        .trim()
        .to_ascii_uppercase()
        .trim_end_matches("IB")
        .trim_end_matches('B')
    {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        _ => return Err(format!("`{text}`: the unit must be K, M or G")),
    };
    n.checked_shl(shift)
        .filter(|v| v >> shift == n)
        .map(|v| Limit(Some(v)))
        .ok_or_else(|| format!("`{text}` is too large"))
}

impl SandboxLimitArgs {
    /// Makes the given limits the default of every sandbox of this process.
    fn apply(&self) -> Result<()> {
        let mut limits = faultline_sandbox::ResourceLimits::builtin();
        if let Some(Limit(b)) = self.sandbox_memory {
            limits.memory_bytes = b;
        }
        if let Some(Limit(b)) = self.sandbox_disk {
            limits.disk_bytes = b;
        }
        if let Some(Limit(b)) = self.sandbox_tmp {
            limits.tmp_bytes = b;
            limits.tmpfs_bytes = b;
        }
        if let Some(Limit(n)) = self.sandbox_processes {
            limits.max_processes = n
                .map(u32::try_from)
                .transpose()
                .context("--sandbox-processes is too large")?;
        }
        // A second call only happens in tests of this binary's functions; the first one holds.
        let _ = faultline_sandbox::configure_default_limits(limits);
        Ok(())
    }
}

#[derive(Subcommand)]
enum Command {
    /// List, show and validate cases.
    Cases {
        #[command(subcommand)]
        command: cases::CasesCommand,
    },
    /// Run a benchmark: agents on cases, graded; running it again resumes [default: the
    /// baselines on the smoke suite].
    Run(Box<run::RunArgs>),
    /// Merge the directories of a sharded run.
    Merge(results::MergeArgs),
    /// Grade a run again from its stored submissions, without running any agent.
    Grade(results::GradeArgs),
    /// Statistics and reports of a run (terminal, Markdown, JSON, one HTML file); an archive
    /// made by `faultline pack` is unpacked and graded again first.
    Report(report::ReportArgs),
    /// Write a run's results, lock, trajectories, submissions and grades as one .tar.gz.
    Pack(report::PackArgs),
    /// Grade patches from a SWE-bench-style predictions file.
    Import(results::ImportArgs),
    /// Prepare a case's offline workspace (sources, vendored dependencies, warm build cache).
    Prepare(cases::PrepareArgs),
    /// Open a shell in the sandbox an agent gets for a case (a fresh copy of its workspace).
    Shell(tools::ShellArgs),
    /// Convert a trajectory to mini-swe-agent's traj.json or Harbor's ATIF.
    Export(tools::ExportArgs),
    /// The data directory: what its object store holds, and removing what no case uses.
    Data {
        #[command(subcommand)]
        command: DataCommand,
    },
    /// Measure the harness's own costs against baselines measured in the same run.
    Bench {
        #[command(subcommand)]
        command: bench::BenchCommand,
    },
    /// Write the JSON Schemas of every on-disk format.
    Schema {
        /// Output directory.
        #[arg(long, default_value = "schemas")]
        out: PathBuf,
        /// Fail if the files on disk differ from the generated ones instead of writing them.
        #[arg(long)]
        check: bool,
    },
}

#[derive(Subcommand)]
enum DataCommand {
    /// Remove the stored objects no prepared case links any more (each prepared case's files
    /// stay, and so does every object a case links).
    Gc,
    /// How many objects the store holds, and their bytes.
    Usage,
}

fn data_command(env: &Env, command: DataCommand) -> Result<ExitCode> {
    let objects = env.data.objects();
    let (what, found) = match command {
        DataCommand::Gc => {
            if env.data.is_read_only() {
                anyhow::bail!("the data directory is used read-only here (--scratch)");
            }
            ("removed", objects.collect_garbage()?)
        }
        DataCommand::Usage => ("holds", objects.usage()?),
    };
    println!(
        "object store {}: {what} {} objects, {:.2} GB",
        objects.dir().display(),
        found.count,
        found.bytes as f64 / 1e9
    );
    Ok(ExitCode::SUCCESS)
}

/// What every command needs: where the corpus and the data live.
pub struct Env {
    corpus_dir: PathBuf,
    data: DataDir,
}

impl Env {
    fn corpus(&self) -> Result<Corpus> {
        let corpus = Corpus::load(&self.corpus_dir).with_context(|| {
            format!(
                "cannot load the corpus at {} (set --corpus or FAULTLINE_CORPUS)",
                self.corpus_dir.display()
            )
        })?;
        for e in &corpus.errors {
            eprintln!("warning: skipping a case that does not load: {e}");
        }
        Ok(corpus)
    }
}

fn main() -> ExitCode {
    // This binary is also the in-sandbox supervisor of sandbox sessions (mounted into the
    // sandbox under that name), so sessions work wherever faultline itself runs.
    let argv0 = std::env::args_os().next().unwrap_or_default();
    if std::path::Path::new(&argv0).file_name() == Some(faultline_sandbox::SUPERVISOR_BIN.as_ref())
    {
        return faultline_sandbox::supervisor::main();
    }
    // A sandbox starts through the supervisor twice (its launcher on the host, its write
    // restriction inside), so the small standalone binary, when a workspace build put it beside
    // this one, starts sandboxes faster than this binary (a debug build is over 100 MB) would.
    if let Ok(exe) = std::env::current_exe() {
        let standalone = exe.with_file_name(faultline_sandbox::SUPERVISOR_BIN);
        faultline_sandbox::use_supervisor(if standalone.is_file() {
            standalone
        } else {
            exe
        });
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FAULTLINE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    cli.sandbox.apply()?;
    let data = match cli.data {
        Some(root) => DataDir::new(root),
        None => DataDir::from_env()?,
    };
    let data = match cli.scratch {
        Some(scratch) => data.with_scratch(scratch),
        None => data,
    };
    let ctx = Env {
        corpus_dir: cli.corpus,
        data,
    };
    let runtime = tokio::runtime::Runtime::new()?;
    match cli.command {
        Command::Cases { command } => runtime.block_on(cases::run(&ctx, command)),
        Command::Prepare(args) => runtime.block_on(cases::prepare(&ctx, args)),
        Command::Run(args) => runtime.block_on(run::run(&ctx, *args)),
        Command::Merge(args) => results::merge(&ctx, args),
        Command::Grade(args) => runtime.block_on(results::grade(&ctx, args)),
        Command::Report(args) => runtime.block_on(report::report(&ctx, args)),
        Command::Pack(args) => report::pack(args),
        Command::Import(args) => runtime.block_on(results::import(&ctx, args)),
        Command::Shell(args) => runtime.block_on(tools::shell(&ctx, args)),
        Command::Export(args) => tools::export(args),
        Command::Data { command } => data_command(&ctx, command),
        Command::Bench { command } => runtime.block_on(bench::run(&ctx, command)),
        Command::Schema { out, check } => schema(&out, check),
    }
}

fn schema(out: &std::path::Path, check: bool) -> Result<ExitCode> {
    let mut stale = Vec::new();
    for (name, text) in faultline_schema::schemas::all() {
        let path = out.join(name);
        if check {
            if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
                stale.push(path.display().to_string());
            }
        } else {
            faultline_schema::io::write_atomic(&path, text.as_bytes())?;
            println!("wrote {}", path.display());
        }
    }
    if stale.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "schemas out of date (run `faultline schema`): {}",
            stale.join(", ")
        );
        Ok(ExitCode::FAILURE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_read_as_people_write_them() {
        assert_eq!(parse_limit("8G").unwrap().0, Some(8 << 30));
        assert_eq!(parse_limit("512M").unwrap().0, Some(512 << 20));
        assert_eq!(parse_limit("512MiB").unwrap().0, Some(512 << 20));
        assert_eq!(parse_limit("1024").unwrap().0, Some(1024));
        assert_eq!(parse_limit("none").unwrap().0, None);
        assert!(parse_limit("8T").is_err());
        assert!(parse_limit("lots").is_err());
        assert!(parse_limit("99999999999999999999G").is_err());
    }
}
