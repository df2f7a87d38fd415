//! A patch whose code exhausts memory while the oracle runs: the grading sandbox's memory limit
//! stops it, and the grade says so (`resource_limit`, naming the limit) instead of blaming the
//! code's logic or harming the host, and the verdict is not cached. Real sandbox and cargo build
//! of the toy fixture. In a file of its own because it lowers this process's default limits.

use faultline_corpus::{DataDir, prepare};
use faultline_grade::cache::verdict_about_submission;
use faultline_grade::{GradeContext, grade_repair};
use faultline_sandbox::{Protections, ResourceLimits, SandboxSpec, Toolchain};
use faultline_schema::{GradingSettings, Outcome};
use faultline_testkit::fixture_case;

/// The memory limit of this test's sandboxes: enough for cargo to build the toy crate.
const LIMIT: u64 = 1 << 30;

/// Allocates three times the limit and touches every page, where the fix would go.
const BOMB: &str = "            let mut hog = vec![0u8; 3 << 30];\n            for i in (0..hog.len()).step_by(4096) {\n                hog[i] = 1;\n            }\n            std::hint::black_box(&hog);\n            *mine += *count;";

#[tokio::test]
async fn a_memory_bomb_in_the_oracle_run_is_a_resource_limit_not_a_verdict() {
    faultline_sandbox::configure_default_limits(ResourceLimits {
        memory_bytes: Some(LIMIT),
        ..ResourceLimits::builtin()
    })
    .unwrap();
    let limit = Protections::for_spec(&SandboxSpec::new(None, "/workspace")).memory_limit;
    if !limit.is_active() {
        assert!(
            std::env::var_os("FAULTLINE_REQUIRE_PROTECTIONS").is_none(),
            "the memory limit: {limit}"
        );
        eprintln!("skipping the memory bomb: {limit}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let case = fixture_case(dir.path(), "toy-memory-bomb", |_| {}).unwrap();
    let data = DataDir::new(dir.path().join("data"));
    let toolchain = Toolchain::detect().unwrap();
    let prepared = prepare(&case, &data, &toolchain, &Default::default())
        .await
        .unwrap();
    let buggy = faultline_testkit::fixture_corpus().join("../toy-tree/buggy");
    let original = std::fs::read_to_string(buggy.join("src/lib.rs")).unwrap();
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    for (root, text) in [
        (a.path(), original.clone()),
        (
            b.path(),
            original.replace("            *mine += *count;", BOMB),
        ),
    ] {
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join("src/lib.rs"), text).unwrap();
    }
    let patch = faultline_corpus::gold::diff_workspace(a.path(), b.path())
        .unwrap()
        .unified();
    assert!(patch.contains("3 << 30"), "{patch}");
    let ctx = GradeContext {
        case: &case,
        prepared: &prepared,
        data: &data,
        toolchain: &toolchain,
    };
    let g = grade_repair(
        &ctx,
        "t/repair/symptom/1",
        &patch,
        &GradingSettings::default(),
    )
    .await
    .unwrap();
    assert_eq!(g.outcome, Outcome::ResourceLimit, "{}", g.reason);
    assert!(g.reason.contains("memory limit"), "{}", g.reason);
    assert_eq!(g.score, Some(0.0));
    assert!(!verdict_about_submission(&g), "a resource limit is cached");
    assert!(
        g.protections
            .iter()
            .any(|p| p.name == "memory limit" && p.detail.contains("1 GiB")),
        "{:?}",
        g.protections
    );
}
