#!/usr/bin/env bash
# strategy "dp" when a replica's node dies (issue 9: a data-parallel
# replica's work is reassigned, no row lost or repeated; [job] dp_failover,
# on by default):
#  1. 3 replicas (n0, n1, n2), n2 SIGKILLed in epoch 2: n0 and n1 go on.
#     The ring drops ring2 (a new generation), the replicas left go back to
#     the latest snapshot they both have (every dp_snapshot_every = 10 steps,
#     and each epoch's start: here one inside epoch 2) and train on from
#     there with the global batch split between the two (the epoch's books
#     restored with it); the job exits 0, names n2, and reports replica2
#     lost, one rollback, 2 replicas at the end, identical weights on the
#     two, and every epoch trained on the whole training set. The losses and
#     accuracy stay those of the uninterrupted 3-replica run within float
#     tolerance (the same global batches; the sums' order differs).
#  2. a hierarchical ring (2 hosts of 2 nodes), snapshots at epoch starts
#     only: losing the node of one host's leader makes the other member
#     there lead; the 3 replicas left redo the epoch and finish.
#  3. two losses one after the other (4 replicas -> 2): generations 1 and 2.
#  4. a loss at start-up, during the speed probe (measured split): the two
#     left regroup before training (no rollback).
#  5. a loss during --resume's agreement on the checkpoint to start from.
# Which nodes may be lost (not replica 0's): registry_test.
# dp_failover = false (the job stops): train_dp.sh and train_dp_resume.sh.
source "$(dirname "$0")/lib.sh"
S=$HETFLOW_SCRATCH

one_thread() { sed -i -E 's/^(port = [0-9]+)$/\1\ndevices = [ { kind = "cpu", threads = 1 } ]/' "$1"; }

job=('kind = "train"' 'model = "mlp"' 'dataset = "synthetic"' 'input_shape = [1, 12, 12]' 'classes = 5'
  'train_size = 20000' 'test_size = 512' 'batch_size = 48' 'lr = 0.0005' 'epochs = 3'
  'strategy = "dp"' 'dp_split = "equal"')

ref="$S/reference.toml"
write_topology "$ref" 9950 3 auto "${job[@]}"
one_thread "$ref"
timeout 300 "$HETFLOW" run "$ref" --report "$ref.json" >"$ref.out" 2>&1 || { cat "$ref.out"; fail "reference run"; }
[[ $(json_get "$ref.json" 'd["replicas_identical"] and d["replicas_lost"] == 0 and d["rollbacks"] == 0') == True ]] ||
  { cat "$ref.json"; fail "reference: identical replicas, none lost, no rollback"; }
pass "reference: 3 replicas, 3 epochs, $(json_get "$ref.json" '[e["loss"] for e in d["epochs"]]')"

cut="$S/cut.toml"
write_topology "$cut" 9960 3 auto "${job[@]}" 'dp_snapshot_every = 10'  # the kill lands after step 20 of epoch 2
one_thread "$cut"
run_and_kill "$cut" n2 "epoch 2/3 step" 120 300
rc=$RUN_RC
[[ $rc -eq 0 ]] || { cat "$cut.out"; fail "the run exited $rc after losing replica node n2, want 0"; }
grep -q "node 'n2'.* is down.*goes on without it" "$cut.out" || { cat "$cut.out"; fail "no line: goes on without n2"; }
grep -q "nodes lost during the job, which finished without them: n2 (exit 137)" "$cut.out" ||
  { cat "$cut.out"; fail "the launcher does not name the lost node"; }
grep -q "ring member 'ring2' (node 'n2') was lost with its node; the ring goes on with 2 members (generation 1)" "$cut.out" ||
  { cat "$cut.out"; fail "no ring member says it dropped ring2"; }
grep -q "replica0: lost replica2; going on as replica 0 of 2" "$cut.out" || { cat "$cut.out"; fail "replica0's regroup line"; }
check() {  # check PYTHON_EXPR MESSAGE
  [[ $(json_get "$cut.json" "$1") == True ]] || { python3 -m json.tool "$cut.json"; fail "report: $2"; }
}
check 'd["status"] == "ok" and d["replicas_lost"] == 1 and d["replicas_identical"]' \
  "status ok, one replica lost, the two left identical"
check 'd["rollbacks"] == 1 and d["replicas_at_end"] == 2' "one rollback, 2 replicas at the end"
check 'd["rolled_back_to"][0]["epoch"] == 2 and d["rolled_back_to"][0]["step"] >= 20 and d["rolled_back_to"][0]["step"] % 10 == 0' \
  "back to a snapshot inside epoch 2 (step >= 20, a multiple of dp_snapshot_every = 10)"
check '[e["epoch"] for e in d["epochs"]] == [1, 2, 3] and all(e["samples"] == 20000 for e in d["epochs"])' \
  "epochs 1-3, each on all 20000 rows"
