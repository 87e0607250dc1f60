#!/usr/bin/env bash
# job.kind = "train", strategy "ralp" (layers after the cut on the PS node),
# through `hetflow run`, on the synthetic dataset, lenet5 cut before fc1:
#  - 1 worker (server and worker on 2 processes) trains what single-device
#    training trains (per-epoch loss, final test accuracy);
#  - 2 workers + the server on 3 processes train what strategy "ps" (bsp,
#    2 workers, 1 shard on the same node as the server) trains, and move
#    fewer bytes per step (the fc head's weights stay on the server);
#  - ralp_cut = 0: the server's cost model picks a cut, the run converges;
#  - `hetflow plan` prints the table of cuts; bad keys: clear errors.
source "$(dirname "$0")/lib.sh"

one_thread() { sed -i -E 's/^(port = [0-9]+)$/\1\ndevices = [ { kind = "cpu", threads = 1 } ]/' "$1"; }

common=('kind = "train"' 'model = "lenet5"' 'dataset = "synthetic"' 'input_shape = [1, 28, 28]'
  'test_size = 400' 'batch_size = 32' 'lr = 0.05' 'lr_schedule = "cosine"')

run_job() {  # run_job TOPO WHAT
  timeout 300 "$HETFLOW" run "$1" --report "$1.json" >"$1.out" 2>&1 || { cat "$1.out"; fail "$2 failed"; }
}

# --- 1 worker == single device
single="$HETFLOW_SCRATCH/single.toml"
write_topology "$single" 8810 1 auto "${common[@]}" 'epochs = 2' 'train_size = 1280'
one_thread "$single"
run_job "$single" "single-device run"

r1="$HETFLOW_SCRATCH/ralp1.toml"
write_topology "$r1" 8820 2 auto "${common[@]}" 'epochs = 2' 'train_size = 1280' 'strategy = "ralp"' \
  'ps_workers = ["n1"]' 'ralp_cut = 5'
one_thread "$r1"
run_job "$r1" "1-worker ralp run"
grep -q "ralp0: RALP server, 1 worker(s), units \[5, 8) here (from 'fc1', ralp_cut)" "$r1.out" ||
  { cat "$r1.out"; fail "no RALP server start line"; }
/usr/bin/env python3 - "$single.json" "$r1.json" <<'PY' || { cat "$r1.out"; fail "1-worker ralp does not match single-device training"; }
import json, sys
s, r = (json.load(open(f)) for f in sys.argv[1:3])
assert len(s["epochs"]) == len(r["epochs"]) == 2
for a, b in zip(s["epochs"], r["epochs"]):
    rel = abs(a["loss"] - b["loss"]) / a["loss"]
    print(f"epoch {a['epoch']}: loss single {a['loss']:.7f} ralp {b['loss']:.7f} (rel {rel:.1e}); samples {a['samples']} {b['samples']}")
    assert rel < 1e-5, rel
    assert a["samples"] == b["samples"]
ta, tb = s["epochs"][-1]["test_accuracy"], r["epochs"][-1]["test_accuracy"]
print("test accuracy", ta, tb, "checksums", s["weights_checksum"], r["weights_checksum"])
assert abs(ta - tb) <= 0.0025, (ta, tb)
srv = r["ralp"]["server"]
assert srv["cut"] == 5 and srv["cut_unit"] == "fc1", srv
assert srv["lower_updates"] == 80 and srv["upper_updates"] == 80, srv
PY
pass "1 worker + RALP server on 2 processes: single-device training (loss per epoch, test accuracy)"

# --- 2 workers: ralp == ps (bsp), fewer bytes
ps2="$HETFLOW_SCRATCH/ps2.toml"
write_topology "$ps2" 8830 3 auto "${common[@]}" 'epochs = 3' 'train_size = 2688' 'strategy = "ps"' \
  'ps_workers = ["n1", "n2"]' 'ps_nodes = ["n0"]'
one_thread "$ps2"
run_job "$ps2" "2-worker ps run"
r2="$HETFLOW_SCRATCH/ralp2.toml"
write_topology "$r2" 8840 3 auto "${common[@]}" 'epochs = 3' 'train_size = 2688' 'strategy = "ralp"' \
  'ps_workers = ["n1", "n2"]' 'ralp_cut = 5'
