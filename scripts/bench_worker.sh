#!/bin/bash
# End-to-end worker throughput: a private redis-server on a free port (never 6379),
# the zh corpus produced into namespace `bench`, WORKERS workers, time until every
# input has its output. EXTRA="--index embedded" for the in-process index.
# Needs `cargo build --release` first.
# usage: bench_worker.sh WORKERS
set -e
W=${1:-2}
BIN=$(dirname "$0")/../target/release/simdedup
DATA=$(dirname "$0")/../../shared/data/cctv-news-2022-2025.jsonl
PORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
DIR=$(mktemp -d)
redis-server --port $PORT --bind 127.0.0.1 --save "" --appendonly no --dir $DIR >/dev/null &
RPID=$!
sleep 0.5
URL=redis://127.0.0.1:$PORT/
N=$(grep -c . $DATA)
$BIN produce $DATA --redis-url $URL -n bench --no-progress
START=$(date +%s.%N)
PIDS=""
for i in $(seq 1 $W); do
  SIMDEDUP_LOG=warn $BIN worker --redis-url $URL -n bench --http-addr "" --consumer w$i --batch-size 256 --max-in-flight 2048 $EXTRA &
  PIDS="$PIDS $!"
done
while [ "$(redis-cli -p $PORT XLEN 'simdedup:{bench}:out')" -lt "$N" ]; do sleep 0.05; done
END=$(date +%s.%N)
for p in $PIDS; do kill -TERM $p; done
wait $PIDS 2>/dev/null || true
python3 -c "print(f'workers=$W articles=$N wall={$END-$START:.2f}s rate={$N/($END-$START):.0f}/s')"
redis-cli -p $PORT XINFO GROUPS 'simdedup:{bench}:in' | paste - - | grep -E "pending|lag" | tr '\n' ' '; echo
redis-cli -p $PORT --raw XRANGE 'simdedup:{bench}:out' - + | grep -A1 -x verdict | grep -v -- -- | grep -vx verdict | sort | uniq -c
redis-cli -p $PORT INFO cpu | grep -E "used_cpu_(sys|user):"; redis-cli -p $PORT INFO commandstats | grep -E "evalsha|xreadgroup|hget|smembers" | cut -c1-110
kill $RPID; rm -rf $DIR
