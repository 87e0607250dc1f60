#!/usr/bin/env bash
# DLRM on generated Criteo data (issue 6): training samples/s with the
# embedding tables on 1 and 2 parameter-server shards, side by side with
# single-device hetflow and PyTorch (the same model, batch and optimizer).
#
#   bench/dlrm/run.sh [ROWS]        (default 1000000)
#
# ROWS rows of `hetflow gen-criteo --seed 1` (clicks depend on the features),
# pre-processed once in hash mode (range HASH_RANGE, default 100000 ids per
# column: 26 tables of up to 100000 x 16 floats), the last 10% held out.
# Model: DLRM with embedding_dim 16, bottom MLP [512, 256, 64], top MLP
# [512, 256] (the DLRM Kaggle sizes), batch 128, optimizer OPT (adam; or sgd)
# with lr LR (0.005), one pass of
# STEPS global steps (default 1200; workers split them). Runs, each started
# when the machine is quiet (bench/lib.sh):
#   hetflow single  1 node, 1 thread
#   hetflow ps      W workers x K shards on 2 local nodes pinned to one core
#                   each (node n0: worker 0 and shard 0; n1: worker 1, shard 1)
#   pytorch         bench/dlrm/torch_dlrm.py (Debian's python3-torch), 1 and 2 threads
# PS samples/s: every worker's samples over its pull + compute seconds, summed
# over workers. Prints a Markdown table. Environment: HETFLOW, WORK
# (default /tmp/hetflow-bench-dlrm), STEPS, HASH_RANGE, OPT, LR.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
HETFLOW=${HETFLOW:-$root/build/bin/hetflow}
WORK=${WORK:-/tmp/hetflow-bench-dlrm}
PY=/usr/bin/python3
ROWS=${1:-1000000}
STEPS=${STEPS:-1200}
HASH_RANGE=${HASH_RANGE:-100000}
OPT=${OPT:-adam}
LR=${LR:-0.005}
[[ -x "$HETFLOW" ]] || { echo "no hetflow binary at $HETFLOW (set HETFLOW)" >&2; exit 2; }
mkdir -p "$WORK"
source "$root/bench/lib.sh"

data="$WORK/criteo-$ROWS.tsv"
[[ -s "$data" ]] || "$HETFLOW" gen-criteo --rows "$ROWS" --seed 1 --out "$data" >/dev/null
pre="$WORK/pre-$ROWS-$HASH_RANGE"
if [[ ! -s "$pre/part-00000.bin" ]]; then
  cat >"$WORK/pre.toml" <<TOML
[cluster]
name = "bench-dlrm-pre"
[[nodes]]
name = "n0"
host = "127.0.0.1"
port = 7610
[job]
kind = "preprocess"
inputs = ["$data"]
output_dir = "$pre"
categorical = { mode = "hash", range = $HASH_RANGE }
TOML
  "$HETFLOW" run "$WORK/pre.toml" >"$WORK/pre.log" 2>&1 || { cat "$WORK/pre.log"; exit 1; }
fi

job() {
  cat <<TOML
[job]
kind = "train"
model = "dlrm"
dataset = "criteo"
data_dir = "$pre"
test_fraction = 0.1
embedding_dim = 16
bottom_mlp = [512, 256, 64]
top_mlp = [512, 256]
batch_size = 128
optimizer = "$OPT"
lr = $LR
momentum = 0
epochs = 1
max_steps_per_epoch = $STEPS
TOML
}

# topology NAME NODES [extra job lines...]
topology() {
  local name=$1 f="$WORK/$1.toml" n=$2 i
  shift 2
  {
    echo '[cluster]'
    echo "name = \"bench-dlrm-$name\""
    echo 'join_timeout = "60s"'
    for ((i = 0; i < n; i++)); do
      printf '[[nodes]]\nname = "n%d"\nhost = "127.0.0.1"\nport = %d\ndevices = [ { kind = "cpu", threads = 1 } ]\n' "$i" $((7620 + i))
    done
    job
    for l in "$@"; do echo "$l"; done
  } >"$f"
  echo "$f"
}

rows_table=()
row() { rows_table+=("$1"); echo "$1" >&2; }

# hetflow single
f=$(topology single 1)
wait_quiet
"$HETFLOW" run "$f" --report "$f.json" >"$f.log" 2>&1 || { cat "$f.log"; exit 1; }
row "$("$PY" - "$f.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); e = d["epochs"][-1]
print(f"| hetflow single, 1 thread | - | {e['samples_per_s']:.0f} | {e['test_auc']:.4f} | {e['test_logloss']:.4f} |")
PY
)"

for cfg in "1 1" "1 2" "2 1" "2 2"; do
  read -r W K <<<"$cfg"
  workers='["n0"]'; [[ $W -eq 2 ]] && workers='["n0", "n1"]'
  f=$(topology "ps-w$W-k$K" 2 'strategy = "ps"' 'consistency = "bsp"' "ps_workers = $workers" "ps_shards = $K" \
    "$([[ $K -eq 1 ]] && echo 'ps_nodes = ["n1"]' || echo 'ps_nodes = ["n0", "n1"]')")
  wait_quiet
  "$HETFLOW" run "$f" --report "$f.json" >"$f.log" 2>&1 || { cat "$f.log"; exit 1; }
  row "$("$PY" - "$f.json" "$W" "$K" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); W, K = sys.argv[2:4]
ps = d["ps"]; e = d["epochs"][-1]
sps = sum(w["steps"] * 128 / (w["pull_seconds"] + w["compute_seconds"]) for w in ps["workers"])
pull = sum(w["pull_seconds"] for w in ps["workers"]) / sum(w["pull_seconds"] + w["compute_seconds"] for w in ps["workers"])
mb = sum(w["bytes_sent"] + w["bytes_received"] for w in ps["workers"]) / sum(w["steps"] for w in ps["workers"]) / 1e6
print(f"| hetflow ps, {W} worker(s) x {K} shard(s) | {mb:.2f} MB/step, pull {100 * pull:.0f}% | {sps:.0f} | {e['test_auc']:.4f} | {e['test_logloss']:.4f} |")
PY
)"
done

for t in 1 2; do
  wait_quiet
  out=$(OPENBLAS_NUM_THREADS=$t OMP_NUM_THREADS=$t "$PY" "$here/torch_dlrm.py" "$pre" --batch 128 --threads $t \
    --lr "$LR" --optimizer "$OPT" --max-steps "$STEPS")
  row "$("$PY" -c "
import json, sys
d = json.loads(sys.argv[1])
print(f\"| pytorch {d['torch']}, {d['threads']} thread(s) | - | {d['samples_per_s']:.0f} | {d['test_auc']:.4f} | {d['test_logloss']:.4f} |\")" "$out")"
done

echo
echo "DLRM, $ROWS generated rows (hash range $HASH_RANGE), batch 128, $OPT lr $LR, $STEPS steps; $(nproc) cores$([[ $noisy -eq 1 ]] && echo ', NOISY (machine was busy)')"
echo
echo "| run | traffic | train samples/s | test AUC | test logloss |"
echo "|---|---|---|---|---|"
printf '%s\n' "${rows_table[@]}"
