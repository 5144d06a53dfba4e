#!/usr/bin/env python3
"""Read simdedup's verdicts as one downstream service, each exactly once.

    pip install redis
    python3 reader.py [REDIS_URL] [NAMESPACE] [GROUP] [CONSUMER] [ARTICLES.jsonl]

REDIS_URL (a node, any node of a Redis Cluster, or redis+sentinel://HOST:PORT/MASTER)
defaults to $REDIS_URL or redis://127.0.0.1:6379/0, NAMESPACE to
"default", GROUP to "reader", CONSUMER to "reader-1". ARTICLES.jsonl is what the
producer sent, one {"id", "text", ["title"]} object a line: each verdict is joined
to its article by `id`.

The pattern (docs/protocol.md, "Reading verdicts"):
- The service reads simdedup:{NS}:out with a consumer group of its own, so that
  every other service with its own group reads every verdict too.
- It handles a batch, then acknowledges it. Here handling means appending one
  JSON record per verdict to the list reader:{NS}:GROUP, in the same MULTI/EXEC
  as the XACK: the record and the acknowledgement happen together or not at
  all, so a reader killed at any moment and restarted handles every verdict
  exactly once. A service whose effect lives elsewhere makes it idempotent on
  the verdict's `source` instead (an upsert keyed by it), then acknowledges.
- On start it first re-reads its own pending entries (delivered before a
  crash, never acknowledged), then new ones.
Runs until killed; prints what it handled, one line per verdict.
"""
import json
import os
import sys

import redis
import redis.cluster

CONTRACT_VERSION = "1"


def connect(url):
    """A client for REDIS_URL: one node, any node of a Redis Cluster (found by
    asking it; every command then goes to the node that owns its key, following
    MOVED), or, for redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/MASTER[/DB],
    the primary the sentinels name (asked again after a failover)."""
    if url.startswith(("redis+sentinel://", "rediss+sentinel://")):
        from urllib.parse import unquote, urlsplit

        from redis.sentinel import Sentinel

        u = urlsplit(url.replace("+sentinel", "", 1))
        creds, _, hosts = u.netloc.rpartition("@")
        user, _, password = creds.partition(":")
        sentinels = []
        for h in hosts.split(","):
            host, _, port = h.rpartition(":") if ":" in h else (h, "", "26379")
            sentinels.append((host, int(port)))
        path = [p for p in u.path.split("/") if p]
        sentinel = Sentinel(sentinels, username=unquote(user) or None, password=unquote(password) or None,
                            db=int(path[1]) if len(path) > 1 else 0, ssl=u.scheme == "rediss",
                            decode_responses=True)
        return sentinel.master_for(path[0])
    first = url.split(",")[0]
    r = redis.Redis.from_url(first, decode_responses=True)
    if r.info("cluster").get("cluster_enabled"):
        return redis.cluster.RedisCluster.from_url(first, decode_responses=True)
    return r


def main() -> int:
    args = sys.argv[1:] + [None] * 5
    url = args[0] or os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    ns, group, consumer, articles_path = args[1] or "default", args[2] or "reader", args[3] or "reader-1", args[4]
    r = connect(url)
    out = f"simdedup:{{{ns}}}:out"
    # Same hash tag as the output stream: one Redis Cluster node holds both, so
    # one transaction may write the record and acknowledge the verdict.
    handled = f"reader:{{{ns}}}:{group}"

    # What this service produced, by article id.
    articles = {}
    if articles_path:
        with open(articles_path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    a = json.loads(line)
                    articles[a["id"]] = a

    try:
        # From the start of the retained verdicts ("$" would take only new ones).
        r.xgroup_create(out, group, id="0", mkstream=True)
    except redis.ResponseError as e:
        if "BUSYGROUP" not in str(e):
            raise

    # First this consumer's pending entries (delivered, never acknowledged),
    # page after page from "0"; once none are left, new entries (">").
    cursor = "0"
    while True:
        reply = r.xreadgroup(group, consumer, {out: cursor}, count=100, block=None if cursor != ">" else 2000)
        entries = reply[0][1] if reply else []
        if cursor != ">":
            if not entries:
                cursor = ">"
                continue
            cursor = entries[-1][0]
        records = [json.dumps(handle(entry_id, fields, articles)) for entry_id, fields in entries]
        if records:
            # Handled and acknowledged in one transaction.
            tx = r.pipeline(transaction=True)
            tx.rpush(handled, *records)
            tx.xack(out, group, *[entry_id for entry_id, _ in entries])
            tx.execute()
        for record in records:
            print(record, flush=True)


def handle(entry_id, fields, articles):
    """The service's own record of one verdict, joined to the article it produced."""
    if not fields:
        # Pending, but trimmed from the stream (output_maxlen) before it was
        # handled: the verdict is lost to this reader.
        return {"entry": entry_id, "lost": "trimmed before it was handled"}
    if fields.get("v") != CONTRACT_VERSION:
        return {"entry": entry_id, "unread": f"contract version {fields.get('v')}"}
    record = {
        "entry": entry_id,
        "source": fields["source"],
        "id": fields.get("id"),
        "verdict": fields["verdict"],
    }
    if "dup_of" in fields:
        record["dup_of"] = fields["dup_of"]
    if "code" in fields:
        record["code"] = fields["code"]
    article = articles.get(fields.get("id"))
    if article is not None:
        record["title"] = article.get("title")
    return record


if __name__ == "__main__":
    sys.exit(main())
