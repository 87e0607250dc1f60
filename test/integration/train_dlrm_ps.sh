#!/usr/bin/env bash
# DLRM with its embedding tables on parameter-server shards (strategy "ps",
# issue 6), on Criteo-format clicks that depend on the features, through
# text -> a preprocess job (hash mode) -> train jobs on its records:
#  - 1 worker + 2 shards, BSP: the single-device run's weights bit for bit
#    (tables split by rows over both shards, rows pulled and pushed sparsely);
#  - 2 workers + 2 shards, BSP: learns (test AUC), every step once, each
#    shard holds a piece of all 26 tables, and workers pull far fewer table
#    rows than whole tables;
#  - 2 workers + 1 shard, ASP with SGD + momentum: learns too.
source "$(dirname "$0")/lib.sh"

S=$HETFLOW_SCRATCH
one_thread() { sed -i -E 's/^(port = [0-9]+)$/\1\ndevices = [ { kind = "cpu", threads = 1 } ]/' "$1"; }

# Learnable clicks (as train_criteo.sh): logit = 1.5 w(C1) + w(C2) + (I1 - 10) / 5,
# 10% of the labels flipped; the other columns are noise.
python3 - "$S/clicks.tsv" <<'PY' || fail "writing the click data"
import random, sys
r = random.Random(7)
w1 = [r.uniform(-1, 1) for _ in range(60)]
w2 = [r.uniform(-1, 1) for _ in range(30)]
with open(sys.argv[1], "w") as f:
    for _ in range(12000):
        i1, c1, c2 = r.randrange(20), r.randrange(60), r.randrange(30)
        click = 1.5 * w1[c1] + w2[c2] + (i1 - 10) / 5 > 0
        label = int(click != (r.random() < 0.1))
        dense = [str(i1)] + [str(r.randrange(50)) for _ in range(12)]
        cats = ["a%02x" % c1, "b%02x" % c2] + ["%x" % r.randrange(400) for _ in range(24)]
        f.write("\t".join([str(label)] + dense + cats) + "\n")
PY
write_topology "$S/pre.toml" 9110 1 auto 'kind = "preprocess"' "inputs = [\"$S/clicks.tsv\"]" \
  'output_dir = "clicks-out"' 'categorical = { mode = "hash", range = 3000 }'
timeout 120 "$HETFLOW" run "$S/pre.toml" >"$S/pre.log" 2>&1 || { cat "$S/pre.log"; fail "preprocess"; }

common=('kind = "train"' 'model = "dlrm"' 'dataset = "criteo"' 'data_dir = "clicks-out"' 'embedding_dim = 8'
  'bottom_mlp = [16]' 'top_mlp = [16]' 'batch_size = 64')

# run NAME PORT NODES [job lines...]
run() {
  local name=$1 port=$2 nodes=$3
  shift 3
  write_topology "$S/$name.toml" "$port" "$nodes" auto "${common[@]}" "$@"
  one_thread "$S/$name.toml"
  timeout 300 "$HETFLOW" run "$S/$name.toml" --report "$S/$name.json" >"$S/$name.log" 2>&1 ||
    { cat "$S/$name.log"; fail "$name: run failed"; }
}

run single 9120 1 'epochs = 2' 'optimizer = "adam"' 'lr = 0.01' 'weight_decay = 0.0001'
run ps1 9130 2 'epochs = 2' 'optimizer = "adam"' 'lr = 0.01' 'weight_decay = 0.0001' \
  'strategy = "ps"' 'ps_workers = ["n0"]'
/usr/bin/env python3 - "$S/single.json" "$S/ps1.json" <<'PY' || { cat "$S/ps1.log"; fail "1-worker BSP dlrm does not match single-device training"; }
import json, sys
s, p = (json.load(open(f)) for f in sys.argv[1:3])
for a, b in zip(s["epochs"], p["epochs"]):
    print(f"epoch {a['epoch']}: loss single {a['loss']:.7f} ps {b['loss']:.7f}")
    assert abs(a["loss"] - b["loss"]) <= 1e-6 * a["loss"]
