//! The report of a simulated sweep: aggregation, bootstraps, GLMM and every rendering.

use faultline_report::summary::{Options, build};
use faultline_report::viewer::{BlockView, CaseView, TrialView};
use faultline_report::{html, markdown, synthetic};
use faultline_schema::{Condition, Report, ResultRecord, Track};
use faultline_stats::SweepSpec;

fn sweep() -> Vec<ResultRecord> {
    let spec = SweepSpec {
        configs: 3,
        cases: 12,
        attempts: 3,
        intercept: -0.3,
        effects: vec![(faultline_stats::Condition::context(), 1.2)],
        sd_config: 0.8,
        sd_case: 1.2,
    };
    synthetic::records(&spec, 11).unwrap()
}

fn report(records: &[ResultRecord]) -> Report {
    build(records, None, &Options::default())
}

#[test]
fn aggregates_per_configuration_track_and_condition() {
    let records = sweep();
    let r = report(&records);
    assert_eq!(r.groups.len(), 6);
    assert_eq!(r.run.trials, 3 * 12 * 3 * 2);
    for g in &r.groups {
        assert_eq!((g.cases, g.trials), (12, 36));
        // The score is the case-weighted pass rate; with equal attempts it is the plain rate.
        let passes = records
            .iter()
            .filter(|x| x.agent == g.agent && x.condition == g.condition)
            .filter(|x| x.score == Some(1.0))
            .count();
        let score = g.score.as_ref().unwrap();
        assert!((score.value - passes as f64 / 36.0).abs() < 1e-12);
        let (lo, hi) = (score.lower.unwrap(), score.upper.unwrap());
        assert!(lo <= score.value && score.value <= hi && lo < hi);
        // pass@1 is the score; pass@k grows and pass^k shrinks with k.
        assert_eq!(g.pass_k.len(), 3);
        assert!((g.pass_k[0].pass_at_k - score.value).abs() < 1e-12);
        assert!(g.pass_k[2].pass_at_k >= g.pass_k[0].pass_at_k);
        assert!(g.pass_k[2].pass_hat_k <= g.pass_k[0].pass_hat_k);
        assert!(g.cost_usd.unwrap() > 0.0 && g.tokens > 0.0 && g.steps >= 10.0);
        assert!(g.edited > 0.0 && g.edited < 1.0);
        assert!(g.steps_to_first_edit.is_some());
        let attributes: std::collections::BTreeSet<&str> =
            g.breakdowns.iter().map(|b| b.attribute.as_str()).collect();
        assert_eq!(
            attributes.into_iter().collect::<Vec<_>>(),
            ["category", "symptom_names_function", "system", "tier"]
        );
        let by_system: usize = g
            .breakdowns
            .iter()
            .filter(|b| b.attribute == "system")
            .map(|b| b.cases)
            .sum();
        assert_eq!(by_system, 12);
    }
    assert_eq!(r.cells.len(), 3 * 12 * 2);
}

#[test]
fn paired_differences_and_the_glmm_see_the_context_effect() {
    let r = report(&sweep());
    // Three agents plus the pool of all model agents.
    assert_eq!(r.condition_effects.len(), 4);
    let pooled = r
        .condition_effects
        .iter()
        .find(|e| e.agent.is_none())
        .unwrap();
    let d = pooled.difference.as_ref().unwrap();
    assert_eq!(d.cases, 12);
    assert!(d.mean > 0.0, "context helps in the simulation: {}", d.mean);
    assert_eq!(d.quantiles.len(), 9);
    assert!(d.quantiles.windows(2).all(|w| w[0].value <= w[1].value));
    assert_eq!(d.quantiles[0].value, d.lower);
    assert_eq!(d.quantiles[8].value, d.upper);
    assert_eq!(d.histogram.counts.iter().sum::<usize>(), 10_000);
    // Every two configurations compared under each condition.
    assert_eq!(r.comparisons.len(), 3 * 2);
    let glmm = &r.glmm[0];
    assert_eq!(glmm.track, Track::Repair);
    let fit = glmm
        .fit
        .as_ref()
        .unwrap_or_else(|| panic!("{:?}", glmm.error));
    assert_eq!(fit.effects.len(), 1);
    let effect = &fit.effects[0];
    assert_eq!(effect.condition, Condition::curated());
    assert!(effect.coefficient.estimate > 0.0);
    assert!((effect.odds_ratio - effect.coefficient.estimate.exp()).abs() < 1e-12);
    assert_eq!(fit.observations, 216);
}

#[test]
fn one_condition_has_no_condition_effects() {
    let records: Vec<ResultRecord> = sweep()
        .into_iter()
        .filter(|r| r.condition == Condition::symptom())
        .collect();
    let r = report(&records);
    assert!(r.condition_effects.is_empty());
    assert!(r.glmm.is_empty());
    assert!(!r.comparisons.is_empty());
}

