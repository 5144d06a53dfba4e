//! `simdedup scan`, `fingerprint` and `idf build` as a user runs them: the built
//! binary, JSONL in, verdicts out. No Redis, no shared data: the articles are
//! written here.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

const ORIGINAL: &str = "国家统计局今天发布数据，一季度国内生产总值同比增长百分之五点三，比上年四季度环比增长一点六个百分点。国家统计局新闻发言人表示，一季度国民经济实现良好开局，为实现全年目标任务打下了较好基础。工业生产较快增长，服务业持续恢复，市场销售稳定增长，就业形势总体稳定。";
const OTHER: &str = "中国女排在世界联赛总决赛中以三比一战胜对手，时隔多年再次登上领奖台。主教练赛后表示，年轻队员在关键分上表现沉稳，团队配合明显进步，球队将继续备战下个月开始的亚洲锦标赛。";

fn simdedup(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_simdedup"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run simdedup");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

fn lines(out: &Output) -> Vec<Value> {
    String::from_utf8(out.stdout.clone())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn article(id: &str, text: &str) -> String {
    serde_json::json!({ "id": id, "text": text }).to_string()
}

#[test]
fn scan_decides_in_order_and_rejects_bad_lines_specifically() {
    let rewritten = ORIGINAL.replace("今天", "4月16日").replace("表示", "指出");
    let mut input = Vec::new();
    let mut push = |line: &[u8]| {
        input.extend_from_slice(line);
        input.push(b'\n');
    };
    push(article("a", ORIGINAL).as_bytes()); // 1
    push(article("b", OTHER).as_bytes()); // 2
    push(article("c", &format!("<p>**{ORIGINAL}**</p><!-- ad -->")).as_bytes()); // 3: exact copy in markup
    push(article("d", &rewritten).as_bytes()); // 4: words swapped
    push(b"{not json"); // 5
    push(br#"{"text":"no id here"}"#); // 6
    push(br#"{"id":"e"}"#); // 7
    push(b"{\"id\":\"f\",\"text\":\"\xff\xfe\"}"); // 8: invalid UTF-8
    push(article("g", &"长".repeat(400)).as_bytes()); // 9: over --max-text-bytes
    push(article("h", "。。。!!! <br/>").as_bytes()); // 10: nothing to compare
    push(b"   "); // 11: blank, skipped
    push(br#"{"id":"i","text":"x","ts":"yesterday"}"#); // 12
    push(article("j", OTHER).as_bytes()); // 13: the run went on
    let out = simdedup(&["scan", "--max-text-bytes", "1000"], &input);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = lines(&out);
    assert_eq!(v.len(), 12, "one verdict per non-blank line");
    let verdict = |i: usize| v[i]["verdict"].as_str().unwrap().to_owned();
    assert_eq!((verdict(0), verdict(1)), ("unique".into(), "unique".into()));
    assert_eq!(v[2]["dup_of"], "a");
    assert_eq!(v[2]["signal"], "exact");
    assert_eq!(v[3]["dup_of"], "a", "{}", v[3]);
    assert_eq!(v[0]["simhash"].as_str().unwrap().len(), 16);
    let reasons: Vec<(Value, String)> = v[4..11]
        .iter()
        .map(|r| {
            assert_eq!(r["verdict"], "rejected", "{r}");
            (r["line"].clone(), r["reason"].as_str().unwrap().to_owned())
        })
        .collect();
    let expect = [
        (5, "malformed JSON"),
        (6, "missing required field `id`"),
        (7, "missing required field `text`"),
        (8, "invalid UTF-8"),
        (9, "over the 1000-byte limit"),
        (10, "no words after normalization"),
        (12, "field `ts` must be unix milliseconds"),
    ];
    for ((line, reason), (want_line, want)) in reasons.iter().zip(expect) {
        assert_eq!(line, &Value::from(want_line));
        assert!(
            reason.starts_with(&format!("line {want_line}: ")),
            "{reason}"
        );
        assert!(reason.contains(want), "{reason} lacks {want}");
    }
    assert_eq!(v[6]["id"], "e", "the id is reported when it was read");
    assert_eq!(v[11]["id"], "j");
    assert_eq!(v[11]["dup_of"], "b");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("12 articles") && stderr.contains("7 rejected"),
        "{stderr}"
    );
}

#[test]
fn scan_respects_the_window() {
    let day = 24 * 3600 * 1000i64;
    let input = [
        serde_json::json!({"id": "old", "text": ORIGINAL, "ts": 1_700_000_000_000i64}).to_string(),
        serde_json::json!({"id": "later", "text": ORIGINAL, "ts": 1_700_000_000_000i64 + 3 * day})
            .to_string(),
        serde_json::json!({"id": "soon", "text": ORIGINAL, "ts": 1_700_000_000_000i64 + 4 * day})
            .to_string(),
    ]
    .join("\n");
    let v = lines(&simdedup(&["scan"], input.as_bytes()));
    let verdicts: Vec<&str> = v.iter().map(|r| r["verdict"].as_str().unwrap()).collect();
    assert_eq!(verdicts, ["unique", "unique", "duplicate"]);
    assert_eq!(v[2]["dup_of"], "later");
    // A wider window links the second to the first.
    let v = lines(&simdedup(
        &["scan", "--window-hours", "100"],
        input.as_bytes(),
    ));
    assert_eq!(v[1]["dup_of"], "old");
}

#[test]
fn unreadable_input_and_bad_settings_fail_with_a_clear_message() {
    let out = simdedup(&["scan", "/no/such/file.jsonl"], b"");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot open /no/such/file.jsonl"), "{err}");
    let out = simdedup(&["scan", "--max-distance", "5"], b"");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("only guarantees finding distances ≤ 3"),
        "{err}"
    );
}

#[test]
fn fingerprint_prints_json() {
    let out = simdedup(&["fingerprint", "-"], ORIGINAL.as_bytes());
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["version"], simdedup::fingerprint::FINGERPRINT_VERSION);
    assert_eq!(v["simhash"].as_str().unwrap().len(), 16);
    assert!(v["words"].as_u64().unwrap() > 10);
    assert_eq!(v["empty"], false);
    // The same text on the command line, and in a file.
    let same = simdedup(&["fingerprint", "--text", ORIGINAL], b"");
    assert_eq!(
        serde_json::from_slice::<Value>(&same.stdout).unwrap()["simhash"],
        v["simhash"]
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("original.txt");
    std::fs::write(&file, ORIGINAL).unwrap();
    let from_file = simdedup(&["fingerprint", file.to_str().unwrap()], b"");
    assert_eq!(
        serde_json::from_slice::<Value>(&from_file.stdout).unwrap()["simhash"],
        v["simhash"],
        "a path argument is a file to read, not the text"
    );
    let missing = simdedup(&["fingerprint", "/nonexistent/zh-1.txt"], b"");
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/zh-1.txt"));
}

#[test]
fn idf_build_writes_a_table_that_scan_and_fingerprint_use() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("corpus.jsonl");
    let table = dir.path().join("idf.txt");
    let docs = [
        "apple banana cherry market prices",
        "apple orchard harvest season",
        "banana export figures rise",
        "cherry blossom festival opens",
    ];
    let body: String = docs
        .iter()
        .enumerate()
        .map(|(i, t)| article(&i.to_string(), t) + "\n")
        .collect::<String>()
        + "{broken\n";
    std::fs::write(&corpus, body).unwrap();
    let out = simdedup(
        &[
            "idf",
            "build",
            corpus.to_str().unwrap(),
            "-o",
            table.to_str().unwrap(),
            "--min-df",
            "1",
        ],
        b"",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("from 4 documents (1 lines skipped)"), "{err}");
    let text = std::fs::read_to_string(&table).unwrap();
    let apple: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("apple "))
        .unwrap()
        .parse()
        .unwrap();
    assert!((apple - 2f64.ln()).abs() < 1e-6, "{text}");
    let with_table = simdedup(
        &[
            "fingerprint",
            "--idf",
            table.to_str().unwrap(),
            "--text",
            "apple orchard",
        ],
        b"",
    );
    let without = simdedup(&["fingerprint", "--text", "apple orchard"], b"");
    assert!(with_table.status.success());
    let h = |o: &Output| serde_json::from_slice::<Value>(&o.stdout).unwrap()["simhash"].clone();
    assert_ne!(
        h(&with_table),
        h(&without),
        "the custom table must change the weights"
    );
    // A broken table is refused with the line at fault.
    std::fs::write(&table, "apple 1.0\nbanana not-a-number\n").unwrap();
    let out = simdedup(&["scan", "--idf", table.to_str().unwrap()], b"");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 2"), "{err}");
}

