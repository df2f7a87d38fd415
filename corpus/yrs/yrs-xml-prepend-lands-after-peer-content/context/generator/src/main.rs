//! Produces ../prepend-trace.md: an author creates block nodes in an XmlFragment, a second client
//! syncs and inserts a node at index 0; the table shows each fragment after every step, for both
//! orders of client ids.

use yrs::updates::decoder::Decode;
use yrs::{Doc, GetString, ReadTxn, Transact, Update, XmlElementPrelim, XmlFragment};

fn sync(from: &Doc, to: &Doc) -> usize {
    let sv = to.transact().state_vector();
    let update = from.transact().encode_state_as_update_v1(&sv);
    to.transact_mut().apply_update(Update::decode_v1(&update).unwrap()).unwrap();
    update.len()
}

fn show(doc: &Doc) -> String {
    let f = doc.get_or_insert_xml_fragment("body");
    let txn = doc.transact();
    let len = f.len(&txn);
    format!("`{}` (len {len})", f.get_string(&txn))
}

fn scenario(author_id: u64, editor_id: u64) {
    println!("\n## author = client {author_id}, editor = client {editor_id}\n");
    println!("| step | author's `body` | editor's `body` |");
    println!("|---|---|---|");
    let author = Doc::with_client_id(author_id);
    let editor = Doc::with_client_id(editor_id);
    let body = author.get_or_insert_xml_fragment("body");
    body.insert(&mut author.transact_mut(), 0, XmlElementPrelim::empty("para"));
    body.insert(&mut author.transact_mut(), 1, XmlElementPrelim::empty("list"));
    println!("| author: insert(0, <para>), insert(1, <list>) | {} | {} |", show(&author), show(&editor));
    let n = sync(&author, &editor);
    println!("| author -> editor update ({n} bytes) applied | {} | {} |", show(&author), show(&editor));
    let ebody = editor.get_or_insert_xml_fragment("body");
    ebody.insert(&mut editor.transact_mut(), 0, XmlElementPrelim::empty("title"));
    println!("| editor: insert(0, <title>) | {} | {} |", show(&author), show(&editor));
    let n = sync(&editor, &author);
    println!("| editor -> author update ({n} bytes) applied | {} | {} |", show(&author), show(&editor));
    body.insert(&mut author.transact_mut(), 0, XmlElementPrelim::empty("note"));
    println!("| author: insert(0, <note>) | {} | {} |", show(&author), show(&editor));
}

fn main() {
    scenario(100, 200);
    scenario(200, 100);
}