check '[a["ok"] for a in d["actors"] if a["name"] in ("replica2", "ring2")] == [False, False] and all("lost with node" in a["summary"] for a in d["actors"] if a["name"] in ("replica2", "ring2"))' \
  "replica2 and ring2 reported lost with their node"
check 'all(a["ok"] and a["metrics"]["generation"] == 1 and a["metrics"]["lost"] == ["ring2"] for a in d["actors"] if a["name"] in ("ring0", "ring1"))' \
  "ring0 and ring1: generation 1, ring2 dropped"
# The splits after the loss: 2 replicas, 24 rows each of the global 48.
check 'd["splits"][-1]["rows"] == [24, 24]' "the last epoch split 24/24 between the two left"
/usr/bin/env python3 - "$ref.json" "$cut.json" <<'PY' || fail "the run after the loss drifted from the uninterrupted one"
import json, sys
ref, cut = (json.load(open(p)) for p in sys.argv[1:3])
for a, b in zip(ref["epochs"], cut["epochs"]):
    print(f"epoch {a['epoch']}: loss {a['loss']:.6f} vs {b['loss']:.6f}, test accuracy {a['test_accuracy']:.4f} vs {b['test_accuracy']:.4f}")
    assert abs(a["loss"] - b["loss"]) <= 0.02 * abs(a["loss"]) + 1e-4
    assert abs(a["test_accuracy"] - b["test_accuracy"]) <= 0.03
PY
pass "n2 killed in epoch 2: exit 0 $KILL_TO_EXIT s after the kill; ring re-formed with 2, back to the latest snapshot, every row once per epoch, losses as the uninterrupted run's"

# --- 2. hierarchical ring: the lost node held its host's leader --------------------------------
# n0, n1 on 127.0.0.1 and n2, n3 on 127.0.0.2: each host's first member leads
# (ring0, ring2). Killing n2 makes ring3 its host's leader in the new ring.
hier="$S/hier.toml"
write_topology "$hier" 9970 4 auto "${job[@]}" 'dp_snapshot_every = 0'  # back to the epoch's start
python3 - "$hier" <<'PY'
import re, sys
p = sys.argv[1]; t = open(p).read()
for port in (9972, 9973):
    t = t.replace(f'host = "127.0.0.1"\nport = {port}', f'host = "127.0.0.2"\nport = {port}')
open(p, "w").write(t)
PY
one_thread "$hier"
grep -c '127.0.0.2' "$hier" | grep -qx 2 || { cat "$hier"; fail "hierarchical topology: want n2, n3 on 127.0.0.2"; }
run_and_kill "$hier" n2 "epoch 2/3 step" 120 300
[[ $RUN_RC -eq 0 ]] || { cat "$hier.out"; fail "hierarchical: exit $RUN_RC after losing n2, want 0"; }
[[ $(json_get "$hier.json" 'd["status"] == "ok" and d["replicas_lost"] == 1 and d["replicas_identical"] and d["rollbacks"] == 1 and d["rolled_back_to"] == [{"epoch": 2, "step": 0}] and d["replicas_at_end"] == 3 and all(e["samples"] == 20000 for e in d["epochs"])') == True ]] ||
  { python3 -m json.tool "$hier.json"; fail "hierarchical: report"; }
grep -q "actor 'ring3' finished: .* as leader 1 of 2 hosts" "$hier.out" || { cat "$hier.out"; fail "ring3 did not take over as its host's leader"; }
grep -q "actor 'ring0' finished: .* as leader 0 of 2 hosts, 1 local members" "$hier.out" || { cat "$hier.out"; fail "ring0: leader of n0+n1"; }
pass "hierarchical ring (2 hosts), the leader's node n2 killed: ring3 leads its host now, 3 replicas finish, every row once per epoch"

# --- 3. two losses, one after the other: 4 replicas, n3 dies in epoch 2, n2 in epoch 3 -------------
two="$S/two.toml"
write_topology "$two" 9640 4 auto "${job[@]}" 'dp_snapshot_every = 10'
one_thread "$two"
run_and_kill "$two" n3 "epoch 2/3 step" 120 300 n2 "epoch 3/3 step"
[[ $RUN_RC -eq 0 ]] || { cat "$two.out"; fail "two losses: exit $RUN_RC, want 0"; }
grep -q "ring goes on with 2 members (generation 2)" "$two.out" || { cat "$two.out"; fail "two losses: no generation 2"; }
[[ $(json_get "$two.json" 'd["replicas_lost"] == 2 and d["replicas_identical"] and d["rollbacks"] == 2 and [r["epoch"] for r in d["rolled_back_to"]] == [2, 3] and d["replicas_at_end"] == 2 and all(e["samples"] == 20000 for e in d["epochs"])') == True ]] ||
  { python3 -m json.tool "$two.json"; fail "two losses: report"; }
