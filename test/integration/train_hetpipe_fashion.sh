#!/usr/bin/env bash
# strategy "hetpipe" end to end on Fashion-MNIST (issue 7, label slow): 4
# processes, 2 VWs x 2 stages (LeNet-5, Nm = 2, D = 0), one device capped at
# 3 MiB, too small for the whole model: the plan gives it a stage that fits
# (and data parallelism counts it out), and the job trains to the
# single-device accuracy target (>= 0.86 test accuracy).
source "$(dirname "$0")/lib.sh"

f="$HETFLOW_SCRATCH/fashion.toml"
write_topology "$f" 8640 4 auto 'kind = "train"' 'strategy = "hetpipe"' 'virtual_workers = 2' 'nm = 2' \
  'model = "lenet5"' 'dataset = "fashion-mnist"' 'epochs = 3' 'batch_size = 64' 'lr = 0.02' 'lr_schedule = "cosine"'
sed -i -E 's/^(port = 864[012])$/\1\ndevices = [ { kind = "cpu", threads = 1 } ]/' "$f"
sed -i -E 's/^(port = 8643)$/\1\ndevices = [ { kind = "cpu", threads = 1, memory = "3MiB" } ]/' "$f"
out=$("$HETFLOW" plan "$f" 2>&1) || { echo "$out"; fail "plan failed"; }
grep -q "data parallel (ring) over the 3 devices that hold the model" <<<"$out" ||
  { echo "$out"; fail "plan: data parallelism should count n3 out"; }
timeout 600 "$HETFLOW" run "$f" --report "$f.json" >"$f.out" 2>&1 || { cat "$f.out"; fail "the hetpipe run failed"; }
/usr/bin/env python3 - "$f.json" <<'PY' || { cat "$f.out"; fail "hetpipe on Fashion-MNIST"; }
import json, sys
d = json.load(open(sys.argv[1]))
vws = d["virtual_workers"]
assert len(vws) == 2 and all(len(v["stages"]) == 2 for v in vws), vws
capped = [s for v in vws for s in v["stages"] if s["node"] == "n3"]
assert len(capped) == 1, capped
s = capped[0]
print("n3's stage: units", s["first_unit"], "-", s["last_unit"], "memory", s["memory_bytes"], "of", s["device_memory_bytes"])
assert s["first_unit"] > 0 and s["memory_bytes"] <= s["device_memory_bytes"] == 3 * 1024 * 1024, s
print("test accuracy", d["test_accuracy"], "samples/s", d["samples_per_s"], "predicted", d["predicted_samples_per_s"])
assert d["test_accuracy"] >= 0.86, d["test_accuracy"]
PY
pass "2 VWs x 2 stages on 4 processes, n3 capped at 3 MiB: test accuracy $(json_get "$f.json" 'd["test_accuracy"]')"
