//! The system and task prompts, as Jinja templates.
//!
//! Variables available to both templates:
//!
//! | variable | value |
//! |---|---|
//! | `track` | `diagnose`, `repair`, `reproduce` or `build` |
//! | `condition` | `symptom` or `context` |
//! | `crate_name` | the crate under `/workspace` |
//! | `symptom` | the text of `symptom.md`; on the build track, the task's text |
//! | `bundle` | list of `{name, text}`; empty in the `symptom` condition |
//! | `sentinel` | the first output line that marks a submission |
//! | `tool_mode` | true when the model acts through native tool calls |
//! | `step_limit`, `command_timeout_secs`, `output_cap_chars` | the trial's limits |
//! | `diagnosis_line_budget` | how many named lines a diagnosis's score reads (agents are told the rule they are scored by) |

use anyhow::{Context, Result};
use faultline_corpus::BundleFile;
use faultline_schema::Task;
use faultline_schema::diagnosis::DIAGNOSIS_LINE_BUDGET;
use minijinja::Environment;
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::path::Path;

/// The first line of a command's output that marks it as the submission.
pub const SUBMIT_SENTINEL: &str = "FAULTLINE_SUBMIT";

const DEFAULT_SYSTEM: &str = include_str!("prompts/system.j2");
const DEFAULT_TASK: &str = include_str!("prompts/task.j2");

/// The two prompt templates.
#[derive(Debug, Clone)]
pub struct Templates {
    /// The system prompt template.
    pub system: String,
    /// The task (first user message) template.
    pub task: String,
}

impl Default for Templates {
    fn default() -> Self {
        Templates {
            system: DEFAULT_SYSTEM.to_string(),
            task: DEFAULT_TASK.to_string(),
        }
    }
}

#[derive(Serialize)]
struct BundleVar<'a> {
    name: &'a str,
    text: &'a str,
}

#[derive(Serialize)]
struct Vars<'a> {
    track: &'a str,
    condition: &'a str,
    crate_name: &'a str,
    symptom: &'a str,
    bundle: Vec<BundleVar<'a>>,
    sentinel: &'a str,
    tool_mode: bool,
    step_limit: u32,
    command_timeout_secs: u64,
    output_cap_chars: usize,
    diagnosis_line_budget: u32,
}

/// The rendered prompts of one trial.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompts {
    /// The system prompt.
    pub system: String,
    /// The first user message.
    pub task: String,
}

impl Templates {
    /// Loads templates from files; a missing path keeps the default.
    pub fn load(system: Option<&Path>, task: Option<&Path>) -> Result<Templates> {
        let read = |p: &Path| {
            std::fs::read_to_string(p).with_context(|| format!("reading template {}", p.display()))
        };
        let mut t = Templates::default();
        if let Some(p) = system {
            t.system = read(p)?;
        }
        if let Some(p) = task {
            t.task = read(p)?;
        }
        Ok(t)
    }

    /// A short hash of both templates, recorded with every trial.
    pub fn fingerprint(&self) -> String {
        let mut h = Sha256::new();
        h.update(self.system.as_bytes());
        h.update([0]);
        h.update(self.task.as_bytes());
        hex::encode(&h.finalize()[..8])
    }

    /// Renders both prompts for a task.
    pub fn render(
        &self,
        task: &Task,
        symptom: &str,
        bundle: &[BundleFile],
        tool_mode: bool,
    ) -> Result<Prompts> {
        self.render_submitting_with(task, symptom, bundle, tool_mode, SUBMIT_SENTINEL)
    }

