//! Workspace preparation: from a case to an anonymized, offline, pre-built copy of the buggy
//! crate that an agent can work in, and a second template the grader copies for each grade.
//!
//! [`prepare`] runs the steps in order, each kept in the module that does one job:
//!
//! 1. copy the buggy tree without what names upstream history ([`isolation`]);
//! 2. give it a lockfile and vendor its dependencies ([`resolve`]), then refuse any other copy
//!    of the subject crate and any file only the fixed version has ([`isolation`]);
//! 3. build it warm in the sandbox ([`build`]); for an external oracle, copy it into a grading
//!    template with the oracle package, resolved, vendored, checked and built the same way;
//! 4. store each template's vendored files and the build outputs that no patch can change in the
//!    object store that all cases share ([`share`], [`objects`]), for copies of it to share
//!    ([`copy`]);
//! 5. record the stamp and the manifest that later uses check ([`prepared`]).
//!
//! Where all of it lives, on the host and in the sandbox, is [`layout`]. Validation alone builds
//! a case's bundle generator, with dependencies of its own ([`generator`]).

pub mod build;
pub mod copy;
pub mod generator;
pub mod isolation;
pub mod layout;
pub mod objects;
pub mod prepared;
pub mod reproducer;
pub mod requirements;
pub mod resolve;
pub mod scratch;
pub mod share;

pub use build::toolchain_version;
pub use copy::copy_preserving;
pub use reproducer::{REPRODUCER_PATH, install_reproducer};

use crate::case::Case;
use crate::manifest::{Depth, Manifest};
use crate::store::{CaseSources, copy_tree};
use anyhow::{Context, Result, bail};
use faultline_sandbox::Toolchain;
use faultline_schema::OracleKind;
use isolation::{
    check_no_fixed_files, check_single_subject, check_vendor, copy_anonymized, fixed_only_hashes,
};
use layout::{DataDir, SHARED_DIR, Template};
use prepared::{
    PreparedCase, Stamp, all_dirs, committed_locks_match, hash_inputs, intact_manifest,
    recorded_manifest, worth_hashing,
};
use share::Interned;
use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// Options for [`prepare`].
#[derive(Debug, Clone, Default)]
pub struct PrepareOptions {
    /// Rebuild from scratch even when a matching workspace exists.
    pub force: bool,
}

/// Prepares (or re-checks) the workspace of a case.
pub async fn prepare(
    case: &Case,
    data: &DataDir,
    toolchain: &Toolchain,
    opts: &PrepareOptions,
) -> Result<PreparedCase> {
    let started = Instant::now();
    let root = data.workspace_dir(case.id())?;
    if data.is_read_only() {
        return prepared_read_only(case, data, &root, toolchain);
    }
    fs::create_dir_all(root.parent().expect("has parent"))?;
    let lock_file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(root.with_extension("lock"))?;
    lock_file.lock().context("locking the case's workspace")?;

    let sources = data.store().case_sources(&case.manifest, &case.dir)?;
    let inputs = hash_inputs(case, toolchain)?;
    let stamp_path = root.join("stamp.json");
    let mut repaired = None;
    if !opts.force
        && let Ok(stamp) = faultline_schema::io::read_json::<Stamp>(&stamp_path, "workspace stamp")
        && stamp.inputs == inputs
        && stamp.agent.workspace.join("target").is_dir()
        && committed_locks_match(case, &stamp)
    {
        // A template that matches its manifest is the warm build it was when recorded (the
        // toolchain's version is among the inputs), so it needs no build to re-check it; a
        // build there would itself be a writer the manifest could not tell from damage.
        match intact_manifest(&root, &stamp, Depth::Content) {
            Ok(manifest) => {
                return Ok(PreparedCase {
                    stamp,
                    sources,
                    reused: true,
                    repaired: None,
                    root,
                    manifest: Arc::new(manifest),
                });
            }
            Err(found) => {
                tracing::warn!("{}: {found}; rebuilding its workspace", case.id());
                repaired = Some(found);
            }
        }
    }

    requirements::check_installed(case)?;
    let staging = root.with_extension("partial");
    if staging.exists() {
        fs::remove_dir_all(&staging)?;
    }
    let (stamp, interned) =
        build_fresh(case, data, &sources, &staging, &root, toolchain, inputs).await?;
    let mut laps = Laps::new(case.id());
    if root.exists() {
        fs::remove_dir_all(&root)?;
    }
    fs::rename(&staging, &root)?;
    // Recorded where the files now are (renaming the directory moved no file's times).
    let manifest = Manifest::record(&root, &all_dirs(&stamp), worth_hashing, &interned)
        .context("recording the prepared templates' manifest")?;
    let manifest_bytes = serde_json::to_vec(&manifest)?;
    faultline_schema::io::write_atomic(&root.join("manifest.json"), &manifest_bytes)?;
    laps.done("moved into place, manifest recorded");
    let stamp = Stamp {
        manifest_sha256: manifest.sha256(),
        prepare_secs: started.elapsed().as_secs_f64(),
        ..stamp
    };
    faultline_schema::io::write_json_atomic(&stamp_path, &stamp)?;
    Ok(PreparedCase {
        stamp,
        sources,
        reused: false,
        repaired,
        root,
        manifest: Arc::new(manifest),
    })
}

