//! The report's plots as SVG, computed from a [`Report`]: the leaderboard's intervals, the paired
//! symptom-versus-context view per agent, cost and tokens against score (Pareto), action
//! distributions and the per-case heat map.

use crate::leaderboard::{pct, signed_pct};
use crate::markdown::{ACTION_KINDS, action_name};
use crate::svg::{N, Scale, Svg, Unit, score_colour, tick_labels};
use faultline_schema::report::{GroupStats, Report};
use faultline_schema::{Condition, Track};
use std::collections::BTreeMap;

const LABEL_W: f64 = 190.0;
const ROW_H: f64 = 22.0;
const TOP: f64 = 28.0;
const BOTTOM: f64 = 34.0;
const RIGHT: f64 = 24.0;

/// `text` cut to `max` characters with an ellipsis (tooltips keep the full text).
fn short(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut s: String = text.chars().take(max - 1).collect();
    s.push('…');
    s
}

/// A horizontal axis with ticks and grid lines across `[top, bottom]`.
fn x_axis(svg: &mut Svg, x: &Scale, top: f64, bottom: f64, unit: Unit) {
    let ticks = x.ticks(5);
    for (t, label) in ticks.iter().zip(tick_labels(&ticks, unit)) {
        let px = x.at(*t);
        svg.line(px, top, px, bottom, "grid");
        svg.text(px, bottom + 14.0, &[("class", &"tick middle")], &label);
    }
    svg.line(x.range.0, bottom, x.range.1, bottom, "axis");
}

/// A vertical axis with ticks and grid lines across `[left, right]`.
fn y_axis(svg: &mut Svg, y: &Scale, left: f64, right: f64, unit: Unit) {
    let ticks = y.ticks(5);
    for (t, label) in ticks.iter().zip(tick_labels(&ticks, unit)) {
        let py = y.at(*t);
        svg.line(left, py, right, py, "grid");
        svg.text(left - 6.0, py + 4.0, &[("class", &"tick end")], &label);
    }
    svg.line(left, y.range.0, left, y.range.1, "axis");
}

fn groups_of<'a>(report: &'a Report, track: Track, condition: &Condition) -> Vec<&'a GroupStats> {
    crate::leaderboard::ordered(report)
        .into_iter()
        .filter(|g| g.track == track && &g.condition == condition)
        .collect()
}

/// The scores of one track and condition with their 95% intervals, best first.
pub fn forest(report: &Report, track: Track, condition: &Condition) -> String {
    let groups = groups_of(report, track, condition);
    let width = 720.0;
    let height = TOP + ROW_H * groups.len() as f64 + BOTTOM;
    let mut svg = Svg::new(width, height);
    let x = Scale {
        domain: (0.0, 1.0),
        range: (LABEL_W, width - RIGHT),
    };
    svg.text(
        LABEL_W,
        16.0,
        &[("class", &"caption")],
        &format!("{track}, {condition}: score with 95% case-bootstrap interval"),
    );
    x_axis(&mut svg, &x, TOP - 4.0, height - BOTTOM, Unit::Percent);
    for (i, g) in groups.iter().enumerate() {
        let cy = TOP + ROW_H * (i as f64 + 0.5);
        svg.text(
            LABEL_W - 8.0,
            cy + 4.0,
            &[("class", &"label end")],
            &g.agent,
        );
        let Some(s) = &g.score else { continue };
        if let (Some(lo), Some(hi)) = (s.lower, s.upper) {
            svg.line(x.at(lo), cy, x.at(hi), cy, condition.as_str());
        }
        svg.with_title(
            "circle",
            &[
                ("cx", &N(x.at(s.value))),
                ("cy", &N(cy)),
                ("r", &4),
                ("class", &condition.as_str()),
            ],
            &format!(
                "{}: {}% {}",
                g.agent,
                pct(s.value),
                crate::leaderboard::interval(s.lower, s.upper)
            ),
        );
    }
    svg.finish(
        &format!("forest-{track}-{condition}"),
        &format!("leaderboard intervals, {track}, {condition}"),
    )
}

