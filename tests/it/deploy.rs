//! The deployment files (Dockerfile, docker-compose.yml, deploy/**) against the
//! code: every file parses, and the ports, paths, names, metrics, settings and
//! subcommands they use are the ones the code has. Docker and Kubernetes are
//! not run here; what can run locally does: the image's HEALTHCHECK command
//! against a real worker, `simdedup config` on the ConfigMap's TOML and on the
//! systemd environment file.

use crate::support;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_yaml::Value as Yaml;
use simdedup::keys::Keys;
use simdedup::worker::metrics::Metrics;
use simdedup::worker::WorkerConfig;
use support::{free_port, RedisServer};

const BIN: &str = env!("CARGO_BIN_EXE_simdedup");

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

/// Every YAML document of a file, `<<` merge keys applied (as compose does).
fn yaml_docs(rel: &str) -> Vec<Yaml> {
    let text = read(rel);
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| {
            let mut v: Yaml = serde::Deserialize::deserialize(d)
                .unwrap_or_else(|e| panic!("{rel}: bad YAML: {e}"));
            v.apply_merge()
                .unwrap_or_else(|e| panic!("{rel}: bad merge key: {e}"));
            v
        })
        .collect()
}

/// The port of the worker's default HTTP address (`127.0.0.1:9464`).
fn default_port() -> u16 {
    let addr = WorkerConfig::default().http_addr;
    addr.rsplit(':').next().unwrap().parse().unwrap()
}

fn s(v: &Yaml) -> String {
    match v {
        Yaml::String(s) => s.clone(),
        Yaml::Number(n) => n.to_string(),
        Yaml::Bool(b) => b.to_string(),
        other => panic!("not a scalar: {other:?}"),
    }
}

fn strings(v: &Yaml) -> Vec<String> {
    v.as_sequence()
        .unwrap_or_else(|| panic!("not a list: {v:?}"))
        .iter()
        .map(s)
        .collect()
}

/// `simdedup ARGS` with no `SIMDEDUP_*` from the test's environment, plus `env`.
fn simdedup(args: &[&str], env: &[(String, String)]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("SIMDEDUP_") {
            cmd.env_remove(k);
        }
    }
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    cmd.output().expect("run simdedup")
}

/// `simdedup config` with `env` (and optionally a file): the effective settings
/// as `key = value` lines (sections flattened as `section.key`).
fn effective_config(
    config_file: Option<&Path>,
    env: &[(String, String)],
) -> HashMap<String, String> {
    let mut args = vec!["config"];
    let path;
    if let Some(p) = config_file {
        path = p.display().to_string();
        args.extend(["--config", &path]);
    }
    let out = simdedup(&args, env);
    assert!(
        out.status.success(),
        "simdedup config refused it: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut section = String::new();
    let mut map = HashMap::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = format!("{name}.");
        } else if let Some((k, v)) = line.split_once(" = ") {
            map.insert(format!("{section}{k}"), v.trim_matches('"').to_owned());
        }
    }
    map
}

// ---------------------------------------------------------------- Dockerfile

/// Dockerfile instructions with continuation lines joined and comments dropped.
fn dockerfile() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in read("Dockerfile").lines() {
        let t = line.trim();
        if current.is_empty() && (t.is_empty() || t.starts_with('#')) {
            continue;
        }
        if let Some(rest) = t.strip_suffix('\\') {
            current.push_str(rest);
            current.push(' ');
            continue;
        }
        current.push_str(t);
        let (op, args) = current.split_once(' ').unwrap_or((&current, ""));
        out.push((op.to_uppercase(), args.trim().to_owned()));
        current.clear();
    }
    out
}

fn instructions(op: &str) -> Vec<String> {
    dockerfile()
        .into_iter()
        .filter(|(o, _)| o == op)
        .map(|(_, a)| a)
        .collect()
}

