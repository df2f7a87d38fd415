//! Scaffolds distributed as Python packages: a pinned release pip-installed once into its own
//! virtual environment under `<data>/agents/<name>-<version>/`, with our driver beside it, run in
//! the sandbox with the environment (and the Python installation it runs on) mounted read-only.

use crate::scaffolds::Scaffold;
use crate::{AgentMount, ExternalAgent, GatewayModel};
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where an install records the Python installation its environment runs on, which the sandbox
/// must also mount when it is not under `/usr` (a pyenv or uv Python, say).
const BASE_PREFIX_FILE: &str = "base_prefix";

/// A scaffold's pinned release and our driver for it.
#[derive(Debug, Clone, Copy)]
pub struct Package {
    /// The scaffold's name, as `--agent` takes it.
    pub name: &'static str,
    /// The distribution on the Python package registry.
    pub distribution: &'static str,
    /// The pinned release.
    pub version: &'static str,
    /// Our driver script.
    pub driver: &'static str,
    /// Which scaffold it is.
    pub scaffold: Scaffold,
}

impl Package {
    /// Where the release is installed.
    pub fn install_dir(&self, data_root: &Path) -> PathBuf {
        data_root
            .join("agents")
            .join(format!("{}-{}", self.name, self.version))
    }

    /// Installs the release into the data directory unless it is there (a virtual environment
    /// of the host's `python3`, then `pip install`, which needs the Python package registry);
    /// returns its directory. A half-finished install is never used: it is built beside its
    /// final place and renamed into it.
    pub fn install(&self, data_root: &Path) -> Result<PathBuf> {
        let dir = self.install_dir(data_root);
        let driver = dir.join("driver.py");
        if dir.join(BASE_PREFIX_FILE).exists() {
            // The driver is ours and may change between faultline versions; the package does not.
            if std::fs::read_to_string(&driver).ok().as_deref() != Some(self.driver) {
                faultline_schema::io::write_atomic(&driver, self.driver.as_bytes())?;
            }
            return Ok(dir);
        }
        let parent = dir.parent().expect("has a parent");
        std::fs::create_dir_all(parent)?;
        let building = tempfile::Builder::new()
            .prefix(&format!(".{}-", self.name))
            .tempdir_in(parent)?;
        eprintln!(
            "installing {} {} into {} (once; needs the Python package registry)",
            self.name,
            self.version,
            dir.display()
        );
        let venv = building.path().join("venv");
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv)).with_context(|| {
            format!(
                "creating a virtual environment for {} (is python3-venv installed?)",
                self.name
            )
        })?;
        run(Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", "--disable-pip-version-check"])
            .arg(format!("{}=={}", self.distribution, self.version)))
        .with_context(|| format!("installing {} with pip", self.name))?;
        std::fs::write(building.path().join("driver.py"), self.driver)?;
        let base = Command::new(venv.join("bin/python"))
            .args(["-c", "import sys; print(sys.base_prefix)"])
            .output()
            .context("asking the environment's python for its base installation")?;
        std::fs::write(
            building.path().join(BASE_PREFIX_FILE),
            String::from_utf8_lossy(&base.stdout).trim(),
        )?;
        // The environment's scripts name the path it was built at, but only `venv/bin/python`
        // (a link to the host's python3, which finds the environment beside itself) is run.
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

    /// The external agent that runs the release installed at `dir`, in the sandbox: our driver
    /// under the environment's python, both mounted where they are on the host.
    pub fn agent(&self, dir: &Path, model: Option<GatewayModel>) -> ExternalAgent {
        let python = dir.join("venv/bin/python");
        let driver = dir.join("driver.py");
        let same_path = |host: PathBuf| AgentMount {
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
            name: self.name.into(),
            command: format!("'{}' '{}'", python.display(), driver.display()),
            model,
            mounts,
            on_host: false,
            scaffold: self.scaffold,
        }
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