/// One agent on one track with one condition's bundle: per case, the symptom score against the
/// score with the bundle (points above the diagonal gained from it), and the bootstrap
/// distribution of the mean difference.
pub fn paired(
    report: &Report,
    track: Track,
    condition: &Condition,
    agent: &str,
    id: usize,
) -> String {
    let (width, height) = (560.0, 272.0);
    let mut svg = Svg::new(width, height);
    let side = 160.0;
    let (left, top) = (50.0, 50.0);
    let x = Scale {
        domain: (0.0, 1.0),
        range: (left, left + side),
    };
    let y = Scale {
        domain: (0.0, 1.0),
        range: (top + side, top),
    };
    svg.text(left, 16.0, &[("class", &"caption")], &short(agent, 60));
    svg.text(
        left,
        34.0,
        &[("class", &"small")],
        &format!("per case: symptom (x) vs {condition} (y)"),
    );
    x_axis(&mut svg, &x, top, top + side, Unit::Percent);
    y_axis(&mut svg, &y, left, left + side, Unit::Percent);
    svg.line(x.at(0.0), y.at(0.0), x.at(1.0), y.at(1.0), "diagonal");
    let mut points: BTreeMap<&str, [Option<f64>; 2]> = BTreeMap::new();
    for c in report
        .cells
        .iter()
        .filter(|c| c.track == track && c.agent == agent)
    {
        let slot = if &c.condition == condition {
            1
        } else if c.condition == Condition::symptom() {
            0
        } else {
            continue;
        };
        points.entry(&c.case).or_default()[slot] = c.mean;
    }
    let mut stacked: BTreeMap<(i64, i64), usize> = BTreeMap::new();
    for (case, p) in &points {
        if let [Some(s), Some(c)] = p {
            let key = ((s * 1000.0) as i64, (c * 1000.0) as i64);
            let n = stacked.entry(key).or_default();
            *n += 1;
            svg.with_title(
                "circle",
                &[
                    ("cx", &N(x.at(*s))),
                    ("cy", &N(y.at(*c))),
                    ("r", &N(3.0 + (*n as f64).sqrt())),
                    ("class", &"case-point"),
                ],
                &format!("{case}: symptom {}%, {condition} {}%", pct(*s), pct(*c)),
            );
        }
    }
    // Cases with the same pair of scores are drawn on top of each other, each circle wider.
    let ly = top + side + 44.0;
    svg.text(
        left - 40.0,
        ly + 4.0,
        &[("class", &"small")],
        "cases at a point:",
    );
    for (i, n) in [1.0f64, 4.0, 9.0].into_iter().enumerate() {
        let lx = left + 60.0 + 34.0 * i as f64;
        svg.leaf(
            "circle",
            &[
                ("cx", &N(lx)),
                ("cy", &N(ly)),
                ("r", &N(3.0 + n.sqrt())),
                ("class", &"case-point"),
            ],
        );
        svg.text(lx + 8.0, ly + 4.0, &[("class", &"small")], &format!("{n}"));
    }
    let effect = report.condition_effects.iter().find(|e| {
        e.track == track && &e.condition == condition && e.agent.as_deref() == Some(agent)
    });
    let hl = left + side + 60.0;
    let hw = width - hl - RIGHT;
    match effect.and_then(|e| e.difference.as_ref()) {
        Some(d) => {
            let h = &d.histogram;
            let lo = h.edges.first().copied().unwrap_or(0.0).min(0.0);
            let hi = h.edges.last().copied().unwrap_or(0.0).max(0.0);
            let pad = ((hi - lo) * 0.05).max(0.01);
            let hx = Scale {
                domain: (lo - pad, hi + pad),
                range: (hl, hl + hw),
            };
            let max = h.counts.iter().copied().max().unwrap_or(1).max(1) as f64;
            let hy = Scale {
                domain: (0.0, max),
                range: (top + side, top + 10.0),
            };
            svg.text(
                hl,
                34.0,
                &[("class", &"small")],
                &format!(
                    "{} pts [{}, {}], P(>0) = {:.2}",
                    signed_pct(d.mean),
                    signed_pct(d.lower),
                    signed_pct(d.upper),
                    d.share_positive
                ),
            );
            svg.leaf(
                "rect",
                &[
                    ("x", &N(hx.at(d.lower))),
                    ("y", &N(top)),
                    ("width", &N((hx.at(d.upper) - hx.at(d.lower)).max(1.0))),
                    ("height", &N(side)),
                    ("class", &"ci-band"),
                ],
            );
            for (i, &count) in h.counts.iter().enumerate() {
                let (a, b) = (h.edges[i], h.edges[i + 1]);
                svg.with_title(
                    "rect",
                    &[
                        ("x", &N(hx.at(a))),
                        ("y", &N(hy.at(count as f64))),
                        ("width", &N((hx.at(b) - hx.at(a) - 1.0).max(1.0))),
                        ("height", &N(hy.at(0.0) - hy.at(count as f64))),
                        ("class", &"bar"),
                    ],
                    &format!(
                        "[{}, {}] pts: {count} resamples",
                        signed_pct(a),
                        signed_pct(b)
                    ),
                );
            }
            x_axis(&mut svg, &hx, top, top + side, Unit::SignedPoints);
            svg.line(hx.at(0.0), top, hx.at(0.0), top + side, "zero");
            svg.text(
                hl + hw / 2.0,
                top + side + 30.0,
                &[("class", &"small middle")],
                &format!("{condition} - symptom: bootstrap of the mean (points)"),
            );
        }
        None => svg.text(
            hl,
            top + 20.0,
            &[("class", &"note")],
            &effect
                .and_then(|e| e.error.clone())
                .unwrap_or_else(|| "needs both conditions".into()),
        ),
    }
    svg.finish(
        &format!("paired-{track}-{condition}-{id}"),
        &format!("{agent}, {track}: symptom versus {condition}"),
    )
}

