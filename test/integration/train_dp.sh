#!/usr/bin/env bash
# job.kind = "train", strategy "dp" (issue 5), through `hetflow run`:
#  - 2 replicas, equal split: every replica ends with bit-identical weights
#    (replicas_identical) and the per-epoch loss and test accuracy match a
#    single-device run of the same global batches;
#  - 3 replicas, measured split: the report shows the split and the speeds,
#    and the replicas stay identical;
#  - a replica with a large fixed cost a step (emulated) gets no rows with the
#    default split, and some with dp_split = "speed";
#  - with dp_failover = false, a replica's node killed mid-training: the
#    others stop within 10 s, naming it (failover: train_dp_failover.sh);
#  - dp on a cuda device, dp with streamed input, an unknown dp_nodes entry:
#    clear errors.
source "$(dirname "$0")/lib.sh"

# One cpu thread per node: several replicas share this machine's cores, and
# oneTBB workers of different processes would otherwise spin against each other.
one_thread() { sed -i -E 's/^(port = [0-9]+)$/\1\ndevices = [ { kind = "cpu", threads = 1 } ]/' "$1"; }

common=('kind = "train"' 'model = "lenet5"' 'epochs = 2' 'max_steps_per_epoch = 40' 'batch_size = 64'
  'lr_schedule = "cosine"')

single="$HETFLOW_SCRATCH/single.toml"
write_topology "$single" 7900 1 auto "${common[@]}"
one_thread "$single"
timeout 300 "$HETFLOW" run "$single" --report "$single.json" >"$single.out" 2>&1 ||
  { cat "$single.out"; fail "single-device run failed"; }

dp2="$HETFLOW_SCRATCH/dp2.toml"
write_topology "$dp2" 7910 2 auto "${common[@]}" 'strategy = "dp"' 'dp_split = "equal"'
one_thread "$dp2"
timeout 300 "$HETFLOW" run "$dp2" --report "$dp2.json" >"$dp2.out" 2>&1 ||
  { cat "$dp2.out"; fail "2-replica dp run failed"; }
grep -q "data parallel: 2 replicas" "$dp2.out" || { cat "$dp2.out"; fail "no dp start line"; }
# hetflow run gives each of the 2 local nodes its own share of the CPUs.
grep -q "pinning the local nodes to CPUs" "$dp2.out" && grep -q "\[n1\] .*running on CPUs" "$dp2.out" ||
  { cat "$dp2.out"; fail "2 local nodes: no CPU pinning"; }
[[ $(json_get "$dp2.json" 'd["replicas_identical"]') == True ]] || { cat "$dp2.out"; fail "2 replicas differ"; }
[[ $(json_get "$dp2.json" 'd["splits"][0]["rows"]') == "[32, 32]" ]] || fail "equal split of 64 rows"
/usr/bin/env python3 - "$single.json" "$dp2.json" <<'PY' || fail "dp does not match single-device training"
import json, sys
s, d = (json.load(open(p)) for p in sys.argv[1:3])
for a, b in zip(s["epochs"], d["epochs"]):
    rel = abs(a["loss"] - b["loss"]) / a["loss"]
    print(f"epoch {a['epoch']}: loss single {a['loss']:.6f} dp {b['loss']:.6f} (rel {rel:.1e}), "
          f"test accuracy {a['test_accuracy']} vs {b['test_accuracy']}")
    assert rel < 1e-3, rel
    assert abs(a["test_accuracy"] - b["test_accuracy"]) <= 0.005
    assert a["samples"] == b["samples"]
PY
pass "2 replicas: identical weights, loss matches single-device training"

dp3="$HETFLOW_SCRATCH/dp3.toml"
write_topology "$dp3" 7920 3 auto "${common[@]}" 'strategy = "dp"' 'ring_timeout = "4s"'
one_thread "$dp3"
timeout 300 "$HETFLOW" run "$dp3" --report "$dp3.json" >"$dp3.out" 2>&1 ||
  { cat "$dp3.out"; fail "3-replica dp run failed"; }
