#!/usr/bin/env bash
# Every GPU check of the project in one run, for a lent GPU machine with a
# bounded budget: the CUDA probe, the CPU-vs-CUDA parity suite, the CUDA
# training suite, the mixed cpu + cuda jobs (label gpu in CTest), then bench/kernels/gpu_run.sh
# (VGG-16 and ResNet-50 vs PyTorch on the same GPU). Each step has its own
# time limit, so one hang costs only its step; logs go to $OUT (default
# /tmp/hetflow-gpu-session), one file per step.
#
# Here (the GPU machine has none of our Debian libraries):
#   rm -rf build-gpu && mkdir -p build-gpu/bin build-gpu/lib build-gpu/test-bin
#   for f in bin/hetflow bin/cuda_probe_test lib/libhetflow_cuda.so test-bin/actors_hetpipe_cuda_test \
#            test-bin/kernels_cuda_parity_test test-bin/kernels_cuda_training_test; do
#     strip --strip-debug -o build-gpu/$f build/$f; done
#   ../shared/tools/gpu-bundle.sh build-gpu
# There (carry .gpu and build-gpu):
#   bash .gpu/run.sh 'bench/kernels/gpu_session.sh build-gpu'
# Environment: STEPS (timed steps per side in the benchmark, default 30),
# PRECISIONS ([job] precision of each benchmark run, default "tf32"; e.g.
# "tf32 bf16 f16"), REPEATS (benchmark runs each, default 1), MEMCHECK=1 (the parity suite under
# compute-sanitizer too), LIMIT_PARITY, LIMIT_TRAINING, LIMIT_BENCH,
# LIMIT_MEMCHECK, LIMIT_MIXED (seconds per step), PROFILE=0 (skip the profile step),
# BENCH=0 (skip the benchmark).
set -u
build="${1:-build-gpu}"
out="${OUT:-/tmp/hetflow-gpu-session}"
mkdir -p "$out"
nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || echo "gpu_session.sh: nvidia-smi failed" >&2
failed=0
step() {  # step NAME LIMIT COMMAND...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout -k 5 "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "== $name: exit $rc after $((SECONDS - t0)) s (limit $limit s)"
  grep -v "^$" "$out/$name.log" | tail -n 25
  [[ $rc == 0 ]] || failed=1
}
step probe 60 "$build/bin/cuda_probe_test"
# stage_core on the device: overlapped waves against a cpu stage (hetpipe).
step hetpipe-core 120 "$build/test-bin/actors_hetpipe_cuda_test" --color_output=no --log_level=test_suite
step parity "${LIMIT_PARITY:-120}" "$build/test-bin/kernels_cuda_parity_test" --color_output=no --log_level=test_suite
step training "${LIMIT_TRAINING:-180}" "$build/test-bin/kernels_cuda_training_test" --color_output=no --log_level=message
# `hetflow run` of hetpipe and dp jobs with cuda:0 beside a cpu device (CTest's gpu_train_cuda_mixed).
HETFLOW="$(cd "$build" && pwd)/bin/hetflow" HETFLOW_SRC="$(cd "$(dirname "$0")/../.." && pwd)" HETFLOW_SCRATCH="$out/mixed-scratch" \
  step mixed "${LIMIT_MIXED:-300}" bash "$(dirname "$0")/../../test/integration/train_cuda_mixed.sh"
# `hetflow profile` of ResNet-50 on the GPU, on the benchmark's topology.
[[ "${PROFILE:-1}" == 0 ]] ||
  MODELS=resnet50 PROFILE_ONLY=1 step profile 120 bash "$(dirname "$0")/gpu_run.sh" "$build"
[[ "${BENCH:-1}" == 0 ]] && PRECISIONS=none
for p in ${PRECISIONS:-tf32}; do
  [[ $p == none ]] && continue
  for r in $(seq 1 "${REPEATS:-1}"); do
    PRECISION=$p STEPS="${STEPS:-30}" step "bench-$p-$r" "${LIMIT_BENCH:-240}" bash "$(dirname "$0")/gpu_run.sh" "$build"
  done
done
# Optional: our own kernels under compute-sanitizer's memcheck.
if [[ -n "${MEMCHECK:-}" ]] && command -v compute-sanitizer >/dev/null; then
  step memcheck "${LIMIT_MEMCHECK:-180}" compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$build/test-bin/kernels_cuda_parity_test" --color_output=no
fi
exit $failed
