//! aider, the terminal pair programmer, as a second real scaffold: [`PACKAGE`]'s release from the
//! Python package registry, run once per trial by our `aider.py` with its SEARCH/REPLACE edit
//! format and the crate's tests as its test command, inside the sandbox, against the gateway.
//! It edits code and runs no shell of its own, so it takes the repair track only; its chat and
//! model logs are kept in the trial's agent output.

use crate::scaffolds::Scaffold;
use crate::scaffolds::python::Package;

/// The release, and our driver for it.
pub const PACKAGE: Package = Package {
    name: "aider",
    distribution: "aider-chat",
    version: "0.86.2",
    driver: include_str!("aider.py"),
    scaffold: Scaffold::Aider,
};