[[ $(json_get "$dp3.json" 'd["replicas_identical"]') == True ]] || { cat "$dp3.out"; fail "3 replicas differ"; }
json_get "$dp3.json" 'len(d["splits"]) == 2 and all(sum(s["rows"]) == 64 and len(s["speeds"]) == 3 and min(s["speeds"]) > 0 for s in d["splits"])' |
  grep -q True || fail "3 replicas: splits/speeds in the report"
acc=$(json_get "$dp3.json" 'd["epochs"][-1]["test_accuracy"]')
/usr/bin/env python3 -c "import sys; sys.exit(0 if $acc > 0.65 else 1)" || fail "3 replicas: test accuracy $acc"
pass "3 replicas, measured split $(json_get "$dp3.json" 'd["splits"][-1]["rows"]'), test accuracy $acc"

# A replica with a large fixed cost a step (n1: HETFLOW_BENCH_STEP_COST, 60 ms
# of sleep in each step it has rows, where a LeNet-5 step of 32 rows takes
# a few ms): the default split (fixed + per-row cost) gives it no rows from
# the speed probe on; dp_split = "speed" (per-row speed alone) still gives it some.
fixed_cost_split() {  # fixed_cost_split RULE PORT -> prints n0's report's splits
  local t="$HETFLOW_SCRATCH/fixed-$1.toml"
  write_topology "$t" "$2" 2 auto 'kind = "train"' 'model = "lenet5"' 'batch_size = 64' 'strategy = "dp"' \
    "dp_split = \"$1\"" 'epochs = 1' 'max_steps_per_epoch = 20' 'dp_resplit_every = 5' 'eval_each_epoch = false'
  one_thread "$t"
  "$HETFLOW" node "$t" --name n0 --report "$t.json" >"$t.n0.log" 2>&1 &
  local p0=$!
  PIDS+=($p0)
  HETFLOW_BENCH_STEP_COST=0.06 "$HETFLOW" node "$t" --name n1 >"$t.n1.log" 2>&1 &
  local p1=$!
  PIDS+=($p1)
  wait_exit $p0 120 && [[ $WAIT_RC -eq 0 ]] || { cat "$t.n0.log" "$t.n1.log"; fail "dp_split $1: n0 exit $WAIT_RC"; }
  wait_exit $p1 30 && [[ $WAIT_RC -eq 0 ]] || { cat "$t.n1.log"; fail "dp_split $1: n1 exit $WAIT_RC"; }
  json_get "$t.json" '[a for a in d["actors"] if a["name"] == "replica0"][0]["metrics"]["splits"]'
}
timed=$(fixed_cost_split measured 7960)
/usr/bin/env python3 - "$timed" <<'PY' || fail "fixed step cost: the measured split still gives n1 rows: $timed"
import ast, sys
s = ast.literal_eval(sys.argv[1])[-1]
assert s["rows"] == [64, 0], s
assert s["fixed_ms"][1] > 40 and s["fixed_ms"][0] < 20, s
PY
by_speed=$(fixed_cost_split speed 7965)
/usr/bin/env python3 - "$by_speed" <<'PY' || fail "fixed step cost: dp_split speed: $by_speed"
import ast, sys
s = ast.literal_eval(sys.argv[1])[-1]
assert s["rows"][1] > 0 and sum(s["rows"]) == 64, s
PY
last_rows() { /usr/bin/env python3 -c 'import ast, sys; print(ast.literal_eval(sys.argv[1])[-1]["rows"])' "$1"; }
pass "fixed step cost on n1: measured split $(last_rows "$timed"), by speed alone $(last_rows "$by_speed")"

# 4 replicas on two "hosts" (127.0.0.1: n0, n1; 127.0.0.2: n2, n3): the ring
# is hierarchical (a leader per host) and the replicas still end identical.
dp4="$HETFLOW_SCRATCH/dp4.toml"
write_topology "$dp4" 8400 4 auto 'kind = "train"' 'model = "lenet5"' 'epochs = 1' 'max_steps_per_epoch = 20' \
  'batch_size = 64' 'strategy = "dp"' 'ring_timeout = "4s"' 'eval_each_epoch = false'
