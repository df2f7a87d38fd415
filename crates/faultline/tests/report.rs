//! Reports of a real baseline run on the fixture case: the HTML page in headless Chromium (in
//! `needs_chromium`), the Markdown and JSON renderings, and an archive packed, unpacked, graded
//! again and reported with the same tables.

mod common;

use common::{faultline, records};
use faultline_schema::Report;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// Runs a command and checks that it succeeded, showing its standard error otherwise.
fn succeed(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn run_baselines(data: &Path, run: &Path, tracks: &str) {
    succeed(
        faultline(data)
            .args(["run", "toy-double-merge", "--tracks", tracks, "--out"])
            .arg(run)
            .stdout(Stdio::null()),
    );
}

fn report_json(path: &Path) -> Report {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The HTML report, rendered in headless Chromium.
mod needs_chromium {
    use super::*;
    use std::path::PathBuf;

    /// Headless Chromium; `.ci/run` installs it, so its absence fails the test, saying so.
    fn chromium() -> PathBuf {
        let found = std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .flat_map(|d| ["chromium", "chromium-browser"].map(|n| d.join(n)))
                .find(|p| p.is_file())
        });
        found.unwrap_or_else(|| {
            panic!(
                "this test renders the HTML report in headless Chromium, which is not installed: \
                 `apt-get install chromium` (.ci/run installs it); \
                 `cargo test -- --skip needs_chromium::` leaves it out"
            )
        })
    }

    fn headless(page: &Path, hash: &str, extra: &[&str]) -> Output {
        Command::new(chromium())
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--enable-logging=stderr",
                "--v=0",
            ])
            .args(extra)
            .arg(format!("file://{}#{hash}", page.display()))
            .output()
            .expect("chromium runs")
    }

    #[test]
    fn the_html_report_of_a_baseline_run_renders_in_chromium() {
        let tmp = tempfile::tempdir().unwrap();
        let (data, run) = (tmp.path().join("data"), tmp.path().join("run"));
        run_baselines(&data, &run, "diagnose,repair,reproduce");
        assert!(
            run.join("report.html").is_file(),
            "faultline run writes report.html"
        );
        assert!(run.join("report.json").is_file());

        // Baselines take no steps: give one trial a trajectory of two steps to walk through.
        let stepped = run.join("trials/null/toy-double-merge/repair/curated/1/trajectory.json");
        let mut trajectory: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&stepped).unwrap()).unwrap();
        let step = |index: u32, command: &str, output: &str| {
            serde_json::json!({
                "index": index, "started_secs": 0.0, "model": null, "thought": "look around",
                "action": {"command": command, "kind": "read", "source": "tool_call", "exit_code": 0,
                           "timed_out": false, "output": output, "elided_chars": 0, "duration_secs": 0.1},
                "format_error": null, "diff": null, "diff_sha256": ""
            })
        };
        trajectory["steps"] = serde_json::json!([
            step(1, "ls src", "lib.rs"),
            step(2, "cat src/lib.rs", "<b>pub struct GCounter</b>"),
        ]);
        std::fs::write(&stepped, trajectory.to_string()).unwrap();

        let (html, md, json) = (
            tmp.path().join("r.html"),
            tmp.path().join("r.md"),
            tmp.path().join("r.json"),
        );
        let out = succeed(
            faultline(&data)
                .arg("report")
                .arg(&run)
                .arg("--html")
                .arg(&html)
                .arg("--markdown")
                .arg(&md)
                .arg("--json")
                .arg(&json),
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("gold"));
        let report = report_json(&json);
        assert_eq!(report.groups.len(), 18);
        let gold = report
            .groups
            .iter()
            .find(|g| g.agent == "gold" && g.track.as_str() == "repair")
            .unwrap();
        assert_eq!(gold.score.as_ref().unwrap().value, 1.0);
        let markdown = std::fs::read_to_string(&md).unwrap();
        assert!(markdown.contains("## Leaderboard"));
        // Diagnosis rows rank by the budgeted score and show DistDebug's block coverage beside it.
        assert!(markdown.contains("| block cov. |"), "{markdown}");
        let gold_diagnosis = report
            .groups
            .iter()
            .find(|g| g.agent == "gold" && g.track.as_str() == "diagnose")
            .unwrap();
        assert_eq!(gold_diagnosis.score.as_ref().unwrap().value, 1.0);
        assert_eq!(gold_diagnosis.block_coverage, Some(1.0));

        // The gold diagnosis names exactly the labeled block: the viewer marks its lines as both.
        let trial = "gold/toy-double-merge/diagnose/symptom/1";
        let dom = headless(&html, &format!("trial={trial}"), &["--dump-dom"]);
        assert!(dom.status.success());
        let dom_text = String::from_utf8_lossy(&dom.stdout);
        let html_tag = dom_text.find("<html").expect("an html element");
        let root = &dom_text[html_tag..html_tag + dom_text[html_tag..].find('>').unwrap()];
        assert!(!root.contains("data-js-errors"), "script errors: {root}");
        assert!(
            root.contains("data-ready=\"1\""),
            "the viewer did not start: {root}"
        );
        let console = String::from_utf8_lossy(&dom.stderr);
        assert!(
            !console.contains("Uncaught") && !console.contains("SyntaxError"),
            "{console}"
        );
        assert!(dom_text.contains("<table class=\"leaderboard\">"));
        // Baselines alone estimate no context effect, and the result section says so first.
        let result = dom_text.find("id=\"result\"").expect("a result section");
        assert!(result < dom_text.find("id=\"leaderboard\"").unwrap());
        assert!(
            dom_text[result..].contains("repair, curated: no effect is estimated"),
            "{}",
            &dom_text[result..result + 600.min(dom_text.len() - result)]
        );
        for id in [
            "forest-diagnose-symptom",
            "forest-repair-curated",
            "paired-diagnose-curated-0",
            "pareto-cost-reproduce-symptom",
            "pareto-tokens-repair-curated",
            "actions-diagnose",
            "heatmap-repair",
        ] {
            assert!(dom_text.contains(&format!("id=\"{id}\"")), "no plot {id}");
        }
        // The providers table: the curated bundle shown for the one case, nothing refused.
        let providers = &dom_text[dom_text
            .find("id=\"providers\"")
            .expect("a providers table")..];
        let providers = &providers[..providers.find("</table>").unwrap()];
        assert!(
            providers.contains("<td>curated</td><td>curated-1</td><td>1</td><td>0</td>"),
            "{providers}"
        );
        let summary = &dom_text[dom_text.find("id=\"trial-summary\"").unwrap()..];
        assert!(summary[..400].contains(trial), "{}", &summary[..400]);
        let source = &dom_text[dom_text.find("id=\"source-view\"").unwrap()..];
        assert!(
            source.contains("<tr class=\"both\">"),
            "no overlay in {}",
            &source[..2000.min(source.len())]
        );
        assert!(source.contains("GCounter::merge"));

        // The second step of the stepped trial, its observation shown as text.
        let dom = headless(
            &html,
            "trial=null/toy-double-merge/repair/curated/1&step=2",
            &["--dump-dom"],
        );
        let dom_text = String::from_utf8_lossy(&dom.stdout);
        let view = &dom_text[dom_text.find("id=\"step-view\"").unwrap()..];
        let view = &view[..view.find("</div>").unwrap()];
        assert!(view.contains("cat src/lib.rs"), "{view}");
        assert!(
            view.contains("&lt;b&gt;pub struct GCounter&lt;/b&gt;"),
            "{view}"
        );
        assert!(dom_text.contains("step 2 of 2"));

        let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report-screenshot.png");
        let _ = std::fs::remove_file(&shot);
        let out = headless(
            &html,
            "",
            &[
                "--window-size=1280,2600",
                &format!("--screenshot={}", shot.display()),
            ],
        );
        assert!(out.status.success());
        let png = std::fs::read(&shot).expect("a screenshot");
        assert!(png.starts_with(b"\x89PNG") && png.len() > 20_000);
        println!("screenshot: {}", shot.display());
    }
}