/// A case prepared in a data directory this process only reads: reused as it is when it matches
/// the case and its manifest, an error otherwise (a shard must not prepare what another process
/// reads). Waits, with a shared lock, for a preparation under way.
fn prepared_read_only(
    case: &Case,
    data: &DataDir,
    root: &Path,
    toolchain: &Toolchain,
) -> Result<PreparedCase> {
    let not_ready = |why: String| {
        anyhow::anyhow!(
            "{}: {why} in the read-only data directory {}; prepare it there first (`faultline \
             --data {} prepare {}`, or `prepare --all`)",
            case.id(),
            data.root.display(),
            data.root.display(),
            case.id()
        )
    };
    let lock_path = root.with_extension("lock");
    let lock_file =
        fs::File::open(&lock_path).map_err(|_| not_ready("the case is not prepared".into()))?;
    lock_file
        .lock_shared()
        .context("waiting for the case's preparation")?;
    let sources = data.store().case_sources(&case.manifest, &case.dir)?;
    let inputs = hash_inputs(case, toolchain)?;
    let stamp: Stamp = faultline_schema::io::read_json(&root.join("stamp.json"), "workspace stamp")
        .map_err(|_| not_ready("the case is not prepared".into()))?;
    if stamp.inputs != inputs || !committed_locks_match(case, &stamp) {
        return Err(not_ready(
            "the prepared workspace is of another version of the case or toolchain".into(),
        ));
    }
    // No walk here: this process cannot repair what a walk would find, and every agent
    // workspace and every grade checks its template's metadata against this manifest before
    // using it (a damaged template fails that trial, named), so a walk per case per shard
    // would only repeat that work before the first trial.
    let manifest = recorded_manifest(root, &stamp)
        .map_err(|found| not_ready(format!("the prepared workspace is unusable ({found})")))?;
    Ok(PreparedCase {
        stamp,
        sources,
        reused: true,
        repaired: None,
        root: root.to_path_buf(),
        manifest: Arc::new(manifest),
    })
}

/// Builds a case's templates in `staging`, with paths recorded as they will be under
/// `final_root`, and stores what they share in the data directory's object store.
async fn build_fresh(
    case: &Case,
    data: &DataDir,
    sources: &CaseSources,
    staging: &Path,
    final_root: &Path,
    toolchain: &Toolchain,
    inputs: String,
) -> Result<(Stamp, Interned)> {
    let mut laps = Laps::new(case.id());
    let name = case.manifest.source.crate_name().to_string();
    let agent_ws = staging.join("agent/workspace");
    let removed = copy_anonymized(&sources.buggy, &agent_ws)?;

    let self_patch = resolve::lock_workspace(case, &agent_ws, &name)?;
    let older_lines = check_single_subject(&agent_ws.join("Cargo.lock"), &name)?;

    let agent_vendor = staging.join("agent/vendor");
    resolve::vendor(&agent_ws, &agent_vendor, &name, self_patch)?;
    check_vendor(&agent_vendor, &name, &older_lines)?;
    let fixed_hashes = fixed_only_hashes(&sources.buggy, &sources.fixed)?;
    check_no_fixed_files(&agent_ws, &fixed_hashes)?;
    check_no_fixed_files(&agent_vendor, &fixed_hashes)?;
    laps.done("copied, locked, vendored and checked");

    let agent_cargo = staging.join("agent/cargo");
    resolve::write_cargo_config(&agent_cargo, &name, self_patch)?;
    let at_final = |p: &Path| final_root.join(p.strip_prefix(staging).expect("under staging"));
    let staged_agent = Template {
        workspace: agent_ws.clone(),
        vendor: agent_vendor.clone(),
        cargo: agent_cargo.clone(),
        oracle: None,
        shared: None,
    };
    build::warm_build(&staged_agent, toolchain, &case.manifest.regression).await?;
    laps.done("built warm");
    let vendored_packages = fs::read_dir(&agent_vendor)
        .with_context(|| format!("reading {}", agent_vendor.display()))?
        .count();

    let mut grade = match case.manifest.oracle.kind {
        OracleKind::InCrate => None,
        OracleKind::External => Some(
            prepare_external_oracle(
                case,
                &staged_agent,
                staging,
                &name,
                toolchain,
                &fixed_hashes,
                &mut laps,
            )
            .await?,
        ),
    };
    // Every build is done: from here on the shared files are links into the store, which no
    // build may write through.
    let objects = data.objects();
    let _store_lock = objects.lock(false)?;
    let mut interned = Interned::new();
    let mut staged_agent = staged_agent;
    let agent_store = match grade {
        Some(_) => staging.join("agent").join(SHARED_DIR),
        None => staging.join(SHARED_DIR),
    };
    share::share_template(
        &objects,
        staging,
        &staged_agent,
        &name,
        &agent_store,
        &mut interned,
    )?;
    staged_agent.shared = Some(agent_store);
    let grade = match grade.take() {
        Some(mut grade) => {
            let store = staging.join(SHARED_DIR);
            share::share_template(&objects, staging, &grade, &name, &store, &mut interned)?;
            grade.shared = Some(store);
            grade
        }
        None => staged_agent.clone(),
    };
    laps.done("shared files stored");
    let finalize = |t: &Template| Template {
        workspace: at_final(&t.workspace),
        vendor: at_final(&t.vendor),
        cargo: at_final(&t.cargo),
        oracle: t.oracle.as_deref().map(at_final),
        shared: t.shared.as_deref().map(at_final),
    };
    let stamp = Stamp {
        schema_version: 1,
        inputs,
        case_id: case.id().to_string(),
        crate_name: name,
        self_patch,
        removed,
        vendored_packages,
        agent: finalize(&staged_agent),
        grade: finalize(&grade),
        manifest_sha256: String::new(),
        prepare_secs: 0.0,
    };
    Ok((stamp, interned))
}