one_thread "$r2"
run_job "$r2" "2-worker ralp run"
/usr/bin/env python3 - "$ps2.json" "$r2.json" <<'PY' || { cat "$r2.out"; fail "2-worker ralp does not match ps bsp"; }
import json, sys
p, r = (json.load(open(f)) for f in sys.argv[1:3])
# 2688 rows / 32 = 84 steps an epoch: 42 each, 126 in 3 epochs.
for a, b in zip(p["epochs"], r["epochs"]):
    rel = abs(a["loss"] - b["loss"]) / a["loss"]
    print(f"epoch {a['epoch']}: worker 0 loss ps {a['loss']:.7f} ralp {b['loss']:.7f} (rel {rel:.1e})")
    assert rel < 1e-5, rel
ta, tb = p["epochs"][-1]["test_accuracy"], r["epochs"][-1]["test_accuracy"]
print("final test accuracy ps", ta, "ralp", tb)
assert abs(ta - tb) <= 0.0025, (ta, tb)
assert tb > 0.8, tb
pw = p["ps"]["workers"]; rw = r["ralp"]["workers"]
assert len(pw) == 2 and len(rw) == 2
for x, y in zip(pw, rw):
    assert x["steps"] == y["steps"] == 126, (x["steps"], y["steps"])
ps_step = sum(w["bytes_sent"] + w["bytes_received"] for w in pw) / pw[0]["steps"]
ralp_step = sum(w["bytes_sent"] + w["bytes_received"] for w in rw) / rw[0]["steps"]
srv = r["ralp"]["server"]
print(f"bytes per step (both workers): ps {ps_step:.0f} ralp {ralp_step:.0f} (server {srv['bytes_per_step']:.0f}, "
      f"predicted {srv['predicted_bytes_per_step']})")
assert ralp_step < 0.5 * ps_step, (ralp_step, ps_step)
assert abs(srv["bytes_per_step"] - srv["predicted_bytes_per_step"]) <= 0.1 * srv["predicted_bytes_per_step"]
assert srv["upper_updates"] == srv["lower_updates"] == 252, srv
# Each step's pull rides on the push before it, but an epoch's first: 41 of 42 a worker an epoch.
assert srv["pulls_with_push"] == 2 * 3 * 41, srv["pulls_with_push"]
PY
pass "2 workers: ralp == ps bsp (loss, test accuracy), fewer bytes per step, pulls on the pushes"

# --- ralp_cut = 0: the cost model on the server
auto="$HETFLOW_SCRATCH/auto.toml"
write_topology "$auto" 8850 2 auto "${common[@]}" 'epochs = 2' 'train_size = 2688' 'strategy = "ralp"'
one_thread "$auto"
run_job "$auto" "ralp_cut = 0 run"
/usr/bin/env python3 - "$auto.json" <<'PY' || { cat "$auto.out"; fail "ralp_cut = 0"; }
import json, sys
d = json.load(open(sys.argv[1])); srv = d["ralp"]["server"]
print("cost model chose", srv["cut"], srv["cut_unit"], ":", srv["cut_why"])
assert srv["cut_source"] == "cost model" and 1 <= srv["cut"] <= srv["units"], srv
assert d["epochs"][-1]["test_accuracy"] > 0.5, d["epochs"]
# The worker on n1 (not the server's node) timed the model's units itself and
# sent them with its hello.
assert "the workers' units priced with their own times (ralpworker" in srv["cut_why"], srv["cut_why"]
assert srv["predicted_step_ms"] > 0 and srv["cost_latency_us"] > 0, srv
PY
grep -Eq "ralpworker[0-9]+: profiled the model's units here for the server's cost model in [0-9]+ ms" "$auto.out" ||
  { cat "$auto.out"; fail "ralp_cut = 0: the worker did not profile its units"; }
