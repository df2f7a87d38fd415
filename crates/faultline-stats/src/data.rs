//! Input types and the per-case aggregation every statistic starts from.

use std::collections::{BTreeMap, BTreeSet};

pub use crate::condition::Condition;
use crate::error::{Result, StatsError};
use crate::passk;

/// One graded attempt: the unit of raw data handed over by the grader.
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    /// Agent configuration (model plus scaffold settings) that made the attempt.
    pub config: String,
    /// Benchmark case the attempt was on.
    pub case: String,
    /// Condition the attempt ran under.
    pub condition: Condition,
    /// Attempt number within (config, case, condition); only used to detect duplicates.
    pub attempt: u32,
    /// Outcome in `[0, 1]`: 1/0 for pass/fail, or a score such as block coverage.
    pub value: f64,
}

/// Optional per-case metadata used to break results down by case kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CaseInfo {
    /// Distributed system the bug comes from (e.g. etcd).
    pub system: Option<String>,
    /// Bug category (e.g. concurrency, recovery).
    pub category: Option<String>,
    /// Difficulty tier.
    pub tier: Option<u32>,
    /// Whether the symptom report names the causal function (a code clue).
    pub symptom_names_function: Option<bool>,
}

/// A case attribute to break results down by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attribute {
    /// [`CaseInfo::system`].
    System,
    /// [`CaseInfo::category`].
    Category,
    /// [`CaseInfo::tier`].
    Tier,
    /// [`CaseInfo::symptom_names_function`].
    SymptomNamesFunction,
}

impl Attribute {
    /// Name used in error messages and table headers.
    pub fn name(self) -> &'static str {
        match self {
            Attribute::System => "system",
            Attribute::Category => "category",
            Attribute::Tier => "tier",
            Attribute::SymptomNamesFunction => "symptom_names_function",
        }
    }

    /// The attribute's level for one case, as a label, if the case has it.
    pub fn level(self, info: &CaseInfo) -> Option<String> {
        match self {
            Attribute::System => info.system.clone(),
            Attribute::Category => info.category.clone(),
            Attribute::Tier => info.tier.map(|t| t.to_string()),
            Attribute::SymptomNamesFunction => info.symptom_names_function.map(|b| b.to_string()),
        }
    }
}

/// One number per case, sorted by case name.
///
/// Every statistic treats cases as the unit of resampling and weights them
/// equally, so this is the common currency between aggregation, bootstrap and
/// breakdowns.
#[derive(Debug, Clone, PartialEq)]
pub struct CaseScores {
    cases: Vec<String>,
    scores: Vec<f64>,
}

impl CaseScores {
    /// Builds from (case, score) pairs; rejects empty input, duplicate cases and
    /// non-finite scores so later statistics cannot be silently wrong.
    pub fn new(pairs: impl IntoIterator<Item = (String, f64)>) -> Result<Self> {
        let mut map = BTreeMap::new();
        for (case, score) in pairs {
            if !score.is_finite() {
                return Err(StatsError::NonFiniteScore { case, value: score });
            }
            if map.insert(case.clone(), score).is_some() {
                return Err(StatsError::DuplicateCase { case });
            }
        }
        if map.is_empty() {
            return Err(StatsError::Empty {
                what: "case scores",
            });
        }
        let (cases, scores) = map.into_iter().unzip();
        Ok(Self { cases, scores })
    }

    /// Case names in ascending order.
    pub fn cases(&self) -> &[String] {
        &self.cases
    }

    /// Scores in the order of [`CaseScores::cases`].
    pub fn scores(&self) -> &[f64] {
        &self.scores
    }

    /// Number of cases.
    pub fn len(&self) -> usize {
        self.cases.len()
    }

    /// Always false (construction rejects empty input); provided for the usual pairing with `len`.
    pub fn is_empty(&self) -> bool {
        self.cases.is_empty()
    }

    /// Equal-weight mean over cases: the headline number of a group.
    pub fn mean(&self) -> f64 {
        self.scores.iter().sum::<f64>() / self.scores.len() as f64
    }

