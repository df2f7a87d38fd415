//! The on-disk formats of faultline, in one place.
//!
//! Every file faultline reads or writes is a type here, with a `schema_version` and a JSON
//! Schema generated from the type (see [`schemas`]). Nothing here runs a process or touches the
//! network; the only I/O is reading and atomically writing these files ([`io`]), laid out in a
//! run directory as [`rundir`] says.

pub mod bench;
pub mod build;
pub mod bundle;
pub mod case;
pub mod condition;
pub mod diagnosis;
pub mod grade;
pub mod io;
pub mod protection;
pub mod rate;
pub mod report;
pub mod results;
pub mod run;
pub mod rundir;
pub mod schemas;
pub mod submission;
pub mod task;
pub mod trajectory;
pub mod validation;

pub use build::BuildScores;
pub use bundle::{BundleRecord, BundleStatus};
pub use case::{
    CaseManifest, CaseParseError, Category, DecoyClass, DecoySpec, LabeledBlock, OracleKind,
    OracleSpec, Pin, Reasoning, RegressionSpec, RegressionTarget, Scenario, Source,
};
pub use condition::{Aid, Condition, ConditionKind};
pub use diagnosis::{DiagnosedBlock, Diagnosis};
pub use grade::{Grade, Outcome};
pub use protection::{ProtectionRecord, ProtectionState};
pub use report::{PackManifest, Report};
pub use run::{GradingSettings, ResultRecord, RunLock};
pub use rundir::{RunDir, TrialDir};
pub use submission::Submission;
pub use task::{Limits, Task, Track};
pub use trajectory::{ActionKind, ExitStatus, Trajectory};
