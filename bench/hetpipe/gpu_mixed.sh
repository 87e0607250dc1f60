#!/usr/bin/env bash
# HetPipe with a GPU stage, on a machine with one GPU: `hetflow run` of a
# train job (strategy "hetpipe", 1 VW, Nm = NM) over a cpu device (n0,
# CPU_THREADS threads) and cuda:0 (n1), the planner cutting the model from
# profiles measured on the spot, against the same model on the GPU alone and
# on the cpu device alone (strategy "single"), in the same run. The GPU's
# `memory` may be capped (CUDA_MEMORY, e.g. "64MiB") to stand for a weak
# device that cannot hold the model.
#
#   bench/hetpipe/gpu_mixed.sh [BUILD_DIR]    (default: build)
#   NM=4  MODELS="vgg11"  B=64  STEPS=40 (minibatches an epoch)  CPU_THREADS=8  CUDA_MEMORY=""
#   WAVES="overlap" (hetpipe_waves of the hetpipe runs; "overlap drain" runs both)
#   KEEP=DIR (copy each run's report, and the hetpipe runs' --trace, there)
#   PS_PLACEMENT="" (the hetpipe runs' ps_placement; default: the job's default)
#   NODE_CPUS="0-7 8-15" (the hetpipe nodes' `cpus`, n0 first; default: hetflow
#   run's pinning, which gives n0 CPU_THREADS + 1 CPUs where there are enough)
#
# Synthetic 3x32x32, 10 classes, B*STEPS rows, sgd lr 0.01 momentum 0.9, 2
# epochs; samples/s: the report's samples_per_s of the last epoch
# (hetpipe: every VW's). Prints the plan's stages (node, units), the
# planner's predicted samples/s (HetPipe's overlapped waves) and the head's
# simulation of what the runtime does (simulated_samples_per_s: the waves as
# the run does them). On the GPU machine: bash .gpu/run.sh 'bench/hetpipe/gpu_mixed.sh build-gpu'
set -uo pipefail
build=${1:-build}
hetflow=$build/bin/hetflow
NM=${NM:-4}; MODELS=${MODELS:-vgg11}; WAVES=${WAVES:-overlap}; B=${B:-64}; STEPS=${STEPS:-40}; CPU_THREADS=${CPU_THREADS:-8}; CUDA_MEMORY=${CUDA_MEMORY:-}
py=${PYTHON:-python3}
"$hetflow" devices 2>&1 | grep -q "^cuda 0:" || { echo "gpu_mixed.sh: no CUDA GPU for hetflow here" >&2; exit 2; }
scratch=$(mktemp -d /tmp/hetflow-gpu-hp.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
[[ -n ${KEEP:-} ]] && mkdir -p "$KEEP"
status=0
port=9700
cuda_dev='{ kind = "cuda", index = 0 }'
[[ -n $CUDA_MEMORY ]] && cuda_dev="{ kind = \"cuda\", index = 0, memory = \"$CUDA_MEMORY\" }"
cpu_dev="{ kind = \"cpu\", threads = $CPU_THREADS }"
node_cpus=(${NODE_CPUS:-})
job() {  # job FILE MODEL STRATEGY WAVES DEVICE...
  local f=$1 m=$2 s=$3 w=$4 i=0; shift 4
  {
    echo "[cluster]"; echo "name = \"gpu-hp\""
    for d in "$@"; do
      echo "[[nodes]]"; echo "name = \"n$i\""; echo 'host = "127.0.0.1"'; echo "port = $((port + i))"
      echo "devices = [ $d ]"
      [[ $s == hetpipe && -n ${node_cpus[$i]:-} ]] && echo "cpus = \"${node_cpus[$i]}\""
      i=$((i + 1))
    done
    printf '[job]\nkind = "train"\nstrategy = "%s"\nmodel = "%s"\ndataset = "synthetic"\ninput_shape = [3, 32, 32]\n' "$s" "$m"
    printf 'classes = 10\ntrain_size = %d\ntest_size = %d\nepochs = 2\nbatch_size = %d\nlr = 0.01\neval_each_epoch = false\n' \
      $((B * STEPS)) "$B" "$B"
    [[ $s == hetpipe ]] && printf "virtual_workers = 1\nnm = %d\nhetpipe_waves = \"%s\"\n" "$NM" "$w"
    [[ $s == hetpipe && -n ${PS_PLACEMENT:-} ]] && printf 'ps_placement = "%s"\n' "$PS_PLACEMENT"
  } >"$f"
  port=$((port + 10))
}
echo "# bench/hetpipe/gpu_mixed.sh $(date -u +%Y-%m-%dT%H:%MZ); $("$hetflow" devices 2>&1 | grep -m1 '^cuda 0:')"
echo "# batch $B, $STEPS minibatches an epoch, 2 epochs (last timed); cpu device $CPU_THREADS threads; cuda memory cap '${CUDA_MEMORY:-none}'"
for m in $MODELS; do
  runs="single-cuda single-cpu"
  for w in $WAVES; do runs+=" hetpipe-$w"; done
  for run in $runs; do
    f=$scratch/$m-$run.toml
    case $run in
      single-cuda) job "$f" "$m" single - "$cuda_dev" ;;
      single-cpu) job "$f" "$m" single - "$cpu_dev" ;;
      hetpipe-*) job "$f" "$m" hetpipe "${run#hetpipe-}" "$cpu_dev" "$cuda_dev"
        [[ $run == "hetpipe-${WAVES%% *}" ]] && "$hetflow" plan "$f" 2>&1 | grep -iE "stage|VW|predicted|nm" | head -12 ;;
    esac
    trace=()
    [[ -n ${KEEP:-} && $run == hetpipe-* ]] && trace=(--trace "$KEEP/$m-nm$NM-$run.trace.json")
    if ! timeout -k 5 400 "$hetflow" run "$f" --report "$f.json" "${trace[@]}" >"$f.out" 2>&1; then
      echo "gpu_mixed.sh: $m $run failed:" >&2; tail -15 "$f.out" >&2; status=1; continue
    fi
    [[ -n ${KEEP:-} ]] && cp "$f.json" "$KEEP/$m-nm$NM-$run.json"
    "$py" - "$f.json" "$m" "$run" <<'PY' || status=1
import json, sys
d = json.load(open(sys.argv[1]))
ep = d["epochs"][-1]
extra = ""
if "virtual_workers" in d:
    st = d["virtual_workers"][0]["stages"]
    extra = " stages " + ", ".join(f'{s["node"]}:{s["first_unit"]}-{s["last_unit"]}' for s in st) + \
            f' predicted {d.get("predicted_samples_per_s", 0):.0f}/s' \
            f' simulated as run {d.get("simulated_samples_per_s", 0):.0f}/s'
print(f'{sys.argv[2]:<8} {sys.argv[3]:<16} {ep["samples_per_s"]:10.0f} samples/s, loss {ep["loss"]:.4f}{extra}')
for s in d.get("hetpipe", {}).get("stages", []):
    if s.get("used"):
        print(f'    stage {s["stage"]} on {s["device"]}: {s["waves"]} waves, compute {s["compute_seconds"]:.2f} s, '
              f'pull {s["pull_seconds"]:.2f} s (thread {s.get("pull_thread_seconds", 0):.2f}), '
              f'push {s.get("push_seconds", 0):.2f} s (thread {s.get("push_thread_seconds", 0):.2f}), wait {s["wait_seconds"]:.2f} s, '
              f'total {s["total_seconds"]:.2f} s')
PY
  done
done
exit $status
