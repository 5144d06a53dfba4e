#!/usr/bin/env python3
"""Send three articles to simdedup and print their verdicts.

    pip install redis
    python3 producer.py [REDIS_URL] [NAMESPACE]

REDIS_URL (a node, any node of a Redis Cluster, or redis+sentinel://HOST:PORT/MASTER)
defaults to $REDIS_URL or redis://127.0.0.1:6379/0, NAMESPACE to
"default". A `simdedup worker` must be running on the same Redis and namespace.
Prints one line per article: id, verdict, dup_of (or the rejection code).
"""
import os
import sys
import time

import redis
import redis.cluster

ARTICLES = [
    ("py-1", "The harbour authority said on Monday that the new container terminal will "
             "open in March, doubling the port's capacity. Dredging of the approach channel "
             "finished last week, and the first cranes arrived from the factory in August."),
    # A repost of py-1 in new markup: expected duplicate of py-1.
    ("py-1-repost", "<article><h1>Port news</h1><p>The harbour authority said on Monday that "
                    "the new container terminal will open in March, doubling the port's "
                    "capacity.</p><p>Dredging of the approach channel finished last week, and "
                    "the first cranes arrived from the factory in August.</p></article>"),
    ("py-2", "A local choir of retired teachers won the regional singing contest on Saturday "
             "with a programme of folk songs collected in mountain villages over forty years."),
]


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
    url = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    ns = sys.argv[2] if len(sys.argv) > 2 else "default"
    r = connect(url)
    inp, out = f"simdedup:{{{ns}}}:in", f"simdedup:{{{ns}}}:out"

    # Read verdicts from here on: remember the newest output entry before sending.
    newest = r.xrevrange(out, count=1)
    last = newest[0][0] if newest else "0-0"

    # One XADD per article; the entry id it returns is the `source` of its verdict.
    sources = {}
    for article_id, text in ARTICLES:
        sources[r.xadd(inp, {"id": article_id, "text": text})] = article_id

    verdicts = {}
    deadline = time.monotonic() + 60
    while len(verdicts) < len(sources) and time.monotonic() < deadline:
        for _stream, entries in r.xread({out: last}, count=100, block=1000) or []:
            for entry_id, fields in entries:
                last = entry_id
                if fields.get("source") in sources:
                    verdicts[fields["source"]] = fields
    if len(verdicts) < len(sources):
        print(f"timed out: {len(verdicts)} of {len(sources)} verdicts (is a worker running on namespace {ns}?)",
              file=sys.stderr)
        return 1
    for source in sources:  # in sending order
        v = verdicts[source]
        print(v["id"], v["verdict"], v.get("dup_of") or v.get("code") or "-")
    return 0


if __name__ == "__main__":
    sys.exit(main())
