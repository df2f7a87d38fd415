//! What the tests of the build tasks share: grading a task's reference, skeleton and variants
//! with the real grader (release builds, offline) in one build directory.

use std::path::{Path, PathBuf};
use std::time::Duration;

use faultline_build::catalog::{Catalog, name_of, variant_patches};
use faultline_build::runner::{GradeRequest, grade_submission};
use faultline_build::task::TaskSpec;

/// The directory of the task `corpus/build/<id>`.
pub fn task_dir(id: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../corpus/build")
        .join(id)
}

/// One build directory for every grade of the test runs, so dependencies build once.
fn target_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    target.join("build-track-tests")
}

/// A grade of `submission` (with `patch`) on the task's schedules, or only those named.
pub fn request(
    task: &Path,
    submission: PathBuf,
    patch: Option<PathBuf>,
    only: Option<Vec<String>>,
) -> GradeRequest {
    GradeRequest {
        task_dir: task.to_path_buf(),
        submission,
        patch,
        only,
        target_dir: target_dir(),
        schedule_timeout: Duration::from_secs(120),
        histories: None,
    }
}

/// The reference passes every hidden schedule, answering every operation.
pub fn reference_passes_every_schedule(task: &Path) {
    let report = grade_submission(&request(task, task.join("reference"), None, None)).unwrap();
    assert_eq!(report.build_error, None);
    let failed: Vec<_> = report
        .schedules
        .iter()
        .filter(|s| !s.passed)
        .map(|s| (&s.schedule, &s.failure))
        .collect();
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!((report.passed, report.total), (100, 100));
    assert!(report.schedules.iter().all(|s| s.completed == 1000));
}

/// The skeleton builds and completes nothing on the first three hidden schedules.
pub fn skeleton_builds_and_fails(task: &Path) {
    let spec = TaskSpec::load(task).unwrap();
    let only: Vec<String> = spec
        .hidden_schedules()
        .into_iter()
        .take(3)
        .map(|s| s.name)
        .collect();
    let report = grade_submission(&request(task, task.join("skeleton"), None, Some(only))).unwrap();
    assert_eq!(report.build_error, None);
    assert_eq!(report.schedules.len(), 3);
    for s in &report.schedules {
        assert_eq!(
            s.failure.as_ref().map(|f| f.kind()),
            Some("liveness"),
            "{s:?}"
        );
        assert_eq!(s.completed, 0);
    }
}

/// The catalog lists every patch, at least ten, and each variant still fails the first
/// `per_variant` schedules its catalog names, in the way it names.
pub fn variants_fail_as_catalogued(task: &Path, per_variant: usize) {
    let catalog = Catalog::load(task).unwrap();
    let patches = variant_patches(task).unwrap();
    let names: Vec<String> = patches.iter().map(|p| name_of(p)).collect();
    let listed: Vec<String> = catalog.variants.iter().map(|v| v.name.clone()).collect();
    assert_eq!(names, listed, "the catalog is out of date with variants/");
    assert!(
        catalog.variants.len() >= 10,
        "{} variants",
        catalog.variants.len()
    );
    for (variant, patch) in catalog.variants.iter().zip(patches) {
        assert!(
            !variant.caught_by.is_empty(),
            "{} is caught by no schedule",
            variant.name
        );
        let chosen = &variant.caught_by[..per_variant.min(variant.caught_by.len())];
        let only = chosen.iter().map(|c| c.schedule.clone()).collect();
        let report = grade_submission(&request(
            task,
            task.join("reference"),
            Some(patch),
            Some(only),
        ))
        .unwrap();
        assert_eq!(report.build_error, None, "{}", variant.name);
        assert_eq!(report.schedules.len(), chosen.len(), "{}", variant.name);
        for (caught, result) in chosen.iter().zip(&report.schedules) {
            assert_eq!(result.schedule, caught.schedule);
            assert_eq!(
                result.failure.as_ref().map(|f| f.kind()),
                Some(caught.kind.as_str()),
                "variant {} on {}",
                variant.name,
                caught.schedule
            );
        }
    }
}
