//! What an operator meets first: closed pipes, stray variables, a busy
//! metrics port, `--help`, log files, `inspect`, `config`, the examples and
//! the stated Rust version. Each test runs the binary as a person would.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use crate::support::{free_port, http_get, RedisServer};
use crate::worker_common::wait_until;

/// The repository's root (the examples, the README).
fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `simdedup ARGS` with no `SIMDEDUP_*` variable but `env`, `stdin` written
/// to it; run in the repository's root.
fn simdedup(args: &[&str], env: &[(&str, &str)], stdin: &[u8]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_simdedup"));
    cmd.args(args).current_dir(root());
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("SIMDEDUP_")) {
        cmd.env_remove(k);
    }
    cmd.envs(env.iter().copied());
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    match child.stdin.take().unwrap().write_all(stdin) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        written => written.unwrap(),
    }
    child.wait_with_output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

const TEXT: &str = "The city council approved a plan on Tuesday to convert three disused rail \
    yards into public parks, a project expected to cost about 40 million dollars over five years.";

/// `simdedup ARGS` whose standard output is closed before it writes, as
/// `… | head` closes it: the command ends with status 0 and says nothing.
fn with_closed_stdout(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_simdedup"))
        .args(args)
        .current_dir(root())
        .env_remove("SIMDEDUP_CONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes away before the command has loaded its tables.
    drop(child.stdout.take());
    match child.stdin.take().unwrap().write_all(stdin) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        written => written.unwrap(),
    }
    child.wait_with_output().unwrap()
}

#[test]
fn a_closed_pipe_ends_a_command_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.txt");
    std::fs::write(&a, TEXT).unwrap();
    let a = a.to_str().unwrap();
    let lines: String = (0..2000)
        .map(|i| format!("{{\"id\":\"{i}\",\"text\":\"{TEXT} {i}\"}}\n"))
        .collect();
    for (args, stdin) in [
        (vec!["fingerprint", "-"], TEXT.as_bytes()),
        (vec!["explain", a, "-"], TEXT.as_bytes()),
        (vec!["explain", a, "-", "--json"], TEXT.as_bytes()),
        (vec!["scan", "--no-progress"], lines.as_bytes()),
    ] {
        let out = with_closed_stdout(&args, stdin);
        let err = stderr(&out);
        assert!(
            out.status.success() && err.is_empty(),
            "{args:?}: {:?}\n{err}",
            out.status
        );
    }
}

#[test]
fn a_stray_simdedup_variable_is_named_with_the_settings_it_could_mean() {
    let out = simdedup(&["config"], &[("SIMDEDUP_BIN", "/usr/bin/simdedup")], b"");
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("SIMDEDUP_BIN is not a setting"), "{err}");
    assert!(err.contains("docs/operations.md"), "{err}");
    assert_eq!(
        err.matches("is not a setting").count(),
        1,
        "said once: {err}"
    );

    let out = simdedup(&["config"], &[("SIMDEDUP_WORKER__BATCHSIZE", "3")], b"");
    let err = stderr(&out);
    assert!(!out.status.success());
    assert!(
        err.contains("SIMDEDUP_WORKER__BATCHSIZE") && err.contains("SIMDEDUP_WORKER__BATCH_SIZE"),
        "{err}"
    );
    // A section's misspelt setting far from any: that section's settings.
    let out = simdedup(&["config"], &[("SIMDEDUP_DECISION__XYZZY", "3")], b"");
    let err = stderr(&out);
    assert!(err.contains("SIMDEDUP_DECISION__MAX_DISTANCE"), "{err}");
}

