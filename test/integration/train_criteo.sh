#!/usr/bin/env bash
# job.kind = "train" with model dlrm on dataset criteo, through `hetflow run`:
# gen-criteo text -> a preprocess job (vocab, min_count 2) -> a train job on
# its output_dir. gen-criteo's clicks depend on a few of its columns
# (kernels/preprocess/synthetic_criteo.hpp); on its data this test checks
# that the pipeline runs and reports logloss and AUC. The learning check uses
# Criteo-format text whose clicks depend on I1, C1 and C2 (written below),
# with a known ceiling. Also: the validate-time errors.
source "$(dirname "$0")/lib.sh"

S=$HETFLOW_SCRATCH

# preprocess NAME INPUT PORT -> $S/NAME-out
preprocess() {
  write_topology "$S/$1-pre.toml" "$3" 1 auto 'kind = "preprocess"' "inputs = [\"$2\"]" \
    "output_dir = \"$1-out\"" 'categorical = { mode = "vocab", min_count = 2 }'
  timeout 120 "$HETFLOW" run "$S/$1-pre.toml" --report "$S/$1-pre.json" >"$S/$1-pre.log" 2>&1 ||
    { cat "$S/$1-pre.log"; fail "$1: preprocess"; }
}
# train NAME PORT [job lines...]: dlrm on $S/NAME-out (data_dir relative to the file)
train() {
  local name=$1 port=$2
  shift 2
  write_topology "$S/$name.toml" "$port" 1 auto 'kind = "train"' 'model = "dlrm"' 'dataset = "criteo"' \
    "data_dir = \"$name-out\"" 'embedding_dim = 4' 'bottom_mlp = [16]' 'top_mlp = [16]' 'batch_size = 128' \
    'optimizer = "adam"' 'lr = 0.01' "$@"
  timeout 300 "$HETFLOW" run "$S/$name.toml" --report "$S/$name.json" >"$S/$name.log" 2>&1 ||
    { cat "$S/$name.log"; fail "$name: train"; }
}

"$HETFLOW" gen-criteo --rows 20000 --seed 3 --out "$S/gen.tsv" 2>/dev/null || fail "gen-criteo"
preprocess gen "$S/gen.tsv" 7940
train gen 7942 'epochs = 1'
grep -Eq "epoch 1/1 done: .*test logloss 0\.[0-9]+, test AUC 0\.[0-9]+" "$S/gen.log" ||
  { cat "$S/gen.log"; fail "gen: no per-epoch line with logloss and AUC"; }
json_get "$S/gen.json" 'len(d["epochs"]) == 1 and d["epochs"][0]["samples"] == 18000 and 0 < d["epochs"][0]["test_logloss"] < 1 and 0 <= d["epochs"][0]["test_auc"] <= 1' |
  grep -q True || { cat "$S/gen.json"; fail "gen: report"; }
pass "gen-criteo -> preprocess -> dlrm: test AUC $(json_get "$S/gen.json" 'round(d["epochs"][0]["test_auc"], 4)') (gen-criteo)"

# Learnable clicks: logit = 1.5 * w(C1) + w(C2) + (I1 - 10) / 5, label = 1
# when positive, flipped for 10% of the rows; the other columns are noise
# from small vocabularies.
python3 - "$S/learn.tsv" <<'PY' || fail "writing learnable data"
import random, sys
r = random.Random(5)
w1 = [r.uniform(-1, 1) for _ in range(60)]
w2 = [r.uniform(-1, 1) for _ in range(30)]
with open(sys.argv[1], "w") as f:
    for _ in range(20000):
        i1, c1, c2 = r.randrange(20), r.randrange(60), r.randrange(30)
        click = 1.5 * w1[c1] + w2[c2] + (i1 - 10) / 5 > 0
        label = int(click != (r.random() < 0.1))
        dense = [str(i1)] + [str(r.randrange(50)) for _ in range(12)]
        cats = ["a%02x" % c1, "b%02x" % c2] + ["%x" % r.randrange(40) for _ in range(24)]
        f.write("\t".join([str(label)] + dense + cats) + "\n")
PY
preprocess learn "$S/learn.tsv" 7944
train learn 7946 'epochs = 2'
auc=$(json_get "$S/learn.json" 'd["epochs"][-1]["test_auc"]')
ll=$(json_get "$S/learn.json" 'd["epochs"][-1]["test_logloss"]')
# 2000 test rows: chance is 0.5 +- 0.013 (1 sd); the labels' ceiling is about 0.9.
python3 -c "import sys; sys.exit(0 if $auc > 0.75 and $ll < 0.6 else 1)" ||
  { cat "$S/learn.log"; fail "learnable clicks: test AUC $auc, logloss $ll after 2 epochs"; }
json_get "$S/learn.json" 'd["model"] == "dlrm" and d["epochs"][0]["test_accuracy"] > 0.5' | grep -q True ||
  { cat "$S/learn.json"; fail "learn: report"; }
pass "learnable clicks: test AUC $auc, logloss $ll after 2 epochs ($(json_get "$S/learn.json" 'int(d["epochs"][-1]["samples_per_s"])') samples/s)"

# Pairing and strategy errors at validate time (exit 2, naming the keys).
refuse() {  # refuse NAME WANT [job lines...]
  local name=$1 want=$2
  shift 2
  write_topology "$S/$name.toml" 7950 1 auto 'kind = "train"' "$@"
  "$HETFLOW" validate "$S/$name.toml" >"$S/$name.out" 2>&1
  local rc=$?
  [[ $rc -eq 2 ]] && grep -q "$want" "$S/$name.out" || { cat "$S/$name.out"; fail "$name: exit $rc, want 2 and '$want'"; }
}
refuse dlrm-images 'model = "dlrm" trains on click logs' 'model = "dlrm"'
refuse criteo-mlp 'trains model = "dlrm"' 'model = "mlp"' 'dataset = "criteo"' 'data_dir = "learn-out"'
refuse criteo-no-dir 'needs data_dir' 'model = "dlrm"' 'dataset = "criteo"'
refuse dlrm-dp 'sparse' 'model = "dlrm"' 'dataset = "criteo"' 'data_dir = "learn-out"' 'strategy = "dp"'
# Streamed records (train_stream_criteo.sh) take no augmentation.
refuse dlrm-stream-augment 'augment applies to images' 'model = "dlrm"' 'dataset = "criteo"' 'data_dir = "learn-out"' 'input = "stream"' 'augment = true'
write_topology "$S/missing.toml" 7952 1 auto 'kind = "train"' 'model = "dlrm"' 'dataset = "criteo"' 'data_dir = "nowhere"'
timeout 60 "$HETFLOW" run "$S/missing.toml" >"$S/missing.log" 2>&1 && fail "a missing data_dir trained"
grep -q "no directory $S/nowhere" "$S/missing.log" || { cat "$S/missing.log"; fail "missing data_dir: message"; }
pass "dlrm/criteo pairing, dp, augmenting streamed records and a missing data_dir are clear errors"
