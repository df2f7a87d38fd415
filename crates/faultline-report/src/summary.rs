//! From a run's records to a [`Report`]: the aggregation per agent configuration, track and
//! condition, the breakdowns by case attribute, the paired bootstraps and the GLMM, all computed
//! by `faultline-stats`.

use faultline_schema::report::{
    AgentSummary, BootstrapSettings, Breakdown, CaseSummary, Cell, Coefficient, Comparison,
    ConditionEffect, Estimate, GlmmEffect, GlmmFitSummary, GlmmResult, GroupStats, Histogram,
    PairedDifference, PassK, Quantile, REPORT_SCHEMA_VERSION, Report, RunSummary,
};
use faultline_schema::trajectory::AgentKind;
use faultline_schema::{Condition, Outcome, ResultRecord, RunLock, Track};
use faultline_stats::{
    Attribute, BootstrapOptions, CaseInfo, CaseScores, FixedEffect, Observation, ResultSet,
    bootstrap_mean, fit_glmm, paired_bootstrap,
};
use std::collections::{BTreeMap, BTreeSet};

/// Seed of the report's bootstraps, fixed so a report is reproducible.
pub const REPORT_SEED: u64 = 20_261_129;

/// Quantiles of paired differences shown in reports.
pub const QUANTILES: [f64; 9] = [0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.975];

/// The standard normal's 97.5% quantile, for 95% Wald intervals.
const Z_975: f64 = 1.959_963_984_540_054;

/// How the statistics are computed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Options {
    /// Resamples, interval level and seed of every bootstrap.
    pub bootstrap: BootstrapOptions,
    /// Bins of the histograms of paired differences.
    pub histogram_bins: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            bootstrap: BootstrapOptions::new(REPORT_SEED),
            histogram_bins: 30,
        }
    }
}

fn stats_condition(c: &Condition) -> faultline_stats::Condition {
    faultline_stats::Condition::new(c.as_str())
        .expect("a run's condition names are valid statistics labels")
}

/// `f` over `items` on all cores, in order: the bootstraps of different groups are independent
/// (each seeded alike), so the result does not depend on the number of threads.
fn par_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(items.len());
    if threads <= 1 {
        return items.iter().map(f).collect();
    }
    let f = &f;
    std::thread::scope(|s| {
        let handles: Vec<_> = items
            .chunks(items.len().div_ceil(threads))
            .map(|chunk| s.spawn(move || chunk.iter().map(f).collect::<Vec<R>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}

/// Whether a record has a score that counts (infrastructure errors never do).
fn scored(r: &ResultRecord) -> Option<f64> {
    if r.outcome == Outcome::InfraError {
        return None;
    }
    r.score.map(|s| s.clamp(0.0, 1.0))
}

/// Mean over cases of the mean over each case's values; cases without values are left out.
fn case_weighted<'a>(values: impl IntoIterator<Item = (&'a str, f64)>) -> Option<f64> {
    let mut per_case: BTreeMap<&str, (f64, usize)> = BTreeMap::new();
    for (case, v) in values {
        let e = per_case.entry(case).or_default();
        e.0 += v;
        e.1 += 1;
    }
    (!per_case.is_empty())
        .then(|| per_case.values().map(|(s, n)| s / *n as f64).sum::<f64>() / per_case.len() as f64)
}

fn estimate(scores: &CaseScores, options: &BootstrapOptions) -> Estimate {
    let ci = bootstrap_mean(scores, options).ok();
    Estimate {
        value: scores.mean(),
        lower: ci.as_ref().map(|b| b.ci.lower),
        upper: ci.as_ref().map(|b| b.ci.upper),
    }
}

fn difference(
    first: &CaseScores,
    second: &CaseScores,
    options: &Options,
) -> Result<PairedDifference, String> {
    let shared: BTreeSet<&String> = first
        .cases()
        .iter()
        .filter(|c| second.cases().binary_search(c).is_ok())
        .collect();
    let restrict = |s: &CaseScores| {
        CaseScores::new(
            s.cases()
                .iter()
                .zip(s.scores())
                .filter(|(c, _)| shared.contains(c))
                .map(|(c, v)| (c.clone(), *v)),
        )
    };
    let (a, b) = match (restrict(first), restrict(second)) {
        (Ok(a), Ok(b)) => (a, b),
        _ => return Err("no case has scores on both sides".into()),
    };
    let p = paired_bootstrap(&a, &b, &options.bootstrap).map_err(|e| e.to_string())?;
    let h = p
        .histogram(options.histogram_bins)
        .map_err(|e| e.to_string())?;
    Ok(PairedDifference {
        cases: p.n_cases,
        mean: p.mean_diff,
        second_mean: b.mean(),
        lower: p.ci.lower,
        upper: p.ci.upper,
        std_error: p.std_error,
        share_positive: p.share_positive,
        share_negative: p.share_negative,
        quantiles: QUANTILES
            .iter()
            .map(|&q| {
                Ok(Quantile {
                    p: q,
                    value: p.quantile(q)?,
                })
            })
            .collect::<Result<_, faultline_stats::StatsError>>()
            .map_err(|e| e.to_string())?,
        histogram: Histogram {
            edges: h.edges,
            counts: h.counts,
        },
    })
}

/// The records of one agent, track and condition.
struct Group<'a> {
    agent: &'a str,
    track: Track,
    condition: Condition,
    records: Vec<&'a ResultRecord>,
}

