//! Helpers shared by the sandbox's attack tests: a way to run each attack through a one-shot
//! `Sandbox::exec` and through a `Session`. The rule for protections a host may lack is
//! `faultline_testkit::protected`.

#![allow(dead_code)]

use faultline_sandbox::{
    ExecOutput, ExecRequest, Mount, Sandbox, SandboxError, SandboxSpec, Session,
};
use std::path::Path;
use std::time::Duration;

pub const SUPERVISOR: &str = env!("CARGO_BIN_EXE_faultline-supervisor");

/// A way to run commands: a fresh sandbox each time, or one session.
pub enum Runner {
    Exec(Box<Sandbox>),
    Session(Box<Session>),
}

impl Runner {
    pub async fn run(&self, req: &ExecRequest) -> ExecOutput {
        self.try_run(req)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", self.name()))
    }

    pub async fn try_run(&self, req: &ExecRequest) -> Result<ExecOutput, SandboxError> {
        match self {
            Runner::Exec(sb) => sb.exec(req).await,
            Runner::Session(s) => s.exec(req).await,
        }
    }

    pub async fn bash(&self, script: &str) -> ExecOutput {
        self.run(&ExecRequest::bash(script, Duration::from_secs(20)))
            .await
    }

    pub fn name(&self) -> &'static str {
        match self {
            Runner::Exec(_) => "exec",
            Runner::Session(_) => "session",
        }
    }
}

/// Both runners over the same layout.
pub async fn runners(spec: SandboxSpec) -> [Runner; 2] {
    let sb = Sandbox::new(spec).unwrap();
    let session = sb.start_session_with(SUPERVISOR.as_ref()).await.unwrap();
    [
        Runner::Exec(Box::new(sb)),
        Runner::Session(Box::new(session)),
    ]
}

pub fn workspace_spec(dir: &Path) -> SandboxSpec {
    SandboxSpec::new(None, "/workspace").mount(Mount::rw(dir, "/workspace"))
}

/// Everything a command printed, both streams.
pub fn all_output(out: &ExecOutput) -> String {
    format!("{}{}", out.stdout.text, out.stderr.text)
}
