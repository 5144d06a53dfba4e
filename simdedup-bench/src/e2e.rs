//! End to end through the streams: K articles produced into the input stream,
//! then W `simdedup worker` processes (this very binary) started on the same
//! namespace, timed from the first worker's start until every input entry has
//! its output entry.

use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redis::Value;
use serde::Serialize;
use simdedup::connect::Conn;

use super::info::Info;
use super::synthetic::TextGen;
use super::worker_metrics::{scrape, Buckets, IndexLatency, INDEX_SECONDS};
use super::BenchError;
use simdedup::keys::Keys;
use simdedup::worker::stream::parse_raw_entry;
use simdedup::worker::tools::produce;

/// Where the articles of the end-to-end runs come from.
#[derive(Debug, Clone)]
pub enum Articles {
    /// Generated texts ([`TextGen`]), as many as asked for.
    Synthetic(TextGen),
    /// Real articles (`text` and `title` of JSON lines). `skipped`: lines that
    /// were not usable articles (each reported in the log when read).
    Corpus {
        articles: Vec<(String, Option<String>)>,
        skipped: usize,
    },
}

impl Articles {
    /// Read a JSONL corpus (`{"text", ["title"], …}` per line).
    pub fn corpus(path: &Path) -> Result<Articles, BenchError> {
        let data = std::fs::read(path).map_err(|e| BenchError::Corpus {
            path: path.to_owned(),
            why: e.to_string(),
        })?;
        let mut articles = Vec::new();
        let mut skipped = 0;
        for (n, line) in data.split(|&b| b == b'\n').enumerate() {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let why = match serde_json::from_slice::<serde_json::Value>(line) {
                Err(e) => format!("not JSON ({e})"),
                Ok(v) => match v["text"].as_str().filter(|t| !t.trim().is_empty()) {
                    Some(text) => {
                        articles.push((text.to_owned(), v["title"].as_str().map(str::to_owned)));
                        continue;
                    }
                    None => "no non-empty string field \"text\"".to_owned(),
                },
            };
            skipped += 1;
            tracing::warn!(corpus = %path.display(), line = n + 1, %why, "corpus line skipped");
        }
        if articles.is_empty() {
            return Err(BenchError::Corpus {
                path: path.to_owned(),
                why: "no JSON lines with a non-empty \"text\"".into(),
            });
        }
        Ok(Articles::Corpus { articles, skipped })
    }

    /// What the report says about the articles.
    pub fn describe(&self) -> String {
        match self {
            Articles::Synthetic(_) => "synthetic zh/en texts".into(),
            Articles::Corpus {
                articles,
                skipped: 0,
            } => {
                format!("corpus of {} articles", articles.len())
            }
            Articles::Corpus { articles, skipped } => format!(
                "corpus of {} articles ({skipped} unusable lines skipped, each named in the log)",
                articles.len()
            ),
        }
    }

    /// How many articles an end-to-end run can have: `wanted`, or the whole
    /// corpus when it is smaller.
    pub fn per_run(&self, wanted: u64) -> u64 {
        match self {
            Articles::Synthetic(_) => wanted,
            Articles::Corpus { articles, .. } => wanted.min(articles.len() as u64).max(1),
        }
    }

    /// JSON lines of run `run`: the first `k` articles, with ids
    /// [`article_id`]`(run, j)`. Every run sends the same texts, so that runs
    /// compare like for like (worker counts, the empty and the filled index);
    /// on a filled index the bench deletes a run's articles after it, so that
    /// the next run meets the same index and no text as a copy of itself
    /// (`lib.rs`, `E2eRuns`).
    fn jsonl(&self, run: u64, k: u64) -> Vec<u8> {
        let mut out = Vec::new();
        for j in 0..k {
            let id = article_id(run, j);
            let line = match self {
                Articles::Synthetic(gen) => {
                    serde_json::json!({"id": id, "text": gen.text(j)})
                }
                Articles::Corpus { articles: a, .. } => {
                    let (text, title) = &a[(j % a.len() as u64) as usize];
                    serde_json::json!({"id": id, "text": text, "title": title})
                }
            };
            out.extend_from_slice(line.to_string().as_bytes());
            out.push(b'\n');
        }
        out
    }
}