/// The HEALTHCHECK's `CMD [...]` as an argv.
fn healthcheck_argv() -> Vec<String> {
    let hc = instructions("HEALTHCHECK");
    assert_eq!(hc.len(), 1, "one HEALTHCHECK");
    let json = &hc[0][hc[0].find("CMD ").expect("HEALTHCHECK ... CMD [...]") + 4..];
    serde_json::from_str(json).expect("HEALTHCHECK CMD is a JSON array")
}

#[test]
fn dockerfile_matches_the_code() {
    let port = default_port();
    let from = instructions("FROM");
    assert_eq!(from.len(), 2, "multi-stage: build and runtime: {from:?}");
    assert!(from[0].contains("bookworm") && from[0].starts_with("rust:"));
    // The runtime's glibc must be the builder's (same Debian release).
    assert!(from[1].starts_with("debian:bookworm-slim"), "{from:?}");

    assert_eq!(instructions("EXPOSE"), vec![port.to_string()]);
    let env = instructions("ENV");
    assert!(
        env.contains(&format!("SIMDEDUP_WORKER__HTTP_ADDR=0.0.0.0:{port}")),
        "the listener must leave 127.0.0.1 in a container: {env:?}"
    );
    let user = instructions("USER");
    assert_eq!(user.len(), 1);
    assert!(
        !user[0].starts_with("root") && !user[0].starts_with("0"),
        "{user:?}"
    );

    let bin = Path::new(BIN).file_name().unwrap().to_str().unwrap();
    assert_eq!(bin, env!("CARGO_PKG_NAME"));
    let runs = instructions("RUN").join("\n");
    // The image ships the link-time-optimized build (Cargo.toml's `dist` profile).
    assert!(runs.contains(&format!("cargo build --profile dist --locked --bin {bin}")));
    assert!(runs.contains(&format!("target/dist/{bin} /usr/local/bin/{bin}")));
    assert_eq!(
        instructions("ENTRYPOINT"),
        vec![format!("[\"/usr/local/bin/{bin}\"]")]
    );
    let cmd: Vec<String> = serde_json::from_str(&instructions("CMD")[0]).unwrap();
    assert_eq!(cmd, ["worker"]);

    // The dependency layer stubs every target the manifest names explicitly.
    let manifest = read("Cargo.toml");
    for bench in manifest.split("[[bench]]").skip(1) {
        let name = bench
            .lines()
            .find_map(|l| l.trim().strip_prefix("name = "))
            .unwrap()
            .trim_matches('"');
        assert!(
            runs.contains(&format!("benches/{name}.rs")),
            "stub bench {name}"
        );
    }

    // Every COPY from the context exists and is not excluded by .dockerignore.
    let ignored: Vec<String> = read(".dockerignore")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.trim_end_matches('/').to_owned())
        .collect();
    for copy in instructions("COPY") {
        if copy.starts_with("--from") {
            continue;
        }
        let parts: Vec<&str> = copy.split_whitespace().collect();
        for src in &parts[..parts.len() - 1] {
            assert!(
                repo().join(src).exists(),
                "COPY {src}: not in the repository"
            );
            assert!(
                !ignored
                    .iter()
                    .any(|i| src == i || src.starts_with(&format!("{i}/"))),
                "COPY {src}: excluded by .dockerignore"
            );
        }
    }

    let argv = healthcheck_argv();
    assert_eq!(argv[0], "bash");
    assert!(argv[2].contains(&format!("/dev/tcp/127.0.0.1/{port}")));
    assert!(argv[2].contains("GET /healthz "));
}

fn healthcheck_passes(port: u16) -> bool {
    let argv = healthcheck_argv();
    let script = argv[2].replace(
        &format!("/dev/tcp/127.0.0.1/{}", default_port()),
        &format!("/dev/tcp/127.0.0.1/{port}"),
    );
    Command::new(&argv[0])
        .args([&argv[1], &script])
        .stderr(Stdio::null())
        .status()
        .expect("run bash")
        .success()
}

