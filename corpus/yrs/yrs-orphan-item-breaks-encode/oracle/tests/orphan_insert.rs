//! Hidden oracle: a replica that receives an insert into a nested type it already saw removed must
//! stay encodable, and everyone must converge once all updates are exchanged.

use yrs::types::ToJson;
use yrs::updates::decoder::Decode;
use yrs::{Array, ArrayPrelim, ArrayRef, Doc, Map, MapRef, ReadTxn, StateVector, Text, TextPrelim, TextRef, Transact, Update};

pub fn apply(doc: &Doc, update: &[u8]) {
    let mut txn = doc.transact_mut();
    txn.apply_update(Update::decode_v1(update).unwrap());
}

fn diff_since(doc: &Doc, sv: &StateVector) -> Vec<u8> {
    doc.transact().encode_state_as_update_v1(sv)
}

pub fn full_state(doc: &Doc) -> Vec<u8> {
    doc.transact().encode_state_as_update_v1(&StateVector::default())
}

fn sync_all(docs: &[&Doc]) {
    for from in docs {
        for to in docs {
            if std::ptr::eq(*from, *to) {
                continue;
            }
            let sv = to.transact().state_vector();
            let update = diff_since(from, &sv);
            apply(to, &update);
        }
    }
}

/// The symptom's relay: the owner (11) created an empty nested text under `draft`, the editor (33)
/// typed into it while the owner removed the entry, and the server (22) received the removal
/// first. `observe` sees the server after each update it applies, with the update's size.
pub struct Relay {
    pub owner: Doc,
    pub server: Doc,
    pub editor: Doc,
}

pub fn removal_before_late_typing(observe: &mut dyn FnMut(&str, usize, &Doc)) -> Relay {
    let owner = Doc::with_client_id(11);
    let server = Doc::with_client_id(22);
    let editor = Doc::with_client_id(33);
    let notes: MapRef = owner.get_or_insert_map("notes");
    notes.insert(&mut owner.transact_mut(), "draft", TextPrelim::new(""));
    let init = full_state(&owner);
    apply(&server, &init);
    observe("initial", init.len(), &server);
    apply(&editor, &init);

    // The editor types into the (still empty) nested text ...
    let before = editor.transact().state_vector();
    let editor_notes: MapRef = editor.get_or_insert_map("notes");
    let draft: TextRef = {
        let txn = editor.transact();
        editor_notes.get(&txn, "draft").unwrap().cast().unwrap()
    };
    draft.insert(&mut editor.transact_mut(), 0, "hello");
    let typed = diff_since(&editor, &before);

    // ... while the owner removes the whole entry.
    let before = owner.transact().state_vector();
    notes.remove(&mut owner.transact_mut(), "draft");
    let removed = diff_since(&owner, &before);

    // The server hears about the removal first.
    apply(&server, &removed);
    observe("removed", removed.len(), &server);
    apply(&server, &typed);
    observe("typed", typed.len(), &server);
    Relay { owner, server, editor }
}

#[test]
fn first_insert_into_removed_map_entry() {
    let Relay { owner, server, editor } = removal_before_late_typing(&mut |_, _, _| {});
    let notes: MapRef = owner.get_or_insert_map("notes");
    let editor_notes: MapRef = editor.get_or_insert_map("notes");
    let snapshot = full_state(&server);
    let fresh = Doc::with_client_id(44);
    apply(&fresh, &snapshot);

    sync_all(&[&owner, &server, &editor]);
    let json = |d: &Doc| d.get_or_insert_map("notes").to_json(&d.transact());
    assert_eq!(json(&server), json(&owner));
    assert_eq!(json(&server), json(&editor));
    assert_eq!(json(&fresh), json(&server));
    assert!(notes.get(&owner.transact(), "draft").is_none());

    // The editor keeps working: its next edit reaches everyone, the server and late joiners too.
    editor_notes.insert(&mut editor.transact_mut(), "title", "later");
    sync_all(&[&owner, &server, &editor, &fresh]);
    for d in [&owner, &server, &fresh] {
        assert_eq!(json(d), json(&editor));
        assert_eq!(d.transact().state_vector(), editor.transact().state_vector());
    }
    let joiner = Doc::with_client_id(45);
    apply(&joiner, &full_state(&server));
    assert_eq!(json(&joiner), json(&editor));
    assert_eq!(joiner.transact().state_vector(), editor.transact().state_vector());
}

#[test]
fn first_push_into_removed_nested_array() {
    let a = Doc::with_client_id(5);
    let b = Doc::with_client_id(6);
    let c = Doc::with_client_id(7);
    let rows: ArrayRef = a.get_or_insert_array("rows");
    rows.push_back(&mut a.transact_mut(), ArrayPrelim::default());
    rows.push_back(&mut a.transact_mut(), 1);
    let init = full_state(&a);
    apply(&b, &init);
    apply(&c, &init);

    let before = c.transact().state_vector();
    let inner: ArrayRef = {
        let c_rows = c.get_or_insert_array("rows");
        let txn = c.transact();
        c_rows.get(&txn, 0).unwrap().cast().unwrap()
    };
    inner.push_back(&mut c.transact_mut(), 42);
    inner.push_back(&mut c.transact_mut(), 43);
    let pushed = diff_since(&c, &before);

    let before = a.transact().state_vector();
    rows.remove(&mut a.transact_mut(), 0);
    let removed = diff_since(&a, &before);

    apply(&b, &removed);
    apply(&b, &pushed);
    // A peer joining now asks b for everything it has.
    let joiner = Doc::with_client_id(8);
    let snapshot = full_state(&b);
    apply(&joiner, &snapshot);

    sync_all(&[&a, &b, &c, &joiner]);
    let json = |d: &Doc| d.get_or_insert_array("rows").to_json(&d.transact());
    for d in [&b, &c, &joiner] {
        assert_eq!(json(d), json(&a));
    }
    assert_eq!(rows.len(&a.transact()), 1);

    // c keeps working: its next push reaches everyone, b's state stays complete.
    let c_rows: ArrayRef = c.get_or_insert_array("rows");
    c_rows.push_back(&mut c.transact_mut(), 2);
    sync_all(&[&a, &b, &c, &joiner]);
    for d in [&a, &b, &joiner] {
        assert_eq!(json(d), json(&c));
        assert_eq!(d.transact().state_vector(), c.transact().state_vector());
    }
    let late = Doc::with_client_id(9);
    apply(&late, &full_state(&b));
    assert_eq!(json(&late), json(&c));
    assert_eq!(late.transact().state_vector(), c.transact().state_vector());
}
