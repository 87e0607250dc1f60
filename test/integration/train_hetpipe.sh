#!/usr/bin/env bash
# job.kind = "train", strategy "hetpipe" (issue 7): pipeline stages, virtual
# workers and WSP parameter servers, through `hetflow run`, on the synthetic
# dataset with lenet5:
#  - 1 VW of 2 stages on 2 processes with Nm = 1 trains exactly what
#    single-device training trains (same weights checksum, same losses,
#    the same test accuracy after every epoch: eval_each_epoch);
#    (with the default overlapped waves: each wave's pull holds the waves
#    <= w - 2 and the stage adds its own wave w - 1);
#  - drained waves (hetpipe_waves = "drain"): Nm = 2 minibatches in flight
#    through 2 stages end on the weights of the same waves run on 1 stage
#    (the pipeline is exact); 2 VWs (allocation np: one per node) of 2
#    stages, Nm = 1, D = 0, plain SGD train what strategy ps (bsp, 2
#    workers) trains;
#  - 2 VWs with Nm = 2 and D = 0, overlapped: two runs end on the same
#    weights (WSP with D = 0 is deterministic), one push per stage per wave,
#    clock distance <= D + 1; with D = 1 and random delays the VWs stay
#    within D + 1 = 2 waves of each other, and it converges;
#  - `hetflow shell` pause / resume of a stage holds / releases its waves,
#    and `set staleness 2` changes both shards' bound;
#  - a stage's node killed mid-run: the run exits non-zero within 10 s
#    naming it (no hang);
#  - batch norm (resnet18) through 2 stages = single device, running
#    statistics included; 2 VWs evaluate with averaged statistics;
#  - checkpoints: a stage's node killed, --resume ends on the uninterrupted
#    run's weights bit for bit (D = 0);
#  - strategy auto: run decides and runs it; a lone node needs --strategy.
source "$(dirname "$0")/lib.sh"

one_thread() { sed -i -E 's/^(port = [0-9]+)$/\1\ndevices = [ { kind = "cpu", threads = 1 } ]/' "$1"; }
two_devices() {
  sed -i -E 's/^(port = [0-9]+)$/\1\ndevices = [ { kind = "cpu", index = 0, threads = 1 }, { kind = "cpu", index = 1, threads = 1 } ]/' "$1"
}

common=('kind = "train"' 'model = "lenet5"' 'dataset = "synthetic"' 'input_shape = [1, 28, 28]'
  'test_size = 400' 'batch_size = 32' 'lr = 0.05' 'train_size = 1280')

run_job() {  # run_job TOPO WHAT
  timeout 300 "$HETFLOW" run "$1" --report "$1.json" >"$1.out" 2>&1 || { cat "$1.out"; fail "$2 failed"; }
}

# --- 1 VW of 2 stages, Nm = 1 == single device
single="$HETFLOW_SCRATCH/single.toml"
write_topology "$single" 8910 1 auto "${common[@]}" 'epochs = 2'
one_thread "$single"
run_job "$single" "single-device run"
hp1="$HETFLOW_SCRATCH/hp1.toml"
write_topology "$hp1" 8920 2 auto "${common[@]}" 'epochs = 2' 'strategy = "hetpipe"' 'virtual_workers = 1' 'nm = 1'
one_thread "$hp1"
run_job "$hp1" "1-VW hetpipe run"
grep -q "HetPipe: 1 virtual worker(s) (ed), Nm = 1, D = 0" "$hp1.out" || { cat "$hp1.out"; fail "no HetPipe plan line"; }
# No profile_file: the head times the link to the other node and plans with
# it (or, when noise hid the difference of the two sizes, says so and keeps
# the assumed link: a loaded machine).
link="hetpipe: links: n0 -> n1 \(this machine\): [0-9.]+ MB in [0-9.]+ ms, 4 B in [0-9.]+ ms \(round trips\)"
if grep -Eq "$link; between nodes: [0-9.]+ Gb/s$" "$hp1.out"; then
  json_get "$hp1.json" '"links between nodes measured: " in d["profile_source"] and float(d["profile_source"].split("links between nodes measured: ")[1].split(" ")[0]) > 0' |
    grep -q True || { python3 -m json.tool "$hp1.json" | head -40; fail "the report's profile_source has no measured link"; }
elif grep -Eq "$link, not resolved; the assumed [0-9.]+ Gb/s between nodes kept$" "$hp1.out"; then
  echo "note: the link probe could not resolve the link on this run (noise); the assumed link was kept"
  json_get "$hp1.json" '"links between nodes assumed: " in d["profile_source"]' | grep -q True ||
    { python3 -m json.tool "$hp1.json" | head -40; fail "the report's profile_source does not say the link was assumed"; }
else
  cat "$hp1.out"; fail "no line with the link probe"
