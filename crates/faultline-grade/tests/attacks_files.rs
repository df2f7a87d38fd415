//! Attacks on the grader through the file system, each made as a reward-hacking agent would:
//! a patch that turns a source file into a link to a host file, one that changes modes or
//! reaches outside `src/`, sandboxed code that tries to change the build outputs workbenches
//! share, a template damaged between grades, and a poisoned verdict waiting in the grade cache.
//! Real sandboxes and cargo builds of the toy fixture, given a path dependency so that its
//! grading template has shared build outputs.

use faultline_corpus::gold::diff_trees;
use faultline_corpus::store::copy_tree;
use faultline_corpus::{Case, DataDir, TemplateKind, prepare};
use faultline_grade::cache::{GradeEnvironment, cache_dir, cache_key};
use faultline_grade::{GradeContext, Workbench, grade_repair, grade_submission};
use faultline_sandbox::ExecRequest;
use faultline_schema::{Grade, GradingSettings, Outcome, Submission, Track};
use faultline_testkit::{Prepared, Shared, fixture_case, fixture_tree};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Grading on the shared fixture.
trait Grading {
    fn ctx(&self) -> GradeContext<'_>;
    fn gold(&self) -> String;
    async fn repair(&self, patch: &str) -> Grade;
}

impl Grading for Prepared {
    fn ctx(&self) -> GradeContext<'_> {
        GradeContext {
            case: &self.case,
            prepared: &self.prepared,
            data: &self.data,
            toolchain: &self.toolchain,
        }
    }

    fn gold(&self) -> String {
        diff_trees(&self.prepared.sources.buggy, &self.prepared.sources.fixed)
            .unwrap()
            .unified()
    }

    async fn repair(&self, patch: &str) -> Grade {
        grade_repair(
            &self.ctx(),
            "t/repair/symptom/1",
            patch,
            &GradingSettings::default(),
        )
        .await
        .unwrap()
    }
}

/// The toy fixture case whose crate depends on a small crate of its own (`dep/`, by path), whose
/// build outputs no patch can change, so the grading template shares them.
fn case_with_dependency(root: &Path, id: &str) -> Case {
    let tree = fixture_tree().canonicalize().unwrap();
    let trees = root.join(format!("{id}-tree"));
    for side in ["buggy", "fixed"] {
        let dir = trees.join(side);
        copy_tree(&tree.join(side), &dir, &|_| true).unwrap();
        fs::create_dir_all(dir.join("dep/src")).unwrap();
        fs::write(
            dir.join("dep/Cargo.toml"),
            "[package]\nname = \"toy-dep\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
        )
        .unwrap();
        fs::write(
            dir.join("dep/src/lib.rs"),
            "pub fn one() -> u64 {\n    1\n}\n",
        )
        .unwrap();
        let manifest = fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        assert!(manifest.contains("[dependencies]\n"), "{manifest}");
        let manifest = manifest.replace(
            "[dependencies]\n",
            "[dependencies]\ntoy-dep = { path = \"dep\" }\n",
        );
        fs::write(dir.join("Cargo.toml"), manifest).unwrap();
    }
    fixture_case(root, id, |case_dir| {
        let path = case_dir.join("case.toml");
        let text = fs::read_to_string(&path)
            .unwrap()
            .replace(&tree.display().to_string(), &trees.display().to_string());
        fs::write(path, text).unwrap();
    })
    .unwrap()
}

async fn prepared_fixture(dir: &Path, id: &str) -> Prepared {
    let data = DataDir::new(dir.join("data"));
    Prepared::new(case_with_dependency(dir, id), data).await
}

/// One prepared case for every test that leaves its templates alone.
async fn fixture() -> &'static Prepared {
    static FIXTURE: Shared = Shared::new();
    FIXTURE
        .get(|dir| async move { prepared_fixture(&dir, "toy-attacks").await })
        .await
}

/// The shared dependency's compiled library in a template's workspace.
fn dependency_rlib(workspace: &Path) -> PathBuf {
    let deps = workspace.join("target/debug/deps");
    fs::read_dir(&deps)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with("libtoy_dep-") && name.ends_with(".rlib")
        })
        .expect("the dependency was built")
}

/// A host file outside every workbench, as an attacker would aim at one.
fn host_victim() -> (tempfile::TempDir, PathBuf, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim.rs");
    let bytes = b"// a host file the grader must never write\nfn host() {}\n".to_vec();
    fs::write(&victim, &bytes).unwrap();
    (dir, victim, bytes)
}