print("checksums", s["weights_checksum"], p["weights_checksum"])
assert s["weights_checksum"] == p["weights_checksum"]
shards = p["ps"]["shards"]
assert len(shards) == 2 and all(x["table_pieces"] == 26 for x in shards), shards
PY
pass "dlrm, 1 worker + 2 shards (tables split by rows), BSP: the single-device weights bit for bit"

# hetflow plan names what each shard holds, as the run placed it: every
# table's rows split over the two shards, each row once, dense tensors whole.
"$HETFLOW" plan "$S/ps1.toml" --json >"$S/ps1.plan.json" 2>"$S/ps1.plan.err" || { cat "$S/ps1.plan.err"; fail "plan (ps)"; }
/usr/bin/env python3 - "$S/ps1.plan.json" "$S/ps1.json" <<'PY' || fail "plan: the shards' parameters"
import json, sys
plan, run = (json.load(open(f)) for f in sys.argv[1:3])
shards = plan["ps"]["shards"]
ran = {f"ps{s['shard']}": s for s in run["ps"]["shards"]}
for s in shards:  # what the run's shards held: node, bytes, tensors (dense + table pieces), table pieces
    r = ran[s["name"]]
    assert (s["node"], s["bytes"], len(s["dense"]) + len(s["sparse"]), len(s["sparse"])) == \
        (r["node"], r["bytes"], r["tensors"], r["table_pieces"]), (s, r)
tables = {}
for s in shards:
    for p in s["sparse"]:
        tables.setdefault(p["tensor"], []).append((p["row_begin"], p["row_end"]))
assert len(tables) == 26, sorted(tables)
for t, r in tables.items():
    r.sort()
    assert len(r) == 2 and r[0][0] == 0 and r[0][1] == r[1][0] and r[1][1] > r[1][0], (t, r)  # in two, no gap or overlap
dense = [t for s in shards for t in s["dense"]]
assert len(dense) == len(set(dense)) and dense, dense
print("plan:", [(s["name"], s["bytes"], len(s["dense"]), len(s["sparse"])) for s in shards])
PY
"$HETFLOW" plan "$S/ps1.toml" >"$S/ps1.plan" 2>&1 && grep -q "^parameter servers: 2 shards" "$S/ps1.plan" &&
  grep -Eq "^  ps0 +on n0 .* rows \[0, " "$S/ps1.plan" || { cat "$S/ps1.plan"; fail "plan (ps): no shard table"; }
pass "plan: each shard's tensors and table rows (26 tables split in two, each dense tensor once)"

run ps2 9140 2 'epochs = 2' 'optimizer = "adam"' 'lr = 0.01' 'strategy = "ps"'
/usr/bin/env python3 - "$S/ps2.json" <<'PY' || { cat "$S/ps2.log"; fail "2-worker BSP dlrm"; }
import json, sys
d = json.load(open(sys.argv[1]))
ps = d["ps"]
steps = sum(w["steps"] for w in ps["workers"])
auc = d["epochs"][-1]["test_auc"]
# A step pulls at most 64 rows of each table; whole tables are 26 x 3000 rows.
rows = [w["rows_pulled"] for w in ps["workers"]]
per_step = max(r / w["steps"] for r, w in zip(rows, ps["workers"]))
print(f"steps {steps} test AUC {auc:.4f} logloss {d['epochs'][-1]['test_logloss']:.4f} rows pulled per step {per_step:.0f}")
assert steps == 2 * 169, steps  # 10800 training rows / 64 -> 169 steps per epoch, each once
assert all(s["updates"] == steps for s in ps["shards"])
assert auc > 0.72, auc  # 1200 test rows: chance is 0.5 +- 0.017 (1 sd)
assert per_step < 26 * 3000 / 10, per_step
PY
pass "dlrm, 2 workers + 2 shards, BSP: test AUC $(json_get "$S/ps2.json" 'round(d["epochs"][-1]["test_auc"], 4)'), sparse pulls"

run asp 9150 2 'epochs = 2' 'optimizer = "sgd"' 'lr = 0.02' 'momentum = 0.9' 'strategy = "ps"' 'consistency = "asp"' \
  'ps_nodes = ["n1"]'
