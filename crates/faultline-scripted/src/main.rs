//! `faultline-scripted`: serve a script file on loopback for end-to-end tests.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Parser;
use faultline_scripted::{Script, ScriptedServer, ServerOptions};

/// Serve a scripted model on 127.0.0.1 until interrupted.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// The script to replay (.json or .toml).
    #[arg(long)]
    script: PathBuf,
    /// Port to bind; 0 picks a free one.
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Write the bound port here once listening, so a test can wait for it.
    #[arg(long)]
    port_file: Option<PathBuf>,
    /// Append every received request to this file as JSON lines.
    #[arg(long)]
    request_log: Option<PathBuf>,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let script = Script::load(&args.script)?;
    let server = ScriptedServer::start_with(
        script,
        ServerOptions {
            port: args.port,
            request_log: args.request_log,
            ..ServerOptions::default()
        },
    )
    .await
    .context("cannot start the scripted server")?;
    let addr = server.addr();
    if let Some(path) = &args.port_file {
        write_port_file(path, addr.port())?;
    }
    eprintln!("faultline-scripted listening on http://{addr}");
    tokio::signal::ctrl_c()
        .await
        .context("cannot wait for Ctrl-C")?;
    server.shutdown().await;
    Ok(())
}

/// Writes the port through a temporary file and a rename, so a reader polling
/// for the file never sees it half written.
fn write_port_file(path: &Path, port: u16) -> anyhow::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, format!("{port}\n"))
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot create {}", path.display()))?;
    Ok(())
}