fi
/usr/bin/env python3 - "$single.json" "$hp1.json" <<'PY' || { cat "$hp1.out"; fail "1-VW hetpipe (Nm = 1) does not match single-device training"; }
import json, sys
s, h = (json.load(open(f)) for f in sys.argv[1:3])
assert h["strategy"] == "hetpipe" and h["nm"] == 1 and h["hetpipe_waves"] == "overlap", h
st = h["virtual_workers"][0]["stages"]
assert len(st) == 2 and st[0]["first_unit"] == 0 and st[1]["last_unit"] == 7 and st[0]["last_unit"] + 1 == st[1]["first_unit"], st
for a, b in zip(s["epochs"], h["epochs"]):
    print(f"epoch {a['epoch']}: loss single {a['loss']:.9f} hetpipe {b['loss']:.9f}; samples {a['samples']} {b['samples']}")
    assert a["samples"] == b["samples"]
    assert abs(a["loss"] - b["loss"]) <= 1e-6 * a["loss"], (a["loss"], b["loss"])
    # eval_each_epoch: the head evaluates the shards' weights after each epoch's waves.
    print(f"  test accuracy single {a['test_accuracy']} hetpipe {b['test_accuracy']}")
    assert b["test_accuracy"] is not None and abs(a["test_accuracy"] - b["test_accuracy"]) < 1e-9
print("checksums", s["weights_checksum"], h["weights_checksum"], "test accuracy", s["epochs"][-1]["test_accuracy"], h["test_accuracy"])
assert s["weights_checksum"] == h["weights_checksum"]
stages = h["hetpipe"]["stages"]
used = [x for x in stages if x["used"]]
assert len(used) == 2 and all(x["minibatches"] == 80 and x["waves"] == 80 for x in used), used
PY
pass "1 VW, 2 stages on 2 processes, Nm = 1: the single-device weights bit for bit"

# --- batch norm (resnet18): 1 VW of 2 stages, Nm = 1 == single device,
# running statistics included (the weights files hold them); 2 VWs average
# theirs for the final evaluation
bn_common=('kind = "train"' 'model = "resnet18"' 'width = 0.25' 'dataset = "synthetic"' 'input_shape = [1, 28, 28]'
  'train_size = 320' 'test_size = 96' 'batch_size = 32' 'lr = 0.05' 'epochs = 1' 'classes = 10')
bns="$HETFLOW_SCRATCH/bn_single.toml"
write_topology "$bns" 8985 1 auto "${bn_common[@]}" "save_weights = \"$HETFLOW_SCRATCH/bn_single.bin\""
one_thread "$bns"
run_job "$bns" "resnet18 single-device run"
bnh="$HETFLOW_SCRATCH/bn_hp.toml"
write_topology "$bnh" 8987 2 auto "${bn_common[@]}" 'strategy = "hetpipe"' 'virtual_workers = 1' 'nm = 1' \
  "save_weights = \"$HETFLOW_SCRATCH/bn_hp.bin\""
one_thread "$bnh"
run_job "$bnh" "resnet18 1-VW hetpipe run"
cmp "$HETFLOW_SCRATCH/bn_single.bin" "$HETFLOW_SCRATCH/bn_hp.bin" ||
  { cat "$bnh.out"; fail "resnet18 through 2 stages: weights or running statistics differ from single-device training"; }
# ... and a resumed run restores them: --resume after the end retrains the
# waves after the newest checkpoint and ends on the same file
bnc="$HETFLOW_SCRATCH/bn_ck.toml"
write_topology "$bnc" 8997 2 auto "${bn_common[@]}" 'strategy = "hetpipe"' 'virtual_workers = 1' 'nm = 1' \
  "checkpoint_dir = \"$HETFLOW_SCRATCH/bn-ck\"" 'checkpoint_every = 3' "save_weights = \"$HETFLOW_SCRATCH/bn_ck_a.bin\""
one_thread "$bnc"
run_job "$bnc" "resnet18 hetpipe run with checkpoints"
sed -i 's/bn_ck_a.bin/bn_ck_b.bin/' "$bnc"
timeout 300 "$HETFLOW" run "$bnc" --resume --report "$bnc.json" >"$bnc.out" 2>&1 || { cat "$bnc.out"; fail "resnet18 --resume failed"; }
grep -q "every stage and shard restores checkpoint 9" "$bnc.out" || { cat "$bnc.out"; fail "resnet18 --resume: not from wave 9"; }
cmp "$HETFLOW_SCRATCH/bn_ck_a.bin" "$HETFLOW_SCRATCH/bn_ck_b.bin" ||
  { cat "$bnc.out"; fail "resnet18 --resume: weights or running statistics differ"; }
