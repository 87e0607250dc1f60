#!/usr/bin/env bash
# The input split by the nodes' speed, [job] split_by = "speed" (issue 4).
#
#   bench/preprocess/split_speed.sh [ROWS]        (default 1000000)
#
# Two local nodes (`hetflow run`, pinned: n0 on CPU 0, n1 on CPU 1), the
# same vocab job (min_count 3, 1 thread each) with split_by = "cores" (the
# default: equal halves here) and "speed" (each node times pass 1 for 30 ms
# at the start), in turns, REPEAT times (default 5), in two settings:
#   busy  another process (a shell busy loop) shares CPU 1 with n1 for the
#         whole run, as another tenant or a hypervisor's other guest would
#   alike nothing else: what the 30 ms of timing and its noise cost
# Prints each run's wall seconds (launch to exit) and n0's share, then the
# medians. Environment: HETFLOW (binary), WORK (scratch, default
# /tmp/hetflow-bench-split-speed), REPEAT.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
HETFLOW=${HETFLOW:-$root/build/bin/hetflow}
WORK=${WORK:-/tmp/hetflow-bench-split-speed}
REPEAT=${REPEAT:-5}
rows=${1:-1000000}
[[ -x "$HETFLOW" ]] || { echo "no hetflow binary at $HETFLOW (set HETFLOW)" >&2; exit 2; }
(( $(nproc) >= 2 )) || { echo "needs 2 CPUs" >&2; exit 2; }
mkdir -p "$WORK"
input="$WORK/criteo-$rows.tsv"
[[ -f "$input" ]] || "$HETFLOW" gen-criteo --rows "$rows" --seed 1 --out "$input" >/dev/null
cat "$input" >/dev/null  # page cache

topology() {  # topology BY -> file
  local f="$WORK/$1.toml"
  cat >"$f" <<EOF
[cluster]
name = "bench-split-speed"
[[nodes]]
name = "n0"
host = "127.0.0.1"
port = 7740
devices = [ { kind = "cpu", threads = 1 } ]
[[nodes]]
name = "n1"
host = "127.0.0.1"
port = 7741
devices = [ { kind = "cpu", threads = 1 } ]
[job]
kind = "preprocess"
inputs = ["$input"]
output_dir = "$WORK/out-$1"
categorical = { mode = "vocab", min_count = 3 }
parallelism = 1
split_by = "$1"
EOF
  echo "$f"
}
cores=$(topology cores)
speed=$(topology speed)

hog=""
stop_hog() { [[ -n $hog ]] && kill "$hog" 2>/dev/null; hog=""; }
trap stop_hog EXIT

run() {  # run TOPO -> "seconds n0-share"
  sync
  sleep 0.5
  local t0 t1
  t0=$(date +%s%N)
  "$HETFLOW" run "$1" --report "$1.json" >"$1.log" 2>&1 || { cat "$1.log" >&2; exit 1; }
  t1=$(date +%s%N)
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('%.3f %.3f' % (($t1 - $t0) / 1e9, d['split']['nodes'][0]['share']))" "$1.json"
}

median() { sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }

echo "split_by = cores vs speed, $rows rows, 2 nodes x 1 thread, $(date -u +%Y-%m-%dT%H:%MZ), $(uname -r)"
for setting in busy alike; do
  if [[ $setting == busy ]]; then
    taskset -c 1 sh -c 'while :; do :; done' &
    hog=$!
  fi
  declare -A secs=()
  for ((r = 0; r < REPEAT; r++)); do
    for by in cores speed; do
      topo=$cores
      [[ $by == speed ]] && topo=$speed
      read -r s share < <(run "$topo")
      secs[$by]+="$s "
      echo "$setting $by: $s s, n0's share $share"
    done
  done
  for by in cores speed; do
    echo "$setting $by: median $(tr ' ' '\n' <<<"${secs[$by]}" | grep . | median) s (${secs[$by]% })"
  done
  stop_hog
  unset secs
done
cmp <(cat "$WORK/out-cores"/part-*.bin) <(cat "$WORK/out-speed"/part-*.bin) && echo "the same records either way"
