#!/usr/bin/env bash
# `hetflow shell -c checkpoint` on a running HetPipe job (issue 8), strategy
# "hetpipe", 1 VW of 2 stages on 2 processes, Nm = 2, D = 0, lenet5 on
# synthetic data, a checkpoint_dir (so also one checkpoint an epoch):
#  - drained waves: the shell picks a wave L ahead of the fastest stage;
#    both shards (hpps0, hpps1) and both stages (hpstage0, hpstage1) accept
#    and write checkpoint L (if some refuse, the shell asks again further
#    ahead; those that accepted the refused wave write it too, and
#    --resume passes over it); the run ends on the weights of
#    the same job without a checkpoint_dir (a checkpoint changes no wave's
#    weights); --resume (the epoch checkpoints after L removed) restores L,
#    trains only the waves after it and ends
#    on the same weights, bit for bit;
#  - overlapped waves (the default): the same checkpoint is written by all
#    four and --resume from it runs to the end (not bit for bit: the
#    resumed wave L sees wave L - 1, which the running job's overlapped
#    pull of L did not);
#  - without a checkpoint_dir the shards and stages refuse, naming it.
source "$(dirname "$0")/lib.sh"

one_thread() { sed -i -E 's/^(port = [0-9]+)$/\1\ndevices = [ { kind = "cpu", threads = 1 } ]/' "$1"; }
S="$HETFLOW_SCRATCH"
common=('kind = "train"' 'model = "lenet5"' 'dataset = "synthetic"' 'input_shape = [1, 28, 28]'
  'test_size = 400' 'batch_size = 32' 'lr = 0.05' 'train_size = 1280' 'epochs = 4' 'strategy = "hetpipe"'
  'virtual_workers = 1' 'nm = 2')

# on_demand NAME PORT WAVES: runs the job with a checkpoint_dir, asks the
# shell for a checkpoint in epoch 2, waits for the end; sets LABEL.
on_demand() {
  local t="$S/$1.toml"
  write_topology "$t" "$2" 2 auto "${common[@]}" "hetpipe_waves = \"$3\"" "checkpoint_dir = \"$S/ck-$1\"" \
    'hetpipe_drill_jitter = "30ms"'
  one_thread "$t"
  "$HETFLOW" run "$t" --report "$t.json" >"$t.out" 2>&1 &
  RUN_PID=$!
  PIDS+=($RUN_PID)
  wait_for_text "$t.out" "VW 0: epoch 2/4:" 120 || { cat "$t.out"; fail "$1: epoch 2 never began"; }
  "$HETFLOW" shell "127.0.0.1:$2" --topology "$t" -c checkpoint >"$t.shell" 2>&1 ||
    { cat "$t.shell"; fail "$1: shell checkpoint failed"; }
  LABEL=$(sed -n 's/^checkpoint at wave \([0-9]*\) on every HetPipe shard and stage:$/\1/p' "$t.shell")
  [[ -n $LABEL ]] && grep -q "^hpps0: checkpoint at wave $LABEL: written when every virtual worker has pushed wave" "$t.shell" &&
    grep -q "^hpps1: checkpoint at wave $LABEL: written when" "$t.shell" &&
    grep -q "^hpstage0: checkpoint before wave $LABEL (its optimizer state" "$t.shell" &&
    grep -q "^hpstage1: checkpoint before wave $LABEL (its optimizer state" "$t.shell" ||
    { cat "$t.shell"; fail "$1: the shell's answer"; }
  wait_exit $RUN_PID 300 || { cat "$t.out"; fail "$1: the run did not end"; }
  [[ $WAIT_RC -eq 0 ]] || { cat "$t.out"; fail "$1: the run exited $WAIT_RC"; }
  local name
  name=$(printf 'ckpt-%012d' "$LABEL")
  for a in hpps0 hpps1 hpstage0 hpstage1; do
    ls "$S/ck-$1" | grep -q "^$a.$name$" || { ls "$S/ck-$1"; fail "$1: no checkpoint $LABEL of $a"; }
  done
  grep -q "wrote the checkpoint asked for" "$t.out" || { cat "$t.out"; fail "$1: no log line for the written checkpoint"; }
  # The epoch checkpoints after L go, so that --resume takes L.
  local f
  for f in "$S/ck-$1"/*.ckpt-*; do
    (( 10#${f##*ckpt-} > LABEL )) && rm "$f"
  done
  timeout 300 "$HETFLOW" run "$t" --resume --report "$t.resume.json" >"$t.resume.out" 2>&1 ||
    { cat "$t.resume.out"; fail "$1: --resume failed"; }
  grep -q -- "--resume: every stage and shard restores checkpoint $LABEL" "$t.resume.out" ||
    { cat "$t.resume.out"; fail "$1: --resume did not restore $LABEL"; }
  # 40 steps an epoch, 160 minibatches, 80 waves of Nm = 2: the resumed run trains waves L..79.
  json_get "$t.resume.json" "all(st['resumed_wave'] == $LABEL and st['minibatches'] == 160 - 2 * $LABEL for st in d['hetpipe']['stages'])" |
    grep -q True || { cat "$t.resume.out"; fail "$1: the resumed stages' waves"; }
}

plain="$S/plain.toml"
write_topology "$plain" 9010 2 auto "${common[@]}" 'hetpipe_waves = "drain"'
one_thread "$plain"
timeout 300 "$HETFLOW" run "$plain" --report "$plain.json" >"$plain.out" 2>&1 || { cat "$plain.out"; fail "plain run"; }
want=$(json_get "$plain.json" 'd["weights_checksum"]')
on_demand drain 9020 drain
[[ $(json_get "$S/drain.toml.json" 'd["weights_checksum"]') == "$want" ]] ||
  fail "drain: the run with an on-demand checkpoint ends on other weights than the plain run"
[[ $(json_get "$S/drain.toml.resume.json" 'd["weights_checksum"]') == "$want" ]] ||
  fail "drain: resumed from $LABEL, the weights differ from the plain run's"
pass "drained waves: shell checkpoint at wave $LABEL on 2 shards and 2 stages; the run and --resume from it end on the plain run's weights"

on_demand overlap 9030 overlap
acc=$(json_get "$S/overlap.toml.resume.json" 'd["test_accuracy"]')
/usr/bin/env python3 -c "import sys; sys.exit(0 if $acc > 0.6 else 1)" || fail "overlap: resumed test accuracy $acc"
pass "overlapped waves: shell checkpoint at wave $LABEL on 2 shards and 2 stages; --resume from it trains the rest (test accuracy $acc)"

# No checkpoint_dir: refused by every shard and stage, naming the key.
none="$S/none.toml"
write_topology "$none" 9040 2 auto "${common[@]/epochs = 4/epochs = 400}"
one_thread "$none"
start_run "$none" "VW 0: epoch 2/400:" 120
"$HETFLOW" shell 127.0.0.1:9040 --topology "$none" -c checkpoint >"$none.shell" 2>&1 && { cat "$none.shell"; fail "checkpoint without checkpoint_dir succeeded"; }
for a in hpps0 hpstage1; do
  grep -q "$a: checkpoint .*wave [0-9]*: the job has no checkpoint_dir" "$none.shell" || { cat "$none.shell"; fail "no refusal by $a"; }
done
kill -INT "$RUN_PID"
wait_exit "$RUN_PID" 20 || fail "the run did not stop on SIGINT"
pass "no checkpoint_dir: the shards and stages refuse the shell's checkpoint"
