//! Regenerates `../prepend-trace.md` from the oracle's symptom scenario: an author creates block
//! nodes in an XmlFragment, a second client syncs and inserts a node at index 0; the table shows each
//! fragment after every step, for both orders of client ids.
//! Run: `cargo run --quiet > ../prepend-trace.md`

#[path = "../../../oracle/tests/prepend.rs"]
#[allow(dead_code)]
mod scenario;

use yrs::{Doc, Transact, XmlFragment};

fn show(doc: &Doc) -> String {
    let text = scenario::xml(doc);
    let f = doc.get_or_insert_xml_fragment("body");
    let len = f.len(&doc.transact());
    format!("`{text}` (len {len})")
}

fn main() {
    println!("# Prepending to a shared XML fragment\n");
    println!("Two docs share the XmlFragment `body`. Every insert is its own transaction; updates are");
    println!("`encode_state_as_update_v1` against the receiver's state vector. The same steps are run twice with");
    println!("the client ids swapped. Fragments are shown with `get_string`.");
    for (author_id, editor_id) in [(100, 200), (200, 100)] {
        println!("\n## author = client {author_id}, editor = client {editor_id}\n");
        println!("| step | author's `body` | editor's `body` |");
        println!("|---|---|---|");
        scenario::author_and_editor(author_id, editor_id, &mut |label, author, editor| {
            println!("| {label} | {} | {} |", show(author), show(editor));
        });
    }
}