/// What a Pareto plot puts on its horizontal axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spend {
    /// Dollars per trial.
    Cost,
    /// Tokens per trial.
    Tokens,
}

/// Score against cost or tokens per trial; the frontier joins the configurations no other one
/// beats on both.
pub fn pareto(report: &Report, track: Track, condition: &Condition, spend: Spend) -> String {
    let (width, height) = (340.0, 250.0);
    let (left, top, bottom) = (52.0, 30.0, 40.0);
    let mut svg = Svg::new(width, height);
    let name = match spend {
        Spend::Cost => "cost",
        Spend::Tokens => "tokens",
    };
    let points: Vec<(&str, f64, f64)> = groups_of(report, track, condition)
        .into_iter()
        .filter_map(|g| {
            let x = match spend {
                Spend::Cost => g.cost_usd?,
                Spend::Tokens => g.tokens,
            };
            Some((g.agent.as_str(), x, g.score.as_ref()?.value))
        })
        .collect();
    let max_x = points.iter().map(|p| p.1).fold(0.0, f64::max);
    let x = Scale {
        domain: (0.0, if max_x > 0.0 { max_x * 1.1 } else { 1.0 }),
        range: (left, width - RIGHT),
    };
    let y = Scale {
        domain: (0.0, 1.0),
        range: (height - bottom, top),
    };
    svg.text(
        left,
        16.0,
        &[("class", &"caption")],
        &format!("{track}, {condition}: score vs {name} per trial"),
    );
    let unit = match spend {
        Spend::Cost => Unit::Dollars,
        Spend::Tokens => Unit::Tokens,
    };
    let format_x = |t: f64| match spend {
        Spend::Cost => format!("${t:.3}"),
        Spend::Tokens => format!("{t:.0} tokens"),
    };
    x_axis(&mut svg, &x, top, height - bottom, unit);
    y_axis(&mut svg, &y, left, width - RIGHT, Unit::Percent);
    let mut sorted = points.clone();
    sorted.sort_by(|a, b| a.1.total_cmp(&b.1).then(b.2.total_cmp(&a.2)));
    let mut frontier = Vec::new();
    let mut best = f64::NEG_INFINITY;
    for p in &sorted {
        if p.2 > best {
            best = p.2;
            frontier.push(*p);
        }
    }
    let path: String = frontier
        .iter()
        .map(|p| format!("{},{}", N(x.at(p.1)), N(y.at(p.2))))
        .collect::<Vec<_>>()
        .join(" ");
    svg.leaf("polyline", &[("points", &path), ("class", &"frontier")]);
    for (agent, px, py) in &points {
        let on = frontier.iter().any(|f| f.0 == *agent);
        svg.with_title(
            "circle",
            &[
                ("cx", &N(x.at(*px))),
                ("cy", &N(y.at(*py))),
                ("r", &4),
                ("class", &if on { "pareto" } else { "dominated" }),
            ],
            &format!("{agent}: {}%, {}", pct(*py), format_x(*px)),
        );
        let right = x.at(*px) > width - 90.0;
        svg.text(
            x.at(*px) + if right { -6.0 } else { 6.0 },
            y.at(*py) - 6.0,
            &[("class", &if right { "small end" } else { "small" })],
            &short(agent, 16),
        );
    }
    if points.is_empty() {
        svg.text(
            left + 10.0,
            top + 20.0,
            &[("class", &"note")],
            &format!("no {name} known"),
        );
    }
    svg.finish(
        &format!("pareto-{name}-{track}-{condition}"),
        &format!("score versus {name}, {track}, {condition}"),
    )
}

