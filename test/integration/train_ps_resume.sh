#!/usr/bin/env bash
# Checkpoints and --resume of strategy "ps" (issue 6):
#  - an uninterrupted BSP run (2 workers, 2 shards, 2 processes) writes
#    checkpoints every 7 clocks and at the end;
#  - the same job killed (SIGKILL to `hetflow run`, so its nodes die too)
#    mid-epoch after a few checkpoints, then started with --resume, continues
#    from the newest checkpoint complete on both shards and ends with the
#    uninterrupted run's weights, bit for bit (same checksum), having trained
#    exactly the remaining steps (no row lost or repeated);
#  - --resume with no checkpoint at all starts from scratch, saying so;
#  - `hetflow shell -c checkpoint` on a job without checkpoint_every: both
#    shards write one more checkpoint at the clock the shell picked; with the
#    final checkpoint removed, --resume continues from it and ends with the
#    uninterrupted run's weights, bit for bit.
source "$(dirname "$0")/lib.sh"

one_thread() { sed -i -E 's/^(port = [0-9]+)$/\1\ndevices = [ { kind = "cpu", threads = 1 } ]/' "$1"; }

job=('kind = "train"' 'strategy = "ps"' 'model = "lenet5"' 'dataset = "synthetic"' 'input_shape = [1, 28, 28]'
  'train_size = 6400' 'test_size = 200' 'batch_size = 32' 'lr = 0.02' 'momentum = 0.9'
  'lr_schedule = "cosine"' 'eval_each_epoch = false' 'checkpoint_every = 7'
  'width = 3.0')  # wide enough that a run lasts seconds: the kill must land mid-run

full="$HETFLOW_SCRATCH/full.toml"
write_topology "$full" 8710 2 auto "${job[@]}" 'epochs = 2' "checkpoint_dir = \"$HETFLOW_SCRATCH/ck-full\""
one_thread "$full"
timeout 300 "$HETFLOW" run "$full" --report "$full.json" >"$full.out" 2>&1 || { cat "$full.out"; fail "uninterrupted run failed"; }
want=$(json_get "$full.json" 'd["weights_checksum"]')
ls "$HETFLOW_SCRATCH/ck-full" | grep -q '^ps0.ckpt-000000000200$' || { ls "$HETFLOW_SCRATCH/ck-full"; fail "no final checkpoint (clock 200)"; }
pass "uninterrupted: checksum $want, checkpoints $(ls "$HETFLOW_SCRATCH/ck-full" | tr '\n' ' ')"

# The same job, killed after the shards passed clock 49 (mid-epoch 1: an
# epoch is 100 clocks per worker).
cut="$HETFLOW_SCRATCH/cut.toml"
write_topology "$cut" 8720 2 auto "${job[@]}" 'epochs = 2' "checkpoint_dir = \"$HETFLOW_SCRATCH/ck-cut\""
one_thread "$cut"
"$HETFLOW" run "$cut" >"$cut.out" 2>&1 &
RUN_PID=$!
PIDS+=($RUN_PID)
t=0
until [[ -e "$HETFLOW_SCRATCH/ck-cut/ps0.ckpt-000000000056" && -e "$HETFLOW_SCRATCH/ck-cut/ps1.ckpt-000000000056" ]]; do
  sleep 0.05
  t=$((t + 1))
  ((t > 2400)) && { cat "$cut.out"; fail "no checkpoint 56 within 120 s"; }
  kill -0 $RUN_PID 2>/dev/null || { cat "$cut.out"; fail "the run ended before it could be killed"; }
done
kill -9 $RUN_PID
wait $RUN_PID 2>/dev/null
# Its nodes die with the launcher; wait until they are gone (ports free).
for i in $(seq 1 100); do
  pgrep -f -- "node $cut" >/dev/null || break
  sleep 0.1