impl Group<'_> {
    fn case_scores(&self) -> Option<CaseScores> {
        let mut per_case: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
        for r in &self.records {
            if let Some(s) = scored(r) {
                per_case.entry(&r.case_id).or_default().push(s);
            }
        }
        CaseScores::new(
            per_case
                .into_iter()
                .map(|(c, v)| (c.to_string(), v.iter().sum::<f64>() / v.len() as f64)),
        )
        .ok()
    }

    fn observations(&self) -> Vec<Observation> {
        self.records
            .iter()
            .filter_map(|r| {
                Some(Observation {
                    config: self.agent.to_string(),
                    case: r.case_id.clone(),
                    condition: stats_condition(&self.condition),
                    attempt: r.attempt,
                    value: scored(r)?,
                })
            })
            .collect()
    }

    fn pass_k(&self) -> Vec<PassK> {
        if self.track == Track::Diagnose {
            return Vec::new();
        }
        let Ok(set) = ResultSet::new(self.observations()) else {
            return Vec::new();
        };
        let Ok(curve) = set.pass_k_curve(self.agent, &stats_condition(&self.condition)) else {
            return Vec::new();
        };
        curve
            .into_iter()
            .map(|p| PassK {
                k: p.k,
                pass_at_k: p.pass_at_k,
                pass_hat_k: p.pass_hat_k,
                cases: p.cases,
            })
            .collect()
    }

    /// `scores` is [`Group::case_scores`], computed once for every use.
    fn stats(
        &self,
        scores: Option<&CaseScores>,
        info: &BTreeMap<String, CaseInfo>,
        options: &Options,
    ) -> GroupStats {
        let all = || self.records.iter().map(|r| (r.case_id.as_str(), *r));
        let mean_of = |f: &dyn Fn(&ResultRecord) -> f64| {
            case_weighted(all().map(|(c, r)| (c, f(r)))).unwrap_or(0.0)
        };
        let mut actions = BTreeMap::new();
        for kind in self.records.iter().flat_map(|r| r.actions.keys()) {
            actions.entry(*kind).or_insert_with(|| {
                mean_of(&|r| f64::from(r.actions.get(kind).copied().unwrap_or(0)))
            });
        }
        let mut outcomes = BTreeMap::new();
        for r in &self.records {
            *outcomes.entry(r.outcome).or_insert(0) += 1;
        }
        let mut breakdowns = Vec::new();
        if let Some(s) = scores {
            for attribute in [
                Attribute::System,
                Attribute::Category,
                Attribute::Tier,
                Attribute::SymptomNamesFunction,
            ] {
                if let Ok(levels) = s.breakdown(attribute, info) {
                    for (level, part) in levels {
                        breakdowns.push(Breakdown {
                            attribute: attribute.name().to_string(),
                            level,
                            cases: part.len(),
                            score: estimate(&part, &options.bootstrap),
                        });
                    }
                }
            }
        }
        GroupStats {
            agent: self.agent.to_string(),
            track: self.track,
            condition: self.condition.clone(),
            cases: scores.map_or(0, CaseScores::len),
            trials: self.records.len(),
            infra_errors: self
                .records
                .iter()
                .filter(|r| r.outcome == Outcome::InfraError)
                .count(),
            score: scores.map(|s| estimate(s, &options.bootstrap)),
            pass_k: self.pass_k(),
            precision: case_weighted(
                self.records
                    .iter()
                    .filter(|r| scored(r).is_some())
                    .filter_map(|r| Some((r.case_id.as_str(), r.block_precision?))),
            ),
            block_coverage: case_weighted(
                self.records
                    .iter()
                    .filter(|r| scored(r).is_some())
                    .filter_map(|r| Some((r.case_id.as_str(), r.block_coverage?))),
            ),
            tokens: mean_of(&|r| r.tokens.total() as f64),
            cost_usd: self
                .records
                .iter()
                .map(|r| Some((r.case_id.as_str(), r.cost_usd?)))
                .collect::<Option<Vec<_>>>()
                .and_then(case_weighted),
            wall_secs: mean_of(&|r| r.wall_secs),
            steps: mean_of(&|r| f64::from(r.steps)),
            steps_to_first_edit: case_weighted(
                all().filter_map(|(c, r)| Some((c, f64::from(r.steps_to_first_edit?)))),
            ),
            edited: mean_of(&|r| f64::from(u8::from(r.steps_to_first_edit.is_some()))),
            actions,
            outcomes,
            breakdowns,
        }
    }
}

