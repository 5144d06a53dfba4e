//! The stream contract's JSON Schemas (`docs/schema/`) applied to the entries
//! the tests read back, so that the schemas cannot drift from what the worker
//! writes: an output entry must validate against `output.json` and use no field
//! that the schema does not describe (consumers may ignore unknown fields, but
//! the schema must name every field the worker writes); a dead letter must
//! validate against `dead.json`; what the example producers send, against
//! `input.json`.

use std::collections::HashMap;
use std::sync::OnceLock;

use jsonschema::Validator;
use serde_json::Value;

const OUTPUT: &str = include_str!("../../docs/schema/output.json");
const DEAD: &str = include_str!("../../docs/schema/dead.json");
const INPUT: &str = include_str!("../../docs/schema/input.json");

/// The three schemas, compiled once per test binary.
pub struct Contract {
    output: Validator,
    output_fields: Vec<String>,
    dead: Validator,
    input: Validator,
}

fn parse(name: &str, text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("docs/schema/{name} is not JSON: {e}"))
}

/// Compile `schema` alone, as a consumer's `jsonschema.validate` would: each
/// file carries the definitions it uses (copies of `output.json`'s, held
/// equal by [`shared_definitions`]).
fn compile(name: &str, schema: &Value) -> Validator {
    jsonschema::validator_for(schema)
        .unwrap_or_else(|e| panic!("docs/schema/{name} does not compile alone: {e}"))
}

/// The `$defs` that `input.json` and `dead.json` carry, each equal to
/// `output.json`'s of the same name (a rejection code added to one and not
/// the others fails here): `(file, definition)` pairs.
pub fn shared_definitions() -> Vec<(&'static str, String)> {
    let output = parse("output.json", OUTPUT);
    let mut shared = Vec::new();
    for (name, text) in [("input.json", INPUT), ("dead.json", DEAD)] {
        let schema = parse(name, text);
        let defs = schema["$defs"].as_object().cloned().unwrap_or_default();
        for (def, value) in defs {
            assert_eq!(
                Some(&value),
                output["$defs"].get(&def),
                "docs/schema/{name}: $defs/{def} differs from output.json's"
            );
            shared.push((name, def));
        }
        assert!(
            text.matches("\"$ref\": \"").count() == text.matches("\"$ref\": \"#").count(),
            "docs/schema/{name} refers to another file: it must be usable alone"
        );
    }
    shared
}

pub fn contract() -> &'static Contract {
    static CONTRACT: OnceLock<Contract> = OnceLock::new();
    CONTRACT.get_or_init(|| {
        let output = parse("output.json", OUTPUT);
        let output_fields = output["properties"]
            .as_object()
            .expect("output.json describes its properties")
            .keys()
            .cloned()
            .collect();
        Contract {
            output: compile("output.json", &output),
            output_fields,
            dead: compile("dead.json", &parse("dead.json", DEAD)),
            input: compile("input.json", &parse("input.json", INPUT)),
        }
    })
}

/// Which schema an entry of a stream named `stream` must satisfy, by the
/// stream's role (the last part of its key, `docs/redis-keys.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Input,
    Output,
    Dead,
}

impl Role {
    pub fn of_stream(stream: &str) -> Option<Role> {
        match stream.rsplit(':').next()? {
            "in" => Some(Role::Input),
            "out" => Some(Role::Output),
            "dead" => Some(Role::Dead),
            _ => None,
        }
    }
}

fn as_json(fields: &HashMap<String, String>) -> Value {
    Value::Object(
        fields
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect(),
    )
}

impl Contract {
    /// Why `fields`, an entry of a stream of `role`, breaks the contract, if it does.
    pub fn violations(&self, role: Role, fields: &HashMap<String, String>) -> Vec<String> {
        let validator = match role {
            Role::Input => &self.input,
            Role::Output => &self.output,
            Role::Dead => &self.dead,
        };
        let json = as_json(fields);
        let mut why: Vec<String> = validator
            .iter_errors(&json)
            .map(|e| format!("{e} (at {})", e.instance_path))
            .collect();
        if role == Role::Output {
            why.extend(
                fields
                    .keys()
                    .filter(|k| !self.output_fields.contains(k))
                    .map(|k| format!("field {k:?} is not described in docs/schema/output.json")),
            );
        }
        why
    }

    /// Panic, naming the entry and every violation, unless `fields` keeps the contract.
    pub fn check(&self, role: Role, entry_id: &str, fields: &HashMap<String, String>) {
        let why = self.violations(role, fields);
        assert!(
            why.is_empty(),
            "{role:?} entry {entry_id} breaks docs/schema: {why:#?}\nentry: {fields:?}"
        );
    }
}