/// One end-to-end run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct E2e {
    pub workers: usize,
    pub articles: u64,
    /// From the first worker's start to the last output entry (start-up included).
    pub seconds: f64,
    pub articles_per_s: f64,
    /// From the first output entry to the last (start-up excluded).
    pub steady_per_s: f64,
    pub unique: u64,
    pub duplicate: u64,
    pub rejected: u64,
    /// `code` of the rejected entries, with counts (e.g. `contention: 1`).
    pub rejected_codes: std::collections::BTreeMap<String, u64>,
    /// Input entries with an output entry (joined on `source`).
    pub answered: u64,
    /// Entries pending in the group when the last output appeared.
    pub pending: u64,
    pub redis_cpu_us_per_article: f64,
    /// The workers' own index-call latency (their `/metrics`), summed over
    /// them; `None` when no worker's could be read.
    pub index_latency: Option<IndexLatency>,
    /// A steady feed ([`run`] with a rate): the articles per second produced.
    pub offered_per_s: Option<f64>,
    /// A steady feed: each article's time from its input entry to its
    /// verdict, by the two entries' stream ids (Redis' clock, milliseconds).
    pub verdict_latency: Option<VerdictLatency>,
}

/// Time from an article's input entry to its verdict's output entry, from
/// their stream ids (`<ms>-<seq>`, both stamped by the one Redis server), in
/// whole milliseconds.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct VerdictLatency {
    pub p50_ms: u64,
    pub p99_ms: u64,
    pub max_ms: u64,
}

impl VerdictLatency {
    /// From the (input, output) stream id pairs; `None` when there are none.
    pub fn from_pairs<'a>(
        pairs: impl Iterator<Item = (&'a str, &'a str)>,
    ) -> Option<VerdictLatency> {
        let ms = |id: &str| id.split('-').next()?.parse::<u64>().ok();
        let mut lat: Vec<u64> = pairs
            .filter_map(|(input, output)| Some(ms(output)?.saturating_sub(ms(input)?)))
            .collect();
        lat.sort_unstable();
        Some(VerdictLatency {
            p50_ms: super::index::percentile(&lat, 50.0),
            p99_ms: super::index::percentile(&lat, 99.0),
            max_ms: *lat.last()?,
        })
    }
}

/// How to run the workers.
#[derive(Debug, Clone)]
pub struct WorkerSetup {
    pub exe: PathBuf,
    pub url: String,
    pub namespace: String,
    pub batch_size: Option<usize>,
    pub max_in_flight: Option<usize>,
    pub ordered_index_concurrency: Option<usize>,
    /// `--wait-replicas` of the workers.
    pub wait_replicas: Option<u32>,
    /// `bucket_hours` of the workers (`SIMDEDUP_BUCKET_HOURS`); their default otherwise.
    pub bucket_hours: Option<u64>,
    /// `decision.lookup_signatures` of the workers; their default otherwise.
    pub lookup_signatures: Option<usize>,
    pub timeout: Duration,
    /// Workers' stderr goes to files here.
    pub log_dir: PathBuf,
}

/// A free port for a worker's `/metrics` listener, below the kernel's range of
/// ephemeral ports (`/proc/sys/net/ipv4/ip_local_port_range`). A port the kernel
/// hands out for `:0` is free only until someone else gets it: the next `:0`
/// may hand it out again (to the next worker, before the first has bound it),
/// and the bench's own outgoing connections (to Redis, from the workers) are
/// given ports from that very range. Once in a long run, a worker found its
/// port taken ("Address already in use"). Below the range, only a process
/// binding that port by number can take it, and each worker's search starts at
/// its own place (97 ports apart; the start also differs per process, so
/// concurrent benches rarely try the same ports).
fn listener_port(worker: usize) -> std::io::Result<u16> {
    let ephemeral_start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    const LOWEST: u16 = 10_000;
    if ephemeral_start <= LOWEST + 1_000 {
        // An unusual range leaves no room below it: any free port will do.
        return Ok(std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port());
    }
    let span = u32::from(ephemeral_start - LOWEST);
    let first = (std::process::id().wrapping_mul(7919) + 97 * worker as u32) % span;
    for i in 0..span {
        let port = LOWEST + ((first + i) % span) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrInUse,
        format!("no free port for a worker's /metrics between {LOWEST} and {ephemeral_start}"),
    ))
}

