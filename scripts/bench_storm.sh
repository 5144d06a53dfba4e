#!/bin/bash
# Copy storm: N copies of one article (each under its own id) against N
# different articles, through `simdedup scan` and through W workers
# (simdedup-bench, end to end on a private redis-server), in the same run,
# A/B alternated ROUNDS times. Prints each rate, the medians and the ratio
# copies / different. A check must not cost more because its story was copied
# many times before: the ratio should be near 1.
#
# The different articles are made from the zh corpus: each one 12-20 of its
# sentences drawn at random (seeded), so that they share a sentence now and
# then, as real news does; the copies are the first of them.
# Needs `cargo build --release` (both programs) first.
# usage: bench_storm.sh [N] [W] [ROUNDS]
set -euo pipefail
N=${1:-100000}
W=${2:-2}
ROUNDS=${3:-3}
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=$HERE/../target/release
DATA=${DATA:-$HERE/../../shared/data/cctv-news-2022-2025.jsonl}
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT

python3 - "$DATA" "$N" "$DIR" <<'EOF'
import json, random, re, sys
data, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
sentences = []
for line in open(data, encoding="utf-8"):
    text = json.loads(line).get("text") or ""
    sentences += [s for s in re.findall(r"[^。！？\n]+[。！？]", text) if len(s) >= 12]
rng = random.Random(1)
with open(f"{out}/different.jsonl", "w", encoding="utf-8") as diff, \
     open(f"{out}/copies.jsonl", "w", encoding="utf-8") as copies:
    first = None
    for j in range(n):
        text = "".join(rng.choice(sentences) for _ in range(rng.randint(12, 20)))
        first = first or text
        diff.write(json.dumps({"id": f"d-{j}", "text": text}, ensure_ascii=False) + "\n")
        copies.write(json.dumps({"id": f"c-{j}", "text": first}, ensure_ascii=False) + "\n")
EOF

scan() { # articles/s of `simdedup scan FILE`, and its verdict counts
  local t0 t1
  t0=$(date +%s.%N)
  "$BIN/simdedup" scan "$1" --no-progress > "$DIR/verdicts.jsonl"
  t1=$(date +%s.%N)
  python3 -c "print(f'{$N/($t1-$t0):.0f}')"
}
e2e() { # articles/s of W workers draining FILE (simdedup-bench, end to end)
  "$BIN/simdedup-bench" --no-index-sizes --no-paced --no-progress --workers "$W" \
    --corpus "$1" --e2e-articles "$N" > "$DIR/e2e.md" 2> "$DIR/e2e.log" \
    || { cat "$DIR/e2e.log" >&2; exit 1; }
  # Its row: | empty | R (R excl. start-up), … | answered, pending | unique / duplicate / rejected |
  grep '^| empty |' "$DIR/e2e.md" | head -1 > "$DIR/e2e.line"
  awk -F'|' '{split($3, r, " "); gsub(",", "", r[1]); print r[1]}' "$DIR/e2e.line"
}
verdicts() { python3 -c "
import collections, json, sys
c = collections.Counter()
for l in open('$DIR/verdicts.jsonl'):
    v = json.loads(l); c[(v['verdict'], v.get('dup_of'))] += 1
print(dict(c.most_common(3)))"; }

median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
declare -A rates
for r in $(seq 1 "$ROUNDS"); do
  for kind in different copies; do
    s=$(scan "$DIR/$kind.jsonl")
    echo "round $r: scan $kind: $s articles/s; top verdicts $(verdicts)"
    rates[scan_$kind]+="$s "
  done
  for kind in different copies; do
    e=$(e2e "$DIR/$kind.jsonl")
    echo "round $r: $W workers $kind: $e articles/s; verdicts unique / duplicate / rejected $(awk -F'|' '{print $5}' "$DIR/e2e.line")"
    rates[e2e_$kind]+="$e "
  done
done
for what in scan e2e; do
  d=$(echo "${rates[${what}_different]}" | median)
  c=$(echo "${rates[${what}_copies]}" | median)
  python3 -c "print(f'$what: different {$d}/s, copies {$c}/s (medians of $ROUNDS), copies/different {$c/$d:.2f}')"
done
