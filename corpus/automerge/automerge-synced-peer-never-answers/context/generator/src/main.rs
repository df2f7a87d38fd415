//! Replays the oracle's reported session (a client connects with a new sync state to a server
//! holding the same document and speaks first), then the same documents with the server speaking
//! first, and prints both message sequences and the final sync states as Markdown.

use std::collections::HashMap;

use automerge::sync::{Message, State, SyncDoc};
use automerge::{AutoCommit, ChangeHash};
use rand::rngs::SmallRng;
use rand::SeedableRng;

/// The oracle's scenario: the sessions, the connection loop and the checks.
#[path = "../../../oracle/tests/opening_reply.rs"]
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
    fn opt(&self, hs: &Option<Vec<ChangeHash>>) -> String {
        match hs {
            Some(h) => self.list(h),
            None => "None".into(),
        }
    }
    fn message(&self, m: &Message) -> String {
        let have = m.have.iter().map(|h| format!("last_sync={}", self.list(&h.last_sync))).collect::<Vec<_>>().join("; ");
        format!("heads={} need={} have=({}) changes={}", self.list(&m.heads), self.list(&m.need), have, m.changes.len())
    }
    fn state(&self, s: &State) -> String {
        format!(
            "shared_heads={} last_sent_heads={} their_heads={} in_flight={}",
            self.list(&s.shared_heads),
            self.list(&s.last_sent_heads),
            self.opt(&s.their_heads),
            s.in_flight
        )
    }
}

fn who(p: scenario::Peer) -> &'static str {
    match p {
        scenario::Peer::Client => "client",
        scenario::Peer::Server => "server",
    }
}

struct Recorder {
    names: Names,
    rows: Vec<String>,
}

impl scenario::Observer for Recorder {
    fn opened(&mut self, client: &AutoCommit, server: &AutoCommit, identical: bool) {
        let mut client = client.clone();
        for h in client.get_heads() {
            self.names.0.insert(h, "H".into());
        }
        let mut server = server.clone();
        self.rows.push(format!(
            "| - | both | open: client heads={} server heads={} (same changes: {identical}) |",
            self.names.list(&client.get_heads()),
            self.names.list(&server.get_heads())
        ));
    }
    fn generated(&mut self, step: usize, from: scenario::Peer, message: Option<&Message>) {
        match message {
            Some(m) => self.rows.push(format!("| {step} | {} -> {} | {} |", who(from), who(from.other()), self.names.message(m))),
            None => self.rows.push(format!("| {step} | {} | generate_sync_message -> None |", who(from))),
        }
    }
    fn received(&mut self, step: usize, to: scenario::Peer, _state: &State) {
        self.rows.push(format!("| {step} | {} | receive_sync_message -> Ok |", who(to)));
    }
}

fn run(title: &str, session: &scenario::Session, out: &mut String) {
    let mut rng = SmallRng::seed_from_u64(0);
    let mut rec = Recorder { names: Names(HashMap::new()), rows: Vec::new() };
    let mut ended = scenario::run_session(session, &mut rng, &mut rec);
    out.push_str(&format!("## {title}\n\n| step | who | message / result |\n|---|---|---|\n"));
    for r in &rec.rows {
        out.push_str(r);
        out.push('\n');
    }
    let names = &rec.names;
    out.push_str("\nAfter the loop (both sides returned None):\n\n```text\n");
    out.push_str(&format!("client heads {}   server heads {}\n", names.list(&ended.client.doc.get_heads()), names.list(&ended.server.doc.get_heads())));
    out.push_str(&format!("client state: {}\n", names.state(&ended.client.state)));
    out.push_str(&format!("server state: {}\n", names.state(&ended.server.state)));
    out.push_str(&format!("messages sent: client {}, server {}\n", ended.client.sent, ended.server.sent));
    let quiet = ended.client.doc.sync().generate_sync_message(&mut ended.client.state).is_none()
        && ended.server.doc.sync().generate_sync_message(&mut ended.server.state).is_none();
    out.push_str(&format!("asked again, both return None: {quiet}\n```\n\n"));
}

fn main() {
    let mut out = String::from(
        "# Opening a sync connection on a document both sides already hold\n\n\
         The client loaded its saved document (two changes; its head is H); the server holds the\n\
         same changes. Fresh `sync::State` on both ends; the loop lets each side receive what the other\n\
         sent, then asks it for its next message, until both return None. Change names are ours.\n\n",
    );
    let reported = scenario::Session::reported();
    run("Client speaks first (our app)", &reported, &mut out);
    let server_first = scenario::Session { opener: scenario::Peer::Server, ..reported };
    run("Same documents, server speaks first", &server_first, &mut out);
    print!("{out}");
}
