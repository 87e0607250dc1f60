#!/usr/bin/env bash
# Epoch checkpoints and --resume of strategies "dp" and "single" (issue 9):
#  - an uninterrupted dp run (2 processes) writes every replica's checkpoint
#    after each epoch;
#  - the same job with one node SIGKILLed mid-epoch 2 stops non-zero naming
#    the node; --resume continues after epoch 1 (the newest checkpoint every
#    replica has), trains epochs 2 and 3 with every training row once each,
#    and ends with the uninterrupted run's weights, bit for bit;
#  - `hetflow shell -c checkpoint` mid-epoch: both replicas save after the
#    same step; --resume after a kill continues at that step, bit for bit;
#  - strategy single resumes the same way, also with streamed input;
#    --resume with no checkpoint trains from the start and says so; keys that
#    do not apply are refused.
source "$(dirname "$0")/lib.sh"
S=$HETFLOW_SCRATCH

one_thread() { sed -i -E 's/^(port = [0-9]+)$/\1\ndevices = [ { kind = "cpu", threads = 1 } ]/' "$1"; }

job=('kind = "train"' 'model = "mlp"' 'dataset = "synthetic"' 'input_shape = [1, 12, 12]' 'classes = 5'
  'train_size = 20000' 'test_size = 256' 'batch_size = 32' 'lr = 0.02' 'momentum = 0.9')
dp=('strategy = "dp"' 'dp_split = "equal"')  # measured splits would differ between runs

full="$S/full.toml"
write_topology "$full" 8760 2 auto "${job[@]}" 'epochs = 3' "${dp[@]}" "checkpoint_dir = \"$S/ck-full\""
one_thread "$full"
timeout 300 "$HETFLOW" run "$full" --report "$full.json" >"$full.out" 2>&1 || { cat "$full.out"; fail "uninterrupted run failed"; }
want=$(json_get "$full.json" 'd["weights_checksum"]')
for r in 0 1; do
  for e in 1 2 3; do
    [[ -f "$S/ck-full/replica$r.ckpt-00000000000$e" ]] || { ls "$S/ck-full"; fail "no checkpoint of replica$r after epoch $e"; }
  done
done
pass "uninterrupted dp: checksum $want, checkpoints of both replicas after epochs 1-3"

# The same job; node n1 is SIGKILLed in epoch 2.
cut="$S/cut.toml"
write_topology "$cut" 8770 2 auto "${job[@]}" 'epochs = 3' "${dp[@]}" "checkpoint_dir = \"$S/ck-cut\"" \
  'dp_failover = false'  # the loss stops the job (failover: train_dp_failover.sh)
one_thread "$cut"
"$HETFLOW" run "$cut" >"$cut.out" 2>&1 &
RUN_PID=$!
PIDS+=($RUN_PID)
wait_for_text "$cut.out" "epoch 2/3 step" 120 || { cat "$cut.out"; fail "epoch 2 never started"; }
kill_node_and_wait "$cut" n1 $RUN_PID "$cut.out"
[[ -f "$S/ck-cut/replica1.ckpt-000000000001" && ! -f "$S/ck-cut/replica1.ckpt-000000000003" ]] ||
  { ls "$S/ck-cut"; fail "want replica1's checkpoint after epoch 1 and none after epoch 3"; }
pass "n1 killed in epoch 2: exit $KILL_RC after $KILL_SECS s, naming n1"

timeout 300 "$HETFLOW" run "$cut" --resume --report "$cut.json" >"$cut.resume.out" 2>&1 ||
  { cat "$cut.resume.out"; fail "resumed run failed"; }
grep -q "resumed after epoch [12] from .*replica0.ckpt-" "$cut.resume.out" || { cat "$cut.resume.out"; fail "no resume line"; }
/usr/bin/env python3 - "$cut.json" "$want" <<'PY' || { cat "$cut.resume.out"; fail "resumed run differs"; }
import json, sys
d = json.load(open(sys.argv[1])); want = sys.argv[2]
k = d["resumed_epochs"]
eps = [(e["epoch"], e["samples"]) for e in d["epochs"]]
print(f"resumed after epoch {k}: trained {eps}; checksum {d['weights_checksum']} (uninterrupted {want})")
assert k in (1, 2), k
assert eps == [(e, 20000) for e in range(k + 1, 4)], eps   # every row once in each remaining epoch
assert d["weights_checksum"] == want
PY
pass "resumed dp run: the remaining epochs, every row once, the uninterrupted run's weights"

# On demand, mid-epoch: `hetflow shell -c checkpoint` in epoch 2; both
# replicas save after the same step (replicaN.step.ckpt-<epochs done *
# steps + next step>); n1 SIGKILLed after that; --resume continues at that
# step of epoch 2 and ends on the uninterrupted run's weights, bit for bit.
mid="$S/mid.toml"
write_topology "$mid" 8800 2 auto "${job[@]}" 'epochs = 3' "${dp[@]}" "checkpoint_dir = \"$S/ck-mid\"" \
  'dp_failover = false'