#[tokio::test]
async fn a_patch_that_makes_a_source_file_a_link_to_a_host_file_is_refused() {
    let f = fixture().await;
    let (_keep, victim, before) = host_victim();
    let lib = fs::read_to_string(f.prepared.sources.buggy.join("src/lib.rs")).unwrap();
    let removed: String = lib.lines().map(|l| format!("-{l}\n")).collect();
    // What `git diff` prints when src/lib.rs becomes a link: the file goes, the link comes.
    let patch = format!(
        "diff --git a/src/lib.rs b/src/lib.rs\ndeleted file mode 100644\n--- a/src/lib.rs\n+++ /dev/null\n@@ -1,{n} +0,0 @@\n{removed}\
diff --git a/src/lib.rs b/src/lib.rs\nnew file mode 120000\n--- /dev/null\n+++ b/src/lib.rs\n@@ -0,0 +1 @@\n+{target}\n\\ No newline at end of file\n",
        n = lib.lines().count(),
        target = victim.display()
    );
    let g = f.repair(&patch).await;
    assert_eq!(g.outcome, Outcome::PatchError, "{g:#?}");
    assert!(
        g.reason.contains("src/lib.rs: creates a symbolic link"),
        "{}",
        g.reason
    );
    assert_eq!(fs::read(&victim).unwrap(), before);
}

#[tokio::test]
async fn mode_changes_are_refused_and_files_outside_src_dropped() {
    let f = fixture().await;
    let mode = "diff --git a/src/lib.rs b/src/lib.rs\nold mode 100644\nnew mode 100755\n";
    let g = f.repair(mode).await;
    assert_eq!(g.outcome, Outcome::PatchError, "{g:#?}");
    assert!(g.reason.contains("changes a file's mode"), "{}", g.reason);

    let added = "diff --git a/tests/extra.rs b/tests/extra.rs\nnew file mode 100644\n--- /dev/null\n+++ b/tests/extra.rs\n@@ -0,0 +1 @@\n+#[test] fn extra() {}\n";
    let g = f.repair(&format!("{}{added}", f.gold())).await;
    assert_eq!(g.outcome, Outcome::Pass, "{g:#?}");
    let r = g.repair.unwrap();
    assert_eq!(r.applied_files, ["src/lib.rs"]);
    assert!(
        r.dropped
            .iter()
            .any(|d| d.starts_with("tests/extra.rs: not a source file")),
        "{:?}",
        r.dropped
    );
}

