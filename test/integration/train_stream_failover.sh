#!/usr/bin/env bash
# Streamed input when a shard's node dies (issue 9: a pre-processing shard's
# work is reassigned, no row lost or repeated).
#  1. SIGKILL of a node that runs only a stream shard, mid-epoch: the trainer
#     hands that shard's steps to another shard and the job finishes with
#     exit 0; every epoch's books hold exactly the training set once (the
#     trainer checks each batch's rows against the epoch's order and each
#     shard's running row count and checksum), and the report names the lost
#     shard, its node and the taker; and it trains exactly what an
#     uninterrupted run trains (same per-epoch loss and accuracy). Run on the
#     UCX data plane over TCP and on the CAF fallback.
#  1b. Two shard nodes lost one after the other, the second one a taker: the
#     last shard left builds every lost step; training as uninterrupted.
#  2. With stream_failover = false the same loss stops the job: every node
#     exits non-zero within 10 s, naming the dead node.
source "$(dirname "$0")/lib.sh"

common=('kind = "train"' 'model = "lenet5"' 'dataset = "synthetic"' 'input_shape = [1, 28, 28]'
  'train_size = 3000' 'test_size = 300' 'batch_size = 32' 'seed = 5' 'input = "stream"' 'augment = true'
  'prefetch = 2')

# --- 1. the job goes on without the dead node -----------------------------------------------------
# The reference: the same job, nobody killed.
ref="$HETFLOW_SCRATCH/reference.toml"
write_topology "$ref" 9540 3 auto "${common[@]}" 'epochs = 3'
timeout 120 "$HETFLOW" run "$ref" --report "$ref.json" >"$ref.out" 2>&1 || { cat "$ref.out"; fail "reference run"; }
want=$(json_get "$ref.json" '[(e["loss"], e["test_accuracy"]) for e in d["epochs"]]')
port=9510
for dp in ucx:tcp,self caf; do
  topo="$HETFLOW_SCRATCH/failover-${dp%%:*}.toml"
  write_topology "$topo" $port 3 "$dp" "${common[@]}" 'epochs = 3'
  port=$((port + 10))
  # Kill n2 (stream_shard_2 only) in the middle of epoch 2.
  run_and_kill "$topo" n2 "epoch 1/3 done" 90 120
  rc=$RUN_RC
  [[ $rc -eq 0 ]] || { cat "$topo.out"; fail "$dp: the run exited $rc after losing shard node n2, want 0"; }
  grep -q "node 'n2'.* is down.*goes on without it" "$topo.out" ||
    { cat "$topo.out"; fail "$dp: no line saying the job goes on without n2"; }
  grep -q "nodes lost during the job, which finished without them: n2 (exit 137)" "$topo.out" ||
    { cat "$topo.out"; fail "$dp: the launcher does not name the lost node"; }
  check() {  # check PYTHON_EXPR MESSAGE
    [[ $(json_get "$topo.json" "$1") == True ]] || { python3 -m json.tool "$topo.json"; fail "$dp report: $2"; }
  }
  check 'd["status"] == "ok" and len(d["epochs"]) == 3' "status ok, 3 epochs"
  # Exactly once: every epoch's rows are the training set, once each, and
  # the same set every epoch (order-independent checksum).
  check 'd["stream"]["exactly_once"] and [e["rows"] for e in d["stream"]["epochs"]] == [3000] * 3 and len({e["id_checksum"] for e in d["stream"]["epochs"]}) == 1' \
    "exactly-once books of 3000 rows in each of 3 epochs"
  check 'all(e["samples"] == 3000 for e in d["epochs"])' "3000 samples trained per epoch"
  check 'len(d["stream"]["takeovers"]) == 1 and d["stream"]["takeovers"][0]["shard"] == 2 and d["stream"]["takeovers"][0]["node"] == "n2" and d["stream"]["takeovers"][0]["taken_over_by"] in (0, 1) and d["stream"]["takeovers"][0]["epoch"] >= 2' \
    "one takeover of shard 2 (node n2) by shard 0 or 1, from epoch 2 on"
  check '[a["ok"] for a in d["actors"] if a["name"] == "stream_shard_2"] == [False] and "lost with node" in [a["summary"] for a in d["actors"] if a["name"] == "stream_shard_2"][0]' \
    "stream_shard_2 reported lost with its node"
  taker=$(json_get "$topo.json" 'd["stream"]["takeovers"][0]["taken_over_by"]')
  check "[a['metrics']['took_over'] for a in d['actors'] if a['name'] == 'stream_shard_$taker'] == [[2]]" \
    "the taker, stream_shard_$taker, reports the steps it took over"
  # The taker builds the same batches (rows, order, augmentation from the
  # seed and the epoch), so training is the reference's, bit for bit.
  got=$(json_get "$topo.json" '[(e["loss"], e["test_accuracy"]) for e in d["epochs"]]')
  [[ "$got" == "$want" ]] || fail "$dp: per-epoch loss/accuracy $got differ from the uninterrupted run's $want"
  acc=$(json_get "$topo.json" 'd["epochs"][-1]["test_accuracy"]')
  pass "$dp: shard node n2 killed in epoch 2: its steps went to stream_shard_$taker ($(json_get "$topo.json" 'd["stream"]["takeovers"][0]')); 3 x 3000 rows exactly once, exit 0 $KILL_TO_EXIT s after the kill, test accuracy $acc"
