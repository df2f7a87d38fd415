//! The environment of one trial: a private copy of the case's agent workspace, the sandbox over
//! it, and what the agent is told.

use anyhow::{Context, Result};
use faultline_corpus::gold::diff_workspace;
use faultline_corpus::workspace::copy::copy_preserving;
use faultline_corpus::workspace::reproducer::install_reproducer;
use faultline_corpus::{BundleFile, Case, DataDir, PreparedCase, TemplateKind};
use faultline_sandbox::{ExecOutput, ExecRequest, Sandbox, SandboxError, Session, Toolchain};
use faultline_schema::rundir::TASK_FILE;
use faultline_schema::{Task, Track};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// The `FAULTLINE_SEED` an agent's commands see, drawn from the trial's seed. Graders set the
/// variable for every test they run (the primary oracle run and the regression run with 1,
/// validation with 1 to 5), so it is set here too, with a value from that same range: neither its
/// presence nor its value tells code under test that it is being graded.
pub fn agent_faultline_seed(trial_seed: u64) -> u64 {
    1 + trial_seed % 5
}

/// Why a trial's environment could not be created, by whose failure it is: the runner records
/// the environment's as the trial's infrastructure error and stops the run on the harness's own.
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    /// The agent template does not match its manifest, or no sandbox can be set up over the
    /// trial's copy: an infrastructure failure, recorded without a score, that `--retry-infra`
    /// redoes.
    #[error(transparent)]
    Unavailable(anyhow::Error),
    /// The harness could not make the copy (its scratch space, the copy itself, a file it
    /// writes): an error of the run, as a trajectory it cannot write is.
    #[error(transparent)]
    Harness(anyhow::Error),
}

/// A trial's private workspace and sandbox.
#[derive(Debug)]
pub struct TrialEnv {
    /// The task.
    pub task: Task,
    /// The symptom text.
    pub symptom: String,
    /// The bundle of the trial's condition (empty in `symptom`).
    pub bundle: Vec<BundleFile>,
    /// The trial's workspace on the host (mounted at `/workspace`).
    pub workspace: PathBuf,
    /// The untouched agent workspace the diffs are taken against.
    pub pristine: PathBuf,
    /// The sandbox over the workspace.
    pub sandbox: Sandbox,
    session: tokio::sync::Mutex<SessionState>,
    _dir: faultline_corpus::workspace::scratch::ScratchDir,
}

/// Whether the trial's commands go through one long-lived sandbox.
#[derive(Debug)]
enum SessionState {
    /// Not started yet.
    NotStarted,
    /// Running.
    Live(Box<Session>),
    /// Sessions are not available here; every command gets a one-shot sandbox.
    OneShot,
}

impl TrialEnv {
    /// Copies the case's agent workspace (with its warm build cache) for one trial, once it is
    /// checked against its manifest: a damaged template gives no agent a broken workspace.
    /// `bundle` is what the condition's provider wrote (empty in `symptom`).
    pub fn create(
        case: &Case,
        prepared: &PreparedCase,
        task: Task,
        bundle: Vec<BundleFile>,
        data: &DataDir,
        toolchain: &Toolchain,
    ) -> Result<TrialEnv, EnvError> {
        let dir = data.scratch_dir("trial").map_err(EnvError::Harness)?;
        let workspace = dir.path().join("workspace");
        prepared
            .check(TemplateKind::Agent)
            .map_err(EnvError::Unavailable)?;
        let agent = &prepared.stamp.agent;
        copy_workspace(prepared, &workspace, task.track).map_err(EnvError::Harness)?;
        let spec = agent.sandbox_spec(toolchain, &workspace, None).env(
            "FAULTLINE_SEED",
            agent_faultline_seed(task.seed).to_string(),
        );
        let sandbox = Sandbox::new(spec).map_err(|e| EnvError::Unavailable(e.into()))?;
        Ok(TrialEnv {
            task,
            symptom: case.symptom.clone(),
            bundle,
            workspace,
            pristine: agent.workspace.clone(),
            sandbox,
            session: tokio::sync::Mutex::new(SessionState::NotStarted),
            _dir: dir,
        })
    }

