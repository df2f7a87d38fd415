//! Real agent scaffolds run as external agents: each installs a pinned release once into the
//! data directory, runs inside the trial's sandbox against the trial's model gateway, and has its
//! own trajectory folded into ours. Adding one: an installer that puts its runtime under
//! `<data>/agents/<name>-<version>/`, a driver that reads `$FAULTLINE_TASK_DIR/prompt.md` and writes
//! the submission to `$FAULTLINE_OUTPUT_DIR`, and, if it keeps a trajectory, a reader that attaches
//! its commands to the gateway's steps (see `docs/agents.md`).

pub mod aider;
pub mod mini_swe_agent;
pub mod python;

/// Which scaffold an external agent is, for what the harness does around it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scaffold {
    /// A command of the user's: nothing is known about its trajectory.
    #[default]
    Command,
    /// mini-swe-agent, through [`mini_swe_agent`]'s driver.
    MiniSweAgent,
    /// aider, through [`aider`]'s driver.
    Aider,
}

impl Scaffold {
    /// The scaffold's name and pinned release, as results record it.
    pub fn release(self) -> Option<String> {
        PACKAGES
            .iter()
            .find(|p| p.scaffold == self)
            .map(|p| format!("{} {}", p.name, p.version))
    }

    /// The word the scaffold's agent submits with, used in the task prompt it is given.
    pub fn sentinel(self) -> &'static str {
        match self {
            Scaffold::Command | Scaffold::Aider => crate::SUBMIT_SENTINEL,
            Scaffold::MiniSweAgent => mini_swe_agent::SENTINEL,
        }
    }
}

/// The scaffolds `--agent` installs and runs by name.
pub const PACKAGES: [python::Package; 2] = [mini_swe_agent::PACKAGE, aider::PACKAGE];
