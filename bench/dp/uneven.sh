#!/usr/bin/env bash
# Data parallelism on an uneven pair of devices (issue 5: "the global batch is
# split in proportion to each device's measured speed so a fast and a slow
# device finish each step together"): dp_split "equal" against "measured".
#
#   bench/dp/uneven.sh [BUILD_DIR]      (default: build)
#   SLOW=2.0       how much slower the second replica's device is
#   REPEATS=3      rounds; each round runs "equal" then "measured"
#   ROWS=20000     synthetic training rows (1 epoch, batch 64 over 2 replicas)
#   QUIET_MAX=300  seconds to wait for a quiet machine before each run
#
# One machine has no old and new device side by side, so the slow one is
# emulated: node n1 runs with HETFLOW_BENCH_SLOWDOWN=$SLOW in its environment,
# which makes its training compute take SLOW times as long (after each forward
# and each backward unit it sleeps SLOW - 1 times what that took;
# kernels/trainer.cpp). Unlike a CPU hog (bench/RESULTS.md, "re-splitting"),
# the slow replica still answers the ring at once, as an older GPU or CPU
# would. Two `hetflow node` processes on 127.0.0.1, pinned to CPU 0 and CPU 1
# (taskset), each `devices = [ { kind = "cpu", threads = 1 } ]`; job train,
# strategy "dp", model lenet5, dataset synthetic 1x28x28, 10 classes,
# batch_size 64, 1 epoch, eval_each_epoch false. Reported per run: the epoch's
# samples/s (rank 0's report) and the rows each replica got per step.
# Expected with SLOW = 2: equal halves run at the slow replica's pace; the
# measured split gives it a third of each batch, ~1.5x the samples/s.
#
# STEP_COST=S (seconds; SLOW then defaults to 1): n1 instead takes S more for
# every step it has rows (HETFLOW_BENCH_STEP_COST), a device with a fixed
# per-step cost; each round runs dp_split "equal", "speed" (rows in
# proportion to samples/s, the rule before the fixed term) and "measured"
# (fixed + per-row cost).
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$src/build}
hetflow=$build/bin/hetflow
step_cost=${STEP_COST:-}
slow=${SLOW:-$([[ -n $step_cost ]] && echo 1.0 || echo 2.0)}
repeats=${REPEATS:-3}
rows=${ROWS:-20000}
work=${WORK:-/tmp/hetflow-bench-dp-uneven}
[[ -x $hetflow ]] || { echo "no $hetflow (build first)" >&2; exit 2; }
mkdir -p "$work"
source "$src/bench/lib.sh"  # wait_quiet

topology() {  # topology FILE SPLIT
  cat >"$1" <<EOF
[cluster]
name = "dp-uneven"
data_plane = "auto"
pin_local_nodes = "off"
[[nodes]]
name = "n0"
host = "127.0.0.1"
port = 7880
devices = [ { kind = "cpu", threads = 1 } ]
[[nodes]]
name = "n1"
host = "127.0.0.1"
port = 7881
devices = [ { kind = "cpu", threads = 1 } ]
[job]
kind = "train"
strategy = "dp"
dp_split = "$2"
model = "lenet5"
dataset = "synthetic"
input_shape = [1, 28, 28]
train_size = $rows
test_size = 64
classes = 10
batch_size = 64
epochs = 1
eval_each_epoch = false
lr = 0.05
EOF
}

run_one() {  # run_one SPLIT -> "samples/s rows0 rows1"
  local t="$work/$1.toml"
  topology "$t" "$1"
  wait_quiet
  taskset -c 0 "$hetflow" node "$t" --name n0 --report "$t.n0.json" >"$t.n0.log" 2>&1 &
  local p0=$!
  HETFLOW_BENCH_SLOWDOWN=$slow HETFLOW_BENCH_STEP_COST=$step_cost taskset -c 1 "$hetflow" node "$t" --name n1 >"$t.n1.log" 2>&1 &
  local p1=$!
  wait $p0 || { cat "$t.n0.log" >&2; return 1; }
  wait $p1 || { cat "$t.n1.log" >&2; return 1; }
  python3 - "$t.n0.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
job = d.get("job", d)
r = [a for a in d["actors"] if a["name"] == "replica0"][0]["metrics"]
e = r["epochs"][0] if "epochs" in r else d["epochs"][0]
split = r["splits"][0]["rows"]
print("%.0f %d %d" % (e["samples_per_s"], split[0], split[1]))
PY
}

echo "hetflow dp, uneven pair (n1 slowed ${slow}x), $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, $rows rows, batch 64"
echo
echo "| round | dp_split equal: samples/s | rows per step (n0, n1) | dp_split measured: samples/s | rows per step (n0, n1) | measured / equal |"
echo "|---|---|---|---|---|---|"
if [[ -n $step_cost ]]; then
  echo "n1: ${step_cost} s more per step with rows (HETFLOW_BENCH_STEP_COST), SLOW $slow"
  echo
  echo "| round | equal: samples/s | rows (n0, n1) | speed: samples/s | rows | measured: samples/s | rows | measured / speed |"
  echo "|---|---|---|---|---|---|---|---|"
  for ((k = 1; k <= repeats; k++)); do
    read -r e0 a0 b0 < <(run_one equal)
    read -r s0 a2 b2 < <(run_one speed)
    read -r m0 a1 b1 < <(run_one measured)
    echo "| $k | $e0 | $a0, $b0 | $s0 | $a2, $b2 | $m0 | $a1, $b1 | $(awk "BEGIN{printf \"%.2fx\", $m0 / $s0}") |"
  done
  exit 0
fi
for ((k = 1; k <= repeats; k++)); do
  read -r e0 a0 b0 < <(run_one equal)
  read -r m0 a1 b1 < <(run_one measured)
  echo "| $k | $e0 | $a0, $b0 | $m0 | $a1, $b1 | $(awk "BEGIN{printf \"%.2fx\", $m0 / $e0}") |"
done
