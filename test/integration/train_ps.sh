#!/usr/bin/env bash
# job.kind = "train", strategy "ps" (issue 6), through `hetflow run`, on the
# synthetic dataset:
#  - BSP with one worker and two PS shards on two processes ends with the
#    same weights (checksum, bit for bit) and per-epoch loss as single-device
#    training of the same batches;
#  - BSP, SSP(2) and ASP with 3 workers and 3 shards on 3 processes all
#    converge (test accuracy), each worker's observed staleness stays within
#    the bound (bsp 0, ssp 2), and the workers' steps add up to every step
#    of every epoch (each row once per epoch);
#  - bad keys: clear errors.
source "$(dirname "$0")/lib.sh"

one_thread() { sed -i -E 's/^(port = [0-9]+)$/\1\ndevices = [ { kind = "cpu", threads = 1 } ]/' "$1"; }

common=('kind = "train"' 'model = "lenet5"' 'dataset = "synthetic"' 'input_shape = [1, 28, 28]'
  'test_size = 400' 'batch_size = 32' 'lr = 0.02' 'lr_schedule = "cosine"')

single="$HETFLOW_SCRATCH/single.toml"
write_topology "$single" 8610 1 auto "${common[@]}" 'epochs = 2' 'train_size = 1280'
one_thread "$single"
timeout 300 "$HETFLOW" run "$single" --report "$single.json" >"$single.out" 2>&1 ||
  { cat "$single.out"; fail "single-device run failed"; }

ps1="$HETFLOW_SCRATCH/ps1.toml"
write_topology "$ps1" 8620 2 auto "${common[@]}" 'epochs = 2' 'train_size = 1280' 'strategy = "ps"' 'ps_workers = ["n0"]'
one_thread "$ps1"
timeout 300 "$HETFLOW" run "$ps1" --report "$ps1.json" >"$ps1.out" 2>&1 ||
  { cat "$ps1.out"; fail "1-worker ps run failed"; }
grep -q "parameter servers: 1 worker(s), 2 shard(s), bsp" "$ps1.out" || { cat "$ps1.out"; fail "no ps start line"; }
/usr/bin/env python3 - "$single.json" "$ps1.json" <<'PY' || { cat "$ps1.out"; fail "1-worker BSP does not match single-device training"; }
import json, sys
s, p = (json.load(open(f)) for f in sys.argv[1:3])
for a, b in zip(s["epochs"], p["epochs"]):
    rel = abs(a["loss"] - b["loss"]) / a["loss"]
    print(f"epoch {a['epoch']}: loss single {a['loss']:.7f} ps {b['loss']:.7f} (rel {rel:.1e}); samples {a['samples']} {b['samples']}")
    assert rel < 1e-6, rel
    assert a["samples"] == b["samples"]
print("checksums", s["weights_checksum"], p["weights_checksum"])
assert s["weights_checksum"] == p["weights_checksum"]
assert abs(s["epochs"][-1]["test_accuracy"] - p["epochs"][-1]["test_accuracy"]) < 1e-9
assert len(p["ps"]["shards"]) == 2 and all(x["updates"] == 80 for x in p["ps"]["shards"]), p["ps"]["shards"]
PY
pass "1 worker, 2 shards on 2 processes, BSP: the single-device weights bit for bit"

for mode in bsp ssp asp; do
  t="$HETFLOW_SCRATCH/ps3-$mode.toml"
  # Stale gradients with momentum 0.9 can diverge for a while: asp's
  # unbounded staleness (17-72 clocks seen on 2 busy cores) ended at test
  # accuracy 0.085 in one CI run: momentum 0.5 there, and a lower bar below.
  # ssp(2) keeps 0.9 (with 0.5 it reached only 0.61-0.62 in 3 epochs) and
  # asks for 0.5: 0.94-0.99 in 6 runs here, 0.58 in one CI run (2026-11-28;
  # 0.30 after epoch 2); chance is 0.1.
  momentum=0.9
  [[ $mode == asp ]] && momentum=0.5
  write_topology "$t" $((8630 + 10 * $(printf '%s\n' bsp ssp asp | grep -n "^$mode$" | cut -d: -f1))) 3 auto \
    "${common[@]}" 'strategy = "ps"' "consistency = \"$mode\"" 'staleness = 2' 'epochs = 3' 'train_size = 3840' \
    "momentum = $momentum"
  one_thread "$t"
  timeout 300 "$HETFLOW" run "$t" --report "$t.json" >"$t.out" 2>&1 || { cat "$t.out"; fail "3-worker $mode run failed"; }
  /usr/bin/env python3 - "$t.json" "$mode" <<'PY' || { cat "$t.out"; fail "3-worker $mode"; }