/// `simdedup eval` scores the verdicts on a labelled stream against its
/// truth file, and with `--verdicts` writes them in the reference scorer's
/// format; `scan -o` writes the verdicts to a file instead of stdout;
/// `--sentence-max-distance` is the bound the sentence signal meets at.
#[test]
fn eval_scan_to_a_file_and_the_sentence_bound() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
    let rewritten = ORIGINAL.replace("今天", "4月16日").replace("表示", "指出");
    let stream = [
        article("a", ORIGINAL),
        article("b", OTHER),
        article("c", &format!("<p>**{ORIGINAL}**</p>")),
        article("d", &rewritten),
    ]
    .join("\n");
    std::fs::write(path("stream.jsonl"), &stream).unwrap();
    // "d" is labelled a strong duplicate the run is told it missed, "b"
    // unrelated.
    std::fs::write(
        path("truth.jsonl"),
        r#"{"id":"a","best_j":0.0,"kind":"orig"}
{"id":"b","best_j":0.1,"kind":"orig"}
{"id":"c","best_j":1.0,"kind":"copy"}
{"id":"d","best_j":0.8,"kind":"edit"}
"#,
    )
    .unwrap();

    let scan = simdedup(
        &["scan", &path("stream.jsonl"), "-o", &path("verdicts.jsonl")],
        b"",
    );
    assert!(scan.status.success(), "{scan:?}");
    assert!(
        scan.stdout.is_empty(),
        "verdicts go to the file, not stdout"
    );
    let written: Vec<Value> = std::fs::read_to_string(path("verdicts.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let verdicts: Vec<(&str, &str)> = written
        .iter()
        .map(|v| (v["id"].as_str().unwrap(), v["verdict"].as_str().unwrap()))
        .collect();
    assert_eq!(
        verdicts,
        [
            ("a", "unique"),
            ("b", "unique"),
            ("c", "duplicate"),
            ("d", "duplicate")
        ],
        "{written:?}"
    );
    assert_eq!(written[3]["signal"], "sentence", "{}", written[3]);
    let distance = written[3]["distance"].as_u64().unwrap();

    let eval = simdedup(
        &[
            "eval",
            "--stream",
            &path("stream.jsonl"),
            "--truth",
            &path("truth.jsonl"),
            "--verdicts",
            &path("scorer.jsonl"),
        ],
        b"",
    );
    assert!(eval.status.success(), "{eval:?}");
    let score: Value = serde_json::from_slice(&eval.stdout).unwrap();
    assert_eq!(score["docs"], 4, "{score}");
    assert_eq!(score["strong"], 2, "{score}");
    assert_eq!(score["recall"], 1.0, "{score}");
    assert_eq!(score["precision"], 1.0, "{score}");
    assert_eq!(score["flagged"], 2, "{score}");
    let scorer: Vec<Value> = std::fs::read_to_string(path("scorer.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        scorer,
        [
            serde_json::json!({"id": "a", "duplicate": false, "dup_of": null}),
            serde_json::json!({"id": "b", "duplicate": false, "dup_of": null}),
            serde_json::json!({"id": "c", "duplicate": true, "dup_of": "a"}),
            serde_json::json!({"id": "d", "duplicate": true, "dup_of": "a"}),
        ]
    );

    // A sentence bound below the rewrite's distance: "d" is no longer found
    // (by sentences), the score says it was missed.
    let bound = (distance - 1).to_string();
    let strict = simdedup(
        &[
            "eval",
            "--stream",
            &path("stream.jsonl"),
            "--truth",
            &path("truth.jsonl"),
            "--sentence-max-distance",
            &bound,
        ],
        b"",
    );
    assert!(strict.status.success(), "{strict:?}");
    let score: Value = serde_json::from_slice(&strict.stdout).unwrap();
    assert_eq!(score["recall"], 0.5, "{score}");
    assert_eq!(score["missed"], serde_json::json!(["d"]), "{score}");
}