#[test]
fn infrastructure_errors_are_not_failures() {
    let mut records = sweep();
    for r in records.iter_mut().filter(|r| r.agent == "config-000") {
        if r.attempt == 1 {
            r.outcome = faultline_schema::Outcome::InfraError;
            r.score = None;
        }
    }
    let r = report(&records);
    let g = &r.groups[0];
    assert_eq!(g.agent, "config-000");
    assert_eq!(g.infra_errors, 12);
    assert_eq!(g.trials, 36);
    // pass@k over the two scored attempts per case only.
    assert_eq!(g.pass_k.len(), 2);
}

#[test]
fn renderings_show_the_same_numbers_and_escape_names() {
    let mut records = sweep();
    for r in &mut records {
        if r.agent == "config-001" {
            r.agent = "<script>alert(1)</script>".into();
            r.trial_id = r.trial_id.replace("config-001", "x");
        }
    }
    let r = report(&records);
    let md = markdown::markdown(&r);
    assert!(md.contains("## Leaderboard") && md.contains("## Mixed-effects model"));
    let leader = r.groups.iter().find(|g| g.agent == "config-000").unwrap();
    let score = faultline_report::leaderboard::pct(leader.score.as_ref().unwrap().value);
    assert!(md.contains(&score));
    let terminal = markdown::terminal(&r);
    assert!(terminal.contains("config-000") && terminal.contains("GLMM"));

    let trials: Vec<TrialView> = records
        .iter()
        .take(3)
        .map(|rec| TrialView::new(rec, None, None, None, Some("--- a/src/lib.rs\n</script>")))
        .collect();
    let cases = vec![CaseView::new(
        "case-000",
        vec![BlockView {
            file: "src/lib.rs".into(),
            start: 2,
            end: 2,
            symbol: Some("f".into()),
            explanation: None,
        }],
        [],
        |_| Some("fn a() {}\nfn f() { </script><b> }\n".into()),
    )];
    let page = html::render(&html::HtmlInputs {
        title: "t",
        report: &r,
        trials: &trials,
        cases: &cases,
    })
    .unwrap();
    for id in [
        "forest-repair-symptom",
        "forest-repair-curated",
        "paired-repair-curated-0",
        "pareto-cost-repair-curated",
        "pareto-tokens-repair-symptom",
        "actions-repair",
        "heatmap-repair",
    ] {
        assert!(page.contains(&format!("id=\"{id}\"")), "no plot {id}");
    }
    assert!(
        !page.contains("<script>alert"),
        "an agent name reached the page unescaped"
    );
    assert!(page.contains("&lt;script&gt;alert(1)&lt;&#x2f;script&gt;"));
    // Only the page's own scripts close a script element.
    assert_eq!(page.matches("</script>").count(), 4);
    assert!(page.contains("id=\"glmm\""));
    // Kept for a look in a browser.
    let sample = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("sample-report.html");
    std::fs::write(&sample, &page).unwrap();
    println!("wrote {}", sample.display());
}

#[test]
fn report_json_round_trips() {
    let r = report(&sweep());
    let text = serde_json::to_string(&r).unwrap();
    let back: Report = serde_json::from_str(&text).unwrap();
    // Floats may come back one unit in the last place apart; the structure must not change.
    assert_eq!(back.groups.len(), r.groups.len());
    assert_eq!(back.cells.len(), r.cells.len());
    assert_eq!(back.glmm.len(), r.glmm.len());
    for (a, b) in back.groups.iter().zip(&r.groups) {
        assert_eq!(
            (&a.agent, a.track, &a.condition),
            (&b.agent, b.track, &b.condition)
        );
        let (x, y) = (a.score.as_ref().unwrap(), b.score.as_ref().unwrap());
        assert!((x.value - y.value).abs() < 1e-12);
    }
}

/// Each track's result is stated in one sentence before the tables: the pooled effect on the
/// probability scale with its interval and the symptom-alone rate, and the GLMM's odds ratio
/// with the test that gave its p-value.
#[test]
fn the_headline_states_the_context_effect_per_track() {
    let r = report(&sweep());
    let lines = markdown::headline(&r, Track::Repair);
    assert_eq!(lines.len(), 1, "one condition with a bundle: {lines:?}");
    let line = lines[0].clone();
    let pooled = r
        .condition_effects
        .iter()
        .find(|e| e.agent.is_none())
        .and_then(|e| e.difference.as_ref())
        .unwrap();
    let fit = &r.glmm[0].fit.as_ref().unwrap().effects[0];
    for part in [
        format!("went from {:.1}%", 100.0 * pooled.second_mean),
        format!("to {:.1}%", 100.0 * (pooled.second_mean + pooled.mean)),
        format!("over {} cases", pooled.cases),
        format!("odds ratio {:.2}", fit.odds_ratio),
        format!(
            "Wald test of the mixed model's curated term, p = {:.4}",
            fit.coefficient.p_value
        ),
    ] {
        assert!(line.contains(&part), "`{part}` not in: {line}");
    }
    // The symptom-alone rate is the paired cases' symptom mean.
    let symptom: Vec<_> = r
        .groups
        .iter()
        .filter(|g| g.condition == Condition::symptom())
        .filter_map(|g| g.score.as_ref().map(|s| s.value))
        .collect();
    let mean = symptom.iter().sum::<f64>() / symptom.len() as f64;
    assert!(
        (pooled.second_mean - mean).abs() < 1e-9,
        "{} vs {mean}",
        pooled.second_mean
    );
    // Stated before the leaderboard in Markdown, and in the page.
    let md = markdown::markdown(&r);
    let result = md.find("## Result").expect("a result section");
    assert!(result < md.find("## Leaderboard").unwrap());
    assert!(md[result..].contains(&line));
}