one_thread "$dp4"
sed -i -E '/^name = "n[23]"$/,/^port/ s/^host = "127.0.0.1"$/host = "127.0.0.2"/' "$dp4"
timeout 300 "$HETFLOW" run "$dp4" --report "$dp4.json" >"$dp4.out" 2>&1 ||
  { cat "$dp4.out"; fail "4-replica hierarchical dp run failed"; }
[[ $(json_get "$dp4.json" 'd["replicas_identical"]') == True ]] || { cat "$dp4.out"; fail "4 replicas differ"; }
[[ $(grep -c "collectives as leader" "$dp4.out") -eq 2 ]] || { cat "$dp4.out"; fail "dp: want 2 ring leaders"; }
pass "4 replicas on 2 hosts: hierarchical ring, identical weights"

# Kill the node of replica 1 mid-training.
long="$HETFLOW_SCRATCH/long.toml"
write_topology "$long" 7930 2 auto 'kind = "train"' 'model = "mlp"' 'epochs = 100' 'strategy = "dp"' \
  'dp_failover = false'
one_thread "$long"
start_nodes "$long" 2
for _ in $(seq 1 300); do grep -q "samples/s" "$long.n0.log" && break; sleep 0.1; done
grep -q "samples/s" "$long.n0.log" || { cat "$long.n0.log"; fail "dp run did not start"; }
kill -KILL "${NODE_PIDS[1]}"
wait_exit "${NODE_PIDS[0]}" 10 || { cat "$long.n0.log"; fail "n0 still running 10 s after n1 died"; }
[[ $WAIT_RC -ne 0 ]] && grep -q "n1" "$long.n0.log" || { cat "$long.n0.log"; fail "n0: exit $WAIT_RC"; }
pass "dp_failover = false: a dead replica node stops the job (n0 exit $WAIT_RC, names n1)"

# Clear errors.
bad="$HETFLOW_SCRATCH/bad.toml"
write_topology "$bad" 7940 1 auto 'kind = "train"'
sed -i 's/^port = 7940$/port = 7940\ncpus = "4000"/' "$bad"
timeout 30 "$HETFLOW" node "$bad" --name n0 >"$bad.out" 2>&1
rc=$?
[[ $rc -eq 2 ]] && grep -q "CPU(s) 4000 are not available" "$bad.out" || { cat "$bad.out"; fail "cpus 4000: exit $rc"; }
write_topology "$bad" 7940 2 auto 'kind = "train"' 'strategy = "dp"' 'dp_nodes = ["n0", "n7"]'
"$HETFLOW" validate "$bad" >"$bad.out" 2>&1 && { cat "$bad.out"; fail "validate accepted dp_nodes n7"; }
grep -q "no node 'n7'" "$bad.out" || { cat "$bad.out"; fail "unknown dp node: message"; }
write_topology "$bad" 7940 2 auto 'kind = "train"' 'strategy = "dp"' 'input = "stream"'
"$HETFLOW" validate "$bad" >"$bad.out" 2>&1 && fail "validate accepted dp with streamed input"
grep -q 'input = "memory" only' "$bad.out" || { cat "$bad.out"; fail "dp + stream: message"; }
write_topology "$bad" 7940 2 auto 'kind = "train"' 'strategy = "dp"'
sed -i 's/^port = 7941$/port = 7941\ndevices = [ { kind = "cuda", index = 0 } ]/' "$bad"
# A cuda replica is valid (it sums through a host copy of its model); on a
# machine without a GPU the run stops with the device's reason, no hang.
"$HETFLOW" validate "$bad" >"$bad.out" 2>&1 || { cat "$bad.out"; fail "validate refused dp with a cuda replica"; }
if ! "$HETFLOW" devices 2>&1 | grep -q "^cuda 0:"; then
  # plan: the cuda replica is listed, not measurable here, and says why.
  "$HETFLOW" plan "$bad" >"$bad.plan" 2>&1 || { cat "$bad.plan"; fail "plan of dp with a cuda replica"; }
  grep -qE "^  1 +n1 .* cuda:0 " "$bad.plan" && grep -q "cuda:0 is not measured here (.*): the mean of the others" "$bad.plan" ||
    { cat "$bad.plan"; fail "plan: the cuda replica's row or why it is not measured"; }
  # The launcher stops the other node at once (not after its 20 s join timeout).
  t0=$SECONDS
  timeout 60 "$HETFLOW" run "$bad" >"$bad.out" 2>&1
  rc=$?
  [[ $rc -ne 0 && $rc -ne 124 ]] || { cat "$bad.out"; fail "dp with cuda:0 and no GPU: exit $rc"; }
  grep -q "node 'n1' lists cuda device 0, but this machine has no CUDA device" "$bad.out" &&
    grep -q "node 'n1' refused to start (exit 2" "$bad.out" || { cat "$bad.out"; fail "dp on cuda without GPU: message"; }
  (( SECONDS - t0 <= 10 )) || { cat "$bad.out"; fail "a node refused to start, the run took $((SECONDS - t0)) s"; }
