#!/usr/bin/env bash
# job.kind = "train", strategy "single", through `hetflow run`: the report has
# one entry per epoch with loss, test accuracy and samples/s; SIGINT stops a
# training run within seconds; a CUDA device on a machine without one is a
# clear error.
source "$(dirname "$0")/lib.sh"

topo="$HETFLOW_SCRATCH/train.toml"
write_topology "$topo" 7810 1 auto 'kind = "train"' 'model = "lenet5"' 'epochs = 2' \
  'max_steps_per_epoch = 150' 'batch_size = 64' 'lr_schedule = "cosine"'
timeout 300 "$HETFLOW" run "$topo" --report "$topo.json" >"$topo.out" 2>&1 ||
  { cat "$topo.out"; fail "training run failed"; }
grep -q "epoch 2/2 done: loss" "$topo.out" || { cat "$topo.out"; fail "no per-epoch line"; }
[[ $(json_get "$topo.json" 'len(d["epochs"])') == 2 ]] || fail "report: want 2 epochs"
json_get "$topo.json" 'all(e["samples_per_s"] > 0 and e["loss"] > 0 for e in d["epochs"])' | grep -q True ||
  fail "report: samples_per_s / loss"
acc=$(json_get "$topo.json" 'd["epochs"][-1]["test_accuracy"]')
# 300 steps of LeNet-5 on Fashion-MNIST: far above chance (0.1) when training works.
/usr/bin/env python3 -c "import sys; sys.exit(0 if $acc > 0.7 else 1)" || fail "test accuracy $acc after 300 steps"
pass "train job: 2 epochs, test accuracy $acc"

# The OpenMP wait policy the nodes compute under (kernels/cpu/omp_policy.hpp):
# passive unless the environment sets one, for run's nodes and for a node
# started by hand (which starts itself again with it); a set one is kept.
omp="$HETFLOW_SCRATCH/omp.toml"
write_topology "$omp" 7850 1 auto 'kind = "train"' 'model = "mlp"' 'epochs = 1' 'max_steps_per_epoch = 5' \
  'eval_each_epoch = false'
omp_policy() {  # omp_policy [VAR=VALUE...] CMD...: run it without the two variables but those; the report's policy
  rm -f "$omp.json"
  env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT "$@" >"$omp.out" 2>&1 || { cat "$omp.out" >&2; fail "omp run: $*"; }
  ! grep -q "left at libgomp's default" "$omp.out" || { cat "$omp.out" >&2; fail "omp: the re-exec failed: $*"; }
  json_get "$omp.json" 'd["nodes"][0]["omp_wait_policy"] if "nodes" in d else d["omp_wait_policy"]'
}
[[ $(omp_policy timeout 60 "$HETFLOW" run "$omp" --report "$omp.json") == passive ]] || fail "run: nodes not passive"
[[ $(omp_policy OMP_WAIT_POLICY=active timeout 60 "$HETFLOW" run "$omp" --report "$omp.json") == active ]] ||
  fail "run: OMP_WAIT_POLICY=active not kept"
[[ $(omp_policy GOMP_SPINCOUNT=1000 timeout 60 "$HETFLOW" run "$omp" --report "$omp.json") == \
  "default, GOMP_SPINCOUNT=1000" ]] || fail "run: GOMP_SPINCOUNT=1000 not kept"
[[ $(omp_policy timeout 60 "$HETFLOW" node "$omp" --name n0 --report "$omp.json") == passive ]] ||
  fail "node: not passive"
pass "nodes run OpenMP passive unless the environment says otherwise"

# hetflow profile: one row per unit of the job's model and a total.
"$HETFLOW" profile "$topo" --batch 16 >"$topo.profile" 2>&1 || { cat "$topo.profile"; fail "profile"; }
grep -q "lenet5 on cpu" "$topo.profile" && grep -q " conv1 " "$topo.profile" &&
  grep -q " fc3 " "$topo.profile" && grep -q "^  total: " "$topo.profile" ||
  { cat "$topo.profile"; fail "profile table"; }
"$HETFLOW" devices >"$topo.devices" 2>&1 && grep -q "^cpu: " "$topo.devices" && grep -q "^cuda" "$topo.devices" ||
  { cat "$topo.devices"; fail "devices"; }
pass "profile and devices"

# SIGINT mid-training: exit 130 within a few seconds.
long="$HETFLOW_SCRATCH/long.toml"
write_topology "$long" 7820 1 auto 'kind = "train"' 'model = "mlp"' 'epochs = 100'
start_run "$long" "samples/s" 60
lp=$RUN_PID
kill -INT $lp
wait_exit $lp 15 || { cat "$long.out"; fail "still training 15 s after SIGINT"; }
[[ $WAIT_RC -eq 130 ]] || { cat "$long.out"; fail "SIGINT: exit $WAIT_RC, want 130"; }
pass "SIGINT stops training"

# A cuda device that this machine does not have.
gpu="$HETFLOW_SCRATCH/gpu.toml"
write_topology "$gpu" 7830 1 auto 'kind = "train"'
sed -i 's/^port = 7830$/port = 7830\ndevices = [ { kind = "cuda", index = 7 } ]/' "$gpu"
timeout 30 "$HETFLOW" node "$gpu" --name n0 >"$gpu.out" 2>&1
rc=$?
[[ $rc -eq 2 ]] && grep -q "lists cuda device 7" "$gpu.out" || { cat "$gpu.out"; fail "missing cuda device: exit $rc"; }
pass "a missing cuda device is a clear error"

# [job] precision: bf16 and f16 are cuda-only. validate refuses them for a
# trainer on a cpu device and for other strategies (train_single itself
# refuses a cpu device too: kernels_trainer_test); a wrong value names the
# choices.
prec="$HETFLOW_SCRATCH/prec.toml"
write_topology "$prec" 7840 1 auto 'kind = "train"' 'model = "mlp"' 'epochs = 1' 'max_steps_per_epoch = 5' \
  'precision = "bf16"'
"$HETFLOW" validate "$prec" >"$prec.out" 2>&1 && { cat "$prec.out"; fail "bf16 on a cpu device validated"; }
grep -q 'precision = "bf16" needs a cuda device, but the trainer.s device .* is a cpu device' "$prec.out" ||
  { cat "$prec.out"; fail "bf16 on cpu: no reason"; }
sed -i 's/^precision = "bf16"$/precision = "f16"\nstrategy = "ps"/' "$prec"
"$HETFLOW" validate "$prec" >"$prec.v" 2>&1 && { cat "$prec.v"; fail "f16 with strategy ps validated"; }
grep -q 'precision = "f16" applies to strategy = "single" only' "$prec.v" || { cat "$prec.v"; fail "f16 with ps: no reason"; }
sed -i 's/^precision = "f16"$/precision = "fp8"/' "$prec"
"$HETFLOW" validate "$prec" >"$prec.v" 2>&1 && fail "precision fp8 validated"
grep -q "expected 'f32', 'tf32', 'bf16' or 'f16'" "$prec.v" || { cat "$prec.v"; fail "fp8: no choices"; }
pass "precision bf16/f16 refused off cuda with reasons"
