//! Replays the oracle's reported session (two writers and a viewer that autosaves) and prints what
//! each replica did and what each save and reload gave, as Markdown.

#[path = "../../../oracle/tests/idle_actor_save.rs"]
#[allow(dead_code)]
mod scenario;

struct Log(Vec<String>);

impl scenario::Observer for Log {
    fn note(&mut self, line: String) {
        self.0.push(line);
    }
}

fn main() {
    let mut log = Log(Vec::new());
    let outcome = scenario::reported(&mut log);
    println!("# Replay of the viewer session (automerge 0.5.10, in process)");
    println!();
    println!("Three `AutoCommit` replicas with fixed actor ids; every sync runs the sync protocol");
    println!("on fresh `sync::State`s until both sides return `None`. A reload is");
    println!("`AutoCommit::load(&save)` followed by setting the same actor id again.");
    println!();
    println!("| step | event |");
    println!("|---|---|");
    for (i, line) in log.0.iter().enumerate() {
        println!("| {} | {} |", i + 1, line.replace('|', "\\|"));
    }
    println!();
    match outcome {
        Ok(()) => println!("Outcome: every save loaded."),
        Err(e) => println!("Outcome: {e}"),
    }
}
