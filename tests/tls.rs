//! `rediss://` URLs: the Redis index and the tools over TLS, against a real
//! `redis-server` started here with a TLS port and a certificate signed by a CA
//! made for the test (with the `openssl` command-line tool).
//!
//! The server certificate is checked against the system's roots or, as here, the
//! CA file named by `SSL_CERT_FILE` (rustls-native-certs reads it), always: a
//! URL ending in `#insecure` is refused.

mod support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use simdedup::connect::ConnectOptions;
use simdedup::decision::DecisionConfig;
use simdedup::fingerprint::Fingerprint;
use simdedup::index::{Index, IndexEntry, RedisIndex, RedisIndexOptions};
use support::{free_port, RedisServer};

const OPENSSL_HINT: &str = "the TLS test makes its certificates with the `openssl` tool: \
install it with `sudo apt-get install openssl` (Debian/Ubuntu) or `brew install openssl` (macOS)";

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run openssl ({e}): {OPENSSL_HINT}"));
    assert!(
        out.status.success(),
        "openssl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA (`ca.pem`) and a server certificate for 127.0.0.1 signed by it
/// (`server.pem`, `server.key`).
fn make_certificates(dir: &Path) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=simdedup test CA",
        ],
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
    );
    std::fs::write(
        dir.join("san.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "san.ext",
        ],
    );
}

fn entry(id: &str, simhash: u64) -> IndexEntry {
    IndexEntry {
        id: id.into(),
        ts_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64,
        fingerprint: Fingerprint {
            simhash,
            content: simhash,
            signatures: vec![],
            words: 50,
            numbers: Vec::new(),
            ..Default::default()
        },
    }
}

async fn connect(url: &str) -> Result<RedisIndex, simdedup::index::IndexError> {
    let opts = RedisIndexOptions {
        connect: ConnectOptions {
            connection_timeout: Duration::from_secs(5),
            ..ConnectOptions::default()
        },
        ..Default::default()
    };
    RedisIndex::connect(url, "tls", DecisionConfig::default(), opts).await
}

/// One test function: it sets `SSL_CERT_FILE` for this process half-way, so the
/// steps must run in this order (this file is its own test binary).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn index_and_tools_work_over_tls() {
    let certs = tempfile::tempdir().unwrap();
    make_certificates(certs.path());
    let file = |name: &str| certs.path().join(name).to_string_lossy().into_owned();
    let tls_port = free_port().to_string();
    let server = RedisServer::start_with(&[
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        &file("server.pem"),
        "--tls-key-file",
        &file("server.key"),
        "--tls-ca-cert-file",
        &file("ca.pem"),
        "--tls-auth-clients",
        "no",
    ]);
    let url = format!("rediss://127.0.0.1:{tls_port}/");

    // Without trusting the CA the certificate check fails: the library's
    // error says so, the command line adds what to do.
    std::env::remove_var("SSL_CERT_FILE");
    let err = connect(&url)
        .await
        .expect_err("an unknown CA must be refused");
    assert!(err.to_string().contains("certificate"), "{err}");
    let refused = Command::new(env!("CARGO_BIN_EXE_simdedup"))
        .args(["stats", "--redis-url", &url, "-n", "tls"])
        .env_remove("SSL_CERT_FILE")
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("certificate") && stderr.contains("SSL_CERT_FILE"),
        "{stderr}"
    );

    // `#insecure` would skip the check: refused, with the way to trust a
    // private CA instead, by the library and the binary.
    let insecure = format!("{url}#insecure");
    let err = connect(&insecure)
        .await
        .expect_err("#insecure must be refused");
    assert!(
        err.to_string().contains("#insecure") && err.to_string().contains("SSL_CERT_FILE"),
        "{err}"
    );
    let refused = Command::new(env!("CARGO_BIN_EXE_simdedup"))
        .args(["stats", "--redis-url", &insecure, "-n", "tls"])
        .env_remove("SSL_CERT_FILE")
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("#insecure") && stderr.contains("SSL_CERT_FILE"),
        "{stderr}"
    );

    // Trusting the CA: the real path, over TLS, sees what was stored over TLS.
    std::env::set_var("SSL_CERT_FILE", file("ca.pem"));
    let idx = connect(&url).await.unwrap();
    assert!(!idx
        .check_and_insert(&entry("a", 0x0123_4567_89ab_cdef))
        .await
        .unwrap()
        .verdict
        .is_duplicate());
    let out = idx
        .check_and_insert(&entry("b", 0x0123_4567_89ab_cdee))
        .await
        .unwrap();
    assert_eq!(out.verdict.duplicate().unwrap().dup_of, "a");

    // The binary's tools take the same URL.
    let stats = Command::new(env!("CARGO_BIN_EXE_simdedup"))
        .args(["stats", "--redis-url", &url, "-n", "tls"])
        .env("SSL_CERT_FILE", file("ca.pem"))
        .output()
        .unwrap();
    assert!(
        stats.status.success(),
        "{}",
        String::from_utf8_lossy(&stats.stderr)
    );
    // What it read over TLS: the namespace's two articles.
    let shown: serde_json::Value = serde_json::from_slice(&stats.stdout).unwrap();
    let articles: i64 = shown["index_buckets"]
        .as_array()
        .unwrap_or_else(|| panic!("{shown}"))
        .iter()
        .map(|b| b["articles"].as_i64().unwrap())
        .sum();
    assert_eq!(articles, 2, "{shown}");
    // The plain port still works for assertions: the data is there.
    let mut conn = server.connection();
    let buckets: Vec<String> = redis::cmd("ZRANGE")
        .arg("simdedup:{tls}:buckets")
        .arg(0)
        .arg(-1)
        .query(&mut conn)
        .unwrap();
    assert_eq!(buckets.len(), 1);
}
