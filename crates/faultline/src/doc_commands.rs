//! Every command line the README and docs/ show parses with this CLI, so the two cannot drift
//! apart: shell blocks of the Markdown files, inline `faultline ...` spans that are not synopses,
//! the cluster examples' scripts, and the exec-form command lists of their manifests.

use crate::Cli;
use clap::Parser;
use clap::error::ErrorKind;
use std::path::{Path, PathBuf};

/// A command line found in a document, and where.
#[derive(Debug)]
struct Found {
    at: String,
    words: Vec<String>,
    /// Found in running text, where a span may name a command without all its arguments
    /// (`faultline grade` re-grades...): only unknown commands, options and values count there.
    inline: bool,
}

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn documents() -> Vec<PathBuf> {
    let mut files = vec![repository().join("README.md")];
    for entry in walkdir::WalkDir::new(repository().join("docs")) {
        let entry = entry.expect("docs/ is readable");
        if entry.file_type().is_file() {
            files.push(entry.into_path());
        }
    }
    files.sort();
    files
}

/// Words of a shell line up to a comment, or `None` for a line that is not a faultline command.
fn command_words(line: &str) -> Option<Vec<String>> {
    let line = line.trim().trim_start_matches("$ ");
    let mut words: Vec<String> = shlex::split(line)?
        .into_iter()
        .take_while(|w| !w.starts_with('#'))
        .collect();
    // Leading variable assignments (`FAULTLINE_MODEL=x faultline run`) and `exec`.
    while words
        .first()
        .is_some_and(|w| w == "exec" || (w.contains('=') && !w.starts_with('-')))
    {
        words.remove(0);
    }
    match words.first().map(String::as_str) {
        Some("faultline") => Some(words),
        // Ours when it names the package or passes arguments on (`cargo run --release -- run`);
        // a bare `cargo run` in a case's generator directory runs that crate.
        Some("cargo")
            if words.get(1).is_some_and(|w| w == "run")
                && words.iter().any(|w| w == "--" || w == "faultline") =>
        {
            Some(words)
        }
        _ => None,
    }
}

/// Shell lines with their continuations joined, numbered by their first line.
fn shell_lines<'a>(lines: impl Iterator<Item = (usize, &'a str)>) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut open: Option<(usize, String)> = None;
    for (n, line) in lines {
        let (number, mut text) = open.take().unwrap_or((n, String::new()));
        match line.trim_end().strip_suffix('\\') {
            Some(head) => {
                text.push_str(head);
                text.push(' ');
                open = Some((number, text));
            }
            None => {
                text.push_str(line);
                out.push((number, text));
            }
        }
    }
    out.extend(open);
    out
}

fn find_commands(path: &Path, text: &str) -> Vec<Found> {
    let name = path
        .strip_prefix(repository())
        .unwrap_or(path)
        .display()
        .to_string();
    let numbered = text.lines().enumerate().map(|(i, l)| (i + 1, l));
    let mut found = Vec::new();
    let mut push = |n: usize, words: Vec<String>, inline: bool| {
        found.push(Found {
            at: format!("{name}:{n}"),
            words,
            inline,
        })
    };
    match path.extension().and_then(|e| e.to_str()) {
        Some("md") => {
            let mut in_block = false;
            let mut shell = false;
            let mut block = Vec::new();
            for (n, line) in numbered {
                if let Some(info) = line.trim_start().strip_prefix("```") {
                    if in_block {
                        if shell {
                            for (m, l) in shell_lines(block.drain(..)) {
                                if let Some(w) = command_words(&l) {
                                    push(m, w, false);
                                }
                            }
                        }
                        block.clear();
                    } else {
                        shell = matches!(info.trim(), "" | "sh" | "bash" | "shell" | "console");
                    }
                    in_block = !in_block;
                } else if in_block {
                    block.push((n, line));
                } else {
                    // Inline spans; a synopsis (`[--all|CASE...]`) is notation, not a command.
                    for span in line.split('`').skip(1).step_by(2) {
                        if !span.contains(['[', '|', '<', '…'])
                            && !span.contains("...")
                            && let Some(w) = command_words(span)
                        {
                            push(n, w, true);
                        }
                    }
                }
            }
        }
        Some("yaml" | "yml") => {
            for (n, line) in numbered {
                let Some((_, list)) = line.split_once(':') else {
                    continue;
                };
                let list = list.trim();
                if list.starts_with('[') && list.contains("\"faultline\"") {
                    let words: Vec<String> = serde_json::from_str(list)
                        .unwrap_or_else(|e| panic!("{name}:{n}: not a JSON list: {e}"));
                    push(n, words, false);
                }
            }
        }
        _ => {
            for (n, line) in shell_lines(numbered) {
                if let Some(w) = command_words(&line) {
                    push(n, w, false);
                }
            }
        }
    }
    found
}

