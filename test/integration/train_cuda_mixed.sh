#!/usr/bin/env bash
# GPU (label gpu; exit 77 without a CUDA device): jobs that put a cuda device
# beside a cpu one, through `hetflow run` (issues 5 and 7).
#  1. hetpipe: one VW of two stages, n0 a cpu device, n1 cuda:0 (the plan
#     measures both here); the stage on cuda trains its units there, with
#     overlapped waves (the default) and drained ones. The same job on two
#     cpu nodes is the reference: WSP's arithmetic does not
#     depend on the devices or the cut, so losses agree but for rounding
#     (TF32 off; the cuda stage's optimizer rounds its own way, which moves
#     the trajectory a few percent within 3 epochs) and both reach the
#     accuracy target.
#     With input = "stream" the shard feeds the cuda stage 0.
#  2. dp: replicas on cuda:0 and on a cpu device; weights identical
#     (replicas_identical), losses within 1% of the cpu-only dp run's (the
#     cuda replica's gradients round differently).
# Standalone on a GPU machine (CTest paths are this machine's):
#   HETFLOW=build-gpu/bin/hetflow HETFLOW_SCRATCH=/tmp/it-cuda HETFLOW_SRC=. bash test/integration/train_cuda_mixed.sh
source "$(dirname "$0")/lib.sh"
"$HETFLOW" devices 2>&1 | grep -q "^cuda 0:" || { echo "SKIP: no CUDA device"; exit 77; }
export HETFLOW_CUDA_TF32=0

# job TOPO BASE_PORT DEV0 DEV1 STRATEGY [job lines...]: 2 nodes, DEVn "cpu" or "cuda".
job() {
  local f=$1 port=$2 d0=$3 d1=$4 strategy=$5
  shift 5
  write_topology "$f" "$port" 2 auto 'kind = "train"' "strategy = \"$strategy\"" 'model = "lenet5"' \
    'dataset = "synthetic"' 'input_shape = [1, 28, 28]' 'classes = 10' 'train_size = 6400' 'test_size = 640' \
    'epochs = 3' 'batch_size = 64' 'lr = 0.01' "$@"
  local i=0 d
  for d in "$d0" "$d1"; do
    if [[ $d == cuda ]]; then
      sed -i -E "s/^(port = $((port + i)))\$/\\1\\ndevices = [ { kind = \"cuda\", index = 0 } ]/" "$f"
    else
      sed -i -E "s/^(port = $((port + i)))\$/\\1\\ndevices = [ { kind = \"cpu\", threads = 4 } ]/" "$f"
    fi
    i=$((i + 1))
  done
}
run_job() {  # run_job TOPO
  timeout 600 "$HETFLOW" run "$1" --report "$1.json" >"$1.out" 2>&1 || { tail -30 "$1.out"; fail "$(basename "$1") failed"; }
}

for waves in overlap drain; do
  hp_cuda="$HETFLOW_SCRATCH/hp-cuda-$waves.toml" hp_cpu="$HETFLOW_SCRATCH/hp-cpu-$waves.toml"
  port=$([[ $waves == overlap ]] && echo 9800 || echo 9860)
  job "$hp_cuda" "$port" cpu cuda hetpipe 'virtual_workers = 1' 'nm = 2' "hetpipe_waves = \"$waves\""
  job "$hp_cpu" $((port + 10)) cpu cpu hetpipe 'virtual_workers = 1' 'nm = 2' "hetpipe_waves = \"$waves\""
  "$HETFLOW" plan "$hp_cuda" >"$hp_cuda.plan" 2>&1 || { cat "$hp_cuda.plan"; fail "plan of the cuda hetpipe job"; }
  head -40 "$hp_cuda.plan"
  run_job "$hp_cuda"
  run_job "$hp_cpu"
  /usr/bin/env python3 - "$hp_cuda.json" "$hp_cpu.json" "$waves" <<'PY' || { cat "$hp_cuda.plan"; tail -20 "$hp_cuda.out"; fail "hetpipe ($waves waves) with a cuda stage"; }
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
st = a["virtual_workers"][0]["stages"]
print(sys.argv[3], "waves; cuda job stages:", [(s["node"], s["first_unit"], s["last_unit"]) for s in st])
assert len(st) == 2 and {s["node"] for s in st} == {"n0", "n1"}, st
assert a["hetpipe_waves"] == b["hetpipe_waves"] == sys.argv[3], (a["hetpipe_waves"], b["hetpipe_waves"])
for x, y in zip(a["epochs"], b["epochs"]):
    print(f"epoch {x['epoch']}: loss {x['loss']:.6f} (all cpu {y['loss']:.6f})")
    assert abs(x["loss"] - y["loss"]) <= 0.1 * abs(y["loss"]) + 0.02, (x, y)
