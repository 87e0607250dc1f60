#!/usr/bin/env bash
# Data parallelism with cuda replicas, on a machine with one GPU: `hetflow
# run` of a train job (strategy "dp") whose replicas are a cuda device and a
# cpu device (2 nodes on 127.0.0.1), or two cuda replicas sharing the one GPU,
# against the same job on the GPU alone (strategy "single") and on the cpu
# device alone, measured in the same run.
#
#   bench/dp/gpu_dp.sh [BUILD_DIR]      (default: build)
#   MODELS="lenet5 resnet18"  B=256 (global batch)  STEPS=40 (steps an epoch)
#   RUNS="single-cuda single-cpu dp-cuda+cpu dp-cuda+cuda" (a dp run may end
#   in @RULE, its dp_split: dp-cuda+cpu@speed; default measured; single-cpu only
#   for lenet5 unless CPU_RESNET=1: resnet18 on the cpu alone is slow; the dp
#   runs report the cpu replica's measured speed)
#   CPU_THREADS=8 (the cpu replica's threads)  EPOCHS=2
#
# Each job: synthetic data (lenet5: 1x28x28, resnet18: 3x32x32, 10 classes,
# B*STEPS training rows, B test rows), sgd lr 0.02 momentum 0.9, `EPOCHS`
# epochs, evaluation after the last. samples/s = the report's last epoch
# samples_per_s (the first includes cuDNN's algorithm search and the speed
# probe's first split). For dp also: the last epoch's split of the global
# batch, the replicas' measured speeds (samples/s), replicas_identical
# (every replica's weights checksum equal), the share of the training time
# rank 0 waited for sums (allreduce_seconds / all epochs' train_seconds;
# the speed probe's and evaluation's sums count too), and the test accuracy.
# On the GPU machine (none of our Debian libraries there), from this
# machine's checkout: see bench/kernels/gpu_session.sh for build-gpu and the
# bundle; there: bash .gpu/run.sh 'bench/dp/gpu_dp.sh build-gpu'
set -uo pipefail
build=${1:-build}
hetflow=$build/bin/hetflow
MODELS=${MODELS:-lenet5 resnet18}; B=${B:-256}; STEPS=${STEPS:-40}; CPU_THREADS=${CPU_THREADS:-8}
EPOCHS=${EPOCHS:-2}
py=${PYTHON:-python3}
[[ -x $hetflow ]] || { echo "gpu_dp.sh: $hetflow not found" >&2; exit 2; }
"$hetflow" devices 2>&1 | grep -q "^cuda 0:" || { echo "gpu_dp.sh: no CUDA GPU for hetflow here" >&2; exit 2; }
scratch=$(mktemp -d /tmp/hetflow-gpu-dp.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
port=7960
status=0

# topology NAME MODEL STRATEGY SPLIT DEVICE... (one node per device)
topology() {
  local name=$1 model=$2 strategy=$3 split=$4; shift 4
  local shape='[1, 28, 28]'
  [[ $model == lenet5 ]] || shape='[3, 32, 32]'
  {
    echo "[cluster]"; echo "name = \"gpu-dp-$name\""
    local i=0
    for d in "$@"; do
      echo "[[nodes]]"; echo "name = \"n$i\""; echo 'host = "127.0.0.1"'; echo "port = $((port + i))"
      if [[ $d == cuda ]]; then echo 'devices = [ { kind = "cuda", index = 0 } ]'
      else echo "devices = [ { kind = \"cpu\", threads = $CPU_THREADS } ]"; fi
      i=$((i + 1))
    done
    cat <<TOML
[job]
kind = "train"
strategy = "$strategy"
model = "$model"
dataset = "synthetic"
input_shape = $shape
classes = 10
train_size = $((B * STEPS))
test_size = $B
epochs = $EPOCHS
batch_size = $B
optimizer = "sgd"
lr = 0.02
momentum = 0.9
eval_each_epoch = false
TOML
    [[ $strategy == dp ]] && echo 'dp_failover = false' && echo "dp_split = \"$split\""
  } >"$scratch/$name.toml"
  port=$((port + 10))
}

echo "# bench/dp/gpu_dp.sh $(date -u +%Y-%m-%dT%H:%MZ)"
echo "# $("$hetflow" devices 2>&1 | grep -m1 '^cuda 0:')"
echo "# global batch $B, $STEPS steps an epoch, $EPOCHS epochs (last one timed), cpu replica: $CPU_THREADS threads"
RUNS=${RUNS:-single-cuda single-cpu dp-cuda+cpu dp-cuda+cuda}
printf '%-9s | %-14s | %11s | %-11s | %-15s | %-9s | %-8s | %s | %s\n' model run "samples/s" split "speeds" identical \
  "sum wait" "test acc" "step cost ms (fixed + per row)"
for m in $MODELS; do
  for run in $RUNS; do
    [[ $run == single-cpu && $m != lenet5 && -z ${CPU_RESNET:-} ]] && continue
    split=measured
    [[ $run == *@* ]] && split=${run#*@}
    case ${run%@*} in
      single-cuda) set -- "${run%@*}" single cuda ;;
      single-cpu) set -- "${run%@*}" single cpu ;;
      dp-cuda+cpu) set -- "${run%@*}" dp cuda cpu ;;
      dp-cuda+cuda) set -- "${run%@*}" dp cuda cuda ;;
      *) echo "gpu_dp.sh: unknown run $run" >&2; exit 2 ;;
    esac
    name=$m-$1
    [[ $split == measured ]] || name=$name-$split
    topology "$name" "$m" "$2" "$split" "${@:3}"
    if ! timeout -k 5 600 "$hetflow" run "$scratch/$name.toml" --report "$scratch/$name.json" >"$scratch/$name.out" 2>&1; then
      echo "gpu_dp.sh: $name failed:" >&2; tail -20 "$scratch/$name.out" >&2; status=1; continue
    fi
    "$py" - "$scratch/$name.json" "$m" "$run" <<'PY' || status=1
import json, sys
d = json.load(open(sys.argv[1]))
r = d.get("result", d)
def find(k):
    for src in (r, d):
        if isinstance(src, dict) and k in src: return src[k]
    return None
ep = find("epochs")[-1]
split = find("splits")
speeds = "/".join(f"{x:.0f}" for x in split[-1]["speeds"]) if split else "-"
cost = " ".join(f"{a:.1f}+{b:.3f}r" for a, b in zip(split[-1].get("fixed_ms", []), split[-1].get("row_ms", []))) if split else ""
split = "/".join(str(x) for x in split[-1]["rows"]) if split else "-"
ident = find("replicas_identical")
ident = "-" if ident is None else str(ident).lower()
ar = find("allreduce_seconds")
tr = sum(e.get("train_seconds", 0) for e in find("epochs"))
wait = f"{ar / tr:.0%}" if ar and tr else "-"
print(f"{sys.argv[2]:<9} | {sys.argv[3]:<14} | {ep['samples_per_s']:11.0f} | {split:<11} | {speeds:<15} | {ident:<9} | {wait:<8} | {ep.get('test_accuracy')} | {cost}")
PY
  done
done
exit $status
