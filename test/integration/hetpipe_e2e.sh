# hetpipe_e2e NAME BASE_PORT CAP_MIB [job lines...] (sourced by
# train_hetpipe_fashion.sh and train_hetpipe_vgg.sh, after lib.sh): strategy
# "hetpipe" end to end on Fashion-MNIST (issue 7): 4 processes, 2 VWs x 2
# stages, Nm = 2, D = 0, 1 thread each, n3's device capped at CAP_MIB, too
# small for the whole model: data parallelism counts n3 out, the plan gives
# it a stage that fits, and the job trains to the single-device accuracy
# target (>= 0.86 test accuracy). Sets E2E_JSON (the report) and E2E_SECS.
hetpipe_e2e() {
  local name=$1 port=$2 cap=$3
  shift 3
  local f="$HETFLOW_SCRATCH/$name.toml" out t0 t1
  write_topology "$f" "$port" 4 auto 'kind = "train"' 'strategy = "hetpipe"' 'virtual_workers = 2' 'nm = 2' \
    'dataset = "fashion-mnist"' 'batch_size = 64' 'lr_schedule = "cosine"' "$@"
  sed -i -E "s/^(port = ($port|$((port + 1))|$((port + 2))))\$/\\1\\ndevices = [ { kind = \"cpu\", threads = 1 } ]/" "$f"
  sed -i -E "s/^(port = $((port + 3)))\$/\\1\\ndevices = [ { kind = \"cpu\", threads = 1, memory = \"${cap}MiB\" } ]/" "$f"
  out=$("$HETFLOW" plan "$f" 2>&1) || { echo "$out"; fail "$name: plan failed"; }
  grep -q "data parallel (ring) over the 3 devices that hold the model" <<<"$out" ||
    { echo "$out"; fail "$name: plan: data parallelism should count n3 out"; }
  t0=$(date +%s.%N)
  timeout 1100 "$HETFLOW" run "$f" --report "$f.json" >"$f.out" 2>&1 || { cat "$f.out"; fail "$name: the hetpipe run failed"; }
  t1=$(date +%s.%N)
  /usr/bin/env python3 - "$f.json" "$cap" <<'PY' || { cat "$f.out"; fail "$name: hetpipe on Fashion-MNIST"; }
import json, sys
d = json.load(open(sys.argv[1]))
cap = int(sys.argv[2]) * 1024 * 1024
vws = d["virtual_workers"]
assert len(vws) == 2 and all(len(v["stages"]) == 2 for v in vws), vws
capped = [s for v in vws for s in v["stages"] if s["node"] == "n3"]
assert len(capped) == 1, capped
s = capped[0]
print("n3's stage: units", s["first_unit"], "-", s["last_unit"], "memory", s["memory_bytes"], "of", s["device_memory_bytes"])
assert s["first_unit"] > 0 and s["memory_bytes"] <= s["device_memory_bytes"] == cap, s
print("test accuracy", d["test_accuracy"], "samples/s", d["samples_per_s"], "predicted", d["predicted_samples_per_s"])
assert d["test_accuracy"] >= 0.86, d["test_accuracy"]
PY
  E2E_JSON="$f.json"
  E2E_SECS=$(awk "BEGIN{printf \"%.0f\", $t1 - $t0}")
}