/// Why a command line would not run as written, or `None` when this CLI parses it. `partial`
/// allows missing required arguments.
fn check(words: &[String], partial: bool) -> Option<String> {
    let args: Vec<String> = if words[0] == "cargo" {
        let Some(split) = words.iter().position(|w| w == "--") else {
            return Some("`cargo run` without `--` before faultline's arguments".into());
        };
        let cargo = &words[..split];
        let picks_faultline = cargo
            .windows(2)
            .any(|w| matches!(w[0].as_str(), "-p" | "--package" | "--bin") && w[1] == "faultline");
        if !picks_faultline {
            return Some(
                "`cargo run` in this workspace needs `-p faultline` (it has several binaries)"
                    .into(),
            );
        }
        words[split + 1..].to_vec()
    } else {
        words[1..].to_vec()
    };
    match Cli::try_parse_from(std::iter::once("faultline".to_string()).chain(args)) {
        Ok(_) => None,
        Err(e)
            if partial
                && matches!(
                    e.kind(),
                    ErrorKind::MissingRequiredArgument
                        | ErrorKind::MissingSubcommand
                        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                ) =>
        {
            None
        }
        // A path of the reader's machine (`--agent-mount /opt/my-scaffold`) is checked when the
        // command runs there, not here.
        Err(e)
            if e.kind() == ErrorKind::ValueValidation
                && e.to_string().contains("no such file or directory") =>
        {
            None
        }
        Err(e) => Some(e.to_string()),
    }
}

#[test]
fn every_documented_command_parses() {
    let mut found = Vec::new();
    for path in documents() {
        let text = std::fs::read_to_string(&path).unwrap();
        found.extend(find_commands(&path, &text));
    }
    // A broken extractor would find nothing and pass; the docs hold dozens of commands.
    assert!(found.len() >= 30, "only {} commands found", found.len());
    for place in [
        "README.md",
        "docs/cluster/job.yaml",
        "docs/cluster/sweep.sbatch",
    ] {
        assert!(
            found.iter().any(|f| f.at.starts_with(place)),
            "no command found in {place}"
        );
    }
    let broken: Vec<String> = found
        .iter()
        .filter_map(|f| {
            check(&f.words, f.inline).map(|why| format!("{}: {}\n  {why}", f.at, f.words.join(" ")))
        })
        .collect();
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn commands_that_would_not_run_are_caught() {
    let found = find_commands(
        Path::new("x.md"),
        "```sh\ncargo run --release -- run --all\nfaultline run \\\n  --no-such-flag\n```\n\
         Run `faultline cases list --tier 1` or `faultline run [CASE...]`.\n",
    );
    let words: Vec<_> = found.iter().map(|f| f.words.join(" ")).collect();
    assert_eq!(
        words,
        [
            "cargo run --release -- run --all",
            "faultline run --no-such-flag",
            "faultline cases list --tier 1"
        ]
    );
    assert!(
        check(&found[0].words, false)
            .unwrap()
            .contains("-p faultline")
    );
    assert!(
        check(&found[1].words, false)
            .unwrap()
            .contains("--no-such-flag")
    );
    assert_eq!(check(&found[2].words, true), None);
    // A span may name a command without its required arguments; a shell line may not.
    let grade = ["faultline".to_string(), "grade".to_string()];
    assert_eq!(check(&grade, true), None);
    assert!(check(&grade, false).is_some());
    let yaml = find_commands(
        Path::new("job.yaml"),
        "command: [\"faultline\", \"run\", \"--out\", \"/results/shard-$(JOB_COMPLETION_INDEX)\"]\n",
    );
    assert_eq!(yaml.len(), 1);
    assert_eq!(check(&yaml[0].words, false), None);
}