    /// A build-track trial's environment: a copy of the task's prepared workspace (`template`,
    /// the skeleton and the condition's aid files) under `spec`, the sandbox that mounts it at
    /// `/workspace` with the harness the aid allows. `text` is the task's text.
    pub fn for_build(
        task: Task,
        text: String,
        bundle: Vec<BundleFile>,
        template: &Path,
        spec: impl FnOnce(&Path) -> faultline_sandbox::SandboxSpec,
        data: &DataDir,
    ) -> Result<TrialEnv, EnvError> {
        let dir = data.scratch_dir("trial").map_err(EnvError::Harness)?;
        let workspace = dir.path().join("workspace");
        copy_preserving(template, &workspace)
            .context("copying the task's workspace")
            .map_err(EnvError::Harness)?;
        let spec = spec(&workspace).env(
            "FAULTLINE_SEED",
            agent_faultline_seed(task.seed).to_string(),
        );
        let sandbox = Sandbox::new(spec).map_err(|e| EnvError::Unavailable(e.into()))?;
        Ok(TrialEnv {
            task,
            symptom: text,
            bundle,
            workspace,
            pristine: template.to_path_buf(),
            sandbox,
            session: tokio::sync::Mutex::new(SessionState::NotStarted),
            _dir: dir,
        })
    }

    /// Runs one command of the agent. Commands share one long-lived sandbox (a session) when
    /// the supervisor is available, which costs about a plain process spawn per command; a lost
    /// session is restarted once, and without a supervisor each command gets its own sandbox.
    pub async fn exec(&self, req: &ExecRequest) -> Result<ExecOutput, SandboxError> {
        let mut state = self.session.lock().await;
        if matches!(*state, SessionState::NotStarted) {
            *state = match self.sandbox.start_session().await {
                Ok(s) => SessionState::Live(Box::new(s)),
                Err(SandboxError::NoSupervisor(why)) => {
                    tracing::info!("sandbox sessions unavailable ({why}); one sandbox per command");
                    SessionState::OneShot
                }
                Err(e) => return Err(e),
            };
        }
        match &*state {
            SessionState::Live(session) => match session.exec(req).await {
                Err(SandboxError::SessionLost(why)) => {
                    tracing::warn!("sandbox session lost ({why}); starting a new one");
                    let fresh = self.sandbox.start_session().await?;
                    let out = fresh.exec(req).await;
                    *state = SessionState::Live(Box::new(fresh));
                    out
                }
                other => other,
            },
            _ => {
                let out = self.sandbox.exec(req).await?;
                // bubblewrap's own failures (a mount it cannot make) are on its standard error;
                // the agent's commands write theirs to standard output (`exec 2>&1`).
                if out.exit_code == Some(1) && out.stderr.text.starts_with("bwrap: ") {
                    return Err(SandboxError::Unavailable(
                        out.stderr.text.trim().to_string(),
                    ));
                }
                Ok(out)
            }
        }
    }

    /// The unified diff of everything changed in the workspace so far (on the build track, of
    /// the crate's `src/`, the part that is graded), and its SHA-256.
    pub fn diff(&self) -> Result<(String, String)> {
        let diff = if self.task.track == Track::Build {
            let mut sources =
                diff_workspace(&self.pristine.join("src"), &self.workspace.join("src"))?;
            for file in &mut sources.files {
                file.path = format!("src/{}", file.path);
            }
            sources.unified()
        } else {
            diff_workspace(&self.pristine, &self.workspace)?.unified()
        };
        let sha = hex::encode(Sha256::digest(diff.as_bytes()));
        Ok((diff, sha))
    }

    /// Writes the task directory an external agent receives: `task.json`, `symptom.md` and,
    /// in the `context` condition, `context/*.md`.
    pub fn write_task_dir(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir)?;
        faultline_schema::io::write_json_atomic(&dir.join(TASK_FILE), &self.task)?;
        std::fs::write(dir.join("symptom.md"), &self.symptom)?;
        if !self.bundle.is_empty() {
            std::fs::create_dir_all(dir.join("context"))?;
            for f in &self.bundle {
                std::fs::write(dir.join("context").join(&f.name), &f.text)?;
            }
        }
        Ok(())
    }
}

/// The trial's copy of the agent template, its shared build outputs links to their read-only
/// mount (see [`PreparedCase::copy_workspace`]); on the reproduce track, with an empty reproducer.
fn copy_workspace(prepared: &PreparedCase, workspace: &Path, track: Track) -> Result<()> {
    prepared.copy_workspace(TemplateKind::Agent, workspace)?;
    if track == Track::Reproduce {
        install_reproducer(
            workspace,
            "//! Reproducer: an integration test that fails on this code and passes once the bug is fixed.\n",
        )?;
    }
    Ok(())
}
