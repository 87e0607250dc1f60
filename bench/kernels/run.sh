#!/usr/bin/env bash
# Side-by-side training throughput: hetflow kernels vs PyTorch (CPU), same
# model, batch, thread count, data and recipe (see torch_bench.py).
#
#   bench/kernels/run.sh [BUILD_DIR]        (default: build)
#   MODELS="resnet18 vgg11" WIDTH=0.25 MAX_STEPS=40 THREADS="1 2" bench/kernels/run.sh build
#
# Builds nothing: needs BUILD_DIR/bin/kernels_bench (cmake --build BUILD_DIR
# --target kernels_bench) and /usr/bin/python3 with torch. Environment:
#   EPOCHS=1            epochs per run (full Fashion-MNIST epochs, last partial batch dropped)
#   MAX_STEPS=0         training steps per epoch, passed as --max-steps (0 = the whole
#                       epoch); images/s is over these steps only; test accuracy is
#                       still over the whole 10k test set (little meaning after a few steps)
#   MODELS="mlp lenet5" any of mlp lenet5 resnet18 vgg11: torch_bench.py builds the
#                       networks kernels/zoo.cpp builds for 1x28x28 and 10 classes
#   WIDTH=1.0           the zoo's width multiplier (channels, hidden widths), --width
#   THREADS="1 2" BATCH=64
#   DATA=/usr/share/datasets/fashion-mnist
# PyTorch runs twice for each thread count > 1: as specified (OPENBLAS_NUM_THREADS
# = torch threads) and tuned (OPENBLAS_NUM_THREADS=1: its BLAS pool otherwise
# fights its OpenMP pool). Speedups are against the faster of the two.
# kernels_bench runs libgomp passive, as hetflow's nodes do (OMP_WAIT_POLICY
# unset; kernels/cpu/omp_policy.hpp); PyTorch keeps libgomp's default, which
# was faster for it (LeNet-5, 2 threads, 2026-11-28: 7925-9948 images/s
# against 7328-7630 passive).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-build}"
bench="$build/bin/kernels_bench"
[[ -x "$bench" ]] || { echo "run.sh: $bench not found; build it: cmake --build $build --target kernels_bench" >&2; exit 1; }
py=/usr/bin/python3
"$py" -c "import torch" 2>/dev/null || { echo "run.sh: $py has no torch" >&2; exit 1; }
EPOCHS="${EPOCHS:-1}"; MAX_STEPS="${MAX_STEPS:-0}"; WIDTH="${WIDTH:-1.0}"
MODELS="${MODELS:-mlp lenet5}"; THREADS="${THREADS:-1 2}"; BATCH="${BATCH:-64}"
DATA="${DATA:-/usr/share/datasets/fashion-mnist}"

field() { "$py" -c "import json,sys; print(json.loads(sys.stdin.read())['$1'])"; }

echo "# bench/kernels/run.sh $(date -u +%Y-%m-%dT%H:%MZ)"
echo "# machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; oneDNN ISA: see hetflow rows; torch $("$py" -c 'import torch; print(torch.__version__)')"
if (( MAX_STEPS > 0 )); then steps="at most $MAX_STEPS step(s) each"; else steps="whole"; fi
echo "# recipe: Fashion-MNIST, batch $BATCH, SGD momentum 0.9 lr 0.05, $EPOCHS epoch(s) ($steps), drop_last; images/s = training images / training wall time"
echo "# models: $MODELS; width $WIDTH; max steps $MAX_STEPS (0 = whole epochs)"
echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-8s %-3s | %-21s | %-21s | %-21s | %s\n' model thr "hetflow img/s (acc)" "pytorch img/s (acc)" "pytorch tuned (acc)" "speedup"
for m in $MODELS; do
  for t in $THREADS; do
    ours=$(OMP_NUM_THREADS=$t "$bench" --model "$m" --width "$WIDTH" --batch "$BATCH" --threads "$t" --epochs "$EPOCHS" --max-steps "$MAX_STEPS" --data "$DATA" --json)
    theirs=$(OPENBLAS_NUM_THREADS=$t OMP_NUM_THREADS=$t "$py" "$here/torch_bench.py" --model "$m" --width "$WIDTH" --batch "$BATCH" \
             --threads "$t" --epochs "$EPOCHS" --max-steps "$MAX_STEPS" --data "$DATA" --json)
    o_ips=$(field images_per_s <<<"$ours"); o_acc=$(field test_accuracy <<<"$ours")
    p_ips=$(field images_per_s <<<"$theirs"); p_acc=$(field test_accuracy <<<"$theirs")
    best=$p_ips; tuned="-"
    if (( t > 1 )); then
      tuned_json=$(OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=$t "$py" "$here/torch_bench.py" --model "$m" --width "$WIDTH" --batch "$BATCH" \
                   --threads "$t" --epochs "$EPOCHS" --max-steps "$MAX_STEPS" --data "$DATA" --json)
      tu_ips=$(field images_per_s <<<"$tuned_json"); tu_acc=$(field test_accuracy <<<"$tuned_json")
      tuned=$(printf '%8.0f (%.4f)' "$tu_ips" "$tu_acc")
      best=$("$py" -c "print(max($p_ips, $tu_ips))")
    fi
    speed=$("$py" -c "print(f'{$o_ips / $best:.2f}x')")
    printf '%-8s %-3s | %8.0f (%.4f)     | %8.0f (%.4f)     | %-21s | %s\n' "$m" "$t" "$o_ips" "$o_acc" "$p_ips" "$p_acc" "$tuned" "$speed"
  done
done
echo "# hetflow ISA: $(field isa <<<"$ours"); load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
