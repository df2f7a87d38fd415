//! The catalog of a task's buggy variants: each variant is a patch to the reference
//! (`variants/<name>.diff`, its leading `#` lines saying what is wrong), and the catalog records
//! which hidden schedules catch it and how, so a test can check every variant is still caught.

use std::path::{Path, PathBuf};

use std::collections::BTreeMap;

use faultline_sim::grade::GradeReport;
use serde::{Deserialize, Serialize};

use crate::runner::{GradeRequest, RunnerError, grade_submission};

/// The catalog format's version.
pub const CATALOG_VERSION: u32 = 1;
/// Where a task keeps its variants and their catalog.
pub const VARIANTS_DIR: &str = "variants";
/// The catalog's file name inside [`VARIANTS_DIR`].
pub const CATALOG_FILE: &str = "catalog.json";

/// Every variant of a task and what catches it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Catalog {
    /// Always [`CATALOG_VERSION`].
    pub version: u32,
    /// The task.
    pub task: String,
    /// The variants, by name.
    pub variants: Vec<Variant>,
}

/// One buggy variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Variant {
    /// The patch's file name without `.diff`.
    pub name: String,
    /// What the patch breaks, from its leading comment.
    pub about: String,
    /// Hidden schedules run.
    pub schedules: usize,
    /// The schedules it fails and how: its signature.
    pub caught_by: Vec<Caught>,
}

/// A schedule that catches a variant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Caught {
    /// The schedule's name.
    pub schedule: String,
    /// The failure's kind (`linearizability`, `liveness`...).
    pub kind: String,
}

/// The patches of a task, sorted by name.
pub fn variant_patches(task_dir: &Path) -> Result<Vec<PathBuf>, RunnerError> {
    let dir = task_dir.join(VARIANTS_DIR);
    let entries = std::fs::read_dir(&dir)
        .map_err(|e| RunnerError::Io(format!("reading {}: {e}", dir.display())))?;
    let mut patches: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "diff"))
        .collect();
    patches.sort();
    Ok(patches)
}

/// What a patch says about itself: its leading `#` lines joined.
pub fn about(patch: &Path) -> Result<String, RunnerError> {
    let text = std::fs::read_to_string(patch)
        .map_err(|e| RunnerError::Io(format!("reading {}: {e}", patch.display())))?;
    Ok(text
        .lines()
        .map_while(|l| l.strip_prefix('#'))
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" "))
}

/// The variant's name: its patch's file name without `.diff`.
pub fn name_of(patch: &Path) -> String {
    patch
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

impl Catalog {
    /// Reads a task's catalog.
    pub fn load(task_dir: &Path) -> Result<Self, RunnerError> {
        let path = task_dir.join(VARIANTS_DIR).join(CATALOG_FILE);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| RunnerError::Io(format!("reading {}: {e}", path.display())))?;
        serde_json::from_str(&text)
            .map_err(|e| RunnerError::Io(format!("{} is not a catalog: {e}", path.display())))
    }

    /// Grades the reference with every variant patch applied on the task's hidden schedules;
    /// `request` says where to build and how long a schedule may take (its submission is the
    /// task's reference, its patch and schedule filter are set per variant).
    pub fn build(task: &str, request: &GradeRequest) -> Result<Self, RunnerError> {
        let mut variants = Vec::new();
        for patch in variant_patches(&request.task_dir)? {
            let report = grade_submission(&GradeRequest {
                patch: Some(patch.clone()),
                only: None,
                ..request.clone()
            })?;
            if let Some(error) = report.build_error {
                return Err(RunnerError::Io(format!(
                    "variant {} does not build:\n{error}",
                    patch.display()
                )));
            }
            eprintln!(
                "{}: fails {}/{} schedules",
                name_of(&patch),
                report.total - report.passed,
                report.total
            );
            let caught_by = report
                .schedules
                .iter()
                .filter_map(|s| {
                    s.failure.as_ref().map(|f| Caught {
                        schedule: s.schedule.clone(),
                        kind: f.kind().to_string(),
                    })
                })
                .collect();
            variants.push(Variant {
                name: name_of(&patch),
                about: about(&patch)?,
                schedules: report.total,
                caught_by,
            });
        }
        Ok(Catalog {
            version: CATALOG_VERSION,
            task: task.to_string(),
            variants,
        })
    }
}

