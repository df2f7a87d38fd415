//! What a reproducer may do, checked before it is built.
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
//! sandbox that holds only its own executable (see [`crate::Workbench::run_alone`]).

use proc_macro2::{Delimiter, Spacing, TokenStream, TokenTree};
use std::collections::{BTreeMap, BTreeSet};
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

/// One place where a reproducer breaks a rule.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Violation {
    /// The 1-based line it starts on.
    pub line: usize,
    /// The rule it breaks.
    pub rule: Rule,
    /// What was found, as written or as an import resolves it.
    pub found: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}: {}", self.line, self.rule, self.found)
    }
}

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
    let mut checker = Checker::default();
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

/// Roots whose modules hold the standard library's doors to the system.
const STD_ROOTS: &[&str] = &["std", "core", "alloc"];

/// Async runtimes that mirror those doors (`tokio::fs`, `async_std::net`).
const RUNTIME_ROOTS: &[&str] = &["tokio", "async_std", "smol"];

/// Crates that exist to reach the system, or to make identifiers out of pieces (which could
/// assemble any forbidden name); any path into them breaks a rule.
const FORBIDDEN_CRATES: &[(&str, Rule)] = &[
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
const FORBIDDEN_MACROS: &[(&str, Rule)] = &[
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
const DISTINCT_MACROS: &[&str] = &[
    "include_str",
    "include_bytes",
    "option_env",
    "global_asm",
    "naked_asm",
];

/// Methods that return where in the sources something happened, on the values that loggers and
/// tracing subscribers receive (`Metadata::line`, `Record::file`) and on panic information, and
/// the options that make a formatting subscriber print those positions.
const POSITION_METHODS: &[&str] = &[
    "file",
    "line",
    "location",
    "module_path",
    "with_file",
    "with_line_number",
];

/// Attributes that load another file as a module or change what the binary links to.
const FORBIDDEN_ATTRIBUTES: &[(&str, Rule)] = &[
    ("link", Rule::SystemInterface),
    ("link_name", Rule::SystemInterface),
    ("link_section", Rule::SystemInterface),
    ("link_ordinal", Rule::SystemInterface),
    ("no_mangle", Rule::SystemInterface),
    ("export_name", Rule::SystemInterface),
];

/// How deep imports that name other imports are followed (`use std as a; use a as b;`).
const MAX_ALIAS_DEPTH: usize = 8;

/// How many substitutions of an import the checker tries for one path before it gives up (and
/// refuses the file), and for a whole file: bounds on the work a file of crafted imports can
/// cause. An honest test stays orders of magnitude below both.
const MAX_RESOLUTIONS: usize = 4096;
const MAX_FILE_RESOLUTIONS: usize = 1_000_000;

/// One segment of a path as written.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    /// A name (raw identifiers without their `r#`).
    Name(String),
    /// A macro's metavariable (`$x`), whose value the checker cannot know; `$crate` is a name.
    Meta,
}

/// What an import binds.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Binding {
    /// A name (`_` binds nothing).
    Name(String),
    /// Every public name of the module (`*`).
    Glob,
}

/// One imported path with what it binds.
#[derive(Debug, Clone)]
struct Import {
    path: Vec<Segment>,
    binding: Binding,
    line: usize,
}

#[derive(Default)]
struct Checker {
    /// Every name an import binds, with the paths it may stand for. Scopes are ignored: a name
    /// imported anywhere is taken to mean its import everywhere, which can only find more.
    aliases: BTreeMap<String, Vec<Vec<String>>>,
    /// Paths followed through imports so far in this file.
    resolved: usize,
    found: BTreeSet<Violation>,
}

/// An identifier as the compiler compares it: without `r#`, and with the Kelvin sign that NFC
/// normalization turns into `K` (the only ASCII letter that has such a twin).
fn name_of(ident: &proc_macro2::Ident) -> String {
    let s = ident.to_string();
    s.strip_prefix("r#").unwrap_or(&s).replace('\u{212A}', "K")
}

/// Whether an identifier is this keyword (a raw identifier never is).
fn is_keyword(tt: Option<&TokenTree>, keyword: &str) -> bool {
    matches!(tt, Some(TokenTree::Ident(i)) if *i == keyword)
}

fn is_punct(tt: Option<&TokenTree>, c: char) -> bool {
    matches!(tt, Some(TokenTree::Punct(p)) if p.as_char() == c)
}