fn coefficient(f: &FixedEffect) -> Coefficient {
    Coefficient {
        estimate: f.estimate,
        std_error: f.std_error,
        z: f.z,
        p_value: f.p_value,
    }
}

/// The GLMM of one track over the model agents' trials.
fn glmm(track: Track, groups: &[Group], model_agents: &BTreeSet<&str>) -> GlmmResult {
    let observations: Vec<Observation> = groups
        .iter()
        .filter(|g| g.track == track && model_agents.contains(g.agent))
        .flat_map(Group::observations)
        .collect();
    let agents: BTreeSet<String> = observations.iter().map(|o| o.config.clone()).collect();
    let cases: BTreeSet<&str> = observations.iter().map(|o| o.case.as_str()).collect();
    let mut out = GlmmResult {
        track,
        agents: agents.into_iter().collect(),
        cases: cases.len(),
        fit: None,
        error: None,
    };
    if model_agents.is_empty() {
        out.error = Some(
            "no model or external agents in the run (baselines are deterministic and left out)"
                .into(),
        );
        return out;
    }
    if track == Track::Diagnose {
        out.error = Some("diagnosis scores are coverage fractions, not pass/fail".into());
        return out;
    }
    match ResultSet::new(observations).and_then(|set| fit_glmm(&set)) {
        Ok(fit) => {
            let effects: Vec<GlmmEffect> = fit
                .levels
                .iter()
                .skip(1)
                .zip(&fit.fixed[1..])
                .filter_map(|(level, c)| {
                    Some(GlmmEffect {
                        condition: level.as_str().parse().ok()?,
                        coefficient: coefficient(c),
                        odds_ratio: c.estimate.exp(),
                        odds_ratio_lower: (c.estimate - Z_975 * c.std_error).exp(),
                        odds_ratio_upper: (c.estimate + Z_975 * c.std_error).exp(),
                    })
                })
                .collect();
            if effects.is_empty() {
                out.error = Some("the model agents ran no condition with a bundle".into());
                return out;
            }
            out.fit = Some(GlmmFitSummary {
                intercept: coefficient(&fit.fixed[0]),
                effects,
                sd_agent: fit.sd_config,
                sd_case: fit.sd_case,
                log_likelihood: fit.log_likelihood,
                singular: fit.singular,
                observations: fit.n_obs,
            });
        }
        Err(e) => out.error = Some(e.to_string()),
    }
    out
}

