//! Names the harness and the supervisor binary agree on, kept apart from both so that the code
//! that builds a sandbox's command line and the code that reads it import neither each other.

/// The supervisor's role that restricts writes and then becomes the command.
pub(crate) const RESTRICT_ROLE: &str = "restrict";

/// The option that asks that role for a write restriction (`--restrict-writes --write PATH`).
pub(crate) const RESTRICT_FLAG: &str = "--restrict-writes";
