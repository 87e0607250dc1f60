#!/usr/bin/env bash
# Streamed input with parameter servers (strategy = "ps", input = "stream"):
# stream shard k feeds ps worker k mod W with exactly the batches of that
# worker's steps (the ones it would take from memory).
#  1. DLRM on raw Criteo text (dataset = "criteo-text", hash mode), 2 workers,
#     2 PS shards, 2 stream shards (one per worker, on its node), BSP: the
#     same loss per epoch and final weights, bit for bit, as the in-memory
#     ps run on a hash-mode preprocess job's records of the same text; every
#     training row once per epoch: each worker's books (rows, id checksum)
#     are its steps' rows, and together they are the whole training set
#     (the checksum of ids 0..rows-1, computed here); credits bound each
#     worker's buffer;
#  2. images (synthetic, lenet5), 2 workers, 3 stream shards (worker 0 has
#     two, worker 1 one), BSP: == the in-memory ps run bit for bit; with
#     augment: every row once per epoch;
#  3. a stream shard duplicating a row fails the job (exactly-once check);
#  4. refused at validate time: fewer stream shards than workers;
#     criteo-text with ps in memory.
source "$(dirname "$0")/lib.sh"

S=$HETFLOW_SCRATCH
R=1024
one_thread() { sed -i -E 's/^(port = [0-9]+)$/\1\ndevices = [ { kind = "cpu", threads = 1 } ]/' "$1"; }

# splitmix64 sum over ids 0..n-1 (kernels::sample_ledger::checksum_of), as the report's hex.
id_checksum() {
  python3 - "$1" <<'PY'
import sys
M = (1 << 64) - 1
def mix(x):
    x = (x + 0x9E3779B97F4A7C15) & M
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M
    return x ^ (x >> 31)
print("%016x" % (sum(mix(i + 1) for i in range(int(sys.argv[1]))) & M))
PY
}

# run NAME PORT NODES [job lines...]: a run that must succeed, with one trainer thread per node.
run() {
  local name=$1 port=$2 nodes=$3
  shift 3
  write_topology "$S/$name.toml" "$port" "$nodes" auto "$@"
  one_thread "$S/$name.toml"
  "$HETFLOW" validate "$S/$name.toml" >"$S/$name.validate" 2>&1 || { cat "$S/$name.validate"; fail "$name: validate"; }
  local t0 t1
  t0=$(date +%s.%N)
  timeout 180 "$HETFLOW" run "$S/$name.toml" --report "$S/$name.json" >"$S/$name.log" 2>&1 ||
    { cat "$S/$name.log"; fail "$name: run failed"; }
  t1=$(date +%s.%N)
  echo "$name: $(awk "BEGIN{printf \"%.1f\", $t1 - $t0}") s"
}

# books NAME ROWS STEPS BATCH WORKERS SHARDS PREFETCH: the stream books of a
# ps run (per worker and together) against the plan.
books() {
  python3 - "$S/$1.json" "$2" "$3" "$4" "$5" "$6" "$7" "$(id_checksum "$2")" <<'PY' || { cat "$S/$1.log"; fail "$1: stream books"; }
import json, sys
d = json.load(open(sys.argv[1]))
rows, steps, batch, W, S, prefetch = map(int, sys.argv[2:8])
want_sum = sys.argv[8]
ps = d["ps"]
epochs = len(d["epochs"])
# Worker w's steps are j % W == w; its rows are those steps' rows.
def rows_of(j): return min(batch, rows - j * batch)
want = [sum(rows_of(j) for j in range(w, steps, W)) for w in range(W)]
workers = sorted(ps["workers"], key=lambda x: x["rank"])
assert len(workers) == W, workers
for w, x in enumerate(workers):
    st = x["stream"]
    got = [e["rows"] for e in st["epochs"]]
    mine = len(range(w, S, W))
    print(f"worker {w}: rows per epoch {got} (want {want[w]}), {st['shards']} shard(s) on {st['shard_nodes']}, "
          f"batches {st['batches']}, max buffered {st['max_buffered']}, id checksums {[e['id_checksum'] for e in st['epochs']]}")
    assert x["input"] == "stream" and st["exactly_once"], st
    assert got == [want[w]] * epochs, (got, want[w])
    assert st["shards"] == mine, (st["shards"], mine)
    assert st["batches"] == epochs * len(range(w, steps, W)), st["batches"]
    assert 0 < st["max_buffered"] <= mine * prefetch, st["max_buffered"]  # credits
    assert x["steps"] == epochs * len(range(w, steps, W)), x["steps"]
t = ps["stream"]
print(f"together: {t}; the whole training set's id checksum {want_sum}")
assert t["exactly_once"], t
assert [e["rows"] for e in t["epochs"]] == [rows] * epochs, t
# Order-free checksums add: the workers' books together are every row 0..rows-1 once.
assert [e["id_checksum"] for e in t["epochs"]] == [want_sum] * epochs, t
for e in range(epochs):
    s = sum(int(x["stream"]["epochs"][e]["id_checksum"], 16) for x in workers) % (1 << 64)
    assert "%016x" % s == want_sum, (e, s)
assert d["input"] == "stream" and d["stream"]["epochs"][0]["rows"] == want[0]  # top level: worker 0's, as its epochs
PY
}

