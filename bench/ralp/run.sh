#!/usr/bin/env bash
# RALP vs parameter servers vs data parallel: bytes on the wire per step and
# step time, VGG-11 on synthetic 3x32x32 images, 2 workers, same batch per
# worker, all on this host.
#
#   bench/ralp/run.sh [BUILD_DIR]      (default: build)
#   STEPS=36       steps per worker (one epoch of 2*STEPS batches)
#   B=32           batch per worker (dp: global batch 2*B, B rows per replica)
#   WIDTH=1.0      vgg11 width
#   HEAD=4096      vgg11 head_width: the FC head 512 -> HEAD -> HEAD -> 10 (the
#                  paper's 4096: ~76 MB of the model's ~113 MB; 0: the zoo's
#                  default for 32x32, one layer of 512, 1 MB)
#   CUTS="14 8 0"  ralp_cut values to run (0: the server's cost model; vgg11's units:
#                  conv1 pool1 conv2 pool2 conv3 conv4 pool3 conv5 conv6 pool4
#                  conv7 conv8 pool5 flatten fc1 (drop1 fc2 drop2) fc2|fc3;
#                  14 = before fc1, the FC head; 8 = before conv6)
#   REPEATS=3      rounds (each runs every strategy once); step time = the median
#   QUIET_MAX=300  seconds to wait for a quiet machine before each run
#
# ps and ralp: 3 local nodes n0 (PS shard / RALP server), n1, n2 (workers;
# ps_workers = [n1, n2], ps_nodes = [n0], 1 shard), each `devices = [ { kind =
# "cpu", threads = 1 } ]`, bsp. dp: 2 nodes (the 2 replicas), dp_split equal.
# Bytes per step (whole wire messages, both workers): ps = 2 x worker 1's
# (bytes_sent + bytes_received) / its steps (worker 0 also pulls the final
# weights once); ralp = the sum of the workers' bytes_per_step (the bytes of
# their training steps: pull, weights, activations, gradient, push); dp = computed, not measured: the ring
# moves 2 (N-1)/N x the gradient bytes per replica a step (N = 2: the model's
# parameter bytes each way), the job does not count ring bytes. Step time =
# worker 0's epoch training seconds / its steps (first step to last push;
# loading and the final evaluation not included; dp: rank 0's epoch / steps).
# RALP's predicted bytes are the cost model's formula (topology/ralp_cost.hpp)
# for the real model, which the server reports (predicted_bytes_per_step); the
# predicted traffic reduction vs ps is 1 - that / (2 workers x 2 x parameter
# bytes).
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$src/build}
hetflow=$build/bin/hetflow
steps=${STEPS:-36}
b=${B:-32}
width=${WIDTH:-1.0}
head=${HEAD:-4096}
cuts=${CUTS:-"14 8 0"}
repeats=${REPEATS:-3}
[[ -x $hetflow ]] || { echo "no $hetflow: build the tree first" >&2; exit 2; }
work=$(mktemp -d /tmp/hetflow-ralp-XXXXXX)
trap 'rm -rf "$work"' EXIT
source "$src/bench/lib.sh"  # wait_quiet

topology() {  # topology FILE NODES STRATEGY [job lines...]
  local f=$1 n=$2 s=$3 i
  shift 3
  {
    echo '[cluster]'
    echo "name = \"bench-ralp-$s\""
    for ((i = 0; i < n; i++)); do
      printf '[[nodes]]\nname = "n%d"\nhost = "127.0.0.1"\nport = %d\n' "$i" $((7970 + i))
      echo 'devices = [ { kind = "cpu", threads = 1 } ]'
    done
    echo '[job]'
    echo 'kind = "train"'
    echo "strategy = \"$s\""
    echo 'model = "vgg11"'
    echo "width = $width"
    echo "head_width = $head"
    echo 'dataset = "synthetic"'
    echo 'input_shape = [3, 32, 32]'
    echo "train_size = $((2 * steps * b))"
    echo 'test_size = 64'
    echo 'classes = 10'
    echo 'optimizer = "sgd"'
    echo 'lr = 0.01'
    echo 'momentum = 0.9'
    echo 'epochs = 1'
    echo 'eval_each_epoch = false'
    local l
    for l in "$@"; do echo "$l"; done
  } >"$f"
}

run() {  # run NAME FILE
  wait_quiet
  echo "$1..." >&2
  timeout 1200 "$hetflow" run "$2" --report "$work/$1.json" >"$work/$1.out" 2>&1 || { cat "$work/$1.out" >&2; exit 1; }
}

