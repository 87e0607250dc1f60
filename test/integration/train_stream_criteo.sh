#!/usr/bin/env bash
# Streamed DLRM training on raw Criteo text (dataset = "criteo-text",
# input = "stream"): stream shards index the text on their own nodes and
# parse + hash each batch's rows straight into the batch messages.
#  1. the reference: a preprocess job in hash mode (range 4096) on the same
#     text, then in-memory dlrm training on its records (table_rows = 4096);
#  2. streamed from 1 shard (on n1) and from 2 shards (n0, n1) of a 2-node
#     cluster: the same loss, test logloss/AUC per epoch and the same final
#     weights checksum as (1), bit for bit; every row once per epoch (the
#     ledger), the trainer's buffer within shards x prefetch (credits), the
#     malformed lines skipped and counted as the preprocess job counted them;
#     a shard that duplicates a row fails the job (the ledger);
#  3. in-memory training on criteo-text equals (1) too;
#  4. validate-time refusals (vocab mode, range, table_rows, augment, ps);
#  5. streamed from a preprocess job's records (dataset = "criteo"), hash and
#     vocab mode, 2 shards: equal to in-memory training on the same records.
source "$(dirname "$0")/lib.sh"

S=$HETFLOW_SCRATCH
R=4096

"$HETFLOW" gen-criteo --rows 6000 --seed 9 --out "$S/gen.tsv" 2>/dev/null || fail "gen-criteo"
# Two input files; malformed lines among the good ones: a short line, a bad
# integer, an empty line, and a last line without newline.
python3 - "$S/gen.tsv" "$S/a.tsv" "$S/b.tsv" <<'PY' || fail "writing the inputs"
import sys
lines = open(sys.argv[1]).read().splitlines(True)
a, b = lines[:4000], lines[4000:]
a.insert(10, "1\t2\t3\n")
f = a[500].split("\t"); f[2] = "7x"; a.insert(500, "\t".join(f))
a.insert(3000, "\n")
b.append("0\t1\t2")
open(sys.argv[2], "w").write("".join(a))
open(sys.argv[3], "w").write("".join(b))
PY
MALFORMED=4

# --- 1. reference: preprocess (hash) -> in-memory training on the records ----------------------
dlrm=('kind = "train"' 'model = "dlrm"' 'embedding_dim = 4' 'bottom_mlp = [16]' 'top_mlp = [16]'
  'batch_size = 128' 'optimizer = "adam"' 'lr = 0.01' 'epochs = 2' 'seed = 5')
write_topology "$S/pre.toml" 8360 1 auto 'kind = "preprocess"' 'inputs = ["a.tsv", "b.tsv"]' \
  'output_dir = "pre-out"' "categorical = { mode = \"hash\", range = $R }"
timeout 120 "$HETFLOW" run "$S/pre.toml" --report "$S/pre.json" >"$S/pre.log" 2>&1 || { cat "$S/pre.log"; fail "preprocess"; }
rows=$(json_get "$S/pre.json" 'd["rows"]')
[[ $rows == 6000 ]] || { cat "$S/pre.json"; fail "preprocess wrote $rows rows, want 6000"; }
[[ $(json_get "$S/pre.json" 'd["malformed"]') == "$MALFORMED" ]] || { cat "$S/pre.json"; fail "preprocess: malformed"; }

# One trainer thread everywhere: the same arithmetic in every run.
one_thread() { sed -i "0,/^port = $2\$/s//port = $2\ndevices = [ { kind = \"cpu\", threads = 1 } ]/" "$1"; }
write_topology "$S/mem.toml" 8362 1 auto "${dlrm[@]}" 'dataset = "criteo"' 'data_dir = "pre-out"' "table_rows = [$R]"
one_thread "$S/mem.toml" 8362
t0=$(date +%s.%N)
timeout 300 "$HETFLOW" run "$S/mem.toml" --report "$S/mem.json" >"$S/mem.log" 2>&1 || { cat "$S/mem.log"; fail "in-memory run"; }
t1=$(date +%s.%N)
mem_s=$(awk "BEGIN{printf \"%.1f\", $t1 - $t0}")
key='[(e["loss"], e["test_logloss"], e["test_auc"], e["samples"]) for e in d["epochs"]] + [d["weights_checksum"]]'
ref=$(json_get "$S/mem.json" "$key")
pass "reference: preprocess (hash, range $R) + in-memory dlrm: $ref"

