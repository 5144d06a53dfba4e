#!/bin/sh
# Send three articles to simdedup with plain redis-cli and print their verdicts.
#
#   ./producer.sh [REDIS_URL] [NAMESPACE]
#
# REDIS_URL defaults to $REDIS_URL or redis://127.0.0.1:6379/0 (redis-cli -u
# accepts redis://[user:password@]host:port/db; any node of a Redis Cluster
# does, redis-cli -c following MOVED to the node that owns the namespace; or
# redis+sentinel://HOST:PORT[,HOST:PORT...]/MASTER, whose primary the first
# sentinel that answers names), NAMESPACE to "default". A `simdedup worker`
# must be running on the same Redis and namespace. Prints one line per
# article: id, verdict, dup_of (or the rejection code). A Redis error stops
# it with the error.
set -eu
URL=${1:-${REDIS_URL:-redis://127.0.0.1:6379/0}}
NS=${2:-default}
IN="simdedup:{$NS}:in"
OUT="simdedup:{$NS}:out"

case "$URL" in
redis+sentinel://*)
  REST=${URL#redis+sentinel://}
  HOSTS=${REST%%/*}
  MASTER=${REST#*/}
  MASTER=${MASTER%%/*}
  URL=
  for h in $(printf '%s' "$HOSTS" | tr ',' ' '); do
    case "$h" in *:*) ;; *) h="$h:26379" ;; esac
    ADDR=$(redis-cli -h "${h%:*}" -p "${h##*:}" --raw SENTINEL GET-MASTER-ADDR-BY-NAME "$MASTER" 2>/dev/null) || continue
    set -- $ADDR
    [ $# -eq 2 ] && URL="redis://$1:$2/0" && break
  done
  [ -n "$URL" ] || { echo "no sentinel of $HOSTS names a primary for $MASTER" >&2; exit 1; }
  ;;
esac

# One command; a Redis error reply (redis-cli prints it and still exits 0
# under --raw) stops the script with it.
rc() {
  cmd=$1
  [ "$cmd" = --raw ] && cmd=$2
  reply=$(redis-cli --no-auth-warning -c -u "$URL" "$@") || { echo "redis-cli $cmd failed: $reply" >&2; exit 1; }
  case "$reply" in
  ERR*|WRONGTYPE*|NOAUTH*|NOPERM*|READONLY*|MOVED*|ASK*|CLUSTERDOWN*|OOM*|LOADING*|MASTERDOWN*|"(error)"*)
    echo "redis-cli $cmd: $reply" >&2
    exit 1
    ;;
  esac
  printf '%s\n' "$reply"
}

# Verdicts come after the newest output entry of now.
LAST=$(rc --raw XREVRANGE "$OUT" + - COUNT 1 | head -n 1)
[ -n "$LAST" ] || LAST=0-0

# XADD prints the new entry's id: the `source` field of its verdict.
S1=$(rc --raw XADD "$IN" '*' id sh-1 text "Volunteers planted twelve thousand oak and beech saplings along the river bank this weekend, the first stage of a plan to restore the floodplain forest cut down in the 1960s.")
# The same article in markup: expected duplicate of sh-1 (exact: same words).
S2=$(rc --raw XADD "$IN" '*' id sh-1-copy text "<p>Volunteers planted twelve thousand oak and beech saplings along the river bank this weekend, the first stage of a plan to restore the floodplain forest cut down in the 1960s.</p>")
# No words at all: expected rejected (no_content).
S3=$(rc --raw XADD "$IN" '*' id sh-empty text "<p>&nbsp;</p>")

# Poll the output stream (fields come one per line: name, value, name, value...)
# until all three sources are answered, or 60 s.
i=0
while :; do
  ALL=$(rc --raw XRANGE "$OUT" "($LAST" +)
  n=0
  # Count a source only as the value after a `source` field: an output entry's
  # own id can equal an input id (both are <ms>-<seq>), so a match on any line
  # could end the wait before the last verdict has come.
  SOURCES=$(printf '%s\n' "$ALL" | awk 'prev == "source" { print } { prev = $0 }')
  for s in "$S1" "$S2" "$S3"; do
    printf '%s\n' "$SOURCES" | grep -qx "$s" && n=$((n + 1))
  done
  [ "$n" -eq 3 ] && break
  i=$((i + 1))
  if [ "$i" -ge 600 ]; then
    echo "timed out waiting for verdicts (is a worker running on namespace $NS?)" >&2
    exit 1
  fi
  sleep 0.1
done

# Print "id verdict dup_of-or-code" per source, in sending order. --raw prints
# one element per line: an entry id, then field and value lines. A line where a
# field name is expected that looks like an entry id starts the next entry.
for s in "$S1" "$S2" "$S3"; do
  printf '%s\n' "$ALL" | awk -v src="$s" '
    function flush() {
      if (f["source"] == src) {
        extra = f["dup_of"] != "" ? f["dup_of"] : (f["code"] != "" ? f["code"] : "-")
        print f["id"], f["verdict"], extra
      }
      split("", f)
    }
    expect != "value" && /^[0-9]+-[0-9]+$/ { flush(); expect = "key"; next }
    expect == "key" { key = $0; expect = "value"; next }
    { f[key] = $0; expect = "key" }
    END { flush() }'
done