# The server timed the link to the worker on n1 before it chose: measured
# (and in the report's cut_why), or, when noise hid the difference of the
# two sizes, said so and kept the assumed link (a loaded machine).
# The cold rounds (4 B after each side was idle 1 ms) give the latency the
# cost model prices each message at: half their round trip.
link="ralp0: link to worker '[^']+' on node 'n1': [0-9.]+ MB in [0-9.]+ ms, 4 B in [0-9.]+ ms \(round trips\), 4 B after 1 ms idle in [0-9.]+ ms"
cold=$(grep -Eo "4 B after 1 ms idle in [0-9.]+ ms" "$auto.out" | head -1 | awk '{print $8}')
[[ -n "$cold" ]] || { cat "$auto.out"; fail "ralp_cut = 0: no cold round trip in the link probe's line"; }
json_get "$auto.json" "abs(d['ralp']['server']['cost_latency_us'] - $cold * 500) <= 0.6" | grep -q True ||
  { cat "$auto.json"; fail "ralp_cut = 0: cost_latency_us is not half the cold round trip ($cold ms)"; }
if grep -Eq "$link: [0-9.]+ Gb/s$" "$auto.out"; then
  json_get "$auto.json" '"link measured: " in d["ralp"]["server"]["cut_why"] and " Gb/s" in d["ralp"]["server"]["cut_why"]' |
    grep -q True || { cat "$auto.json"; fail "ralp_cut = 0: the measured link is not in cut_why"; }
elif grep -Eq "$link, not resolved; the assumed [0-9.]+ Gb/s kept$" "$auto.out"; then
  echo "note: the link probe could not resolve the link on this run (noise); the assumed link was kept"
else
  cat "$auto.out"; fail "ralp_cut = 0: no line with the link probe"
fi
pass "ralp_cut = 0: the server's cost model picks a cut, with the link to the worker (and its cold latency) measured and the worker's own unit times"
# --resume with a checkpoint_dir: the cut would come from a checkpoint, so
# the worker does not profile (here there is none: the server's cost model
# prices every worker with its own profile, and says nothing of theirs).
write_topology "$auto.r.toml" 8855 2 auto "${common[@]}" 'epochs = 1' 'train_size = 1344' 'strategy = "ralp"' \
  "checkpoint_dir = \"$HETFLOW_SCRATCH/auto-ck\"" 'checkpoint_every = 100'
one_thread "$auto.r.toml"
timeout 300 "$HETFLOW" run "$auto.r.toml" --resume --report "$auto.r.toml.json" >"$auto.r.toml.out" 2>&1 ||
  { cat "$auto.r.toml.out"; fail "ralp_cut = 0 --resume run failed"; }
! grep -q "profiled the model's units here" "$auto.r.toml.out" &&
  json_get "$auto.r.toml.json" '"cost model" == d["ralp"]["server"]["cut_source"] and "their own times" not in d["ralp"]["server"]["cut_why"]' |
  grep -q True || { cat "$auto.r.toml.out"; fail "ralp_cut = 0 --resume: a worker profiled its units"; }
pass "ralp_cut = 0 with --resume: the workers leave the profile to the server"

# --- plan: the table of cuts
out=$("$HETFLOW" plan "$r2" 2>&1) || { echo "$out"; fail "plan failed"; }
grep -q "ralp: cuts of the model" <<<"$out" && grep -q "<- chosen" <<<"$out" && grep -q "fc1" <<<"$out" ||
  { echo "$out"; fail "plan prints no table of cuts"; }
n=$("$HETFLOW" plan "$r2" --json | python3 -c "import json,sys; d=json.load(sys.stdin); print(len(d['ralp']['candidates']), d['ralp']['runs_cut'])")
[[ "$n" == "8 5" ]] || fail "plan --json: candidates/runs_cut '$n', want '8 5'"
# ralp_link_gbps: on a slow link the bytes dominate, so the model cuts
# (at the default 100 Gb/s lenet5's tiny tensors keep every layer on the workers).
sed 's/^ralp_cut = 5$/ralp_cut = 5\nralp_link_gbps = 0.01/' "$r2" >"$r2.slow.toml"
n=$("$HETFLOW" plan "$r2.slow.toml" --json | python3 -c "import json,sys; d=json.load(sys.stdin)['ralp']; print(d['link'].split(' ')[0], d['chosen_cut'] < 8)")
[[ "$n" == "0.01 True" ]] || fail "ralp_link_gbps = 0.01: plan says link/cut '$n', want '0.01 True'"
pass "plan prints the cut table (text and --json); ralp_link_gbps moves the chosen cut"