import json, sys
d = json.load(open(sys.argv[1])); mode = sys.argv[2]
ps = d["ps"]
bound = {"bsp": 0, "ssp": 2, "asp": None}[mode]
steps = sum(w["steps"] for w in ps["workers"])
stal = [w["max_staleness"] for w in ps["workers"]]
acc = d["epochs"][-1]["test_accuracy"]
print(f"{mode}: workers {len(ps['workers'])} shards {len(ps['shards'])} steps {steps} max staleness {stal} "
      f"test accuracy {acc:.4f} shard updates {[s['updates'] for s in ps['shards']]}")
assert len(ps["workers"]) == 3 and len(ps["shards"]) == 3
assert steps == 3 * 120, steps                      # 3 epochs x 120 steps, each once
assert all(s["updates"] == steps for s in ps["shards"])
# lenet5 is dense: every pull but each worker's first rides on its push
# before (flag_pull_next); worker 0's final pull comes alone.
assert all(s["pulls"] == steps + 1 and s["pulls_with_push"] == steps - 3 for s in ps["shards"]), ps["shards"]
if bound is not None:
    assert max(stal) <= bound, stal
# asp makes no staleness promise, so no convergence promise either: well
# above chance (0.1: 10 classes) and not diverged is the bar there.
assert acc > {"bsp": 0.8, "ssp": 0.5, "asp": 0.3}[mode], acc
PY
  pass "3 workers, 3 shards, $mode: converges, staleness within the bound"
done

# BSP is reproducible: the 3-worker run again ends with the same weights
# (the shards apply each clock's pushes in worker order, whatever the arrival
# order); ASP applies on arrival, so it need not be.
t="$HETFLOW_SCRATCH/ps3-bsp.toml"
timeout 300 "$HETFLOW" run "$t" --report "$t.again.json" >"$t.again.out" 2>&1 || { cat "$t.again.out"; fail "bsp rerun failed"; }
a=$(json_get "$t.json" 'd["weights_checksum"]')
b=$(json_get "$t.again.json" 'd["weights_checksum"]')
[[ "$a" == "$b" ]] || fail "3-worker bsp is not reproducible: $a vs $b"
pass "3-worker bsp reproducible across runs (checksum $a)"

# Adam with weight decay on the shards, ssp(2), 2 workers.
adam="$HETFLOW_SCRATCH/adam.toml"
write_topology "$adam" 8660 2 auto 'kind = "train"' 'model = "lenet5"' 'dataset = "synthetic"' \
  'input_shape = [1, 28, 28]' 'test_size = 400' 'batch_size = 32' 'train_size = 1280' 'epochs = 3' \
  'optimizer = "adam"' 'lr = 0.001' 'weight_decay = 0.0001' 'strategy = "ps"' 'consistency = "ssp"' 'staleness = 2'
one_thread "$adam"
timeout 300 "$HETFLOW" run "$adam" --report "$adam.json" >"$adam.out" 2>&1 || { cat "$adam.out"; fail "adam ps run failed"; }
acc=$(json_get "$adam.json" 'd["epochs"][-1]["test_accuracy"]')
stal=$(json_get "$adam.json" 'd["ps"]["max_staleness"]')
python3 -c "import sys; sys.exit(0 if $acc > 0.8 and $stal <= 2 else 1)" || { cat "$adam.out"; fail "adam: accuracy $acc, staleness $stal"; }
pass "adam + weight decay on the shards, ssp(2): test accuracy $acc, max staleness $stal"

# A slow worker: worker 1 sleeps 6 s before its step at clock 3; worker 0's
# pull at clock 4 (bsp) waits past ps_timeout = 1s and the job stops with a
# message naming worker 1 as the slowest, long before the drill ends.
slow="$HETFLOW_SCRATCH/slow.toml"
write_topology "$slow" 8690 2 auto "${common[@]}" 'epochs = 2' 'train_size = 1280' 'strategy = "ps"' 'ps_timeout = "1s"' 'ps_drill_worker = 1' \
  'ps_drill_clock = 3' 'ps_drill_delay = "6s"'