bn2="$HETFLOW_SCRATCH/bn_hp2.toml"
write_topology "$bn2" 8995 2 auto "${bn_common[@]/epochs = 1/epochs = 4}" 'strategy = "hetpipe"' 'allocation = "np"' 'nm = 2'
sed -i 's/^lr = 0.05$/lr = 0.02/' "$bn2"
one_thread "$bn2"
run_job "$bn2" "resnet18 2-VW hetpipe run"
grep -q "batch-norm statistics of the final weights: recomputed over 10 training batches" "$bn2.out" ||
  { cat "$bn2.out"; fail "resnet18, 2 VWs: statistics not recomputed for the final weights"; }
# the VWs' averaged statistics alone evaluated at 0.16 (2026-11-26); recomputed 0.86
[[ $(json_get "$bn2.json" 'd["test_accuracy"] >= 0.5') == True ]] || { cat "$bn2.out"; fail "resnet18, 2 VWs: test accuracy"; }
# eval_each_epoch: epochs 1-3 evaluated on the shards' weights after their waves, statistics recomputed for them
[[ $(grep -c "batch-norm statistics of the weights after wave" "$bn2.out") -eq 3 ]] &&
  [[ $(json_get "$bn2.json" 'all(e["test_accuracy"] is not None for e in d["epochs"])') == True ]] ||
  { cat "$bn2.out"; fail "resnet18, 2 VWs: no test accuracy after every epoch"; }
pass "batch norm: resnet18 through 2 stages (Nm = 1) = single-device training, weights and running statistics bit for bit; --resume restores them; 2 VWs: statistics recomputed for the final weights, test accuracy $(json_get "$bn2.json" 'd["test_accuracy"]')"

# --- Nm = 2 in flight through 2 stages == the same waves on 1 stage
# (each minibatch's backward uses its own activations and the weights of its
# wave; local updates in minibatch order)
one="$HETFLOW_SCRATCH/one_stage.toml"
write_topology "$one" 8970 1 auto "${common[@]}" 'epochs = 2' 'strategy = "hetpipe"' 'nm = 2' 'hetpipe_waves = "drain"'
one_thread "$one"
run_job "$one" "1-stage hetpipe run, Nm = 2"
two="$HETFLOW_SCRATCH/two_stages.toml"
write_topology "$two" 8980 2 auto "${common[@]}" 'epochs = 2' 'strategy = "hetpipe"' 'virtual_workers = 1' 'nm = 2' \
  'hetpipe_waves = "drain"'
one_thread "$two"
run_job "$two" "2-stage hetpipe run, Nm = 2"
/usr/bin/env python3 - "$one.json" "$two.json" <<'PY' || { cat "$two.out"; fail "2 stages with Nm = 2 differ from 1 stage"; }
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
assert len(a["virtual_workers"][0]["stages"]) == 1 and len(b["virtual_workers"][0]["stages"]) == 2
assert a["hetpipe_waves"] == b["hetpipe_waves"] == "drain"
print("checksums", a["weights_checksum"], b["weights_checksum"], "losses", [e["loss"] for e in b["epochs"]])
assert a["weights_checksum"] == b["weights_checksum"]
for x in b["hetpipe"]["stages"]:
    assert x["used"] and x["minibatches"] == 80 and x["waves"] == 40, x
PY
pass "drained waves: Nm = 2 minibatches in flight through 2 stages: the 1-stage weights bit for bit, 40 waves per stage"

# --- 2 VWs, Nm = 1, D = 0, plain SGD == strategy ps (bsp, 2 workers): both
# add both workers' gradients, taken at the same weights, every clock (the
# two sum them in different orders, so only up to float rounding: at lr 0.1
# the run enters its steep phase in epoch 3, where that rounding grew to a
# 0.1 test-accuracy difference on the 2026-11-26 VM, with the code of
# 11-25 as well; at lr 0.05 the losses agree to every printed digit)
ps="$HETFLOW_SCRATCH/ps.toml"
write_topology "$ps" 8990 3 auto "${common[@]}" 'epochs = 3' 'strategy = "ps"' 'momentum = 0.0' \
  'ps_workers = ["n1", "n2"]' 'ps_nodes = ["n0"]'
one_thread "$ps"
run_job "$ps" "2-worker ps run"
hp2="$HETFLOW_SCRATCH/hp2.toml"
write_topology "$hp2" 8930 2 auto "${common[@]}" 'epochs = 3' 'strategy = "hetpipe"' 'allocation = "np"' 'nm = 1' \
  'staleness = 0' 'momentum = 0.0' 'hetpipe_waves = "drain"'
two_devices "$hp2"
run_job "$hp2" "2-VW hetpipe run"
/usr/bin/env python3 - "$ps.json" "$hp2.json" <<'PY' || { cat "$hp2.out"; fail "2 VWs, Nm = 1, D = 0 do not match ps bsp"; }
import json, sys
p, h = (json.load(open(f)) for f in sys.argv[1:3])
vws = h["virtual_workers"]
assert len(vws) == 2 and all(len(v["stages"]) == 2 for v in vws), vws
assert {v["stages"][0]["node"] for v in vws} == {"n0", "n1"}, vws  # np: one VW per node
for x in h["hetpipe"]["stages"]:  # 40 steps an epoch, 20 per VW
    assert x["used"] and x["minibatches"] == 60 and x["waves"] == 60, x