# same NAME REF: the same loss per epoch and final weights, bit for bit.
same() {
  local key='[(e["loss"], e["samples"]) for e in d["epochs"]] + [d["weights_checksum"]]'
  local a b
  a=$(json_get "$S/$1.json" "$key")
  b=$(json_get "$S/$2.json" "$key")
  [[ -n "$a" && "$a" == "$b" ]] || fail "$1 differs from $2: $a vs $b"
  echo "$1 == $2: $a"
}

# --- 1. DLRM on Criteo text -----------------------------------------------------------------------
"$HETFLOW" gen-criteo --rows 3000 --seed 11 --out "$S/clicks.tsv" 2>/dev/null || fail "gen-criteo"
write_topology "$S/pre.toml" 9300 1 auto 'kind = "preprocess"' 'inputs = ["clicks.tsv"]' 'output_dir = "pre-out"' \
  "categorical = { mode = \"hash\", range = $R }"
timeout 120 "$HETFLOW" run "$S/pre.toml" --report "$S/pre.json" >"$S/pre.log" 2>&1 || { cat "$S/pre.log"; fail "preprocess"; }
rows=$(json_get "$S/pre.json" 'd["rows"]')
train_rows=$((rows - (rows + 5) / 10))  # the last 10% (rounded) are the test set
dlrm=('kind = "train"' 'model = "dlrm"' 'embedding_dim = 4' 'bottom_mlp = [16]' 'top_mlp = [16]' 'batch_size = 64'
  'optimizer = "adam"' 'lr = 0.01' 'epochs = 2' 'seed = 5' 'strategy = "ps"' 'consistency = "bsp"')
run dlrm-mem 9304 2 "${dlrm[@]}" 'dataset = "criteo"' 'data_dir = "pre-out"' "table_rows = [$R]"
run dlrm-stream 9308 2 "${dlrm[@]}" 'dataset = "criteo-text"' 'inputs = ["clicks.tsv"]' \
  "categorical = { mode = \"hash\", range = $R }" 'input = "stream"' 'prefetch = 2'
grep -q "streamed from 2 stream shard(s), prefetch 2" "$S/dlrm-stream.log" || { cat "$S/dlrm-stream.log"; fail "no ps stream start line"; }
for k in 0 1; do
  grep -q "stream shard $k/2 for psworker$k" "$S/dlrm-stream.log" || { cat "$S/dlrm-stream.log"; fail "shard $k does not feed psworker$k"; }
done
# One shard per worker, on the worker's node.
[[ $(json_get "$S/dlrm-stream.json" '[x["stream"]["shard_nodes"] for x in sorted(d["ps"]["workers"], key=lambda x: x["rank"])]') == "[['n0'], ['n1']]" ]] ||
  fail "dlrm-stream: the stream shards are not next to their workers"
books dlrm-stream "$train_rows" $(((train_rows + 63) / 64)) 64 2 2 2
same dlrm-stream dlrm-mem
pass "dlrm on criteo text, 2 workers + 2 stream shards, BSP: every row once per epoch ($train_rows), the in-memory ps weights bit for bit"

# --- 2. images ----------------------------------------------------------------------------------------
img=('kind = "train"' 'model = "lenet5"' 'dataset = "synthetic"' 'input_shape = [1, 28, 28]' 'train_size = 600'
  'test_size = 200' 'batch_size = 32' 'lr = 0.02' 'epochs = 2' 'strategy = "ps"' 'ps_nodes = ["n0"]')
run img-mem 9312 2 "${img[@]}"
run img-stream 9316 2 "${img[@]}" 'input = "stream"' 'preprocess_shards = 3' 'prefetch = 2'
books img-stream 600 19 32 2 3 2
same img-stream img-mem
pass "synthetic images, 2 workers + 3 stream shards (2 + 1), BSP: the in-memory ps weights bit for bit"
run img-aug 9320 2 "${img[@]}" 'input = "stream"' 'augment = true'
books img-aug 600 19 32 2 2 4
[[ $(json_get "$S/img-aug.json" 'd["stream"]["augment"]') == True ]] || fail "img-aug: not augmented"
pass "synthetic images, augmented, 2 workers + 2 stream shards: every row once per epoch"

