//! Three replicas of one y-octo text, each with its own client id: a writer (w), an editor that
//! goes on typing without seeing the writer's later edits (a), and a late editor (b) that
//! receives the writer's state, in which the start of the text was deleted, and types at
//! index 0. Replicas exchange their whole encoded state (`encode_update_v1`) pairwise until
//! every pair has synced twice, in an order drawn from the seed.
//!
//! The property: after the exchange every replica shows the same text; that text holds every
//! character typed and not deleted, and none that was deleted; and a fresh replica built
//! from any replica's encoded state shows that same text.
//!
//! The seeded test runs three plans per seed: client ids in any order, a prefix of one to
//! five characters of which the first one or more are deleted (by the writer, or by the late
//! editor itself), concurrent inserts of one to three characters right after the deleted
//! part, and the exchange order. `symptom_scenario` is the reported run, which the bundle
//! generator replays.

use rand::{seq::SliceRandom, Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use y_octo::Doc;

/// The shared text's name in every document.
pub const TEXT: &str = "note";

/// Replica indexes in `Plan::clients`, `Trace::texts` and exchange pairs.
pub const W: usize = 0;
pub const A: usize = 1;
pub const B: usize = 2;
pub const NAMES: [&str; 3] = ["w", "a", "b"];

/// The shape of one run.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Client ids of w, a and b.
    pub clients: [u64; 3],
    /// What w types first, one character at a time; every replica receives it.
    pub prefix: String,
    /// Whether w types the prefix back to front (each character at index 0), so that its
    /// characters are separate runs rather than one.
    pub backwards: bool,
    /// How many characters at the start of the prefix get deleted.
    pub deleted: u64,
    /// What a types right after the part that gets deleted, before it hears from w again.
    pub a_types: String,
    /// What a then types at index 0 (nothing when empty), concurrently with b's insert there.
    pub a_head: String,
    /// What w types at the same place before w deletes the start of the text.
    pub w_types: String,
    /// What b types at index 0 once it has w's state.
    pub b_types: String,
    /// Whether b deletes the start itself (after receiving w's insert) instead of w.
    pub b_deletes: bool,
    /// The exchange order: (from, to) pairs, run twice.
    pub order: Vec<(usize, usize)>,
}

/// One step of a run and every replica's text after it.
pub struct Step {
    pub what: String,
    pub texts: Vec<String>,
}

/// What a run did, for the checks and for the bundle.
#[derive(Default)]
pub struct Trace {
    pub steps: Vec<Step>,
    /// Each replica's text after the exchange.
    pub texts: Vec<String>,
    pub violations: Vec<String>,
}

/// A replica's text.
pub fn text(doc: &Doc) -> String {
    doc.get_or_create_text(TEXT).expect("text").to_string()
}

/// Sends `from`'s whole state to `to`.
fn send(docs: &mut [Doc], from: usize, to: usize) {
    let update = docs[from].encode_update_v1().expect("encode");
    docs[to].apply_update_from_binary_v1(update).expect("apply");
}

fn insert(doc: &Doc, index: u64, s: &str) {
    doc.get_or_create_text(TEXT)
        .expect("text")
        .insert(index, s)
        .expect("insert");
}

fn remove(doc: &Doc, index: u64, len: u64) {
    doc.get_or_create_text(TEXT)
        .expect("text")
        .remove(index, len)
        .expect("remove");
}

/// Runs one plan and checks the property.
pub fn run(plan: &Plan) -> Trace {
    let mut t = Trace::default();
    let mut docs: Vec<Doc> = plan.clients.iter().map(|&c| Doc::with_client(c)).collect();
    let step = |t: &mut Trace, docs: &[Doc], what: String| {
        t.steps.push(Step {
            what,
            texts: docs.iter().map(text).collect(),
        });
    };
    let at = plan.deleted;

    let chars: Vec<char> = plan.prefix.chars().collect();
    for k in 0..chars.len() {
        if plan.backwards {
            insert(&docs[W], 0, &chars[chars.len() - 1 - k].to_string());
        } else {
            insert(&docs[W], k as u64, &chars[k].to_string());
        }
    }
    send(&mut docs, W, A);
    send(&mut docs, W, B);
    let how = if plan.backwards {
        "back to front"
    } else {
        "in order"
    };
    step(
        &mut t,
        &docs,
        format!("w types {:?} {how}; a and b receive w's state", plan.prefix),
    );

    insert(&docs[A], at, &plan.a_types);
    step(&mut t, &docs, format!("a types {:?} at index {at}", plan.a_types));
    if !plan.a_head.is_empty() {
        insert(&docs[A], 0, &plan.a_head);
        step(&mut t, &docs, format!("a types {:?} at index 0", plan.a_head));
    }

    insert(&docs[W], at, &plan.w_types);
    if plan.b_deletes {
        step(&mut t, &docs, format!("w types {:?} at index {at}", plan.w_types));
    } else {
        remove(&docs[W], 0, at);
        let what = format!(
            "w types {:?} at index {at}, then deletes {at} character(s) at index 0",
            plan.w_types
        );
        step(&mut t, &docs, what);
    }

    send(&mut docs, W, B);
    step(&mut t, &docs, "b receives w's state".to_string());
    if plan.b_deletes {
        remove(&docs[B], 0, at);
        step(&mut t, &docs, format!("b deletes {at} character(s) at index 0"));
    }
    insert(&docs[B], 0, &plan.b_types);
    step(&mut t, &docs, format!("b types {:?} at index 0", plan.b_types));

    for &(from, to) in &plan.order {
        send(&mut docs, from, to);
        step(
            &mut t,
            &docs,
            format!("{} sends its state to {}", NAMES[from], NAMES[to]),
        );
    }
    for &(from, to) in &plan.order {
        send(&mut docs, from, to);
    }
    step(&mut t, &docs, "the same six sends again".to_string());

    t.texts = docs.iter().map(text).collect();
    check(plan, &docs, &mut t);
    t
}