#[tokio::test]
async fn sandboxed_code_can_change_neither_shared_outputs_nor_host_files() {
    let f = fixture().await;
    let (_keep, victim, before) = host_victim();
    let bench = Workbench::new(&f.prepared, &f.data, &f.toolchain).unwrap();
    // The attack that once poisoned the template, from inside the sandbox; then a link planted
    // where the grader will next edit a file.
    let script = format!(
        "f=$(ls target/debug/deps/libtoy_dep-*.rlib | head -n 1)\n\
         test -L \"$f\" || exit 10\n\
         chmod u+w \"$f\" 2>/dev/null && exit 11\n\
         printf poison >> \"$f\" 2>/dev/null && exit 12\n\
         touch -d @0 \"$f\" 2>/dev/null && exit 13\n\
         ln -sf {} src/lib.rs || exit 14\n",
        victim.display()
    );
    let out = bench
        .sandbox()
        .exec(&ExecRequest::bash(script, Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{}", out.stderr.text);
    f.prepared.check(TemplateKind::Grading).unwrap();

    // The grader's next host-side edit of that file refuses the link.
    let reference = fs::read_to_string(f.prepared.sources.fixed.join("src/lib.rs")).unwrap();
    let err = bench
        .take_tests_from("src/lib.rs", &reference)
        .unwrap_err()
        .to_string();
    assert!(err.contains("symbolic link"), "{err}");
    assert_eq!(fs::read(&victim).unwrap(), before);
}

#[tokio::test]
async fn a_damaged_template_is_no_verdict_until_prepare_rebuilds_it() {
    let dir = tempfile::tempdir().unwrap();
    let f = prepared_fixture(dir.path(), "toy-poison").await;
    let gold = f.gold();
    let before = GradeEnvironment::of(&f.prepared, &f.toolchain).unwrap();

    // The poisoning, from the host: the shared library rewritten in place, same size, with its
    // modification time put back.
    let rlib = dependency_rlib(&f.prepared.stamp.grade.workspace);
    let name = rlib.file_name().unwrap().to_string_lossy().into_owned();
    let meta = fs::metadata(&rlib).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    fs::write(&rlib, vec![0u8; meta.len() as usize]).unwrap();
    fs::File::options()
        .write(true)
        .open(&rlib)
        .unwrap()
        .set_modified(meta.modified().unwrap())
        .unwrap();

    let g = f.repair(&gold).await;
    assert_eq!(g.outcome, Outcome::InfraError, "{g:#?}");
    assert_eq!(g.score, None);
    assert!(g.reason.contains(&name), "{}", g.reason);
    assert!(g.reason.contains("grading template"), "{}", g.reason);

    let again = prepare(&f.case, &f.data, &f.toolchain, &Default::default())
        .await
        .unwrap();
    assert!(!again.reused);
    let found = again.repaired.as_deref().unwrap_or_default();
    assert!(found.contains(&name), "{found}");

    let repaired = Prepared {
        prepared: again,
        ..f
    };
    let g = repaired.repair(&gold).await;
    assert_eq!(g.outcome, Outcome::Pass, "{g:#?}");
    // The rebuilt template is another environment: no grade made on the old one is served.
    let after = GradeEnvironment::of(&repaired.prepared, &repaired.toolchain).unwrap();
    assert_ne!(before.template, after.template);
    let opts = GradingSettings::default();
    assert_ne!(
        cache_key(&repaired.case, Track::Repair, &gold, &opts, &before).unwrap(),
        cache_key(&repaired.case, Track::Repair, &gold, &opts, &after).unwrap()
    );
}

#[tokio::test]
async fn a_cached_build_error_is_not_served() {
    let f = fixture().await;
    let opts = GradingSettings::default();
    // A fix that differs from every other test's patch, so no other grade fills its entry.
    let patch = format!(
        "{}diff --git a/src/cache_probe.rs b/src/cache_probe.rs\nnew file mode 100644\n--- /dev/null\n+++ b/src/cache_probe.rs\n@@ -0,0 +1 @@\n+// unused\n",
        f.gold()
    );
    let submission = Submission::Patch(patch.clone());
    let ctx = f.ctx();
    let grade = |use_cache| {
        grade_submission(
            &ctx,
            "t/repair/symptom/2",
            Track::Repair,
            &submission,
            &opts,
            use_cache,
        )
    };
    let fresh = grade(false).await.unwrap();
    assert_eq!(fresh.outcome, Outcome::Pass, "{fresh:#?}");

    let env = GradeEnvironment::of(&f.prepared, &f.toolchain).unwrap();
    let key = cache_key(&f.case, Track::Repair, &patch, &opts, &env).unwrap();
    let entry = cache_dir(&f.data).join(format!("{key}.json"));
    let plant = |outcome, reason: &str| {
        let mut g = fresh.clone();
        g.outcome = outcome;
        g.reason = reason.into();
        faultline_schema::io::write_json_atomic(&entry, &g).unwrap();
    };

    // A build error in the cache (made, say, on a template poisoned at the time) is graded anew.
    plant(Outcome::BuildError, "planted build error");
    let g = grade(true).await.unwrap();
    assert_eq!(g.outcome, Outcome::Pass, "{g:#?}");
    let stored: Grade = faultline_schema::io::read_json(&entry, "cached grade").unwrap();
    assert_eq!(stored.outcome, Outcome::Pass);

    // A verdict about the submission is served from the cache.
    plant(Outcome::FailOracle, "planted verdict");
    let g = grade(true).await.unwrap();
    assert_eq!(g.reason, "planted verdict");
}

/// The sandbox an agent gets (a copy of the agent template, whose shared build outputs are links
/// to the object store through a read-only mount): code there tries to overwrite, truncate,
/// chmod and back-date a stored object, then rebuilds the shared dependency, which must write a
/// new file of its own. The stored object keeps its bytes and a later grade builds with them.
#[tokio::test]
async fn agent_code_cannot_change_a_stored_object_and_a_rebuild_writes_a_new_file() {
    let dir = tempfile::tempdir().unwrap();
    let f = prepared_fixture(dir.path(), "toy-objects").await;
    let stored = dependency_rlib(&f.prepared.stamp.agent.workspace);
    let before = fs::read(&stored).unwrap();
    let objects = f.data.objects().usage().unwrap();
    assert!(objects.count > 0, "the dependency's outputs are stored");

    let bench = Workbench::without_oracle(&f.prepared, &f.data, &f.toolchain).unwrap();
    let script = "f=$(ls target/debug/deps/libtoy_dep-*.rlib | head -n 1)\n\
         test -L \"$f\" || exit 10\n\
         o=$(readlink \"$f\")\n\
         printf poison >> \"$o\" 2>/dev/null && exit 11\n\
         : > \"$o\" 2>/dev/null && exit 12\n\
         chmod 777 \"$o\" 2>/dev/null && exit 13\n\
         touch -d @0 \"$o\" 2>/dev/null && exit 14\n\
         touch dep/src/lib.rs\n\
         cargo build --offline 2>&1 || exit 15\n\
         test -L \"$f\" && exit 16\n\
         test -f \"$f\" || exit 17\n";
    let out = bench
        .sandbox()
        .exec(&ExecRequest::bash(script, Duration::from_secs(300)))
        .await
        .unwrap();
    assert_eq!(
        out.exit_code,
        Some(0),
        "{}{}",
        out.stdout.text,
        out.stderr.text
    );
    assert_eq!(fs::read(&stored).unwrap(), before);
    f.prepared.check(TemplateKind::Agent).unwrap();
    f.prepared.check(TemplateKind::Grading).unwrap();
    let g = f.repair(&f.gold()).await;
    assert_eq!(g.outcome, Outcome::Pass, "{g:#?}");
}

/// Every use of a template (a trial, a grade, a generator's build) works in a copy whose files,
/// besides the links to shared outputs, are its own and writable. cargo rewrites fingerprints and
/// build-script timestamps in place; a copy that kept identical stored files linked to each other
/// and read-only (as `cp -a` does) failed a generator's rebuild of a dependency under the
/// sandbox's own identity.
#[tokio::test]
async fn a_copy_of_a_template_holds_writable_files_of_its_own_besides_the_shared_links() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let f = fixture().await;
    for kind in [TemplateKind::Agent, TemplateKind::Grading] {
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join("workspace");
        f.prepared.copy_workspace(kind, &copy).unwrap();
        let mut links = 0;
        for entry in walkdir::WalkDir::new(&copy) {
            let entry = entry.unwrap();
            let meta = entry.path().symlink_metadata().unwrap();
            if meta.file_type().is_symlink() {
                links += 1;
            } else if meta.is_file() {
                let path = entry.path().display();
                assert_eq!(meta.nlink(), 1, "{path} shares its inode");
                assert_ne!(meta.permissions().mode() & 0o200, 0, "{path} is read-only");
            }
        }
        assert!(links > 0, "the {kind:?} copy links no shared output");
    }
}

/// A stored object damaged from the host, in the store itself, keeping its size and time: every
/// case linking it is refused until `prepare` stores a good copy again.
#[tokio::test]
async fn a_tampered_stored_object_is_found_and_replaced_by_prepare() {
    let dir = tempfile::tempdir().unwrap();
    let f = prepared_fixture(dir.path(), "toy-tamper").await;
    let rlib = dependency_rlib(&f.prepared.stamp.agent.workspace);
    let meta = fs::metadata(&rlib).unwrap();
    let object = walkdir::WalkDir::new(f.data.objects().dir())
        .into_iter()
        .map(|e| e.unwrap())
        .find(|e| {
            use std::os::unix::fs::MetadataExt;
            e.file_type().is_file() && e.metadata().unwrap().ino() == meta.ino()
        })
        .expect("the dependency's library is a stored object")
        .into_path();
    std::thread::sleep(Duration::from_millis(20));
    fs::write(&object, vec![0u8; meta.len() as usize]).unwrap();
    fs::File::options()
        .write(true)
        .open(&object)
        .unwrap()
        .set_modified(meta.modified().unwrap())
        .unwrap();

    let err = f
        .prepared
        .check(TemplateKind::Agent)
        .unwrap_err()
        .to_string();
    assert!(err.contains("stored object is damaged"), "{err}");
    let again = prepare(&f.case, &f.data, &f.toolchain, &Default::default())
        .await
        .unwrap();
    assert!(!again.reused);
    again.check(TemplateKind::Agent).unwrap();
    let rebuilt = dependency_rlib(&again.stamp.agent.workspace);
    assert_ne!(fs::read(&rebuilt).unwrap(), vec![0u8; meta.len() as usize]);
}