# --- 2. streamed from the text, 1 and 2 shards on 2 nodes -----------------------------------------
text=('dataset = "criteo-text"' 'inputs = ["a.tsv", "b.tsv"]' "categorical = { mode = \"hash\", range = $R }")
stream_run() {  # stream_run NAME PORT SHARDS [job lines...]
  local name=$1 port=$2 shards=$3
  shift 3
  write_topology "$S/$name.toml" "$port" 2 auto "${dlrm[@]}" "${text[@]}" 'input = "stream"' 'prefetch = 2' "$@"
  one_thread "$S/$name.toml" "$port"
  "$HETFLOW" validate "$S/$name.toml" >"$S/$name.validate" 2>&1 || { cat "$S/$name.validate"; fail "$name: validate"; }
  local t0 t1
  t0=$(date +%s.%N)
  timeout 300 "$HETFLOW" run "$S/$name.toml" --report "$S/$name.json" >"$S/$name.log" 2>&1 ||
    { cat "$S/$name.log"; fail "$name: streamed run"; }
  t1=$(date +%s.%N)
  local got
  got=$(json_get "$S/$name.json" "$key")
  [[ "$got" == "$ref" ]] || fail "$name: streamed training differs from the in-memory run on the records: $got vs $ref"
  check() {
    [[ $(json_get "$S/$name.json" "$1") == True ]] || { python3 -m json.tool "$S/$name.json"; fail "$name report: $2"; }
  }
  check 'd["input"] == "stream" and d["stream"]["shards"] == '"$shards" "input/shards"
  # 5400 training rows (the last 10% are the test set): 43 batches a epoch.
  check 'd["stream"]["exactly_once"] and [e["rows"] for e in d["stream"]["epochs"]] == [5400, 5400] and d["stream"]["batches"] == 86' \
    "exactly-once books: 5400 rows per epoch, 86 batches"
  check '0 < d["stream"]["max_buffered"] <= 2 * '"$shards" "max_buffered within shards x prefetch"
  check 'd["stream"]["criteo_text"]["rows"] == 6000 and d["stream"]["criteo_text"]["malformed"]["total"] == '"$MALFORMED" \
    "the trainer's index: 6000 rows, $MALFORMED malformed"
  # Counted per kind, with the same examples (file:line), as the preprocess job did.
  [[ "$(json_get "$S/$name.json" 'json.dumps(d["stream"]["criteo_text"]["malformed"], sort_keys=True)')" == \
     "$(json_get "$S/pre.json" 'json.dumps(d["shards"][0]["malformed"], sort_keys=True)')" ]] ||
    fail "$name: the malformed report differs from the preprocess job's"
  local k
  for ((k = 0; k < shards; k++)); do
    grep -q "actor 'stream_shard_$k' finished: sent .* $MALFORMED malformed" "$S/$name.log" ||
      { cat "$S/$name.log"; fail "$name: shard $k's summary does not count $MALFORMED malformed lines"; }
  done
  check '[a["metrics"]["criteo_text"]["malformed"]["total"] for a in d["actors"] if a["name"].startswith("stream_shard")] == ['"$(printf "$MALFORMED,%.0s" $(seq $shards))"']' \
    "every shard's report counts the malformed lines"
  pass "$name: $shards shard(s) on $(json_get "$S/$name.json" '",".join(d["stream"]["shard_nodes"])') == in-memory bit for bit" \
    "($(json_get "$S/$name.json" 'int(d["epochs"][-1]["samples_per_s"])') samples/s in training," \
    "$(awk "BEGIN{printf \"%.1f\", $t1 - $t0}") s in all; in-memory $(json_get "$S/mem.json" 'int(d["epochs"][-1]["samples_per_s"])') samples/s, $mem_s s)"
}
stream_run stream1 8364 1 'preprocess_nodes = ["n1"]'
stream_run stream2 8368 2

# A shard that duplicates a row fails the job through the ledger, as for images.
write_topology "$S/dup.toml" 8380 2 auto "${dlrm[@]}" "${text[@]}" 'input = "stream"' 'stream_fault = "duplicate"'
timeout 120 "$HETFLOW" run "$S/dup.toml" >"$S/dup.log" 2>&1
rc=$?
[[ $rc -ne 0 ]] && grep -q "exactly-once check: sample .* came twice .*stream_shard_0" "$S/dup.log" ||
  { cat "$S/dup.log"; fail "duplicate fault: exit $rc, want non-zero with an exactly-once message"; }
