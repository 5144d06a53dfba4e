#!/usr/bin/env python3
"""Fault drills for `simdedup worker`: time to all answered, and quality, under faults.

Each run starts its own redis-server on a free port (never an existing one),
runs worker processes of BINARY at default settings (but for their HTTP ports;
EXTRA_ARGS are passed to every worker), XADDs the first N articles of an
evaluation stream, injects a fault, and waits until every input has its output
and nothing is pending. Then it checks exactly one output per input, counts
`rejected` outputs, and scores the verdicts with the evaluation's score.py.

Drills:
  kill   two workers; when 30 % are answered, one is killed -9 and started
         again (a new process, a new consumer name).
  oom    two workers; when 10 % are answered, Redis `maxmemory` is set under
         what it uses (noeviction) for HOLD seconds, then lifted. /readyz is
         polled meanwhile; reports the time from the lift to done.
  storm  two workers; every 1.5 s for 20 s a random one is killed -9 and
         started again.
  steady two workers, no fault: the baseline of the others, and throughput
         (articles per second from the first XADD to the last output). With
         --data FILE (JSONL with `id` and `text`, e.g. the zh news corpus)
         instead of --eval: no quality score.

Usage:
  scripts/fault_drill.py DRILL --binary target/release/simdedup \
      --eval ../shared/eval/dev-zh --articles 3388 --runs 10 [--hold 15] \
      [--worker-arg=--liveness-ttl-ms --worker-arg=2000] [--keep DIR]
  scripts/fault_drill.py steady --binary target/release/simdedup \
      --data ../shared/data/cctv-news-2022-2025.jsonl --articles 20000 --runs 5
Prints one JSON line per run and a summary line (medians).
"""
import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Redis:
    """A minimal RESP client (no dependency beyond the standard library)."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.buf = b""

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def _reply(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            raise RuntimeError(rest.decode())
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise RuntimeError(f"RESP {line!r}")

    @staticmethod
    def _encode(args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            if not isinstance(a, bytes):
                a = str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        return b"".join(out)

    def cmd(self, *args):
        self.sock.sendall(self._encode(args))
        return self._reply()

    def pipeline(self, commands):
        self.sock.sendall(b"".join(self._encode(c) for c in commands))
        return [self._reply() for _ in commands]


def start_redis(tmp):
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", tmp],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            r = Redis(port)
            r.cmd("PING")
            return proc, port, r
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("redis-server did not start")


class Worker:
    def __init__(self, binary, port, ns, extra, log=None):
        self.http = free_port()
        out = open(log, "a") if log else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            [binary, "worker", "--redis-url", f"redis://127.0.0.1:{port}", "--namespace", ns,
             "--index", "redis", "--http-addr", f"127.0.0.1:{self.http}"] + extra,
            env={**os.environ, "SIMDEDUP_LOG": "warn" if log else "error"},
            stdout=subprocess.DEVNULL, stderr=out)

    def readyz(self):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/readyz", timeout=2) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code
        except OSError:
            return None

    def kill9(self):
        self.proc.kill()
        self.proc.wait()


def wait(cond, limit, what):
    deadline = time.time() + limit
    while not cond():
        if time.time() > deadline:
            raise RuntimeError(f"gave up waiting for {what}")
        time.sleep(0.02)


def outputs(r, ns):
    return r.cmd("XLEN", f"simdedup:{{{ns}}}:out")


def pending(r, ns):
    return r.cmd("XPENDING", f"simdedup:{{{ns}}}:in", "simdedup")[0]


def read_outputs(r, ns):
    out, start = [], "-"
    while True:
        batch = r.cmd("XRANGE", f"simdedup:{{{ns}}}:out", start, "+", "COUNT", 10000)
        if start != "-":
            batch = batch[1:]
        if not batch:
            return out
        for _, fields in batch:
            out.append({fields[i].decode(): fields[i + 1].decode() for i in range(0, len(fields), 2)})
        start = batch[-1][0].decode()


def run_once(args, articles, truth_path, drill, run):
    ns = "drill"
    keep = None
    if args.keep:
        keep = os.path.join(args.keep, f"run{run}")
        os.makedirs(keep, exist_ok=True)
    log = os.path.join(keep, "workers.log") if keep else None
    with tempfile.TemporaryDirectory() as tmp:
        proc, port, r = start_redis(tmp)
        extra = list(args.worker_arg)
        workers = [Worker(args.binary, port, ns, extra, log) for _ in range(2)]
        try:
            wait(lambda: all(w.readyz() == 200 for w in workers), 120, "workers ready")
            n = len(articles)
            key = f"simdedup:{{{ns}}}:in"
            t0 = time.time()
            for i in range(0, n, 500):
                r.pipeline([["XADD", key, "*", "id", a["id"], "text", a["text"]]
                            for a in articles[i:i + 500]])
            result = {"drill": drill}
            if drill == "kill":
                wait(lambda: outputs(r, ns) >= 0.3 * n, 120, "30 %")
                workers[0].kill9()
                workers[0] = Worker(args.binary, port, ns, extra, log)
            elif drill == "oom":
                wait(lambda: outputs(r, ns) >= 0.1 * n, 120, "10 %")
                used = int(next(l for l in r.cmd("INFO", "memory").decode().splitlines()
                                if l.startswith("used_memory:")).split(":")[1])
                r.cmd("CONFIG", "SET", "maxmemory", used - used // 10)
                t_cap = time.time()
                statuses = []
                while time.time() - t_cap < args.hold:
                    statuses.append(tuple(w.readyz() for w in workers))
                    time.sleep(0.5)
                during = outputs(r, ns)
                r.cmd("CONFIG", "SET", "maxmemory", 0)
                t_lift = time.time()
                late = statuses[len(statuses) // 5:]  # after the first few polls
                result.update(answered_during=during,
                              readyz_503_share=round(sum(all(s == 503 for s in st) for st in late)
                                                     / max(1, len(late)), 3))
            elif drill == "storm":
                t_end = time.time() + 20
                kills = 0
                while time.time() < t_end:
                    time.sleep(1.5)
                    i = random.randrange(len(workers))
                    workers[i].kill9()
                    workers[i] = Worker(args.binary, port, ns, extra, log)
                    kills += 1
                result["kills"] = kills
            wait(lambda: outputs(r, ns) >= n and pending(r, ns) == 0, 600, "all answered")
            done = time.time()
            result["seconds"] = round(done - t0, 2)
            result["per_second"] = round(n / (done - t0))
            if drill == "oom":
                result["after_lift_s"] = round(done - t_lift, 2)
            outs = read_outputs(r, ns)
            sources = [o["source"] for o in outs]
            result["outputs"] = len(outs)
            result["exactly_once"] = len(outs) == n and len(set(sources)) == n
            result["rejected"] = sum(o["verdict"] == "rejected" for o in outs)
            with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
                for o in outs:
                    if o["verdict"] in ("unique", "duplicate"):
                        f.write(json.dumps({"id": o["id"], "duplicate": o["verdict"] == "duplicate",
                                            "dup_of": o.get("dup_of")}) + "\n")
                verdicts = f.name
            score = None if truth_path is None else json.loads(subprocess.run(
                [sys.executable, os.path.join(args.eval, "..", "score.py"), truth_path, verdicts],
                capture_output=True, text=True, check=True).stdout)
            if keep:
                os.replace(verdicts, os.path.join(keep, "verdicts.jsonl"))
                with open(os.path.join(keep, "outputs.jsonl"), "w") as f:
                    for o in outs:
                        f.write(json.dumps(o) + "\n")
            else:
                os.unlink(verdicts)
            if score is not None:
                result.update(recall=score["recall"], precision=score["precision"])
            return result
        finally:
            for w in workers:
                w.kill9()
            proc.kill()
            proc.wait()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("drill", choices=["kill", "oom", "storm", "steady"])
    p.add_argument("--binary", default="target/release/simdedup")
    p.add_argument("--eval", default="../shared/eval/dev-zh")
    p.add_argument("--data", help="JSONL articles to feed instead of --eval's stream (no score)")
    p.add_argument("--articles", type=int, default=3388)
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--hold", type=float, default=15.0, help="oom: seconds Redis stays full")
    p.add_argument("--worker-arg", action="append", default=[], help="passed to every worker")
    p.add_argument("--keep", metavar="DIR",
                   help="keep each run's outputs, verdicts and worker log (warnings) in DIR/runN")
    args = p.parse_args()
    source = args.data or os.path.join(args.eval, "stream.jsonl")
    articles = []
    for line in open(source):
        if len(articles) == args.articles:
            break
        a = json.loads(line)
        articles.append({"id": str(a["id"]), "text": a["text"]})
    truth = None
    if not args.data:
        ids = {a["id"] for a in articles}
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            for l in open(os.path.join(args.eval, "truth.jsonl")):
                if json.loads(l)["id"] in ids:
                    f.write(l)
            truth = f.name
    results = []
    for run in range(args.runs):
        res = run_once(args, articles, truth, args.drill, run)
        print(json.dumps(res), flush=True)
        results.append(res)
    summary = {"drill": args.drill, "runs": len(results),
               "median_seconds": statistics.median(r["seconds"] for r in results),
               "max_seconds": max(r["seconds"] for r in results),
               "median_per_second": statistics.median(r["per_second"] for r in results),
               "all_exactly_once": all(r["exactly_once"] for r in results),
               "rejected_total": sum(r["rejected"] for r in results)}
    if truth is not None:
        os.unlink(truth)
        recall = [r["recall"] for r in results]
        precision = [r["precision"] for r in results]
        summary.update(recall_median=statistics.median(recall), recall_min=min(recall),
                       precision_median=statistics.median(precision), precision_min=min(precision),
                       runs_at_099=sum(r["recall"] >= 0.99 and r["precision"] >= 0.99
                                       for r in results))
    if args.drill == "oom":
        summary["median_after_lift_s"] = statistics.median(r["after_lift_s"] for r in results)
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
