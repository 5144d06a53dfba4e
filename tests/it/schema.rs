//! The contract's JSON Schemas (`docs/schema/`) themselves: they compile, and
//! they reject entries that break the contract, so that the checks every worker
//! test makes of what it reads back (`worker_common::contract`) can fail.

use crate::worker_common;

use std::collections::HashMap;

use worker_common::contract::{contract, Role};

fn entry(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

const UNIQUE: [(&str, &str); 6] = [
    ("id", "a"),
    ("verdict", "unique"),
    ("simhash", "00ff00ff00ff00ff"),
    ("op", "check"),
    ("source", "1700000000000-0"),
    ("v", "1"),
];

fn broken(change: &[(&str, &str)]) -> Vec<String> {
    let mut e = entry(&UNIQUE);
    for (k, v) in change {
        e.insert((*k).to_owned(), (*v).to_owned());
    }
    contract().violations(Role::Output, &e)
}

#[test]
fn output_schema_takes_a_verdict_and_rejects_what_breaks_the_contract() {
    assert_eq!(broken(&[]), Vec::<String>::new());
    for (what, change) in [
        ("duplicate without dup_of", &[("verdict", "duplicate")][..]),
        ("another contract version", &[("v", "2")]),
        ("a field the schema does not name", &[("confidence", "0.9")]),
        ("an upper-case simhash", &[("simhash", "00FF00FF00FF00FF")]),
        ("a reason on a decided entry", &[("reason", "because")]),
        ("an unknown verdict", &[("verdict", "maybe")]),
    ] {
        assert!(!broken(change).is_empty(), "accepted {what}");
    }
    let mut no_source = entry(&UNIQUE);
    no_source.remove("source");
    assert!(!contract().violations(Role::Output, &no_source).is_empty());

    let rejected = |code| {
        entry(&[
            ("verdict", "rejected"),
            ("reason", "why"),
            ("code", code),
            ("source", "1-0"),
            ("v", "1"),
        ])
    };
    assert!(contract()
        .violations(Role::Output, &rejected("no_content"))
        .is_empty());
    assert!(!contract()
        .violations(Role::Output, &rejected("no_such_code"))
        .is_empty());
}

#[test]
fn dead_and_input_schemas_reject_what_breaks_the_contract() {
    let c = contract();
    let dead = [
        ("text", "<p></p>"),
        ("reason", "no content"),
        ("code", "no_content"),
        ("deliveries", "1"),
        ("source", "1-0"),
    ];
    assert!(c.violations(Role::Dead, &entry(&dead)).is_empty());
    assert!(!c.violations(Role::Dead, &entry(&dead[..4])).is_empty());
    let mut zero = entry(&dead);
    zero.insert("deliveries".into(), "0".into());
    assert!(!c.violations(Role::Dead, &zero).is_empty());

    assert!(c
        .violations(Role::Input, &entry(&[("id", "a"), ("op", "delete")]))
        .is_empty());
    for bad in [
        &[("id", "a")][..],
        &[("id", "a"), ("text", "t"), ("ts", "yesterday")],
        &[("id", "a"), ("text", "t"), ("op", "upsert")],
        &[("id", ""), ("text", "t")],
        &[("text", "t")],
    ] {
        assert!(
            !c.violations(Role::Input, &entry(bad)).is_empty(),
            "{bad:?}"
        );
    }
}

#[test]
fn each_schema_is_usable_alone_and_shares_the_outputs_definitions() {
    let shared = worker_common::contract::shared_definitions();
    assert!(
        shared.contains(&("dead.json", "code".to_owned())),
        "{shared:?}"
    );
    assert!(
        shared.contains(&("input.json", "count".to_owned())),
        "{shared:?}"
    );
}

/// The input schema takes exactly what the worker takes: an id of up to 512
/// characters whatever their bytes, a `ts` written plainly.
#[test]
fn the_input_schema_and_the_worker_agree_on_ids_and_times() {
    use simdedup::article::{parse_ts, validate_id, MAX_ID_CHARS};
    let c = contract();
    let takes = |id: &str, ts: &str| {
        c.violations(
            Role::Input,
            &entry(&[("id", id), ("text", "t"), ("ts", ts)]),
        )
        .is_empty()
    };
    for id in [
        "新".repeat(200),
        "新".repeat(MAX_ID_CHARS),
        "𝄞".repeat(MAX_ID_CHARS + 1),
        "i".repeat(MAX_ID_CHARS + 1),
    ] {
        assert_eq!(
            takes(&id, "1"),
            validate_id(&id).is_ok(),
            "{} chars",
            id.chars().count()
        );
    }
    for ts in [
        "1767225600000",
        "0",
        "+1767225600000",
        "007",
        " 5",
        "-1",
        "1.5",
    ] {
        assert_eq!(takes("a", ts), parse_ts(ts).is_ok(), "{ts:?}");
    }
}
