use super::tokens::name_of;
use super::*;
use std::collections::BTreeSet;

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
        rules("#[derive(Deserialize)] struct S { #[serde(default = \"std::env::vars\")] v: V }")
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
        rules("fn f() { paste::paste! { [<f s>]::read(\"x\") } }").contains(&Rule::AssembledPath)
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

#[test]
fn a_build_submission_may_split_into_files_and_nothing_more() {
    let sources = "mod log;\npub mod node;\nuse crate::log::Log;\n";
    assert_eq!(check_build_source(sources), Legality::Legal);
    assert!(rules(sources).contains(&Rule::FileAccess));
    let escapes = [
        (
            "#[path = \"../../schedules.json\"] mod hidden;",
            Rule::FileAccess,
        ),
        (
            "fn f() { let _ = include_str!(\"/proc/self/cmdline\"); }",
            Rule::FileAccess,
        ),
        (
            "fn f() { let _ = std::fs::read(\"/proc/self/cmdline\"); }",
            Rule::FileAccess,
        ),
        (
            "fn f() { let _ = std::env::args(); }",
            Rule::EnvironmentAccess,
        ),
        ("fn f() { std::process::exit(0); }", Rule::ProcessAccess),
        (
            "fn f() { unsafe { core::hint::unreachable_unchecked() } }",
            Rule::UnsafeCode,
        ),
    ];
    for (text, rule) in escapes {
        let Legality::Illegal(found) = check_build_source(text) else {
            panic!("{text} passed");
        };
        assert!(found.iter().any(|v| v.rule == rule), "{text}: {found:?}");
    }
}