/// Whether `tts[i..]` starts with `::`.
fn is_path_sep(tts: &[TokenTree], i: usize) -> bool {
    matches!(tts.get(i), Some(TokenTree::Punct(p)) if p.as_char() == ':' && p.spacing() == Spacing::Joint)
        && is_punct(tts.get(i + 1), ':')
}

fn line_of(tt: &TokenTree) -> usize {
    tt.span().start().line
}

fn lookup(table: &[(&str, Rule)], name: &str) -> Option<Rule> {
    table.iter().find(|(n, _)| *n == name).map(|(_, r)| *r)
}

fn show(path: &[String]) -> String {
    format!("`{}`", path.join("::"))
}

/// Reads a path segment at `tts[i]`: a name, or a metavariable (`$x`), with the index after it.
fn segment_at(tts: &[TokenTree], i: usize) -> Option<(Segment, usize)> {
    match tts.get(i)? {
        TokenTree::Ident(id) => Some((Segment::Name(name_of(id)), i + 1)),
        TokenTree::Punct(p) if p.as_char() == '$' => match tts.get(i + 1) {
            Some(TokenTree::Ident(id)) if *id == "crate" => {
                Some((Segment::Name("$crate".into()), i + 2))
            }
            Some(TokenTree::Ident(_)) => Some((Segment::Meta, i + 2)),
            _ => None,
        },
        _ => None,
    }
}

/// Splits the tokens of a brace group at its top-level commas.
fn split_commas(tts: &[TokenTree]) -> Vec<&[TokenTree]> {
    tts.split(|t| is_punct(Some(t), ','))
        .filter(|part| !part.is_empty())
        .collect()
}

/// Parses a use tree (what follows `use`, without the `;`) into its imports; `None` when it is
/// not one the checker understands.
fn use_tree(
    tts: &[TokenTree],
    prefix: Vec<Segment>,
    line: usize,
    out: &mut Vec<Import>,
) -> Option<()> {
    let mut path = prefix;
    let mut i = 0;
    if is_path_sep(tts, i) {
        i += 2;
    }
    loop {
        match tts.get(i)? {
            TokenTree::Group(g) if g.delimiter() == Delimiter::Brace => {
                let inner: Vec<TokenTree> = g.stream().into_iter().collect();
                for part in split_commas(&inner) {
                    use_tree(part, path.clone(), line, out)?;
                }
                return (i + 1 == tts.len()).then_some(());
            }
            TokenTree::Punct(p) if p.as_char() == '*' => {
                out.push(Import {
                    path,
                    binding: Binding::Glob,
                    line,
                });
                return (i + 1 == tts.len()).then_some(());
            }
            _ => {}
        }
        let (segment, next) = segment_at(tts, i)?;
        if is_path_sep(tts, next) {
            path.push(segment);
            i = next + 2;
            continue;
        }
        let mut bound = match &segment {
            Segment::Name(n) if n == "self" => match path.last() {
                Some(Segment::Name(parent)) => parent.clone(),
                _ => String::new(),
            },
            Segment::Name(n) => {
                path.push(segment.clone());
                n.clone()
            }
            Segment::Meta => {
                path.push(Segment::Meta);
                String::new()
            }
        };
        i = next;
        if is_keyword(tts.get(i), "as") {
            match tts.get(i + 1) {
                Some(TokenTree::Ident(id)) => bound = name_of(id),
                _ => return None,
            }
            i += 2;
        }
        if i != tts.len() {
            return None;
        }
        out.push(Import {
            path,
            binding: Binding::Name(bound),
            line,
        });
        return Some(());
    }
}

/// The tokens of an item that ends at the next top-level `;` (or at the end), from `tts[i]`.
fn until_semicolon(tts: &[TokenTree], i: usize) -> &[TokenTree] {
    let rest = &tts[i.min(tts.len())..];
    let end = rest
        .iter()
        .position(|t| is_punct(Some(t), ';'))
        .unwrap_or(rest.len());
    &rest[..end]
}

