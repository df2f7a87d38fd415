//! The walk over a reproducer's tokens: a first pass collects every import, a second checks
//! every path (through the imports that may rename it), macro call, attribute and keyword, and
//! records each rule broken. The work a file of crafted imports can cause is bounded.

use super::rules::{
    DISTINCT_MACROS, FORBIDDEN_ATTRIBUTES, FORBIDDEN_CRATES, FORBIDDEN_MACROS, POSITION_METHODS,
    Rule, dangerous_glob, forbidden, lookup,
};
use super::tokens::{
    Binding, Import, Segment, imports_at, is_keyword, is_macro_call, is_punct, line_of, name_of,
    names, path_in_string, read_path,
};
use proc_macro2::{Delimiter, TokenTree};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

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

/// How deep imports that name other imports are followed (`use std as a; use a as b;`).
const MAX_ALIAS_DEPTH: usize = 8;

/// How many substitutions of an import the checker tries for one path before it gives up (and
/// refuses the file), and for a whole file: bounds on the work a file of crafted imports can
/// cause. An honest test stays orders of magnitude below both.
const MAX_RESOLUTIONS: usize = 4096;

const MAX_FILE_RESOLUTIONS: usize = 1_000_000;

/// One file's check: the imports it makes and the violations found so far.
#[derive(Default)]
pub(super) struct Checker {
    /// Every name an import binds, with the paths it may stand for. Scopes are ignored: a name
    /// imported anywhere is taken to mean its import everywhere, which can only find more.
    aliases: BTreeMap<String, Vec<Vec<String>>>,
    /// Paths followed through imports so far in this file.
    resolved: usize,
    /// What breaks a rule, in line order.
    pub(super) found: BTreeSet<Violation>,
    /// Whether `mod name;` may load a file beside this one: a build submission's other files,
    /// each checked in turn, while a reproducer is one file.
    pub(super) module_files_allowed: bool,
}

impl Checker {
    /// A checker for one file; `module_files_allowed` as in [`Checker::module_files_allowed`].
    pub(super) fn new(module_files_allowed: bool) -> Self {
        Checker {
            module_files_allowed,
            ..Checker::default()
        }
    }
}

fn show(path: &[String]) -> String {
    format!("`{}`", path.join("::"))
}

impl Checker {
    fn report(&mut self, line: usize, rule: Rule, found: String) {
        self.found.insert(Violation { line, rule, found });
    }

    /// First pass: every import anywhere (in modules, functions, macro bodies), so that a path
    /// written before the import that gives its first name a meaning is still resolved.
    pub(super) fn collect_imports(&mut self, tts: &[TokenTree]) {
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
    pub(super) fn scan(&mut self, tts: &[TokenTree]) {
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
            && !self.module_files_allowed
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
