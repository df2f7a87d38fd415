//! What an agent hands in: the text of one file, whose name and format depend on the track.
//! It lives beside the formats because the agent writes it, the run directory stores it and the
//! grader reads it, and none of them should own the others' view of it.

use crate::task::Track;
use std::path::Path;

/// The diagnose track's submission.
pub const DIAGNOSIS_FILE: &str = "diagnosis.json";
/// The repair and build tracks' submission.
pub const PATCH_FILE: &str = "patch.diff";
/// The reproduce track's submission.
pub const REPRODUCER_FILE: &str = "reproducer.rs";
/// Every track's submission file, in track order.
pub const SUBMISSION_FILES: [&str; 3] = [DIAGNOSIS_FILE, PATCH_FILE, REPRODUCER_FILE];

/// The name of a track's submission file, in a trial directory and in an agent's output.
pub fn submission_file(track: Track) -> &'static str {
    match track {
        Track::Diagnose => DIAGNOSIS_FILE,
        Track::Repair | Track::Build => PATCH_FILE,
        Track::Reproduce => REPRODUCER_FILE,
    }
}

/// What an agent submits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Submission {
    /// The text of `diagnosis.json`.
    Diagnosis(String),
    /// A unified diff against the buggy crate; on the build track, against the task's skeleton
    /// (only its `src/` is graded).
    Patch(String),
    /// One integration-test file.
    Reproducer(String),
    /// Nothing was submitted.
    None,
}

impl Submission {
    /// The submission of `track` with this text.
    pub fn of(track: Track, text: String) -> Submission {
        match track {
            Track::Diagnose => Submission::Diagnosis(text),
            Track::Repair | Track::Build => Submission::Patch(text),
            Track::Reproduce => Submission::Reproducer(text),
        }
    }

    /// Reads the file of `track`'s submission from `dir` (a trial directory, or an external
    /// agent's output directory); `None` when there is no readable file.
    pub fn read(dir: &Path, track: Track) -> Option<Submission> {
        std::fs::read_to_string(dir.join(submission_file(track)))
            .ok()
            .map(|text| Submission::of(track, text))
    }

    /// The file name it is stored under (in a trial directory and an agent's output).
    pub fn file_name(&self) -> Option<&'static str> {
        match self {
            Submission::Diagnosis(_) => Some(submission_file(Track::Diagnose)),
            Submission::Patch(_) => Some(submission_file(Track::Repair)),
            Submission::Reproducer(_) => Some(submission_file(Track::Reproduce)),
            Submission::None => None,
        }
    }

    /// The submitted text.
    pub fn text(&self) -> Option<&str> {
        match self {
            Submission::Diagnosis(t) | Submission::Patch(t) | Submission::Reproducer(t) => Some(t),
            Submission::None => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_submission_is_read_back_under_its_track_s_name() {
        let dir = tempfile::tempdir().unwrap();
        for track in Track::ALL {
            let s = Submission::of(track, format!("{track} text"));
            let name = s.file_name().unwrap();
            assert_eq!(name, submission_file(track));
            std::fs::write(dir.path().join(name), s.text().unwrap()).unwrap();
            assert_eq!(Submission::read(dir.path(), track), Some(s));
        }
        assert_eq!(Submission::None.file_name(), None);
        assert_eq!(
            Submission::read(&dir.path().join("missing"), Track::Repair),
            None
        );
    }
}