/// Worker processes, killed on drop (error, Ctrl-C) unless stopped before.
struct Workers {
    /// Each worker, its log file and the port of its `/metrics` listener.
    children: Vec<(Child, PathBuf, u16)>,
}

impl Workers {
    fn spawn(setup: &WorkerSetup, run: u64, n: usize) -> Result<Workers, BenchError> {
        let mut workers = Workers {
            children: Vec::new(),
        };
        for w in 0..n {
            let log = setup.log_dir.join(format!("worker-{run}-{w}.log"));
            let port = listener_port(w)?;
            let mut cmd = Command::new(&setup.exe);
            cmd.args(["worker", "--redis-url", &setup.url])
                .args(["--namespace", &setup.namespace])
                .args(["--http-addr", &format!("127.0.0.1:{port}")])
                .args(["--consumer", &format!("bench-{run}-{w}")]);
            if let Some(b) = setup.batch_size {
                cmd.args(["--batch-size", &b.to_string()]);
            }
            if let Some(m) = setup.max_in_flight {
                cmd.args(["--max-in-flight", &m.to_string()]);
            }
            if let Some(n) = setup.ordered_index_concurrency {
                cmd.args(["--ordered-index-concurrency", &n.to_string()]);
            }
            if let Some(n) = setup.wait_replicas {
                cmd.args(["--wait-replicas", &n.to_string()]);
            }
            // The workers get the defaults, whatever this shell's SIMDEDUP_* say,
            // and the bench's bucket length.
            for (k, _) in std::env::vars_os() {
                if k.to_string_lossy().starts_with("SIMDEDUP_") {
                    cmd.env_remove(k);
                }
            }
            if let Some(h) = setup.bucket_hours {
                cmd.env("SIMDEDUP_BUCKET_HOURS", h.to_string());
            }
            if let Some(n) = setup.lookup_signatures {
                cmd.env("SIMDEDUP_DECISION__LOOKUP_SIGNATURES", n.to_string());
            }
            let stderr = File::create(&log)?;
            let child = cmd
                .env("SIMDEDUP_LOG", "warn")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(stderr)
                .spawn()
                .map_err(|e| {
                    BenchError::Worker(format!("cannot run {}: {e}", setup.exe.display()))
                })?;
            workers.children.push((child, log, port));
        }
        Ok(workers)
    }

    /// A worker that exited already, with the end of its log.
    fn exited(&mut self) -> Option<String> {
        for (child, log, _) in &mut self.children {
            if let Ok(Some(status)) = child.try_wait() {
                let text = std::fs::read_to_string(&*log).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(10).collect();
                return Some(format!(
                    "a worker exited early ({status}); the end of {}:\n{}",
                    log.display(),
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                ));
            }
        }
        None
    }

    /// The workers' index-call latency histograms, summed: what they observed.
    /// A worker whose `/metrics` cannot be read is left out, with a warning.
    fn index_latency(&self) -> Option<IndexLatency> {
        let mut sum = Buckets::default();
        for (child, log, port) in &self.children {
            match scrape(*port).map(|text| Buckets::parse(&text, INDEX_SECONDS)) {
                Ok(Some(b)) => sum.add(&b),
                Ok(None) => tracing::warn!(
                    pid = child.id(),
                    "no {INDEX_SECONDS} histogram in a worker's /metrics"
                ),
                Err(e) => {
                    tracing::warn!(pid = child.id(), log = %log.display(), error = %e, "cannot read a worker's /metrics")
                }
            }
        }
        IndexLatency::from_buckets(&sum)
    }

