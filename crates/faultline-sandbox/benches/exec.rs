//! What one command costs: `true` run N times each through a plain spawn, bare bubblewrap,
//! [`Sandbox::exec`] and [`Session::exec`], with medians, 90th percentiles and ratios against
//! bare bubblewrap measured in the same run.
//!
//! `cargo bench -p faultline-sandbox --bench exec [-- N]` (N defaults to 200). The methods take
//! turns, one run each per round, so load from other processes falls on all of them alike. The
//! sandbox's CPU weight is off here: on a busy machine it would give the sandboxed methods more
//! CPU than the plain ones, which compete process by process.
//! Close any descriptor the shell leaks (e.g. `cargo bench ... 3>&-`): the sandbox closes
//! inherited descriptors with a `bash` shim, which would show in its numbers; the bench says
//! when that is the case.

use faultline_sandbox::{
    ExecRequest, Identity, Mount, ResourceLimits, Sandbox, SandboxSpec, Session, Toolchain,
};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::Command;

/// One way of running a command.
#[derive(Clone, Copy)]
enum Method {
    PlainTrue,
    PlainBash,
    BareBwrap,
    LayoutBwrap,
    HarnessSandboxTrue,
    SandboxTrue,
    SandboxBash,
    SessionTrue,
    SessionBash,
}

impl Method {
    const ALL: [Method; 9] = [
        Method::PlainTrue,
        Method::PlainBash,
        Method::BareBwrap,
        Method::LayoutBwrap,
        Method::HarnessSandboxTrue,
        Method::SandboxTrue,
        Method::SandboxBash,
        Method::SessionTrue,
        Method::SessionBash,
    ];

    fn label(self) -> &'static str {
        match self {
            Method::PlainTrue => "plain spawn: true",
            Method::PlainBash => "plain spawn: bash -c true",
            Method::BareBwrap => "bare bwrap: true",
            Method::LayoutBwrap => "bwrap, Sandbox's args: true",
            Method::HarnessSandboxTrue => "Sandbox::exec as harness: true",
            Method::SandboxTrue => "Sandbox::exec: true",
            Method::SandboxBash => "Sandbox::exec: bash -c true",
            Method::SessionTrue => "Session::exec: true",
            Method::SessionBash => "Session::exec: bash -c true",
        }
    }
}

/// The least bubblewrap needs to run `/bin/true` in fresh namespaces.
fn bare_bwrap_args() -> Vec<&'static str> {
    let mut args = vec![
        "--unshare-all",
        "--die-with-parent",
        "--ro-bind",
        "/usr",
        "/usr",
        "--symlink",
        "usr/bin",
        "/bin",
        "--symlink",
        "usr/lib",
        "/lib",
    ];
    if Path::new("/usr/lib64").exists() {
        args.extend(["--symlink", "usr/lib64", "/lib64"]);
    }
    args.extend(["--proc", "/proc", "--dev", "/dev", "--", "/bin/true"]);
    args
}

struct Subjects {
    /// The default sandbox: the dedicated identity, the filter, the write restriction.
    sandbox: Sandbox,
    /// The same layout run as the harness's own uid, to tell the identity's cost.
    as_harness: Sandbox,
    session: Session,
    bare: Vec<&'static str>,
    /// The arguments `Sandbox::exec` passes bubblewrap (as the harness, which needs no
    /// launcher), to tell the layout's cost from the harness's own.
    layout: Vec<String>,
}

async fn plain(program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{program}: {out:?}");
}

async fn time(m: Method, s: &Subjects) -> Duration {
    let t = Duration::from_secs(30);
    let start = Instant::now();
    let out = match m {
        Method::PlainTrue => {
            plain("/bin/true", &[]).await;
            None
        }
        Method::PlainBash => {
            plain("/bin/bash", &["-c", "true"]).await;
            None
        }
        Method::BareBwrap => {
            plain("bwrap", &s.bare).await;
            None
        }
        Method::LayoutBwrap => {
            let args: Vec<&str> = s.layout.iter().map(String::as_str).collect();
            plain("bwrap", &args).await;
            None
        }
        Method::HarnessSandboxTrue => {
            Some(s.as_harness.exec(&ExecRequest::argv(["true"], t)).await)
        }
        Method::SandboxTrue => Some(s.sandbox.exec(&ExecRequest::argv(["true"], t)).await),
        Method::SandboxBash => Some(s.sandbox.exec(&ExecRequest::bash("true", t)).await),
        Method::SessionTrue => Some(s.session.exec(&ExecRequest::argv(["true"], t)).await),
        Method::SessionBash => Some(s.session.exec(&ExecRequest::bash("true", t)).await),
    };
    let took = start.elapsed();
    if let Some(out) = out {
        let out = out.unwrap();
        assert!(out.success(), "{}: {out:?}", m.label());
    }
    took
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(200);
    let dir = tempfile::tempdir().unwrap();
    let toolchain = Toolchain::detect().ok();
    let spec = SandboxSpec::new(toolchain, "/workspace")
        .mount(Mount::rw(dir.path(), "/workspace"))
        .limits(ResourceLimits {
            cpu_weight: None,
            ..ResourceLimits::default()
        });
    let sandbox = Sandbox::new(spec.clone()).unwrap();
    let as_harness = Sandbox::new(spec.identity(Identity::Harness)).unwrap();
    let session = sandbox
        .start_session_with(env!("CARGO_BIN_EXE_faultline-supervisor").as_ref())
        .await
        .unwrap();
    let layout = as_harness.bwrap_args(&ExecRequest::argv(["true"], Duration::from_secs(1)));
    let shimmed = layout.iter().any(|a| a == "faultline-close-fds");
    let subjects = Subjects {
        sandbox,
        as_harness,
        session,
        bare: bare_bwrap_args(),
        layout,
    };
    for _ in 0..10 {
        for m in Method::ALL {
            time(m, &subjects).await;
        }
    }
    let mut samples: Vec<Vec<Duration>> = vec![Vec::with_capacity(n); Method::ALL.len()];
    for _ in 0..n {
        for (i, m) in Method::ALL.iter().enumerate() {
            samples[i].push(time(*m, &subjects).await);
        }
    }
    for s in &mut samples {
        s.sort();
    }
    let bare = percentile(&samples[Method::BareBwrap as usize], 0.5);
    println!("{n} runs each, interleaved; ratios are medians against bare bwrap's");
    if shimmed {
        println!("note: this process has inherited descriptors, so Sandbox::exec runs a bash shim");
    }
    println!(
        "{:<30} {:>12} {:>12} {:>8}",
        "method", "median", "p90", "ratio"
    );
    for (m, s) in Method::ALL.iter().zip(&samples) {
        let median = percentile(s, 0.5);
        println!(
            "{:<30} {:>12} {:>12} {:>7.2}x",
            m.label(),
            ms(median),
            ms(percentile(s, 0.9)),
            median.as_secs_f64() / bare.as_secs_f64()
        );
    }
    print!("protections:\n{}", subjects.session.protections());
}