    /// Per-case `self - other`; errors if the case sets differ, because an
    /// unpaired difference would mix case difficulty into the comparison.
    pub fn paired_differences(&self, other: &CaseScores) -> Result<CaseScores> {
        if let Some(case) = self
            .cases
            .iter()
            .find(|c| other.cases.binary_search(c).is_err())
        {
            return Err(StatsError::UnpairedCase {
                case: case.clone(),
                present_in: "first",
            });
        }
        if let Some(case) = other
            .cases
            .iter()
            .find(|c| self.cases.binary_search(c).is_err())
        {
            return Err(StatsError::UnpairedCase {
                case: case.clone(),
                present_in: "second",
            });
        }
        let scores = self
            .scores
            .iter()
            .zip(&other.scores)
            .map(|(a, b)| a - b)
            .collect();
        Ok(CaseScores {
            cases: self.cases.clone(),
            scores,
        })
    }

    /// Splits the cases by an attribute level, so every statistic can be
    /// reported per system, category, tier, and so on. Levels come back sorted.
    pub fn breakdown(
        &self,
        attribute: Attribute,
        info: &BTreeMap<String, CaseInfo>,
    ) -> Result<BTreeMap<String, CaseScores>> {
        let mut groups: BTreeMap<String, CaseScores> = BTreeMap::new();
        for (case, &score) in self.cases.iter().zip(&self.scores) {
            let level = info
                .get(case)
                .and_then(|i| attribute.level(i))
                .ok_or_else(|| StatsError::MissingAttribute {
                    case: case.clone(),
                    attribute: attribute.name(),
                })?;
            let group = groups.entry(level).or_insert_with(|| CaseScores {
                cases: Vec::new(),
                scores: Vec::new(),
            });
            group.cases.push(case.clone());
            group.scores.push(score);
        }
        Ok(groups)
    }
}

/// Attempts of one (config, case, condition) cell.
#[derive(Debug, Clone, Default)]
pub(crate) struct Cell {
    pub(crate) attempts: Vec<(u32, f64)>,
}

impl Cell {
    fn mean(&self) -> f64 {
        self.attempts.iter().map(|(_, v)| v).sum::<f64>() / self.attempts.len() as f64
    }

    /// (attempts, passes), rejecting non-binary values because pass counts of
    /// fractional scores are meaningless.
    pub(crate) fn pass_counts(&self, config: &str, case: &str) -> Result<(u32, u32)> {
        let mut passes = 0u32;
        for &(attempt, value) in &self.attempts {
            if value == 1.0 {
                passes += 1;
            } else if value != 0.0 {
                return Err(StatsError::NotBinary {
                    config: config.to_owned(),
                    case: case.to_owned(),
                    attempt,
                    value,
                });
            }
        }
        let n = u32::try_from(self.attempts.len()).map_err(|_| {
            StatsError::InvalidOption("more than u32::MAX attempts in one cell".to_owned())
        })?;
        Ok((n, passes))
    }
}

/// Validated observations of a sweep, indexed for aggregation.
///
/// Validation happens once here so every statistic downstream can assume
/// finite values in `[0, 1]` and no duplicate attempts.
#[derive(Debug, Clone)]
pub struct ResultSet {
    cells: BTreeMap<(String, Condition, String), Cell>,
    configs: BTreeSet<String>,
    cases: BTreeSet<String>,
    n_observations: usize,
}

impl ResultSet {
    /// Validates and indexes raw observations.
    pub fn new(observations: impl IntoIterator<Item = Observation>) -> Result<Self> {
        let mut cells: BTreeMap<(String, Condition, String), Cell> = BTreeMap::new();
        let mut seen = BTreeSet::new();
        let mut n_observations = 0;
        for o in observations {
            if o.config.is_empty() {
                return Err(StatsError::EmptyName { what: "config" });
            }
            if o.case.is_empty() {
                return Err(StatsError::EmptyName { what: "case" });
            }
            if !o.value.is_finite() {
                return Err(StatsError::NonFinite {
                    config: o.config,
                    case: o.case,
                    attempt: o.attempt,
                    value: o.value,
                });
            }
            if !(0.0..=1.0).contains(&o.value) {
                return Err(StatsError::OutOfRange {
                    config: o.config,
                    case: o.case,
                    attempt: o.attempt,
                    value: o.value,
                });
            }
            if !seen.insert((
                o.config.clone(),
                o.case.clone(),
                o.condition.clone(),
                o.attempt,
            )) {
                return Err(StatsError::Duplicate {
                    config: o.config,
                    case: o.case,
                    condition: o.condition,
                    attempt: o.attempt,
                });
            }
            cells
                .entry((o.config, o.condition, o.case))
                .or_default()
                .attempts
                .push((o.attempt, o.value));
            n_observations += 1;
        }
        if n_observations == 0 {
            return Err(StatsError::Empty {
                what: "observations",
            });
        }
        let configs = cells.keys().map(|(c, _, _)| c.clone()).collect();
        let cases = cells.keys().map(|(_, _, c)| c.clone()).collect();
        Ok(Self {
            cells,
            configs,
            cases,
            n_observations,
        })
    }

