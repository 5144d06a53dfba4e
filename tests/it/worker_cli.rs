//! `simdedup config`: flags beat environment beat file; secrets redacted.

use std::process::Command;

#[test]
fn config_precedence_and_redaction() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("simdedup.toml");
    std::fs::write(
        &file,
        "namespace = \"from-file\"\nredis_url = \"redis://app:filesecret@db:6379/0\"\n[worker]\nbatch_size = 7\nmax_deliveries = 9\n",
    )
    .unwrap();
    let run = |env: &[(&str, &str)], flags: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_simdedup"));
        cmd.arg("config").arg("--config").arg(&file).args(flags);
        for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("SIMDEDUP_")) {
            cmd.env_remove(k);
        }
        cmd.envs(env.iter().copied());
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let shown = run(&[], &[]);
    assert!(shown.contains("namespace = \"from-file\""), "{shown}");
    assert!(shown.contains("batch_size = 7"));
    assert!(!shown.contains("filesecret"), "password redacted: {shown}");
    assert!(shown.contains("redis://app:***@db:6379/0"));

    let shown = run(
        &[
            ("SIMDEDUP_NAMESPACE", "from-env"),
            ("SIMDEDUP_WORKER__BATCH_SIZE", "8"),
            ("SIMDEDUP_BUCKET_HOURS", "48"),
            ("SIMDEDUP_LOG", "info"),
        ],
        &[],
    );
    assert!(shown.contains("namespace = \"from-env\""), "{shown}");
    assert!(shown.contains("batch_size = 8"));
    assert!(shown.contains("bucket_hours = 48"), "{shown}");
    assert!(
        shown.contains("max_deliveries = 9"),
        "file values not overridden stay"
    );

    let shown = run(
        &[("SIMDEDUP_NAMESPACE", "from-env")],
        &[
            "--namespace",
            "from-flag",
            "--redis-url",
            "redis://:flagsecret@h:1",
        ],
    );
    assert!(shown.contains("namespace = \"from-flag\""), "{shown}");
    assert!(!shown.contains("flagsecret"));
}

/// Every URL form `docs/operations.md` lists, with passwords, pointing at a
/// closed port: no password appears in `simdedup config`, in a tool's
/// "cannot reach Redis" error, or in the worker's log while it retries, at
/// every log level (trace shows everything the libraries log too).
#[test]
fn no_password_is_printed_for_any_url_form_at_any_log_level() {
    use std::process::Stdio;
    use std::time::Duration;
    let port = crate::support::free_port();
    let h = format!("127.0.0.1:{port}");
    let urls: Vec<(String, Vec<&str>)> = vec![
        (format!("redis://app:pwNode1@{h}/0"), vec!["pwNode1"]),
        (format!("redis://pwLone2@{h}"), vec!["pwLone2"]),
        (
            format!("redis://app:pwSeedA3@{h},redis://app:pwSeedB4@{h}"),
            vec!["pwSeedA3", "pwSeedB4"],
        ),
        (
            format!("redis+sentinel://app:pwData5@{h},{h}/mymaster/0?sentinel_username=s&sentinel_password=pwSent6"),
            vec!["pwData5", "pwSent6"],
        ),
        (
            "redis+sentinel://app:pwBad7@:26379/mymaster".to_owned(),
            vec!["pwBad7"],
        ),
    ];
    let simdedup = |args: &[&str], url: &str, level: &str| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_simdedup"));
        for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("SIMDEDUP_")) {
            cmd.env_remove(k);
        }
        cmd.args(args)
            .args(["--redis-url", url])
            .env("SIMDEDUP_LOG", level);
        cmd
    };
    for (url, secrets) in &urls {
        let check = |what: &str, text: &str| {
            for secret in secrets {
                assert!(
                    !text.contains(secret),
                    "{what} for {url} shows {secret}:\n{text}"
                );
            }
        };
        for level in ["error", "warn", "info", "debug", "trace"] {
            let out = simdedup(&["config"], url, level).output().unwrap();
            check("config", &String::from_utf8_lossy(&out.stdout));
            check("config's log", &String::from_utf8_lossy(&out.stderr));
            let out = simdedup(&["stats", "-n", "pw"], url, level)
                .output()
                .unwrap();
            assert!(!out.status.success(), "stats reached a closed port");
            check("stats", &String::from_utf8_lossy(&out.stdout));
            check("stats' error", &String::from_utf8_lossy(&out.stderr));
        }
        // The worker retries, logging a WARN line each time.
        let log = tempfile::NamedTempFile::new().unwrap();
        let http = format!("127.0.0.1:{}", crate::support::free_port());
        let mut worker = simdedup(&["worker", "-n", "pw", "--http-addr", &http], url, "trace")
            .env("SIMDEDUP_WORKER__BACKOFF_MAX_MS", "100")
            .stdout(Stdio::null())
            .stderr(log.reopen().unwrap())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_secs(2));
        let _ = worker.kill();
        let _ = worker.wait();
        let logged = std::fs::read_to_string(log.path()).unwrap();
        assert!(!logged.is_empty(), "the worker logged nothing for {url}");
        check("the worker's log", &logged);
    }
}
