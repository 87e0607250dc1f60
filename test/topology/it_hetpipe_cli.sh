#!/usr/bin/env bash
# hetflow validate / plan / simulate / run on a HetPipe topology (the paper's
# ED setting, profiles from a file): plan and simulate answer, run and node
# refuse with exit 2 at once (the runtime has no cuda stages yet).
set -uo pipefail
: "${HETFLOW:?}" "${HETFLOW_SRC:?}" "${HETFLOW_SCRATCH:?}"
mkdir -p "$HETFLOW_SCRATCH"
f="$HETFLOW_SRC/deploy/examples/hetpipe-paper/vgg19-ed.toml"
fail() { echo "FAIL: $*"; exit 1; }

"$HETFLOW" validate "$f" || fail "validate"
"$HETFLOW" plan "$f" --json > "$HETFLOW_SCRATCH/plan.json" || fail "plan --json"
python3 - "$HETFLOW_SCRATCH/plan.json" <<'PY' || fail "plan json"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["strategy"] == "hetpipe", j["strategy"]
assert j["nm"] >= 1
vws = j["virtual_workers"]
assert len(vws) == 4, len(vws)  # ED: one GPU of each of the 4 kinds per VW
for vw in vws:
    st = vw["stages"]
    assert len(st) == 4
    assert st[0]["first_unit"] == 0
    for a, b in zip(st, st[1:]):
        assert b["first_unit"] == a["last_unit"] + 1
    for s in st:
        assert s["memory_bytes"] <= s["device_memory_bytes"], s
        assert s["stage_ms"] > 0 and s["node"] in ("v", "r", "g", "q")
        assert s["receive_ms"] == 0, s  # cuda stages: their hosts receive beside the devices
assert j["predicted_samples_per_s"] > 0
assert j["waves"] == "overlap", j["waves"]
PY
"$HETFLOW" simulate "$f" --json --waves 12 > "$HETFLOW_SCRATCH/sim.json" || fail "simulate --json"
python3 - "$HETFLOW_SCRATCH/sim.json" <<'PY' || fail "simulate json"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["simulated_samples_per_s"] > 0
for vw in j["virtual_workers"]:
    assert all(0 < u <= 1.0 for u in vw["utilisation"]), vw["utilisation"]
assert j["wave_model"] == "overlapped", j["wave_model"]
PY
# hetpipe_waves = "drain": priced and simulated drained, without --as-run
# (once simulated overlapped), and no faster than overlapped.
{ cat "$f"; echo 'hetpipe_waves = "drain"'; } > "$HETFLOW_SCRATCH/drain.toml"
cp "$HETFLOW_SRC/deploy/examples/hetpipe-paper/vgg19-b32.json" "$HETFLOW_SCRATCH/"
"$HETFLOW" simulate "$HETFLOW_SCRATCH/drain.toml" --json --waves 12 > "$HETFLOW_SCRATCH/sim-drain.json" ||
  fail "simulate --json (drain)"
python3 - "$HETFLOW_SCRATCH/sim.json" "$HETFLOW_SCRATCH/sim-drain.json" <<'PY' || fail "simulate json (drain)"
import json, sys
o, d = (json.load(open(f)) for f in sys.argv[1:3])
assert d["wave_model"] == "drained", d["wave_model"]
assert d["simulated_samples_per_s"] <= o["simulated_samples_per_s"] * 1.001, (d["simulated_samples_per_s"], o["simulated_samples_per_s"])
PY
# ... and the planner's bound has the drained waves' bubble: below the
# overlapped plan's, and the plan says why.
"$HETFLOW" plan "$HETFLOW_SCRATCH/drain.toml" --json > "$HETFLOW_SCRATCH/plan-drain.json" || fail "plan --json (drain)"
python3 - "$HETFLOW_SCRATCH/plan.json" "$HETFLOW_SCRATCH/plan-drain.json" <<'PY' || fail "plan json (drain)"
import json, sys
o, d = (json.load(open(f)) for f in sys.argv[1:3])
assert d["waves"] == "drain", d["waves"]
assert any("waves drained" in n for n in d["notes"]), d["notes"]
if d["nm"] > 1:
    assert d["predicted_samples_per_s"] < o["predicted_samples_per_s"], (d["predicted_samples_per_s"], o["predicted_samples_per_s"])