/// Computes the report of a run from its records (the latest record of each trial) and its
/// lock, when there is one.
pub fn build(records: &[ResultRecord], lock: Option<&RunLock>, options: &Options) -> Report {
    let mut by_group: BTreeMap<(&str, Track, Condition), Vec<&ResultRecord>> = BTreeMap::new();
    for r in records {
        by_group
            .entry((r.agent.as_str(), r.track, r.condition.clone()))
            .or_default()
            .push(r);
    }
    let groups: Vec<Group> = by_group
        .into_iter()
        .map(|((agent, track, condition), records)| Group {
            agent,
            track,
            condition,
            records,
        })
        .collect();

    let mut cases: BTreeMap<&str, CaseSummary> = BTreeMap::new();
    for r in records {
        cases.entry(&r.case_id).or_insert_with(|| CaseSummary {
            id: r.case_id.clone(),
            system: r.system.clone(),
            category: r.category,
            tier: r.tier,
            symptom_names_function: r.symptom_names_function,
        });
    }
    let info: BTreeMap<String, CaseInfo> = cases
        .values()
        .map(|c| {
            (
                c.id.clone(),
                CaseInfo {
                    system: Some(c.system.clone()),
                    category: Some(c.category.to_string()),
                    tier: Some(u32::from(c.tier)),
                    symptom_names_function: Some(c.symptom_names_function),
                },
            )
        })
        .collect();

    let agent_names: BTreeSet<&str> = records.iter().map(|r| r.agent.as_str()).collect();
    let kind_of = |name: &str| {
        lock.and_then(|l| l.agents.iter().find(|a| a.name == name))
            .map(|a| a.kind)
    };
    let agents: Vec<AgentSummary> = agent_names
        .iter()
        .map(|name| AgentSummary {
            name: name.to_string(),
            kind: kind_of(name),
            model: lock
                .and_then(|l| l.agents.iter().find(|a| a.name == *name))
                .and_then(|a| a.model.clone()),
        })
        .collect();
    let model_agents: BTreeSet<&str> = agents
        .iter()
        .filter(|a| a.kind != Some(AgentKind::Baseline))
        .map(|a| a.name.as_str())
        .collect();
    let tracks: Vec<Track> = Track::ALL
        .into_iter()
        .filter(|t| records.iter().any(|r| r.track == *t))
        .collect();
    let conditions: Vec<Condition> = records
        .iter()
        .map(|r| r.condition.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();

    let scores: BTreeMap<(&str, Track, Condition), CaseScores> = groups
        .iter()
        .filter_map(|g| Some(((g.agent, g.track, g.condition.clone()), g.case_scores()?)))
        .collect();

    let mut condition_effects = Vec::new();
    let mut glmms = Vec::new();
    let symptom = Condition::symptom();
    let with_bundle: Vec<&Condition> = conditions.iter().filter(|c| c.has_bundle()).collect();
    if conditions.contains(&symptom) && !with_bundle.is_empty() {
        for &track in &tracks {
            for &condition in &with_bundle {
                for &agent in &agent_names {
                    let given = scores.get(&(agent, track, condition.clone()));
                    let alone = scores.get(&(agent, track, symptom.clone()));
                    if let (Some(given), Some(alone)) = (given, alone) {
                        let d = difference(given, alone, options);
                        condition_effects.push(ConditionEffect {
                            condition: condition.clone(),
                            agent: Some(agent.to_string()),
                            track,
                            error: d.as_ref().err().cloned(),
                            difference: d.ok(),
                        });
                    }
                }
                if !model_agents.is_empty() {
                    let obs: Vec<Observation> = groups
                        .iter()
                        .filter(|g| g.track == track && model_agents.contains(g.agent))
                        .flat_map(Group::observations)
                        .collect();
                    let d = ResultSet::new(obs)
                        .and_then(|s| {
                            s.pooled_paired_case_means(
                                &stats_condition(condition),
                                &stats_condition(&symptom),
                            )
                        })
                        .map_err(|e| e.to_string())
                        .and_then(|(given, alone)| difference(&given, &alone, options));
                    condition_effects.push(ConditionEffect {
                        condition: condition.clone(),
                        agent: None,
                        track,
                        error: d.as_ref().err().cloned(),
                        difference: d.ok(),
                    });
                }
            }
            glmms.push(glmm(track, &groups, &model_agents));
        }
    }

    let mut pairs = Vec::new();
    for &track in &tracks {
        for condition in &conditions {
            let present: Vec<&str> = agent_names
                .iter()
                .copied()
                .filter(|a| scores.contains_key(&(*a, track, condition.clone())))
                .collect();
            for (i, first) in present.iter().enumerate() {
                for second in &present[i + 1..] {
                    pairs.push((track, condition, *first, *second));
                }
            }
        }
    }
    let comparisons: Vec<Comparison> = par_map(&pairs, |&(track, condition, first, second)| {
        difference(
            &scores[&(first, track, condition.clone())],
            &scores[&(second, track, condition.clone())],
            options,
        )
        .ok()
        .map(|d| Comparison {
            track,
            condition: condition.clone(),
            first: first.to_string(),
            second: second.to_string(),
            difference: d,
        })
    })
    .into_iter()
    .flatten()
    .collect();

    let mut cells = Vec::new();
    for g in &groups {
        let mut per_case: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
        for r in &g.records {
            let e = per_case.entry(&r.case_id).or_default();
            if let Some(s) = scored(r) {
                e.push(s);
            }
        }
        for (case, v) in per_case {
            cells.push(Cell {
                agent: g.agent.to_string(),
                track: g.track,
                condition: g.condition.clone(),
                case: case.to_string(),
                attempts: v.len(),
                mean: (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64),
            });
        }
    }

    Report {
        schema_version: REPORT_SCHEMA_VERSION,
        faultline_version: env!("CARGO_PKG_VERSION").into(),
        run: RunSummary {
            faultline_version: lock.map(|l| l.faultline_version.clone()),
            seed: lock.map(|l| l.seed),
            agents,
            tracks,
            conditions,
            trials: records.len(),
            protections: lock.map(|l| l.protections.clone()).unwrap_or_default(),
        },
        bootstrap: BootstrapSettings {
            resamples: options.bootstrap.resamples,
            level: options.bootstrap.level,
            seed: options.bootstrap.seed,
        },
        groups: par_map(&groups, |g| {
            g.stats(
                scores.get(&(g.agent, g.track, g.condition.clone())),
                &info,
                options,
            )
        }),
        condition_effects,
        providers: Vec::new(),
        comparisons,
        glmm: glmms,
        cases: cases.into_values().collect(),
        cells,
        regrade: None,
        build: crate::build::cells(records),
    }
}
