//! The cluster examples in docs/cluster/ are what a cluster accepts: the Kubernetes manifests
//! pass Kubernetes' published schemas (the kubernetes-validate package, installed from the
//! Python package registry once under `target/`), and the Slurm scripts pass `bash -n` and
//! shellcheck. Each check is also shown to reject a broken copy.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn cluster_files(extension: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repository().join("docs/cluster"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == extension))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .{extension} file in docs/cluster");
    files
}

/// Output and success of a command, with a clear failure when it cannot start.
fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn the_slurm_scripts_pass_bash_and_shellcheck() {
    let tmp = tempfile::tempdir().unwrap();
    let broken = tmp.path().join("broken.sbatch");
    std::fs::write(
        &broken,
        "#!/bin/bash\ncd $FAULTLINE_DATA\nfaultline run --out $OUT\n",
    )
    .unwrap();
    let (ok, text) = run(Command::new("shellcheck").arg(&broken));
    assert!(
        !ok && text.contains("SC2086"),
        "shellcheck missed it: {text}"
    );
    for script in cluster_files("sbatch") {
        let (ok, text) = run(Command::new("bash").arg("-n").arg(&script));
        assert!(ok, "{}: {text}", script.display());
        let (ok, text) = run(Command::new("shellcheck")
            .arg("-s")
            .arg("bash")
            .arg(&script));
        assert!(
            ok,
            "{}: {text}\n(install shellcheck: apt-get install -y shellcheck)",
            script.display()
        );
    }
}

mod needs_pypi {
    use super::*;

    const VALIDATOR: &str = "kubernetes-validate==1.37.0";

    /// A virtual environment with the validator, made once and kept for later runs.
    fn validator_python() -> PathBuf {
        let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pypi");
        let dir = root.join("kubernetes-validate-1.37.0");
        let python = dir.join("bin/python");
        if python.exists() {
            return python;
        }
        std::fs::create_dir_all(&root).unwrap();
        let building = tempfile::Builder::new()
            .prefix(".kubernetes-validate-")
            .tempdir_in(&root)
            .unwrap();
        let (ok, text) = run(Command::new("python3")
            .args(["-m", "venv"])
            .arg(building.path()));
        assert!(ok, "python3 -m venv: {text}");
        let (ok, text) = run(Command::new(building.path().join("bin/pip")).args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            VALIDATOR,
        ]));
        assert!(
            ok,
            "pip install {VALIDATOR}: {text}\n(this test installs it from the Python package \
             registry; `cargo test -- --skip needs_pypi::` leaves it out)"
        );
        // Another test process may have finished first; either copy will do.
        let built = building.keep();
        if std::fs::rename(&built, &dir).is_err() {
            let _ = std::fs::remove_dir_all(&built);
            assert!(python.exists());
        }
        python
    }

    fn check(python: &Path, files: &[PathBuf]) -> (bool, String) {
        run(Command::new(python)
            .arg(repository().join("scripts/check-manifests"))
            .args(files))
    }

    #[test]
    fn the_kubernetes_manifests_match_the_published_schemas() {
        let python = validator_python();
        let manifests = cluster_files("yaml");
        let (ok, text) = check(&python, &manifests);
        assert!(ok, "{text}");
        // Every document was checked: two PVCs and two Jobs.
        assert_eq!(text.matches(": ok").count(), 4, "{text}");

        let tmp = tempfile::tempdir().unwrap();
        let job = std::fs::read_to_string(repository().join("docs/cluster/job.yaml")).unwrap();
        for (what, from, to) in [
            (
                "an unknown field",
                "image: faultline:dev",
                "imagee: faultline:dev",
            ),
            (
                "a misspelled value",
                "completionMode: Indexed",
                "completionMode: Indexd",
            ),
            ("an unknown kind", "kind: Job", "kind: Jobb"),
        ] {
            assert!(job.contains(from));
            let broken = tmp.path().join("broken.yaml");
            std::fs::write(&broken, job.replacen(from, to, 1)).unwrap();
            let (ok, text) = check(&python, &[broken]);
            assert!(!ok, "{what} was not caught: {text}");
        }
    }
}
