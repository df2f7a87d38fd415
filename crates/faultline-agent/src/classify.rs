//! Classifying commands into action kinds, for action distributions.

use crate::prompts::SUBMIT_SENTINEL;
use faultline_schema::ActionKind;
use regex::Regex;
use std::sync::LazyLock;

static EDIT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(\bsed\s+(-[a-zA-Z]*\s+)*-i|\bperl\s+-[a-z]*i|\bpatch\b|\bgit\s+apply\b|\btee\b|(^|[^0-9&>])>>?\s*[^&\s/]|(^|[^0-9&>])>>?\s*/workspace|\b(mv|cp|rm|touch|mkdir)\s)",
    )
    .expect("valid regex")
});
/// Redirections that write no file: `2>/dev/null`, `> /dev/null`, `2>&1`.
static HARMLESS_REDIRECT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\d*>>?\s*/dev/null|\d*>&\d").expect("valid regex"));
static TEST: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\bcargo\s+(\+\S+\s+)?(test|nextest)\b").expect("valid regex"));
static BUILD: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\bcargo\s+(\+\S+\s+)?(build|check|clippy|b|c)\b|\brustc\b").expect("valid regex")
});
static RUN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\bcargo\s+(run|r)\b|(^|[\s;&|])\./|\btarget/(debug|release)/|\bpython3?\b")
        .expect("valid regex")
});
static SEARCH: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(^|[\s;&|(])(grep|egrep|rg|ag|find|ls|tree|fd|git\s+grep|git\s+log)\b")
        .expect("valid regex")
});
static READ: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(^|[\s;&|(])(cat|head|tail|less|more|nl|wc|awk|sed\s+-n|bat|view)\b")
        .expect("valid regex")
});

/// The kind of a command. When a command does several things, the most consequential wins:
/// submit, edit, test, build, run, search, read.
pub fn classify(command: &str) -> ActionKind {
    if command.contains(SUBMIT_SENTINEL) {
        ActionKind::Submit
    } else if EDIT.is_match(&HARMLESS_REDIRECT.replace_all(command, "")) {
        ActionKind::Edit
    } else if TEST.is_match(command) {
        ActionKind::Test
    } else if BUILD.is_match(command) {
        ActionKind::Build
    } else if RUN.is_match(command) {
        ActionKind::Run
    } else if SEARCH.is_match(command) {
        ActionKind::Search
    } else if READ.is_match(command) {
        ActionKind::Read
    } else {
        ActionKind::Other
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ActionKind::*;

    #[test]
    fn common_commands() {
        let cases = [
            ("cat src/lib.rs", Read),
            ("sed -n '10,40p' src/raft.rs", Read),
            ("nl -ba src/a.rs | head -50", Read),
            ("grep -rn 'fn merge' src", Search),
            ("find . -name '*.rs' | head", Search),
            ("ls -la src/", Search),
            ("sed -i 's/a/b/' src/lib.rs", Edit),
            ("cat > src/fix.rs <<'EOF'\nfn x() {}\nEOF", Edit),
            ("echo x >> src/lib.rs", Edit),
            ("cargo test --lib merge 2>&1 | tail -20", Test),
            ("cargo build 2>&1 | tail", Build),
            ("cargo check", Build),
            ("cargo run --example demo", Run),
            ("grep -n foo src/a.rs 2>/dev/null", Search),
            ("echo FAULTLINE_SUBMIT && cat diagnosis.json", Submit),
            ("sed -i 's/x/y/' src/a.rs && cargo test", Edit),
            ("echo hello", Other),
        ];
        for (cmd, want) in cases {
            assert_eq!(classify(cmd), want, "{cmd}");
        }
    }
}