one_thread "$slow"
# Heartbeats: on a loaded machine 1 s is too tight for a test that must end
# with the PS timeout, not a peer timeout.
sed -i 's/^connection_timeout = "1s"$/connection_timeout = "5s"/' "$slow"
start=$(date +%s.%N)
timeout 120 "$HETFLOW" run "$slow" >"$slow.out" 2>&1
rc=$?
took=$(python3 -c "print(round($(date +%s.%N) - $start, 1))")
[[ $rc -eq 1 ]] || { cat "$slow.out"; fail "slow worker: exit $rc, want 1"; }
grep -q "worker 'psworker1' on node 'n1' is the slowest, at clock 3" "$slow.out" ||
  { cat "$slow.out"; fail "slow worker: the message does not name psworker1 at clock 3"; }
grep -q "ps_timeout" "$slow.out" || { cat "$slow.out"; fail "slow worker: no ps_timeout in the message"; }
pass "slow worker named after the 1 s ps_timeout (job stopped after $took s)"

# A worker-and-shard node killed mid-training: the others stop within 10 s,
# naming it (no pull waits on a dead shard).
long="$HETFLOW_SCRATCH/long.toml"
write_topology "$long" 8700 2 auto "${common[@]}" 'epochs = 200' 'train_size = 3840' 'strategy = "ps"'
one_thread "$long"
start_nodes "$long" 2
for _ in $(seq 1 300); do grep -q "epoch 1/200 done" "$long.n0.log" && break; sleep 0.1; done
grep -q "epoch 1/200 done" "$long.n0.log" || { cat "$long.n0.log"; fail "long ps run did not start"; }
kill -KILL "${NODE_PIDS[1]}"
wait_exit "${NODE_PIDS[0]}" 10 || { cat "$long.n0.log"; fail "n0 still running 10 s after n1 died"; }
[[ $WAIT_RC -ne 0 ]] && grep -q "n1" "$long.n0.log" || { cat "$long.n0.log"; fail "n0: exit $WAIT_RC"; }
pass "a dead worker/shard node stops the job (n0 exit $WAIT_RC, names n1)"

# Bad settings are refused before anything runs.
bad="$HETFLOW_SCRATCH/bad.toml"
write_topology "$bad" 8680 2 auto "${common[@]}" 'epochs = 1' 'train_size = 1280' 'strategy = "ps"' 'ps_nodes = ["n7"]'
out=$(timeout 60 "$HETFLOW" validate "$bad" 2>&1) && fail "validate accepted ps_nodes = [n7]"
grep -q "ps_nodes names node 'n7'" <<<"$out" || { echo "$out"; fail "ps_nodes error"; }
write_topology "$bad" 8680 2 auto "${common[@]}" 'epochs = 1' 'train_size = 1280' 'strategy = "ps"' 'consistency = "sp"'
out=$(timeout 60 "$HETFLOW" validate "$bad" 2>&1) && fail "validate accepted consistency = sp"
grep -q "consistency" <<<"$out" || { echo "$out"; fail "consistency error"; }
write_topology "$bad" 8680 2 auto "${common[@]}" 'epochs = 1' 'train_size = 1280' 'strategy = "ps"' 'checkpoint_every = 5'
out=$(timeout 60 "$HETFLOW" validate "$bad" 2>&1) && fail "validate accepted checkpoint_every without checkpoint_dir"
grep -q "checkpoint_dir" <<<"$out" || { echo "$out"; fail "checkpoint_dir error"; }
write_topology "$bad" 8680 2 auto "${common[@]}" 'epochs = 1' 'train_size = 1280' 'strategy = "ps"'
sed -i -E '0,/^(port = [0-9]+)$/s//\1\ndevices = [ { kind = "cuda", index = 0 } ]/' "$bad"
out=$(timeout 60 "$HETFLOW" validate "$bad" 2>&1) && fail "validate accepted a ps worker on a cuda device"
grep -q "node 'n0' lists a non-cpu device; ps workers run on cpu devices only" <<<"$out" || { echo "$out"; fail "cuda worker error"; }
pass "bad ps settings refused"