# --- simulate: ps and ralp by their cost models
sim_check() {  # sim_check TOPO PYTHON-ASSERTIONS (d: simulate --json)
  "$HETFLOW" simulate "$1" --json >"$1.sim.json" 2>"$1.sim.err" || { cat "$1.sim.err"; fail "simulate $1 failed"; }
  python3 - "$1.sim.json" "$2" <<'PY' || { cat "$1.sim.json"; fail "simulate $1: wrong prediction"; }
import json, sys
d = json.load(open(sys.argv[1]))
assert d["simulated_samples_per_s"] > 0, d
parts = d["worker_ms"] + d["transfer_ms"] + d["server_ms"]
assert abs(d["step_ms"] - parts) <= 1e-9 * parts, d
assert abs(d["simulated_samples_per_s"] - d["workers"] * d["batch"] / d["step_ms"] * 1000) <= 1e-6 * d["simulated_samples_per_s"], d
exec(sys.argv[2])
PY
}
sim_check "$ps2" 'assert d["strategy"] == "ps" and d["workers"] == 2 and d["shards"] == 1 and d["batch"] == 32, d'
sim_check "$r2" 'assert d["strategy"] == "ralp" and d["cut"] == 5 and d["cut_unit"] == "fc1" and d["cut_source"] == "ralp_cut", d'
# The same link, more bytes: the ps step moves every weight, the ralp one the
# lower ones and the activations. Compared on one profile file (two runs that
# each measure their own profiles differ by their noise: LeNet-5's units after
# the cut are a few percent of its time, and a loaded machine swapped them).
"$HETFLOW" profile "$ps2" --out "$HETFLOW_SCRATCH/lenet.json" >"$HETFLOW_SCRATCH/lenet.out" 2>&1 ||
  { cat "$HETFLOW_SCRATCH/lenet.out"; fail "profile --out of the 2-worker job"; }
for t in "$ps2" "$r2"; do
  cp "$t" "$t.prof.toml"
  echo "profile_file = \"$HETFLOW_SCRATCH/lenet.json\"" >>"$t.prof.toml"  # [job] is the file's last table
done
sim_check "$ps2.prof.toml" 'assert d["strategy"] == "ps" and d["profiles"].endswith("lenet.json"), d'
sim_check "$r2.prof.toml" 'assert d["strategy"] == "ralp" and d["cut"] == 5, d'
python3 - "$ps2.prof.toml.sim.json" "$r2.prof.toml.sim.json" <<'PY' || fail "simulate: ps and ralp step parts disagree"
import json, sys
p, r = (json.load(open(f)) for f in sys.argv[1:3])
assert p["worker_ms"] > r["worker_ms"], (p["worker_ms"], r["worker_ms"])  # ralp workers run units [0, 5) only
assert r["server_ms"] > p["server_ms"], (r["server_ms"], p["server_ms"])  # the server runs the head for both
PY
sed 's/^ralp_cut = 5$/ralp_cut = 9/' "$r2" >"$r2.badcut.toml"
if "$HETFLOW" simulate "$r2.badcut.toml" >"$r2.badcut.out" 2>&1; then fail "simulate: ralp_cut = 9 accepted"; fi
grep -q "ralp_cut = 9 is not a unit boundary of the model (1..7)" "$r2.badcut.out" || { cat "$r2.badcut.out"; fail "simulate: ralp_cut = 9: no clear error"; }
pass "simulate prices ps (busiest shard) and ralp (its ralp_cut) by their cost models; a bad ralp_cut is named"