print("test accuracy ps", p["epochs"][-1]["test_accuracy"], "hetpipe", h["test_accuracy"])
# ps reports worker 0's epochs; VW 0 trains worker 0's steps.
for a, b in zip(p["epochs"], vws[0]["epochs"]):
    print(f"epoch {a['epoch']}: loss ps worker 0 {a['loss']} hetpipe VW 0 {b['loss']}")
    assert abs(a["loss"] - b["loss"]) <= 1e-4 * a["loss"], (a["loss"], b["loss"])
# at most one test sample of 400 apart (0.0025, with room for the float
# subtraction: 0.27 - 0.2675 is 0.0025000000000000022)
assert abs(p["epochs"][-1]["test_accuracy"] - h["test_accuracy"]) <= 0.0025 + 1e-9
assert sum(e["samples"] for e in h["epochs"]) == 3 * 1280
# each VW's own epochs: 20 minibatches of 32 an epoch
for v in vws:
    assert [e["samples"] for e in v["epochs"]] == [640, 640, 640], v["epochs"]
PY
pass "drained waves: 2 VWs x 2 stages, Nm = 1, D = 0: what ps bsp with 2 workers trains"

# --- 2 VWs, Nm = 2, D = 0 twice: the same weights; with momentum it learns
hp3="$HETFLOW_SCRATCH/hp3.toml"
write_topology "$hp3" 8940 2 auto "${common[@]}" 'epochs = 3' 'strategy = "hetpipe"' 'allocation = "np"' 'nm = 2' \
  'staleness = 0'
two_devices "$hp3"
run_job "$hp3" "2-VW hetpipe run, Nm = 2"
cp "$hp3.json" "$hp3.first.json"
run_job "$hp3" "2-VW hetpipe run, Nm = 2 (again)"
a=$(json_get "$hp3.first.json" 'd["weights_checksum"]')
b=$(json_get "$hp3.json" 'd["weights_checksum"]')
[[ "$a" == "$b" ]] || { cat "$hp3.out"; fail "two D = 0 runs end on different weights: $a $b"; }
/usr/bin/env python3 - "$hp3.json" <<'PY' || { cat "$hp3.out"; fail "D = 0: pushes per wave or clock distance"; }
import json, sys
d = json.load(open(sys.argv[1]))
assert d["hetpipe_waves"] == "overlap", d["hetpipe_waves"]
d = d["hetpipe"]
# one aggregated push per stage per wave, to every shard: 4 stages x 30 waves
for sh in d["shards"]:
    print(sh["name"], "pushes", sh["pushes"], "max clock distance", sh["max_clock_distance"])
    # overlapped: a pull of wave w needs waves <= w - 2 (global clock >= w - 1)
    assert sh["pushes"] == 4 * 30 and sh["max_clock_distance"] <= 1, sh
PY
pass "2 VWs, Nm = 2, D = 0, overlapped waves: two runs end on the same weights ($a); one push per stage per wave; clock distance <= 1"

hp4="$HETFLOW_SCRATCH/hp4.toml"
# lr 0.02: two VWs' summed momentum updates at 0.05 are at the edge of
# stability, and staleness pushes them over it (README: momentum and WSP)
write_topology "$hp4" 8900 2 auto "${common[@]}" 'epochs = 4' 'strategy = "hetpipe"' 'allocation = "np"' 'nm = 1' \
  'staleness = 1' 'lr = 0.02' 'hetpipe_drill_jitter = "4ms"'
sed -i '/^lr = 0.05$/d' "$hp4"
two_devices "$hp4"
run_job "$hp4" "2-VW hetpipe run, D = 1"
/usr/bin/env python3 - "$hp4.json" <<'PY' || { cat "$hp4.out"; fail "D = 1 under random delays"; }
import json, sys
d = json.load(open(sys.argv[1]))
dist = [sh["max_clock_distance"] for sh in d["hetpipe"]["shards"]]
print("test accuracy", d["test_accuracy"], "max clock distance per shard", dist)
assert max(dist) <= 2, dist  # WSP, overlapped: wave w needs waves <= w - 2 - D (distance <= D + 1)
assert all(sh["pushes"] == 4 * 80 for sh in d["hetpipe"]["shards"])  # 4 stages x 80 waves (Nm = 1)
# D > 0 applies updates on arrival and the delays are random, so runs differ:
# 0.7925 in one CI run, above 0.8 in most.
assert d["test_accuracy"] > 0.75
PY
acc=$(json_get "$hp4.json" 'd["test_accuracy"]')
pass "2 VWs, D = 1 (SGD lr 0.02, momentum 0.9), random delays of up to 4 ms per forward: clock distance <= 2, test accuracy $acc"