/// A setting under its old name (`worker.pipeline`) is still read, in a
/// file, the environment and a flag, as its new one, with a warning naming
/// the new one as that layer spells it; `simdedup config` shows the new name.
#[test]
fn an_old_setting_name_is_read_with_a_warning_naming_the_new_one() {
    let out = simdedup(&["config"], &[("SIMDEDUP_WORKER__PIPELINE", "4")], b"");
    assert!(out.status.success(), "{}", stderr(&out));
    let shown = String::from_utf8_lossy(&out.stdout);
    let worker: toml::Table = toml::from_str::<toml::Table>(&shown).unwrap()["worker"]
        .as_table()
        .unwrap()
        .clone();
    assert_eq!(worker["ordered_index_concurrency"].as_integer(), Some(4));
    assert!(!worker.contains_key("pipeline"), "{shown}");
    let err = stderr(&out);
    assert!(
        err.contains("SIMDEDUP_WORKER__PIPELINE is now SIMDEDUP_WORKER__ORDERED_INDEX_CONCURRENCY"),
        "{err}"
    );

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("simdedup.toml");
    std::fs::write(&file, "[worker]\npipeline = 5\n").unwrap();
    let out = simdedup(&["config", "-c", file.to_str().unwrap()], &[], b"");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("ordered_index_concurrency = 5"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let err = stderr(&out);
    assert!(
        err.contains("worker.pipeline in ")
            && err.contains("is now worker.ordered_index_concurrency"),
        "{err}"
    );

    // The flag reaches the setting: 0 is refused under the new name.
    let out = simdedup(
        &[
            "worker",
            "--redis-url",
            "redis://127.0.0.1:1",
            "--pipeline",
            "0",
        ],
        &[],
        b"",
    );
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("--pipeline is now --ordered-index-concurrency")
            && err.contains("worker.ordered_index_concurrency = 0"),
        "{err}"
    );
}

/// A worker process on `server`, killed when dropped.
struct Worker(Child);

