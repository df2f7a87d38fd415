//! Readers for the two text formats of Porcupine's published test histories, so our checker
//! can be compared with Porcupine on the same data without keeping that data in this project.
//!
//! - **Jepsen etcd logs** (register histories): one event per line,
//!   `INFO  jepsen.util - <process> :<type> :<f> <value>`, with `<f>` one of `read`, `write`,
//!   `cas` and `<value>` `nil`, an integer or `[<from> <to>]`. Read with [`parse_etcd_log`]
//!   against [`RegisterModel`](crate::models::RegisterModel).
//! - **Key-value logs**: one event per line as an EDN map,
//!   `{:process 0, :type :invoke, :f :append, :key "0", :value "x 0 0 y"}`, with `:f` one of
//!   `get`, `put`, `append`. Read with [`parse_kv_log`] against
//!   [`KvModel`](crate::models::KvModel).
//!
//! Both carry only the order of events, so an event's time is its position among the events.
//! A process invokes an operation and later completes it with a type saying what happened,
//! read as Jepsen means it:
//! - `:ok`: it happened, with this output;
//! - `:fail`: it did not happen. A failed write or put is dropped, a failed read or get
//!   becomes an operation that never returned (it has no effect either way), and a failed
//!   compare-and-set is a compare-and-set that returned "did not swap", as the etcd test
//!   reports a compare that found another value;
//! - `:info`: the outcome is unknown, so it never returned.
//!
//! Operations still open at the end of the log never returned.

use std::collections::HashMap;

use crate::history::{History, Operation};
use crate::models::{KvInput, KvOutput, RegisterInput, RegisterOutput};

/// Why a log could not be read.
#[derive(Debug, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct FormatError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong with it.
    pub message: String,
}

/// How a process completed its open operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Invoke,
    Ok,
    Fail,
    Info,
}

impl Kind {
    fn parse(word: &str) -> Option<Kind> {
        match word {
            ":invoke" => Some(Kind::Invoke),
            ":ok" => Some(Kind::Ok),
            ":fail" => Some(Kind::Fail),
            ":info" => Some(Kind::Info),
            _ => None,
        }
    }
}

/// What a completion does to its operation.
enum Completion<O> {
    /// It returned this output.
    Returned(O),
    /// Its outcome is unknown, or it had no effect: it never returned.
    Pending,
    /// It did not happen.
    Dropped,
}

/// Builds a history from invocations and completions keyed by process.
struct Builder<I, O> {
    /// Per process: the open operation's input, call time and line.
    open: HashMap<u64, (I, u64, usize)>,
    done: Vec<(usize, Operation<I, O>)>,
    time: u64,
}

impl<I, O> Builder<I, O> {
    fn new() -> Self {
        Builder {
            open: HashMap::new(),
            done: Vec::new(),
            time: 0,
        }
    }

    fn invoke(&mut self, line: usize, process: u64, input: I) -> Result<(), FormatError> {
        if let Some((_, _, at)) = self.open.get(&process) {
            return Err(FormatError {
                line,
                message: format!(
                    "process {process} invokes while its operation of line {at} is open"
                ),
            });
        }
        self.open.insert(process, (input, self.time, line));
        self.time += 1;
        Ok(())
    }

    /// Completes `process`'s open operation; `complete` sees its input and says what it became.
    fn complete(
        &mut self,
        line: usize,
        process: u64,
        complete: impl FnOnce(&I) -> Result<Completion<O>, String>,
    ) -> Result<(), FormatError> {
        let Some((input, call, at)) = self.open.remove(&process) else {
            return Err(FormatError {
                line,
                message: format!("process {process} completes an operation it never invoked"),
            });
        };
        let completion = complete(&input).map_err(|message| FormatError { line, message })?;
        match completion {
            Completion::Returned(output) => {
                self.done.push((
                    at,
                    Operation::returned(process, call, input, self.time, output),
                ));
            }
            Completion::Pending => self
                .done
                .push((at, Operation::pending(process, call, input))),
            Completion::Dropped => {}
        }
        self.time += 1;
        Ok(())
    }

    /// The history in invocation order; operations still open never returned.
    fn finish(mut self, lines: usize) -> Result<History<I, O>, FormatError> {
        for (process, (input, call, at)) in self.open {
            self.done
                .push((at, Operation::pending(process, call, input)));
        }
        self.done.sort_by_key(|(at, _)| *at);
        let operations = self.done.into_iter().map(|(_, op)| op).collect();
        History::new(operations).map_err(|e| FormatError {
            line: lines,
            message: e.to_string(),
        })
    }
}