print("test accuracy", a["test_accuracy"], "(all cpu", b["test_accuracy"], ") samples/s", a["samples_per_s"])
assert a["test_accuracy"] >= 0.8 and abs(a["test_accuracy"] - b["test_accuracy"]) <= 0.03
if sys.argv[3] == "overlap":  # the cuda stage copied its prefetched pulls on its upload thread
    cs = [s for s in a["hetpipe"]["stages"] if s.get("used") and s["device"].startswith("cuda")]
    print("cuda stage: pull_thread_seconds", cs[0]["pull_thread_seconds"] if cs else None)
    assert cs and cs[0]["pull_thread_seconds"] > 0, cs
PY
done
pass "hetpipe: a stage on cuda:0 beside one on cpu trains like the all-cpu pipeline"

# input = "stream": the stream shard feeds the VW's stage 0, which is the
# cuda stage here (its batches copied to the device like the in-memory
# ones); the same batches in the same order, so the losses follow the
# in-memory cuda run's (the device's algorithm choices may round apart),
# and every row is used once per epoch.
hp_st="$HETFLOW_SCRATCH/hp-cuda-stream.toml"
job "$hp_st" 9870 cpu cuda hetpipe 'virtual_workers = 1' 'nm = 2' 'input = "stream"' 'preprocess_shards = 1'
run_job "$hp_st"
/usr/bin/env python3 - "$hp_st.json" "$HETFLOW_SCRATCH/hp-cuda-overlap.toml.json" <<'PY' || { tail -20 "$hp_st.out"; fail "streamed hetpipe into a cuda stage 0"; }
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
st = a["virtual_workers"][0]["stages"]
print("streamed: stages", [(s["node"], s["first_unit"], s["last_unit"]) for s in st], "books", a["hetpipe"]["stream"])
assert st[0]["node"] == "n1", "stage 0 is not the cuda node: the test does not feed a cuda stage"
assert a["input"] == "stream" and a["hetpipe"]["stream"]["exactly_once"] is True
for x, y in zip(a["epochs"], b["epochs"]):
    print(f"epoch {x['epoch']}: loss {x['loss']:.6f} (in memory {y['loss']:.6f})")
    assert abs(x["loss"] - y["loss"]) <= 0.1 * abs(y["loss"]) + 0.02, (x, y)
assert abs(a["test_accuracy"] - b["test_accuracy"]) <= 0.03, (a["test_accuracy"], b["test_accuracy"])
PY
pass "hetpipe: input = \"stream\" feeds a cuda stage 0; every row once per epoch"

# Checkpoints of the cuda stage's local optimizer state (copied from the
# device) and --resume from them (restored onto the device): the resumed
# run trains the waves after the newest checkpoint and ends where the
# uninterrupted one did.
hp_ck="$HETFLOW_SCRATCH/hp-ck.toml"
job "$hp_ck" 9840 cpu cuda hetpipe 'virtual_workers = 1' 'nm = 2' "checkpoint_dir = \"$HETFLOW_SCRATCH/ck\"" \
  'checkpoint_every = 40'