# --- the shell's pause / resume of a stage
pz="$HETFLOW_SCRATCH/pause.toml"
write_topology "$pz" 8880 2 auto "${common[@]}" 'epochs = 400' 'strategy = "hetpipe"' 'virtual_workers = 1' 'nm = 2'
one_thread "$pz"
start_run "$pz" "VW 0: epoch 2/400:" 120
clock_of() {  # clock_of ACTOR: its wave clock in `clocks --json`
  "$HETFLOW" shell 127.0.0.1:8880 -c clocks --json |
    python3 -c "import json,sys; d=json.load(sys.stdin); print(int(next(w['clock'] for w in d['ps_workers'] if w['actor'] == '$1')))"
}
out=$("$HETFLOW" shell 127.0.0.1:8880 -c "pause hpstage0" 2>&1) || { echo "$out"; fail "pause hpstage0"; }
grep -q "paused actor 'hpstage0'" <<<"$out" || { echo "$out"; fail "pause's answer: $out"; }
sleep 0.5
a=$(clock_of hpstage0)
sleep 1.5
b=$(clock_of hpstage0)
[[ "$a" == "$b" ]] || fail "hpstage0 went on while paused: wave $a then $b"
"$HETFLOW" shell 127.0.0.1:8880 -c waits 2>&1 | grep -q "hpstage0 waits on the shell for resume" ||
  fail "waits does not show the paused stage"
"$HETFLOW" shell 127.0.0.1:8880 -c "resume hpstage0" >/dev/null 2>&1 || fail "resume hpstage0"
sleep 1
c=$(clock_of hpstage0)
((c > b)) || fail "hpstage0 did not go on after resume: wave $b then $c"
"$HETFLOW" shell 127.0.0.1:8880 -c "set staleness 2" >"$pz.set.out" 2>&1 || { cat "$pz.set.out"; fail "set staleness 2"; }
sleep 1
bounds=$("$HETFLOW" shell 127.0.0.1:8880 -c clocks --json |
  python3 -c "import json,sys; d=json.load(sys.stdin); print(sorted((s['actor'], int(s['staleness_bound'])) for s in d['ps_servers']))")
[[ "$bounds" == "[('hpps0', 2), ('hpps1', 2)]" ]] || { cat "$pz.set.out"; fail "after set staleness 2 the shards' bounds are $bounds"; }
out=$("$HETFLOW" shell 127.0.0.1:8880 -c "set staleness x" 2>&1) && fail "set staleness x succeeded"
out=$("$HETFLOW" shell 127.0.0.1:8880 -c "pause hpps0" 2>&1) && fail "pause of a PS shard succeeded"
grep -q "does not honour pause" <<<"$out" || { echo "$out"; fail "pause hpps0's error: $out"; }
kill -INT "$RUN_PID"
wait_exit "$RUN_PID" 20 || fail "the run did not stop on SIGINT"
pass "shell: pause hpstage0 holds its wave clock at $a for 1.5 s (waits names the shell), resume moves it to $c; set staleness 2 reaches both shards; a shard refuses pause"

# --- a stage's node dies mid-run
kill="$HETFLOW_SCRATCH/kill.toml"
write_topology "$kill" 8950 2 auto "${common[@]}" 'epochs = 200' 'strategy = "hetpipe"' 'virtual_workers = 1' 'nm = 2'
one_thread "$kill"
start_run "$kill" "VW 0: epoch 2/200:" 120
kill_node_and_wait "$kill" n1 $RUN_PID "$kill.out"
pass "n1 (stage 1) killed: exit $KILL_RC after $KILL_SECS s, naming n1"

# --- checkpoints: a stage's node killed mid-run, --resume ends on the
# uninterrupted run's weights (D = 0), training only the waves after the
# checkpoint
S="$HETFLOW_SCRATCH"
ref="$S/ck_ref.toml"
write_topology "$ref" 8960 2 auto "${common[@]}" 'epochs = 4' 'strategy = "hetpipe"' 'virtual_workers = 1' 'nm = 2' \
  "checkpoint_dir = \"$S/ck-ref\"" 'checkpoint_every = 5'
one_thread "$ref"
run_job "$ref" "hetpipe run with checkpoints"
cut="$S/ck_cut.toml"
write_topology "$cut" 8960 2 auto "${common[@]}" 'epochs = 4' 'strategy = "hetpipe"' 'virtual_workers = 1' 'nm = 2' \
  "checkpoint_dir = \"$S/ck-cut\"" 'checkpoint_every = 5' 'hetpipe_drill_jitter = "10ms"'
