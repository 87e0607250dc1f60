#!/usr/bin/env bash
# The input split across nodes of unequal capacity (issue 4).
#
#   bench/preprocess/split.sh [ROWS]        (default 1000000; needs root: a cgroup)
#
# Two nodes on this machine: n0 on CPU 0, n1 on CPU 1 inside a cgroup whose
# CPU quota is QUOTA cores (default 0.5): a node with half a core, as a
# container with a smaller CPU limit is. The same vocab job (min_count 3,
# parallelism 0 = auto) runs with the split measured (the default: each node
# sends the head the cores it can count on, so n1 gets a third of the bytes
# at 0.5 cores) and with shard_weights = [1, 1] (the equal split every
# run had before), in turns, REPEAT times (default 3). Each node is started
# by hand (`hetflow node`, n1 from inside the cgroup); the time is the
# wall time from the start of both to the end of both. Prints each run's
# seconds, each node's share and count seconds, and the medians. Environment:
# HETFLOW (binary), WORK (scratch, default /tmp/hetflow-bench-split), REPEAT,
# QUOTA.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
HETFLOW=${HETFLOW:-$root/build/bin/hetflow}
WORK=${WORK:-/tmp/hetflow-bench-split}
REPEAT=${REPEAT:-3}
QUOTA=${QUOTA:-0.5}
rows=${1:-1000000}
[[ -x "$HETFLOW" ]] || { echo "no hetflow binary at $HETFLOW (set HETFLOW)" >&2; exit 2; }
(( $(nproc) >= 2 )) || { echo "needs 2 CPUs" >&2; exit 2; }
mkdir -p "$WORK"

# The cgroup: v1's cpu controller, else v2 with cpu enabled.
period=100000
quota_us=$(awk -v q="$QUOTA" -v p=$period 'BEGIN { printf "%d", q * p }')
if [[ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]]; then
  cg=/sys/fs/cgroup/cpu/hetflow-bench-split
  mkdir -p "$cg"
  echo $period >"$cg/cpu.cfs_period_us"
  echo "$quota_us" >"$cg/cpu.cfs_quota_us"
elif grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
  grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control || echo +cpu >/sys/fs/cgroup/cgroup.subtree_control
  cg=/sys/fs/cgroup/hetflow-bench-split
  mkdir -p "$cg"
  echo "$quota_us $period" >"$cg/cpu.max"
else
  echo "no cgroup cpu controller (v1 /sys/fs/cgroup/cpu or v2 with cpu) to cap a node with" >&2
  exit 2
fi
trap 'rmdir "$cg" 2>/dev/null || true' EXIT

input="$WORK/criteo-$rows.tsv"
[[ -f "$input" ]] || "$HETFLOW" gen-criteo --rows "$rows" --seed 1 --out "$input" >/dev/null
cat "$input" >/dev/null  # page cache

# topology NAME [job lines...]
topology() {
  local f="$WORK/$1.toml"
  shift
  {
    echo '[cluster]'
    echo "name = \"bench-split\""
    echo '[[nodes]]'
    echo 'name = "n0"'
    echo 'host = "127.0.0.1"'
    echo 'port = 7730'
    echo 'cpus = "0"'
    echo '[[nodes]]'
    echo 'name = "n1"'
    echo 'host = "127.0.0.1"'
    echo 'port = 7731'
    echo 'cpus = "1"'
    echo '[job]'
    echo 'kind = "preprocess"'
    echo "inputs = [\"$input\"]"
    echo "output_dir = \"$WORK/out\""
    echo 'categorical = { mode = "vocab", min_count = 3 }'
    local l
    for l in "$@"; do echo "$l"; done
  } >"$f"
  echo "$f"
}
measured=$(topology measured)
equal=$(topology equal 'shard_weights = [1, 1]')

# once TOML: "seconds n0-share n1-share n0-count-s n1-count-s"
once() {
  local f=$1 t0 t1 p0 p1
  sync
  t0=$(date +%s.%N)
  "$HETFLOW" node "$f" --name n0 --report "$f.json" >"$f.n0.log" 2>&1 &
  p0=$!
  sh -c 'echo $$ > "$1/cgroup.procs" 2>/dev/null || echo $$ > "$1/tasks"; shift; exec "$@"' sh "$cg" \
    "$HETFLOW" node "$f" --name n1 --report "$f.n1.json" >"$f.n1.log" 2>&1 &
  p1=$!
  wait $p0 || { cat "$f.n0.log" >&2; return 1; }
  wait $p1 || { cat "$f.n1.log" >&2; return 1; }
  t1=$(date +%s.%N)
  /usr/bin/python3 - "$f.json" "$f.n1.json" "$t0" "$t1" <<'EOF'
import json, sys
shards = []
for path in sys.argv[1:3]:  # each node's report: its shard actor's parts
    for a in json.load(open(path))["actors"]:
        if a["name"].startswith("pp_shard"):
            shards += a["metrics"]["parts"]
shards.sort(key=lambda s: s["shard"])
total = sum(s["bytes"] for s in shards)
print("%.3f %s %s" % (float(sys.argv[4]) - float(sys.argv[3]),
                      " ".join("%.3f" % (s["bytes"] / total) for s in shards),
                      " ".join("%.3f" % s["count_seconds"] for s in shards)))
EOF
}

echo "hetflow preprocess split benchmark, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, n1 capped at $QUOTA cores, $rows rows"
echo
echo "| split | round | seconds | n0 share | n1 share | n0 count s | n1 count s |"
echo "|---|---|---|---|---|---|---|"
m=() e=()
for ((k = 1; k <= REPEAT; k++)); do
  out=$(once "$measured") || { echo "the measured run failed" >&2; exit 1; }
  read -r s a b c d <<<"$out"
  m+=("$s")
  echo "| measured (cores) | $k | $s | $a | $b | $c | $d |"
  out=$(once "$equal") || { echo "the equal run failed" >&2; exit 1; }
  read -r s a b c d <<<"$out"
  e+=("$s")
  echo "| shard_weights = [1, 1] | $k | $s | $a | $b | $c | $d |"
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo
echo "median seconds: measured $(median "${m[@]}"), equal $(median "${e[@]}")"
grep -h "input split by" "$measured.n0.log" | tail -1 | sed 's/^/measured run: /'