# Each ps shard steps on its own node's kind: a profile file with a "fast"
# kind and a "slow" one (20x the optimizer step), the second shard on the
# slow node: the busiest shard's update time is the slow kind's, for that
# shard's bytes (simulate does not start nodes: the ports are never opened).
cp "$HETFLOW_SCRATCH/lenet.json" "$HETFLOW_SCRATCH/kinds.json"
python3 - "$HETFLOW_SCRATCH/kinds.json" <<'PY' || fail "could not make the fast/slow profile file"
import json, sys
d = json.load(open(sys.argv[1]))
(kind, dev), = d["devices"].items()
fast = dict(dev, update_ms=1.0)
slow = dict(dev, update_ms=20.0)
d["devices"] = {"fast": fast, "slow": slow}
for u in d["units"]:
    t = u["devices"][kind]
    u["devices"] = {"fast": t, "slow": t}
json.dump(d, open(sys.argv[1], "w"))
PY
kinds="$HETFLOW_SCRATCH/kinds.toml"
write_topology "$kinds" 8895 3 auto "${common[@]}" 'epochs = 1' 'train_size = 2688' 'strategy = "ps"' \
  'ps_workers = ["n0"]' 'ps_nodes = ["n1", "n2"]' "profile_file = \"$HETFLOW_SCRATCH/kinds.json\""
sed -i -E 's/^(port = 889[56])$/\1\ndevices = [ { kind = "cpu", threads = 1, profile = "fast" } ]/;
           s/^(port = 8897)$/\1\ndevices = [ { kind = "cpu", threads = 1, profile = "slow" } ]/' "$kinds"
sim_check "$kinds" 'assert d["strategy"] == "ps" and d["shards"] == 2 and d["workers"] == 1, d'
python3 - "$kinds.sim.json" "$HETFLOW_SCRATCH/kinds.json" <<'PY' || { cat "$kinds.sim.json"; fail "simulate: a ps shard did not step on its own node's kind"; }
import json, sys
d, prof = (json.load(open(f)) for f in sys.argv[1:3])
params = sum(u["params_bytes"] for u in prof["units"])
b = d["bytes_per_step"] / (2 * d["workers"])  # the busiest shard's bytes
want = d["workers"] * 20.0 * b / params        # its W optimizer steps on the slow kind, pro rata
assert abs(d["server_ms"] - want) <= 1e-6 * want, (d["server_ms"], want)
PY
pass "simulate: each ps shard steps on its own node's kind (the busiest, on the slow node, at 20x)"

# --- bad settings
bad="$HETFLOW_SCRATCH/bad.toml"
write_topology "$bad" 8860 2 auto "${common[@]}" 'epochs = 1' 'train_size = 1280' 'strategy = "ralp"' 'ralp_node = "n7"'
out=$(timeout 60 "$HETFLOW" validate "$bad" 2>&1) && fail "validate accepted ralp_node = n7"
grep -q "ralp_node names node 'n7'" <<<"$out" || { echo "$out"; fail "ralp_node error"; }
write_topology "$bad" 8860 2 auto "${common[@]}" 'epochs = 1' 'train_size = 1280' 'strategy = "ralp"' 'ralp_cut = 99'
out=$(timeout 60 "$HETFLOW" validate "$bad" 2>&1) && fail "validate accepted ralp_cut = 99"
grep -q "ralp_cut = 99: model lenet5 has 8 units" <<<"$out" || { echo "$out"; fail "ralp_cut error"; }
pass "bad ralp settings refused"

# --- the watchdog (issue 9): worker n2's process stopped (SIGSTOP) for 2.5 s;
# the server's node names ralpworker1 as whom it waits on (a held pull or
# held activations, whichever the stop caught), n1 names the server.
wd="$HETFLOW_SCRATCH/wd.toml"
write_topology "$wd" 8870 3 auto "${common[@]}" 'epochs = 3' 'train_size = 12800' 'strategy = "ralp"' \
  'ps_workers = ["n1", "n2"]' 'ralp_cut = 5' 'ps_timeout = "30s"'