one_thread "$cut"
start_run "$cut" "VW 0: epoch 2/4:" 120
kill_node_and_wait "$cut" n1 $RUN_PID "$cut.out"
ls "$S/ck-cut" | grep -q 'hpps0.ckpt-' || { ls "$S/ck-cut"; fail "no shard checkpoint before the kill"; }
timeout 300 "$HETFLOW" run "$cut" --resume --report "$cut.json" >"$cut.resume.out" 2>&1 ||
  { cat "$cut.resume.out"; fail "--resume failed"; }
grep -q -- "--resume: every stage and shard restores checkpoint" "$cut.resume.out" ||
  { cat "$cut.resume.out"; fail "no restore line"; }
/usr/bin/env python3 - "$ref.json" "$cut.json" <<'PY' || { cat "$cut.resume.out"; fail "--resume does not end on the uninterrupted weights"; }
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
k = b["resumed_wave"]
print("resumed at wave", k, "checksums", a["weights_checksum"], b["weights_checksum"])
assert k > 0 and k % 5 == 0, k
# 40 steps an epoch, 160 minibatches, 80 waves of Nm = 2: the resumed run trains waves k..79
for st in b["hetpipe"]["stages"]:
    assert st["resumed_wave"] == k and st["minibatches"] == 160 - 2 * k, st
assert sum(e["samples"] for e in b["epochs"]) == (160 - 2 * k) * 32
assert a["weights_checksum"] == b["weights_checksum"]
assert all(sh["restored_label"] == k for sh in b["hetpipe"]["shards"])
PY
pass "n1 killed mid-run ($KILL_SECS s to exit $KILL_RC), --resume from wave $(json_get "$cut.json" 'd["resumed_wave"]'): the uninterrupted run's weights bit for bit"

# --- strategy auto: `hetflow run` decides once (what `hetflow plan` would
# choose, from profiles measured here) and runs that on every node; a node
# started on its own needs --strategy (or a profile_file).
auto="$HETFLOW_SCRATCH/auto.toml"
write_topology "$auto" 8960 2 auto "${common[@]}" 'epochs = 1' 'strategy = "auto"'
timeout 300 "$HETFLOW" run "$auto" --report "$auto.json" >"$auto.out" 2>&1 || { cat "$auto.out"; fail "strategy auto: the run failed"; }
chosen=$(sed -n 's/^hetflow run: strategy "auto" chose "\([a-z]*\)": .*/\1/p' "$auto.out")
[[ -n $chosen ]] || { cat "$auto.out"; fail "strategy auto: no line saying what it chose"; }
# It compared all five, each with a predicted rate (or why not).
for k in single dp hetpipe ps ralp; do
  grep -q "chose \"$chosen\": .*[;.] $k \(([^)]*) \)\?[0-9.]* samples/s" "$auto.out" ||
    grep -q "chose \"$chosen\": .*$k not possible" "$auto.out" || { cat "$auto.out"; fail "strategy auto: no estimate of $k"; }
done
case $chosen in
  single) want='len([a for a in d["actors"] if a["name"] == "trainer"]) == 1' ;;
  dp) want='len([a for a in d["actors"] if a["name"].startswith("replica")]) == 2' ;;
  hetpipe) want='len(d["virtual_workers"]) >= 1' ;;
  ps) want='len([a for a in d["actors"] if a["name"].startswith("psworker")]) == 2' ;;
  ralp) want='len([a for a in d["actors"] if a["name"].startswith("ralpworker")]) == 2' ;;
  *) fail "strategy auto chose '$chosen'" ;;
esac
[[ $(json_get "$auto.json" "d['status'] == 'ok' and $want") == True ]] || { python3 -m json.tool "$auto.json"; fail "strategy auto: did not run $chosen"; }
out=$("$HETFLOW" node "$auto" --name n1 2>&1) && fail "a lone node accepted strategy auto without --strategy"
grep -q 'start the nodes with `hetflow run' <<<"$out" || { echo "$out"; fail "lone node, auto: no clear error"; }
write_topology "$HETFLOW_SCRATCH/fixed.toml" 8965 1 auto "${common[@]}" 'epochs = 1' 'strategy = "dp"'
out=$("$HETFLOW" node "$HETFLOW_SCRATCH/fixed.toml" --name n0 --strategy hetpipe 2>&1) && fail "--strategy overrode a fixed strategy"
grep -q 'resolves "auto" only' <<<"$out" || { echo "$out"; fail "--strategy on a fixed strategy: no clear error"; }
pass "strategy auto: run chose $chosen and ran it; a lone node needs --strategy; --strategy resolves auto only"