# Fashion-MNIST where installed (epochs cut to 15 steps): == in memory; augmented.
if [[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]]; then
  fash=('kind = "train"' 'model = "lenet5"' 'dataset = "fashion-mnist"' 'batch_size = 32' 'epochs = 2'
    'max_steps_per_epoch = 15' 'eval_each_epoch = false' 'strategy = "ps"' 'ps_nodes = ["n0"]')
  run fash-mem 9340 2 "${fash[@]}"
  run fash-stream 9344 2 "${fash[@]}" 'input = "stream"'
  same fash-stream fash-mem
  run fash-aug 9348 2 "${fash[@]}" 'input = "stream"' 'augment = true' 'preprocess_nodes = ["n1"]'
  # 15 steps of 32: worker 0 takes 8, worker 1 7; both shards on n1.
  [[ $(json_get "$S/fash-aug.json" 'd["ps"]["stream"]["exactly_once"] and [e["rows"] for e in d["ps"]["stream"]["epochs"]] == [480, 480] and [[e["rows"] for e in w["stream"]["epochs"]] for w in sorted(d["ps"]["workers"], key=lambda w: w["rank"])] == [[256, 256], [224, 224]] and d["stream"]["augment"] and d["stream"]["shard_nodes"] == ["n1"]') == True ]] ||
    { python3 -m json.tool "$S/fash-aug.json"; fail "fash-aug: stream books"; }
  pass "fashion-mnist, 2 workers: streamed == in memory bit for bit; augmented (shards on n1): every used row once"
else
  echo "no /usr/share/datasets/fashion-mnist: the fashion-mnist part is skipped"
fi

# Checkpoint and --resume: the run's checkpoint at clock 10 alone (as if it
# had died there), resumed, ends with the uninterrupted weights; the
# workers take and drop the batches of the steps before their resumed
# clocks (the shards replay every step), so the books stay whole.
run img-ck 9326 2 "${img[@]}" 'input = "stream"' 'checkpoint_every = 10' "checkpoint_dir = \"$S/ck\""
same img-ck img-mem
mkdir -p "$S/ck2"
cp "$S/ck"/*ckpt-000000000010 "$S/ck2/" 2>/dev/null || { ls "$S/ck"; fail "no checkpoint 10"; }
sed "s|$S/ck\"|$S/ck2\"|" "$S/img-ck.toml" >"$S/img-ck2.toml"
timeout 180 "$HETFLOW" run "$S/img-ck2.toml" --resume --report "$S/img-ck2.json" >"$S/img-ck2.log" 2>&1 ||
  { cat "$S/img-ck2.log"; fail "resumed streamed run failed"; }
grep -q "resuming from checkpoint 10" "$S/img-ck2.log" || { cat "$S/img-ck2.log"; fail "no resume from 10"; }
[[ $(json_get "$S/img-ck2.json" 'd["weights_checksum"]') == $(json_get "$S/img-ck.json" 'd["weights_checksum"]') ]] ||
  fail "resumed from 10: not the uninterrupted weights"
[[ $(json_get "$S/img-ck2.json" '[e["rows"] for e in d["ps"]["stream"]["epochs"]]') == "[600, 600]" ]] ||
  fail "resumed from 10: stream books"
pass "streamed ps run checkpointed and resumed from clock 10: the uninterrupted weights, books whole"

# --- 3. exactly-once fault ---------------------------------------------------------------------------
write_topology "$S/dup.toml" 9324 2 auto "${img[@]}" 'input = "stream"' 'stream_fault = "duplicate"'
timeout 120 "$HETFLOW" run "$S/dup.toml" >"$S/dup.log" 2>&1
rc=$?
[[ $rc -ne 0 ]] && grep -q "exactly-once check: sample .* came twice .*stream_shard_" "$S/dup.log" ||
  { cat "$S/dup.log"; fail "duplicate fault: exit $rc, want non-zero with an exactly-once message"; }
pass "a stream shard duplicating a row fails the ps job: $(grep -o "exactly-once check: [^(]*" "$S/dup.log" | head -1)"

# --- 4. refusals ----------------------------------------------------------------------------------------
refuse() {  # refuse NAME WANT NODES [job lines...]
  local name=$1 want=$2 nodes=$3
  shift 3
  write_topology "$S/$name.toml" 9330 "$nodes" auto "$@"
  "$HETFLOW" validate "$S/$name.toml" >"$S/$name.out" 2>&1
  local rc=$?
  [[ $rc -eq 2 ]] && grep -qF -- "$want" "$S/$name.out" || { cat "$S/$name.out"; fail "$name: exit $rc, want 2 and '$want'"; }
  echo "$name: $(grep -F -- "$want" "$S/$name.out" | head -1)"
}
refuse few-shards 'preprocess_shards = 1 is fewer than the 3 ps workers' 3 "${img[@]}" 'input = "stream"' \
  'preprocess_shards = 1'
refuse text-memory 'with strategy = "ps" set input = "stream"' 1 'kind = "train"' 'strategy = "ps"' 'model = "dlrm"' \
  'dataset = "criteo-text"' 'inputs = ["clicks.tsv"]'
pass "refused at validate time: fewer stream shards than ps workers, criteo-text with ps in memory"
