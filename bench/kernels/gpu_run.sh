#!/usr/bin/env bash
# GPU training throughput: hetflow's CUDA backend vs PyTorch on the same GPU,
# in the same run: VGG-16 and ResNet-50, synthetic 224x224x3 images, batch
# 64, SGD momentum 0.9, a host batch copied to the GPU each step. Target:
# hetflow >= 0.9x PyTorch's training images/s.
#
#   bench/kernels/gpu_run.sh [BUILD_DIR]      (default: build-cuda)
#
# hetflow side: `hetflow run` of a train job on { kind = "cuda", index = 0 }
# (the real path: actors -> train_single -> the dlopen'ed CUDA module);
# images/s of the last epoch (the first one includes cuDNN's algorithm
# search). PyTorch side: gpu_torch_bench.py (the same networks, written out).
# Needs BUILD_DIR/bin/hetflow and BUILD_DIR/lib/libhetflow_cuda.so, python3
# with torch built for CUDA, and a GPU; exits 2 with a message otherwise.
#
# On the GPU machine (it has none of our Debian libraries), from this
# machine's checkout:
#   mkdir -p build-gpu/bin build-gpu/lib
#   cp build-cuda/bin/hetflow build-gpu/bin/ && cp build-cuda/lib/libhetflow_cuda.so build-gpu/lib/
#   /work/shared/tools/gpu-bundle.sh build-gpu
#   then there (carry .gpu and build-gpu): bash .gpu/run.sh 'bench/kernels/gpu_run.sh build-gpu'
# Environment: MODELS="vgg16 resnet50" BATCH=64 STEPS=30 (timed steps per side)
# PRECISION=tf32 (hetflow's [job] precision: tf32, bf16 or f16; the PyTorch
# side runs its nearest setting, see gpu_torch_bench.py --precision)
# PROFILE_ONLY=1: print `hetflow profile` of each model's job instead.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-build-cuda}"
hetflow="$build/bin/hetflow"
MODELS="${MODELS:-vgg16 resnet50}"; BATCH="${BATCH:-64}"; STEPS="${STEPS:-30}"; PRECISION="${PRECISION:-tf32}"
py="${PYTHON:-python3}"

die() { echo "gpu_run.sh: $*" >&2; exit 2; }
[[ -x "$hetflow" ]] || die "$hetflow not found (build it: cmake --build $build --target hetflow hetflow_cuda)"
[[ -f "$build/lib/libhetflow_cuda.so" ]] || die "$build/lib/libhetflow_cuda.so not found (configure with -DHETFLOW_CUDA=ON)"
devices=$("$hetflow" devices 2>&1) || die "hetflow devices failed: $devices"
grep -q "^cuda 0:" <<<"$devices" || die "no CUDA GPU for hetflow here: $(grep '^cuda' <<<"$devices" || echo "$devices")"
"$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null ||
  die "$py has no torch with CUDA, or torch sees no GPU"

scratch=$(mktemp -d /tmp/hetflow-gpu-bench.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
field() { "$py" -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }

echo "# bench/kernels/gpu_run.sh $(date -u +%Y-%m-%dT%H:%MZ)"
echo "# device: $(grep '^cuda 0:' <<<"$devices" | sed 's/^cuda 0: //')"
echo "# torch $("$py" -c 'import torch; print(torch.__version__, "cuDNN", torch.backends.cudnn.version())')"
echo "# recipe: synthetic 3x224x224, batch $BATCH, SGD momentum 0.9, precision $PRECISION, $STEPS timed steps per side; images/s = training images / training wall time"
printf '%-9s | %-14s | %-14s | %s\n' model "hetflow img/s" "pytorch img/s" "ratio"
status=0
for m in $MODELS; do
  topo="$scratch/$m.toml"
  cat >"$topo" <<TOML
[cluster]
name = "gpu-bench-$m"
[[nodes]]
name = "n0"
host = "127.0.0.1"
port = 7950
devices = [ { kind = "cuda", index = 0 } ]
[job]
kind = "train"
strategy = "single"
model = "$m"
dataset = "synthetic"
input_shape = [3, 224, 224]
classes = 10
train_size = $((BATCH * STEPS))
test_size = $BATCH
epochs = 2
batch_size = $BATCH
optimizer = "sgd"
lr = 0.01
momentum = 0.9
eval_each_epoch = false
precision = "$PRECISION"
TOML
  if [[ -n "${PROFILE_ONLY:-}" ]]; then
    "$hetflow" profile "$topo" || status=1
    continue
  fi
  if ! "$hetflow" run "$topo" --report "$topo.json" >"$topo.out" 2>&1; then
    echo "gpu_run.sh: hetflow failed on $m:" >&2; tail -20 "$topo.out" >&2; status=1; continue
  fi
  ours=$(field "$topo.json" 'd["epochs"][-1]["samples_per_s"]') ||
    { echo "gpu_run.sh: no epochs in $topo.json" >&2; status=1; continue; }
  theirs_json=$("$py" "$here/gpu_torch_bench.py" --model "$m" --batch "$BATCH" --steps "$STEPS" \
                 --precision "$PRECISION" --json) ||
    { echo "gpu_run.sh: PyTorch failed on $m" >&2; status=1; continue; }
  theirs=$("$py" -c "import json,sys; print(json.loads(sys.argv[1])['images_per_s'])" "$theirs_json")
  ratio=$("$py" -c "print(f'{$ours / $theirs:.2f}x')")
  printf '%-9s | %14.1f | %14.1f | %s\n' "$m" "$ours" "$theirs" "$ratio"
done
exit $status