/// The HEALTHCHECK command itself (bash and /dev/tcp, no curl) against a real
/// worker: passes while it runs, fails once it stopped.
#[test]
fn image_healthcheck_command_probes_a_real_worker() {
    let server = RedisServer::start();
    let port = free_port();
    let mut worker = support::KillOnDrop(
        Command::new(BIN)
            .args(["worker", "--redis-url", &server.url(), "--namespace", "hc"])
            .args([
                "--http-addr",
                &format!("127.0.0.1:{port}"),
                "--block-ms",
                "200",
            ])
            .env_remove("SIMDEDUP_CONFIG")
            .env("SIMDEDUP_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn worker"),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while !healthcheck_passes(port) {
        assert!(
            worker.try_wait().unwrap().is_none(),
            "worker exited before serving /healthz"
        );
        assert!(Instant::now() < deadline, "healthcheck never passed");
        std::thread::sleep(Duration::from_millis(100));
    }
    let ok = Command::new("kill")
        .args(["-TERM", &worker.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    assert!(
        worker.wait().unwrap().success(),
        "worker exits 0 on SIGTERM"
    );
    assert!(
        !healthcheck_passes(port),
        "healthcheck passes with no worker"
    );
}

// ------------------------------------------------------------ docker-compose

#[test]
fn compose_file_matches_the_code() {
    let port = default_port();
    let docs = yaml_docs("docker-compose.yml");
    assert_eq!(docs.len(), 1);
    let compose = &docs[0];
    let services = &compose["services"];
    let service = |name: &str| -> &Yaml {
        let s = &services[name];
        assert!(!s.is_null(), "service {name}");
        s
    };
    let env_of = |name: &str| -> Vec<(String, String)> {
        service(name)["environment"]
            .as_mapping()
            .unwrap_or_else(|| panic!("{name}: environment"))
            .iter()
            .map(|(k, v)| (s(k), s(v)))
            .collect()
    };

    // Redis: AOF on, noeviction, a memory cap.
    let redis_cmd = strings(&service("redis")["command"]).join(" ");
    for flag in [
        "--appendonly yes",
        "--maxmemory-policy noeviction",
        "--maxmemory ",
    ] {
        assert!(redis_cmd.contains(flag), "redis {flag}: {redis_cmd}");
    }
    assert!(s(&service("redis")["image"]).starts_with("redis:7"));

    // Workers: the image built here, three replicas, the real subcommand and port.
    let worker = service("worker");
    assert_eq!(s(&worker["build"]), ".");
    assert_eq!(s(&worker["image"]), "simdedup:latest");
    assert_eq!(worker["deploy"]["replicas"].as_u64(), Some(3));
    assert_eq!(strings(&worker["command"]), ["worker"]);
    assert_eq!(strings(&worker["expose"]), [port.to_string()]);
    let worker_env = env_of("worker");
    let settings = effective_config(None, &worker_env);
    assert_eq!(settings["worker.http_addr"], format!("0.0.0.0:{port}"));
    let ns = settings["namespace"].clone();
    assert_eq!(ns, "demo");
    // The stop grace covers the shutdown bound and one blocked read.
    let grace: u64 = s(&worker["stop_grace_period"])
        .trim_end_matches('s')
        .parse()
        .unwrap();
    let bound: u64 = settings["worker.shutdown_timeout_ms"]
        .parse::<u64>()
        .unwrap()
        + settings["worker.block_ms"].parse::<u64>().unwrap();
    assert!(
        grace * 1000 > bound,
        "stop_grace_period {grace}s ≤ {bound} ms"
    );

    // The producer runs `simdedup produce` on the sample the Dockerfile copies,
    // with the compose file's environment.
    let producer = service("producer");
    assert_eq!(s(&producer["image"]), "simdedup:latest");
    assert_eq!(strings(&producer["entrypoint"]), ["sh", "-c"]);
    let produce_script = strings(&producer["command"]).join("\n").replace("$$", "$");
    let copied = instructions("COPY")
        .into_iter()
        .find(|c| c.starts_with("examples/articles.jsonl "))
        .expect("Dockerfile copies the sample");
    let image_sample = copied.split_whitespace().nth(1).unwrap().to_owned();
    assert!(produce_script.contains(&image_sample), "{produce_script}");
    assert!(
        produce_script.contains(&format!("simdedup produce {image_sample}")),
        "{produce_script}"
    );
    assert_eq!(producer["healthcheck"]["disable"].as_bool(), Some(true));
    let producer_env = env_of("producer");
    let producer_settings = effective_config(None, &producer_env);
    assert_eq!(producer_settings["namespace"], ns);
    assert_eq!(producer_settings["redis_url"], settings["redis_url"]);
    assert!(settings["redis_url"].starts_with("redis://redis:"));

    // The reader waits for as many verdicts as the sample has JSON articles,
    // on the namespace's output stream.
    // Compose interpolates `$VAR` and turns `$$` into `$` before the shell sees it.
    let reader_script = strings(&service("verdicts")["command"])
        .join("\n")
        .replace("$$", "$");
    let out_stream = Keys::new(&ns).output_stream();
    assert!(
        reader_script.contains(&format!("XLEN '{out_stream}'")),
        "{reader_script}"
    );
    let articles = simdedup::demo::SAMPLE
        .lines()
        .filter(|l| simdedup::worker::tools::line_fields(l.as_bytes()).is_some())
        .count();
    assert!(
        reader_script.contains(&format!("-ge {articles} ]")),
        "{reader_script}"
    );

    // Run the producer and reader scripts as compose would, minus Docker: a
    // private Redis for `redis`, the built binary on PATH, the repository's
    // sample for the image's, and a worker with the compose environment.
    let server = RedisServer::start();
    let url = server.url();
    let local_env = |env: &[(String, String)]| -> Vec<(String, String)> {
        env.iter()
            .map(|(k, v)| {
                let v = if k == "SIMDEDUP_REDIS_URL" {
                    url.clone()
                } else {
                    v.clone()
                };
                (k.clone(), v)
            })
            .collect()
    };
    let bin_dir = Path::new(BIN).parent().unwrap().display().to_string();
    let path = format!("{bin_dir}:{}", std::env::var("PATH").unwrap_or_default());
    let sample = repo().join("examples/articles.jsonl").display().to_string();
    let produced = Command::new("sh")
        .args(["-c", &produce_script.replace(&image_sample, &sample)])
        .env("PATH", &path)
        .envs(local_env(&producer_env))
        .output()
        .unwrap();
    assert!(
        produced.status.success(),
        "producer: {}",
        String::from_utf8_lossy(&produced.stderr)
    );
    let mut conn = server.connection();
    let input_len: usize = redis::cmd("XLEN")
        .arg(Keys::new(&ns).input_stream())
        .query(&mut conn)
        .unwrap();
    assert_eq!(input_len, articles);
    let http_port = free_port();
    let mut worker_env = local_env(&worker_env);
    worker_env.retain(|(k, _)| k != "SIMDEDUP_WORKER__HTTP_ADDR");
    worker_env.push((
        "SIMDEDUP_WORKER__HTTP_ADDR".into(),
        format!("127.0.0.1:{http_port}"),
    ));
    let mut worker = support::KillOnDrop(
        Command::new(BIN)
            .args(strings(&service("worker")["command"]))
            .env_remove("SIMDEDUP_CONFIG")
            .envs(worker_env)
            .env("SIMDEDUP_LOG", "warn")
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let reader = Command::new("timeout")
        .args([
            "120",
            "sh",
            "-c",
            &reader_script.replace("-h redis", &format!("-h 127.0.0.1 -p {}", server.port)),
        ])
        .output()
        .unwrap();
    let _ = worker.kill();
    let _ = worker.wait();
    let printed = String::from_utf8_lossy(&reader.stdout);
    assert!(reader.status.success(), "{printed}");
    // Every article answered, the empty one rejected, copies found. (One
    // worker decides a batch concurrently, so which copy of a cluster is kept
    // may vary: count, do not name.)
    let lines: Vec<&str> = printed.lines().collect();
    let after = |field: &str| -> Vec<&str> {
        lines
            .windows(2)
            .filter(|w| w[0] == field)
            .map(|w| w[1])
            .collect()
    };
    let ids = after("id");
    for v in simdedup::demo::SAMPLE
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
    {
        let id = v["id"].as_str().unwrap();
        assert!(ids.contains(&id), "{id} not answered:\n{printed}");
    }
    let verdicts = after("verdict");
    assert_eq!(verdicts.len(), articles, "{printed}");
    assert_eq!(verdicts.iter().filter(|v| **v == "rejected").count(), 1);
    let dups = verdicts.iter().filter(|v| **v == "duplicate").count();
    assert!(
        dups >= 3,
        "the sample's copies were found: {dups}\n{printed}"
    );

    // Prometheus (optional profile) scrapes the workers' port.
    let prom = service("prometheus");
    let mount = strings(&prom["volumes"])[0].clone();
    let host_path = mount.split(':').next().unwrap().trim_start_matches("./");
    let prom_cfg = &yaml_docs(host_path)[0];
    let sd = &prom_cfg["scrape_configs"][0]["dns_sd_configs"][0];
    assert_eq!(sd["port"].as_u64(), Some(port as u64));
    assert_eq!(strings(&sd["names"]), ["worker"]);
    assert_eq!(
        s(&prom_cfg["scrape_configs"][0]["metrics_path"]),
        "/metrics"
    );
}

// ---------------------------------------------------------------- Kubernetes

fn k8s_objects() -> Vec<(String, Yaml)> {
    let dir = repo().join("deploy/kubernetes");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    assert!(files.len() >= 6, "{files:?}");
    let mut out = Vec::new();
    for f in files {
        let rel = f.strip_prefix(repo()).unwrap().display().to_string();
        for doc in yaml_docs(&rel) {
            assert!(doc["kind"].is_string(), "{rel}: a document without kind");
            out.push((rel.clone(), doc));
        }
    }
    out
}

fn object<'a>(objects: &'a [(String, Yaml)], kind: &str) -> &'a Yaml {
    let found: Vec<_> = objects.iter().filter(|(_, o)| o["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "one {kind}");
    &found[0].1
}

#[test]
fn kubernetes_manifests_match_the_code() {
    let port = default_port();
    let objects = k8s_objects();

    // The ConfigMap's TOML is accepted by the real loader.
    let cm = object(&objects, "ConfigMap");
    let toml = s(&cm["data"]["simdedup.toml"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("simdedup.toml");
    std::fs::write(&file, &toml).unwrap();
    let settings = effective_config(Some(&file), &[]);
    assert_eq!(settings["worker.http_addr"], format!("0.0.0.0:{port}"));
    let ns = settings["namespace"].clone();
    let group = settings["worker.group"].clone();
    assert_eq!(group, WorkerConfig::default().group);

    // The Deployment: image, args, probes on the real port and paths, grace.
    let dep = object(&objects, "Deployment");
    let pod = &dep["spec"]["template"]["spec"];
    let containers = pod["containers"].as_sequence().unwrap();
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    assert_eq!(
        s(&c["image"]),
        format!("{}:{}", env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION"))
    );
    let args = strings(&c["args"]);
    assert_eq!(args[0], "worker");
    let help = String::from_utf8(simdedup(&["worker", "--help"], &[]).stdout).unwrap();
    assert!(help.contains("--config <FILE>"));
    assert_eq!(args[1], "--config");
    let mount = s(&c["volumeMounts"][0]["mountPath"]);
    assert_eq!(args[2], format!("{mount}/simdedup.toml"));
    assert_eq!(
        s(&pod["volumes"][0]["configMap"]["name"]),
        s(&cm["metadata"]["name"])
    );
    let ports = c["ports"].as_sequence().unwrap();
    assert_eq!(ports[0]["containerPort"].as_u64(), Some(port as u64));
    let port_name = s(&ports[0]["name"]);
    assert_eq!(s(&c["livenessProbe"]["httpGet"]["path"]), "/healthz");
    assert_eq!(s(&c["readinessProbe"]["httpGet"]["path"]), "/readyz");
    for probe in ["livenessProbe", "readinessProbe"] {
        assert_eq!(s(&c[probe]["httpGet"]["port"]), port_name);
    }
    let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap();
    let bound = settings["worker.shutdown_timeout_ms"]
        .parse::<u64>()
        .unwrap()
        + settings["worker.block_ms"].parse::<u64>().unwrap();
    assert!(
        grace * 1000 > bound,
        "grace {grace}s ≤ shutdown bound {bound} ms"
    );
    assert_eq!(
        pod["securityContext"]["runAsUser"].as_u64(),
        instructions("USER")[0]
            .split(':')
            .next()
            .unwrap()
            .parse()
            .ok(),
        "runAsUser is the image's user"
    );
    // The Redis URL comes from the Secret, under the variable the settings read.
    let env = c["env"].as_sequence().unwrap();
    let url_env = env
        .iter()
        .find(|e| e["name"] == "SIMDEDUP_REDIS_URL")
        .expect("SIMDEDUP_REDIS_URL");
    let secret_ref = &url_env["valueFrom"]["secretKeyRef"];
    let probe = effective_config(
        None,
        &[("SIMDEDUP_REDIS_URL".into(), "redis://u:pw@h:6379/0".into())],
    );
    assert_eq!(probe["redis_url"], "redis://u:***@h:6379/0");
    let secret_docs = yaml_docs("deploy/kubernetes/secret.example.yaml");
    let secret = &secret_docs[0];
    assert_eq!(s(&secret["metadata"]["name"]), s(&secret_ref["name"]));
    assert!(secret["stringData"][s(&secret_ref["key"]).as_str()].is_string());
    let labels = &dep["spec"]["template"]["metadata"]["labels"];
    assert_eq!(&dep["spec"]["selector"]["matchLabels"], labels);

    // The metrics Service and the PDB select the workers.
    let svc = object(&objects, "Service");
    assert_eq!(&svc["spec"]["selector"], labels);
    assert_eq!(svc["spec"]["ports"][0]["port"].as_u64(), Some(port as u64));
    assert_eq!(s(&svc["spec"]["ports"][0]["targetPort"]), port_name);
    let pdb = object(&objects, "PodDisruptionBudget");
    assert_eq!(&pdb["spec"]["selector"]["matchLabels"], labels);

    // KEDA: the namespace's input stream and the real group, on this Deployment.
    let so = object(&objects, "ScaledObject");
    assert_eq!(
        s(&so["spec"]["scaleTargetRef"]["name"]),
        s(&dep["metadata"]["name"])
    );
    let auth = object(&objects, "TriggerAuthentication");
    let mut kinds = BTreeSet::new();
    for t in so["spec"]["triggers"].as_sequence().unwrap() {
        assert_eq!(s(&t["type"]), "redis-streams");
        let m = &t["metadata"];
        assert_eq!(s(&m["stream"]), Keys::new(&ns).input_stream());
        assert_eq!(s(&m["consumerGroup"]), group);
        assert!(s(&m["address"]).contains(':'), "host:port");
        for k in ["pendingEntriesCount", "lagCount"] {
            if !m[k].is_null() {
                kinds.insert(k);
                s(&m[k]).parse::<u64>().unwrap();
            }
        }
        assert_eq!(
            s(&t["authenticationRef"]["name"]),
            s(&auth["metadata"]["name"])
        );
    }
    assert!(
        kinds.contains("pendingEntriesCount"),
        "scales on pending entries"
    );
    for r in auth["spec"]["secretTargetRef"].as_sequence().unwrap() {
        assert_eq!(s(&r["name"]), s(&secret["metadata"]["name"]));
        assert!(secret["stringData"][s(&r["key"]).as_str()].is_string());
    }

    // kustomization.yaml lists files that exist, and every manifest but the
    // example Secret.
    let kust = &yaml_docs("deploy/kubernetes/kustomization.yaml")[0];
    let resources = strings(&kust["resources"]);
    for r in &resources {
        assert!(repo().join("deploy/kubernetes").join(r).is_file(), "{r}");
    }
    let listed: BTreeSet<&str> = resources.iter().map(String::as_str).collect();
    for (file, _) in &objects {
        let name = file.rsplit('/').next().unwrap();
        if name != "kustomization.yaml" && name != "secret.example.yaml" {
            assert!(listed.contains(name), "{name} not in kustomization.yaml");
        }
    }
}

// ------------------------------------------------------------------- systemd

#[test]
fn systemd_unit_matches_the_code() {
    let unit = read("deploy/systemd/simdedup-worker.service");
    let key = |k: &str| -> String {
        unit.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("{k}= in the unit"))
            .to_owned()
    };
    for section in ["[Unit]", "[Service]", "[Install]"] {
        assert!(unit.contains(section));
    }
    let exec = key("ExecStart");
    let argv: Vec<&str> = exec.split_whitespace().collect();
    assert!(argv[0].ends_with(&format!("/{}", env!("CARGO_PKG_NAME"))));
    assert_eq!(&argv[1..], ["worker"]);
    // The example environment file is what the unit reads, and the settings
    // loader accepts every variable in it.
    assert_eq!(key("EnvironmentFile"), "/etc/simdedup/simdedup.env");
    let env: Vec<(String, String)> = read("deploy/systemd/simdedup.env.example")
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (k, v) = l.split_once('=').unwrap();
            (k.to_owned(), v.to_owned())
        })
        .collect();
    assert!(env.iter().any(|(k, _)| k == "SIMDEDUP_REDIS_URL"));
    let settings = effective_config(None, &env);
    assert_eq!(settings["namespace"], "news");
    assert!(
        !settings["redis_url"].contains("CHANGE-ME"),
        "password redacted"
    );
    let stop: u64 = key("TimeoutStopSec").parse().unwrap();
    let bound = settings["worker.shutdown_timeout_ms"]
        .parse::<u64>()
        .unwrap()
        + settings["worker.block_ms"].parse::<u64>().unwrap();
    assert!(stop * 1000 > bound, "TimeoutStopSec {stop} ≤ {bound} ms");
}

// ------------------------------------------------------------------- Grafana

#[test]
fn grafana_dashboard_uses_only_real_metrics() {
    let dash: serde_json::Value =
        serde_json::from_str(&read("deploy/grafana/simdedup-dashboard.json")).unwrap();
    // Every series a worker exposes (a labelled family once it has a series):
    // in OpenMetrics a counter family's samples end in _total, a histogram's in
    // _bucket/_sum/_count.
    let metrics = Metrics::default();
    metrics.article("duplicate", Some("simhash"));
    metrics.rejected("malformed_json");
    let exposition = metrics.render();
    let mut real = BTreeSet::new();
    for line in exposition.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            let suffixes: &[&str] = match kind {
                "counter" => &["_total"],
                "histogram" => &["", "_bucket", "_sum", "_count"],
                _ => &[""],
            };
            for suffix in suffixes {
                real.insert(format!("{name}{suffix}"));
            }
        }
    }
    let labels = ["verdict", "signal", "reason", "le"];
    let mut used = BTreeSet::new();
    let panels = dash["panels"].as_array().unwrap();
    assert!(!panels.is_empty());
    for p in panels {
        for t in p["targets"].as_array().unwrap() {
            let expr = t["expr"].as_str().unwrap();
            let mut rest = expr;
            while let Some(i) = rest.find("simdedup_") {
                let name: String = rest[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                assert!(real.contains(&name), "{name} is not a metric: {expr}");
                used.insert(name.clone());
                rest = &rest[i + name.len()..];
            }
            if let Some(i) = expr.find("by (") {
                let inner = &expr[i + 4..i + 4 + expr[i + 4..].find(')').unwrap()];
                for l in inner.split(',') {
                    assert!(labels.contains(&l.trim()), "label {l}: {expr}");
                }
            }
        }
    }
    // The headline metrics are on it.
    for m in [
        "simdedup_articles_total",
        "simdedup_lag",
        "simdedup_pending",
    ] {
        assert!(used.contains(m), "{m} missing from the dashboard");
    }
}