pass "a shard duplicating a row fails the job: $(grep -o "exactly-once check: [^(]*" "$S/dup.log" | head -1)"

# --- 3. in memory from the text -------------------------------------------------------------------
write_topology "$S/memtext.toml" 8372 1 auto "${dlrm[@]}" "${text[@]}"
one_thread "$S/memtext.toml" 8372
timeout 300 "$HETFLOW" run "$S/memtext.toml" --report "$S/memtext.json" >"$S/memtext.log" 2>&1 ||
  { cat "$S/memtext.log"; fail "in-memory criteo-text run"; }
[[ $(json_get "$S/memtext.json" "$key") == "$ref" ]] || fail "in-memory criteo-text differs from the records run"
pass "in-memory criteo-text == in-memory records"

# --- 5. streamed from a preprocess job's records (dataset = "criteo") ---------------------------
# The hash-mode records of (1), and a vocab-mode run (min_count 2: OOV ids),
# each streamed by 2 shards on 2 nodes: the same losses, test metrics and
# final weights as in-memory training on the same records, bit for bit.
write_topology "$S/prevocab.toml" 8390 2 auto 'kind = "preprocess"' 'inputs = ["a.tsv", "b.tsv"]' \
  'output_dir = "vocab-out"' 'categorical = { mode = "vocab", min_count = 2 }'
timeout 120 "$HETFLOW" run "$S/prevocab.toml" >"$S/prevocab.log" 2>&1 || { cat "$S/prevocab.log"; fail "vocab preprocess"; }
write_topology "$S/memvocab.toml" 8393 1 auto "${dlrm[@]}" 'dataset = "criteo"' 'data_dir = "vocab-out"'
one_thread "$S/memvocab.toml" 8393
timeout 300 "$HETFLOW" run "$S/memvocab.toml" --report "$S/memvocab.json" >"$S/memvocab.log" 2>&1 ||
  { cat "$S/memvocab.log"; fail "in-memory vocab records run"; }
ref_vocab=$(json_get "$S/memvocab.json" "$key")
for mode in hash vocab; do
  if [[ $mode == hash ]]; then rec=('data_dir = "pre-out"' "table_rows = [$R]"); want=$ref; port=8395
  else rec=('data_dir = "vocab-out"'); want=$ref_vocab; port=8398; fi
  name="records-$mode"
  write_topology "$S/$name.toml" $port 2 auto "${dlrm[@]}" 'dataset = "criteo"' "${rec[@]}" 'input = "stream"' 'prefetch = 2'
  one_thread "$S/$name.toml" $port
  "$HETFLOW" validate "$S/$name.toml" >"$S/$name.validate" 2>&1 || { cat "$S/$name.validate"; fail "$name: validate"; }
  timeout 300 "$HETFLOW" run "$S/$name.toml" --report "$S/$name.json" >"$S/$name.log" 2>&1 ||
    { cat "$S/$name.log"; fail "$name: streamed run"; }
  got=$(json_get "$S/$name.json" "$key")
  [[ "$got" == "$want" ]] || fail "$name: streamed records differ from in-memory training on them: $got vs $want"
  [[ $(json_get "$S/$name.json" 'd["stream"]["shards"] == 2 and d["stream"]["exactly_once"] and [e["rows"] for e in d["stream"]["epochs"]] == [5400, 5400] and d["stream"]["criteo_records"]["rows"] == 6000 and d["stream"]["criteo_records"]["parts"] >= 1') == True ]] ||
    { python3 -m json.tool "$S/$name.json"; fail "$name: report (2 shards, exactly once, 6000 records)"; }
  pass "$mode-mode records streamed by 2 shards == in-memory on the same records, bit for bit: $got"
done
write_topology "$S/recaug.toml" 8376 1 auto "${dlrm[@]}" 'dataset = "criteo"' 'data_dir = "pre-out"' 'input = "stream"' 'augment = true'
"$HETFLOW" validate "$S/recaug.toml" >"$S/recaug.out" 2>&1
[[ $? -eq 2 ]] && grep -q 'augment applies to images' "$S/recaug.out" || { cat "$S/recaug.out"; fail "criteo records: augment not refused"; }

# --- 4. refusals at validate time ---------------------------------------------------------------------
refuse() {  # refuse NAME WANT [job lines...]
  local name=$1 want=$2
  shift 2
  write_topology "$S/$name.toml" 8376 1 auto 'kind = "train"' 'dataset = "criteo-text"' "$@"
  "$HETFLOW" validate "$S/$name.toml" >"$S/$name.out" 2>&1
  local rc=$?
  [[ $rc -eq 2 ]] && grep -q "$want" "$S/$name.out" || { cat "$S/$name.out"; fail "$name: exit $rc, want 2 and '$want'"; }
}
refuse no-inputs 'needs inputs' 'model = "dlrm"'
refuse vocab 'vocab mode needs' 'model = "dlrm"' 'inputs = ["a.tsv"]' 'categorical = { mode = "vocab" }'
refuse range 'categorical.range' 'model = "dlrm"' 'inputs = ["a.tsv"]' 'categorical = { mode = "hash", range = 16777217 }'
refuse tables 'remove table_rows' 'model = "dlrm"' 'inputs = ["a.tsv"]' 'table_rows = [10]'
refuse augment 'augment applies to images' 'model = "dlrm"' 'inputs = ["a.tsv"]' 'input = "stream"' 'augment = true'
refuse ps 'strategy = "single" only' 'model = "dlrm"' 'inputs = ["a.tsv"]' 'strategy = "ps"'
refuse mlp 'trains model = "dlrm"' 'inputs = ["a.tsv"]' 'model = "mlp"'
pass "criteo-text: vocab mode, range, table_rows, augment, strategy ps and model mlp are refused at validate time"