done
pgrep -f -- "node $cut" >/dev/null && fail "nodes of the killed run still alive"
last=$(ls "$HETFLOW_SCRATCH/ck-cut" | grep '^ps0.ckpt-' | sort | tail -1)
[[ "$last" != "ps0.ckpt-000000000200" ]] || fail "the run finished before the kill"
pass "killed after $last"

timeout 300 "$HETFLOW" run "$cut" --resume --report "$cut.json" >"$cut.resume.out" 2>&1 ||
  { cat "$cut.resume.out"; fail "resumed run failed"; }
grep -q "resuming from checkpoint" "$cut.resume.out" || { cat "$cut.resume.out"; fail "no resume line"; }
/usr/bin/env python3 - "$cut.json" "$want" <<'PY' || { cat "$cut.resume.out"; fail "resumed run differs"; }
import json, sys
d = json.load(open(sys.argv[1])); want = sys.argv[2]
ws = d["ps"]["workers"]
label = ws[0]["resumed_from"]
print(f"resumed from {label}: steps {[w['steps'] for w in ws]} from clocks {[w['start_clock'] for w in ws]} "
      f"to {[w['clock'] for w in ws]}; checksum {d['weights_checksum']} (uninterrupted {want})")
assert label is not None and label >= 56 and label % 100 != 0, label   # mid-epoch
assert all(w["start_clock"] == label and w["clock"] == 200 and w["steps"] == 200 - label for w in ws)
assert all(s["restored_from"] == label for s in d["ps"]["shards"])
assert d["weights_checksum"] == want
PY
pass "killed mid-epoch and resumed: the uninterrupted run's weights"

# SSP(3): a fast worker runs ahead of the checkpoint; the shards hold its
# later pushes until the checkpoint is written, so every checkpoint is the
# same cut on both shards and the resumed run trains exactly the remaining
# steps (weights are not compared: ssp applies pushes in arrival order).
ssp="$HETFLOW_SCRATCH/ssp.toml"
write_topology "$ssp" 8740 2 auto "${job[@]}" 'epochs = 2' 'consistency = "ssp"' 'staleness = 3' \
  "checkpoint_dir = \"$HETFLOW_SCRATCH/ck-ssp\""
one_thread "$ssp"
"$HETFLOW" run "$ssp" >"$ssp.out" 2>&1 &
RUN_PID=$!
PIDS+=($RUN_PID)
t=0
until [[ -e "$HETFLOW_SCRATCH/ck-ssp/ps0.ckpt-000000000056" && -e "$HETFLOW_SCRATCH/ck-ssp/ps1.ckpt-000000000056" ]]; do
  sleep 0.05
  t=$((t + 1))
  ((t > 2400)) && { cat "$ssp.out"; fail "ssp: no checkpoint 56 within 120 s"; }
  kill -0 $RUN_PID 2>/dev/null || { cat "$ssp.out"; fail "ssp: the run ended before it could be killed"; }
done
kill -9 $RUN_PID
wait $RUN_PID 2>/dev/null
for i in $(seq 1 100); do
  pgrep -f -- "node $ssp" >/dev/null || break
  sleep 0.1
done
timeout 300 "$HETFLOW" run "$ssp" --resume --report "$ssp.json" >"$ssp.resume.out" 2>&1 ||
  { cat "$ssp.resume.out"; fail "ssp: resumed run failed"; }
/usr/bin/env python3 - "$ssp.json" <<'PY' || { cat "$ssp.resume.out"; fail "ssp: resumed run lost or repeated steps"; }
import json, sys
d = json.load(open(sys.argv[1]))
ws, ss = d["ps"]["workers"], d["ps"]["shards"]
label = ws[0]["resumed_from"]
print(f"ssp resumed from {label}: steps {[w['steps'] for w in ws]}, shard updates {[s['updates'] for s in ss]}, "
      f"max staleness {[w['max_staleness'] for w in ws]}, test accuracy {d['epochs'][-1]['test_accuracy']}")