fn number<T: std::str::FromStr>(word: &str) -> Result<T, String> {
    word.parse()
        .map_err(|_| format!("{word:?} is not a number"))
}

/// `[<from> <to>]`.
fn pair(value: &str) -> Result<(i64, i64), String> {
    let inner = value
        .strip_prefix('[')
        .and_then(|v| v.strip_suffix(']'))
        .ok_or_else(|| format!("{value:?} is not [<from> <to>]"))?;
    let mut words = inner.split_whitespace();
    match (words.next(), words.next(), words.next()) {
        (Some(from), Some(to), None) => Ok((number(from)?, number(to)?)),
        _ => Err(format!("{value:?} is not [<from> <to>]")),
    }
}

/// Reads a Jepsen etcd log as a register history.
pub fn parse_etcd_log(text: &str) -> Result<History<RegisterInput, RegisterOutput>, FormatError> {
    let mut builder = Builder::new();
    for (n, raw) in text.lines().enumerate() {
        let line = n + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let bad = |message: String| FormatError { line, message };
        let rest = raw
            .split_once("jepsen.util - ")
            .map(|(_, rest)| rest)
            .ok_or_else(|| bad("not a `jepsen.util - ` event".into()))?;
        let mut words = rest.split_whitespace();
        let (Some(process), Some(kind), Some(f)) = (words.next(), words.next(), words.next())
        else {
            return Err(bad("expected `<process> :<type> :<f> <value>`".into()));
        };
        let value = words.collect::<Vec<_>>().join(" ");
        let process: u64 = number(process).map_err(bad)?;
        let kind = Kind::parse(kind).ok_or_else(|| bad(format!("unknown type {kind}")))?;
        if kind == Kind::Invoke {
            let input = match f {
                ":read" => RegisterInput::Read,
                ":write" => RegisterInput::Write {
                    value: number(&value).map_err(bad)?,
                },
                ":cas" => {
                    let (from, to) = pair(&value).map_err(bad)?;
                    RegisterInput::Cas { from, to }
                }
                _ => return Err(bad(format!("unknown operation {f}"))),
            };
            builder.invoke(line, process, input)?;
            continue;
        }
        builder.complete(line, process, |input| {
            let same = matches!(
                (input, f),
                (RegisterInput::Read, ":read")
                    | (RegisterInput::Write { .. }, ":write")
                    | (RegisterInput::Cas { .. }, ":cas")
            );
            if !same {
                return Err(format!("{f} completes an operation invoked as {input:?}"));
            }
            Ok(match (kind, input) {
                (Kind::Info, _) | (Kind::Fail, RegisterInput::Read) => Completion::Pending,
                (Kind::Fail, RegisterInput::Write { .. }) => Completion::Dropped,
                (Kind::Fail, RegisterInput::Cas { .. }) => {
                    Completion::Returned(RegisterOutput::Cas { ok: false })
                }
                (_, RegisterInput::Read) => Completion::Returned(RegisterOutput::Read {
                    value: if value == "nil" {
                        None
                    } else {
                        Some(number(&value)?)
                    },
                }),
                (_, RegisterInput::Write { .. }) => Completion::Returned(RegisterOutput::Write),
                (_, RegisterInput::Cas { .. }) => {
                    Completion::Returned(RegisterOutput::Cas { ok: true })
                }
            })
        })?;
    }
    builder.finish(text.lines().count())
}

/// A value of the EDN subset the key-value logs use.
#[derive(Debug, PartialEq, Eq)]
enum Edn {
    Keyword(String),
    Str(String),
    Int(i64),
    Nil,
}