/// How much a grade's failures look like one catalogued variant's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resemblance {
    /// The variant.
    pub variant: String,
    /// Schedules of its signature that the graded submission failed in the same way.
    pub shared: usize,
    /// Schedules in its signature.
    pub of: usize,
}

impl Resemblance {
    /// Whether the submission fails every schedule of the variant's signature the same way: its
    /// failures are consistent with that bug (they do not prove it; another bug may fail the
    /// same schedules).
    pub fn matches(&self) -> bool {
        self.of > 0 && self.shared == self.of
    }
}

impl Catalog {
    /// Each variant's resemblance to a graded submission, the closest first (ties by name): how
    /// the report says which kinds of bug survive in a submission.
    pub fn resemblance(&self, report: &GradeReport) -> Vec<Resemblance> {
        let failed: BTreeMap<&str, &str> = report
            .schedules
            .iter()
            .filter_map(|s| Some((s.schedule.as_str(), s.failure.as_ref()?.kind())))
            .collect();
        let mut out: Vec<Resemblance> = self
            .variants
            .iter()
            .map(|v| Resemblance {
                variant: v.name.clone(),
                shared: v
                    .caught_by
                    .iter()
                    .filter(|c| failed.get(c.schedule.as_str()) == Some(&c.kind.as_str()))
                    .count(),
                of: v.caught_by.len(),
            })
            .collect();
        out.sort_by(|a, b| {
            let share = |r: &Resemblance| r.shared as f64 / r.of.max(1) as f64;
            share(b)
                .total_cmp(&share(a))
                .then_with(|| a.variant.cmp(&b.variant))
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use faultline_sim::verdict::{Failure, ScheduleResult};

    fn caught(schedule: &str, kind: &str) -> Caught {
        Caught {
            schedule: schedule.into(),
            kind: kind.into(),
        }
    }

    #[test]
    fn failures_are_matched_to_variant_signatures_by_schedule_and_kind() {
        let catalog = Catalog {
            version: CATALOG_VERSION,
            task: "t".into(),
            variants: vec![
                Variant {
                    name: "stale-read".into(),
                    about: String::new(),
                    schedules: 3,
                    caught_by: vec![
                        caught("s1", "linearizability"),
                        caught("s2", "linearizability"),
                    ],
                },
                Variant {
                    name: "lost-vote".into(),
                    about: String::new(),
                    schedules: 3,
                    caught_by: vec![caught("s3", "liveness")],
                },
            ],
        };
        let schedule =
            |name: &str| faultline_sim::generate::generate(name, 10, &Default::default());
        let stale = || Failure::Linearizability {
            key: "k".into(),
            operations: Vec::new(),
            context: Vec::new(),
            one_minimal: true,
        };
        let results = vec![
            ScheduleResult::unrun(&schedule("s1"), stale()),
            ScheduleResult::unrun(&schedule("s2"), stale()),
            ScheduleResult::unrun(&schedule("s3"), stale()),
        ];
        let report = GradeReport::new("t", "x", results, 3);
        let found = catalog.resemblance(&report);
        assert_eq!(found[0].variant, "stale-read");
        assert!(found[0].matches());
        // s3 failed, but not on liveness: not lost-vote's signature.
        assert_eq!((found[1].shared, found[1].of), (0, 1));
        assert!(!found[1].matches());
        let passed = GradeReport::new("t", "x", Vec::new(), 3);
        assert!(catalog.resemblance(&passed).iter().all(|r| !r.matches()));
    }

    #[test]
    fn a_patch_names_itself_and_says_what_it_breaks() {
        let dir = tempfile::tempdir().unwrap();
        let patch = dir.path().join("lost-vote.diff");
        std::fs::write(
            &patch,
            "# The vote is kept\n# only in memory.\ndiff --git a/x b/x\n# not this\n",
        )
        .unwrap();
        assert_eq!(name_of(&patch), "lost-vote");
        assert_eq!(about(&patch).unwrap(), "The vote is kept only in memory.");
    }
}
