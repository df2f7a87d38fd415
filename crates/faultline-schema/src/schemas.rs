//! JSON Schemas generated from the Rust types, committed under `schemas/` at the repository root.

use schemars::schema_for;

/// Every format with its schema file name and the generated schema as pretty JSON.
pub fn all() -> Vec<(&'static str, String)> {
    let pretty = |v: schemars::Schema| {
        let mut s = serde_json::to_string_pretty(&v).expect("a schema is always serializable");
        s.push('\n');
        s
    };
    vec![(
        "case.schema.json",
        pretty(schema_for!(crate::case::CaseManifest)),
    )]
}