/// Parses `{:k v, :k v ...}` with string, keyword, integer and nil values.
fn edn_map(text: &str) -> Result<HashMap<String, Edn>, String> {
    let body = text
        .trim()
        .strip_prefix('{')
        .and_then(|t| t.strip_suffix('}'))
        .ok_or("not a {...} map")?;
    let mut chars = body.chars().peekable();
    let mut map = HashMap::new();
    let skip = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>| {
        while chars.next_if(|c| c.is_whitespace() || *c == ',').is_some() {}
    };
    let word = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>| {
        let mut w = String::new();
        while let Some(c) = chars.next_if(|c| !c.is_whitespace() && *c != ',') {
            w.push(c);
        }
        w
    };
    loop {
        skip(&mut chars);
        if chars.peek().is_none() {
            return Ok(map);
        }
        let key = word(&mut chars);
        let key = key
            .strip_prefix(':')
            .ok_or(format!("key {key:?} is not a keyword"))?
            .to_string();
        skip(&mut chars);
        let value = if chars.next_if_eq(&'"').is_some() {
            let mut s = String::new();
            loop {
                match chars.next().ok_or("unterminated string")? {
                    '"' => break,
                    '\\' => match chars.next().ok_or("unterminated string")? {
                        'n' => s.push('\n'),
                        't' => s.push('\t'),
                        c => s.push(c),
                    },
                    c => s.push(c),
                }
            }
            Edn::Str(s)
        } else {
            let w = word(&mut chars);
            match w.as_str() {
                "" => return Err(format!("no value for :{key}")),
                "nil" => Edn::Nil,
                _ => match w.strip_prefix(':') {
                    Some(k) => Edn::Keyword(k.to_string()),
                    None => Edn::Int(number(&w)?),
                },
            }
        };
        if map.insert(key.clone(), value).is_some() {
            return Err(format!(":{key} appears twice"));
        }
    }
}