impl Drop for Worker {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn spawn_worker(server: &RedisServer, http_addr: &str, extra: &[&str]) -> Worker {
    spawn_worker_at(&server.url(), "ops", http_addr, extra)
}

fn spawn_worker_at(url: &str, ns: &str, http_addr: &str, extra: &[&str]) -> Worker {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_simdedup"));
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("SIMDEDUP_")) {
        cmd.env_remove(k);
    }
    let child = cmd
        .args(["worker", "--redis-url", url, "-n", ns])
        .args(["--http-addr", http_addr, "--block-ms", "100"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    Worker(child)
}

/// The worker's whole stderr once it has exited (at most 60 s).
fn wait_for_exit(w: &mut Worker) -> (std::process::ExitStatus, String) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = w.0.try_wait().unwrap() {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "worker still running");
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut text = String::new();
    std::io::Read::read_to_string(w.0.stderr.as_mut().unwrap(), &mut text).unwrap();
    (status, text)
}

#[test]
fn a_busy_metrics_port_names_the_address_and_how_to_change_it() {
    let server = RedisServer::start();
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let mut w = spawn_worker(&server, &addr, &[]);
    let (status, err) = wait_for_exit(&mut w);
    assert!(!status.success(), "{err}");
    assert!(err.contains(&addr), "the address: {err}");
    assert!(
        err.contains("--http-addr") && err.contains("SIMDEDUP_WORKER__HTTP_ADDR"),
        "{err}"
    );
    assert_eq!(err.matches("os error 98").count(), 1, "said once: {err}");
}

#[test]
fn worker_logs_in_a_file_have_no_colour_and_json_logs_are_json_to_the_end() {
    let server = RedisServer::start();
    for format in ["human", "json"] {
        let port = free_port();
        let mut w = spawn_worker(
            &server,
            &format!("127.0.0.1:{port}"),
            &["--log-format", format],
        );
        wait_until("ready", Duration::from_secs(60), || {
            http_get(port, "/readyz").map(|r| r.0) == Some(200)
        });
        let ok = Command::new("kill")
            .args(["-TERM", &w.0.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok);
        let (status, err) = wait_for_exit(&mut w);
        assert!(status.success(), "{err}");
        assert!(
            !err.contains('\u{1b}'),
            "{format}: colour codes in a pipe: {err:?}"
        );
        let last = err.lines().last().unwrap_or_default();
        assert!(last.contains("worker stopped"), "{format}: {err}");
        if format == "json" {
            for line in err.lines() {
                let v: serde_json::Value =
                    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
                assert!(v["fields"]["message"].is_string(), "{line}");
            }
            let v: serde_json::Value = serde_json::from_str(last).unwrap();
            assert_eq!(v["fields"]["outputs_written"], 0, "{last}");
        }
    }
}

/// The help text of `flag` in `help`, from the flag to the next one, its
/// wrapped lines joined with single spaces.
fn flag_help(help: &str, flag: &str) -> String {
    let start = help
        .find(&format!("{flag} "))
        .unwrap_or_else(|| panic!("{flag} in {help}"));
    let mut lines = help[start..].lines();
    let mut text = lines.next().unwrap().to_owned();
    for line in lines.take_while(|l| !l.trim_start().starts_with('-')) {
        text.push(' ');
        text.push_str(line.trim());
    }
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn help_shows_the_defaults_and_only_the_flags_that_apply() {
    let out = simdedup(&["worker", "--help"], &[], b"");
    let help = String::from_utf8(out.stdout).unwrap();
    let d = simdedup::worker::WorkerConfig::default();
    for (flag, default) in [
        ("--batch-size", d.batch_size.to_string()),
        ("--max-in-flight", d.max_in_flight.to_string()),
        ("--block-ms", d.block_ms.to_string()),
        ("--http-addr", d.http_addr.clone()),
        ("--max-deliveries", d.max_deliveries.to_string()),
        ("--shutdown-timeout-ms", d.shutdown_timeout_ms.to_string()),
        (
            "--ordered-index-concurrency",
            d.ordered_index_concurrency.to_string(),
        ),
        ("--window-hours", "48".to_string()),
        ("--max-distance", "3".to_string()),
        ("--namespace", "default".to_string()),
    ] {
        let text = flag_help(&help, flag);
        assert!(
            text.contains(&format!("[default: {default}]")),
            "{flag}: {text}"
        );
        assert_eq!(text.matches("default:").count(), 1, "{flag}: {text}");
    }
    let url = flag_help(&help, "--redis-url");
    assert!(
        url.contains("Cluster") && url.contains("redis+sentinel://"),
        "{url}"
    );
    for command in ["produce", "stats"] {
        let out = simdedup(&[command, "--help"], &[], b"");
        let help = String::from_utf8(out.stdout).unwrap();
        for flag in [
            "--window-hours",
            "--max-distance",
            "--idf",
            "--max-text-bytes",
        ] {
            assert!(
                !help.contains(flag),
                "{command} --help lists {flag}: {help}"
            );
        }
        assert!(help.contains("--redis-url"), "{help}");
    }
}

#[test]
fn config_prints_every_effective_setting() {
    let out = simdedup(&["config"], &[], b"");
    assert!(out.status.success(), "{}", stderr(&out));
    let shown = String::from_utf8(out.stdout).unwrap();
    assert!(shown.contains("bucket_hours = 24"), "{shown}");
    assert!(shown.contains("idf_path"), "{shown}");
    let printed: toml::Table = toml::from_str(&shown).unwrap();
    let defaults = serde_json::to_value(simdedup::settings::Settings::default()).unwrap();
    for (key, value) in defaults.as_object().unwrap() {
        if key == "idf_path" {
            continue;
        }
        assert!(printed.contains_key(key), "{key} missing: {shown}");
        if let Some(section) = value.as_object() {
            let table = printed[key].as_table().unwrap();
            for k in section.keys() {
                assert!(table.contains_key(k), "{key}.{k} missing: {shown}");
            }
        }
    }
    // Half of another window, in whole hours.
    let out = simdedup(&["config", "--window-hours", "10"], &[], b"");
    assert!(String::from_utf8_lossy(&out.stdout).contains("bucket_hours = 5"));
}

#[test]
fn scan_rejects_a_ts_in_seconds_as_the_worker_does() {
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let lines = format!(
        "{{\"id\":\"s\",\"text\":\"{TEXT}\",\"ts\":{now_s}}}\n{{\"id\":\"ms\",\"text\":\"{TEXT} again\",\"ts\":{}}}\n{{\"id\":\"old\",\"text\":\"{TEXT}\",\"ts\":1262304000000}}\n",
        now_s * 1000
    );
    let out = simdedup(&["scan", "--no-progress"], &[], lines.as_bytes());
    assert!(out.status.success(), "{}", stderr(&out));
    let verdicts: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(verdicts[0]["verdict"], "rejected", "{:?}", verdicts[0]);
    let reason = verdicts[0]["reason"].as_str().unwrap();
    assert!(reason.contains("looks like seconds"), "{reason}");
    assert_eq!(verdicts[1]["verdict"], "unique");
    // An old article in milliseconds is no unit mistake: `scan` takes history.
    assert_eq!(verdicts[2]["verdict"], "unique", "{:?}", verdicts[2]);
}

#[test]
fn inspect_has_one_shape_in_hex_and_exits_1_for_an_unknown_id() {
    let server = RedisServer::start();
    let url = server.url();
    let out = simdedup(&["demo", "--redis-url", &url, "-n", "ops"], &[], b"");
    assert!(out.status.success(), "{}", stderr(&out));
    let out = simdedup(
        &["inspect", "zh-1-rewrite", "--redis-url", &url, "-n", "ops"],
        &[],
        b"",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let simhash = shown["fingerprint"]["simhash"].as_str().unwrap();
    assert!(
        simhash.len() == 16 && simhash.chars().all(|c| c.is_ascii_hexdigit()),
        "{shown}"
    );
    assert_eq!(shown["verdict"]["verdict"], "duplicate", "{shown}");
    let evidence = &shown["evidence"];
    assert!(evidence["evidence"].is_null(), "not nested: {shown}");
    let overlap = evidence["overlap"].as_f64().unwrap();
    let stored = shown["verdict"]["overlap"].as_f64().unwrap();
    assert!(stored <= 1.0 && (overlap - stored).abs() < 0.006, "{shown}");
    // No decimal SimHash anywhere: every hash is hex.
    let text = shown.to_string();
    let decimal = simdedup::simhash::from_hex(simhash).unwrap().to_string();
    assert!(!text.contains(&decimal), "{text}");

    let out = simdedup(
        &["inspect", "never-seen", "--redis-url", &url, "-n", "ops"],
        &[],
        b"",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert!(stderr(&out).contains("never-seen is not in the index"));

    // Who has the rewrite's first block: the block sets name the articles.
    let block = &simhash[..4];
    let inspect_block = |block: &str, ns: &str| {
        simdedup(
            &["inspect", "--block", block, "--redis-url", &url, "-n", ns],
            &[],
            b"",
        )
    };
    let out = inspect_block(block, "ops");
    assert!(out.status.success(), "{}", stderr(&out));
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed["block"], block);
    let articles = listed["articles"].as_array().unwrap();
    let rewrite = articles
        .iter()
        .find(|a| a["id"] == "zh-1-rewrite")
        .unwrap_or_else(|| panic!("zh-1-rewrite has block {block}: {listed}"));
    assert_eq!(rewrite["simhash"], simhash);
    assert_eq!(rewrite["positions"][0], 0, "{rewrite}");
    assert_eq!(rewrite["verdict"], shown["verdict"]);
    assert_eq!(articles[0]["distance_to_first"], 0);
    for a in articles {
        let hex = a["simhash"].as_str().unwrap();
        let at: Vec<usize> = (0..4).filter(|p| &hex[4 * p..4 * p + 4] == block).collect();
        assert!(
            !at.is_empty() && a["positions"] == serde_json::json!(at),
            "{a}"
        );
    }
    // A block nobody has (a namespace without articles): exit status 1.
    let out = inspect_block(block, "none");
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains(&format!(
        "no article in the window has SimHash block {block}"
    )));
    let out = inspect_block("zz", "ops");
    assert_eq!(out.status.code(), Some(2), "a bad block is a usage error");
    assert!(stderr(&out).contains("4 hex digits"), "{}", stderr(&out));

    // `delete` removes what the index holds; a second time, nothing is there.
    let redis = ["--redis-url", url.as_str(), "-n", "ops"];
    let run = |args: &[&str]| simdedup(&[args, &redis[..]].concat(), &[], b"");
    let out = run(&["delete", "zh-1-rewrite"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "deleted zh-1-rewrite\n"
    );
    assert_eq!(run(&["inspect", "zh-1-rewrite"]).status.code(), Some(1));
    let out = run(&["delete", "zh-1-rewrite", "never-seen"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("not in the index (never seen, deleted, or outside the window): zh-1-rewrite, never-seen"),
        "{}",
        stderr(&out)
    );
}

/// An example program's binary, built with the tests by `cargo test`; built
/// here, with the tests' profile, when a narrower run left it out.
fn example(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_BIN_EXE_simdedup")).parent().unwrap();
    let bin = dir.join("examples").join(name);
    if !bin.exists() {
        // target/PROFILE/, where the dev profile's folder is "debug".
        let profile = match dir.file_name().unwrap().to_str().unwrap() {
            "debug" => "dev",
            other => other,
        };
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let ok = Command::new(cargo)
            .args(["build", "--profile", profile, "--example", name])
            .current_dir(root())
            .status()
            .unwrap()
            .success();
        assert!(ok, "cargo build --profile {profile} --example {name}");
    }
    bin
}

#[test]
fn the_example_programs_read_the_bundled_sample() {
    let sample = root().join("examples/articles.jsonl");
    let sample = sample.to_str().unwrap();
    for (name, args) in [
        ("compare_indexes", vec![sample]),
        ("fingerprint_profile", vec![sample, "20"]),
        ("fingerprint_jsonl", vec![sample]),
    ] {
        let out = Command::new(example(name))
            .args(&args)
            .env_remove("SIMDEDUP_CONFIG")
            .output()
            .unwrap();
        let err = stderr(&out);
        assert!(out.status.success(), "{name}: {err}");
        if name != "fingerprint_jsonl" {
            assert!(err.contains("line 10: skipped"), "{name}: {err}");
        }
    }
}

#[test]
fn the_readme_explain_example_runs_on_its_shipped_files() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let start = readme
        .find("$ simdedup explain ")
        .expect("the README's explain example");
    let block = &readme[start..readme[start..].find("```").unwrap() + start];
    let mut lines = block.lines();
    let command = lines.next().unwrap().trim_start_matches("$ simdedup ");
    let args: Vec<&str> = command.split_whitespace().collect();
    let out = simdedup(&args, &[], b"");
    assert!(out.status.success(), "{command}: {}", stderr(&out));
    let shown = String::from_utf8(out.stdout).unwrap();
    for line in lines.take_while(|l| !l.contains('…')) {
        assert!(
            shown.lines().any(|l| l == line),
            "the README shows {line:?}; the command prints:\n{shown}"
        );
    }
}

/// The stated minimum Rust version is the highest `rust-version` any crate of
/// the locked graph declares (dev-dependencies included: the README's first
/// commands run the tests).
#[test]
fn the_stated_rust_version_is_that_of_the_locked_graph() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked"])
        .current_dir(root())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let metadata: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let version = |s: &str| -> Vec<u32> { s.split('.').map(|p| p.parse().unwrap()).collect() };
    let (highest, by) = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| !p["source"].is_null())
        .filter_map(|p| Some((version(p["rust_version"].as_str()?), p["name"].to_string())))
        .max()
        .unwrap();
    let stated = |text: &str| -> Vec<u32> {
        let line = text
            .lines()
            .find(|l| l.starts_with("rust-version"))
            .expect("rust-version");
        version(line.split('"').nth(1).unwrap())
    };
    let mut shown = highest.clone();
    while shown.len() > 2 && shown.last() == Some(&0) {
        shown.pop();
    }
    for manifest in ["Cargo.toml", "simdedup-bench/Cargo.toml"] {
        let text = std::fs::read_to_string(root().join(manifest)).unwrap();
        assert_eq!(stated(&text), shown, "{manifest}: the highest is {by}'s");
    }
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let said = shown
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(".");
    assert!(
        readme.contains(&format!("Rust ({said}+)")),
        "README must say Rust ({said}+)"
    );
}

/// Each role runs under exactly the user docs/redis-keys.md writes for it
/// ("ACL per role"), on namespace `news`: a worker decides what a producer
/// sent, and `inspect` and `stats` read it, while the reader may not delete.
/// A worker whose user lacks a command stops at once, naming it and the
/// section, instead of retrying forever.
#[test]
fn every_role_runs_under_its_documented_acl() {
    let server = RedisServer::start();
    let worker = crate::support::documented_acl_user(&server, "simdedup-worker");
    let producer = crate::support::documented_acl_user(&server, "simdedup-producer");
    let reader = crate::support::documented_acl_user(&server, "simdedup-reader");
    let _w = spawn_worker_at(&worker, "news", "", &[]);
    let with = |url: &str, args: &[&str]| {
        simdedup(
            &[args, &["--redis-url", url, "-n", "news"][..]].concat(),
            &[],
            b"",
        )
    };
    let out = with(
        &producer,
        &[
            "produce",
            "examples/articles.jsonl",
            "--no-progress",
            "--wait-replicas",
            "0",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let mut admin = server.connection();
    wait_until("every article answered", Duration::from_secs(60), || {
        redis::cmd("XLEN")
            .arg("simdedup:{news}:out")
            .query::<u64>(&mut admin)
            .unwrap()
            >= 10
    });
    let out = with(&reader, &["inspect", "zh-1-repost"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"zh-1-repost\""));
    let out = with(&reader, &["stats"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = with(&reader, &["delete", "zh-1-repost"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("ACL per role"), "{}", stderr(&out));

    // The worker's user without one stream command: refused at start.
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("simdedup-worker")
        .arg("-xgroup|create")
        .query(&mut admin)
        .unwrap();
    let mut w = spawn_worker_at(&worker, "news", "", &[]);
    let (status, err) = wait_for_exit(&mut w);
    assert!(!status.success(), "{err}");
    assert!(
        err.contains("Redis refused a command the worker needs")
            && err.contains("xgroup|create")
            && err.contains("ACL per role"),
        "{err}"
    );
}
