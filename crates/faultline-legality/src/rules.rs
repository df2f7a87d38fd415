//! The rules of the reproduce track, and which paths break them: the standard library's and the
//! async runtimes' doors to the system, the crates that exist to reach it, and the macros and
//! attributes that load files or change linkage. Kept apart from how paths are read so that the
//! rules can be read (and extended) as tables.

use std::fmt;

/// A rule of the reproduce track.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rule {
    /// Files, directories and file metadata, at run time (`std::fs`, `std::path`, `tokio::fs`)
    /// or at compile time (`include_str!`, `#[path]`, an out-of-line `mod`).
    FileAccess,
    /// Environment variables, at run time (`std::env`) or at compile time (`env!`).
    EnvironmentAccess,
    /// Other processes, and the test process's own exit (`std::process`).
    ProcessAccess,
    /// Sockets and name resolution (`std::net` beyond its address types).
    NetworkAccess,
    /// The test process's standard input.
    StandardInput,
    /// The operating system's or the C library's interface directly (`std::os`, `libc`,
    /// `extern` blocks, linkage attributes, inline assembly).
    SystemInterface,
    /// Unsafe code, which could reach any of the above unseen.
    UnsafeCode,
    /// Source positions compiled into the binary: panic hooks and their locations, backtraces.
    /// They reveal the crate's line numbers, which a fix usually shifts.
    SourcePositions,
    /// A macro that builds a path, an import or a macro name from its arguments, which could
    /// assemble a forbidden path from pieces that look innocent on their own.
    AssembledPath,
}

