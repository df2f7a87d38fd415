//! JSON Schemas generated from the Rust types, committed under `schemas/` at the repository root.

use schemars::schema_for;

/// Every format with its schema file name and the generated schema as pretty JSON.
pub fn all() -> Vec<(&'static str, String)> {
    let pretty = |v: schemars::Schema| {
        let mut s = serde_json::to_string_pretty(&v).expect("a schema is always serializable");
        s.push('\n');
        s
    };
    vec![
        (
            "case.schema.json",
            pretty(schema_for!(crate::case::CaseManifest)),
        ),
        ("task.schema.json", pretty(schema_for!(crate::task::Task))),
        (
            "bundle.schema.json",
            pretty(schema_for!(crate::bundle::BundleRecord)),
        ),
        (
            "trajectory.schema.json",
            pretty(schema_for!(crate::trajectory::Trajectory)),
        ),
        (
            "diagnosis.schema.json",
            pretty(schema_for!(crate::diagnosis::Diagnosis)),
        ),
        (
            "grade.schema.json",
            pretty(schema_for!(crate::grade::Grade)),
        ),
        ("lock.schema.json", pretty(schema_for!(crate::run::RunLock))),
        (
            "result.schema.json",
            pretty(schema_for!(crate::run::ResultRecord)),
        ),
        (
            "report.schema.json",
            pretty(schema_for!(crate::report::Report)),
        ),
        (
            "pack.schema.json",
            pretty(schema_for!(crate::report::PackManifest)),
        ),
        (
            "bench-store.schema.json",
            pretty(schema_for!(crate::bench::StoreBench)),
        ),
        (
            "validation.schema.json",
            pretty(schema_for!(crate::validation::ValidationReport)),
        ),
    ]
}

#[cfg(test)]
mod tests {
    /// The committed schema files are the ones the types generate (`faultline schema` rewrites
    /// them).
    #[test]
    fn committed_schemas_are_current() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../schemas");
        for (name, text) in super::all() {
            let on_disk = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
            assert!(
                on_disk == text,
                "schemas/{name} is out of date; run `cargo run -p faultline -- schema`"
            );
        }
    }
}