# --- a fleet's profile file: each machine measures its devices into a file
# (`hetflow profile --out --as`), --merge joins them, the topology names the
# kinds; plan and run use it (nothing measured at run time).
fleet="$HETFLOW_SCRATCH/fleet.toml"
write_topology "$fleet" 8970 2 auto "${common[@]}" 'epochs = 1' 'strategy = "hetpipe"' 'nm = 2'
one_thread "$fleet"
"$HETFLOW" profile "$fleet" --out "$HETFLOW_SCRATCH/old.json" --as old >"$fleet.p1" 2>&1 || { cat "$fleet.p1"; fail "profile --out"; }
grep -q "old-cpu-t1 .* fwd .* bwd" "$fleet.p1" || { cat "$fleet.p1"; fail "profile --out: no kind line"; }
"$HETFLOW" profile "$fleet" --out "$HETFLOW_SCRATCH/new.json" --as new --repeat 3 >/dev/null 2>&1 || fail "profile --out (2)"
"$HETFLOW" profile "$fleet" --out "$HETFLOW_SCRATCH/plain.json" --repeat 2 >"$fleet.p2" 2>&1 &&
  grep -q "the median of 2 measurements" "$fleet.p2" && grep -q "^  cpu-t1 " "$fleet.p2" ||
  { cat "$fleet.p2"; fail "profile --out --repeat 2"; }
# Two cpu devices on one host: the file holds their co-location factor.
[[ $(json_get "$HETFLOW_SCRATCH/plain.json" 'd["links"].get("host_stage_factor", 0) >= 1') == True ]] ||
  { cat "$HETFLOW_SCRATCH/plain.json"; fail "profile --out: no links.host_stage_factor for two cpu nodes of one host"; }
# A device without `profile` takes the file's cpu-t1 (its threads are 1).
plain="$HETFLOW_SCRATCH/plain.toml"
write_topology "$plain" 8975 2 auto "${common[@]}" 'epochs = 1' 'strategy = "hetpipe"' 'nm = 2' 'profile_file = "plain.json"'
one_thread "$plain"
"$HETFLOW" plan "$plain" >"$plain.plan" 2>&1 && grep -Eq "^  0 +n[01] +cpu:0 +cpu-t1 " "$plain.plan" ||
  { cat "$plain.plan"; fail "plan: a device without profile did not take the file's cpu-t1"; }
"$HETFLOW" profile --merge "$HETFLOW_SCRATCH/old.json" "$HETFLOW_SCRATCH/new.json" --out "$HETFLOW_SCRATCH/fleet.json" \
  >"$fleet.m" 2>&1 || { cat "$fleet.m"; fail "profile --merge"; }
[[ $(json_get "$HETFLOW_SCRATCH/fleet.json" 'sorted(d["devices"])') == "['new-cpu-t1', 'old-cpu-t1']" ]] ||
  fail "merged file: want kinds new-cpu-t1 and old-cpu-t1"
out=$("$HETFLOW" profile --merge "$HETFLOW_SCRATCH/old.json" "$HETFLOW_SCRATCH/old.json" \
  --out "$HETFLOW_SCRATCH/dup.json" 2>&1) && fail "--merge accepted one kind twice"
[[ ! -e "$HETFLOW_SCRATCH/dup.json" && ! -e "$HETFLOW_SCRATCH/dup.json.tmp" ]] || fail "--merge refused, yet wrote a file"
grep -q "device kind 'old-cpu-t1' is in" <<<"$out" || { echo "$out"; fail "--merge of one kind twice: no clear error"; }
# n0 is an "old" machine, n1 a "new" one; the new one is made 3x slower.
python3 - "$HETFLOW_SCRATCH/fleet.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for u in d["units"]:
    for k in ("fwd_ms", "bwd_ms"): u["devices"]["new-cpu-t1"][k] *= 3
json.dump(d, open(sys.argv[1], "w"))
PY
sed -i -e '0,/threads = 1 }/s//threads = 1, profile = "old-cpu-t1" }/' \
  -e '0,/threads = 1 }/s//threads = 1, profile = "new-cpu-t1" }/' "$fleet"
echo 'profile_file = "fleet.json"' >>"$fleet"
"$HETFLOW" plan "$fleet" >"$fleet.plan" 2>&1 || { cat "$fleet.plan"; fail "plan with the fleet's file"; }
grep -q "^profiles: .*fleet.json" "$fleet.plan" && grep -Eq "^  [01] +n0 .* old-cpu-t1 " "$fleet.plan" &&
  grep -Eq "^  [01] +n1 .* new-cpu-t1 " "$fleet.plan" || { cat "$fleet.plan"; fail "plan: not from the fleet's kinds"; }
