#!/usr/bin/env python3
"""Quality through the stream worker: the same scoring as `simdedup eval`, but the
articles go through Redis streams and `simdedup worker` processes.

Starts a private redis-server on a free port (never 6379), produces STREAM into a
namespace, runs WORKERS workers until every entry has its verdict, converts the
output stream to the scorer's format and runs the scorer.

With --redis-url URL it uses that deployment instead (one node, or a Redis
Cluster by any node's URL), in a namespace of its own (`eval-<pid>`), deleted
at the end.

usage: scripts/eval_worker.py STREAM TRUTH [WORKERS] [--index redis|embedded] [--redis-url URL]
                              [-- worker args...]
needs: cargo build --release; python3 with `redis` (pip install redis); ../shared/eval/score.py
(or the scorer named by EVAL_SCORER)
"""
import json, os, socket, subprocess, sys, tempfile, time

import redis

args = sys.argv[1:]
extra = []
if "--" in args:
    extra = args[args.index("--") + 1:]
    args = args[:args.index("--")]
index = "redis"
if "--index" in args:
    index = args[args.index("--index") + 1]
    del args[args.index("--index"):args.index("--index") + 2]
given_url = None
if "--redis-url" in args:
    given_url = args[args.index("--redis-url") + 1]
    del args[args.index("--redis-url"):args.index("--redis-url") + 2]
stream, truth = args[0], args[1]
workers = int(args[2]) if len(args) > 2 else 1
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
binary = os.path.join(root, "target", "release", "simdedup")
scorer = os.environ.get("EVAL_SCORER", os.path.join(root, "..", "shared", "eval", "score.py"))

tmp = tempfile.mkdtemp()
ns = "eval"
server = None
if given_url:
    url, ns = given_url, f"eval-{os.getpid()}"
    first = url.split(",")[0]
    r = redis.Redis.from_url(first, decode_responses=True)
    if r.info("cluster").get("cluster_enabled") == 1:
        r = redis.RedisCluster.from_url(first, decode_responses=True)
else:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no", "--dir", tmp], stdout=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/"
    r = redis.Redis(port=port, decode_responses=True)
out_key = "simdedup:{%s}:out" % ns
for _ in range(100):
    try:
        r.ping(); break
    except redis.ConnectionError:
        time.sleep(0.05)
try:
    n = sum(1 for line in open(stream) if line.strip())
    subprocess.run([binary, "produce", stream, "--redis-url", url, "-n", ns, "--no-progress"], check=True)
    started = time.time()
    procs = [subprocess.Popen([binary, "worker", "--redis-url", url, "-n", ns, "--http-addr", "",
                               "--consumer", f"w{i}", "--index", index, *extra],
                              env={**os.environ, "SIMDEDUP_LOG": "warn"}) for i in range(workers)]
    while r.xlen(out_key) < n:
        time.sleep(0.05)
    wall = time.time() - started
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait()
    out = os.path.join(tmp, "verdicts.jsonl")
    with open(out, "w") as f:
        for _, fields in r.xrange(out_key):
            f.write(json.dumps({"id": fields.get("id"), "duplicate": fields.get("verdict") == "duplicate",
                                "dup_of": fields.get("dup_of")}) + "\n")
    print(f"workers={workers} index={index} articles={n} wall={wall:.2f}s rate={n / wall:.0f}/s", flush=True)
    subprocess.run([sys.executable, scorer, truth, out], check=True)
finally:
    if server:
        server.terminate(); server.wait()
    else:
        # The namespace's keys share its hash tag: one node holds them all.
        for key in r.scan_iter(match="simdedup:{%s}:*" % ns, count=1000):
            r.delete(key)
