//! The sandbox protections as the run's records hold them (`lock.json`, `grade.json`).

use faultline_corpus::{PreparedCase, TemplateKind};
use faultline_sandbox::{Protection, Protections, SandboxSpec, Toolchain};
use faultline_schema::{ProtectionRecord, ProtectionState};

/// `p` as records, in its fixed order.
pub fn records(p: &Protections) -> Vec<ProtectionRecord> {
    p.list()
        .iter()
        .map(|(name, p)| ProtectionRecord {
            name: name.to_string(),
            state: match p {
                Protection::Active(_) => ProtectionState::Active,
                Protection::Off => ProtectionState::Off,
                Protection::Unavailable(_) => ProtectionState::Unavailable,
            },
            detail: p.detail().to_string(),
        })
        .collect()
}

/// The protections a workbench's sandbox gets for a prepared case on this machine, asked without
/// building one: building a sandbox hands its writable mounts (here, the template) to the
/// sandbox's identity.
pub fn for_grading(prepared: &PreparedCase, toolchain: &Toolchain) -> Protections {
    let grading = prepared.template(TemplateKind::Grading);
    Protections::for_spec(&grading.sandbox_spec(
        toolchain,
        &grading.workspace,
        grading.oracle.as_deref(),
    ))
}

/// The protections agents and grading run under on this machine, with this process's limits.
pub fn in_force() -> Vec<ProtectionRecord> {
    records(&Protections::for_spec(&SandboxSpec::new(
        None,
        "/workspace",
    )))
}