one_thread "$mid"
start_run "$mid" "epoch 2/3 step" 120
"$HETFLOW" shell 127.0.0.1:8800 --topology "$mid" -c checkpoint >"$mid.shell" 2>&1 || { cat "$mid.shell"; fail "mid: shell checkpoint failed"; }
grep -q "^checkpoint after the current step on every replica:" "$mid.shell" &&
  grep -q "^replica0: checkpoint after its current step" "$mid.shell" &&
  grep -q "^replica1: checkpoint after its current step" "$mid.shell" || { cat "$mid.shell"; fail "mid: the shell's answer"; }
for _ in $(seq 1 100); do
  ls "$S/ck-mid" 2>/dev/null | grep -q '^replica1.step.ckpt-' && ls "$S/ck-mid" | grep -q '^replica0.step.ckpt-' && break
  sleep 0.1
done
l0=$(ls "$S/ck-mid" | sed -n 's/^replica0.step.ckpt-0*\([0-9]*\)$/\1/p')
l1=$(ls "$S/ck-mid" | sed -n 's/^replica1.step.ckpt-0*\([0-9]*\)$/\1/p')
[[ -n $l0 && $l0 == "$l1" && $(ls "$S/ck-mid" | grep -c '\.step\.ckpt-') -eq 2 ]] ||
  { ls "$S/ck-mid"; fail "mid: want one step checkpoint of each replica, at the same step ($l0, $l1)"; }
kill_node_and_wait "$mid" n1 $RUN_PID "$mid.out"
timeout 300 "$HETFLOW" run "$mid" --resume --report "$mid.json" >"$mid.resume.out" 2>&1 ||
  { cat "$mid.resume.out"; fail "mid: --resume failed"; }
grep -q "resumed at step [0-9]* of epoch 2 from .*replica0.step.ckpt-" "$mid.resume.out" || { cat "$mid.resume.out"; fail "mid: no resume line"; }
/usr/bin/env python3 - "$mid.json" "$want" "$l0" <<'PY' || { cat "$mid.resume.out"; fail "mid: resumed run differs"; }
import json, sys
d = json.load(open(sys.argv[1])); want = sys.argv[2]; label = int(sys.argv[3])
steps = 625  # 20000 rows / 32
eps = [(e["epoch"], e["samples"]) for e in d["epochs"]]
print(f"checkpoint {label}: resumed at epoch {d['resumed_epochs'] + 1} step {d['resumed_step'] + 1}; epochs {eps}; checksum {d['weights_checksum']} (uninterrupted {want})")
assert d["resumed_epochs"] == 1 and d["resumed_step"] == label - steps and 0 < d["resumed_step"] < steps, d
assert eps == [(2, 20000), (3, 20000)], eps   # epoch 2's books include its steps before the checkpoint
assert d["weights_checksum"] == want
PY
pass "dp, on demand: both replicas saved after step $((l0 - 625)) of epoch 2; --resume from it ends on the uninterrupted run's weights"

# strategy single: drop the newest two checkpoints of a full run; --resume
# trains epochs 2-3 again and gets the same weights.
single="$S/single.toml"
write_topology "$single" 8780 1 auto "${job[@]}" 'epochs = 3' "checkpoint_dir = \"$S/ck-single\""
one_thread "$single"
timeout 300 "$HETFLOW" run "$single" --report "$single.json" >"$single.out" 2>&1 || { cat "$single.out"; fail "single run failed"; }
want1=$(json_get "$single.json" 'd["weights_checksum"]')
rm "$S/ck-single/trainer.ckpt-000000000003" "$S/ck-single/trainer.ckpt-000000000002"
timeout 300 "$HETFLOW" run "$single" --resume --report "$single.r.json" >"$single.r.out" 2>&1 ||
  { cat "$single.r.out"; fail "single --resume failed"; }
json_get "$single.r.json" "d['resumed_epochs'] == 1 and [e['epoch'] for e in d['epochs']] == [2, 3] and d['weights_checksum'] == '$want1'" |
  grep -q True || { cat "$single.r.out" "$single.r.json"; fail "single: resume after epoch 1 differs"; }
pass "single: resumed after epoch 1, the uninterrupted run's weights"

# single, on demand mid-epoch: the trainer saves after its current step;
# the run stopped (SIGINT) and resumed ends on the uninterrupted weights.
smid="$S/smid.toml"
write_topology "$smid" 8805 1 auto "${job[@]}" 'epochs = 3' "checkpoint_dir = \"$S/ck-smid\""
one_thread "$smid"
start_run "$smid" "epoch 2/3 step" 120
"$HETFLOW" shell 127.0.0.1:8805 --topology "$smid" -c checkpoint >"$smid.shell" 2>&1 ||
  { cat "$smid.shell"; fail "single mid: shell checkpoint failed"; }
