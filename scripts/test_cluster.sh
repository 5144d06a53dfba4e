#!/usr/bin/env bash
# A throwaway Redis Cluster on loopback for measurements: 3 primaries with one
# replica each, on free ports, no persistence, in a temporary directory.
# Prints the seed URLs (the form `--redis-url` takes) and stays in the
# foreground; Ctrl-C or SIGTERM stops every node and removes the directory.
#
# usage: scripts/test_cluster.sh [BASE_PORT]     (default: a free range from 30000)
# needs: redis-server, redis-cli
set -euo pipefail
base=${1:-}
if [ -z "$base" ]; then
  for try in $(seq 30000 60 32000); do
    free=1
    for p in $(seq "$try" $((try + 5))); do
      if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then free=0; break; fi
    done
    if [ "$free" = 1 ]; then base=$try; break; fi
  done
fi
dir=$(mktemp -d)
pids=()
stop() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"; }
trap stop EXIT INT TERM
nodes=()
for i in 0 1 2 3 4 5; do
  port=$((base + i))
  mkdir -p "$dir/$port"
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir/$port" \
    --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 1000 \
    --maxmemory-policy noeviction --logfile "$dir/$port/log" &
  pids+=($!)
  nodes+=("127.0.0.1:$port")
done
for n in "${nodes[@]}"; do
  until redis-cli -h 127.0.0.1 -p "${n#*:}" ping >/dev/null 2>&1; do sleep 0.1; done
done
redis-cli --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes >/dev/null
until redis-cli -p "$base" cluster info | grep -q cluster_state:ok; do sleep 0.2; done
urls=$(printf 'redis://%s,' "${nodes[@]:0:3}")
echo "${urls%,}"
wait