    /// SIGTERM (graceful), then SIGKILL after 15 s.
    fn stop(mut self) {
        for (child, _, _) in &self.children {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .stderr(Stdio::null())
                .status();
        }
        let deadline = Instant::now() + Duration::from_secs(15);
        for (child, _, _) in &mut self.children {
            while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        // Drop kills whatever is left.
        self.children.iter_mut().for_each(|(c, _, _)| {
            let _ = c.kill();
            let _ = c.wait();
        });
        self.children.clear();
    }
}

impl Workers {
    /// Wait until every worker accepts connections on its `/metrics` port.
    async fn wait_until_listening(&mut self, timeout: Duration) -> Result<(), BenchError> {
        let started = Instant::now();
        let ports: Vec<(u16, PathBuf)> = self
            .children
            .iter()
            .map(|(_, log, port)| (*port, log.clone()))
            .collect();
        for (port, log) in ports {
            while tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_err()
            {
                if let Some(why) = self.exited() {
                    return Err(BenchError::Worker(why));
                }
                if started.elapsed() > timeout {
                    return Err(BenchError::Worker(format!(
                        "a worker did not open its /metrics port {port} within {timeout:?}; \
                         its log: {}",
                        log.display()
                    )));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(())
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for (child, _, _) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

async fn xlen(conn: &mut Conn, key: &str) -> Result<u64, BenchError> {
    Ok(redis::cmd("XLEN").arg(key).query_async(conn).await?)
}

/// The id of article `j` of end-to-end run `run`.
pub fn article_id(run: u64, j: u64) -> String {
    format!("e2e-{run}-{j}")
}

/// Run `k` articles of `articles` (run number `run`: their ids) through
/// `workers` workers. The input, output and dead-letter streams are deleted
/// first (with the consumer group); the index is left as it is.
///
/// Without a `rate` the articles are all in the input stream before the
/// workers start, and the run measures how fast they drain it. With one, the
/// workers start first (and load their views) and the
/// articles arrive at `rate` per second, as a live feed does: the run
/// measures latency at a load the workers keep up with.
pub async fn run(
    conn: &mut Conn,
    setup: &WorkerSetup,
    articles: &Articles,
    run: u64,
    k: u64,
    workers: usize,
    rate: Option<f64>,
) -> Result<E2e, BenchError> {
    let keys = Keys::new(&setup.namespace);
    redis::cmd("DEL")
        .arg(keys.input_stream())
        .arg(keys.output_stream())
        .arg(keys.dead_stream())
        .query_async::<()>(conn)
        .await?;
    // A worker loads the whole window before it serves, which at 10 M
    // articles takes a while; start the workers and wait for them (their
    // /metrics listener opens once the view is loaded), so the run measures
    // serving, not loading.
    let mut procs = Workers::spawn(setup, run, workers)?;
    procs.wait_until_listening(setup.timeout).await?;
    let jsonl = articles.jsonl(run, k);
    let produce_all = |conn: &mut Conn, rate: Option<f64>| {
        let (keys, jsonl) = (keys.clone(), jsonl.clone());
        let mut conn = conn.clone();
        async move {
            // The same connection again after a transient error: it reconnects itself.
            let again = conn.clone();
            let reconnect = move || std::future::ready(Ok(again.clone()));
            produce(
                &mut conn,
                reconnect,
                &keys,
                jsonl.as_slice(),
                500,
                rate,
                Default::default(),
                &indicatif::ProgressBar::hidden(),
            )
            .await
            .map_err(|e| BenchError::Worker(format!("producing the articles: {e}")))
        }
    };
    // A steady feed goes on while the workers answer; a backlog is produced first.
    let mut feed = None;
    if rate.is_none() {
        produce_all(conn, None).await?;
    }
    // Redis CPU: the namespace's primary's (on a cluster the others serve
    // other namespaces).
    let cpu0 = Info::fetch_for(conn, &setup.namespace, "cpu")
        .await?
        .cpu_seconds();
    let started = Instant::now();
    if rate.is_some() {
        feed = Some(tokio::spawn(produce_all(conn, rate)));
    }
    let out = keys.output_stream();
    let mut first: Option<(Instant, u64)> = None;
    loop {
        let n = xlen(conn, &out).await?;
        if n > 0 && first.is_none() {
            first = Some((Instant::now(), n));
        }
        if n >= k {
            break;
        }
        if let Some(why) = procs.exited() {
            return Err(BenchError::Worker(why));
        }
        if started.elapsed() > setup.timeout {
            return Err(BenchError::Worker(format!(
                "{n} of {k} articles answered after {:?} (--e2e-timeout); worker logs in {}",
                setup.timeout,
                setup.log_dir.display()
            )));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    if let Some(feed) = feed {
        feed.await.map_err(|e| BenchError::Task(e.to_string()))??;
    }
    let cpu = Info::fetch_for(conn, &setup.namespace, "cpu")
        .await?
        .cpu_seconds()
        - cpu0;
    let summary: Value = redis::cmd("XPENDING")
        .arg(keys.input_stream())
        .arg("simdedup")
        .query_async(conn)
        .await?;
    let pending = match &summary {
        Value::Array(v) => match v.first() {
            Some(Value::Int(n)) => *n as u64,
            _ => 0,
        },
        _ => 0,
    };
    let index_latency = tokio::task::block_in_place(|| {
        let latency = procs.index_latency();
        procs.stop();
        latency
    });
    let mut result = E2e {
        workers,
        articles: k,
        seconds,
        articles_per_s: k as f64 / seconds.max(1e-9),
        pending,
        redis_cpu_us_per_article: cpu * 1e6 / k.max(1) as f64,
        index_latency,
        offered_per_s: rate,
        ..E2e::default()
    };
    // Start-up excluded: from the first output entry seen to the last.
    if let Some((t, n)) = first {
        let steady = seconds - t.duration_since(started).as_secs_f64();
        result.steady_per_s = if k > n && steady > 0.0 {
            (k - n) as f64 / steady
        } else {
            0.0
        };
    }
    let pairs = count_verdicts(conn, &keys, &mut result).await?;
    if rate.is_some() {
        result.verdict_latency =
            VerdictLatency::from_pairs(pairs.iter().map(|(i, o)| (i.as_str(), o.as_str())));
    }
    Ok(result)
}

/// Read the output stream: verdict counts and distinct sources answered.
/// Returns the (input, output) stream id of each verdict.
async fn count_verdicts(
    conn: &mut Conn,
    keys: &Keys,
    result: &mut E2e,
) -> Result<Vec<(String, String)>, BenchError> {
    let mut sources = HashSet::new();
    let mut pairs = Vec::new();
    let mut after = "-".to_owned();
    loop {
        let reply: Value = redis::cmd("XRANGE")
            .arg(keys.output_stream())
            .arg(&after)
            .arg("+")
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await?;
        let Value::Array(entries) = reply else { break };
        if entries.is_empty() {
            break;
        }
        for e in &entries {
            let raw = parse_raw_entry(e).map_err(|e| BenchError::Worker(e.0))?;
            after = format!("({}", raw.id);
            let mut code = None;
            for (name, value) in raw.fields.unwrap_or_default() {
                match (name.as_slice(), value.as_slice()) {
                    (b"verdict", b"unique") => result.unique += 1,
                    (b"verdict", b"duplicate") => result.duplicate += 1,
                    (b"verdict", _) => result.rejected += 1,
                    (b"code", c) => code = Some(String::from_utf8_lossy(c).into_owned()),
                    (b"source", s) => {
                        sources.insert(s.to_vec());
                        pairs.push((String::from_utf8_lossy(s).into_owned(), raw.id.clone()));
                    }
                    _ => {}
                }
            }
            if let Some(code) = code {
                *result.rejected_codes.entry(code).or_default() += 1;
            }
        }
    }
    result.answered = sources.len() as u64;
    Ok(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdict_latency_is_read_from_the_stream_ids() {
        // (input id, output id): 0, 2, 5 and 40 ms apart.
        let pairs = [
            ("1700000000000-0", "1700000000000-3"),
            ("1700000000001-0", "1700000000003-0"),
            ("1700000000002-0", "1700000000007-1"),
            ("1700000000003-5", "1700000000043-0"),
        ];
        let l = VerdictLatency::from_pairs(pairs.into_iter()).unwrap();
        assert_eq!(
            l,
            VerdictLatency {
                p50_ms: 2,
                p99_ms: 40,
                max_ms: 40
            }
        );
        assert_eq!(VerdictLatency::from_pairs(std::iter::empty()), None);
        // Not stream ids: skipped, not a panic.
        assert_eq!(VerdictLatency::from_pairs([("x", "y")].into_iter()), None);
    }

    #[test]
    fn worker_ports_are_free_and_outside_the_ephemeral_range() {
        let start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
            .unwrap_or(32768);
        for w in 0..4 {
            let port = listener_port(w).unwrap();
            if start > 11_000 {
                assert!((10_000..start).contains(&port), "{port}");
            }
            // Free: it can be bound right now.
            std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
        }
        // A taken port is skipped.
        let port = listener_port(1).unwrap();
        let _held = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
        assert_ne!(listener_port(1).unwrap(), port);
    }

    #[test]
    fn corpus_lines_that_are_not_articles_are_counted_not_lost_silently() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.jsonl");
        std::fs::write(
            &path,
            "{\"id\":\"a\",\"text\":\"hello world\"}\n\nnot json\n{\"id\":\"b\"}\n{\"text\":\"x\",\"title\":\"t\"}\n",
        )
        .unwrap();
        let Articles::Corpus { articles, skipped } = Articles::corpus(&path).unwrap() else {
            panic!("a corpus");
        };
        assert_eq!(articles.len(), 2);
        assert_eq!(articles[1], ("x".into(), Some("t".into())));
        assert_eq!(skipped, 2, "the bad JSON line and the one without text");
        let described = Articles::Corpus { articles, skipped }.describe();
        assert!(
            described.contains("2 unusable lines skipped"),
            "{described}"
        );
        std::fs::write(&path, "not json\n").unwrap();
        assert!(matches!(
            Articles::corpus(&path),
            Err(BenchError::Corpus { .. })
        ));
    }

    fn texts(jsonl: &[u8]) -> Vec<String> {
        jsonl
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| {
                serde_json::from_slice::<serde_json::Value>(l).unwrap()["text"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect()
    }

    #[test]
    fn every_run_sends_the_same_texts_under_its_own_ids() {
        let corpus = Articles::Corpus {
            articles: (0..10).map(|i| (format!("article {i}"), None)).collect(),
            skipped: 0,
        };
        assert_eq!(corpus.per_run(20_000), 10, "the whole corpus");
        assert_eq!(corpus.per_run(3), 3, "fewer asked for than there are");
        assert_eq!(corpus.per_run(0), 1, "never zero");
        let first = corpus.jsonl(7, 3);
        assert_eq!(texts(&first), ["article 0", "article 1", "article 2"]);
        let again = corpus.jsonl(11, 3);
        assert_eq!(texts(&again), texts(&first));
        let again = String::from_utf8(again).unwrap();
        assert!(
            again.contains(&format!("\"{}\"", article_id(11, 0))),
            "{again}"
        );
        assert!(!again.contains("e2e-7-"), "{again}");
        // A corpus smaller than asked for wraps around (per_run avoids that).
        assert_eq!(
            texts(&corpus.jsonl(0, 12))[10..],
            ["article 0", "article 1"]
        );
        let synthetic = Articles::Synthetic(TextGen::new(1));
        assert_eq!(synthetic.per_run(20_000), 20_000);
        let (a, b) = (texts(&synthetic.jsonl(0, 4)), texts(&synthetic.jsonl(1, 4)));
        assert_eq!(a, b);
        assert_eq!(a.iter().collect::<HashSet<_>>().len(), 4, "distinct texts");
    }
}
