//! The program the grader builds around a submission: `main::<Submission>()` reads schedules
//! and prints one result line per schedule, so that the grader knows which schedule a server
//! that never yields was stuck on.
//!
//! Usage: `DRIVER START [--histories DIR]`, where `START` is the index of the first schedule to
//! run. Standard input holds a marker line, the word each result line starts with (the grader
//! picks a new one each time, so what a server prints is not read as a result), then the
//! schedules as a JSON list. Neither is on the command line or in a file, where a server could
//! find them; both are read before the first server starts.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::api::Server;
use crate::grade::grade_all;
use crate::plan::Schedule;

const USAGE: &str = "usage: DRIVER START [--histories DIR] < MARKER-LINE + SCHEDULES.json";

#[derive(Debug)]
struct Args {
    start: usize,
    histories: Option<PathBuf>,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let [start, rest @ ..] = args else {
        return Err(USAGE.into());
    };
    let start = start
        .parse()
        .map_err(|_| format!("START is not an index: {start}\n{USAGE}"))?;
    let histories = match rest {
        [] => None,
        [flag, dir] if flag == "--histories" => Some(PathBuf::from(dir)),
        _ => return Err(USAGE.into()),
    };
    Ok(Args { start, histories })
}

/// The marker and the schedules, from the driver's standard input.
fn read_input(input: &str) -> Result<(String, Vec<Schedule>), String> {
    let (marker, json) = input.split_once('\n').unwrap_or((input, ""));
    if marker.is_empty() || marker.contains(char::is_whitespace) {
        return Err(format!(
            "the first line must be one word, the marker\n{USAGE}"
        ));
    }
    let schedules: Vec<Schedule> = serde_json::from_str(json)
        .map_err(|e| format!("standard input is not a marker and a list of schedules: {e}"))?;
    for s in &schedules {
        s.plan
            .validate()
            .map_err(|e| format!("schedule {}: {e}", s.name))?;
    }
    Ok((marker.to_string(), schedules))
}

/// Runs the schedules of the command line on server `S`, printing each result as a JSON line.
pub fn main<S: Server>() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let outcome = parse(&args).and_then(|args| {
        let mut input = String::new();
        std::io::stdin()
            .read_to_string(&mut input)
            .map_err(|e| format!("cannot read standard input: {e}"))?;
        let (marker, schedules) = read_input(&input)?;
        let rest = schedules.get(args.start..).unwrap_or_default();
        grade_all::<S>(
            rest,
            args.histories.as_deref(),
            &marker,
            &mut std::io::stdout().lock(),
        )
        .map_err(|e| e.to_string())
    });
    match outcome {
        Ok(_) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("{message}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn arguments_are_read_and_bad_ones_named() {
        let a = parse(&strings(&["3", "--histories", "h"])).unwrap();
        assert_eq!((a.start, a.histories), (3, Some(PathBuf::from("h"))));
        assert!(parse(&strings(&[])).unwrap_err().contains("usage"));
        assert!(
            parse(&strings(&["x"]))
                .unwrap_err()
                .contains("not an index")
        );
        assert!(parse(&strings(&["1", "--what"])).is_err());
    }

    #[test]
    fn the_marker_and_schedules_come_from_standard_input() {
        let (marker, schedules) = read_input("m1\n[]").unwrap();
        assert_eq!((marker.as_str(), schedules.len()), ("m1", 0));
        assert!(read_input("two words\n[]").unwrap_err().contains("marker"));
        assert!(read_input("m1\n{").unwrap_err().contains("schedules"));
        assert!(read_input("m1").is_err());
    }
}
