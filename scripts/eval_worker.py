#!/usr/bin/env python3
"""Quality through the stream worker: the same scoring as `simdedup eval`, but the
articles go through Redis streams and `simdedup worker` processes.

Starts a private redis-server on a free port (never 6379), produces STREAM into a
namespace, runs WORKERS workers until every entry has its verdict, converts the
output stream to the scorer's format and runs the scorer.

usage: scripts/eval_worker.py STREAM TRUTH [WORKERS] [--index redis|embedded] [-- worker args...]
needs: cargo build --release; python3 with `redis` (pip install redis); ../shared/eval/score.py
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
stream, truth = args[0], args[1]
workers = int(args[2]) if len(args) > 2 else 1
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
binary = os.path.join(root, "target", "release", "simdedup")
scorer = os.path.join(root, "..", "shared", "eval", "score.py")

s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
tmp = tempfile.mkdtemp()
server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                           "--appendonly", "no", "--dir", tmp], stdout=subprocess.DEVNULL)
url = f"redis://127.0.0.1:{port}/"
r = redis.Redis(port=port, decode_responses=True)
for _ in range(100):
    try:
        r.ping(); break
    except redis.ConnectionError:
        time.sleep(0.05)
try:
    n = sum(1 for line in open(stream) if line.strip())
    subprocess.run([binary, "produce", stream, "--redis-url", url, "-n", "eval", "--no-progress"], check=True)
    started = time.time()
    procs = [subprocess.Popen([binary, "worker", "--redis-url", url, "-n", "eval", "--http-addr", "",
                               "--consumer", f"w{i}", "--index", index, *extra],
                              env={**os.environ, "SIMDEDUP_LOG": "warn"}) for i in range(workers)]
    while r.xlen("simdedup:{eval}:out") < n:
        time.sleep(0.05)
    wall = time.time() - started
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait()
    out = os.path.join(tmp, "verdicts.jsonl")
    with open(out, "w") as f:
        for _, fields in r.xrange("simdedup:{eval}:out"):
            f.write(json.dumps({"id": fields.get("id"), "duplicate": fields.get("verdict") == "duplicate",
                                "dup_of": fields.get("dup_of")}) + "\n")
    print(f"workers={workers} index={index} articles={n} wall={wall:.2f}s rate={n / wall:.0f}/s", flush=True)
    subprocess.run([sys.executable, scorer, truth, out], check=True)
finally:
    server.terminate(); server.wait()