    /// Number of observations (attempts) in the set.
    pub fn len(&self) -> usize {
        self.n_observations
    }

    /// Always false (construction rejects empty input); provided for the usual pairing with `len`.
    pub fn is_empty(&self) -> bool {
        self.n_observations == 0
    }

    /// All configurations, sorted.
    pub fn configs(&self) -> impl Iterator<Item = &str> {
        self.configs.iter().map(String::as_str)
    }

    /// All cases, sorted.
    pub fn cases(&self) -> impl Iterator<Item = &str> {
        self.cases.iter().map(String::as_str)
    }

    /// Conditions that occur in the data, baseline first and then by name.
    pub fn conditions(&self) -> Vec<Condition> {
        let present: BTreeSet<&Condition> = self.cells.keys().map(|(_, k, _)| k).collect();
        present.into_iter().cloned().collect()
    }

    pub(crate) fn cells(&self) -> impl Iterator<Item = (&str, &Condition, &str, &Cell)> {
        self.cells
            .iter()
            .map(|((config, cond, case), cell)| (config.as_str(), cond, case.as_str(), cell))
    }

    fn group<'a>(
        &'a self,
        config: &'a str,
        condition: &'a Condition,
    ) -> Result<impl Iterator<Item = (&'a str, &'a Cell)>> {
        let lo = (config.to_owned(), condition.clone(), String::new());
        let mut iter = self
            .cells
            .range(lo..)
            .take_while(move |((c, k, _), _)| c == config && k == condition)
            .map(|((_, _, case), cell)| (case.as_str(), cell))
            .peekable();
        if iter.peek().is_none() {
            return Err(StatsError::UnknownGroup {
                config: config.to_owned(),
                condition: condition.clone(),
            });
        }
        Ok(iter)
    }

    /// Mean over attempts for each case of one configuration and condition;
    /// its [`CaseScores::mean`] is the DistDebug headline number.
    pub fn case_means(&self, config: &str, condition: &Condition) -> Result<CaseScores> {
        CaseScores::new(
            self.group(config, condition)?
                .map(|(case, cell)| (case.to_owned(), cell.mean())),
        )
    }

    /// Per case, the mean over configurations of each configuration's attempt
    /// mean: the condition's aggregate with configurations weighted equally.
    /// A case that some configurations lack averages over those that have it.
    pub fn pooled_case_means(&self, condition: &Condition) -> Result<CaseScores> {
        let mut per_case: BTreeMap<&str, (f64, usize)> = BTreeMap::new();
        for (_, cond, case, cell) in self.cells() {
            if cond == condition {
                let entry = per_case.entry(case).or_default();
                entry.0 += cell.mean();
                entry.1 += 1;
            }
        }
        if per_case.is_empty() {
            return Err(StatsError::UnknownGroup {
                config: "(all)".to_owned(),
                condition: condition.clone(),
            });
        }
        CaseScores::new(
            per_case
                .into_iter()
                .map(|(case, (sum, n))| (case.to_owned(), sum / n as f64)),
        )
    }

    /// Per-case means of two conditions over the same configuration-and-case cells: for each
    /// case, the mean over the configurations that have both conditions there, of each
    /// condition's cell mean. Cases no configuration has both ways are left out, so a pooled
    /// difference never compares one set of configurations with another.
    pub fn pooled_paired_case_means(
        &self,
        first: &Condition,
        second: &Condition,
    ) -> Result<(CaseScores, CaseScores)> {
        let mut cells: BTreeMap<(&str, &str), [Option<f64>; 2]> = BTreeMap::new();
        for (config, cond, case, cell) in self.cells() {
            let side = if cond == first {
                0
            } else if cond == second {
                1
            } else {
                continue;
            };
            cells.entry((case, config)).or_default()[side] = Some(cell.mean());
        }
        let mut per_case: BTreeMap<&str, (f64, f64, usize)> = BTreeMap::new();
        for ((case, _), sides) in &cells {
            if let [Some(a), Some(b)] = sides {
                let e = per_case.entry(case).or_default();
                e.0 += a;
                e.1 += b;
                e.2 += 1;
            }
        }
        if per_case.is_empty() {
            return Err(StatsError::UnknownGroup {
                config: "(all, paired)".to_owned(),
                condition: first.clone(),
            });
        }
        let side = |pick: fn(&(f64, f64, usize)) -> f64| {
            CaseScores::new(
                per_case
                    .iter()
                    .map(|(case, e)| ((*case).to_owned(), pick(e) / e.2 as f64)),
            )
        };
        Ok((side(|e| e.0)?, side(|e| e.1)?))
    }

    /// Unbiased per-case pass@k (at least one of k attempts passes).
    pub fn case_pass_at_k(
        &self,
        config: &str,
        condition: &Condition,
        k: u32,
    ) -> Result<CaseScores> {
        self.case_counts_map(config, condition, k, passk::pass_at_k)
    }

    /// Unbiased per-case pass^k (all of k attempts pass): the reliability view.
    pub fn case_pass_hat_k(
        &self,
        config: &str,
        condition: &Condition,
        k: u32,
    ) -> Result<CaseScores> {
        self.case_counts_map(config, condition, k, passk::pass_hat_k)
    }

    /// pass@k and pass^k for every k up to the most attempts any case has, each averaged over
    /// the cases with at least k attempts (an unbiased estimate needs n >= k), with how many
    /// cases that is: a run whose cases got different attempt counts still reports every k.
    pub fn pass_k_curve(&self, config: &str, condition: &Condition) -> Result<Vec<PassKPoint>> {
        let mut counts = Vec::new();
        for (case, cell) in self.group(config, condition)? {
            counts.push(cell.pass_counts(config, case)?);
        }
        let most = counts.iter().map(|&(n, _)| n).max().unwrap_or(0);
        (1..=most)
            .map(|k| {
                let (mut at, mut hat, mut cases) = (0.0, 0.0, 0u32);
                for &(n, c) in counts.iter().filter(|&&(n, _)| n >= k) {
                    at += passk::pass_at_k(n, c, k)?;
                    hat += passk::pass_hat_k(n, c, k)?;
                    cases += 1;
                }
                Ok(PassKPoint {
                    k,
                    pass_at_k: at / f64::from(cases),
                    pass_hat_k: hat / f64::from(cases),
                    cases,
                })
            })
            .collect()
    }

    fn case_counts_map(
        &self,
        config: &str,
        condition: &Condition,
        k: u32,
        estimator: fn(u32, u32, u32) -> Result<f64>,
    ) -> Result<CaseScores> {
        let mut pairs = Vec::new();
        for (case, cell) in self.group(config, condition)? {
            let (n, c) = cell.pass_counts(config, case)?;
            let value = estimator(n, c, k).map_err(|e| match e {
                StatsError::InvalidK { n, k, .. } => StatsError::InvalidK {
                    case: Some(case.to_owned()),
                    n,
                    k,
                },
                other => other,
            })?;
            pairs.push((case.to_owned(), value));
        }
        CaseScores::new(pairs)
    }
}

/// pass@k and pass^k at one k, averaged over the cases with at least k attempts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PassKPoint {
    /// The k.
    pub k: u32,
    /// Mean chance that at least one of k attempts passes.
    pub pass_at_k: f64,
    /// Mean chance that all k attempts pass.
    pub pass_hat_k: f64,
    /// Cases with at least k attempts, the ones averaged.
    pub cases: u32,
}
