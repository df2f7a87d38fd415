//! Errors as the command prints them: every cause once, however many layers report it.

use std::path::Path;
use std::process::Command;

fn merge_error(shard: &Path, out: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_faultline"))
        .arg("merge")
        .arg(shard)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap();
    assert!(!out.status.success());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn an_unreadable_lock_names_the_operating_system_error_once() {
    let tmp = tempfile::tempdir().unwrap();
    let shard = tmp.path().join("shard");
    // A directory where the lock should be: it exists, but reading it fails.
    std::fs::create_dir_all(shard.join("lock.json")).unwrap();
    let err = merge_error(&shard, &tmp.path().join("merged"));
    assert!(
        err.contains("cannot read") && err.contains("lock.json"),
        "{err}"
    );
    assert_eq!(err.matches("(os error 21)").count(), 1, "{err}");
}

#[test]
fn a_missing_lock_says_the_directory_is_not_a_run() {
    let tmp = tempfile::tempdir().unwrap();
    let shard = tmp.path().join("shard");
    std::fs::create_dir_all(&shard).unwrap();
    let err = merge_error(&shard, &tmp.path().join("merged"));
    assert!(err.contains("has no lock.json"), "{err}");
    assert!(!err.contains("os error"), "{err}");
}

/// Copies `from` to `to`, files and directories.
fn copy_tree(from: &Path, to: &Path) {
    for entry in walkdir::WalkDir::new(from) {
        let entry = entry.unwrap();
        let target = to.join(entry.path().strip_prefix(from).unwrap());
        if entry.file_type().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A copy of the fixture corpus (with the fixture crate its path sources point at) to change.
fn fixture_copy(into: &Path) -> std::path::PathBuf {
    let fixtures = faultline_testkit::fixture_corpus().join("..");
    copy_tree(&fixtures.join("corpus"), &into.join("corpus"));
    copy_tree(&fixtures.join("toy-tree"), &into.join("toy-tree"));
    into.join("corpus")
}

/// Writes the toy case down a second time in `corpus`, under the id `id`.
fn copy_toy_case_as(corpus: &Path, id: &str) {
    let again = corpus.join("toy").join(id);
    copy_tree(&corpus.join("toy/toy-double-merge"), &again);
    let toml = std::fs::read_to_string(again.join("case.toml")).unwrap();
    std::fs::write(
        again.join("case.toml"),
        toml.replace("id = \"toy-double-merge\"", &format!("id = \"{id}\"")),
    )
    .unwrap();
}

fn faultline_on(corpus: &Path, data: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_faultline"))
        .arg("--corpus")
        .arg(corpus)
        .env("FAULTLINE_DATA", data)
        .args(args)
        .output()
        .unwrap()
}

/// A curator's commands fail when a case directory does not load, after doing their work on
/// the cases that did; the broken file is named.
#[test]
fn a_case_that_does_not_load_fails_listing_and_validation() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = fixture_copy(tmp.path());
    let broken = corpus.join("toy/toy-broken");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::write(
        broken.join("case.toml"),
        "schema_version = 1\nid = \"toy-broken\"\n[source\n",
    )
    .unwrap();
    let data = tmp.path().join("data");
    let list = faultline_on(&corpus, &data, &["cases", "list"]);
    let err = String::from_utf8_lossy(&list.stderr);
    assert!(!list.status.success(), "{err}");
    assert!(err.contains("toy-broken"), "{err}");
    assert!(err.contains("1 case directory"), "{err}");
    assert!(String::from_utf8_lossy(&list.stdout).contains("toy-double-merge"));

    let validate = faultline_on(
        &corpus,
        &data,
        &["cases", "validate", "--all", "--static-only"],
    );
    let err = String::from_utf8_lossy(&validate.stderr);
    assert!(!validate.status.success(), "{err}");
    assert!(err.contains("1 of 1 cases pass the static checks"), "{err}");
    assert!(err.contains("did not load"), "{err}");
}

/// The same bug written down twice (same versions, overlapping blocks) fails both cases.
#[test]
fn a_duplicate_case_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = fixture_copy(tmp.path());
    copy_toy_case_as(&corpus, "toy-double-merge-again");
    let out = faultline_on(
        &corpus,
        &tmp.path().join("data"),
        &["cases", "validate", "--all", "--static-only"],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{text}");
    for (case, other) in [
        ("toy-double-merge", "toy-double-merge-again"),
        ("toy-double-merge-again", "toy-double-merge"),
    ] {
        assert!(
            text.contains(&format!("{case}: the same bug as `{other}`")),
            "{text}"
        );
    }
}

/// A symptom that quotes a line of the fix is a leak, even where the buggy source has the
/// same line in another place.
#[test]
fn a_fix_line_quoted_in_the_symptom_is_a_leak_even_if_the_source_has_it_elsewhere() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = fixture_copy(tmp.path());
    let elsewhere = "\n/// Keeps the larger of two counts.\npub fn keep_larger(mine: &mut u64, count: &u64) {\n    *mine = (*mine).max(*count);\n}\n";
    for version in ["buggy", "fixed"] {
        let lib = tmp.path().join(format!("toy-tree/{version}/src/lib.rs"));
        let text = std::fs::read_to_string(&lib).unwrap();
        std::fs::write(&lib, format!("{text}{elsewhere}")).unwrap();
    }
    let symptom = corpus.join("toy/toy-double-merge/symptom.md");
    let text = std::fs::read_to_string(&symptom).unwrap();
    let data = tmp.path().join("data");
    let args = ["cases", "validate", "toy-double-merge", "--static-only"];
    let clean = faultline_on(&corpus, &data, &args);
    assert!(
        clean.status.success(),
        "{}",
        String::from_utf8_lossy(&clean.stdout)
    );
    std::fs::write(
        &symptom,
        format!("{text}\nMaybe merge should do `*mine = (*mine).max(*count);` instead?\n"),
    )
    .unwrap();
    let out = faultline_on(&corpus, &data, &args);
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{report}");
    assert!(report.contains("FixLine"), "{report}");
}

/// A case's scenario selects it (`--multi-node`, `--across`), and a malformed one is refused
/// when the case loads, naming the field.
#[test]
fn cases_are_chosen_by_their_scenario_and_a_malformed_one_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = fixture_copy(tmp.path());
    let data = tmp.path().join("data");
    let listed = |args: &[&str]| {
        let out = faultline_on(&corpus, &data, &[&["cases", "list"], args].concat());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let multi = listed(&["--multi-node"]);
    assert!(multi.contains("toy-double-merge"), "{multi}");
    assert!(
        multi.contains("2: message-order, concurrent-edits"),
        "{multi}"
    );
    assert!(listed(&["--across", "concurrent-edits"]).contains("toy-double-merge"));
    assert!(!listed(&["--across", "restart"]).contains("toy-double-merge"));

    let unknown = faultline_on(&corpus, &data, &["cases", "list", "--across", "reorder"]);
    let err = String::from_utf8_lossy(&unknown.stderr);
    assert!(
        !unknown.status.success() && err.contains("message-order"),
        "{err}"
    );

    let toml = corpus.join("toy/toy-double-merge/case.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(&toml, text.replace("nodes = 2", "nodes = 0")).unwrap();
    let out = faultline_on(&corpus, &data, &["cases", "list"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("scenario.nodes must be at least 1"), "{err}");
}

/// A case that declares a program the machine lacks is refused before anything is built, with
/// the package that provides it.
#[test]
fn a_missing_system_requirement_is_named_before_the_build() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = fixture_copy(tmp.path());
    let toml = corpus.join("toy/toy-double-merge/case.toml");
    let mut text = std::fs::read_to_string(&toml).unwrap();
    text.push_str(
        "\n[[requires]]\ncommand = \"faultline-no-such-tool\"\ndebian = \"no-such-package\"\n",
    );
    std::fs::write(&toml, text).unwrap();
    let data = tmp.path().join("data");
    let out = faultline_on(&corpus, &data, &["prepare", "toy-double-merge"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("`faultline-no-such-tool` (Debian: apt-get install -y no-such-package)"),
        "{err}"
    );
    // Refused before any build: no workspace was made.
    let workspaces = data.join("workspaces");
    let built = std::fs::read_dir(&workspaces)
        .map(|d| {
            d.filter_map(Result::ok)
                .any(|e| e.path().join("agent").exists())
        })
        .unwrap_or(false);
    assert!(!built, "a workspace was built in {}", workspaces.display());
}

/// A validation report made elsewhere merges into the corpus report: its rows are taken (or
/// only those named), and a row for a case the corpus lacks, or a named case with no row, is
/// refused without writing anything.
#[test]
fn validation_reports_from_elsewhere_merge_into_the_corpus_report() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = fixture_copy(tmp.path());
    let data = tmp.path().join("data");
    let elsewhere = tmp.path().join("elsewhere/VALIDATION.md");
    std::fs::create_dir_all(elsewhere.parent().unwrap()).unwrap();
    let validated = faultline_on(
        &corpus,
        &data,
        &[
            "cases",
            "validate",
            "toy-double-merge",
            "-k",
            "1",
            "--markdown",
            elsewhere.to_str().unwrap(),
        ],
    );
    assert!(
        validated.status.success(),
        "{}",
        String::from_utf8_lossy(&validated.stderr)
    );
    let report = elsewhere.with_extension("json");
    let into = tmp.path().join("here/VALIDATION.md");
    std::fs::create_dir_all(into.parent().unwrap()).unwrap();
    let merge = |extra: &[&str]| {
        let mut args = vec![
            "cases",
            "merge-validation",
            "--markdown",
            into.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        args.push(report.to_str().unwrap());
        faultline_on(&corpus, &data, &args)
    };

    let unknown = merge(&["--case", "toy-no-such-case"]);
    let err = String::from_utf8_lossy(&unknown.stderr);
    assert!(
        !unknown.status.success() && err.contains("toy-no-such-case"),
        "{err}"
    );
    assert!(!into.exists(), "a refused merge wrote {}", into.display());

    let merged = merge(&["--case", "toy-double-merge"]);
    assert!(
        merged.status.success(),
        "{}",
        String::from_utf8_lossy(&merged.stderr)
    );
    let md = std::fs::read_to_string(&into).unwrap();
    assert!(md.contains("toy-double-merge"), "{md}");
    assert_eq!(
        std::fs::read(into.with_extension("json")).unwrap(),
        std::fs::read(&report).unwrap(),
        "the merged JSON is the report's one row"
    );

    // The case leaves the corpus: its row is refused.
    std::fs::remove_dir_all(corpus.join("toy/toy-double-merge")).unwrap();
    let gone = merge(&[]);
    let err = String::from_utf8_lossy(&gone.stderr);
    assert!(
        !gone.status.success() && err.contains("not in the corpus"),
        "{err}"
    );
}

/// A validation of the corpus takes hours: one stopped part-way keeps, in its report, every case
/// it finished.
#[test]
fn a_validation_stopped_part_way_keeps_the_cases_it_finished() {
    use std::io::BufRead;
    let tmp = tempfile::tempdir().unwrap();
    let corpus = fixture_copy(tmp.path());
    copy_toy_case_as(&corpus, "toy-double-merge-again");
    let markdown = tmp.path().join("VALIDATION.md");
    let mut child = Command::new(env!("CARGO_BIN_EXE_faultline"))
        .arg("--corpus")
        .arg(&corpus)
        .env("FAULTLINE_DATA", tmp.path().join("data"))
        .args(["cases", "validate", "--all", "-k", "1", "--markdown"])
        .arg(&markdown)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut seen = Vec::new();
    for line in stderr.lines() {
        let line = line.unwrap();
        let second_started = line.starts_with("[2/2] validating");
        seen.push(line);
        if second_started {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        seen.iter().any(|l| l.starts_with("[2/2] validating")),
        "{seen:#?}"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(markdown.with_extension("json")).unwrap())
            .unwrap();
    let rows: Vec<_> = report["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["case_id"].as_str().unwrap())
        .collect();
    assert_eq!(rows, ["toy-double-merge"]);
    let table = std::fs::read_to_string(&markdown).unwrap();
    assert!(table.contains("toy-double-merge"), "{table}");
}
