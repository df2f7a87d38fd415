//! The agent side of a trial: the built-in agent loop, external agents, baselines, and the
//! trajectory each of them leaves.

pub mod baselines;
pub mod builtin;
pub mod classify;
mod conversation;
pub mod env;
pub mod export;
pub mod external;
pub mod parse;
pub mod prompts;
pub mod record;
pub mod scaffolds;
pub mod stop;

pub use baselines::Baseline;
pub use builtin::{BuiltinAgent, TrialResult};
pub use env::{EnvError, TrialEnv};
pub use external::{AgentMount, ExternalAgent, GATEWAY_PORT, GatewayModel};
pub use prompts::{SUBMIT_SENTINEL, Templates};
pub use scaffolds::Scaffold;
