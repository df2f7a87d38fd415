//! The bundle check: a case's generator (`context/generator/`) is built against the buggy crate
//! and run once per bundle file, in the sandbox and offline like every build, and what it prints
//! must be the committed file byte for byte. A bundle that drifted from the scenario it claims
//! to show is refused.
//!
//! The generator builds in a copy of the agent template's workspace (the buggy crate, warm),
//! with the dependencies [`generator_deps`] vendored for it, from a copy of the case's generator
//! and oracle laid out as in the case directory, so it can include the oracle's scenario by path.

use anyhow::Result;
use faultline_corpus::workspace::generator::{GeneratorUnusable, generator_deps, stage};
use faultline_corpus::workspace::layout::GUEST_WORKSPACE;
use faultline_corpus::{Case, DataDir, PreparedCase, Template, TemplateKind};
use faultline_sandbox::{ExecOutput, ExecRequest, Mount, Sandbox, Toolchain};
use faultline_schema::validation::{BundleCheck, BundleStatus};
use std::time::{Duration, Instant};

/// Where the staged case (its `context/generator/` and `oracle/`) is mounted, read-only.
const GUEST_CASE: &str = "/case";

/// How long the generator's build may take.
const BUILD_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// How long one run of the generator may take.
const RUN_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// Output kept from a run: far more than any bundle within its budget.
const OUTPUT_CAP: usize = 1_000_000;

/// Lines shown around the first difference of a drifted file.
const SHOWN_LINES: usize = 3;

/// Builds and runs the case's generator and compares its output with the bundle: the check for
/// the report and the problems it found, in words. `Err` is an infrastructure failure only.
pub async fn check_bundle(
    case: &Case,
    prepared: &PreparedCase,
    data: &DataDir,
    toolchain: &Toolchain,
) -> Result<(BundleCheck, Vec<String>)> {
    let started = Instant::now();
    let mut check = BundleCheck {
        status: BundleStatus::Failed,
        drifted: Vec::new(),
        reason: None,
        build_secs: 0.0,
        secs: 0.0,
    };
    let mut problems = Vec::new();
    match build_and_compare(case, prepared, data, toolchain, &mut check).await? {
        Ok(drifts) => {
            check.status = if drifts.is_empty() {
                BundleStatus::Reproduced
            } else {
                BundleStatus::Drifts
            };
            for (file, shown) in drifts {
                problems.push(format!(
                    "context/{file} is not what its generator prints on the buggy version; \
                     regenerate it (`cargo run -q > ../{file}` in context/generator) or fix the \
                     generator. {shown}"
                ));
                check.drifted.push(file);
            }
        }
        Err(reason) => {
            // A missing generator directory is already a problem of the static checks.
            if faultline_corpus::workspace::generator::generator_dir(case).is_dir() {
                problems.push(format!("the bundle generator {reason}"));
            }
            check.reason = Some(reason);
        }
    }
    check.secs = started.elapsed().as_secs_f64();
    Ok((check, problems))
}

/// The drifted files with their first differences, or why the generator could not be built or
/// run (`Ok(Err(..))`); `Err` is an infrastructure failure.
async fn build_and_compare(
    case: &Case,
    prepared: &PreparedCase,
    data: &DataDir,
    toolchain: &Toolchain,
    check: &mut BundleCheck,
) -> Result<Result<Vec<(String, String)>, String>> {
    let build_started = Instant::now();
    let deps = match generator_deps(case, prepared, data) {
        Ok(deps) => deps,
        Err(e) => {
            return match e.downcast::<GeneratorUnusable>() {
                Ok(unusable) => Ok(Err(format!("cannot be used: {unusable}"))),
                Err(e) => Err(e),
            };
        }
    };
    prepared.check(TemplateKind::Agent)?;
    let scratch = data.scratch_dir("generator")?;
    let workspace = scratch.path().join("workspace");
    prepared.copy_workspace(TemplateKind::Agent, &workspace)?;
    let staged = scratch.path().join("case");
    let generator = stage(case, &deps, &staged)?;
    let template = Template {
        workspace: workspace.clone(),
        vendor: deps.vendor,
        cargo: deps.cargo,
        oracle: None,
        shared: prepared.template(TemplateKind::Agent).shared.clone(),
    };
    let guest_generator = format!(
        "{GUEST_CASE}/{}",
        generator
            .strip_prefix(&staged)
            .expect("staged below the case copy")
            .display()
    );
    let sandbox = Sandbox::new(
        template
            .sandbox_spec(toolchain, &workspace, None)
            .mount(Mount::ro(&staged, GUEST_CASE))
            .env("CARGO_TARGET_DIR", format!("{GUEST_WORKSPACE}/target")),
    )?;
    let build = sandbox
        .exec(
            &ExecRequest::argv(
                [
                    "cargo",
                    "build",
                    "--offline",
                    "--locked",
                    "--message-format=json-render-diagnostics",
                ],
                BUILD_TIMEOUT,
            )
            .cap(OUTPUT_CAP)
            .workdir(&guest_generator),
        )
        .await?;
    check.build_secs = build_started.elapsed().as_secs_f64();
    if !build.success() {
        return Ok(Err(format!("does not build:\n{}", tail(&build))));
    }
    let executable = match executables(&build.stdout.text).as_slice() {
        [one] => one.clone(),
        [] => return Ok(Err("builds no executable".into())),
        many => {
            return Ok(Err(format!(
                "builds {} executables; keep one, which prints the bundle",
                many.len()
            )));
        }
    };
    let several = case.bundle.len() > 1;
    let mut drifts = Vec::new();
    for file in &case.bundle {
        let mut argv = vec![executable.clone()];
        if several {
            argv.push(file.name.clone());
        }
        let out = sandbox
            .exec(
                &ExecRequest::argv(argv, RUN_TIMEOUT)
                    .cap(OUTPUT_CAP)
                    .workdir(&guest_generator),
            )
            .await?;
        if !out.success() {
            let how = if out.timed_out {
                format!("ran out of its {} seconds", RUN_TIMEOUT.as_secs())
            } else {
                format!("exited with {:?}", out.exit_code)
            };
            return Ok(Err(format!(
                "{how} when printing context/{}:\n{}",
                file.name,
                tail(&out)
            )));
        }
        let committed = std::fs::read(case.dir.join("context").join(&file.name))?;
        if let Some(shown) = first_difference(&committed, &out) {
            drifts.push((file.name.clone(), shown));
        }
    }
    Ok(Ok(drifts))
}

