//! The repository's own fixture case (`fixtures/corpus/toy/toy-double-merge`, a small crate with a
//! real bug of our own), copied so tests can change it freely, and prepared once per test binary.

use anyhow::{Context, Result};
use faultline_corpus::gold::{diff_trees, diff_workspace};
use faultline_corpus::store::copy_tree;
use faultline_corpus::{Case, DataDir, PreparedCase, prepare};
use faultline_sandbox::Toolchain;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use tokio::sync::OnceCell;

/// The fixture corpus in the source tree.
pub fn fixture_corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/corpus")
}

/// The repository's corpus of real cases (their sources come from the package registry).
pub fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../corpus")
}

/// The fixture crate's buggy and fixed trees (`buggy/`, `fixed/`).
pub fn fixture_tree() -> PathBuf {
    fixture_corpus().join("../toy-tree")
}

/// Copies the fixture case to `<root>/toy/<id>` with its path sources made absolute, lets `edit`
/// change its files, and loads it.
pub fn fixture_case(root: &Path, id: &str, edit: impl FnOnce(&Path)) -> Result<Case> {
    let from = fixture_corpus().join("toy/toy-double-merge");
    let dir = root.join("toy").join(id);
    copy_tree(&from, &dir, &|_| true)?;
    let tree = fixture_tree()
        .canonicalize()
        .context("locating the fixture tree")?;
    let manifest = std::fs::read_to_string(dir.join("case.toml"))?
        .replace("toy-double-merge", id)
        .replace("../../../toy-tree", &tree.display().to_string());
    std::fs::write(dir.join("case.toml"), manifest)?;
    edit(&dir);
    Ok(Case::load(&dir)?)
}

/// The fixture case's gold patch.
pub fn fixture_gold() -> String {
    let tree = fixture_tree();
    diff_trees(&tree.join("buggy"), &tree.join("fixed"))
        .unwrap()
        .unified()
}

/// A patch that gives files new texts: each entry is a path relative to the crate root, its text
/// before (`None` for a file the patch creates) and after.
pub fn patch<'a>(files: impl IntoIterator<Item = (&'a str, Option<&'a str>, &'a str)>) -> String {
    let (before, after) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    for (rel, old, new) in files {
        for (root, text) in [(before.path(), old), (after.path(), Some(new))] {
            if let Some(text) = text {
                let path = root.join(rel);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(path, text).unwrap();
            }
        }
    }
    diff_workspace(before.path(), after.path())
        .unwrap()
        .unified()
}

/// A prepared case and what grading or a trial on it needs.
pub struct Prepared {
    /// The case.
    pub case: Case,
    /// Its prepared workspaces.
    pub prepared: PreparedCase,
    /// The data directory they live in.
    pub data: DataDir,
    /// The host's toolchain.
    pub toolchain: Toolchain,
}

impl Prepared {
    /// Prepares `case` in `data`.
    pub async fn new(case: Case, data: DataDir) -> Prepared {
        let id = case.id().to_string();
        Prepared::try_new(case, data)
            .await
            .unwrap_or_else(|e| panic!("preparing {id}: {e:#}"))
    }

    /// Prepares `case` in `data`, or says why it cannot (a case from the package registry that
    /// cannot be fetched, say).
    pub async fn try_new(case: Case, data: DataDir) -> Result<Prepared> {
        let toolchain = Toolchain::detect()?;
        let prepared = prepare(&case, &data, &toolchain, &Default::default()).await?;
        Ok(Prepared {
            case,
            prepared,
            data,
            toolchain,
        })
    }

    /// The fixture case as `id`, copied under `root` and prepared in `root/data`.
    pub async fn fixture(root: &Path, id: &str) -> Prepared {
        let case = fixture_case(root, id, |_| {}).unwrap();
        Prepared::new(case, DataDir::new(root.join("data"))).await
    }
}

/// A case prepared by the first test of a test binary that asks for it and shared by the rest
/// (each test binary is one process), in a directory that lives as long as the process
/// ([`crate::ProcessDir`]).
pub struct Shared {
    dir: OnceLock<crate::ProcessDir>,
    prepared: OnceCell<Prepared>,
}

impl Shared {
    /// Nothing prepared yet; for a `static`.
    pub const fn new() -> Shared {
        Shared {
            dir: OnceLock::new(),
            prepared: OnceCell::const_new(),
        }
    }

    /// The shared case, which `make` prepares under the given directory on first use.
    pub async fn get<F, Fut>(&'static self, make: F) -> &'static Prepared
    where
        F: FnOnce(PathBuf) -> Fut,
        Fut: Future<Output = Prepared>,
    {
        self.prepared
            .get_or_init(|| {
                let dir = self
                    .dir
                    .get_or_init(|| crate::ProcessDir::new().expect("a process directory"));
                make(dir.path().to_path_buf())
            })
            .await
    }
}

impl Default for Shared {
    fn default() -> Shared {
        Shared::new()
    }
}
