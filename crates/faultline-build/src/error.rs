//! Why a grade could not be made, as opposed to a submission that failed.

use crate::task::TaskError;

/// Why a grade could not be made (as opposed to a submission that failed).
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// The task is unusable.
    #[error(transparent)]
    Task(#[from] TaskError),
    /// A named schedule is not in the task.
    #[error("no schedule named {0} in the task")]
    UnknownSchedule(String),
    /// The grader's own file or process work failed.
    #[error("{0}")]
    Io(String),
    /// The patch does not apply.
    #[error("the patch {patch} does not apply: {message}")]
    Patch {
        /// The patch.
        patch: String,
        /// What `git apply` said.
        message: String,
    },
}
