//! Hidden oracle: inserting an XML node at index 0 puts it first, on the inserting replica and on
//! every replica that receives it, whoever created the existing nodes.

use yrs::updates::decoder::Decode;
use yrs::{
    Doc, GetString, ReadTxn, Transact, Update, XmlElementPrelim, XmlElementRef, XmlFragment,
    XmlFragmentRef, XmlTextPrelim,
};

/// Brings `to` up to date with `from`; returns the size of the update sent.
pub fn sync(from: &Doc, to: &Doc) -> usize {
    let sv = to.transact().state_vector();
    let update = from.transact().encode_state_as_update_v1(&sv);
    to.transact_mut()
        .apply_update(Update::decode_v1(&update).unwrap())
        .unwrap();
    update.len()
}

pub fn xml(doc: &Doc) -> String {
    let frag = doc.get_or_insert_xml_fragment("body");
    let txn = doc.transact();
    frag.get_string(&txn)
}

/// The symptom's steps: an author writes two blocks, an editor syncs and prepends a title, the
/// author receives it and prepends a note. `observe` sees both docs after every step.
pub fn author_and_editor(author_id: u64, editor_id: u64, observe: &mut dyn FnMut(String, &Doc, &Doc)) {
    let author = Doc::with_client_id(author_id);
    let editor = Doc::with_client_id(editor_id);
    let body = author.get_or_insert_xml_fragment("body");
    body.insert(&mut author.transact_mut(), 0, XmlElementPrelim::empty("para"));
    body.insert(&mut author.transact_mut(), 1, XmlElementPrelim::empty("list"));
    observe("author: insert(0, <para>), insert(1, <list>)".into(), &author, &editor);
    let n = sync(&author, &editor);
    observe(format!("author -> editor update ({n} bytes) applied"), &author, &editor);
    let ebody = editor.get_or_insert_xml_fragment("body");
    ebody.insert(&mut editor.transact_mut(), 0, XmlElementPrelim::empty("title"));
    observe("editor: insert(0, <title>)".into(), &author, &editor);
    let n = sync(&editor, &author);
    observe(format!("editor -> author update ({n} bytes) applied"), &author, &editor);
    body.insert(&mut author.transact_mut(), 0, XmlElementPrelim::empty("note"));
    observe("author: insert(0, <note>)".into(), &author, &editor);
}

#[test]
fn heading_prepended_by_second_author() {
    for (author_id, editor_id) in [(100, 200), (200, 100)] {
        let mut step = 0;
        author_and_editor(author_id, editor_id, &mut |_, author, editor| {
            step += 1;
            let what = format!("author {author_id}, editor {editor_id}, step {step}");
            let blocks = "<para></para><list></list>";
            let (a, e) = match step {
                1 => (blocks.to_string(), String::new()),
                2 => (blocks.to_string(), blocks.to_string()),
                3 => (blocks.to_string(), format!("<title></title>{blocks}")),
                4 => (format!("<title></title>{blocks}"), format!("<title></title>{blocks}")),
                _ => (format!("<note></note><title></title>{blocks}"), format!("<title></title>{blocks}")),
            };
            assert_eq!(xml(author), a, "{what}: the author's body");
            assert_eq!(xml(editor), e, "{what}: the editor's body");
        });
        assert_eq!(step, 5);
    }
}

#[test]
fn prepend_goes_first_for_any_pair_of_client_ids() {
    let ids = [3u64, 17, 250, 4096, 70001];
    for &first in &ids {
        for &second in &ids {
            if first == second {
                continue;
            }
            for existing in 1..=3u32 {
                let a = Doc::with_client_id(first);
                let b = Doc::with_client_id(second);
                let fa = a.get_or_insert_xml_fragment("body");
                let mut expected = String::new();
                for i in 0..existing {
                    let tag = format!("n{i}");
                    fa.insert(&mut a.transact_mut(), i, XmlElementPrelim::empty(tag.as_str()));
                    expected.push_str(&format!("<{tag}></{tag}>"));
                }
                sync(&a, &b);
                let fb: XmlFragmentRef = b.get_or_insert_xml_fragment("body");
                fb.insert(&mut b.transact_mut(), 0, XmlTextPrelim::new("lead"));
                let expected = format!("lead{expected}");
                assert_eq!(xml(&b), expected, "client {second} prepending to {existing} node(s) of client {first}");
                sync(&b, &a);
                assert_eq!(xml(&a), expected, "client {first} after receiving the prepend of {second}");
            }
        }
    }
}

#[test]
fn prepend_into_nested_element() {
    let a = Doc::with_client_id(8);
    let b = Doc::with_client_id(9);
    let fa = a.get_or_insert_xml_fragment("body");
    let section: XmlElementRef = fa.insert(&mut a.transact_mut(), 0, XmlElementPrelim::empty("section"));
    section.insert(&mut a.transact_mut(), 0, XmlElementPrelim::empty("p"));
    sync(&a, &b);
    let fb = b.get_or_insert_xml_fragment("body");
    let bsection: XmlElementRef = {
        let txn = b.transact();
        fb.get(&txn, 0).unwrap().try_into().unwrap()
    };
    bsection.insert(&mut b.transact_mut(), 0, XmlElementPrelim::empty("h2"));
    let expected = "<section><h2></h2><p></p></section>";
    assert_eq!(xml(&b), expected);
    sync(&b, &a);
    assert_eq!(xml(&a), expected);
}

#[test]
fn prepend_after_the_first_node_was_removed() {
    for (first, second) in [(5u64, 900u64), (900, 5)] {
        let a = Doc::with_client_id(first);
        let b = Doc::with_client_id(second);
        let fa = a.get_or_insert_xml_fragment("body");
        for (i, tag) in ["gone", "kept", "last"].into_iter().enumerate() {
            fa.insert(&mut a.transact_mut(), i as u32, XmlElementPrelim::empty(tag));
        }
        fa.remove_range(&mut a.transact_mut(), 0, 1);
        sync(&a, &b);
        let fb = b.get_or_insert_xml_fragment("body");
        fb.insert(&mut b.transact_mut(), 0, XmlElementPrelim::empty("head"));
        let expected = "<head></head><kept></kept><last></last>";
        assert_eq!(xml(&b), expected, "client {second} prepending after client {first} removed its first node");
        sync(&b, &a);
        assert_eq!(xml(&a), expected, "client {first} after receiving the prepend");
        // The fragment keeps working: a second prepend from the other side goes first too.
        fa.insert(&mut a.transact_mut(), 0, XmlTextPrelim::new("top"));
        sync(&a, &b);
        assert_eq!(xml(&b), format!("top{expected}"));
    }
}
