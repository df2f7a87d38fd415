//! Where a reproducer goes in a crate, and how it becomes one of the crate's test targets: the
//! agent's environment and the grader install it the same way.

use crate::confined::Confined;
use anyhow::{Context, Result};
use std::path::Path;

/// The integration-test file a reproduction is written to, relative to the crate root.
pub const REPRODUCER_PATH: &str = "tests/faultline_repro.rs";

/// Makes `tests/faultline_repro.rs` a test target of the crate at `dir`: published manifests
/// often turn test auto-discovery off and list their tests, so the file is declared explicitly.
/// Writes `contents` to the file. `dir` may be a workbench a patch has changed, so no link in it
/// is followed (see [`Confined`]).
pub fn install_reproducer(dir: &Path, contents: &str) -> Result<()> {
    let dir = Confined::open(dir)?;
    let mut manifest = dir.read_to_string("Cargo.toml")?;
    let table: toml::Table = manifest.parse().context("parsing the crate's Cargo.toml")?;
    let declared = table
        .get("test")
        .and_then(|t| t.as_array())
        .is_some_and(|tests| {
            tests
                .iter()
                .any(|t| t.get("name").and_then(|n| n.as_str()) == Some("faultline_repro"))
        });
    let auto = table
        .get("package")
        .and_then(|p| p.get("autotests"))
        .and_then(|a| a.as_bool())
        .unwrap_or(true);
    if !declared && !auto {
        manifest.push_str(&format!(
            "\n[[test]]\nname = \"faultline_repro\"\npath = \"{REPRODUCER_PATH}\"\n"
        ));
        dir.write("Cargo.toml", manifest.as_bytes())?;
    }
    dir.write(REPRODUCER_PATH, contents.as_bytes())?;
    Ok(())
}