auc=$(json_get "$S/asp.json" 'd["epochs"][-1]["test_auc"]')
python3 -c "import sys; sys.exit(0 if $auc > 0.65 else 1)" || { cat "$S/asp.log"; fail "asp sgd: test AUC $auc"; }
pass "dlrm, 2 workers + 1 shard, ASP, SGD + momentum: test AUC $auc"

# Checkpoints of table pieces: a BSP run checkpointing every 50 clocks; its
# checkpoints up to clock 100 (the later ones deleted, as if it had died
# there) and --resume end with the uninterrupted run's weights bit for bit.
run ck 9160 2 'epochs = 2' 'optimizer = "sgd"' 'lr = 0.02' 'momentum = 0.9' 'weight_decay = 0.0001' 'strategy = "ps"' \
  'checkpoint_every = 50' "checkpoint_dir = \"$S/ck\""
want=$(json_get "$S/ck.json" 'd["weights_checksum"]')
mkdir -p "$S/ck2"
cp "$S/ck"/*ckpt-000000000100 "$S/ck2/" 2>/dev/null || { ls "$S/ck"; fail "no checkpoint 100 of both shards"; }
[[ $(ls "$S/ck2" | wc -l) -eq 2 ]] || { ls "$S/ck"; fail "want checkpoint 100 of 2 shards"; }
sed "s|$S/ck\"|$S/ck2\"|" "$S/ck.toml" >"$S/ck2.toml"
timeout 300 "$HETFLOW" run "$S/ck2.toml" --resume --report "$S/ck2.json" >"$S/ck2.log" 2>&1 ||
  { cat "$S/ck2.log"; fail "resumed run failed"; }
grep -q "resuming from checkpoint 100" "$S/ck2.log" || { cat "$S/ck2.log"; fail "no resume from 100"; }
got=$(json_get "$S/ck2.json" 'd["weights_checksum"]')
[[ "$got" == "$want" ]] || { cat "$S/ck2.log"; fail "resumed from 100: checksum $got, uninterrupted $want"; }
pass "dlrm table pieces checkpointed and resumed from clock 100: the uninterrupted weights ($want)"

# A corrupt checkpoint (one flipped byte in the middle of the newest file of
# shard 0) is found by its data checksum, passed over with a warning naming
# the file, and --resume falls back to the newest checkpoint complete and
# intact on both shards; the run still ends with the uninterrupted weights.
mkdir -p "$S/ck3"
cp "$S/ck"/*ckpt-* "$S/ck3/"
newest=$(ls "$S/ck3" | grep '^ps0\.ckpt-' | sort | tail -1)
python3 - "$S/ck3/$newest" <<'PY' || fail "corrupting $newest"
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[len(b) // 2] ^= 0x40
open(p, "wb").write(b)
PY
sed "s|$S/ck\"|$S/ck3\"|" "$S/ck.toml" >"$S/ck3.toml"
timeout 300 "$HETFLOW" run "$S/ck3.toml" --resume --report "$S/ck3.json" >"$S/ck3.log" 2>&1 ||
  { cat "$S/ck3.log"; fail "resume past a corrupt checkpoint failed"; }
grep -q "passing over a checkpoint that does not read back: $S/ck3/$newest: corrupt" "$S/ck3.log" ||
  { cat "$S/ck3.log"; fail "no warning naming the corrupt $newest"; }
prev=$(ls "$S/ck" | grep '^ps0\.ckpt-' | sort | tail -2 | head -1 | sed 's/.*-0*//')
grep -q "resuming from checkpoint $prev " "$S/ck3.log" || { cat "$S/ck3.log"; fail "did not fall back to checkpoint $prev"; }
got=$(json_get "$S/ck3.json" 'd["weights_checksum"]')
[[ "$got" == "$want" ]] || { cat "$S/ck3.log"; fail "resumed past a corrupt checkpoint: checksum $got, uninterrupted $want"; }
pass "a corrupt checkpoint ($newest) is passed over: resumed from $prev, the uninterrupted weights"
