//! Judging one process from its libtest events and exit status: an honest verdict, or proof
//! that the output was forged (contradictory events, tests it was not asked to run, a canary
//! that did not fail).

use super::wrappers::Role;
use crate::libtest::{RunVerdict, TestReport, TestResult};

/// How one process's events and exit status are judged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judged {
    /// An honest run with this verdict (for a canary: it failed, crashed or hung, as it may).
    Verdict(RunVerdict),
    /// The output was forged; why we know.
    Forged(String),
}

/// Names the events mention other than `expected`.
fn others<'a>(report: &'a TestReport, expected: &[&str]) -> Vec<&'a str> {
    report
        .tests
        .keys()
        .chain(report.unfinished.iter())
        .map(String::as_str)
        .filter(|n| !expected.contains(n))
        .collect()
}

fn list(names: &[&str]) -> String {
    let shown: Vec<String> = names.iter().take(3).map(|n| format!("`{n}`")).collect();
    let more = names.len().saturating_sub(3);
    if more > 0 {
        format!("{} and {more} more", shown.join(", "))
    } else {
        shown.join(", ")
    }
}

/// Judges the process that ran one wrapper alone (`--exact`).
pub fn judge_wrapper(
    report: &TestReport,
    exit_code: Option<i32>,
    timed_out: bool,
    name: &str,
    role: Role,
) -> Judged {
    if let Some(c) = report.contradictions.first() {
        return Judged::Forged(format!(
            "the events of `{name}`'s run contradict themselves: {c}"
        ));
    }
    let foreign = others(report, &[name]);
    if !foreign.is_empty() {
        return Judged::Forged(format!(
            "the run of `{name}` reported tests it was not asked to run ({})",
            list(&foreign)
        ));
    }
    match role {
        Role::Oracle => Judged::Verdict(crate::libtest::judge(report, exit_code, timed_out)),
        Role::Canary => {
            let nothing_ran = report.tests.is_empty()
                && report.unfinished.is_empty()
                && report.suite.is_some_and(|s| s.passed == 0 && s.failed == 0);
            if report.tests.get(name) == Some(&TestResult::Ok) {
                Judged::Forged(format!(
                    "`{name}`, which fails whatever happens, reported `ok`"
                ))
            } else if nothing_ran {
                // Compiled out (a `#[cfg]` of the test it calls): nothing can be judged.
                Judged::Verdict(RunVerdict::NoTests)
            } else if exit_code == Some(0) {
                Judged::Forged(format!(
                    "the run of `{name}`, which fails whatever happens, exited with status 0"
                ))
            } else {
                Judged::Verdict(crate::libtest::judge(report, exit_code, timed_out))
            }
        }
    }
}