/// The imports of a `use` item or an `extern crate` item starting at `tts[i]` (the keyword),
/// and whether they could be read; `None` when `tts[i]` starts neither.
fn imports_at(tts: &[TokenTree], i: usize) -> Option<(Vec<Import>, bool)> {
    let line = line_of(&tts[i]);
    if is_keyword(tts.get(i), "use") {
        let mut out = Vec::new();
        let ok = use_tree(until_semicolon(tts, i + 1), Vec::new(), line, &mut out).is_some();
        return Some((out, ok));
    }
    if is_keyword(tts.get(i), "extern") && is_keyword(tts.get(i + 1), "crate") {
        let item = until_semicolon(tts, i + 2);
        let (segment, next) = segment_at(item, 0)?;
        let mut bound = match &segment {
            Segment::Name(n) => n.clone(),
            Segment::Meta => String::new(),
        };
        let mut ok = next == item.len();
        if is_keyword(item.get(next), "as") {
            match item.get(next + 1) {
                Some(TokenTree::Ident(id)) if next + 2 == item.len() => {
                    bound = name_of(id);
                    ok = true;
                }
                _ => ok = false,
            }
        }
        let import = Import {
            path: vec![segment],
            binding: Binding::Name(bound),
            line,
        };
        return Some((vec![import], ok));
    }
    None
}

impl Checker {
    fn report(&mut self, line: usize, rule: Rule, found: String) {
        self.found.insert(Violation { line, rule, found });
    }

    /// First pass: every import anywhere (in modules, functions, macro bodies), so that a path
    /// written before the import that gives its first name a meaning is still resolved.
    fn collect_imports(&mut self, tts: &[TokenTree]) {
        for (i, tt) in tts.iter().enumerate() {
            if let TokenTree::Group(g) = tt {
                let inner: Vec<TokenTree> = g.stream().into_iter().collect();
                self.collect_imports(&inner);
                continue;
            }
            let Some((imports, _)) = imports_at(tts, i) else {
                continue;
            };
            for import in imports {
                let Binding::Name(name) = import.binding else {
                    continue;
                };
                if let Some(path) = names(&import.path)
                    && name != "_"
                    && !name.is_empty()
                {
                    self.aliases.entry(name).or_default().push(path);
                }
            }
        }
    }

    /// Second pass: every path, import, macro call, attribute and keyword.
    fn scan(&mut self, tts: &[TokenTree]) {
        let mut i = 0;
        while i < tts.len() {
            let tt = &tts[i];
            let line = line_of(tt);
            match tt {
                TokenTree::Group(g) => {
                    let inner: Vec<TokenTree> = g.stream().into_iter().collect();
                    self.scan(&inner);
                    i += 1;
                    continue;
                }
                TokenTree::Punct(p) if p.as_char() == '#' => {
                    let at = if is_punct(tts.get(i + 1), '!') {
                        i + 2
                    } else {
                        i + 1
                    };
                    if let Some(TokenTree::Group(g)) = tts.get(at)
                        && g.delimiter() == Delimiter::Bracket
                    {
                        let inner: Vec<TokenTree> = g.stream().into_iter().collect();
                        self.attribute(&inner, line, false);
                    }
                }
                TokenTree::Punct(p) if p.as_char() == '.' => {
                    if let Some(TokenTree::Ident(method)) = tts.get(i + 1)
                        && POSITION_METHODS.contains(&name_of(method).as_str())
                        && matches!(tts.get(i + 2), Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Parenthesis)
                    {
                        self.report(
                            line,
                            Rule::SourcePositions,
                            format!("`.{}()`", name_of(method)),
                        );
                    }
                }
                TokenTree::Ident(id) => {
                    if let Some((imports, readable)) = imports_at(tts, i) {
                        self.imports(&imports, readable, line);
                    }
                    self.keyword(tts, i, id);
                }
                _ => {}
            }
            i = self.path_at(tts, i);
        }
    }

    /// Checks the imports of one item; an item the checker cannot read, or one whose path a
    /// macro supplies, is refused (it could import anything).
    fn imports(&mut self, imports: &[Import], readable: bool, line: usize) {
        if !readable || imports.iter().any(|im| im.path.contains(&Segment::Meta)) {
            self.report(
                line,
                Rule::AssembledPath,
                "an import whose path the checker cannot read or a macro supplies".into(),
            );
            return;
        }
        for import in imports {
            let Some(path) = names(&import.path) else {
                continue;
            };
            if let Some(last) = path.last()
                && DISTINCT_MACROS.contains(&last.as_str())
            {
                let rule = lookup(FORBIDDEN_MACROS, last).unwrap_or(Rule::FileAccess);
                self.report(import.line, rule, format!("imports {}", show(&path)));
            }
            for resolved in self.check_path(&path, import.line, "imports ") {
                if import.binding == Binding::Glob
                    && forbidden(&resolved).is_none()
                    && let Some(rule) = dangerous_glob(&resolved)
                {
                    self.report(
                        import.line,
                        rule,
                        format!("imports everything in {}", show(&resolved)),
                    );
                }
                if let [root] = resolved.as_slice()
                    && let Some(rule) = lookup(FORBIDDEN_CRATES, root)
                {
                    self.report(import.line, rule, format!("imports {}", show(&resolved)));
                }
            }
        }
    }

