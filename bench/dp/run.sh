#!/usr/bin/env bash
# Data-parallel training throughput: hetflow's `train` job with strategy "dp"
# against PyTorch DistributedDataParallel over gloo (ddp_lenet.py), LeNet-5 on
# Fashion-MNIST, 2 processes on this host, 1 thread each, the same batch per
# replica, measured in the same run.
#
#   bench/dp/run.sh [BUILD_DIR]        (default: build)
#   REPEATS=3      rounds; each round runs hetflow once, then DDP once
#   STEPS=300      timed training steps per run
#   B=32           batch per replica (global batch 2*B)
#   QUIET_MAX=300  seconds to wait for a quiet machine before each measurement
#
# hetflow: `hetflow run` of a generated topology: 2 nodes on 127.0.0.1 (ports
# 7990, 7991; data_plane "auto"), each `devices = [ { kind = "cpu", threads =
# 1 } ]`; job train, strategy "dp", dp_split "equal", model lenet5, dataset
# fashion-mnist (/usr/share/datasets/fashion-mnist), batch_size 2*B, sgd lr
# 0.05 momentum 0.9, epochs 1, max_steps_per_epoch STEPS, eval_each_epoch
# false. images/s = the report's epochs[0].samples_per_s: rank 0's STEPS * 2B
# / the epoch's training wall time (kernels/trainer.cpp: from the first step,
# no warm-up, to the last optimizer step; each step copies the replica's B
# rows of the global batch, runs forward + loss + backward on them, sums gradients
# in buckets started as backward produces them (LeNet-5: one bucket, with the
# step's loss/accuracy), optimizer step). The allreduce share =
# allreduce_seconds (how long rank 0 waited for the sums after its backward,
# waits for the slower replica included) / train_seconds.
# Node start-up, data loading and evaluation are not timed.
# DDP: ddp_lenet.py --steps STEPS --batch B: the same model, loss, optimizer,
# normalisation and split of each shuffled global batch; 5 untimed warm-up
# steps, then STEPS steps on rank 0's clock, each = index_select of the rank's
# B rows, forward, loss, backward (DDP's gloo all-reduce over TCP loopback),
# optimizer step, loss.item(). images/s = STEPS * 2B / seconds.
# A cell is the median of the REPEATS runs [min-max]; ratio = hetflow median
# / DDP median (> 1: hetflow is faster).
# Needs: deploy/setup.sh --bench (python3-torch for Debian's /usr/bin/python3),
# a built tree, the Fashion-MNIST IDX files (dataset-fashion-mnist).
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$src/build}
hetflow=$build/bin/hetflow
steps=${STEPS:-300}
b=${B:-32}
repeats=${REPEATS:-3}
data=/usr/share/datasets/fashion-mnist
[[ -x $hetflow ]] || { echo "no $hetflow: build the tree first" >&2; exit 2; }
/usr/bin/python3 -c "import torch.distributed as d; assert d.is_gloo_available()" 2>/dev/null ||
  { echo "/usr/bin/python3 cannot import torch (with gloo): run deploy/setup.sh --bench" >&2; exit 2; }
[[ -f $data/train-images-idx3-ubyte.gz ]] || { echo "no Fashion-MNIST under $data: run deploy/setup.sh" >&2; exit 2; }
(( steps * 2 * b <= 60000 )) || { echo "STEPS * 2B must fit in one epoch of 60000 samples" >&2; exit 2; }
work=$(mktemp -d /tmp/hetflow-dp-XXXXXX)
trap 'rm -rf "$work"' EXIT

source "$src/bench/lib.sh"  # wait_quiet

topo=$work/dp-lenet.toml
{
  echo '[cluster]'
  echo 'name = "bench-dp-lenet"'
  for i in 0 1; do
    printf '[[nodes]]\nname = "n%d"\nhost = "127.0.0.1"\nport = %d\n' "$i" $((7990 + i))
    echo 'devices = [ { kind = "cpu", threads = 1 } ]'
  done
  echo '[job]'
  echo 'kind = "train"'
  echo 'strategy = "dp"'
  echo 'dp_split = "equal"'
  echo 'model = "lenet5"'
  echo 'dataset = "fashion-mnist"'
  echo "data_dir = \"$data\""
  echo "batch_size = $((2 * b))"
  echo 'optimizer = "sgd"'
  echo 'lr = 0.05'
  echo 'momentum = 0.9'
  echo 'epochs = 1'
  echo "max_steps_per_epoch = $steps"
  echo 'eval_each_epoch = false'
} >"$topo"

ours="" share="" theirs=""
for round in $(seq 1 "$repeats"); do
  echo "round $round: hetflow..." >&2
  wait_quiet
  "$hetflow" run "$topo" --report "$work/r$round.json" >"$work/r$round.log" 2>&1 ||
    { cat "$work/r$round.log"; echo "hetflow run failed (round $round)" >&2; exit 1; }
  read -r ips sh < <(/usr/bin/python3 -c "
import json, sys; d=json.load(open('$work/r$round.json'))
assert d['replicas_identical'], 'replicas differ'
assert d['splits'][0]['rows'] == [$b, $b], d['splits']
e=d['epochs'][0]
assert e['samples'] == $steps * 2 * $b, e
print('%.1f %.4f' % (e['samples_per_s'], d['allreduce_seconds'] / e['train_seconds']))")
  ours+="$ips " share+="$sh "
  echo "round $round: DDP..." >&2
  wait_quiet
  /usr/bin/python3 "$src/bench/dp/ddp_lenet.py" --steps "$steps" --batch "$b" >"$work/ddp$round.out" 2>&1 ||
    { cat "$work/ddp$round.out"; echo "DDP run failed (round $round)" >&2; exit 1; }
  ips=$(awk '$1 == "ddp" && $2 == "images_per_s" {print $3}' "$work/ddp$round.out")
  [[ -n $ips ]] || { cat "$work/ddp$round.out"; echo "no images_per_s line from ddp_lenet.py" >&2; exit 1; }
  theirs+="$ips "
done

stats() {  # median [min-max] of a list of numbers
  /usr/bin/python3 -c "
import sys, statistics; v=[float(x) for x in sys.argv[1:]]
print('%.0f [%.0f-%.0f]' % (statistics.median(v), min(v), max(v)))" $1
}
med() { /usr/bin/python3 -c "import sys, statistics; print(statistics.median(float(x) for x in sys.argv[1:]))" $1; }

mo=$(med "$ours") mt=$(med "$theirs") ms=$(med "$share")
echo
echo "DP LeNet-5 on Fashion-MNIST, 2 processes x 1 thread, $(nproc) cores, $(date -u +%Y-%m-%d), REPEATS=$repeats, $steps timed steps"
echo "DDP: torch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)'), gloo over TCP loopback, 5 warm-up steps; hetflow: data_plane auto, no warm-up"
[[ $noisy == 1 ]] && echo "(the machine was not quiet for some measurements)"
echo
echo "| batch per replica | hetflow images/s | DDP (gloo) images/s | hetflow / DDP | hetflow allreduce share |"
echo "|---|---|---|---|---|"
echo "| $b | $(stats "$ours") | $(stats "$theirs") | $(awk "BEGIN{printf \"%.2fx\", $mo/$mt}") | $(awk "BEGIN{printf \"%.0f%%\", 100*$ms}") |"