PY
# A device's speed key: its own kind (KIND@xS, the profile's times / S);
# the plan gives the faster device more units and predicts more samples/s.
for speed in 1 3; do
  cat > "$HETFLOW_SCRATCH/speed$speed.toml" <<EOF
[cluster]
name = "speed"
[[nodes]]
name = "v"
host = "10.0.0.1"
port = 7100
devices = [ { kind = "cuda", index = 0, profile = "titan-v" } ]
[[nodes]]
name = "r"
host = "10.0.0.2"
port = 7100
devices = [ { kind = "cuda", index = 0, profile = "titan-v", speed = $speed } ]
[job]
kind = "train"
model = "vgg19"
dataset = "synthetic"
input_shape = [3, 224, 224]
classes = 1000
batch_size = 32
strategy = "hetpipe"
profile_file = "vgg19-b32.json"
virtual_workers = 1
nm = 4
EOF
  "$HETFLOW" plan "$HETFLOW_SCRATCH/speed$speed.toml" --json > "$HETFLOW_SCRATCH/speed$speed.json" ||
    fail "plan --json (speed $speed)"
done
python3 - "$HETFLOW_SCRATCH/speed1.json" "$HETFLOW_SCRATCH/speed3.json" <<'PY' || fail "plan json (speed)"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
def on_r(j):
    (vw,) = j["virtual_workers"]
    (s,) = [s for s in vw["stages"] if s["node"] == "r"]
    return s
ra, rb = on_r(a), on_r(b)
assert ra["kind"] == "titan-v" and rb["kind"] == "titan-v@x3", (ra["kind"], rb["kind"])
units = lambda s: s["last_unit"] - s["first_unit"] + 1
assert units(rb) > units(ra), (units(ra), units(rb))
assert b["predicted_samples_per_s"] > 1.2 * a["predicted_samples_per_s"], (a["predicted_samples_per_s"], b["predicted_samples_per_s"])
PY
"$HETFLOW" validate "$HETFLOW_SCRATCH/speed3.toml" > /dev/null || fail "validate (speed)"
sed 's/speed = 3/speed = 0/' "$HETFLOW_SCRATCH/speed3.toml" > "$HETFLOW_SCRATCH/speed0.toml"
"$HETFLOW" validate "$HETFLOW_SCRATCH/speed0.toml" > "$HETFLOW_SCRATCH/speed0.txt" 2>&1 && fail "validate took speed = 0"
grep -q "speed" "$HETFLOW_SCRATCH/speed0.txt" || fail "speed = 0: $(cat "$HETFLOW_SCRATCH/speed0.txt")"
start=$(date +%s)
timeout 20 "$HETFLOW" run "$f" > "$HETFLOW_SCRATCH/run.txt" 2>&1
rc=$?
[ "$rc" = 2 ] || fail "run exited $rc, want 2"
grep -q "no node of .* is on this machine" "$HETFLOW_SCRATCH/run.txt" ||
  fail "run's message: $(cat "$HETFLOW_SCRATCH/run.txt")"
timeout 20 "$HETFLOW" node "$f" --name v > "$HETFLOW_SCRATCH/node.txt" 2>&1
rc=$?
[ "$rc" = 2 ] || fail "node exited $rc, want 2"
# Stages may be cuda devices; this one is refused for its address (not
# this machine's) or, on a machine without a GPU, for the device.
grep -q "10.0.0.1\|lists cuda device 0, but this machine has no CUDA device" "$HETFLOW_SCRATCH/node.txt" ||
  fail "node's message: $(cat "$HETFLOW_SCRATCH/node.txt")"
[ $(( $(date +%s) - start )) -le 10 ] || fail "refusals took more than 10 s"
# A device naming a kind the profile lacks: an error naming node and kind.
sed 's/profile = "titan-v" }, { kind = "cuda", index = 1/profile = "titan-x" }, { kind = "cuda", index = 1/' "$f" \
  > "$HETFLOW_SCRATCH/bad.toml"
cp "$HETFLOW_SRC/deploy/examples/hetpipe-paper/vgg19-b32.json" "$HETFLOW_SCRATCH/"
"$HETFLOW" plan "$HETFLOW_SCRATCH/bad.toml" > "$HETFLOW_SCRATCH/bad.txt" 2>&1 && fail "plan accepted an unknown kind"
grep -q "titan-x" "$HETFLOW_SCRATCH/bad.txt" || fail "unknown kind not named: $(cat "$HETFLOW_SCRATCH/bad.txt")"
echo "ok"
