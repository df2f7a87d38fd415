//! The program the grader builds around a submission: `main::<Submission>()` reads schedules
//! and prints one result line per schedule, so that the grader knows which schedule a server
//! that never yields was stuck on.
//!
//! Usage: `DRIVER SCHEDULES.json START MARKER [--histories DIR]`, where `SCHEDULES.json` is a
//! JSON list of schedules, `START` the index of the first to run, and `MARKER` the word each
//! result line starts with (the grader picks a new one each time, so what a server prints is
//! not read as a result).

use std::path::PathBuf;
use std::process::ExitCode;

use crate::api::Server;
use crate::grade::grade_all;
use crate::plan::Schedule;

#[derive(Debug)]
struct Args {
    schedules: PathBuf,
    start: usize,
    marker: String,
    histories: Option<PathBuf>,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let usage = "usage: DRIVER SCHEDULES.json START MARKER [--histories DIR]";
    let [schedules, start, marker, rest @ ..] = args else {
        return Err(usage.into());
    };
    let start = start
        .parse()
        .map_err(|_| format!("START is not an index: {start}\n{usage}"))?;
    let histories = match rest {
        [] => None,
        [flag, dir] if flag == "--histories" => Some(PathBuf::from(dir)),
        _ => return Err(usage.into()),
    };
    if marker.is_empty() || marker.contains(char::is_whitespace) {
        return Err(format!("MARKER must be one word\n{usage}"));
    }
    Ok(Args {
        schedules: schedules.into(),
        start,
        marker: marker.clone(),
        histories,
    })
}

fn load(path: &PathBuf) -> Result<Vec<Schedule>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let schedules: Vec<Schedule> = serde_json::from_str(&text)
        .map_err(|e| format!("{} is not a list of schedules: {e}", path.display()))?;
    for s in &schedules {
        s.plan
            .validate()
            .map_err(|e| format!("schedule {}: {e}", s.name))?;
    }
    Ok(schedules)
}

/// Runs the schedules of the command line on server `S`, printing each result as a JSON line.
pub fn main<S: Server>() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let outcome = parse(&args).and_then(|args| {
        let schedules = load(&args.schedules)?;
        let rest = schedules.get(args.start..).unwrap_or_default();
        grade_all::<S>(
            rest,
            args.histories.as_deref(),
            &args.marker,
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
        let a = parse(&strings(&["s.json", "3", "m1", "--histories", "h"])).unwrap();
        assert_eq!((a.start, a.histories), (3, Some(PathBuf::from("h"))));
        assert_eq!(a.marker, "m1");
        assert!(parse(&strings(&["s.json", "3", "two words"])).is_err());
        assert!(parse(&strings(&["s.json"])).unwrap_err().contains("usage"));
        assert!(
            parse(&strings(&["s.json", "x", "m"]))
                .unwrap_err()
                .contains("not an index")
        );
        assert!(parse(&strings(&["s.json", "1", "m", "--what"])).is_err());
    }
}