    /// [`Self::render`] for a scaffold that has its own word for submitting (mini-swe-agent
    /// ends on `COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`).
    pub fn render_submitting_with(
        &self,
        task: &Task,
        symptom: &str,
        bundle: &[BundleFile],
        tool_mode: bool,
        sentinel: &str,
    ) -> Result<Prompts> {
        let mut env = Environment::new();
        env.set_syntax(
            minijinja::syntax::SyntaxConfig::builder()
                .trim_blocks(true)
                .build()
                .expect("the default delimiters are valid"),
        );
        env.add_template("system", &self.system)
            .context("parsing the system prompt template")?;
        env.add_template("task", &self.task)
            .context("parsing the task prompt template")?;
        let vars = Vars {
            track: task.track.as_str(),
            condition: task.condition.as_str(),
            crate_name: &task.crate_name,
            symptom: symptom.trim(),
            bundle: bundle
                .iter()
                .filter(|_| task.condition.has_bundle())
                .map(|f| BundleVar {
                    name: &f.name,
                    text: f.text.trim(),
                })
                .collect(),
            sentinel,
            tool_mode,
            step_limit: task.limits.steps,
            command_timeout_secs: task.limits.command_timeout_secs,
            output_cap_chars: task.limits.output_cap_chars,
            diagnosis_line_budget: DIAGNOSIS_LINE_BUDGET,
        };
        let ctx = minijinja::Value::from(minijinja::value::Serde(&vars));
        let render = |name: &str| -> Result<String> {
            Ok(env
                .get_template(name)
                .expect("template was added")
                .render(&ctx)
                .with_context(|| format!("rendering the {name} prompt"))?
                .trim()
                .to_string())
        };
        Ok(Prompts {
            system: render("system")?,
            task: render("task")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use faultline_schema::{Condition, Limits, Track};

    fn task(track: Track, condition: Condition) -> Task {
        Task {
            schema_version: 1,
            trial_id: "c/x/y/1".into(),
            case_id: "c".into(),
            track,
            condition,
            attempt: 1,
            seed: 1,
            crate_name: "kv".into(),
            bundle_files: vec![],
            limits: Limits::default(),
        }
    }

    #[test]
    fn the_bundle_appears_only_in_a_condition_with_one() {
        let bundle = vec![BundleFile {
            name: "log.md".into(),
            text: "node 2 timed out".into(),
        }];
        let t = Templates::default();
        let with = t
            .render(
                &task(Track::Repair, Condition::curated()),
                "it hangs",
                &bundle,
                true,
            )
            .unwrap();
        let without = t
            .render(
                &task(Track::Repair, Condition::symptom()),
                "it hangs",
                &bundle,
                true,
            )
            .unwrap();
        let from_a_provider = t
            .render(
                &task(Track::Repair, "static".parse().unwrap()),
                "it hangs",
                &bundle,
                true,
            )
            .unwrap();
        assert!(with.task.contains("node 2 timed out"));
        assert!(from_a_provider.task.contains("node 2 timed out"));
        assert!(!without.task.contains("node 2 timed out"));
        assert!(with.task.contains("it hangs") && without.task.contains("it hangs"));
        assert!(with.task.contains(SUBMIT_SENTINEL));
    }

    #[test]
    fn each_track_has_its_own_submission() {
        let t = Templates::default();
        let render = |tr| {
            t.render(&task(tr, Condition::symptom()), "s", &[], false)
                .unwrap()
        };
        assert!(render(Track::Diagnose).task.contains("diagnosis.json"));
        assert!(
            render(Track::Diagnose)
                .task
                .contains(&format!("first {DIAGNOSIS_LINE_BUDGET} lines"))
        );
        assert!(render(Track::Reproduce).task.contains("faultline_repro.rs"));
        assert!(render(Track::Reproduce).task.contains("graded `illegal`"));
        assert!(!render(Track::Repair).task.contains("illegal"));
        assert!(render(Track::Repair).task.contains("changes you made"));
        assert!(render(Track::Repair).system.contains("```bash"));
        let build = render(Track::Build);
        assert!(build.task.contains("<task>\ns\n</task>"), "{}", build.task);
        assert!(build.task.contains("hidden") || build.task.contains("will not see"));
        assert!(!build.task.contains("user reported"));
        assert!(build.system.contains("building") && !build.system.contains("warm"));
    }

    #[test]
    fn a_broken_template_is_an_error() {
        let t = Templates {
            system: "{% if %}".into(),
            task: String::new(),
        };
        let err = t
            .render(&task(Track::Repair, Condition::symptom()), "s", &[], true)
            .unwrap_err();
        assert!(format!("{err:#}").contains("system prompt template"));
    }
}
