//! Reading a reproducer's tokens as the compiler would name things: identifiers, paths (whose
//! segments a macro may supply), and the imports of `use` and `extern crate` items. Nothing here
//! decides what is allowed.

use proc_macro2::{Delimiter, Spacing, TokenStream, TokenTree};

/// One segment of a path as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Segment {
    /// A name (raw identifiers without their `r#`).
    Name(String),
    /// A macro's metavariable (`$x`), whose value the checker cannot know; `$crate` is a name.
    Meta,
}

/// What an import binds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Binding {
    /// A name (`_` binds nothing).
    Name(String),
    /// Every public name of the module (`*`).
    Glob,
}

/// One imported path with what it binds.
#[derive(Debug, Clone)]
pub(super) struct Import {
    pub(super) path: Vec<Segment>,
    pub(super) binding: Binding,
    pub(super) line: usize,
}

/// An identifier as the compiler compares it: without `r#`, and with the Kelvin sign that NFC
/// normalization turns into `K` (the only ASCII letter that has such a twin).
pub(super) fn name_of(ident: &proc_macro2::Ident) -> String {
    let s = ident.to_string();
    s.strip_prefix("r#").unwrap_or(&s).replace('\u{212A}', "K")
}

/// Whether an identifier is this keyword (a raw identifier never is).
pub(super) fn is_keyword(tt: Option<&TokenTree>, keyword: &str) -> bool {
    matches!(tt, Some(TokenTree::Ident(i)) if *i == keyword)
}

pub(super) fn is_punct(tt: Option<&TokenTree>, c: char) -> bool {
    matches!(tt, Some(TokenTree::Punct(p)) if p.as_char() == c)
}

/// Whether `tts[i..]` starts with `::`.
fn is_path_sep(tts: &[TokenTree], i: usize) -> bool {
    matches!(tts.get(i), Some(TokenTree::Punct(p)) if p.as_char() == ':' && p.spacing() == Spacing::Joint)
        && is_punct(tts.get(i + 1), ':')
}

pub(super) fn line_of(tt: &TokenTree) -> usize {
    tt.span().start().line
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
pub(super) fn imports_at(tts: &[TokenTree], i: usize) -> Option<(Vec<Import>, bool)> {
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

/// Reads the path that starts at `tts[i]` (empty when none does) and returns it with the index
/// after it.
pub(super) fn read_path(tts: &[TokenTree], i: usize) -> (Vec<Segment>, usize) {
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
pub(super) fn path_in_string(lit: &proc_macro2::Literal) -> Option<Vec<String>> {
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
pub(super) fn names(path: &[Segment]) -> Option<Vec<String>> {
    path.iter()
        .map(|s| match s {
            Segment::Name(n) => Some(n.clone()),
            Segment::Meta => None,
        })
        .collect()
}

/// Whether `tts[j..]` is `!` followed by a delimited group: a macro call.
pub(super) fn is_macro_call(tts: &[TokenTree], j: usize) -> bool {
    is_punct(tts.get(j), '!') && matches!(tts.get(j + 1), Some(TokenTree::Group(_)))
}
