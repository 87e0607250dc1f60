#!/usr/bin/env bash
# job.kind = "train" with input = "stream": pre-processing shard actors on
# three `hetflow node` processes feed the trainer on n0 over the data plane.
#  1. 3 shards (one per node), augmentation on: the job passes its
#     exactly-once checks and the report has the stream's books;
#  2. without augmentation, 2 shards on n1 and n2 train exactly what the
#     in-memory path trains (same per-epoch loss and test accuracy);
#  3. a shard that duplicates or drops a row fails the job, saying so;
#  (4. SIGKILL of a shard node mid-run: train_stream_failover.sh.)
source "$(dirname "$0")/lib.sh"

common=('kind = "train"' 'model = "lenet5"' 'dataset = "synthetic"' 'input_shape = [1, 28, 28]'
  'train_size = 2000' 'test_size = 400' 'batch_size = 64' 'seed = 3')

# --- 1. three shards, augmented ---------------------------------------------------------------
topo="$HETFLOW_SCRATCH/stream.toml"
write_topology "$topo" 8310 3 auto "${common[@]}" 'epochs = 2' 'input = "stream"' 'augment = true' \
  'crop_padding = 1' 'prefetch = 2'
"$HETFLOW" validate "$topo" >/dev/null || fail "validate $topo"
t0=$(date +%s.%N)
timeout 120 "$HETFLOW" run "$topo" --report "$topo.json" >"$topo.out" 2>&1 ||
  { cat "$topo.out"; fail "streamed training run failed"; }
t1=$(date +%s.%N)
grep -q "epoch 2/2 done: loss" "$topo.out" || { cat "$topo.out"; fail "no per-epoch line"; }
for k in 0 1 2; do
  grep -q "\[n$k\].*actor 'stream_shard_$k' finished: sent" "$topo.out" ||
    { cat "$topo.out"; fail "shard $k did not finish on n$k"; }
done
check() {  # check PYTHON_EXPR MESSAGE
  [[ $(json_get "$topo.json" "$1") == True ]] || { python3 -m json.tool "$topo.json"; fail "report: $2"; }
}
check 'd["status"] == "ok" and d["input"] == "stream"' "status/input"
check 'len(d["epochs"]) == 2 and all(e["samples"] == 2000 and e["samples_per_s"] > 0 and e["loss"] > 0 for e in d["epochs"])' \
  "2 epochs of 2000 samples with loss and samples/s"
check 'd["stream"]["shards"] == 3 and d["stream"]["shard_nodes"] == ["n0", "n1", "n2"] and d["stream"]["augment"]' \
  "3 shards, one per node, augmented"
check 'd["stream"]["exactly_once"] and [e["rows"] for e in d["stream"]["epochs"]] == [2000, 2000]' \
  "exactly-once books: 2000 rows per epoch"
# Same set of rows every epoch (order-independent checksum), 32 batches per epoch.
check 'len({e["id_checksum"] for e in d["stream"]["epochs"]}) == 1 and d["stream"]["batches"] == 64' \
  "same row set each epoch, 64 batches"
# Credits bound the trainer's buffer: at most shards x prefetch batches waited.
check '0 < d["stream"]["max_buffered"] <= 6' "max_buffered within shards x prefetch"
# Each shard chose its threads from the free cores (1 <= min <= last <= max <= cores).
check "all(1 <= a['metrics']['parallelism']['min'] <= a['metrics']['parallelism']['last'] <= a['metrics']['parallelism']['max'] <= $(nproc) for a in d['actors'] if a['name'].startswith('stream_shard_')) and sum(a['name'].startswith('stream_shard_') for a in d['actors']) == 3" \
  "every shard reports its parallelism within 1..$(nproc)"
acc=$(json_get "$topo.json" 'd["epochs"][-1]["test_accuracy"]')
pass "3 shards on 3 nodes, augmented: exactly once, test accuracy $acc, $(awk "BEGIN{printf \"%.1f\", $t1 - $t0}") s"

# --- 2. streamed (2 shards on n1, n2) == in memory -----------------------------------------------
mem="$HETFLOW_SCRATCH/mem.toml"
st2="$HETFLOW_SCRATCH/stream2.toml"
write_topology "$mem" 8320 1 auto "${common[@]}" 'epochs = 2' 'max_steps_per_epoch = 20'
write_topology "$st2" 8330 3 auto "${common[@]}" 'epochs = 2' 'max_steps_per_epoch = 20' 'input = "stream"' \
  'preprocess_nodes = ["n1", "n2"]' 'preprocess_parallelism = 1'
# The same thread count on both trainers (n0 of each file): one.
sed -i '0,/^port = 8320$/s//port = 8320\ndevices = [ { kind = "cpu", threads = 1 } ]/' "$mem"
sed -i '0,/^port = 8330$/s//port = 8330\ndevices = [ { kind = "cpu", threads = 1 } ]/' "$st2"
timeout 120 "$HETFLOW" run "$mem" --report "$mem.json" >"$mem.out" 2>&1 || { cat "$mem.out"; fail "in-memory run"; }
timeout 120 "$HETFLOW" run "$st2" --report "$st2.json" >"$st2.out" 2>&1 || { cat "$st2.out"; fail "streamed run"; }
m=$(json_get "$mem.json" '[(e["loss"], e["test_accuracy"], e["samples"]) for e in d["epochs"]]')
s=$(json_get "$st2.json" '[(e["loss"], e["test_accuracy"], e["samples"]) for e in d["epochs"]]')
[[ "$m" == "$s" ]] || fail "streamed run differs from the in-memory run: $s vs $m"
[[ $(json_get "$st2.json" 'd["stream"]["shard_nodes"] == ["n1", "n2"] and [e["rows"] for e in d["stream"]["epochs"]] == [1280, 1280]') == True ]] ||
  fail "stream2 report: shards on n1, n2 and 20 x 64 rows per epoch"
[[ $(json_get "$st2.json" "[a['metrics']['parallelism'] for a in d['actors'] if a['name'].startswith('stream_shard_')] == [{'last': 1, 'min': 1, 'max': 1}] * 2") == True ]] ||
  fail "stream2 report: preprocess_parallelism = 1 pins both shards to 1 thread"
pass "2 shards on n1, n2 (1 thread each) without augmentation train exactly the in-memory batches: $s"

# --- 3. a broken shard fails the job loudly ----------------------------------------------------
for fault in duplicate drop; do
  f="$HETFLOW_SCRATCH/fault-$fault.toml"
  write_topology "$f" $((8340 + (${#fault} % 2) * 5)) 2 auto "${common[@]}" 'epochs = 1' 'input = "stream"' \
    "stream_fault = \"$fault\""
  timeout 60 "$HETFLOW" run "$f" --report "$f.json" >"$f.out" 2>&1
  rc=$?
  [[ $rc -eq 1 ]] || { cat "$f.out"; fail "fault $fault: exit $rc, want 1"; }
  grep -q "exactly-once check: .*stream_shard_0' on node 'n0'" "$f.out" ||
    { cat "$f.out"; fail "fault $fault: no exactly-once message naming the shard"; }
  pass "fault '$fault': $(grep -o "exactly-once check: [^']*" "$f.out" | head -1)"
done

# --- 4. a shard node dies mid-run: train_stream_failover.sh (the job goes on
# without it; with stream_failover = false it stops, naming the node).