/// Reads a key-value log as a key-value history.
pub fn parse_kv_log(text: &str) -> Result<History<KvInput, KvOutput>, FormatError> {
    let mut builder = Builder::new();
    for (n, raw) in text.lines().enumerate() {
        let line = n + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let bad = |message: String| FormatError { line, message };
        let mut map = edn_map(raw).map_err(bad)?;
        let mut field = |name: &str| map.remove(name).ok_or_else(|| bad(format!("no :{name}")));
        let process = match field("process")? {
            Edn::Int(p) if p >= 0 => p as u64,
            other => return Err(bad(format!(":process is {other:?}"))),
        };
        let (kind, f) = match (field("type")?, field("f")?) {
            (Edn::Keyword(kind), Edn::Keyword(f)) => (kind, f),
            (kind, f) => return Err(bad(format!(":type {kind:?} and :f {f:?} must be keywords"))),
        };
        let key = match field("key")? {
            Edn::Str(key) => key,
            other => return Err(bad(format!(":key is {other:?}"))),
        };
        let value = field("value")?;
        let kind =
            Kind::parse(&format!(":{kind}")).ok_or_else(|| bad(format!("unknown type :{kind}")))?;
        if kind == Kind::Invoke {
            let input = match (f.as_str(), value) {
                ("get", Edn::Nil) => KvInput::Get { key },
                ("put", Edn::Str(value)) => KvInput::Put { key, value },
                ("append", Edn::Str(value)) => KvInput::Append { key, value },
                (f, value) => return Err(bad(format!("cannot invoke :{f} with {value:?}"))),
            };
            builder.invoke(line, process, input)?;
            continue;
        }
        builder.complete(line, process, |input| {
            if input.key() != key {
                return Err(format!(
                    "key {key:?} completes an operation on {:?}",
                    input.key()
                ));
            }
            Ok(match (kind, input, f.as_str()) {
                (Kind::Info, ..) | (Kind::Fail, KvInput::Get { .. }, "get") => Completion::Pending,
                (Kind::Fail, KvInput::Put { .. }, "put")
                | (Kind::Fail, KvInput::Append { .. }, "append") => Completion::Dropped,
                (_, KvInput::Get { .. }, "get") => match value {
                    Edn::Str(value) => Completion::Returned(KvOutput::Get { value }),
                    other => return Err(format!("a get returned {other:?}")),
                },
                (_, KvInput::Put { .. }, "put") => Completion::Returned(KvOutput::Put),
                (_, KvInput::Append { .. }, "append") => Completion::Returned(KvOutput::Append),
                (_, input, f) => {
                    return Err(format!(":{f} completes an operation invoked as {input:?}"));
                }
            })
        })?;
    }
    builder.finish(text.lines().count())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ETCD: &str = "\
INFO  jepsen.util - 0\t:invoke\t:write\t3
INFO  jepsen.util - 1\t:invoke\t:read\tnil
INFO  jepsen.util - 0\t:ok\t:write\t3
INFO  jepsen.util - 1\t:ok\t:read\t3
INFO  jepsen.util - 2\t:invoke\t:cas\t[3 4]
INFO  jepsen.util - 1\t:invoke\t:read\tnil
INFO  jepsen.util - 0\t:invoke\t:write\t1
INFO  jepsen.util - 1\t:fail\t:read\t:timed-out
INFO  jepsen.util - 2\t:fail\t:cas\t[3 4]
INFO  jepsen.util - 3\t:invoke\t:cas\t[1 2]
INFO  jepsen.util - 0\t:info\t:write\t:timed-out
INFO  jepsen.util - 4\t:invoke\t:write\t5
INFO  jepsen.util - 4\t:fail\t:write\t5
";

    #[test]
    fn etcd_events_become_operations_with_jepsen_meaning() {
        let h = parse_etcd_log(ETCD).unwrap();
        let ops = h.operations();
        // The failed write is dropped; the rest keep their invocation order.
        assert_eq!(ops.len(), 6);
        assert_eq!(
            ops[0],
            Operation::returned(
                0,
                0,
                RegisterInput::Write { value: 3 },
                2,
                RegisterOutput::Write
            )
        );
        assert_eq!(
            ops[1],
            Operation::returned(
                1,
                1,
                RegisterInput::Read,
                3,
                RegisterOutput::Read { value: Some(3) }
            )
        );
        assert_eq!(
            ops[2],
            Operation::returned(
                2,
                4,
                RegisterInput::Cas { from: 3, to: 4 },
                8,
                RegisterOutput::Cas { ok: false }
            )
        );
        // A timed-out read, an :info write and a cas open at the end never returned.
        assert_eq!(ops[3], Operation::pending(1, 5, RegisterInput::Read));
        assert_eq!(
            ops[4],
            Operation::pending(0, 6, RegisterInput::Write { value: 1 })
        );
        assert_eq!(
            ops[5],
            Operation::pending(3, 9, RegisterInput::Cas { from: 1, to: 2 })
        );
    }

    #[test]
    fn etcd_errors_name_the_line() {
        let twice =
            "INFO  jepsen.util - 0 :invoke :read nil\nINFO  jepsen.util - 0 :invoke :read nil\n";
        assert_eq!(
            parse_etcd_log(twice).unwrap_err().to_string(),
            "line 2: process 0 invokes while its operation of line 1 is open"
        );
        let orphan = "INFO  jepsen.util - 7 :ok :read 1\n";
        assert!(
            parse_etcd_log(orphan)
                .unwrap_err()
                .to_string()
                .starts_with("line 1: process 7")
        );
        let mismatch =
            "INFO  jepsen.util - 0 :invoke :read nil\nINFO  jepsen.util - 0 :ok :write 1\n";
        assert!(
            parse_etcd_log(mismatch)
                .unwrap_err()
                .to_string()
                .starts_with("line 2: :write completes")
        );
        assert!(parse_etcd_log("INFO  jepsen.util - 0 :invoke :cas [1]\n").is_err());
        assert!(parse_etcd_log("something else\n").is_err());
    }

    #[test]
    fn kv_events_become_operations() {
        let text = r#"{:process 0, :type :invoke, :f :put, :key "a", :value "x \"1\""}
{:process 1, :type :invoke, :f :get, :key "a", :value nil}
{:process 0, :type :ok, :f :put, :key "a", :value "x \"1\""}
{:process 1, :type :ok, :f :get, :key "a", :value "x \"1\""}
{:process 2, :type :invoke, :f :append, :key "b", :value "y"}
"#;
        let h = parse_kv_log(text).unwrap();
        let put = KvInput::Put {
            key: "a".into(),
            value: "x \"1\"".into(),
        };
        assert_eq!(
            h.operations()[0],
            Operation::returned(0, 0, put, 2, KvOutput::Put)
        );
        assert_eq!(
            h.operations()[1],
            Operation::returned(
                1,
                1,
                KvInput::Get { key: "a".into() },
                3,
                KvOutput::Get {
                    value: "x \"1\"".into()
                }
            )
        );
        assert_eq!(
            h.operations()[2],
            Operation::pending(
                2,
                4,
                KvInput::Append {
                    key: "b".into(),
                    value: "y".into()
                }
            )
        );
    }

    #[test]
    fn kv_errors_name_the_line() {
        let text = "{:process 0, :type :invoke, :f :get, :key \"a\", :value nil}\n{:process 0, :type :ok, :f :get, :key \"b\", :value \"\"}\n";
        assert!(
            parse_kv_log(text)
                .unwrap_err()
                .to_string()
                .starts_with("line 2: key \"b\"")
        );
        assert!(
            parse_kv_log("{:process 0, :type :invoke}\n")
                .unwrap_err()
                .to_string()
                .contains("no :f")
        );
        assert!(parse_kv_log("{:process 0 :type}\n").is_err());
        assert!(
            parse_kv_log("{:process 0, :type :invoke, :f :get, :key \"a, :value nil}\n").is_err()
        );
    }
}
