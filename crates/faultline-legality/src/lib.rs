//! What a reproducer or a build-track server may do, checked before it is built.
//!
//! A reproducer must tell the buggy version from the fixed one by exercising the crate, so it
//! may not read anything that could tell them apart otherwise: files (the crate's sources), the
//! environment, other processes, the network, standard input, the operating system's interface,
//! or the source positions compiled into the binary (panic locations, backtraces). Nor may it
//! contain unsafe code, which could do all of that behind the checker's back.
//!
//! The check walks the file's tokens rather than its syntax tree, so that it also sees inside
//! macro definitions and invocations (which a syntax tree keeps as opaque tokens) and does not
//! depend on the parser knowing every syntax the compiler accepts. It names the standard ways
//! in: paths into `std` (and `core`, `alloc`) and the async runtimes' equivalents, however they
//! are reached (`::std`, a renamed import, an import through a module, a glob), crates that
//! exist to reach the system, the compile-time inclusion macros, attributes that load other
//! files or change linkage, and macros that assemble paths from their arguments (which could
//! assemble any of the above from innocent pieces). What it cannot know, such as a dependency's
//! function that happens to read a file, finds nothing to read: the reproducer runs in a
//! sandbox that holds only its own executable (`faultline_grade::Workbench::run_alone`).
//!
//! The check is split by job: `tokens` reads paths and imports out of the tokens, `rules` says
//! which rules there are and which paths break them, and `checker` walks a file, following
//! imports, and records every violation.

mod checker;
mod rules;
#[cfg(test)]
mod tests;
mod tokens;

pub use checker::Violation;
pub use rules::Rule;

use checker::Checker;
use proc_macro2::{TokenStream, TokenTree};

/// The verdict of the static check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Legality {
    /// No rule is broken that the check can see.
    Legal,
    /// The rules broken, in line order.
    Illegal(Vec<Violation>),
    /// The file is not a sequence of Rust tokens the checker can read (the error says why). It
    /// almost certainly does not compile either; if it does, it is illegal, since it could not
    /// be checked.
    Unreadable(String),
}

/// Checks a reproducer's text against the rules.
pub fn check_reproducer(text: &str) -> Legality {
    check(text, false)
}

/// Checks one source file of a build-track submission against the same rules, except that
/// `mod name;` may load another file of the crate: the grader copies only the crate's `src/`
/// and checks every file in it, and `#[path]`, which could reach outside it, stays forbidden.
/// A server talks to the world only through the harness's node API; a door to the system would
/// let it read the hidden schedules or forge the grader's result lines.
pub fn check_build_source(text: &str) -> Legality {
    check(text, true)
}

fn check(text: &str, module_files_allowed: bool) -> Legality {
    // The compiler skips a byte-order mark. A shebang line is not skipped: no test needs one,
    // and deciding as the compiler does whether `#!` opens one takes a lexer of its own.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let stream: TokenStream = match text.parse() {
        Ok(s) => s,
        Err(e) => return Legality::Unreadable(e.to_string()),
    };
    if too_deep(&stream) {
        return Legality::Unreadable(format!("brackets are nested more than {MAX_NESTING} deep"));
    }
    let tokens: Vec<TokenTree> = stream.into_iter().collect();
    let mut checker = Checker::new(module_files_allowed);
    checker.collect_imports(&tokens);
    checker.scan(&tokens);
    if checker.found.is_empty() {
        Legality::Legal
    } else {
        Legality::Illegal(checker.found.into_iter().collect())
    }
}

/// How deep brackets may nest for the checker, which walks them recursively, to read a file:
/// far more than any test needs, and far less than would overflow a thread's stack.
const MAX_NESTING: usize = 256;

/// Whether groups nest deeper than [`MAX_NESTING`] (found without recursion).
fn too_deep(stream: &TokenStream) -> bool {
    let mut todo = vec![(stream.clone(), 0)];
    while let Some((stream, depth)) = todo.pop() {
        for tt in stream {
            if let TokenTree::Group(g) = tt {
                if depth + 1 > MAX_NESTING {
                    return true;
                }
                todo.push((g.stream(), depth + 1));
            }
        }
    }
    false
}