/// Builds the grading template of an external-oracle case: the agent's warm workspace plus the
/// oracle package, with a vendor directory that covers both.
async fn prepare_external_oracle(
    case: &Case,
    agent: &Template,
    staging: &Path,
    name: &str,
    toolchain: &Toolchain,
    fixed_hashes: &BTreeMap<String, String>,
    laps: &mut Laps,
) -> Result<Template> {
    let grade_ws = staging.join("grade/workspace");
    copy_preserving(&agent.workspace, &grade_ws)?;
    laps.done("warm workspace copied for grading");
    let oracle = staging.join("grade/oracle");
    copy_tree(&case.oracle_dir(), &oracle, &|rel| {
        !rel.starts_with("target")
    })?;
    let manifest = fs::read_to_string(oracle.join("Cargo.toml"))?;
    if !manifest.contains("[workspace]") {
        bail!(
            "{}: oracle/Cargo.toml must contain an empty [workspace] table so it builds on its own",
            case.id()
        );
    }
    let patch = resolve::patch_to(name, &grade_ws);
    let committed_lock = case.oracle_dir().join("Cargo.lock").is_file();
    resolve::lock_oracle(case, &agent.workspace, &oracle, &patch)?;
    let mut older_lines = check_single_subject(&grade_ws.join("Cargo.lock"), name)?;
    older_lines.extend(check_single_subject(&oracle.join("Cargo.lock"), name).with_context(|| {
        if committed_lock {
            format!(
                "{}: the oracle's lockfile is the case's own oracle/Cargo.lock; if it was left by \
                 running cargo in oracle/ rather than written by `faultline cases lock`, delete it \
                 and lock the case again",
                case.id()
            )
        } else {
            format!("{}: the oracle's lockfile", case.id())
        }
    })?);
    let vendor = staging.join("grade/vendor");
    resolve::vendor_with_oracle(&grade_ws, &oracle, &vendor, &patch)?;
    check_vendor(&vendor, name, &older_lines)?;
    check_no_fixed_files(&vendor, fixed_hashes)?;
    let cargo = staging.join("grade/cargo");
    resolve::write_cargo_config(&cargo, name, true)?;
    laps.done("oracle locked, vendored and checked");
    let grade = Template {
        workspace: grade_ws,
        vendor,
        cargo,
        oracle: Some(oracle.clone()),
        shared: None,
    };
    build::build_oracle(&grade, &oracle, toolchain, case.id()).await?;
    laps.done("oracle built");
    Ok(grade)
}

/// The time each step of a preparation takes, logged (`FAULTLINE_LOG=info`) so that a slow
/// preparation shows where its time goes.
struct Laps {
    case_id: String,
    last: Instant,
}

impl Laps {
    fn new(case_id: &str) -> Self {
        Laps {
            case_id: case_id.to_string(),
            last: Instant::now(),
        }
    }

    fn done(&mut self, step: &str) {
        let now = Instant::now();
        let secs = (now - self.last).as_secs_f64();
        tracing::info!("{}: {step} in {secs:.1}s", self.case_id);
        self.last = now;
    }
}
