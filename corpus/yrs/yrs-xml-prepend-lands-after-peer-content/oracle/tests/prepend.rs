//! Hidden oracle: inserting an XML node at index 0 puts it first, on the inserting replica and on
//! every replica that receives it, whoever created the existing nodes.

use yrs::updates::decoder::Decode;
use yrs::{
    Doc, GetString, ReadTxn, Transact, Update, XmlElementPrelim, XmlElementRef, XmlFragment,
    XmlFragmentRef, XmlTextPrelim,
};

fn sync(from: &Doc, to: &Doc) {
    let sv = to.transact().state_vector();
    let update = from.transact().encode_state_as_update_v1(&sv);
    to.transact_mut()
        .apply_update(Update::decode_v1(&update).unwrap())
        .unwrap();
}

fn xml(doc: &Doc) -> String {
    let frag = doc.get_or_insert_xml_fragment("body");
    let txn = doc.transact();
    frag.get_string(&txn)
}

#[test]
fn heading_prepended_by_second_author() {
    let author = Doc::with_client_id(100);
    let editor = Doc::with_client_id(200);
    let body = author.get_or_insert_xml_fragment("body");
    body.insert(&mut author.transact_mut(), 0, XmlElementPrelim::empty("para"));
    body.insert(&mut author.transact_mut(), 1, XmlElementPrelim::empty("list"));
    sync(&author, &editor);

    let ebody = editor.get_or_insert_xml_fragment("body");
    ebody.insert(&mut editor.transact_mut(), 0, XmlElementPrelim::empty("title"));
    let expected = "<title></title><para></para><list></list>";
    assert_eq!(xml(&editor), expected, "on the replica that inserted");
    sync(&editor, &author);
    assert_eq!(xml(&author), expected, "on the replica that received it");
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