one_thread "$wd"
sed -i 's/^connection_timeout = .*/connection_timeout = "20s"\nwatchdog = "1s"/' "$wd"
timeout 300 "$HETFLOW" run "$wd" >"$wd.out" 2>&1 &
RUN_PID=$!
PIDS+=($RUN_PID)
wait_for_text "$wd.out" "epoch 1/3 step" 120 || { cat "$wd.out"; fail "watchdog run: no progress line"; }
victim=$(pgrep -f -- "node $wd --name n2") || fail "no n2 process"
kill -STOP "$victim"
sleep 2.5
kill -CONT "$victim"
wait_exit $RUN_PID 120 || { cat "$wd.out"; fail "watchdog run did not finish"; }
[[ $WAIT_RC -eq 0 ]] || { cat "$wd.out"; fail "watchdog run failed"; }
grep -q "\[n0\].*watchdog: no progress on node 'n0'.*ralp0 waits on worker 'ralpworker1' on node 'n2'" "$wd.out" ||
  { cat "$wd.out"; fail "n0's watchdog did not name ralpworker1"; }
grep -q "\[n1\].*watchdog: no progress on node 'n1'.*ralpworker0 waits on the RALP server 'ralp0' on node 'n0'" "$wd.out" ||
  { cat "$wd.out"; fail "n1's watchdog did not name the server"; }
pass "watchdog: a stopped worker is named by the server's node; the other worker waits on the server"

# --- checkpoints and --resume (issue 9): the server writes the whole model
# and both optimizers' state every checkpoint_every clocks; a worker's node
# SIGKILLed mid-run stops the job naming it; --resume restores the newest
# checkpoint (and its cut), the workers skip the steps it holds, and the run
# ends on the uninterrupted run's weights bit for bit.
ck=("${common[@]}" 'epochs = 2' 'train_size = 12800' 'strategy = "ralp"' 'ps_workers = ["n1", "n2"]' 'ralp_cut = 5'
  'checkpoint_every = 50')
full="$HETFLOW_SCRATCH/ck-full.toml"
write_topology "$full" 8870 3 auto "${ck[@]}" "checkpoint_dir = \"$HETFLOW_SCRATCH/ck-full\""
one_thread "$full"
run_job "$full" "ralp run with checkpoints"
want=$(json_get "$full.json" 'd["weights_checksum"]')
ls "$HETFLOW_SCRATCH/ck-full" | grep -q "ralp0-lower.ckpt-000000000400" && ls "$HETFLOW_SCRATCH/ck-full" | grep -q "ralp0-upper.ckpt-000000000400" ||
  { ls "$HETFLOW_SCRATCH/ck-full"; fail "no final checkpoint (clock 400) of the RALP server"; }
cut="$HETFLOW_SCRATCH/ck-cut.toml"
write_topology "$cut" 8880 3 auto "${ck[@]}" "checkpoint_dir = \"$HETFLOW_SCRATCH/ck-cut\""
one_thread "$cut"
run_and_kill "$cut" n2 "ralp0: checkpoint at clock 100" 120 60
((RUN_RC != 0)) || { cat "$cut.out"; fail "the ralp run exited 0 after n2 was killed"; }
grep -q "node 'n2'.*is down" "$cut.out" || { cat "$cut.out"; fail "the ralp run's output does not name n2"; }
timeout 300 "$HETFLOW" run "$cut" --resume --report "$cut.json" >"$cut.resume.out" 2>&1 ||
  { cat "$cut.resume.out"; fail "resumed ralp run failed"; }
grep -q "ralp0: resumed from .*ralp0-lower.ckpt-" "$cut.resume.out" || { cat "$cut.resume.out"; fail "no resume line"; }
grep -q "units \[5, 8) here (from 'fc1', checkpoint)" "$cut.resume.out" || { cat "$cut.resume.out"; fail "the cut does not come from the checkpoint"; }
/usr/bin/env python3 - "$cut.json" "$want" <<'PY' || { cat "$cut.resume.out"; fail "resumed ralp run differs"; }
import json, sys
d = json.load(open(sys.argv[1])); want = sys.argv[2]
k = [a["metrics"]["resumed_from"] for a in d["actors"] if a["name"] == "ralp0"][0]
w = [a["metrics"]["resumed_from"] for a in d["actors"] if a["name"].startswith("ralpworker")]
print(f"resumed from clock {k} (workers {w}); checksum {d['weights_checksum']} (uninterrupted {want})")
assert k >= 100 and w == [k, k], (k, w)
assert d["weights_checksum"] == want
PY
pass "ralp: n2 killed after the checkpoint at clock 100 stops the job naming it; --resume ends on the uninterrupted weights"

