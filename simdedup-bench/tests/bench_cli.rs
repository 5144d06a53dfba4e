//! `simdedup-bench` end to end with tiny parameters: its own redis-server, a
//! preloaded index, measured checks, one worker process through the streams, the
//! table and the docs section. Checks that numbers are there and every article
//! was answered, never how fast anything was.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_simdedup-bench");

/// Cells of the last Markdown table row starting with `| label |` (the index
/// table comes first, the end-to-end table after it).
fn row<'a>(stdout: &'a str, label: &str) -> Vec<&'a str> {
    let line = stdout
        .lines()
        .rfind(|l| l.starts_with(&format!("| {label} |")))
        .unwrap_or_else(|| panic!("no row {label:?} in:\n{stdout}"));
    line.split('|')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect()
}

#[test]
fn tiny_bench_measures_everything_and_writes_the_docs_section() {
    // Fails with an install hint when redis-server is missing, like every Redis test.
    if let Err(e) = simdedup::redis_server::RedisServer::start() {
        panic!("this test starts its own Redis: {e}");
    }
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("benchmarks.md");
    std::fs::write(
        &docs,
        "# Benchmarks\n\nbefore\n<!-- simdedup bench: begin -->\nold\n<!-- simdedup bench: end -->\nafter\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["--sizes", "2000", "--checks", "500", "--concurrency", "4"])
        .args(["--workers", "1", "--e2e-articles", "300", "--seed", "7"])
        .arg("--write-docs")
        .arg(&docs)
        .env_remove("SIMDEDUP_CONFIG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");

    // Index measurements at 2,000 articles: every figure is a positive number.
    let cells: Vec<&str> = stdout
        .lines()
        .find(|l| l.starts_with("| 2 k |"))
        .unwrap_or_else(|| panic!("no index row in:\n{stdout}"))
        .split('|')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    let number = |s: &str| -> f64 {
        s.split(|c: char| !(c.is_ascii_digit() || c == '.'))
            .find(|p| !p.is_empty())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no number in {s:?}: {cells:?}"))
    };
    for (i, what) in [
        (1, "bytes/article"),
        (2, "Redis µs/check"),
        (3, "EVALSHA µs/call"),
        (4, "Redis CPU µs/check"),
        (5, "client p50"),
    ] {
        assert!(number(cells[i]) > 0.0, "{what} in {cells:?}");
    }
    // Found / expected duplicates: the synthetic copies are all found.
    let (found, expected) = cells[7].split_once(" / ").unwrap();
    assert_eq!(found, expected, "{cells:?}");
    assert_eq!(expected, "100", "500 checks, 1 in 5 a copy");
    // A new view's load: seconds, then this process' memory per article.
    let (load, bytes) = cells[8].split_once(" s, ").unwrap();
    assert!(
        load.parse::<f64>().is_ok() && bytes.parse::<f64>().is_ok(),
        "{cells:?}"
    );

    // Memory by key family: every family of an index with articles, and the
    // families plus `other` add up to the bytes/article of the row above.
    let lines: Vec<&str> = stdout.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("| articles |") && l.ends_with("| other | total |"))
        .unwrap_or_else(|| panic!("no memory-by-family table in:\n{stdout}"));
    let families: Vec<&str> = lines[at].split('|').map(str::trim).collect();
    for family in ["a", "b", "i", "n", "buckets"] {
        assert!(families.contains(&family), "{family} in {families:?}");
    }
    let shares: Vec<f64> = lines[at + 2]
        .split('|')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .skip(1)
        .map(|c| c.parse().unwrap())
        .collect();
    let (total, parts) = shares.split_last().unwrap();
    assert_eq!(*total, number(cells[1]), "{shares:?}");
    let sum: f64 = parts.iter().sum();
    assert!((sum - total).abs() <= parts.len() as f64, "{shares:?}");

    // End to end: every entry answered, none pending, none rejected, on the
    // empty index, on the filled one, and on the empty index again right after
    // (the baseline of the same minutes, on a second private redis-server).
    let (drained, steady) = stdout
        .split_once("Steady feed")
        .unwrap_or_else(|| panic!("no steady-feed table in:\n{stdout}"));
    for label in ["empty", "2 k", "empty, right after 2 k"] {
        let cells = row(drained, label);
        assert!(number(cells[1]) > 0.0, "{cells:?}");
        assert_eq!(cells[2], "300/300, 0", "{label}: {cells:?}");
        assert!(cells[3].ends_with(" / 0"), "{label}: {cells:?}");
        // The workers' own index-call latency, read from their /metrics.
        assert!(cells[1].contains(", p50 "), "{label}: {cells:?}");
        let p99 = cells[1].split("p99 ").nth(1).unwrap_or_default();
        assert!(number(p99) > 0.0, "{label}: {cells:?}");
    }
    // The steady feed (one worker, 1,000 articles/s by default) on the empty
    // and the filled index: every entry answered, the worker's index calls and
    // each article's time from input entry to verdict measured.
    for label in ["empty", "2 k"] {
        let cells = row(steady, label);
        assert!(cells[1].starts_with("1,000 / "), "{label}: {cells:?}");
        assert!(
            number(cells[1].split(" / ").nth(1).unwrap()) > 0.0,
            "{label}: {cells:?}"
        );
        assert!(
            cells[2].contains("p50 ") && cells[2].contains(" / p99 "),
            "{label}: {cells:?}"
        );
        let verdicts: Vec<&str> = cells[3].trim_end_matches(" ms").split(" / ").collect();
        assert_eq!(verdicts.len(), 3, "p50 / p99 / max: {cells:?}");
        assert!(
            verdicts.iter().all(|v| v.parse::<u64>().is_ok()),
            "{cells:?}"
        );
        assert_eq!(cells[4], "300/300, 0", "{label}: {cells:?}");
    }
    assert!(!steady.contains("| empty, right after"), "{steady}");
    // Every run sends the same articles, and on the filled index each run's
    // are deleted after it: one worker decides them the same way every time
    // (without the deletion the steady feed on the filled index would find
    // each of its articles stored by the run before it).
    let verdicts = row(drained, "empty")[3];
    assert!(!verdicts.starts_with("0 /"), "{verdicts}");
    assert_eq!(row(drained, "2 k")[3], verdicts);
    assert_eq!(row(steady, "empty")[5], verdicts);
    assert_eq!(row(steady, "2 k")[5], verdicts);
    assert!(
        stdout.contains("| workers' own index-call p99 ≤ 2 ms at 10 M (end-to-end runs) | 10 M (end to end) not measured | — |"),
        "{stdout}"
    );
    assert!(
        stdout.contains("Redis 7") || stdout.contains("Redis "),
        "{stdout}"
    );
    assert!(stdout.contains("| Redis ≤ 50 µs per check at 1 M | 1 M not measured | — |"));

    // The docs section was replaced, the rest kept.
    let written = std::fs::read_to_string(&docs).unwrap();
    assert!(written.starts_with("# Benchmarks\n\nbefore\n<!-- simdedup bench: begin -->\nCommand: `simdedup-bench --sizes 2000"));
    assert!(
        written.ends_with("<!-- simdedup bench: end -->\nafter\n"),
        "{written}"
    );
    assert!(!written.contains("\nold\n"));
    assert!(written.contains(stdout.trim_end()));

    // The private server is gone.
    let port: u16 = stderr
        .split("127.0.0.1:")
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {stderr}"));
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "redis-server on {port} still running"
    );
}

#[test]
fn without_redis_server_it_says_how_to_install_it() {
    let out = Command::new(BIN)
        .args(["--quick"])
        .env("PATH", "")
        .env_remove("REDIS_SERVER_BIN")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("redis-server was not found"), "{stderr}");
    assert!(stderr.contains("apt-get install redis-server"), "{stderr}");
}

#[test]
fn lookup_signatures_outside_the_sketch_are_refused_before_anything_starts() {
    for n in ["0", "13"] {
        let out = Command::new(BIN)
            .args(["--quick", "--lookup-signatures", n])
            .output()
            .unwrap();
        assert!(
            !out.status.success(),
            "--lookup-signatures {n} was accepted"
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("--lookup-signatures must be 1 to 12 (the hashes in a sketch)"),
            "{stderr}"
        );
    }
}
