//! External providers: a user's program, run in a sandbox that holds what an agent is given and
//! nothing else. It sees the buggy crate read-only at `/workspace`, the symptom at
//! `/input/symptom.md` and a writable `/output`, runs offline, and never sees the oracle, the
//! fixed sources, the case directory or the bundle. Whatever it tries beyond that fails inside
//! the sandbox, and its log tail is kept in the bundle's record.

use anyhow::{Context, Result, bail};
use faultline_corpus::{BundleFile, DataDir, PreparedCase, TemplateKind};
use faultline_sandbox::{ExecRequest, Mount, Sandbox, SandboxSpec, Toolchain, give_to_sandbox};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where the crate is inside the provider's sandbox (read-only).
pub const GUEST_WORKSPACE: &str = "/workspace";
/// Where the symptom is inside the provider's sandbox.
pub const GUEST_SYMPTOM: &str = "/input/symptom.md";
/// Where the provider writes its Markdown files.
pub const GUEST_OUTPUT: &str = "/output";
/// Where the provider's program is inside its sandbox.
const GUEST_PROGRAM: &str = "/provider/program";

/// Characters of the provider's output kept in the record.
const LOG_TAIL: usize = 2_000;

/// A user's provider: a name for its condition and an executable file (a script with a `#!`
/// line works).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalProvider {
    /// The condition's name.
    pub name: String,
    /// The program on the host; mounted read-only into the sandbox.
    pub program: PathBuf,
    /// Seconds it may run per case.
    pub timeout: Duration,
}

/// What one run of a provider left.
pub struct Output {
    /// The Markdown files it wrote, sorted by name.
    pub files: Vec<BundleFile>,
    /// Why the run does not count: a failure, a timeout, a file that is not Markdown.
    pub failure: Option<String>,
    /// The end of its standard output and error.
    pub log_tail: String,
}

impl ExternalProvider {
    /// Parses `NAME=PATH`, as `--provider` takes it.
    pub fn parse(spec: &str) -> Result<ExternalProvider> {
        let (name, path) = spec
            .split_once('=')
            .context("a provider is written NAME=PROGRAM")?;
        let condition: faultline_schema::Condition = name.parse().map_err(anyhow::Error::msg)?;
        if !matches!(
            condition.kind(),
            faultline_schema::ConditionKind::External(_)
        ) {
            bail!("`{name}` is a built-in condition; give the provider another name");
        }
        let program = std::fs::canonicalize(path)
            .with_context(|| format!("the provider program {path} cannot be found"))?;
        Ok(ExternalProvider {
            name: name.to_string(),
            program,
            timeout: Duration::from_secs(600),
        })
    }

    /// The version in the cache key: the program's bytes, so an edited program runs again.
    pub fn version(&self) -> Result<String> {
        let bytes = std::fs::read(&self.program)
            .with_context(|| format!("reading {}", self.program.display()))?;
        Ok(format!(
            "external:{}:{}",
            self.name,
            &hex::encode(Sha256::digest(&bytes))[..16]
        ))
    }

    /// Runs the provider on one prepared case.
    pub async fn run(
        &self,
        prepared: &PreparedCase,
        symptom: &str,
        data: &DataDir,
        toolchain: &Toolchain,
    ) -> Result<Output> {
        let scratch = data.scratch_dir("provider")?;
        let input = scratch.path().join("input");
        let output = scratch.path().join("output");
        std::fs::create_dir_all(&input)?;
        std::fs::create_dir_all(&output)?;
        std::fs::write(input.join("symptom.md"), symptom)?;
        give_to_sandbox(&output).context("giving the sandbox its output directory")?;
        let agent = prepared.template(TemplateKind::Agent);
        let spec = SandboxSpec::new(Some(toolchain.clone()), GUEST_WORKSPACE)
            .mount(Mount::ro(&agent.workspace, GUEST_WORKSPACE))
            .mount(Mount::ro(&input, "/input"))
            .mount(Mount::ro(&self.program, GUEST_PROGRAM))
            .mount(Mount::rw(&output, GUEST_OUTPUT))
            .env("FAULTLINE_SYMPTOM", GUEST_SYMPTOM)
            .env("FAULTLINE_OUTPUT", GUEST_OUTPUT)
            .env("FAULTLINE_WORKSPACE", GUEST_WORKSPACE);
        let sandbox = Sandbox::new(spec).context("setting up the provider's sandbox")?;
        let out = sandbox
            .exec(&ExecRequest::argv([GUEST_PROGRAM], self.timeout).cap(LOG_TAIL * 2))
            .await
            .context("running the provider")?;
        let mut log = out.stdout.text.clone();
        log.push_str(&out.stderr.text);
        let log_tail: String = {
            let chars: Vec<char> = log.chars().collect();
            chars[chars.len().saturating_sub(LOG_TAIL)..]
                .iter()
                .collect()
        };
        let failure = if out.timed_out {
            Some(format!(
                "the provider ran past {} s",
                self.timeout.as_secs()
            ))
        } else if out.exit_code != Some(0) {
            Some(format!(
                "the provider failed (exit status {})",
                out.exit_code
                    .map_or_else(|| "none".to_string(), |c| c.to_string())
            ))
        } else {
            None
        };
        let (files, bad) = read_output(&output);
        Ok(Output {
            files,
            failure: failure.or(bad),
            log_tail,
        })
    }
}

/// The Markdown files of the output directory; anything else (a directory, a link, another
/// extension) is a failure named in the second value.
fn read_output(dir: &Path) -> (Vec<BundleFile>, Option<String>) {
    let mut files = Vec::new();
    let mut bad = None;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (
            files,
            Some("the provider's output directory is gone".into()),
        );
    };
    let mut entries: Vec<_> = entries.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        let is_file = e.file_type().is_ok_and(|t| t.is_file());
        let text = is_file
            .then(|| std::fs::read_to_string(e.path()).ok())
            .flatten();
        match text {
            Some(text) if name.ends_with(".md") => files.push(BundleFile { name, text }),
            _ => {
                bad.get_or_insert(format!(
                    "the provider wrote `{name}`, which is not a UTF-8 Markdown file (*.md)"
                ));
            }
        }
    }
    (files, bad)
}