fn check(plan: &Plan, docs: &[Doc], t: &mut Trace) {
    let first = &t.texts[0];
    if t.texts.iter().any(|x| x != first) {
        t.violations.push(format!(
            "replicas diverged after the exchange: {}",
            describe(&t.texts)
        ));
    }
    let kept: String = plan.prefix.chars().skip(plan.deleted as usize).collect();
    let mut expected: Vec<char> = [
        kept.as_str(),
        &plan.a_types,
        &plan.a_head,
        &plan.w_types,
        &plan.b_types,
    ]
    .concat()
    .chars()
    .collect();
    expected.sort_unstable();
    for (i, x) in t.texts.iter().enumerate() {
        let mut got: Vec<char> = x.chars().collect();
        got.sort_unstable();
        if got != expected {
            t.violations.push(format!(
                "{} shows {x:?}: not exactly the characters typed and not deleted",
                NAMES[i]
            ));
        }
    }
    for (i, doc) in docs.iter().enumerate() {
        let update = doc.encode_update_v1().expect("encode");
        let mut fresh = Doc::with_client(100 + i as u64);
        fresh
            .apply_update_from_binary_v1(update)
            .expect("apply to a fresh replica");
        let loaded = text(&fresh);
        if loaded != t.texts[i] {
            t.violations.push(format!(
                "a fresh replica built from {}'s state shows {loaded:?}, {} shows {:?}",
                NAMES[i], NAMES[i], t.texts[i]
            ));
        }
    }
}

fn describe(texts: &[String]) -> String {
    let v: Vec<String> = texts
        .iter()
        .enumerate()
        .map(|(i, x)| format!("{}={x:?}", NAMES[i]))
        .collect();
    v.join(", ")
}

/// The reported run: a laptop (w, client 1) replaces a leading "#" with "Plan" while a tablet
/// (a, client 2) appends " list" after the "#"; a phone (b, client 3) that has the laptop's
/// state types "My " at the start.
pub fn symptom_plan() -> Plan {
    Plan {
        clients: [1, 2, 3],
        prefix: "#".into(),
        backwards: false,
        deleted: 1,
        a_types: " list".into(),
        a_head: String::new(),
        w_types: "Plan".into(),
        b_types: "My ".into(),
        b_deletes: false,
        order: vec![(A, B), (B, A), (W, A), (A, W), (W, B), (B, W)],
    }
}

pub fn symptom_scenario() -> Trace {
    run(&symptom_plan())
}

fn word(r: &mut ChaCha8Rng, letters: &[u8]) -> String {
    let n = r.gen_range(1..=3);
    (0..n)
        .map(|_| *letters.choose(r).expect("letters") as char)
        .collect()
}

/// The three plans a seed stands for: any client ids; the writer with the lowest id and at
/// least two deleted characters; the writer with the lowest id and the late editor deleting
/// the start itself.
pub fn plans(seed: u64) -> Vec<Plan> {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    let mut draw = |writer_lowest: bool, min_deleted: u64, b_deletes: Option<bool>, a_head: bool| {
        let mut ids: Vec<u64> = (1..=9).collect();
        ids.shuffle(&mut r);
        let mut clients = [ids[0], ids[1], ids[2]];
        if writer_lowest {
            let low = (0..3).min_by_key(|&i| clients[i]).expect("three clients");
            clients.swap(W, low);
        }
        let n = r.gen_range(min_deleted..=5);
        let prefix: String = (0..n).map(|k| (b'a' + k as u8) as char).collect();
        let deleted = r.gen_range(min_deleted..=n);
        let backwards = min_deleted > 1 || r.gen_bool(0.5);
        let mut order = vec![(A, B), (B, A), (W, A), (A, W), (W, B), (B, W)];
        order.shuffle(&mut r);
        Plan {
            clients,
            prefix,
            backwards,
            deleted,
            a_types: word(&mut r, b"XYZ"),
            a_head: if a_head || r.gen_bool(0.5) {
                word(&mut r, b"STU")
            } else {
                String::new()
            },
            w_types: word(&mut r, b"MNO"),
            b_types: word(&mut r, b"PQR"),
            b_deletes: b_deletes.unwrap_or_else(|| r.gen_bool(0.5)),
            order,
        }
    };
    vec![
        draw(false, 1, None, false),
        draw(true, 2, None, false),
        draw(true, 1, Some(true), true),
    ]
}

#[test]
fn symptom() {
    let t = symptom_scenario();
    assert!(t.violations.is_empty(), "{:#?}", t.violations);
}

#[test]
fn replicas_converge_after_insert_at_deleted_start() {
    let seed: u64 = std::env::var("FAULTLINE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    for plan in plans(seed) {
        let t = run(&plan);
        assert!(
            t.violations.is_empty(),
            "seed {seed}, plan {plan:?}:\n{:#?}",
            t.violations
        );
    }
}