run_job "$hp_ck"
cp "$hp_ck.json" "$hp_ck.first.json"
timeout 600 "$HETFLOW" run "$hp_ck" --resume --report "$hp_ck.json" >"$hp_ck.resume.out" 2>&1 ||
  { tail -30 "$hp_ck.resume.out"; fail "--resume of the cuda hetpipe job failed"; }
/usr/bin/env python3 - "$hp_ck.first.json" "$hp_ck.json" <<'PY' || { tail -20 "$hp_ck.resume.out"; fail "hetpipe --resume with a cuda stage"; }
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
print("resumed at wave", b["resumed_wave"], "test accuracy", b["test_accuracy"], "(uninterrupted", a["test_accuracy"], ")")
assert b["resumed_wave"] > 0, b["resumed_wave"]
assert abs(a["test_accuracy"] - b["test_accuracy"]) <= 0.02
PY
pass "hetpipe: the cuda stage checkpoints its optimizer state and --resume restores it"

dp_cuda="$HETFLOW_SCRATCH/dp-cuda.toml" dp_cpu="$HETFLOW_SCRATCH/dp-cpu.toml"
job "$dp_cuda" 9820 cuda cpu dp 'dp_split = "equal"'
job "$dp_cpu" 9830 cpu cpu dp 'dp_split = "equal"'
run_job "$dp_cuda"
run_job "$dp_cpu"
/usr/bin/env python3 - "$dp_cuda.json" "$dp_cpu.json" <<'PY' || { tail -20 "$dp_cuda.out"; fail "dp with a cuda replica"; }
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["replicas_identical"] is True, a.get("replicas_identical")
for x, y in zip(a["epochs"], b["epochs"]):
    print(f"epoch {x['epoch']}: loss {x['loss']:.6f} (all cpu {y['loss']:.6f})")
    assert abs(x["loss"] - y["loss"]) <= 0.01 * abs(y["loss"]) + 1e-3, (x, y)
assert abs(a["epochs"][-1]["test_accuracy"] - b["epochs"][-1]["test_accuracy"]) <= 0.02
PY
pass "dp: a cuda replica and a cpu replica hold identical weights and train like two cpu replicas"

# dp checkpoints (the cuda replica's are of its host copy) and --resume: 2
# epochs checkpointed, then the file asks for 3 and --resume trains the
# third from the epoch-2 checkpoint, ending like the 3-epoch run.
dp_ck="$HETFLOW_SCRATCH/dp-ck.toml"
job "$dp_ck" 9850 cuda cpu dp 'dp_split = "equal"' "checkpoint_dir = \"$HETFLOW_SCRATCH/dpck\""
sed -i 's/^epochs = 3$/epochs = 2/' "$dp_ck"
run_job "$dp_ck"
sed -i 's/^epochs = 2$/epochs = 3/' "$dp_ck"
timeout 600 "$HETFLOW" run "$dp_ck" --resume --report "$dp_ck.json" >"$dp_ck.resume.out" 2>&1 ||
  { tail -30 "$dp_ck.resume.out"; fail "--resume of the cuda dp job failed"; }
/usr/bin/env python3 - "$dp_ck.json" "$dp_cuda.json" <<'PY' || { tail -20 "$dp_ck.resume.out"; fail "dp --resume with a cuda replica"; }
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
print("resumed epochs", a.get("resumed_epochs"), "epochs trained", [e["epoch"] for e in a["epochs"]],
      "last loss", a["epochs"][-1]["loss"], "(3-epoch run", b["epochs"][-1]["loss"], ")")
assert a["replicas_identical"] is True
assert [e["epoch"] for e in a["epochs"]] == [3], a["epochs"]
assert abs(a["epochs"][-1]["loss"] - b["epochs"][-1]["loss"]) <= 0.01 * b["epochs"][-1]["loss"] + 1e-3
PY
pass "dp: a cuda replica checkpoints and resumes"