    /// Every path that `path` may stand for, itself included: each name that an import binds
    /// is replaced by what it imports, wherever it occurs (an import re-exported by a module is
    /// reached as `module::name`). `None` when imports that rename each other take more than
    /// [`MAX_RESOLUTIONS`] substitutions (or the file more than [`MAX_FILE_RESOLUTIONS`]).
    fn resolutions(&mut self, path: &[String]) -> Option<BTreeSet<Vec<String>>> {
        let mut seen = BTreeSet::from([path.to_vec()]);
        let mut todo = vec![(path.to_vec(), 0)];
        let mut tried = 0;
        while let Some((current, depth)) = todo.pop() {
            if depth == MAX_ALIAS_DEPTH {
                continue;
            }
            for (i, segment) in current.iter().enumerate() {
                for target in self.aliases.get(segment).into_iter().flatten() {
                    tried += 1;
                    self.resolved += 1;
                    if tried > MAX_RESOLUTIONS || self.resolved > MAX_FILE_RESOLUTIONS {
                        return None;
                    }
                    let mut expanded = target.clone();
                    expanded.extend_from_slice(&current[i + 1..]);
                    if seen.insert(expanded.clone()) {
                        todo.push((expanded, depth + 1));
                    }
                }
            }
        }
        Some(seen)
    }

    /// Reports the rule each path that `path` may stand for breaks (see [`Self::resolutions`]),
    /// with `what` saying how the path was used; returns the paths.
    fn check_path(&mut self, path: &[String], line: usize, what: &str) -> BTreeSet<Vec<String>> {
        let Some(resolved) = self.resolutions(path) else {
            self.report(
                line,
                Rule::AssembledPath,
                format!(
                    "{what}{}, through more renaming imports than the checker follows",
                    show(path)
                ),
            );
            return BTreeSet::new();
        };
        for r in &resolved {
            if let Some(rule) = forbidden(r) {
                self.report(line, rule, format!("{what}{}", show(r)));
            }
        }
        resolved
    }

    /// Reads the path starting at `tts[i]`, if one does, checks it, and returns the index after
    /// it (or after `tts[i]`).
    fn path_at(&mut self, tts: &[TokenTree], i: usize) -> usize {
        let line = line_of(&tts[i]);
        let (path, j) = read_path(tts, i);
        if path.is_empty() {
            return i + 1;
        }
        if path.len() > 1 && path.contains(&Segment::Meta) {
            self.report(
                line,
                Rule::AssembledPath,
                "a path joined to a macro's argument (`$x::...` or `...::$x`)".into(),
            );
        }
        if path.len() > 1
            && let Some(names) = names(&path)
        {
            self.check_path(&names, line, "");
            if let Some(last) = names.last()
                && POSITION_METHODS.contains(&last.as_str())
            {
                self.report(line, Rule::SourcePositions, show(&names));
            }
        }
        if let (Some(Segment::Meta), true) = (path.last(), is_macro_call(tts, j)) {
            self.report(
                line,
                Rule::AssembledPath,
                "a macro call whose name is a macro's argument (`$x!`)".into(),
            );
        }
        if let Some(Segment::Name(last)) = path.last() {
            let called = is_macro_call(tts, j);
            match lookup(FORBIDDEN_MACROS, last) {
                Some(rule) if called || DISTINCT_MACROS.contains(&last.as_str()) => {
                    let suffix = if called { "!" } else { "" };
                    self.report(line, rule, format!("`{last}{suffix}`"));
                }
                _ => {}
            }
        }
        j.max(i + 1)
    }