/// Where the generated text first differs from the committed bytes, shown line by line, or
/// `None` when they are the same.
fn first_difference(committed: &[u8], out: &ExecOutput) -> Option<String> {
    let generated = &out.stdout;
    if generated.elided_chars > 0 {
        return Some(format!(
            "The generator printed {} characters, more than a bundle can hold.",
            generated.total_chars
        ));
    }
    if generated.lossy {
        return Some("The generator's output is not valid UTF-8.".into());
    }
    if committed == generated.text.as_bytes() {
        return None;
    }
    let committed = String::from_utf8_lossy(committed);
    let old: Vec<&str> = committed.split_inclusive('\n').collect();
    let new: Vec<&str> = generated.text.split_inclusive('\n').collect();
    let at = old
        .iter()
        .zip(&new)
        .position(|(a, b)| a != b)
        .unwrap_or(old.len().min(new.len()));
    let show = |lines: &[&str]| {
        let shown: Vec<String> = lines
            .iter()
            .skip(at)
            .take(SHOWN_LINES)
            .map(|l| format!("    {l:?}"))
            .collect();
        if shown.is_empty() {
            "    (end of file)".to_string()
        } else {
            shown.join("\n")
        }
    };
    Some(format!(
        "First difference at line {}:\n  committed:\n{}\n  generated:\n{}",
        at + 1,
        show(&old),
        show(&new)
    ))
}

/// The executables a build made, from cargo's JSON messages.
fn executables(messages: &str) -> Vec<String> {
    messages
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact")
        .filter_map(|m| m["executable"].as_str().map(str::to_string))
        .collect()
}

/// The end of what a command printed on standard error, for the reason of a failure.
fn tail(out: &ExecOutput) -> String {
    let chars: Vec<char> = out.stderr.text.trim_end().chars().collect();
    chars[chars.len().saturating_sub(2000)..].iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use faultline_sandbox::CapturedText;

    fn printed(text: &str) -> ExecOutput {
        ExecOutput {
            exit_code: Some(0),
            signal: None,
            timed_out: false,
            stdout: CapturedText {
                text: text.into(),
                total_chars: text.chars().count() as u64,
                total_bytes: text.len() as u64,
                elided_chars: 0,
                lossy: false,
            },
            stderr: CapturedText {
                text: String::new(),
                total_chars: 0,
                total_bytes: 0,
                elided_chars: 0,
                lossy: false,
            },
            duration: Duration::ZERO,
            process_limit_hit: false,
            memory_limit_hit: false,
            disk_limit_hit: false,
        }
    }

    #[test]
    fn the_same_bytes_do_not_differ() {
        assert_eq!(first_difference(b"a\nb\n", &printed("a\nb\n")), None);
    }

    #[test]
    fn the_first_differing_line_is_shown_from_both_sides() {
        let shown = first_difference(b"a\nb\nc\n", &printed("a\nB\nc\n")).unwrap();
        assert!(shown.contains("line 2"), "{shown}");
        assert!(shown.contains("\"b\\n\""), "{shown}");
        assert!(shown.contains("\"B\\n\""), "{shown}");
        assert!(!shown.contains("\"a\\n\""), "{shown}");
    }

    #[test]
    fn a_missing_final_newline_is_a_difference() {
        let shown = first_difference(b"a\nb\n", &printed("a\nb")).unwrap();
        assert!(shown.contains("line 2"), "{shown}");
        let shown = first_difference(b"a\n", &printed("a\nmore\n")).unwrap();
        assert!(
            shown.contains("line 2") && shown.contains("(end of file)"),
            "{shown}"
        );
    }
}
