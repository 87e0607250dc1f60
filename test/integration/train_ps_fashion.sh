#!/usr/bin/env bash
# deploy/examples/fashion-lenet-ps.toml (2 workers + 2 PS shards, BSP,
# 3 epochs of LeNet-5 on Fashion-MNIST) reaches the single-device accuracy
# target (>= 0.86) and writes its final checkpoint on both shards.
source "$(dirname "$0")/lib.sh"
t="$HETFLOW_SCRATCH/fashion-lenet-ps.toml"
sed -e "s|^checkpoint_dir = .*|checkpoint_dir = \"$HETFLOW_SCRATCH/ck\"|" \
  -e 's/^port = 7230$/port = 8750/' -e 's/^port = 7231$/port = 8751/' \
  "$HETFLOW_SRC/deploy/examples/fashion-lenet-ps.toml" >"$t"
timeout 1200 "$HETFLOW" run "$t" --report "$t.json" >"$t.out" 2>&1 || { cat "$t.out"; fail "fashion ps run failed"; }
acc=$(json_get "$t.json" 'd["epochs"][-1]["test_accuracy"]')
python3 -c "import sys; sys.exit(0 if $acc >= 0.86 else 1)" || { cat "$t.out"; fail "test accuracy $acc < 0.86"; }
steps=$(json_get "$t.json" 'd["ps"]["workers"][0]["clock"]')
for k in 0 1; do
  [[ -e "$HETFLOW_SCRATCH/ck/ps$k.ckpt-$(printf %012d "$steps")" ]] || { ls "$HETFLOW_SCRATCH/ck"; fail "no final checkpoint of ps$k"; }
done
pass "fashion-lenet-ps: test accuracy $acc, final checkpoints at clock $steps"