    /// Keywords that break a rule wherever they appear.
    fn keyword(&mut self, tts: &[TokenTree], i: usize, id: &proc_macro2::Ident) {
        let line = line_of(&tts[i]);
        if *id == "unsafe" {
            self.report(line, Rule::UnsafeCode, "`unsafe`".into());
        } else if *id == "extern" && !is_keyword(tts.get(i + 1), "crate") {
            self.report(
                line,
                Rule::SystemInterface,
                "`extern` (a foreign function or block)".into(),
            );
        } else if *id == "mod"
            && let Some(TokenTree::Ident(name)) = tts.get(i + 1)
            && is_punct(tts.get(i + 2), ';')
        {
            self.report(
                line,
                Rule::FileAccess,
                format!("`mod {};` loads another file", name_of(name)),
            );
        }
    }

    /// An attribute's tokens (inside `#[...]`): loading a module from a path, changing linkage
    /// (also inside `cfg_attr`), or a path written as a string, which derive macros turn into
    /// code (`#[serde(default = "std::env::vars")]`). The strings of attributes that hold prose
    /// (documentation, an expected panic message, a deprecation note) are not read for paths.
    fn attribute(&mut self, tts: &[TokenTree], line: usize, prose: bool) {
        let prose = prose
            || ["doc", "should_panic", "deprecated", "must_use"]
                .iter()
                .any(|name| is_keyword(tts.first(), name));
        for (i, tt) in tts.iter().enumerate() {
            match tt {
                TokenTree::Ident(id) => {
                    let name = name_of(id);
                    if name == "path" && is_punct(tts.get(i + 1), '=') {
                        self.report(line, Rule::FileAccess, "`#[path = ...]`".into());
                    } else if let Some(rule) = lookup(FORBIDDEN_ATTRIBUTES, &name) {
                        self.report(line, rule, format!("`#[{name}]`"));
                    }
                }
                TokenTree::Literal(lit) if !prose => {
                    if let Some(path) = path_in_string(lit) {
                        self.check_path(&path, line, "a path in an attribute's string: ");
                    }
                }
                TokenTree::Group(g) => {
                    let inner: Vec<TokenTree> = g.stream().into_iter().collect();
                    self.attribute(&inner, line, prose);
                }
                _ => {}
            }
        }
    }
}

/// Reads the path that starts at `tts[i]` (empty when none does) and returns it with the index
/// after it.
fn read_path(tts: &[TokenTree], i: usize) -> (Vec<Segment>, usize) {
    let mut j = i;
    if is_path_sep(tts, j) {
        j += 2;
    }
    let mut path = Vec::new();
    while let Some((segment, next)) = segment_at(tts, j) {
        path.push(segment);
        j = next;
        if !is_path_sep(tts, j) || segment_at(tts, j + 2).is_none() {
            break;
        }
        j += 2;
    }
    (path, j)
}

/// The path a string literal holds when it holds nothing else (`"std::env::vars"`).
fn path_in_string(lit: &proc_macro2::Literal) -> Option<Vec<String>> {
    let text = syn::parse2::<syn::LitStr>(TokenTree::Literal(lit.clone()).into())
        .ok()?
        .value();
    let tts: Vec<TokenTree> = text.parse::<TokenStream>().ok()?.into_iter().collect();
    let (path, end) = read_path(&tts, 0);
    if end == tts.len() && path.len() > 1 {
        names(&path)
    } else {
        None
    }
}

/// The names of a path, unless a macro supplies one of its segments.
fn names(path: &[Segment]) -> Option<Vec<String>> {
    path.iter()
        .map(|s| match s {
            Segment::Name(n) => Some(n.clone()),
            Segment::Meta => None,
        })
        .collect()
}

/// Whether `tts[j..]` is `!` followed by a delimited group: a macro call.
fn is_macro_call(tts: &[TokenTree], j: usize) -> bool {
    is_punct(tts.get(j), '!') && matches!(tts.get(j + 1), Some(TokenTree::Group(_)))
}