/// The colour class of an action kind.
pub fn action_class(i: usize) -> String {
    format!("a{i}")
}

/// Actions per trial by kind, one stacked bar per agent and condition.
pub fn actions(report: &Report, track: Track) -> String {
    let groups: Vec<&GroupStats> = crate::leaderboard::ordered(report)
        .into_iter()
        .filter(|g| g.track == track)
        .collect();
    let width = 720.0;
    let legend = 22.0;
    let height = TOP + legend + ROW_H * groups.len() as f64 + BOTTOM;
    let mut svg = Svg::new(width, height);
    let max = groups
        .iter()
        .map(|g| g.actions.values().sum::<f64>())
        .fold(0.0, f64::max);
    let x = Scale {
        domain: (0.0, if max > 0.0 { max } else { 1.0 }),
        range: (LABEL_W, width - RIGHT),
    };
    svg.text(
        LABEL_W,
        16.0,
        &[("class", &"caption")],
        &format!("{track}: actions per trial by kind"),
    );
    for (i, k) in ACTION_KINDS.iter().enumerate() {
        let lx = LABEL_W + 62.0 * i as f64;
        svg.leaf(
            "rect",
            &[
                ("x", &N(lx)),
                ("y", &N(TOP - 6.0)),
                ("width", &10),
                ("height", &10),
                ("class", &action_class(i)),
            ],
        );
        svg.text(
            lx + 14.0,
            TOP + 3.0,
            &[("class", &"small")],
            action_name(*k),
        );
    }
    let top = TOP + legend;
    x_axis(&mut svg, &x, top - 4.0, height - BOTTOM, Unit::Plain);
    for (row, g) in groups.iter().enumerate() {
        let cy = top + ROW_H * row as f64;
        svg.text(
            LABEL_W - 8.0,
            cy + ROW_H / 2.0 + 4.0,
            &[("class", &"label end")],
            &format!("{} / {}", short(&g.agent, 20), g.condition),
        );
        let mut at = 0.0;
        for (i, k) in ACTION_KINDS.iter().enumerate() {
            let v = g.actions.get(k).copied().unwrap_or(0.0);
            if v <= 0.0 {
                continue;
            }
            svg.with_title(
                "rect",
                &[
                    ("x", &N(x.at(at))),
                    ("y", &N(cy + 3.0)),
                    ("width", &N(x.at(at + v) - x.at(at))),
                    ("height", &N(ROW_H - 6.0)),
                    ("class", &action_class(i)),
                ],
                &format!(
                    "{} / {}: {} {v:.1} per trial",
                    g.agent,
                    g.condition,
                    action_name(*k)
                ),
            );
            at += v;
        }
        if at == 0.0 {
            svg.text(
                LABEL_W + 4.0,
                cy + ROW_H / 2.0 + 4.0,
                &[("class", &"note")],
                "no actions",
            );
        }
    }
    svg.finish(
        &format!("actions-{track}"),
        &format!("action distribution, {track}"),
    )
}

