//! Replays the oracle's reported session with its first known actor pair, which ends with both
//! peers quiet but different heads, and prints the message sequence and the final sync states as
//! Markdown.

use std::collections::HashMap;

use automerge::sync::Message;
use automerge::{AutoCommit, ChangeHash};
use rand::rngs::SmallRng;
use rand::SeedableRng;

/// The oracle's scenario: the reported session, its actor pairs and its loop.
#[path = "../../../oracle/tests/concurrent_edit_sync.rs"]
#[allow(dead_code)]
mod scenario;

struct Names(HashMap<ChangeHash, String>);

impl Names {
    fn of(&self, h: &ChangeHash) -> String {
        self.0.get(h).cloned().unwrap_or_else(|| format!("{}..", &h.to_string()[..8]))
    }
    fn list(&self, hs: &[ChangeHash]) -> String {
        format!("[{}]", hs.iter().map(|h| self.of(h)).collect::<Vec<_>>().join(", "))
    }
}

fn describe(names: &Names, m: &Message) -> String {
    let have = m.have.iter().map(|h| format!("last_sync={}", names.list(&h.last_sync))).collect::<Vec<_>>().join("; ");
    let changes = m.changes.iter().map(|c| names.of(&c.hash())).collect::<Vec<_>>();
    format!(
        "heads={} need={} have=({}) changes=[{}]",
        names.list(&m.heads),
        names.list(&m.need),
        have,
        changes.join(", ")
    )
}

/// Records the session as table rows, naming the two edits' changes.
struct Recorder {
    names: Names,
    rows: Vec<String>,
    first_sync_announced: bool,
}

impl scenario::Observer for Recorder {
    fn generated(&mut self, round: usize, from: scenario::Peer, message: Option<&Message>) {
        if !self.first_sync_announced {
            self.rows.push("| - | both | empty documents, first sync |".into());
            self.first_sync_announced = true;
        }
        let (who, arrow) = match from {
            scenario::Peer::A => ("A", "A -> B"),
            scenario::Peer::B => ("B", "B -> A"),
        };
        match message {
            Some(m) => self.rows.push(format!("| {round} | {arrow} | {} |", describe(&self.names, m))),
            None => self.rows.push(format!("| {round} | {who} | generate_sync_message -> None |")),
        }
    }

    fn b_edited(&mut self, b: &mut AutoCommit) {
        self.names.0.insert(b.get_heads()[0], "B1".into());
        self.rows.push("| - | B | local edit: put title = \"from b\" (change B1) |".into());
    }

    fn b_sent(&mut self, message: &Message) {
        self.rows.push(format!("| - | B -> A | {} |", describe(&self.names, message)));
    }

    fn a_edited(&mut self, a: &mut AutoCommit) {
        self.names.0.insert(a.get_heads()[0], "A1".into());
        self.rows.push("| - | A | local edit before answering: put title = \"from a\" (change A1, depends on B1) |".into());
    }
}

fn main() {
    let (x, y) = scenario::KNOWN_PAIRS[0];
    let session = scenario::Session::reported(scenario::unhex(x), scenario::unhex(y));
    let mut recorder = Recorder { names: Names(HashMap::new()), rows: Vec::new(), first_sync_announced: false };
    let mut values = SmallRng::seed_from_u64(0);
    let ended = scenario::run_session(&session, &mut values, &mut recorder);
    let scenario::Ended { mut a, mut b, sa, sb, .. } = ended;
    let Recorder { names, rows, .. } = recorder;

    println!("# Sync session that goes quiet too early\n");
    println!("Actors: A = {}..., B = {}.... Each round: both peers generate, then both receive.", &x[..8], &y[..8]);
    println!("Change names are ours (hashes abbreviated).\n");
    println!("| round | who | message / result |\n|---|---|---|");
    for r in rows {
        println!("{r}");
    }
    println!("\n## After the loop\n");
    println!("```text");
    println!("A heads {}   B heads {}", names.list(&a.get_heads()), names.list(&b.get_heads()));
    for (who, s) in [("A", &sa), ("B", &sb)] {
        println!(
            "{who} state: shared_heads={} last_sent_heads={} their_heads={} their_need={} sent_hashes={} in_flight={}",
            names.list(&s.shared_heads),
            names.list(&s.last_sent_heads),
            s.their_heads.as_ref().map(|h| names.list(h)).unwrap_or("None".into()),
            s.their_need.as_ref().map(|h| names.list(h)).unwrap_or("None".into()),
            names.list(&s.sent_hashes.iter().copied().collect::<Vec<_>>()),
            s.in_flight
        );
    }
    println!("```");
    println!("\nCalling generate_sync_message again on either side keeps returning None.");
}