# A checkpoint that does not read back intact is passed over (the newest
# pair of the uninterrupted run, its final clock 400, with a byte flipped):
# --resume takes the one before and still ends on the same weights; with no
# checkpoint at all it trains from the start and says so.
f="$HETFLOW_SCRATCH/ck-full/ralp0-upper.ckpt-000000000400"
printf '\xff' | dd of="$f" bs=1 seek=$(($(stat -c %s "$f") / 2)) conv=notrunc status=none
timeout 300 "$HETFLOW" run "$full" --resume --report "$full.r.json" >"$full.r.out" 2>&1 ||
  { cat "$full.r.out"; fail "resume past a corrupt checkpoint failed"; }
grep -q "ralp0: --resume passes over a checkpoint: .*ralp0-upper.ckpt-000000000400" "$full.r.out" &&
  grep -q "ralp0: resumed from .*ralp0-lower.ckpt-000000000350 (clock 350)" "$full.r.out" ||
  { cat "$full.r.out"; fail "the corrupt checkpoint was not passed over"; }
[[ $(json_get "$full.r.json" 'd["weights_checksum"]') == "$want" ]] || fail "resumed past a corrupt checkpoint: the weights differ"
none="$HETFLOW_SCRATCH/ck-none.toml"
none_job=()
for l in "${ck[@]}"; do [[ $l == train_size* ]] || none_job+=("$l"); done
write_topology "$none" 8885 3 auto "${none_job[@]}" 'train_size = 1280' "checkpoint_dir = \"$HETFLOW_SCRATCH/ck-none\""
one_thread "$none"
timeout 300 "$HETFLOW" run "$none" --resume --report "$none.json" >"$none.out" 2>&1 || { cat "$none.out"; fail "--resume without checkpoints failed"; }
grep -q "ralp0: --resume: no complete checkpoint in .*; training from the start" "$none.out" ||
  { cat "$none.out"; fail "no 'training from the start' line"; }
pass "ralp --resume passes over a corrupt checkpoint (resumed from 350, same weights) and trains from the start without one"

# On demand: `hetflow shell -c checkpoint` while the job runs: the server
# writes one more checkpoint at the clock the shell picked (a little ahead of
# the fastest worker); the run's weights are unchanged, and --resume from
# that checkpoint ends on them too.
od="$HETFLOW_SCRATCH/ck-od.toml"
od_job=()
for l in "${ck[@]}"; do [[ $l == checkpoint_every* || $l == train_size* ]] || od_job+=("$l"); done
write_topology "$od" 8890 3 auto "${od_job[@]}" 'train_size = 25600' 'checkpoint_every = 1000000' \
  "checkpoint_dir = \"$HETFLOW_SCRATCH/ck-od\""
one_thread "$od"
run_job "$od" "ralp reference run of the on-demand case"
want_od=$(json_get "$od.json" 'd["weights_checksum"]')
rm -rf "$HETFLOW_SCRATCH/ck-od"
"$HETFLOW" run "$od" --report "$od.run.json" >"$od.run.out" 2>&1 &
RUN_PID=$!
PIDS+=($RUN_PID)
wait_for_text "$od.run.out" "epoch 1/2 step" 120 || { cat "$od.run.out"; fail "on demand: no progress line"; }
# --json: "checkpoint" is the clock the server took (it may be later than the shell asked).
"$HETFLOW" shell 127.0.0.1:8890 --topology "$od" -c checkpoint --json >"$od.shell" 2>&1 || { cat "$od.shell" "$od.run.out"; fail "on demand: shell checkpoint failed"; }
label=$(json_get "$od.shell" 'd["checkpoint"]')
json_get "$od.shell" "d['ok'] and 'ralp0: checkpoint at clock $label when the global clock reaches it' in d['tries'][-1]['nodes'][0]['message']" |
  grep -q True || { cat "$od.shell"; fail "on demand: the shell's answer"; }