assert label is not None and label >= 56
assert all(w["start_clock"] == label and w["steps"] == 200 - label and w["clock"] == 200 for w in ws)
assert all(s["updates"] == 2 * (200 - label) for s in ss)
assert all(w["max_staleness"] <= 3 for w in ws)
PY
pass "ssp: killed and resumed, exactly the remaining steps"

# --resume without checkpoints: from scratch, with a warning.
fresh="$HETFLOW_SCRATCH/fresh.toml"
write_topology "$fresh" 8730 2 auto "${job[@]}" "checkpoint_dir = \"$HETFLOW_SCRATCH/ck-fresh\"" 'epochs = 1' \
  'max_steps_per_epoch = 20'
one_thread "$fresh"
timeout 300 "$HETFLOW" run "$fresh" --resume --report "$fresh.json" >"$fresh.out" 2>&1 || { cat "$fresh.out"; fail "fresh --resume failed"; }
grep -q "no checkpoint is complete on every PS shard" "$fresh.out" || { cat "$fresh.out"; fail "no from-scratch warning"; }
pass "--resume with no checkpoint starts from scratch"

# On demand: `hetflow shell -c checkpoint` while worker 1 sleeps before clock 30.
od="$HETFLOW_SCRATCH/ondemand.toml"
od_job=()
for l in "${job[@]}"; do [[ $l == checkpoint_every* ]] || od_job+=("$l"); done
write_topology "$od" 8745 2 auto "${od_job[@]}" 'epochs = 2' "checkpoint_dir = \"$HETFLOW_SCRATCH/ck-od\"" \
  'ps_drill_worker = 1' 'ps_drill_clock = 30' 'ps_drill_delay = "4s"'
one_thread "$od"
"$HETFLOW" run "$od" --report "$od.json" >"$od.out" 2>&1 &
RUN_PID=$!
PIDS+=($RUN_PID)
wait_for_text "$od.out" "psworker1: fault drill: sleeping" 120 || { cat "$od.out"; fail "on demand: the drill never started"; }
"$HETFLOW" shell 127.0.0.1:8745 --topology "$od" -c checkpoint >"$od.shell" 2>&1 || { cat "$od.shell"; fail "on demand: shell checkpoint failed"; }
label=$(sed -n 's/^checkpoint at clock \([0-9]*\) on every PS shard:$/\1/p' "$od.shell")
[[ -n $label ]] && grep -q "^ps0: checkpoint at clock $label when the global clock reaches it" "$od.shell" &&
  grep -q "^ps1: checkpoint at clock $label when the global clock reaches it" "$od.shell" ||
  { cat "$od.shell"; fail "on demand: the shell's answer"; }
wait_exit $RUN_PID 300 || { cat "$od.out"; fail "on demand: the run did not end"; }
[[ $WAIT_RC -eq 0 ]] || { cat "$od.out"; fail "on demand: the run exited $WAIT_RC"; }
name=$(printf 'ckpt-%012d' "$label")
ls "$HETFLOW_SCRATCH/ck-od" | grep -q "^ps0.$name$" && ls "$HETFLOW_SCRATCH/ck-od" | grep -q "^ps1.$name$" ||
  { ls "$HETFLOW_SCRATCH/ck-od"; fail "on demand: no checkpoint $label on both shards"; }
[[ $(ls "$HETFLOW_SCRATCH/ck-od" | grep -c 'ckpt-') -eq 4 ]] ||
  { ls "$HETFLOW_SCRATCH/ck-od"; fail "on demand: want checkpoint $label and the final one, on both shards"; }
[[ $(json_get "$od.json" 'd["weights_checksum"]') == "$want" ]] || fail "on demand: the run's weights differ from the uninterrupted run's"
rm "$HETFLOW_SCRATCH/ck-od/"ps[01].ckpt-000000000200
resume_and_check "$od" "$want" "restored checkpoint $label" "on demand, resumed from clock $label"
pass "shell checkpoint: both shards wrote clock $label; --resume from it ends with the uninterrupted weights"
