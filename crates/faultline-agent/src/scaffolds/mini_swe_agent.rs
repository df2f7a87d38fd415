//! mini-swe-agent (the scaffold both seed benchmarks ran their models through) as a first-class
//! agent: [`VERSION`] from the Python package registry, installed once into the data directory,
//! driven by our `mini_swe_agent.py` with its bundled `mini.yaml` prompts and bash tool, inside
//! the sandbox, against the gateway. Its `traj.json` is read back to give each of our steps (one
//! per model call) the command the agent ran and what it saw.

use crate::ExternalAgent;
use crate::record::Recorder;
use crate::scaffolds::Scaffold;
use anyhow::{Context, Result, bail};
use faultline_schema::trajectory::{Action, ActionSource};
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The release used; results name it in the agent's settings.
pub const VERSION: &str = "2.4.6";

/// What mini-swe-agent's agent submits with: the output after this line is its submission.
pub const SENTINEL: &str = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT";

/// Where the install records the Python installation its environment runs on, which the
/// sandbox must also mount when it is not under `/usr` (a pyenv or uv Python, say).
const BASE_PREFIX_FILE: &str = "base_prefix";

/// Our driver, written next to the installed package.
const DRIVER: &str = include_str!("mini_swe_agent.py");

/// Where the release is installed: `<data>/agents/mini-swe-agent-<VERSION>`.
pub fn install_dir(data_root: &Path) -> PathBuf {
    data_root
        .join("agents")
        .join(format!("mini-swe-agent-{VERSION}"))
}

/// Installs the release into the data directory unless it is there (a virtual environment of the
/// host's `python3`, then `pip install mini-swe-agent==VERSION`, which needs the Python package
/// registry); returns its directory. A half-finished install is never used: it is built beside
/// its final place and renamed into it.
pub fn install(data_root: &Path) -> Result<PathBuf> {
    let dir = install_dir(data_root);
    let driver = dir.join("driver.py");
    if dir.join(BASE_PREFIX_FILE).exists() {
        // The driver is ours and may change between faultline versions; the package does not.
        if std::fs::read_to_string(&driver).ok().as_deref() != Some(DRIVER) {
            faultline_schema::io::write_atomic(&driver, DRIVER.as_bytes())?;
        }
        return Ok(dir);
    }
    let parent = dir.parent().expect("has a parent");
    std::fs::create_dir_all(parent)?;
    let building = tempfile::Builder::new()
        .prefix(".mini-swe-agent-")
        .tempdir_in(parent)?;
    eprintln!(
        "installing mini-swe-agent {VERSION} into {} (once; needs the Python package registry)",
        dir.display()
    );
    let venv = building.path().join("venv");
    run(Command::new("python3").args(["-m", "venv"]).arg(&venv)).context(
        "creating a virtual environment for mini-swe-agent (is python3-venv installed?)",
    )?;
    run(Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", "--disable-pip-version-check"])
        .arg(format!("mini-swe-agent=={VERSION}")))
    .context("installing mini-swe-agent with pip")?;
    std::fs::write(building.path().join("driver.py"), DRIVER)?;
    let base = Command::new(venv.join("bin/python"))
        .args(["-c", "import sys; print(sys.base_prefix)"])
        .output()
        .context("asking the environment's python for its base installation")?;
    std::fs::write(
        building.path().join(BASE_PREFIX_FILE),
        String::from_utf8_lossy(&base.stdout).trim(),
    )?;
    // The environment's scripts name the path it was built at, but only `venv/bin/python` (a
    // link to the host's python3, which finds the environment beside itself) is ever run.
    let built = building.keep();
    match std::fs::rename(&built, &dir) {
        Ok(()) => Ok(dir),
        // Another run installed it meanwhile.
        Err(_) if dir.join(BASE_PREFIX_FILE).exists() => {
            let _ = std::fs::remove_dir_all(&built);
            Ok(dir)
        }
        Err(e) => Err(e).with_context(|| format!("moving the install to {}", dir.display())),
    }
}

fn run(cmd: &mut Command) -> Result<()> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// The external agent that runs the release installed at `dir`, in the sandbox.
pub fn agent(dir: &Path, model: Option<crate::GatewayModel>) -> ExternalAgent {
    let python = dir.join("venv/bin/python");
    let driver = dir.join("driver.py");
    let same_path = |host: PathBuf| crate::AgentMount {
        guest: host.to_string_lossy().into_owned(),
        host,
    };
    let mut mounts = vec![same_path(dir.to_path_buf())];
    if let Ok(base) = std::fs::read_to_string(dir.join(BASE_PREFIX_FILE))
        && !base.starts_with("/usr")
        && Path::new(&base).is_dir()
    {
        mounts.push(same_path(PathBuf::from(base)));
    }
    ExternalAgent {
        name: "mini-swe-agent".into(),
        command: format!("'{}' '{}'", python.display(), driver.display()),
        model,
        mounts,
        on_host: false,
        scaffold: Scaffold::MiniSweAgent,
    }
}

/// Gives each recorded step the command mini-swe-agent ran after that model call and what the
/// command printed, from its `traj.json`; a call whose reply it could not use gets its format
/// error. Calls are matched by the provider's response id, which both records keep.
pub fn attach_actions(traj: &Value, rec: &mut Recorder) {
    let messages = traj["messages"].as_array().map_or(&[][..], Vec::as_slice);
    let mut by_response: HashMap<String, (Option<Action>, Option<String>)> = HashMap::new();
    for (i, message) in messages.iter().enumerate() {
        let extra = &message["extra"];
        let Some(id) = extra["response"]["id"].as_str() else {
            continue;
        };
        if message["role"] == "assistant" {
            let commands: Vec<&str> = extra["actions"]
                .as_array()
                .map_or(&[][..], Vec::as_slice)
                .iter()
                .filter_map(|a| a["command"].as_str())
                .collect();
            let results: Vec<&Value> = messages[i + 1..]
                .iter()
                .take_while(|m| m["role"] == "tool")
                .collect();
            let output: String = results
                .iter()
                .filter_map(|m| m["extra"]["raw_output"].as_str())
                .collect();
            let exit_code = results
                .last()
                .and_then(|m| m["extra"]["returncode"].as_i64())
                .and_then(|c| i32::try_from(c).ok());
            let action = (!commands.is_empty()).then(|| {
                let command = commands.join("\n");
                Action {
                    kind: crate::classify::classify(&command),
                    command,
                    source: ActionSource::ToolCall,
                    exit_code,
                    timed_out: false,
                    output,
                    elided_chars: 0,
                    duration_secs: 0.0,
                    limit: None,
                }
            });
            by_response.insert(id.to_string(), (action, None));
        } else if extra["interrupt_type"] == "FormatError" {
            let error = message["content"].as_str().unwrap_or_default().to_string();
            by_response.insert(id.to_string(), (None, Some(error)));
        }
    }
    for index in 0..rec.trajectory.steps.len() {
        let id = rec.trajectory.steps[index]
            .model
            .as_ref()
            .and_then(|m| m.request.as_ref())
            .and_then(|r| r.response_id.clone());
        if let Some((action, format_error)) = id.and_then(|id| by_response.remove(&id)) {
            rec.attach(index, action, format_error);
        }
    }
}