wait_exit $RUN_PID 300 || { cat "$od.run.out"; fail "on demand: the run did not end"; }
[[ $WAIT_RC -eq 0 ]] || { cat "$od.run.out"; fail "on demand: the run exited $WAIT_RC"; }
name=$(printf 'ckpt-%012d' "$label")
ls "$HETFLOW_SCRATCH/ck-od" | grep -q "^ralp0-lower.$name$" && ls "$HETFLOW_SCRATCH/ck-od" | grep -q "^ralp0-upper.$name$" ||
  { ls "$HETFLOW_SCRATCH/ck-od"; fail "on demand: no checkpoint at clock $label"; }
[[ $(json_get "$od.run.json" 'd["weights_checksum"]') == "$want_od" ]] || fail "on demand: the checkpoint changed the run's weights"
rm "$HETFLOW_SCRATCH/ck-od/"ralp0-*.ckpt-000000000800
resume_and_check "$od" "$want_od" "ralp0: resumed from .*$name (clock $label)" "on demand, resumed from clock $label"
pass "shell checkpoint: the RALP server wrote clock $label; --resume from it ends with the uninterrupted weights"

# Per-node CPU speed: measured profiles of 2 one-thread nodes that `hetflow
# run` pins to a CPU each; each node's CPU is timed against the one the
# profiles were measured on. A busy loop on n1's CPU slows it: n1's device
# gets its own kind, scaled by the measured factor, and the ps step (BSP:
# the slowest worker) by as much. Needs two usable CPUs, and skips when n1
# already came out scaled without the loop (a CPU slower than the other:
# the 2-core VM's vCPUs do that for minutes at a time).
cpus=($(python3 -c 'import os; print(" ".join(map(str, sorted(os.sched_getaffinity(0)))))'))
speed="$HETFLOW_SCRATCH/speed.toml"
if ((${#cpus[@]} == 2)); then
  write_topology "$speed" 8898 2 auto "${common[@]}" 'epochs = 1' 'train_size = 1280' 'strategy = "ps"'
  one_thread "$speed"
  sim_check "$speed" 'assert "node CPU speeds (a fixed loop" in d["profiles"] and "n0 1.00 (CPUs" in d["profiles"] and "n1 " in d["profiles"], d["profiles"]'
  cp "$speed.sim.json" "$speed.alike.json"
fi
if ((${#cpus[@]} != 2)); then
  echo "SKIP per-node CPU speed: ${#cpus[@]} usable CPUs here, the check wants 2"
elif grep -q "kinds scaled" "$speed.alike.json"; then
  echo "SKIP per-node CPU speed under a busy loop: the CPUs already differ ($(python3 -c "import json,sys;print(json.load(open(sys.argv[1]))['profiles'])" "$speed.alike.json"))"
else
  taskset -c "${cpus[1]}" sh -c 'while :; do :; done' &
  busy=$!
  PIDS+=("$busy")
  sim_check "$speed" 'assert "kinds scaled: n1 x " in d["profiles"], d["profiles"]'
  kill "$busy"; wait "$busy" 2>/dev/null || true
  python3 - "$speed.alike.json" "$speed.sim.json" <<'PY' || fail "simulate: the slower node's factor did not price the ps step"
import json, re, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
f = float(re.search(r"kinds scaled: n1 x ([0-9.]+)", b["profiles"]).group(1))
assert f > 1.1, b["profiles"]
# n1's worker is the slowest: its units at f times n0's (the same kind's
# profile moves by its own noise between the two runs: 25%).
r = b["worker_ms"] / a["worker_ms"]
assert abs(r - f) <= 0.25 * f, (r, f, a["worker_ms"], b["worker_ms"])
PY
  pass "simulate: a node whose CPU is slower gets its own scaled kind ($(python3 -c "import json,re,sys;print(re.search(r'kinds scaled: (n1 x [0-9.]+)', json.load(open(sys.argv[1]))['profiles']).group(1))" "$speed.sim.json"))"
fi