grep -q "^trainer: checkpoint after its current step" "$smid.shell" || { cat "$smid.shell"; fail "single mid: the answer"; }
for _ in $(seq 1 100); do ls "$S/ck-smid" 2>/dev/null | grep -q '^trainer.step.ckpt-' && break; sleep 0.1; done
ls "$S/ck-smid" | grep -q '^trainer.step.ckpt-' || { ls "$S/ck-smid"; fail "single mid: no step checkpoint"; }
kill -INT "$RUN_PID"
wait_exit "$RUN_PID" 20 || fail "single mid: the run did not stop on SIGINT"
rm -f "$S/ck-smid/trainer.ckpt-000000000002" "$S/ck-smid/trainer.ckpt-000000000003"
timeout 300 "$HETFLOW" run "$smid" --resume --report "$smid.json" >"$smid.resume.out" 2>&1 ||
  { cat "$smid.resume.out"; fail "single mid: --resume failed"; }
json_get "$smid.json" "d['resumed_epochs'] == 1 and d['resumed_step'] > 0 and [e['epoch'] for e in d['epochs']] == [2, 3] and d['weights_checksum'] == '$want1'" |
  grep -q True || { cat "$smid.resume.out" "$smid.json"; fail "single mid: resumed run differs"; }
pass "single, on demand: saved at step $(json_get "$smid.json" 'd["resumed_step"]') of epoch 2; --resume from it ends on the uninterrupted run's weights"

# --resume with no checkpoint: from the start, saying so.
fresh="$S/fresh.toml"
write_topology "$fresh" 8785 1 auto "${job[@]}" 'epochs = 1' "checkpoint_dir = \"$S/ck-none\""
one_thread "$fresh"
timeout 300 "$HETFLOW" run "$fresh" --resume --report "$fresh.json" >"$fresh.out" 2>&1 || { cat "$fresh.out"; fail "fresh --resume failed"; }
grep -q "no checkpoint .* trained from the start" "$fresh.out" || { cat "$fresh.out"; fail "no 'from the start' line"; }
json_get "$fresh.json" 'd["resumed_epochs"] == 0 and len(d["epochs"]) == 1' | grep -q True || fail "fresh: report"
pass "--resume without checkpoints trains from the start"

# Periodic mid-epoch checkpoints (checkpoint_every = 100 steps; 625 steps an
# epoch): both replicas save after steps 100, 200, ... of every epoch, the
# newest 3 of each are kept; both nodes killed at once (SIGKILL, as a power
# cut) in epoch 2 once both replicas have a step checkpoint there; --resume
# continues from the newest step both have and ends on the uninterrupted
# run's weights.
per="$S/per.toml"
write_topology "$per" 8815 2 auto "${job[@]}" 'epochs = 3' "${dp[@]}" "checkpoint_dir = \"$S/ck-per\"" \
  'dp_failover = false' 'checkpoint_every = 100'
one_thread "$per"
start_run "$per" "epoch 2/3 step" 120
newest_step() {  # newest_step R: replica R's newest step-checkpoint label (0: none)
  local n
  n=$(ls "$S/ck-per" 2>/dev/null | sed -n "s/^replica$1.step.ckpt-0*\([0-9]*\)\$/\1/p" | sort -n | tail -1)
  echo "${n:-0}"
}
for i in $(seq 1 300); do
  (( $(newest_step 0) > 625 && $(newest_step 1) > 625 )) && break
  ((i < 300)) || { ls "$S/ck-per"; fail "periodic: no step checkpoint of epoch 2 from both replicas within 30 s"; }
  sleep 0.1
done
pkill -KILL -f -- "node $per --name n[01]" || fail "periodic: no nodes to kill"
wait_exit "$RUN_PID" 10 || { cat "$per.out"; fail "periodic: the run did not end after its nodes were killed"; }
# The newest 3 are kept, and a 4th for a moment: a checkpoint is written
# before the oldest goes, and the kill may fall between the two.
for r in 0 1; do
  n=$(ls "$S/ck-per" | grep -c "^replica$r\.step\.ckpt-")
  ((n >= 1 && n <= 4)) || { ls "$S/ck-per"; fail "periodic: want 1-4 step checkpoints of replica$r kept, got $n"; }
