//! Reading libtest's machine-readable output (`--format json`), and judging a run from it and
//! the exit status, never from the human-readable text.
//!
//! Code under test runs in the same process as libtest and can print whatever it likes, even
//! lines shaped like libtest's events. The reader therefore refuses contradictions: a test that
//! reports twice, a result without a start, counts that do not add up. Such a run is
//! [`RunVerdict::Tampered`].

/// A run's verdict is recorded in grades and validation reports, so its type is the schema's.
pub use faultline_schema::grade::RunVerdict;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The result of one test.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TestResult {
    /// Passed.
    Ok,
    /// Failed; what it printed.
    Failed {
        /// Captured output of the failing test.
        stdout: String,
    },
    /// Ignored.
    Ignored,
}

/// libtest's closing summary.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct SuiteSummary {
    /// Tests that passed.
    pub passed: u32,
    /// Tests that failed.
    pub failed: u32,
    /// Tests ignored.
    pub ignored: u32,
    /// Tests left out by the filter.
    pub filtered_out: u32,
    /// Seconds libtest measured for the whole suite.
    pub exec_time: Option<f64>,
}

/// Everything read from one run of a test binary.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TestReport {
    /// Each test's result, by full name.
    pub tests: BTreeMap<String, TestResult>,
    /// Tests that started and never reported (a crash or a hang mid-test).
    pub unfinished: Vec<String>,
    /// The summary, if the suite finished.
    pub suite: Option<SuiteSummary>,
    /// Contradictions in the event stream (evidence of forged output).
    pub contradictions: Vec<String>,
}

#[derive(Deserialize)]
struct Event {
    #[serde(rename = "type")]
    kind: String,
    event: String,
    name: Option<String>,
    stdout: Option<String>,
    passed: Option<u32>,
    failed: Option<u32>,
    ignored: Option<u32>,
    filtered_out: Option<u32>,
    exec_time: Option<f64>,
}

/// Parses libtest's JSON event stream; lines that are not events are ignored.
pub fn parse(stdout: &str) -> TestReport {
    let mut report = TestReport::default();
    let mut started: Vec<String> = Vec::new();
    let mut suites_started = 0;
    for line in stdout.lines() {
        let Ok(ev) = serde_json::from_str::<Event>(line.trim()) else {
            continue;
        };
        match (ev.kind.as_str(), ev.event.as_str()) {
            ("suite", "started") => {
                suites_started += 1;
                if suites_started > 1 {
                    report.contradictions.push("the suite started twice".into());
                }
            }
            ("suite", "ok" | "failed") => {
                if report.suite.is_some() {
                    report
                        .contradictions
                        .push("the suite finished twice".into());
                }
                report.suite = Some(SuiteSummary {
                    passed: ev.passed.unwrap_or(0),
                    failed: ev.failed.unwrap_or(0),
                    ignored: ev.ignored.unwrap_or(0),
                    filtered_out: ev.filtered_out.unwrap_or(0),
                    exec_time: ev.exec_time,
                });
            }
            ("test", "started") => {
                let name = ev.name.unwrap_or_default();
                if started.contains(&name) {
                    report
                        .contradictions
                        .push(format!("`{name}` started twice"));
                }
                started.push(name);
            }
            ("test", outcome @ ("ok" | "failed" | "ignored")) => {
                let name = ev.name.unwrap_or_default();
                let result = match outcome {
                    "ok" => TestResult::Ok,
                    "failed" => TestResult::Failed {
                        stdout: ev.stdout.unwrap_or_default(),
                    },
                    _ => TestResult::Ignored,
                };
                if outcome != "ignored" && !started.contains(&name) {
                    report
                        .contradictions
                        .push(format!("`{name}` reported `{outcome}` without starting"));
                }
                if report.tests.insert(name.clone(), result).is_some() {
                    report
                        .contradictions
                        .push(format!("`{name}` reported twice"));
                }
            }
            _ => {}
        }
    }
    report.unfinished = started
        .into_iter()
        .filter(|n| !report.tests.contains_key(n))
        .collect();
    if let Some(s) = report.suite {
        let ok = report
            .tests
            .values()
            .filter(|r| **r == TestResult::Ok)
            .count() as u32;
        let failed = report
            .tests
            .values()
            .filter(|r| matches!(r, TestResult::Failed { .. }))
            .count() as u32;
        if s.passed != ok || s.failed != failed {
            report.contradictions.push(format!(
                "the summary says {} passed and {} failed, the events say {ok} and {failed}",
                s.passed, s.failed
            ));
        }
    }
    report
}