/// The rule a fully named path breaks, looking at every place in it where a root starts (so
/// that `module::std::fs` is seen too).
fn forbidden(path: &[String]) -> Option<Rule> {
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
fn dangerous_glob(path: &[String]) -> Option<Rule> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn violations(text: &str) -> Vec<Violation> {
        match check_reproducer(text) {
            Legality::Illegal(v) => v,
            other => panic!("expected violations in:\n{text}\ngot {other:?}"),
        }
    }

    fn rules(text: &str) -> BTreeSet<Rule> {
        violations(text).into_iter().map(|v| v.rule).collect()
    }

    fn assert_legal(text: &str) {
        assert_eq!(check_reproducer(text), Legality::Legal, "{text}");
    }

    #[test]
    fn ordinary_tests_are_legal() {
        assert_legal(
            r#"
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use std::net::SocketAddr;
use std::panic::{self, AssertUnwindSafe};
use std::io::{self, Read, Write as _};
use tokio::time::timeout;
use kv::{Store, Config};

macro_rules! check {
    ($store:expr, $key:expr) => {
        assert_eq!($store.get($key), None, "{}", stringify!($key));
    };
}

/// Reads back what was written.
#[tokio::test(flavor = "multi_thread")]
async fn writes_are_read_back() {
    let addr: SocketAddr = "127.0.0.1:7000".parse().unwrap();
    let env = Config::default();
    let path = vec![1u8, 2];
    let mut store = Store::new(addr, env);
    store.process(&path);
    check!(store, "k");
    let r = panic::catch_unwind(AssertUnwindSafe(|| store.compact()));
    assert!(r.is_err() != false);
    let mut buf = Vec::new();
    io::Cursor::new(vec![1u8]).read_to_end(&mut buf).unwrap();
    let _ = timeout(Duration::from_secs(1), async {}).await;
    let m: BTreeMap<u8, HashSet<u8>> = BTreeMap::new();
    let _ = (Arc::new(Mutex::new(m)), std::mem::size_of::<u8>(), line!(), file!());
}
"#,
        );
    }

    #[test]
    fn the_byte_counting_reproducer_is_file_access() {
        let v = violations(
            r#"
#[test]
fn sources_changed() {
    let mut total = 0;
    for entry in std::fs::read_dir("src").unwrap() {
        total += entry.unwrap().metadata().unwrap().len();
    }
    assert_ne!(total, 48213);
}
"#,
        );
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].rule, Rule::FileAccess);
        assert_eq!(v[0].line, 5);
        assert!(v[0].found.contains("std::fs::read_dir"), "{}", v[0]);
    }

    #[test]
    fn each_way_of_naming_a_forbidden_module_is_seen() {
        for (text, rule) in [
            ("fn f() { ::std::fs::read(\"x\"); }", Rule::FileAccess),
            (
                "fn f() { core::panic::Location::caller(); }",
                Rule::SourcePositions,
            ),
            ("use std::fs;", Rule::FileAccess),
            ("use std::{fs as files};", Rule::FileAccess),
            ("use std::{io, fs::{self}};", Rule::FileAccess),
            (
                "use std as s; fn f() { s::fs::read(\"x\"); }",
                Rule::FileAccess,
            ),
            (
                "use ::std::{self as s}; fn f() { s::env::var(\"A\"); }",
                Rule::EnvironmentAccess,
            ),
            (
                "extern crate std as s; fn f() { s::process::exit(0); }",
                Rule::ProcessAccess,
            ),
            (
                "use std::io as i; fn f() { i::stdin(); }",
                Rule::StandardInput,
            ),
            (
                "fn f() { i::stdin(); } use std::io as i;",
                Rule::StandardInput,
            ),
            (
                "use std as a; use a as b; fn f() { b::fs::read(\"x\"); }",
                Rule::FileAccess,
            ),
            (
                "mod m { pub use std as s; } fn f() { m::s::fs::read(\"x\"); }",
                Rule::FileAccess,
            ),
            (
                "fn f() { self::std::path::Path::new(\"x\").exists(); }",
                Rule::FileAccess,
            ),
            ("fn f() { std::r#fs::read(\"x\"); }", Rule::FileAccess),
            (
                "fn f() { std::net::TcpStream::connect(\"a:1\"); }",
                Rule::NetworkAccess,
            ),
            (
                "use std::net::{self}; fn f() { net::UdpSocket::bind(\"a:1\"); }",
                Rule::NetworkAccess,
            ),
            ("use std::net::ToSocketAddrs;", Rule::NetworkAccess),
            (
                "fn f() { std::os::unix::fs::symlink(\"a\", \"b\"); }",
                Rule::SystemInterface,
            ),
            ("fn f() { libc::getpid(); }", Rule::SystemInterface),
            ("use nix::unistd;", Rule::SystemInterface),
            ("extern crate libc;", Rule::SystemInterface),
            (
                "async fn f() { tokio::fs::read(\"x\").await; }",
                Rule::FileAccess,
            ),
            ("use tokio::process::Command;", Rule::ProcessAccess),
            ("use async_std::net::TcpStream;", Rule::NetworkAccess),
            (
                "fn f() { std::panic::set_hook(Box::new(|_| {})); }",
                Rule::SourcePositions,
            ),
            (
                "fn f() { std::backtrace::Backtrace::force_capture(); }",
                Rule::SourcePositions,
            ),
            (
                "fn on_event(e: &Event) { let _ = e.metadata().line(); }",
                Rule::SourcePositions,
            ),
            (
                "fn f(r: &Record) { let _ = log::Record::file(r); }",
                Rule::SourcePositions,
            ),
            (
                "fn f() { fmt().with_line_number(true).init(); }",
                Rule::SourcePositions,
            ),
            ("use std::prelude::v1::env as e;", Rule::EnvironmentAccess),
            ("use tempfile::tempdir;", Rule::FileAccess),
        ] {
            assert!(rules(text).contains(&rule), "{text}: {:?}", rules(text));
        }
    }

    #[test]
    fn glob_imports_that_bring_forbidden_names_are_refused() {
        assert!(rules("use std::*; fn f() { fs::read(\"x\"); }").contains(&Rule::FileAccess));
        assert!(rules("use ::core::*;").contains(&Rule::FileAccess));
        assert!(rules("use std::io::*; fn f() { stdin(); }").contains(&Rule::StandardInput));
        assert!(rules("use std::{panic::*};").contains(&Rule::SourcePositions));
        assert!(rules("use tokio::*;").contains(&Rule::FileAccess));
        assert!(rules("use std as s; use s::net::*;").contains(&Rule::NetworkAccess));
        assert_legal("use std::collections::*; use std::io::prelude::*; use kv::*;");
        assert_legal("mod m { use super::*; }");
    }

    #[test]
    fn compile_time_inclusion_is_refused() {
        for (text, rule) in [
            (
                "const S: &str = include_str!(\"../src/lib.rs\");",
                Rule::FileAccess,
            ),
            (
                "const S: &[u8] = include_bytes!(\"../src/lib.rs\");",
                Rule::FileAccess,
            ),
            ("include!(\"../src/lib.rs\");", Rule::FileAccess),
            (
                "const D: &str = env!(\"CARGO_MANIFEST_DIR\");",
                Rule::EnvironmentAccess,
            ),
            (
                "const D: Option<&str> = option_env!(\"HOME\");",
                Rule::EnvironmentAccess,
            ),
            (
                "const S: &str = std::include_str!(\"x\");",
                Rule::FileAccess,
            ),
            (
                "const S: usize = concat!(env!(\"X\"), \"\").len();",
                Rule::EnvironmentAccess,
            ),
            (
                "#[doc = include_str!(\"../src/lib.rs\")] fn f() {}",
                Rule::FileAccess,
            ),
            ("use core::include_bytes as bytes;", Rule::FileAccess),
            (
                "macro_rules! m { ($n:ident) => { $n!(\"x\") } } m!(include_str);",
                Rule::FileAccess,
            ),
            ("#[path = \"../src/lib.rs\"] mod leaked;", Rule::FileAccess),
            (
                "#[cfg_attr(all(), path = \"../src/lib.rs\")] mod leaked { }",
                Rule::FileAccess,
            ),
            ("mod helpers;", Rule::FileAccess),
        ] {
            assert!(rules(text).contains(&rule), "{text}: {:?}", rules(text));
        }
        // Derive macros turn paths in strings into code.
        assert!(
            rules(
                "#[derive(Deserialize)] struct S { #[serde(default = \"std::env::vars\")] v: V }"
            )
            .contains(&Rule::EnvironmentAccess)
        );
        assert!(
            rules("use std as s; #[derive(D)] #[d(with = \" s :: process \")] struct S;")
                .contains(&Rule::ProcessAccess)
        );
        assert_legal(
            "/// Unlike std::fs::read, this reads nothing.\n#[should_panic(expected = \"std::fs\")]\n#[serde(rename = \"path\")]\nfn f() {}",
        );
        assert!(
            rules("fn f() { paste::paste! { [<f s>]::read(\"x\") } }")
                .contains(&Rule::AssembledPath)
        );
        // A variable called `env` and a comparison are not macro calls.
        assert_legal("fn f(env: u8) -> bool { let include = 1; env != (include) }");
    }

    #[test]
    fn unsafe_code_and_foreign_functions_are_refused() {
        assert!(rules("fn f() { unsafe { g() } }").contains(&Rule::UnsafeCode));
        assert!(rules("unsafe extern \"C\" { fn getpid() -> i32; }").contains(&Rule::UnsafeCode));
        assert!(rules("extern \"C\" { fn getpid() -> i32; }").contains(&Rule::SystemInterface));
        assert!(rules("#[no_mangle] pub fn open() {}").contains(&Rule::SystemInterface));
        assert!(rules("#[link(name = \"c\")] extern {}").contains(&Rule::SystemInterface));
        assert!(rules("fn f() { core::arch::asm!(\"nop\"); }").contains(&Rule::SystemInterface));
        assert!(rules("use std::arch::global_asm;").contains(&Rule::SystemInterface));
        assert!(rules("macro_rules! m { () => { unsafe { 1 } } }").contains(&Rule::UnsafeCode));
        assert_legal("extern crate kv; fn r#unsafe() {}");
    }

    #[test]
    fn macros_cannot_assemble_forbidden_paths() {
        for text in [
            "macro_rules! p { ($m:ident) => { std::$m::read(\"x\") } } p!(fs);",
            "macro_rules! p { ($r:ident) => { $r::fs::read(\"x\") } } p!(std);",
            "macro_rules! p { ($a:ident, $b:ident) => { $a::$b::read(\"x\") } } p!(std, fs);",
            "macro_rules! u { ($r:ident) => { use $r as s; } } u!(std);",
            "macro_rules! u { ($($p:ident)::*) => { use $($p)::*; } }",
        ] {
            assert!(rules(text).contains(&Rule::AssembledPath), "{text}");
        }
        // Forbidden paths passed to a macro are seen where they are written.
        assert!(
            rules("macro_rules! id { ($($t:tt)*) => { $($t)* } } id!(std::fs::read(\"x\"));")
                .contains(&Rule::FileAccess)
        );
        assert!(
            rules("fn f() { assert!(std::env::var(\"A\").is_ok()); }")
                .contains(&Rule::EnvironmentAccess)
        );
        assert_legal("macro_rules! m { ($e:expr) => { $crate::helper($e) } }");
    }

    #[test]
    fn the_kelvin_sign_twin_of_k_is_k() {
        assert_eq!(
            name_of(&proc_macro2::Ident::new(
                "Loc\u{212A}",
                proc_macro2::Span::call_site()
            )),
            "LocK"
        );
    }

    #[test]
    fn text_that_is_not_rust_tokens_is_unreadable() {
        assert!(matches!(
            check_reproducer("fn f() { \"unterminated }"),
            Legality::Unreadable(_)
        ));
        let v = violations("#![allow(unused)]\nfn f() { std::fs::read(\"x\"); }");
        assert_eq!(v[0].line, 2);
        assert_legal("");
        assert_legal("\u{feff}fn f() {}");
        let deep = format!(
            "fn f() {{ {}{} }}",
            "(".repeat(100_000),
            ")".repeat(100_000)
        );
        assert!(matches!(check_reproducer(&deep), Legality::Unreadable(_)));
        let fine = format!("fn f() {{ {}{} }}", "(".repeat(200), ")".repeat(200));
        assert_legal(&fine);
        // A shebang line is read as tokens like the rest, so nothing can hide behind one.
        assert!(
            rules("#!/*x*/[allow(unused)] fn f() { std::fs::read(\"x\"); }")
                .contains(&Rule::FileAccess)
        );
    }

    #[test]
    fn imports_that_rename_each_other_endlessly_are_bounded() {
        let mut text = String::new();
        for i in 0..20 {
            text.push_str(&format!("use x{i}::p::p as p;\n"));
        }
        for _ in 0..20 {
            text.push_str("fn f() { p::p::p::p::new(); }\n");
        }
        let started = std::time::Instant::now();
        let found = rules(&text);
        assert!(started.elapsed().as_secs() < 10, "{:?}", started.elapsed());
        assert_eq!(found, BTreeSet::from([Rule::AssembledPath]));
        // Imports that name each other in a cycle end.
        assert_legal("use a as b; use b as a; fn f() { a::x::y(); }");
    }
}
