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