# The kinds' times decide the plan: the fast kind's stage holds more of
# LeNet-5's work (the old kind here, the new one when the old kind is made
# 3x slower instead), whichever stage it is (the planner may put the units
# with most weights last, where a stage keeps one weight version fewer).
# Work: the units' fwd + bwd as the old kind measured them (a count of
# units would not do: LeNet-5's first three units hold most of its work,
# and the cut moves by a unit with the per-wave costs).
first_kind() {
  python3 - "$1" "$HETFLOW_SCRATCH/fleet.json" <<'PY'
import json, re, sys
units = json.load(open(sys.argv[2]))["units"]
work = [u["devices"]["old-cpu-t1"]["fwd_ms"] + u["devices"]["old-cpu-t1"]["bwd_ms"] for u in units]
share = {}
for line in open(sys.argv[1]):
    m = re.match(r"^  [01] +n[01] +cpu:0 +(\S+) +(\d+)-(\d+) ", line)
    if m:
        share[m.group(1)] = share.get(m.group(1), 0) + sum(work[int(m.group(2)):int(m.group(3)) + 1])
print(max(share, key=share.get) if share else "")
PY
}
new_slow=$(first_kind "$fleet.plan")
python3 - "$HETFLOW_SCRATCH/fleet.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for u in d["units"]:
    for k in ("fwd_ms", "bwd_ms"):
        u["devices"]["new-cpu-t1"][k] /= 3
        u["devices"]["old-cpu-t1"][k] *= 3
json.dump(d, open(sys.argv[1] + ".swapped", "w"))
PY
sed 's/^profile_file = "fleet.json"$/profile_file = "fleet.json.swapped"/' "$fleet" >"$fleet.swapped.toml"
"$HETFLOW" plan "$fleet.swapped.toml" >"$fleet.swapped.plan" 2>&1 || { cat "$fleet.swapped.plan"; fail "plan (swapped)"; }
old_slow=$(first_kind "$fleet.swapped.plan")
[[ $new_slow == old-cpu-t1 && $old_slow == new-cpu-t1 ]] ||
  { cat "$fleet.plan" "$fleet.swapped.plan"; fail "plan: the most work did not go to the fast kind ($new_slow, $old_slow)"; }
run_job "$fleet" "hetpipe with the fleet's profile file"
[[ $(json_get "$fleet.json" 'd["profile_source"].endswith("fleet.json")') == True ]] ||
  fail "run: profiles not from the fleet's file"
pass "profile --out/--as/--merge: a fleet's file plans (the most work on the fast kind: $new_slow, then $old_slow) and runs"

# --- no profile_file, nodes on several machines: the head asks one node of
# every other machine to measure that machine's devices (hp_profiles.hpp).
# One machine here: the test-only HETFLOW_DRILL_REMOTE_PROFILE=1 treats n1 as
# another machine; its kinds come back named n1-cpu-t1. n1's device also has
# `speed = 4`: the plan prices it at n1-cpu-t1's times / 4 (n1-cpu-t1@x4).
remote="$HETFLOW_SCRATCH/remote.toml"
write_topology "$remote" 8980 2 auto "${common[@]}" 'epochs = 1' 'strategy = "hetpipe"' 'nm = 2' 'virtual_workers = 1'
one_thread "$remote"
sed -i '0,/threads = 1 }/! s/threads = 1 }/threads = 1, speed = 4 }/' "$remote"
grep -c "speed = 4" "$remote" | grep -qx 1 || { cat "$remote"; fail "remote: n1's speed key not written"; }
HETFLOW_DRILL_REMOTE_PROFILE=1 timeout 300 "$HETFLOW" run "$remote" --report "$remote.json" >"$remote.out" 2>&1 ||
  { cat "$remote.out"; fail "hetpipe with profiles from each machine"; }
grep -q "hetpipe: profiles measured on every machine: here (127.0.0.1), by node 'n1' (127.0.0.1)" "$remote.out" ||
  { cat "$remote.out"; fail "no line saying the profiles came from every machine"; }
grep -Eq "hetpipe: links: n0 -> n1: [0-9.]+ MB in" "$remote.out" || { cat "$remote.out"; fail "the link to the other machine was not timed"; }
[[ $(json_get "$remote.json" 'sorted((s["node"], s["kind"]) for s in d["virtual_workers"][0]["stages"])') == \
  "[('n0', 'cpu-t1'), ('n1', 'n1-cpu-t1@x4')]" ]] ||
  { python3 -m json.tool "$remote.json" | head -60; fail "stages: want n0 cpu-t1 (measured here) and n1 n1-cpu-t1@x4 (measured on n1, speed 4)"; }
json_get "$remote.json" 'd["profile_source"]' | grep -q "devices' speed keys: n1 cpu 0 x 4" ||
  { python3 -m json.tool "$remote.json" | head -60; fail "the report's profile_source does not name n1's speed"; }
[[ $(json_get "$remote.json" 'd["status"]') == ok ]] || fail "remote profiles: the run failed"
pass "no profile_file, n1 on another machine (drill): n1 measured its own devices (kind n1-cpu-t1) and the run planned with them, at its speed key (n1-cpu-t1@x4)"
