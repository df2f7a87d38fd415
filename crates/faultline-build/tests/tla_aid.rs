//! The `tla` aid's models parse as TLA+ with a real TLA+ parser (the `tla` package from the
//! Python package registry, installed once under `target/` and reused). No model checker can be
//! installed here, so this is what the aid is checked against: its syntax, not its behaviour
//! (docs/build-track.md says so).

mod needs_pypi {
    use std::path::{Path, PathBuf};
    use std::process::Command;

    /// The parser's pinned release.
    const TLA_PARSER: &str = "tla==0.0.4";

    /// Parses the file named by the first argument; exits non-zero with the parser's message
    /// when it is not a TLA+ module.
    const PARSE: &str = "import sys, tla\n\
        tree = tla.parse(open(sys.argv[1]).read())\n\
        sys.exit(0 if tree is not None else 'no module parsed')\n";

    fn parser() -> PathBuf {
        let venv = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pypi/tla-0.0.4");
        let python = venv.join("bin/python");
        if !venv.join("installed").exists() {
            let _ = std::fs::remove_dir_all(&venv);
            run(Command::new("python3").arg("-m").arg("venv").arg(&venv));
            run(Command::new(&python).args(["-m", "pip", "install", "-q", TLA_PARSER]));
            std::fs::write(venv.join("installed"), TLA_PARSER).unwrap();
        }
        python
    }

    fn run(command: &mut Command) {
        let out = command.output().unwrap();
        assert!(
            out.status.success(),
            "{command:?}: {}\n(this test installs the `tla` package from the Python package \
             registry; `cargo test -- --skip needs_pypi::` leaves it out)",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn parses(python: &Path, file: &Path) -> Result<(), String> {
        let out = Command::new(python)
            .args(["-c", PARSE])
            .arg(file)
            .output()
            .unwrap();
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    #[test]
    fn every_tla_model_of_the_aids_parses_and_a_broken_one_does_not() {
        let python = parser();
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../corpus/build/aids/tla");
        let mut models = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "tla") {
                models += 1;
                if let Err(e) = parses(&python, &path) {
                    panic!("{} does not parse:\n{e}", path.display());
                }
                // The check can fail: the same model with a definition's `==` cut in half does
                // not parse.
                let text = std::fs::read_to_string(&path).unwrap();
                let broken = tempfile::NamedTempFile::new().unwrap();
                std::fs::write(broken.path(), text.replacen(" == ", " = ", 1)).unwrap();
                assert!(
                    parses(&python, broken.path()).is_err(),
                    "{}",
                    path.display()
                );
            }
        }
        assert!(models > 0, "no .tla file in {}", dir.display());
    }
}
