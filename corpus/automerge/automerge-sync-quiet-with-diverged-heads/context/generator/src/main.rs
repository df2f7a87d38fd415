//! Replays one two-peer session that ends with both peers quiet but different heads, and prints
//! the message sequence and the final sync states as Markdown.

use std::collections::HashMap;

use automerge::sync::{self, Message, SyncDoc};
use automerge::transaction::Transactable;
use automerge::{ActorId, AutoCommit, ChangeHash, ROOT};

fn actor(s: &str) -> ActorId {
    let bytes: Vec<u8> = (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect();
    ActorId::from(bytes)
}

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

fn main() {
    let mut a = AutoCommit::new().with_actor(actor("644f1da475aef2e6a0b3aa87a78c4516"));
    let mut b = AutoCommit::new().with_actor(actor("bbae6be7a604e8aa13801f759d07abff"));
    let (mut sa, mut sb) = (sync::State::new(), sync::State::new());
    let mut names = Names(HashMap::new());
    let mut rows: Vec<String> = Vec::new();
    let mut step = 0;

    let mut pump = |a: &mut AutoCommit, b: &mut AutoCommit, sa: &mut sync::State, sb: &mut sync::State, names: &Names, rows: &mut Vec<String>| {
        loop {
            let to_b = a.sync().generate_sync_message(sa);
            let to_a = b.sync().generate_sync_message(sb);
            step += 1;
            match &to_b {
                Some(m) => rows.push(format!("| {step} | A -> B | {} |", describe(names, m))),
                None => rows.push(format!("| {step} | A | generate_sync_message -> None |")),
            }
            match &to_a {
                Some(m) => rows.push(format!("| {step} | B -> A | {} |", describe(names, m))),
                None => rows.push(format!("| {step} | B | generate_sync_message -> None |")),
            }
            let quiet = to_b.is_none() && to_a.is_none();
            if let Some(m) = to_b {
                b.sync().receive_sync_message(sb, m).unwrap();
            }
            if let Some(m) = to_a {
                a.sync().receive_sync_message(sa, m).unwrap();
            }
            if quiet {
                break;
            }
        }
    };

    rows.push("| - | both | empty documents, first sync |".into());
    pump(&mut a, &mut b, &mut sa, &mut sb, &names, &mut rows);

    b.put(ROOT, "title", "from b").unwrap();
    names.0.insert(b.get_heads()[0], "B1".into());
    rows.push("| - | B | local edit: put title = \"from b\" (change B1) |".into());
    let m = b.sync().generate_sync_message(&mut sb).unwrap();
    rows.push(format!("| - | B -> A | {} |", describe(&names, &m)));
    a.sync().receive_sync_message(&mut sa, m).unwrap();
    a.put(ROOT, "title", "from a").unwrap();
    names.0.insert(a.get_heads()[0], "A1".into());
    rows.push("| - | A | local edit before answering: put title = \"from a\" (change A1, depends on B1) |".into());
    pump(&mut a, &mut b, &mut sa, &mut sb, &names, &mut rows);

    println!("# Sync session that goes quiet too early\n");
    println!("Actors: A = 644f1da4..., B = bbae6be7.... Each round: both peers generate, then both receive.");
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