/// Within a track, every condition's leaderboard lists the agents in the same order (by their
/// mean score over the conditions), so rows line up when the tables are read side by side.
#[test]
fn leaderboard_rows_line_up_across_conditions() {
    // The best agent without context fails everything with it.
    let mut records = sweep();
    let best = "config-001";
    for x in records
        .iter_mut()
        .filter(|x| x.agent == best && x.condition == Condition::curated())
    {
        x.score = Some(0.0);
    }
    let r = report(&records);
    let order = |c: Condition| -> Vec<String> {
        faultline_report::leaderboard::ordered(&r)
            .into_iter()
            .filter(|g| g.track == Track::Repair && g.condition == c)
            .map(|g| g.agent.clone())
            .collect()
    };
    let by_score = |c: Condition| -> Vec<String> {
        let mut gs: Vec<_> = r.groups.iter().filter(|g| g.condition == c).collect();
        gs.sort_by(|a, b| {
            b.score
                .as_ref()
                .unwrap()
                .value
                .total_cmp(&a.score.as_ref().unwrap().value)
        });
        gs.into_iter().map(|g| g.agent.clone()).collect()
    };
    // The agents rank differently with and without context.
    assert_ne!(
        by_score(Condition::symptom()),
        by_score(Condition::curated())
    );
    assert_eq!(order(Condition::symptom()), order(Condition::curated()));
    assert_eq!(order(Condition::symptom()).len(), 3);
}

/// The paired plot explains its dot sizes, and no axis of any plot repeats a tick label.
#[test]
fn plots_have_size_legends_and_distinct_ticks() {
    let r = report(&sweep());
    let agent = &r.groups[0].agent;
    let paired =
        faultline_report::plots::paired(&r, Track::Repair, &Condition::curated(), agent, 0);
    assert!(paired.contains("cases at a point:"), "{paired}");
    let pareto = faultline_report::plots::pareto(
        &r,
        Track::Repair,
        &Condition::curated(),
        faultline_report::plots::Spend::Cost,
    );
    for svg in [&paired, &pareto] {
        // Tick labels are the texts of class `tick`, one axis after another; within an axis
        // they increase, so a repeat next to itself is a duplicate.
        let ticks: Vec<&str> = svg
            .split("class=\"tick ")
            .skip(1)
            .map(|t| {
                let text = &t[t.find('>').unwrap() + 1..];
                &text[..text.find('<').unwrap()]
            })
            .collect();
        assert!(ticks.len() >= 4, "{ticks:?}");
        assert!(ticks.windows(2).all(|w| w[0] != w[1]), "{ticks:?}");
    }
}

/// A case an agent passed with the symptom alone and failed with the bundle is listed as
/// misleading context, in Markdown and on the page; one it passed both ways is not.
#[test]
fn context_that_turned_a_pass_into_a_fail_is_listed() {
    let mut records = sweep();
    let (agent, case) = ("config-000", records[0].case_id.clone());
    for x in records
        .iter_mut()
        .filter(|x| x.agent == agent && x.case_id == case)
    {
        x.score = Some(if x.condition == Condition::symptom() {
            1.0
        } else {
            0.0
        });
    }
    let r = report(&records);
    let misled = markdown::misled(&r);
    let row = misled
        .rows
        .iter()
        .find(|row| row[2] == agent && row[3] == case)
        .expect("the flipped case is listed");
    assert_eq!(row[1], "curated");
    assert_eq!(row[4..], ["100.0%".to_string(), "0.0%".to_string()]);
    for row in &misled.rows {
        let cell = |c: Condition| {
            r.cells
                .iter()
                .find(|x| x.agent == row[2] && x.case == row[3] && x.condition == c)
                .and_then(|x| x.mean)
                .unwrap()
        };
        assert!(cell(Condition::symptom()) >= 0.5 && cell(Condition::curated()) < 0.5);
    }
    assert!(markdown::markdown(&r).contains("## Context that misled"));
    let page = html::render(&html::HtmlInputs {
        title: "t",
        report: &r,
        trials: &[],
        cases: &[],
    })
    .unwrap();
    assert!(page.contains("id=\"misled\""));
    assert!(page.contains(markdown::MISLED_NOTE));
}