done

# --- 1b. the taker is lost too: shards on n1..n3, n3 dies in epoch 2 (its steps go to
# another shard), then n1 in epoch 3 (a taker, or a shard whose steps and
# whatever it took over go to the last one left). Trains what the
# uninterrupted run trains, every row exactly once per epoch.
four=('preprocess_nodes = ["n1", "n2", "n3"]' 'epochs = 4')
ref4="$HETFLOW_SCRATCH/reference4.toml"
write_topology "$ref4" 9670 4 auto "${common[@]}" "${four[@]}"
timeout 120 "$HETFLOW" run "$ref4" --report "$ref4.json" >"$ref4.out" 2>&1 || { cat "$ref4.out"; fail "4-node reference run"; }
want4=$(json_get "$ref4.json" '[(e["loss"], e["test_accuracy"]) for e in d["epochs"]]')
t2="$HETFLOW_SCRATCH/twice.toml"
write_topology "$t2" 9660 4 auto "${common[@]}" "${four[@]}"
run_and_kill "$t2" n3 "epoch 1/4 done" 90 120 n1 "epoch 2/4 done"
[[ $RUN_RC -eq 0 ]] || { cat "$t2.out"; fail "twice: exit $RUN_RC after losing n3 and n1, want 0"; }
[[ $(json_get "$t2.json" 'd["stream"]["exactly_once"] and [e["rows"] for e in d["stream"]["epochs"]] == [3000] * 4 and {t["node"] for t in d["stream"]["takeovers"]} == {"n3", "n1"} and all(t["taken_over_by"] == 1 for t in d["stream"]["takeovers"] if t["node"] == "n1")') == True ]] ||
  { python3 -m json.tool "$t2.json"; fail "twice: books or takeovers"; }
got4=$(json_get "$t2.json" '[(e["loss"], e["test_accuracy"]) for e in d["epochs"]]')
[[ "$got4" == "$want4" ]] || fail "twice: per-epoch loss/accuracy $got4 differ from the uninterrupted run's $want4"
pass "two shard nodes lost (n3, then n1): $(json_get "$t2.json" 'len(d["stream"]["takeovers"])') takeovers, the last shard left builds the rest; 4 x 3000 rows exactly once, training as uninterrupted"

# --- 2. stream_failover = false: the loss stops the job ------------------------------------------
kt="$HETFLOW_SCRATCH/nofailover.toml"
write_topology "$kt" 9550 3 auto "${common[@]}" 'epochs = 1000' 'stream_failover = false'
start_nodes "$kt" 3
pids=("${NODE_PIDS[@]}")
wait_for_text "$kt.n0.log" "epoch 1/1000 done" 60 || { cat "$kt".n*.log; fail "no failover: training never got going"; }
t0=$(date +%s.%N)
kill -KILL "${pids[2]}"
for i in 0 1; do
  wait_exit "${pids[$i]}" 10 || { cat "$kt".n*.log; fail "no failover: n$i still running 10 s after shard node n2 died"; }
  rc=$WAIT_RC
  ((rc != 0)) || { cat "$kt.n$i.log"; fail "no failover: n$i exited 0 after n2 died"; }
  grep -q "n2" <(grep -E "stopping|error" "$kt.n$i.log") || { cat "$kt.n$i.log"; fail "no failover: n$i does not name n2"; }
done
t1=$(date +%s.%N)
wait "${pids[2]}" 2>/dev/null
pass "stream_failover = false: shard node n2 killed mid-run, n0 and n1 exited non-zero naming it after $(awk "BEGIN{printf \"%.2f\", $t1 - $t0}") s"