#[test]
fn a_packed_run_is_graded_again_and_reproduces_its_tables() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, run) = (tmp.path().join("data"), tmp.path().join("run"));
    run_baselines(&data, &run, "diagnose,repair");
    let archive = tmp.path().join("shared.tar.gz");
    succeed(
        faultline(&data)
            .arg("pack")
            .arg(&run)
            .arg("-o")
            .arg(&archive),
    );

    // Someone else unpacks and reports it: every submission is graded again.
    let other = tmp.path().join("other-data");
    let json = tmp.path().join("unpacked.json");
    succeed(
        faultline(&other)
            .arg("report")
            .arg(&archive)
            .arg("--json")
            .arg(&json),
    );
    let unpacked = tmp.path().join("shared");
    assert_eq!(records(&unpacked).len(), records(&run).len());
    let again = report_json(&json);
    let check = again.regrade.as_ref().expect("a re-grading check");
    assert_eq!(check.trials, 14);
    assert_eq!(check.identical, 14, "{:?}", check.differences);
    let original = report_json(&run.join("report.json"));
    assert_eq!(
        serde_json::to_value(&again.groups).unwrap(),
        serde_json::to_value(&original.groups).unwrap(),
        "the tables of the archive differ from the run's"
    );
    // Reporting the unpacked copy again reuses its check.
    let out = succeed(faultline(&other).arg("report").arg(&archive));
    assert!(String::from_utf8_lossy(&out.stdout).contains("14 identical"));

    // A file changed after packing is refused.
    let tampered = tmp.path().join("tampered");
    std::fs::create_dir(&tampered).unwrap();
    let ok = Command::new("tar")
        .arg("xzf")
        .arg(&archive)
        .arg("-C")
        .arg(&tampered)
        .status()
        .unwrap();
    assert!(ok.success());
    let grade = tampered.join("trials/null/toy-double-merge/repair/symptom/1/grade.json");
    let text = std::fs::read_to_string(&grade).unwrap();
    std::fs::write(&grade, text.replace("fail_oracle", "pass")).unwrap();
    let out = faultline(&other)
        .arg("report")
        .arg(&tampered)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("does not match pack.json"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn malformed_input_is_an_error_message() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let fails_with = |args: &[&Path], needle: &str| {
        let mut c = faultline(&data);
        for a in args {
            c.arg(a);
        }
        let out = c.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(needle), "expected {needle:?} in {err}");
        assert!(!err.contains("panicked"), "{err}");
    };
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    fails_with(&[Path::new("report"), &empty], "not a run directory");
    fails_with(&[Path::new("pack"), &empty], "not a run directory");
    let garbage = tmp.path().join("garbage.tar.gz");
    std::fs::write(&garbage, b"this is not gzip").unwrap();
    fails_with(&[Path::new("report"), &garbage], "not a faultline archive");
    assert!(
        !tmp.path().join("garbage").exists(),
        "a failed unpack leaves nothing"
    );
    std::fs::write(empty.join("results.jsonl"), "{not json}\n").unwrap();
    fails_with(&[Path::new("report"), &empty], "holds no results");
}
