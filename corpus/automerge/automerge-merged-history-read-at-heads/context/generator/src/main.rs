//! Builds the server document of the oracle's reported shape (60 edits, 24 clients x 2 sessions,
//! merge, 50 edits) and prints what reading it at its own heads shows, as Markdown.

use automerge::{ActorId, AutoCommit, ReadDoc, ROOT};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::collections::HashMap;

/// The oracle's scenario: the actors, the server document and its reported shape.
#[path = "../../../oracle/tests/merged_history.rs"]
#[allow(dead_code)]
mod scenario;

fn main() {
    let mut short: HashMap<ActorId, String> = HashMap::new();
    let mut actors = scenario::Actors(SmallRng::seed_from_u64(11));
    let built = scenario::server_doc(&mut actors, scenario::REPORTED, &mut |actor, role| {
        short.insert(actor.clone(), role);
    });
    let mut server = built.server;

    let heads = server.get_heads();
    let all = server.get_changes(&[]);
    println!("# Server document after merging 24 clients\n");
    println!("Built by: 60 edits on the server; 24 forks, each making 2 edits with a new actor per edit;");
    println!("all forks merged into the server; 50 more edits on the server.\n");
    println!("```text");
    println!("changes in document: {}   actors: {}   heads: {:?}", all.len(), short.len(), heads);
    let stray = server.get_changes(&heads);
    println!("get_changes(&get_heads()) -> {} change(s)", stray.len());
    for c in &stray {
        println!(
            "  change {} actor {} seq {} deps {}",
            &c.hash().to_string()[..12],
            short.get(c.actor_id()).cloned().unwrap_or_default(),
            c.seq(),
            c.deps().len()
        );
        for child in all.iter().filter(|d| d.deps().contains(&c.hash())) {
            println!(
                "    depended on by {} actor {} seq {} (reported: {})",
                &child.hash().to_string()[..12],
                short.get(child.actor_id()).cloned().unwrap_or_default(),
                child.seq(),
                stray.iter().any(|x| x.hash() == child.hash())
            );
        }
    }
    println!("length(ROOT) = {}   length_at(ROOT, &heads) = {}", server.length(ROOT), server.length_at(ROOT, &heads));
    let mut differing = 0;
    for key in server.keys(ROOT).collect::<Vec<_>>() {
        let now = server.get(ROOT, &key).unwrap().map(|(v, _)| v.to_string());
        let at = server.get_at(ROOT, &key, &heads).unwrap().map(|(v, _)| v.to_string());
        if now != at {
            differing += 1;
            println!("get(ROOT, {key:?}) = {now:?}   get_at(ROOT, {key:?}, &heads) = {at:?}");
        }
    }
    let mut reloaded = AutoCommit::load(&server.save()).unwrap();
    println!("reloaded from save(): get_changes(&heads) -> {} change(s)", reloaded.get_changes(&heads).len());
    println!("keys whose value differs between get and get_at(&heads): {differing}");
    println!("```");
}