topology "$work/ps.toml" 3 ps "batch_size = $b" "max_steps_per_epoch = $((2 * steps))" \
  'ps_workers = ["n1", "n2"]' 'ps_nodes = ["n0"]'
for cut in $cuts; do
  topology "$work/ralp$cut.toml" 3 ralp "batch_size = $b" "max_steps_per_epoch = $((2 * steps))" \
    'ps_workers = ["n1", "n2"]' "ralp_cut = $cut"
done
topology "$work/dp.toml" 2 dp "batch_size = $((2 * b))" "max_steps_per_epoch = $steps" 'dp_split = "equal"'
for r in $(seq 1 "$repeats"); do
  run "ps.$r" "$work/ps.toml"
  for cut in $cuts; do run "ralp$cut.$r" "$work/ralp$cut.toml"; done
  run "dp.$r" "$work/dp.toml"
done
"$hetflow" plan "$work/ralp${cuts%% *}.toml" >"$work/plan.txt" 2>&1 || true

python3 - "$work" "$cuts" "$noisy" "$repeats" <<'PY'
import json, sys, os
import statistics
work, cuts, noisy, repeats = sys.argv[1], sys.argv[2].split(), sys.argv[3], int(sys.argv[4])
def load(n): return json.load(open(os.path.join(work, n + ".1.json")))
def step_s(n, steps_of):  # median over the rounds (min-max)
    v = [steps_of(json.load(open(os.path.join(work, f"{n}.{r}.json")))) for r in range(1, repeats + 1)]
    return f"{statistics.median(v):.3f} [{min(v):.3f}-{max(v):.3f}]"
ps = load("ps")
params = sum(s["bytes"] for s in ps["ps"]["shards"])
# ps: worker 1's bytes / its steps, x 2 (both workers move the same per step;
# worker 0 also pulls the final weights once). ralp: the workers' step bytes.
def ps_per_step(ws):
    w1 = next(w for w in ws if w["name"] == "psworker1")
    return len(ws) * (w1["bytes_sent"] + w1["bytes_received"]) / w1["steps"]
def per_step(ws): return sum(w["bytes_per_step"] for w in ws)
rows = []
ps_bytes = ps_per_step(ps["ps"]["workers"])
ps_pred = 2 * 2 * params
rows.append(("ps (bsp, 1 shard)", ps_bytes, ps_pred,
             step_s("ps", lambda d: d["epochs"][0]["train_seconds"] / d["ps"]["workers"][0]["steps"]), "-", "-"))
for c in cuts:
    r = load("ralp" + c)
    srv = r["ralp"]["server"]
    meas = per_step(r["ralp"]["workers"])
    pred = srv["predicted_bytes_per_step"]
    red_m = 1 - meas / ps_bytes
    red_p = 1 - pred / ps_pred
    how = "ralp_cut = 0: cost model" if c == "0" else "ralp_cut"
    where = "no cut" if srv["cut"] == srv["units"] else "before " + srv["cut_unit"]
    rows.append((f"ralp cut {srv['cut']} ({where}; {how})", meas, pred,
                 step_s("ralp" + c, lambda d: d["epochs"][0]["train_seconds"] / d["ralp"]["workers"][0]["steps"]),
                 f"{red_m:.1%}", f"{red_p:.1%}"))
dp = load("dp")
dp_steps = int(os.environ.get("STEPS", "36"))
rows.append(("dp (ring, 2 replicas)", 2 * params, 2 * params,
             step_s("dp", lambda d: d["epochs"][0]["train_seconds"] / dp_steps), "-", "-"))
print(f"vgg11 width {os.environ.get('WIDTH', '1.0')} head_width {os.environ.get('HEAD', '4096')} on 3x32x32, batch {os.environ.get('B', '32')} per worker, "
      f"{dp_steps} steps per worker; parameters {params} bytes" + (" (NOISY machine)" if noisy == "1" else ""))
print(f"| strategy | bytes/step measured | bytes/step predicted | step s (median of {repeats} [min-max]) | traffic reduction vs ps (measured) | (predicted) |")
print("|---|---:|---:|---:|---:|---:|")
for n, m, p, s, rm, rp in rows:
    print(f"| {n} | {m:,.0f} | {p:,.0f} | {s} | {rm} | {rp} |")
print("dp bytes are computed (2 (N-1)/N x parameter bytes per replica, both replicas), not measured.")
if "0" in cuts:  # the run's own choice: its cost model with the link the server measured
    print("ralp_cut = 0, the server's why:", load("ralp0")["ralp"]["server"].get("cut_why", ""))
PY
echo
cat "$work/plan.txt"