done
resume_and_check "$per" "$want" "resumed at step" "periodic"
/usr/bin/env python3 - "$per.resume.json" <<'PY' || { cat "$per.resume.out"; fail "periodic: resumed where?"; }
import json, sys
d = json.load(open(sys.argv[1]))
eps = [(e["epoch"], e["samples"]) for e in d["epochs"]]
print(f"resumed at epoch {d['resumed_epochs'] + 1} step {d['resumed_step']}; epochs {eps}")
assert d["resumed_epochs"] == 1 and d["resumed_step"] > 0 and d["resumed_step"] % 100 == 0, d
assert eps == [(2, 20000), (3, 20000)], eps
PY
pass "dp, checkpoint_every = 100: both nodes killed in epoch 2; --resume from step $(json_get "$per.resume.json" 'd["resumed_step"]') ends on the uninterrupted run's weights"

# Keys that do not apply.
bad="$S/bad.toml"
write_topology "$bad" 8790 3 auto "${job[@]}" 'epochs = 3' 'input = "stream"' "checkpoint_dir = \"$S/ck-bad\"" \
  'checkpoint_every = 5'
"$HETFLOW" validate "$bad" >"$bad.out" 2>&1 && fail "checkpoint_every with streamed input accepted"
grep -q 'with input = "stream" checkpoints after every epoch only' "$bad.out" || { cat "$bad.out"; fail "checkpoint_every: message"; }
write_topology "$bad" 8790 3 auto "${job[@]}" 'epochs = 3' 'strategy = "ralp"' "checkpoint_dir = \"$S/ck-bad\""
"$HETFLOW" validate "$bad" >"$bad.out" 2>&1 && fail "checkpoint_dir with strategy ralp and no checkpoint_every accepted"
grep -q "set checkpoint_every" "$bad.out" || { cat "$bad.out"; fail "ralp checkpoint_dir: message"; }
pass "checkpoint_every with streamed input, and checkpoint_dir without checkpoint_every with ralp, are refused"

# strategy single with streamed input (the batches come from 2 shards on 2
# other nodes): the same epoch checkpoints; --resume after epoch 1 takes and
# drops the shards' batches of epoch 1 (they replay from the start, checked
# exactly once as if trained on), trains epochs 2-3 and ends on the
# uninterrupted run's weights.
stream="$S/stream.toml"
write_topology "$stream" 8795 3 auto "${job[@]/train_size = 20000/train_size = 4000}" 'epochs = 3' 'input = "stream"' \
  "checkpoint_dir = \"$S/ck-stream\""
one_thread "$stream"
timeout 300 "$HETFLOW" run "$stream" --report "$stream.json" >"$stream.out" 2>&1 || { cat "$stream.out"; fail "streamed single run failed"; }
want2=$(json_get "$stream.json" 'd["weights_checksum"]')
[[ -f "$S/ck-stream/trainer.ckpt-000000000003" ]] || { ls "$S/ck-stream"; fail "no checkpoint of the streamed trainer after epoch 3"; }
rm "$S/ck-stream/trainer.ckpt-000000000003" "$S/ck-stream/trainer.ckpt-000000000002"
timeout 300 "$HETFLOW" run "$stream" --resume --report "$stream.r.json" >"$stream.r.out" 2>&1 ||
  { cat "$stream.r.out"; fail "streamed single --resume failed"; }
/usr/bin/env python3 - "$stream.r.json" "$want2" <<'PY' || { cat "$stream.r.out"; fail "streamed single: resume after epoch 1 differs"; }
import json, sys
d = json.load(open(sys.argv[1])); want = sys.argv[2]
eps = [(e["epoch"], e["samples"]) for e in d["epochs"]]
print(f"resumed after epoch {d['resumed_epochs']}: trained {eps}; checksum {d['weights_checksum']} (uninterrupted {want})")
assert d["resumed_epochs"] == 1 and eps == [(2, 4000), (3, 4000)], eps
assert d["stream"]["exactly_once"] is True, d["stream"]
assert d["weights_checksum"] == want
PY
pass "streamed single: resumed after epoch 1 (epoch 1's batches dropped, exactly once), the uninterrupted run's weights"

# Streamed input: no mid-epoch checkpoint (the shards cannot replay half an epoch); the shell says so.
slong="$S/slong.toml"
write_topology "$slong" 8810 3 auto "${job[@]/train_size = 20000/train_size = 4000}" 'epochs = 400' 'input = "stream"' \
  "checkpoint_dir = \"$S/ck-slong\""
one_thread "$slong"
start_run "$slong" "epoch 2/400" 120
"$HETFLOW" shell 127.0.0.1:8810 --topology "$slong" -c checkpoint >"$slong.shell" 2>&1 && { cat "$slong.shell"; fail "streamed: checkpoint accepted"; }
grep -q 'trainer: input = "stream" checkpoints after every epoch only' "$slong.shell" || { cat "$slong.shell"; fail "streamed: the refusal"; }
kill -INT "$RUN_PID"
wait_exit "$RUN_PID" 20 || fail "streamed: the run did not stop on SIGINT"
pass "streamed single: the shell's checkpoint is refused, saying why"