/usr/bin/env python3 - "$ref.json" "$two.json" <<'PY' || fail "two losses: drifted from the uninterrupted run"
import json, sys
ref, two = (json.load(open(p)) for p in sys.argv[1:3])
for a, b in zip(ref["epochs"], two["epochs"]):
    assert abs(a["loss"] - b["loss"]) <= 0.02 * abs(a["loss"]) + 1e-4, (a["loss"], b["loss"])
PY
pass "two losses (n3 in epoch 2, n2 in epoch 3): generations 1 and 2, back to $(json_get "$two.json" 'd["rolled_back_to"]'), 2 replicas finish, every row once per epoch"

# --- 4. a loss at start-up: n2 dies before the speed probe's sum (measured split) -----------
# HETFLOW_DRILL_DP_START_DELAY holds every replica 3 s between its probe and
# the probe's sum; n2 is killed as rank 0 says it starts. The survivors'
# sums fail, they regroup and sum their speeds again, and train as 2 from
# the first step: no snapshot to go back to, no rollback.
early="$S/early.toml"
early_job=()
for l in "${job[@]}"; do
  case $l in
    'epochs = 3') early_job+=('epochs = 2') ;;
    'dp_split = "equal"') early_job+=('dp_split = "measured"') ;;
    *) early_job+=("$l") ;;
  esac
done
write_topology "$early" 9644 3 auto "${early_job[@]}"
one_thread "$early"
grep -q 'dp_split = "measured"' "$early" && grep -q '^epochs = 2$' "$early" || { cat "$early"; fail "early topology"; }
export HETFLOW_DRILL_DP_START_DELAY=3
run_and_kill "$early" n2 "data parallel: 3 replicas" 60 120
unset HETFLOW_DRILL_DP_START_DELAY
[[ $RUN_RC -eq 0 ]] || { cat "$early.out"; fail "start-up loss: exit $RUN_RC, want 0"; }
grep -q "replica0: lost replica2; going on as replica 0 of 2" "$early.out" || { cat "$early.out"; fail "start-up loss: regroup line"; }
[[ $(json_get "$early.json" 'd["status"] == "ok" and d["replicas_lost"] == 1 and d["replicas_identical"] and d["rollbacks"] == 0 and d["replicas_at_end"] == 2 and [e["epoch"] for e in d["epochs"]] == [1, 2] and all(e["samples"] == 20000 for e in d["epochs"]) and all(len(s["rows"]) == 2 for s in d["splits"])') == True ]] ||
  { python3 -m json.tool "$early.json"; fail "start-up loss: report"; }
pass "a replica's node lost at start-up (during the speed probe): the 2 left regroup before training, no rollback, every row once per epoch"

# --- 5. a loss during --resume's agreement on a checkpoint -----------------------------------
# Epoch 1 of 3 replicas checkpointed; the file then asks for 2 epochs and
# `--resume` starts again with the same start-up delay; n2 dies before the
# agreement's sum: n0 and n1 agree on epoch 1's checkpoint between them and
# train epoch 2 as 2 replicas.
res="$S/resume.toml"
write_topology "$res" 9647 3 auto "${job[@]}" "checkpoint_dir = \"$S/ck\""
sed -i 's/^epochs = 3$/epochs = 1/' "$res"
one_thread "$res"
timeout 300 "$HETFLOW" run "$res" --report "$res.first.json" >"$res.first.out" 2>&1 || { cat "$res.first.out"; fail "resume: the first epoch"; }
sed -i 's/^epochs = 1$/epochs = 2/' "$res"
export HETFLOW_DRILL_DP_START_DELAY=3 RUN_AND_KILL_ARGS=--resume
run_and_kill "$res" n2 "data parallel: 3 replicas" 60 120
unset HETFLOW_DRILL_DP_START_DELAY RUN_AND_KILL_ARGS
[[ $RUN_RC -eq 0 ]] || { cat "$res.out"; fail "resume with a loss: exit $RUN_RC, want 0"; }
[[ $(json_get "$res.json" 'd["status"] == "ok" and d["replicas_lost"] == 1 and d["replicas_identical"] and d["rollbacks"] == 0 and d["replicas_at_end"] == 2 and [e["epoch"] for e in d["epochs"]] == [2] and all(e["samples"] == 20000 for e in d["epochs"])') == True ]] ||
  { python3 -m json.tool "$res.json"; cat "$res.out"; fail "resume with a loss: report"; }
grep -q "resumed after epoch 1" "$res.out" || { cat "$res.out"; fail "resume with a loss: not resumed after epoch 1"; }
pass "a replica's node lost during --resume's agreement: the 2 left agree on epoch 1's checkpoint and train epoch 2"