/// Mean score per configuration (rows: agent and condition) and case (columns); each cell links
/// to its first attempt in the trajectory viewer.
pub fn heatmap(report: &Report, track: Track) -> String {
    let cells: Vec<_> = report.cells.iter().filter(|c| c.track == track).collect();
    let rows: std::collections::BTreeSet<(&str, Condition)> = cells
        .iter()
        .map(|c| (c.agent.as_str(), c.condition.clone()))
        .collect();
    let rows: Vec<_> = rows.into_iter().collect();
    let cases: Vec<&str> = report.cases.iter().map(|c| c.id.as_str()).collect();
    let cell_w = (500.0 / cases.len().max(1) as f64).clamp(4.0, 40.0);
    let labels = cell_w >= 12.0;
    let header = if labels { 150.0 } else { 30.0 };
    let width = LABEL_W + cell_w * cases.len() as f64 + RIGHT + 60.0;
    let height = header + ROW_H * rows.len() as f64 + 20.0;
    let mut svg = Svg::new(width, height);
    svg.text(
        LABEL_W,
        16.0,
        &[("class", &"caption")],
        &format!("{track}: mean score per case (click a cell to open its trial)"),
    );
    if labels {
        for (j, case) in cases.iter().enumerate() {
            let cx = LABEL_W + cell_w * (j as f64 + 0.5) + 4.0;
            svg.text(
                cx,
                header - 6.0,
                &[
                    ("class", &"small"),
                    (
                        "transform",
                        &format!("rotate(-60 {} {})", N(cx), N(header - 6.0)),
                    ),
                ],
                case,
            );
        }
    }
    for (i, (agent, condition)) in rows.iter().enumerate() {
        let y = header + ROW_H * i as f64;
        svg.text(
            LABEL_W - 8.0,
            y + ROW_H / 2.0 + 4.0,
            &[("class", &"label end")],
            &format!("{} / {condition}", short(agent, 20)),
        );
        for (j, case) in cases.iter().enumerate() {
            let Some(c) = cells
                .iter()
                .find(|c| c.agent == *agent && c.condition == *condition && c.case == *case)
            else {
                continue;
            };
            let trial = format!("#trial={agent}/{case}/{track}/{condition}/1");
            let fill = c.mean.map_or("#bbbbbb".to_string(), score_colour);
            svg.open("a", &[("href", &trial)]);
            svg.with_title(
                "rect",
                &[
                    ("x", &N(LABEL_W + cell_w * j as f64)),
                    ("y", &N(y + 1.0)),
                    ("width", &N(cell_w - 1.0)),
                    ("height", &N(ROW_H - 2.0)),
                    ("fill", &fill),
                    ("class", &"cell"),
                ],
                &format!(
                    "{agent} / {condition} on {case}: {} over {} attempts",
                    c.mean
                        .map_or("infra error".into(), |m| format!("{}%", pct(m))),
                    c.attempts
                ),
            );
            svg.close("a");
        }
    }
    let lx = LABEL_W + cell_w * cases.len() as f64 + 12.0;
    for k in 0..=4 {
        let v = f64::from(k) / 4.0;
        let ly = header + 14.0 * f64::from(4 - k);
        svg.leaf(
            "rect",
            &[
                ("x", &N(lx)),
                ("y", &N(ly)),
                ("width", &12),
                ("height", &12),
                ("fill", &score_colour(v)),
            ],
        );
        svg.text(
            lx + 16.0,
            ly + 10.0,
            &[("class", &"small")],
            &format!("{}%", pct(v)),
        );
    }
    svg.finish(
        &format!("heatmap-{track}"),
        &format!("per-case heat map, {track}"),
    )
}