impl Rule {
    /// A short name, as grades report it.
    pub fn name(self) -> &'static str {
        match self {
            Rule::FileAccess => "file access",
            Rule::EnvironmentAccess => "environment access",
            Rule::ProcessAccess => "process access",
            Rule::NetworkAccess => "network access",
            Rule::StandardInput => "standard input",
            Rule::SystemInterface => "system interface",
            Rule::UnsafeCode => "unsafe code",
            Rule::SourcePositions => "source positions",
            Rule::AssembledPath => "path assembled by a macro",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Roots whose modules hold the standard library's doors to the system.
const STD_ROOTS: &[&str] = &["std", "core", "alloc"];

/// Async runtimes that mirror those doors (`tokio::fs`, `async_std::net`).
const RUNTIME_ROOTS: &[&str] = &["tokio", "async_std", "smol"];

/// Crates that exist to reach the system, or to make identifiers out of pieces (which could
/// assemble any forbidden name); any path into them breaks a rule.
pub(super) const FORBIDDEN_CRATES: &[(&str, Rule)] = &[
    ("libc", Rule::SystemInterface),
    ("nix", Rule::SystemInterface),
    ("rustix", Rule::SystemInterface),
    ("tempfile", Rule::FileAccess),
    ("walkdir", Rule::FileAccess),
    ("glob", Rule::FileAccess),
    ("memmap", Rule::FileAccess),
    ("memmap2", Rule::FileAccess),
    ("fs_extra", Rule::FileAccess),
    ("fs2", Rule::FileAccess),
    ("fs_err", Rule::FileAccess),
    ("async_fs", Rule::FileAccess),
    ("async_process", Rule::ProcessAccess),
    ("async_net", Rule::NetworkAccess),
    ("socket2", Rule::NetworkAccess),
    ("mio", Rule::NetworkAccess),
    ("dotenv", Rule::EnvironmentAccess),
    ("dotenvy", Rule::EnvironmentAccess),
    ("backtrace", Rule::SourcePositions),
    ("paste", Rule::AssembledPath),
    ("pastey", Rule::AssembledPath),
];

/// Names that break a rule anywhere below a standard root (`std::fs`, `std::prelude::v1::env`,
/// `core::panic::Location`).
const STD_SEGMENTS: &[(&str, Rule)] = &[
    ("fs", Rule::FileAccess),
    ("path", Rule::FileAccess),
    ("include", Rule::FileAccess),
    ("include_str", Rule::FileAccess),
    ("include_bytes", Rule::FileAccess),
    ("env", Rule::EnvironmentAccess),
    ("option_env", Rule::EnvironmentAccess),
    ("process", Rule::ProcessAccess),
    ("stdin", Rule::StandardInput),
    ("Stdin", Rule::StandardInput),
    ("StdinLock", Rule::StandardInput),
    ("os", Rule::SystemInterface),
    ("asm", Rule::SystemInterface),
    ("global_asm", Rule::SystemInterface),
    ("naked_asm", Rule::SystemInterface),
    ("backtrace", Rule::SourcePositions),
    ("Backtrace", Rule::SourcePositions),
    ("Location", Rule::SourcePositions),
    ("set_hook", Rule::SourcePositions),
    ("take_hook", Rule::SourcePositions),
    ("update_hook", Rule::SourcePositions),
    ("PanicHookInfo", Rule::SourcePositions),
    ("PanicInfo", Rule::SourcePositions),
];

/// Names that break a rule anywhere below an async runtime's root.
const RUNTIME_SEGMENTS: &[(&str, Rule)] = &[
    ("fs", Rule::FileAccess),
    ("path", Rule::FileAccess),
    ("env", Rule::EnvironmentAccess),
    ("process", Rule::ProcessAccess),
    ("signal", Rule::ProcessAccess),
    ("net", Rule::NetworkAccess),
    ("stdin", Rule::StandardInput),
    ("Stdin", Rule::StandardInput),
    ("os", Rule::SystemInterface),
];

/// The values of `std::net`, which do no networking: the one part of it a reproducer may use
/// (a crate's API may take socket addresses as node identities).
const NET_VALUES: &[&str] = &[
    "SocketAddr",
    "SocketAddrV4",
    "SocketAddrV6",
    "IpAddr",
    "Ipv4Addr",
    "Ipv6Addr",
    "AddrParseError",
];

/// Macros that read files or the environment at compile time, or assemble machine code.
pub(super) const FORBIDDEN_MACROS: &[(&str, Rule)] = &[
    ("include", Rule::FileAccess),
    ("include_str", Rule::FileAccess),
    ("include_bytes", Rule::FileAccess),
    ("env", Rule::EnvironmentAccess),
    ("option_env", Rule::EnvironmentAccess),
    ("asm", Rule::SystemInterface),
    ("global_asm", Rule::SystemInterface),
    ("naked_asm", Rule::SystemInterface),
];

/// Macro names nothing else uses: forbidden even where they are only passed around (to another
/// macro, or imported under another name), not invoked.
pub(super) const DISTINCT_MACROS: &[&str] = &[
    "include_str",
    "include_bytes",
    "option_env",
    "global_asm",
    "naked_asm",
];

/// Methods that return where in the sources something happened, on the values that loggers and
/// tracing subscribers receive (`Metadata::line`, `Record::file`) and on panic information, and
/// the options that make a formatting subscriber print those positions.
pub(super) const POSITION_METHODS: &[&str] = &[
    "file",
    "line",
    "location",
    "module_path",
    "with_file",
    "with_line_number",
];

/// Attributes that load another file as a module or change what the binary links to.
pub(super) const FORBIDDEN_ATTRIBUTES: &[(&str, Rule)] = &[
    ("link", Rule::SystemInterface),
    ("link_name", Rule::SystemInterface),
    ("link_section", Rule::SystemInterface),
    ("link_ordinal", Rule::SystemInterface),
    ("no_mangle", Rule::SystemInterface),
    ("export_name", Rule::SystemInterface),
];

pub(super) fn lookup(table: &[(&str, Rule)], name: &str) -> Option<Rule> {
    table.iter().find(|(n, _)| *n == name).map(|(_, r)| *r)
}

/// The rule a fully named path breaks, looking at every place in it where a root starts (so
/// that `module::std::fs` is seen too).
pub(super) fn forbidden(path: &[String]) -> Option<Rule> {
    (0..path.len()).find_map(|i| forbidden_from_root(&path[i..]))
}

fn forbidden_from_root(path: &[String]) -> Option<Rule> {
    let root = path.first()?.as_str();
    if path.len() > 1
        && let Some(rule) = lookup(FORBIDDEN_CRATES, root)
    {
        return Some(rule);
    }
    let table = if STD_ROOTS.contains(&root) {
        STD_SEGMENTS
    } else if RUNTIME_ROOTS.contains(&root) {
        RUNTIME_SEGMENTS
    } else {
        return None;
    };
    for (k, segment) in path.iter().enumerate().skip(1) {
        if segment == "net"
            && STD_ROOTS.contains(&root)
            && path
                .get(k + 1)
                .is_some_and(|next| !NET_VALUES.contains(&next.as_str()))
        {
            return Some(Rule::NetworkAccess);
        }
        if let Some(rule) = lookup(table, segment) {
            return Some(rule);
        }
    }
    None
}

/// The rule a glob import from this path breaks: a root (`std::*` brings `fs`), or a module
/// that holds forbidden names next to allowed ones (`std::io::*` brings `stdin`).
pub(super) fn dangerous_glob(path: &[String]) -> Option<Rule> {
    (0..path.len()).find_map(|i| {
        let tail = &path[i..];
        let root = tail.first()?.as_str();
        if !STD_ROOTS.contains(&root) && !RUNTIME_ROOTS.contains(&root) {
            return None;
        }
        match tail.get(1).map(String::as_str) {
            None => Some(Rule::FileAccess),
            Some("io") if tail.len() == 2 => Some(Rule::StandardInput),
            Some("panic") if tail.len() == 2 => Some(Rule::SourcePositions),
            Some("net") if tail.len() == 2 => Some(Rule::NetworkAccess),
            _ => None,
        }
    })
}
