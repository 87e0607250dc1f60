#!/usr/bin/env bash
# A/B of hetflow binaries on one preprocess topology, under the benchmark's
# protocol (run.sh: a `sync` and a quiet second before every run), the
# binaries in turns:
#
#   bench/preprocess/ab.sh ROUNDS TOPOLOGY BIN...
#
# Prints, per run: the whole command's wall seconds (as run.sh times it),
# the job's `seconds`, each shard's pass-1 `count_seconds` and rows (in
# thousands), the merge's seconds; after each round the seconds of a fixed
# loop on CPU 0 and CPU 1 (this kind of VM changes a vCPU's speed for
# minutes at a time; 0.13-0.16 s at speed, 0.2 s slow on the 2026-12 VM).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../lib.sh"  # wait_quiet
(( $# >= 3 )) || { echo "usage: $0 ROUNDS TOPOLOGY BIN..." >&2; exit 2; }
rounds=$1 topo=$2
shift 2
PY=/usr/bin/python3
report=$(mktemp)
trap 'rm -f "$report"' EXIT
loop() {  # the fixed loop's seconds on CPU $1
  taskset -c "$1" "$PY" -c "
import time
t = time.perf_counter()
x = 0
for i in range(3000000): x += i
print('%.3f' % (time.perf_counter() - t))"
}
for ((r = 0; r < rounds; r++)); do
  for bin in "$@"; do
    sync
    wait_quiet
    t0=$(date +%s.%N)
    "$bin" run "$topo" --report "$report" >/dev/null 2>&1 || { echo "$bin: run failed" >&2; exit 1; }
    t1=$(date +%s.%N)
    "$PY" - "$report" "$bin" "$t0" "$t1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
bin, t0, t1 = sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
sh = sorted(r.get("shards", []), key=lambda s: s["shard"])
count = " ".join("%.3f/%dk" % (s.get("count_seconds", 0), s["rows"] // 1000) for s in sh)
merge = r.get("vocabulary", {}).get("merge_seconds", 0)
print("%-28s whole %.3f  job %.3f  count/rows %s  merge %.3f" % (bin, t1 - t0, r["seconds"], count, merge))
PY
  done
  echo "fixed loop: CPU 0 $(loop 0) s, CPU 1 $(loop 1) s"
done