/// Judges a run from its exit status, whether it timed out, and its events.
pub fn judge(report: &TestReport, exit_code: Option<i32>, timed_out: bool) -> RunVerdict {
    if timed_out {
        return RunVerdict::Timeout;
    }
    if !report.contradictions.is_empty() {
        return RunVerdict::Tampered;
    }
    let any_failed = report
        .tests
        .values()
        .any(|r| matches!(r, TestResult::Failed { .. }));
    match report.suite {
        None => {
            if any_failed {
                RunVerdict::Fail
            } else {
                RunVerdict::Crash
            }
        }
        Some(s) if s.failed > 0 || any_failed => RunVerdict::Fail,
        Some(_) if exit_code != Some(0) => RunVerdict::Crash,
        Some(s) if s.passed == 0 => RunVerdict::NoTests,
        Some(_) if !report.unfinished.is_empty() => RunVerdict::Crash,
        Some(_) => RunVerdict::Pass,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSING: &str = r#"{ "type": "suite", "event": "started", "test_count": 2 }
{ "type": "test", "event": "started", "name": "a" }
{ "type": "test", "event": "started", "name": "b" }
{ "type": "test", "name": "a", "event": "ok" }
{ "type": "test", "name": "b", "event": "ok" }
{ "type": "suite", "event": "ok", "passed": 2, "failed": 0, "ignored": 0, "measured": 0, "filtered_out": 3, "exec_time": 0.01 }
"#;

    #[test]
    fn a_clean_pass() {
        let r = parse(PASSING);
        assert_eq!(r.tests.len(), 2);
        assert_eq!(r.suite.unwrap().filtered_out, 3);
        assert_eq!(judge(&r, Some(0), false), RunVerdict::Pass);
        assert_eq!(judge(&r, Some(101), false), RunVerdict::Crash);
        assert_eq!(judge(&r, Some(0), true), RunVerdict::Timeout);
    }

    #[test]
    fn a_failure_keeps_its_output() {
        let text = PASSING
            .replace(
                r#""name": "b", "event": "ok" }"#,
                r#""name": "b", "event": "failed", "stdout": "boom" }"#,
            )
            .replace(r#""passed": 2, "failed": 0"#, r#""passed": 1, "failed": 1"#);
        let r = parse(&text);
        assert_eq!(
            r.tests["b"],
            TestResult::Failed {
                stdout: "boom".into()
            }
        );
        assert_eq!(judge(&r, Some(101), false), RunVerdict::Fail);
    }

    #[test]
    fn printed_text_is_not_a_result() {
        let r = parse("test result: ok. 5 passed; 0 failed\ntest a ... ok\n");
        assert_eq!(judge(&r, Some(0), false), RunVerdict::Crash);
    }

    #[test]
    fn forged_events_are_caught() {
        let forged =
            format!("{PASSING}{{ \"type\": \"test\", \"name\": \"a\", \"event\": \"ok\" }}\n");
        assert_eq!(judge(&parse(&forged), Some(0), false), RunVerdict::Tampered);
        let never_started = PASSING.replace(
            "{ \"type\": \"test\", \"event\": \"started\", \"name\": \"b\" }\n",
            "",
        );
        assert_eq!(
            judge(&parse(&never_started), Some(0), false),
            RunVerdict::Tampered
        );
        let bad_count = PASSING.replace("\"passed\": 2", "\"passed\": 3");
        assert_eq!(
            judge(&parse(&bad_count), Some(0), false),
            RunVerdict::Tampered
        );
    }

    #[test]
    fn a_crash_mid_test_is_a_crash() {
        let text: String = PASSING.lines().take(4).map(|l| format!("{l}\n")).collect();
        let r = parse(&text);
        assert_eq!(r.unfinished, vec!["b".to_string()]);
        assert_eq!(judge(&r, None, false), RunVerdict::Crash);
    }

    #[test]
    fn nothing_selected_checks_nothing() {
        let r = parse(
            r#"{ "type": "suite", "event": "ok", "passed": 0, "failed": 0, "ignored": 0, "measured": 0, "filtered_out": 9 }"#,
        );
        assert_eq!(judge(&r, Some(0), false), RunVerdict::NoTests);
    }
}