/// Judges a regression run, whose `canaries` must all report `failed`: libtest then exits with
/// status 101, so status 0 is forged too. The verdict is the other tests'.
pub fn judge_regression(
    report: &TestReport,
    exit_code: Option<i32>,
    timed_out: bool,
    canaries: &[String],
) -> Judged {
    if let Some(c) = report.contradictions.first() {
        return Judged::Forged(format!("the events contradict themselves: {c}"));
    }
    if let Some(c) = canaries
        .iter()
        .find(|c| report.tests.get(*c) == Some(&TestResult::Ok))
    {
        return Judged::Forged(format!(
            "`{c}`, which fails whatever happens, reported `ok`"
        ));
    }
    if !canaries.is_empty() && exit_code == Some(0) {
        return Judged::Forged(
            "the run exited with status 0 although tests in it fail whatever happens".into(),
        );
    }
    if timed_out {
        return Judged::Verdict(RunVerdict::Timeout);
    }
    if report.suite.is_some()
        && let Some(c) = canaries
            .iter()
            .find(|c| !matches!(report.tests.get(*c), Some(TestResult::Failed { .. })))
    {
        return Judged::Forged(format!(
            "the run finished without `{c}`, which fails whatever happens, reporting `failed`"
        ));
    }
    let mut rest = report.clone();
    for c in canaries {
        rest.tests.remove(c);
        rest.unfinished.retain(|u| u != c);
    }
    if let Some(s) = rest.suite.as_mut() {
        s.failed = s.failed.saturating_sub(canaries.len() as u32);
    }
    let honest_exit = if canaries.is_empty() {
        exit_code
    } else {
        // Every canary failed, so libtest's own status is 101 whatever the other tests did.
        match exit_code {
            Some(101) => Some(0),
            other => other,
        }
    };
    let any_failed = rest
        .tests
        .values()
        .any(|r| matches!(r, TestResult::Failed { .. }));
    Judged::Verdict(if any_failed {
        RunVerdict::Fail
    } else {
        crate::libtest::judge(&rest, honest_exit, false)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::libtest::parse;

    fn events(lines: &[&str]) -> TestReport {
        parse(&lines.join("\n"))
    }

    const STARTED: &str = r#"{ "type": "suite", "event": "started", "test_count": 1 }"#;

    fn started(name: &str) -> String {
        format!(r#"{{ "type": "test", "event": "started", "name": "{name}" }}"#)
    }

    fn result(name: &str, event: &str) -> String {
        format!(r#"{{ "type": "test", "name": "{name}", "event": "{event}" }}"#)
    }

    fn suite(event: &str, passed: u32, failed: u32) -> String {
        format!(
            r#"{{ "type": "suite", "event": "{event}", "passed": {passed}, "failed": {failed}, "ignored": 0, "measured": 0, "filtered_out": 4 }}"#
        )
    }

    #[test]
    fn a_wrapper_passes_only_alone_and_a_canary_never() {
        let ok = events(&[
            STARTED,
            &started("m::a"),
            &result("m::a", "ok"),
            &suite("ok", 1, 0),
        ]);
        let j = |r: &TestReport, code, role| judge_wrapper(r, code, false, "m::a", role);
        assert_eq!(
            j(&ok, Some(0), Role::Oracle),
            Judged::Verdict(RunVerdict::Pass)
        );
        assert!(matches!(j(&ok, Some(0), Role::Canary), Judged::Forged(_)));
        let failed = events(&[
            STARTED,
            &started("m::a"),
            &result("m::a", "failed"),
            &suite("failed", 0, 1),
        ]);
        assert_eq!(
            j(&failed, Some(101), Role::Canary),
            Judged::Verdict(RunVerdict::Fail)
        );
        // A canary process that ends with status 0 and no events at all was cut short.
        let nothing = events(&[STARTED, &started("m::a")]);
        assert!(matches!(
            j(&nothing, Some(0), Role::Canary),
            Judged::Forged(_)
        ));
        assert_eq!(
            j(&nothing, None, Role::Canary),
            Judged::Verdict(RunVerdict::Crash)
        );
        // Claiming every test of the executable.
        let claimed = events(&[
            STARTED,
            &started("m::a"),
            &started("m::b"),
            &result("m::a", "ok"),
            &result("m::b", "ok"),
            &suite("ok", 2, 0),
        ]);
        assert!(matches!(
            j(&claimed, Some(0), Role::Oracle),
            Judged::Forged(w) if w.contains("`m::b`")
        ));
    }

    #[test]
    fn a_regression_run_needs_its_canaries_to_fail() {
        let canaries = vec!["c::x".to_string()];
        let honest = events(&[
            STARTED,
            &started("t::one"),
            &started("c::x"),
            &result("t::one", "ok"),
            &result("c::x", "failed"),
            &suite("failed", 1, 1),
        ]);
        let j = |r: &TestReport, code| judge_regression(r, code, false, &canaries);
        assert_eq!(j(&honest, Some(101)), Judged::Verdict(RunVerdict::Pass));
        assert!(matches!(j(&honest, Some(0)), Judged::Forged(_)));
        let one_failed = events(&[
            STARTED,
            &started("t::one"),
            &started("c::x"),
            &result("t::one", "failed"),
            &result("c::x", "failed"),
            &suite("failed", 0, 2),
        ]);
        assert_eq!(j(&one_failed, Some(101)), Judged::Verdict(RunVerdict::Fail));
        // Ended early with everything claimed.
        let forged = events(&[
            STARTED,
            &started("t::one"),
            &result("t::one", "ok"),
            &suite("ok", 1, 0),
        ]);
        assert!(matches!(j(&forged, Some(0)), Judged::Forged(_)));
        assert!(matches!(j(&forged, Some(101)), Judged::Forged(w) if w.contains("without")));
        // A crash mid-run is a crash.
        let crashed = events(&[STARTED, &started("t::one")]);
        assert_eq!(j(&crashed, None), Judged::Verdict(RunVerdict::Crash));
        let claimed = events(&[
            STARTED,
            &started("t::one"),
            &started("c::x"),
            &result("t::one", "ok"),
            &result("c::x", "ok"),
            &suite("ok", 2, 0),
        ]);
        assert!(matches!(j(&claimed, Some(0)), Judged::Forged(_)));
    }
}
