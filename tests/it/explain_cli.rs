//! `simdedup explain` and `simdedup fingerprint` as a person or a program runs them.

use std::io::Write;
use std::process::{Command, Output, Stdio};

/// The February report: its figures, then the template's fixed sentences.
const FEB: &str = "Consumer instalment credit rose a seasonally adjusted 1.77 billion dlrs in February after a revised rise of 789 mln dlrs in January, the central bank said.
The annual rate of growth in February was 3.7 pct, up from 1.6 pct in January. Previously the bank said consumer credit rose 536 mln dlrs in January.
Among the credit categories, auto credit rose in February by 717 mln dlrs after increasing 416 mln dlrs in January, the bank said.
Revolving credit in February rose 1.04 billion dlrs after falling by 23 mln dlrs in January, the bank said.
";

/// The same template a month earlier: other figures throughout.
const JAN: &str = "Consumer instalment credit rose a seasonally adjusted 536 mln dlrs in January after a revised rise of 144 mln dlrs in December, the central bank said.
The annual rate of growth in January was 1.1 pct, up from 0.3 pct in December. Previously the bank said consumer credit rose 105 mln dlrs in December.
Among the credit categories, auto credit fell in January by 366 mln dlrs after increasing 552 mln dlrs in December, the bank said.
Revolving credit in January rose 1.02 billion dlrs after falling by 130 mln dlrs in December, the bank said.
";

/// Sentences every report of the template carries.
const TEMPLATE: &str = "Before seasonal adjustment, consumer credit outstanding changed by the amounts shown in the table.
The figures exclude loans secured by real estate and credit extended by pawn shops.
The central bank publishes the report on the fifth business day of each month.
";

fn report(figures: &str) -> String {
    format!("{figures}{TEMPLATE}")
}

fn simdedup(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_simdedup"))
        .args(args)
        .env_remove("SIMDEDUP_CONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A run that fails before reading its input closes the pipe first.
    match child.stdin.take().unwrap().write_all(stdin.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        written => written.unwrap(),
    }
    child.wait_with_output().unwrap()
}

fn json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_template_report_is_explained_as_one() {
    let dir = tempfile::tempdir().unwrap();
    let feb = dir.path().join("feb.txt");
    std::fs::write(&feb, report(FEB)).unwrap();
    let feb = feb.to_str().unwrap();
    // B from standard input.
    let x = json(&simdedup(&["explain", feb, "-", "--json"], &report(JAN)));
    // Half of B's own text (its figures, the 5-grams around them) is not in
    // A: neither a copy nor new by its share; the template rule decides.
    assert_eq!(x["duplicate"], false, "{x}");
    assert_eq!(x["evidence"]["by_share"], "between", "{x}");
    assert_eq!(x["evidence"]["matched_by"], "sentence", "{x}");
    assert_eq!(x["evidence"]["template"], true, "{x}");
    assert!(x["shared_clauses"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c.as_str().unwrap().contains("pawn shops")));
    assert!(x["numbers_only_a"]
        .as_array()
        .unwrap()
        .contains(&"1.77".into()));
    // A correction of the same report (one figure fixed) stays a duplicate.
    let fixed = report(&FEB.replace("1.04 billion", "1.06 billion"));
    let x = json(&simdedup(&["explain", feb, "-", "--json"], &fixed));
    assert_eq!(x["duplicate"], true, "{x}");
    // For people: the verdict and why, first.
    let out = simdedup(&["explain", feb, "-"], &report(JAN));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("verdict:   B is not a duplicate of A\nwhy:       the same template"),
        "{text}"
    );
}

#[test]
fn explain_says_what_it_cannot_read() {
    let out = simdedup(&["explain", "-", "-"], FEB);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("only one of A and B"));
    let out = simdedup(&["explain", "/nonexistent/a.txt", "-"], FEB);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/a.txt"));
}

/// The fingerprint's output fields, as `docs/fingerprint.md` lists them.
#[test]
fn fingerprint_output_fields() {
    let x = json(&simdedup(&["fingerprint", "-"], &report(FEB)));
    let hex = |v: &serde_json::Value, n: usize| {
        v.as_str().is_some_and(|s| {
            s.len() == n
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
    };
    assert_eq!(x["version"], simdedup::fingerprint::FINGERPRINT_VERSION);
    assert!(hex(&x["simhash"], 16) && hex(&x["content"], 16), "{x}");
    assert!(x["signatures"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| hex(s, 8)));
    let numbers = x["numbers"].as_array().unwrap();
    assert_eq!(numbers.len(), 8);
    assert!(numbers.iter().all(|s| hex(s, 4)));
    assert_eq!(x["empty"], false);
    let shingles = x["shingles"].as_array().unwrap();
    assert!(
        shingles.len() > 20 && shingles.iter().all(|s| hex(s, 4)),
        "{x}"
    );
    assert!(x["size"].as_u64().unwrap() > 150, "{x}");
    let x = json(&simdedup(&["fingerprint", "-"], "。。。 -- <br/>"));
    assert_eq!(
        (x["empty"].clone(), x["words"].clone()),
        (true.into(), 0.into())
    );
}

/// `fingerprint` reads a FILE as `explain` does (`-`: standard input), and
/// takes a text itself only with `--text`: the three give one fingerprint.
#[test]
fn fingerprint_reads_a_file_stdin_or_text_alike() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/explain/credit-feb.txt"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let from_file = json(&simdedup(&["fingerprint", path], ""));
    assert_eq!(from_file, json(&simdedup(&["fingerprint", "-"], &text)));
    assert_eq!(
        from_file,
        json(&simdedup(&["fingerprint", "--text", &text], ""))
    );
    assert!(from_file["size"].as_u64().unwrap() > 100, "{from_file}");
    let out = simdedup(&["fingerprint", "/nonexistent/a.txt"], "");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/a.txt"));
}