fi
pass "dp errors: unknown node, streamed input; a cuda replica without a GPU"

# hetflow plan: replicas, ring and split; heterogeneous thread counts.
het="$HETFLOW_SCRATCH/het.toml"
write_topology "$het" 7950 2 auto 'kind = "train"' 'strategy = "dp"' 'batch_size = 96' 'epochs = 1' \
  'max_steps_per_epoch = 5'
sed -i -E 's/^port = 7950$/port = 7950\ndevices = [ { kind = "cpu", threads = 2 } ]/; s/^port = 7951$/port = 7951\ndevices = [ { kind = "cpu", threads = 1 } ]/' "$het"
"$HETFLOW" plan "$het" >"$het.plan" 2>&1 || { cat "$het.plan"; fail "plan"; }
grep -q "data parallel: 2 replicas; ring ring0 -> ring1 -> ring0" "$het.plan" && grep -q "replica1 .*dp_replica .*n1" "$het.plan" &&
  grep -q "speeds: measured on this machine" "$het.plan" || { cat "$het.plan"; fail "plan text"; }
"$HETFLOW" plan "$het" --json --no-measure >"$het.json" 2>&1 || { cat "$het.json"; fail "plan --json"; }
[[ $(json_get "$het.json" '[r["rows"] for r in d["dp"]["replicas"]]') == "[64, 32]" ]] ||
  { cat "$het.json"; fail "plan --no-measure: split by threads"; }
"$HETFLOW" plan "$het" --json >"$het.json" 2>&1 || { cat "$het.json"; fail "plan --json (measured)"; }
json_get "$het.json" 'sum(r["rows"] for r in d["dp"]["replicas"]) == 96 and all(r["speed"] > 0 for r in d["dp"]["replicas"])' |
  grep -q True || { cat "$het.json"; fail "plan --json: measured split"; }
pass "plan: $(json_get "$het.json" '[(r["threads"], round(r["speed"]), r["rows"]) for r in d["dp"]["replicas"]]') (threads, samples/s, rows)"
# 2 + 1 threads asked for: more than a 2-core machine has, so nothing is pinned
# (on a larger machine: n0 two CPUs, n1 one; from 5 CPUs on, one more each
# for the nodes' service threads).
timeout 300 "$HETFLOW" run "$het" >"$het.out" 2>&1 || { cat "$het.out"; fail "het run"; }
cpus=$(nproc)
if ((cpus >= 3)); then
  grep -q "pinning the local nodes to CPUs: n0 [0-9]*-[0-9]*, n1 [0-9]*" "$het.out" || { cat "$het.out"; fail "het: pinning"; }
else
  grep -q "not pinning the local nodes to CPUs: they ask for 3 on the $cpus" "$het.out" || { cat "$het.out"; fail "het: no pinning note"; }
fi
pass "pinning follows the nodes' threads ($cpus CPUs)"
