#!/usr/bin/env python3
"""Sentinel failover drill: running workers stay correct across a failover.

Each run starts its own primary, replica and three sentinels on free ports
(never an existing server), two workers of BINARY at default settings on the
Sentinel URL, and `simdedup produce --rate RATE` of the first N articles of
DATA through the same URL. Half way through the feed, `SENTINEL FAILOVER`
(or, with --kill, SIGKILL of the primary). Once produce has ended and the new
primary holds an output for every input it kept and nothing is pending, it
checks:

  exactly_once  every input entry on the new primary has one output;
  kept_twice    near-duplicate pairs both kept: pairs `simdedup scan` over
                the surviving inputs calls a duplicate and the workers
                answered `unique` for both (must be 0);
  dangling      `dup_of` ids that name no input on the new primary;
  ready         both workers alive and /readyz 200 at the end.

Writes the primary accepted but did not replicate before the switch are lost
with the old primary (inputs and verdicts alike; `lost` counts the inputs
produce reported added that are gone); with --wait-replicas 1 (given to
produce and the workers) produce sends again what no replica acknowledged
(`sent_twice`: entries of an id the new primary holds twice, each answered,
the second with the stored verdict), at the cost docs/benchmarks.md gives.

Usage:
  scripts/sentinel_drill.py --binary target/release/simdedup \\
      --data ../shared/data/cctv-news-2022-2025.jsonl --articles 2000 --runs 10
Prints one JSON line per run and a summary line; exits 1 if any run kept a
pair twice, answered an entry twice or not at all, or ended with a worker not
ready.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fault_drill  # noqa: E402
from fault_drill import Redis, free_port, read_outputs, wait  # noqa: E402

NS = "drill"
MASTER = "mymaster"


def start(args, log):
    return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)


def connect(port, limit=20):
    deadline = time.time() + limit
    while True:
        try:
            r = Redis(port)
            r.cmd("PING")
            return r
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.05)


def info(r, section):
    text = r.cmd("INFO", section).decode()
    return dict(l.split(":", 1) for l in text.splitlines() if ":" in l)


def usable_sentinels(sentinel):
    """How many sentinels `sentinel` counts on (0 while it finds too few)."""
    try:
        return int(sentinel.cmd("SENTINEL", "CKQUORUM", MASTER).split()[1])
    except RuntimeError:
        return 0


class Topology:
    """A primary, a replica and three sentinels in `tmp`."""

    def __init__(self, tmp, log):
        self.procs = []
        try:
            self._start(tmp, log)
        except BaseException:
            self.stop()
            raise

    def _start(self, tmp, log):
        self.ports = [free_port(), free_port()]
        for i, port in enumerate(self.ports):
            d = os.path.join(tmp, f"node{i}")
            os.makedirs(d)
            extra = ["--replicaof", "127.0.0.1", str(self.ports[0])] if i else []
            self.procs.append(start(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                                     "--save", "", "--appendonly", "no", "--dir", d] + extra, log))
        connect(self.ports[0])
        replica = connect(self.ports[1])
        wait(lambda: info(replica, "replication").get("master_link_status") == "up", 30,
             "the replica in sync")
        self.sentinels = []
        for i in range(3):
            port = free_port()
            conf = os.path.join(tmp, f"sentinel{i}.conf")
            with open(conf, "w") as f:
                f.write(f"port {port}\nbind 127.0.0.1\ndir {tmp}\n"
                        f"sentinel monitor {MASTER} 127.0.0.1 {self.ports[0]} 2\n"
                        f"sentinel down-after-milliseconds {MASTER} 1000\n"
                        f"sentinel failover-timeout {MASTER} 5000\n")
            self.procs.append(start(["redis-server", conf, "--sentinel"], log))
            self.sentinels.append(port)
        s = connect(self.sentinels[0])
        wait(lambda: s.cmd("SENTINEL", "REPLICAS", MASTER) != [], 30, "sentinels see the replica")
        for port in self.sentinels:
            c = connect(port)
            wait(lambda: usable_sentinels(c) >= 3, 30, "three sentinels know each other")

    def url(self):
        seeds = ",".join(f"127.0.0.1:{p}" for p in self.sentinels)
        return f"redis+sentinel://{seeds}/{MASTER}"

    def primary_port(self):
        addr = connect(self.sentinels[0]).cmd("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER)
        return int(addr[1])

    def stop(self):
        for p in self.procs:
            p.kill()
            p.wait()


class Worker(fault_drill.Worker):
    """A worker at default settings on the Sentinel URL (readyz as in fault_drill)."""

    def __init__(self, binary, url, log, wait_replicas):
        self.http = free_port()
        self.proc = subprocess.Popen(
            [binary, "worker", "--redis-url", url, "--namespace", NS, "--index", "redis",
             "--http-addr", f"127.0.0.1:{self.http}", "--wait-replicas", str(wait_replicas)],
            env={**os.environ, "SIMDEDUP_LOG": "warn"}, stdout=subprocess.DEVNULL, stderr=log)


def stream(r, key):
    entries, start = [], "-"
    while True:
        batch = r.cmd("XRANGE", key, start, "+", "COUNT", 10000)
        if start != "-":
            batch = batch[1:]
        if not batch:
            return entries
        for eid, fields in batch:
            entries.append((eid.decode(), {fields[i].decode(): fields[i + 1].decode()
                                           for i in range(0, len(fields), 2)}))
        start = batch[-1][0].decode()


def run_once(args, data_path, n, run, keep):
    with tempfile.TemporaryDirectory() as tmp:
        log = open(os.path.join(keep or tmp, f"run{run}.log"), "w")
        topo = Topology(tmp, log)
        workers = []
        try:
            url = topo.url()
            workers = [Worker(args.binary, url, log, args.wait_replicas) for _ in range(2)]
            wait(lambda: all(w.readyz() == 200 for w in workers), 120, "workers ready")
            old = topo.primary_port()
            produce = subprocess.Popen(
                [args.binary, "produce", data_path, "--redis-url", url, "--namespace", NS,
                 "--rate", str(args.rate), "--no-progress",
                 "--wait-replicas", str(args.wait_replicas)],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            time.sleep(n / args.rate / 2)
            t_fault = time.time()
            if args.kill:
                topo.procs[topo.ports.index(old)].kill()
            else:
                connect(topo.sentinels[0]).cmd("SENTINEL", "FAILOVER", MASTER)
            wait(lambda: topo.primary_port() != old, 60, "a new primary")
            said, _ = produce.communicate(timeout=600)
            r = connect(topo.primary_port())
            inp, out = f"simdedup:{{{NS}}}:in", f"simdedup:{{{NS}}}:out"
            wait(lambda: r.cmd("XLEN", out) >= r.cmd("XLEN", inp)
                 and r.cmd("XPENDING", inp, "simdedup")[0] == 0, 600, "all answered")
            inputs = stream(r, inp)
            outs = read_outputs(r, NS)
            ids = {f["id"] for _, f in inputs}
            sources = [o["source"] for o in outs]
            by_id = {o["id"]: o for o in outs}
            # The surviving inputs, in stream order, judged by `scan`.
            survivors = os.path.join(tmp, "survivors.jsonl")
            with open(survivors, "w") as f:
                for _, fields in inputs:
                    f.write(json.dumps({"id": fields["id"], "text": fields["text"]}) + "\n")
            scan = subprocess.run([args.binary, "scan", survivors], capture_output=True,
                                  text=True, check=True).stdout
            kept_twice = []
            for line in scan.splitlines():
                v = json.loads(line)
                a, b = v.get("dup_of"), v["id"]
                if v.get("verdict") == "duplicate" and a in by_id and b in by_id \
                        and by_id[a]["verdict"] == "unique" and by_id[b]["verdict"] == "unique":
                    kept_twice.append([a, b])
            result = {
                "run": run,
                "fault": "kill" if args.kill else "failover",
                "wait_replicas": args.wait_replicas,
                "inputs_kept": len(inputs),
                "lost": n - len(ids),
                "sent_twice": len(inputs) - len(ids),
                "produce_said": said.strip().splitlines()[-1] if said.strip() else "",
                "exactly_once": len(outs) == len(inputs) and set(sources) == {e for e, _ in inputs},
                "kept_twice": kept_twice,
                "dangling": sorted({o["dup_of"] for o in outs
                                    if o.get("dup_of") and o["dup_of"] not in ids}),
                "ready": all(w.proc.poll() is None and w.readyz() == 200 for w in workers),
                "seconds_after_fault": round(time.time() - t_fault, 1),
            }
            return result
        finally:
            for w in workers:
                w.proc.kill()
                w.proc.wait()
            topo.stop()
            log.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--binary", default="target/release/simdedup")
    p.add_argument("--data", required=True, help="JSONL with id and text")
    p.add_argument("--articles", type=int, default=2000)
    p.add_argument("--rate", type=int, default=400)
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--kill", action="store_true", help="SIGKILL the primary instead")
    p.add_argument("--wait-replicas", type=int, default=0,
                   help="passed to produce (and to the workers): replicas each write waits for")
    p.add_argument("--keep", help="directory for each run's log")
    args = p.parse_args()
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        with open(args.data) as src:
            for i, line in enumerate(src):
                if i == args.articles:
                    break
                f.write(line)
        data_path = f.name
    results = []
    try:
        for run in range(args.runs):
            res = run_once(args, data_path, args.articles, run, args.keep)
            print(json.dumps(res, ensure_ascii=False), flush=True)
            results.append(res)
    finally:
        os.unlink(data_path)
    good = [r for r in results
            if r["exactly_once"] and not r["kept_twice"] and not r["dangling"] and r["ready"]]
    print(json.dumps({"runs": len(results), "good": len(good),
                      "lost_median": sorted(r["lost"] for r in results)[len(results) // 2]}))
    sys.exit(0 if len(good) == len(results) else 1)


if __name__ == "__main__":
    main()
