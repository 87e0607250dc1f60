#!/usr/bin/env bash
# `hetflow run/node --trace PATH` (issue 8): Chrome trace JSON with one
# process per node and one track per actor.
#  1. a single-node train job: valid JSON, process/thread metadata, a
#     "train step" per step holding forward/backward/optimizer (holding a
#     span per unit of the model), evaluation,
#     monotone timestamps per track; the same from `hetflow node --trace`;
#  2. a 2-node dp job: two pids, allreduce (trainer side) and ring steps on
#     both nodes, wire messages on their receivers' tracks;
#  3. a ps job with streamed input: push/pull/apply, stream shard batches;
#     a ralp job; a hetpipe job (its last stage's send and local update
#     follow its forward+backward, not inside it);
#  4. a preprocess job: its shards' passes and segments, the vocabulary merge;
#  5. a failed job still writes what was recorded, and says so;
#  6. --trace into a directory that does not exist: exit 2, no job run.
# Ports 9700-9760.
source "$(dirname "$0")/lib.sh"
S=$HETFLOW_SCRATCH

# check_trace FILE PIDS CHECKS...: the document's structure (every check
# is a python expression over `names`: event name -> count, `by_pid`:
# pid -> set of event names, `threads`: set of thread names, `inside`:
# (enclosing span's name or None, event name) -> count).
check_trace() {
  python3 - "$@" <<'EOF'
import json, sys, collections
path, want_pids = sys.argv[1], sorted(int(p) for p in sys.argv[2].split(","))
d = json.load(open(path))  # raises on malformed JSON
assert isinstance(d, dict) and isinstance(d.get("traceEvents"), list), "no traceEvents array"
assert d.get("displayTimeUnit") == "ms"
ev = d["traceEvents"]
meta = [e for e in ev if e.get("ph") == "M"]
xs = [e for e in ev if e.get("ph") == "X"]
assert xs, "no complete events"
procs = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
assert sorted(procs) == want_pids, ("process_name", procs, want_pids)
threads_of = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
threads = set(threads_of.values())
last = {}
names = collections.Counter()
by_pid = collections.defaultdict(set)
for e in xs:
    for k in ("name", "pid", "tid", "ts", "dur"):
        assert k in e, (k, e)
    assert isinstance(e["ts"], int) and isinstance(e["dur"], int), e
    assert e["dur"] >= 0, e
    key = (e["pid"], e["tid"])
    assert key in threads_of, ("an event on a track without thread_name", e)
    assert e["ts"] >= last.get(key, 0), ("ts not monotone on its track", e, last.get(key))
    last[key] = e["ts"]
    names[e["name"]] += 1
    by_pid[e["pid"]].add(e["name"])
assert sorted(by_pid) == want_pids, sorted(by_pid)
# Spans on one track nest (trace viewers drop slices that overlap partially).
open_spans = collections.defaultdict(list)
inside = collections.Counter()
for e in xs:
    stack = open_spans[(e["pid"], e["tid"])]
    while stack and stack[-1][0] <= e["ts"]:
        stack.pop()
    end = e["ts"] + e["dur"]
    assert not stack or end <= stack[-1][0], ("overlaps its enclosing span", e, stack[-1][1])
    inside[(stack[-1][1]["name"] if stack else None, e["name"])] += 1
    stack.append((end, e))
for check in sys.argv[3:]:
    assert eval(check), (check, dict(names), {p: sorted(n) for p, n in by_pid.items()}, sorted(threads))
print("trace ok: %d events, %d tracks; %s" % (len(xs), len(threads_of), dict(names.most_common(8))))
EOF
}

# --- 1. single node train -----------------------------------------------------------------------
topo="$S/train.toml"
# 2 epochs of ceil(1000 / 32) = 32 steps.
write_topology "$topo" 9700 1 auto 'kind = "train"' 'model = "mlp"' 'dataset = "synthetic"' \
  'input_shape = [1, 12, 12]' 'train_size = 1000' 'test_size = 200' 'classes = 5' 'epochs = 2' \
  'batch_size = 32' 'lr = 0.02'
timeout 120 "$HETFLOW" run "$topo" --trace "$S/train.json" >"$S/train.out" 2>&1 ||
  { cat "$S/train.out"; fail "train run with --trace"; }
grep -q "hetflow run: trace written to $S/train.json (.* events from 1 node" "$S/train.out" ||
  { cat "$S/train.out"; fail "no 'trace written' line"; }
# Per unit of the model (mlp: flatten, fc1, fc2, fc3): a forward and a backward
# span per training step, nested in forward/backward (and in evaluate).
check_trace "$S/train.json" 0 'names["train step"] >= 64' 'names["forward"] >= 64' 'names["backward"] >= 64' \
  'names["optimizer"] >= 64' 'names["batch"] >= 64' 'names["evaluate"] == 2' '"trainer" in threads' \
  'all(names[u] >= 64 and names[u + " backward"] >= 64 for u in ("fc1", "fc2", "fc3"))' ||
  { cat "$S/train.out"; fail "single-node train trace"; }
[[ $(json_get "$S/train.json" 'd["otherData"]["status"]') == ok ]] || fail "status not ok"
pass "run --trace: a train step per step (64), forward/backward/optimizer/evaluate and each unit's spans on the trainer's track"

# `hetflow node --trace` writes that node's file itself.
timeout 120 "$HETFLOW" node "$topo" --name n0 --trace "$S/node.json" >"$S/node.out" 2>&1 ||
  { cat "$S/node.out"; fail "node --trace"; }
grep -q "trace written to $S/node.json" "$S/node.out" || { cat "$S/node.out"; fail "node: no 'trace written' line"; }
check_trace "$S/node.json" 0 'names["train step"] >= 64' || fail "node trace"
pass "node --trace writes the node's own trace"

# --- 2. two-node data parallel -------------------------------------------------------------------
one_thread() { sed -i -E 's/^(port = [0-9]+)$/\1\ndevices = [ { kind = "cpu", threads = 1 } ]/' "$1"; }
# The message ring (shm = "off"): nodes on one host would otherwise sum
# through shared memory, with no ring steps or wire messages to trace.
write_topology "$S/dp.toml" 9710 2 auto 'kind = "train"' 'model = "mlp"' 'dataset = "synthetic"' \
  'input_shape = [1, 12, 12]' 'train_size = 640' 'test_size = 128' 'classes = 5' 'epochs = 1' \
  'batch_size = 64' 'lr = 0.02' 'strategy = "dp"' 'shm = "off"'
one_thread "$S/dp.toml"
timeout 180 "$HETFLOW" run "$S/dp.toml" --trace "$S/dp.json" >"$S/dp.out" 2>&1 ||
  { cat "$S/dp.out"; fail "dp run with --trace"; }
grep -q "trace written to $S/dp.json (.* events from 2 nodes" "$S/dp.out" || { cat "$S/dp.out"; fail "dp: no trace line"; }
check_trace "$S/dp.json" 0,1 \
  'all("allreduce" in by_pid[p] and "train step" in by_pid[p] for p in (0, 1))' \
  'all(any(n.startswith("ring step") for n in by_pid[p]) for p in (0, 1))' \
  'names["train step"] >= 20' '{"replica0", "replica1", "ring0", "ring1"} <= threads' \
  'names["wire in from n1"] >= 20 and names["wire in from n0"] >= 20' ||
  { cat "$S/dp.out"; fail "dp trace"; }
# Flow arrows: every wire message's start (on the sender's track, beside a
# "wire out to ..." slice) and end (on the receiver's) share an id, across
# the two nodes.
/usr/bin/python3 - "$S/dp.json" <<'PY' || { cat "$S/dp.out"; fail "dp trace: flow arrows"; }
import json, sys, collections
ev = json.load(open(sys.argv[1]))["traceEvents"]
s = {e["id"]: e for e in ev if e.get("ph") == "s"}
f = {e["id"]: e for e in ev if e.get("ph") == "f"}
both = set(s) & set(f)
cross = [i for i in both if s[i]["pid"] != f[i]["pid"]]
outs = collections.Counter(e["name"] for e in ev if e.get("ph") == "X" and e["name"].startswith("wire out to "))
print(f"flows: {len(s)} starts, {len(f)} ends, {len(both)} matched, {len(cross)} across nodes; {dict(outs)}")
assert len(both) >= 40 and len(cross) >= 40, (len(both), len(cross))
assert all(f[i].get("bp") == "e" and f[i]["ts"] >= s[i]["ts"] - 1000 for i in both)
assert outs["wire out to ring0"] >= 20 and outs["wire out to ring1"] >= 20, outs
PY
pass "dp, 2 nodes: two processes, allreduce and ring steps on both, the ring's wire messages as they leave and arrive, joined by flow arrows"

# The same job as two `hetflow node --trace` processes (as on two hosts), then
# `hetflow trace-merge` makes one timeline of both.
timeout 180 "$HETFLOW" node "$S/dp.toml" --name n0 --trace "$S/dp-n0.json" >"$S/dp-n0.out" 2>&1 &
p0=$!
timeout 180 "$HETFLOW" node "$S/dp.toml" --name n1 --trace "$S/dp-n1.json" >"$S/dp-n1.out" 2>&1 &
p1=$!
PIDS+=($p0 $p1)
wait $p0 && wait $p1 || { cat "$S/dp-n0.out" "$S/dp-n1.out"; fail "dp as two hetflow node --trace processes"; }
"$HETFLOW" trace-merge "$S/dp-n0.json" "$S/dp-n1.json" --out "$S/dp-merged.json" >"$S/merge.out" 2>&1 ||
  { cat "$S/merge.out"; fail "trace-merge"; }
grep -q "events from 2 files written to $S/dp-merged.json" "$S/merge.out" || { cat "$S/merge.out"; fail "trace-merge line"; }
check_trace "$S/dp-merged.json" 0,1 'all(any(n.startswith("ring step") for n in by_pid[p]) for p in (0, 1))' \
  '{"replica0", "replica1", "ring0", "ring1"} <= threads' || fail "merged trace"
"$HETFLOW" trace-merge "$S/dp.out" --out "$S/not.json" >"$S/merge-bad.out" 2>&1
rc=$?
[[ $rc -eq 1 && ! -e "$S/not.json" ]] && grep -q "none of the 1 files is a trace" "$S/merge-bad.out" ||
  { cat "$S/merge-bad.out"; fail "trace-merge of a non-trace: exit $rc"; }
"$HETFLOW" trace-merge "$S/dp-n0.json" >/dev/null 2>&1
[[ $? -eq 2 ]] || fail "trace-merge without --out: want exit 2"
pass "trace-merge: two nodes' own traces as one timeline; a non-trace input is refused"

# --- 3. parameter servers, streamed input --------------------------------------------------------
write_topology "$S/ps.toml" 9720 2 auto 'kind = "train"' 'model = "mlp"' 'dataset = "synthetic"' \
  'input_shape = [1, 12, 12]' 'train_size = 640' 'test_size = 128' 'classes = 5' 'epochs = 1' \
  'batch_size = 32' 'lr = 0.02' 'strategy = "ps"' 'ps_nodes = ["n0"]' 'input = "stream"' 'prefetch = 2'
one_thread "$S/ps.toml"
timeout 180 "$HETFLOW" run "$S/ps.toml" --trace "$S/ps.json" >"$S/ps.out" 2>&1 ||
  { cat "$S/ps.out"; fail "ps run with --trace"; }
check_trace "$S/ps.json" 0,1 'names["push"] >= 20' 'names["pull"] >= 20' 'names["wait: pull/clock"] >= 20' \
  'names["apply"] >= 20' 'names["forward+backward"] >= 20' 'names["build batch"] >= 20' ||
  { cat "$S/ps.out"; fail "ps trace"; }
pass "ps + stream: pull/push/apply, waits on pulls, stream shard batches"

# --- 3b. RALP: worker steps (pull, lower forward/backward, push, waits on the server), server passes
write_topology "$S/ralp.toml" 9725 3 auto 'kind = "train"' 'model = "lenet5"' 'dataset = "synthetic"' \
  'input_shape = [1, 28, 28]' 'train_size = 640' 'test_size = 64' 'epochs = 1' 'batch_size = 32' 'lr = 0.05' \
  'strategy = "ralp"' 'ps_workers = ["n1", "n2"]' 'ralp_cut = 5'
one_thread "$S/ralp.toml"
timeout 180 "$HETFLOW" run "$S/ralp.toml" --trace "$S/ralp.json" >"$S/ralp.out" 2>&1 ||
  { cat "$S/ralp.out"; fail "ralp run with --trace"; }
check_trace "$S/ralp.json" 0,1,2 'names["lower forward"] >= 20' 'names["lower backward"] >= 20' \
  'names["push"] >= 20' 'names["wait: server"] >= 20' 'names["apply"] >= 20' \
  'names["activations (upper pass when complete)"] >= 20' '{"ralpworker0", "ralpworker1", "ralp0"} <= threads' ||
  { cat "$S/ralp.out"; fail "ralp trace"; }
pass "ralp: worker pulls, lower passes, pushes and waits on the server; the server's passes and applies"

# --- 3c. HetPipe: one VW of two stages; stage 0 sends inside its forward,
# the last stage's send and local update follow its forward+backward
write_topology "$S/hp.toml" 9750 2 auto 'kind = "train"' 'model = "lenet5"' 'dataset = "synthetic"' \
  'input_shape = [1, 28, 28]' 'train_size = 640' 'test_size = 64' 'epochs = 1' 'batch_size = 32' 'lr = 0.05' \
  'strategy = "hetpipe"' 'virtual_workers = 1' 'nm = 2' 'eval_each_epoch = false'
one_thread "$S/hp.toml"
timeout 180 "$HETFLOW" run "$S/hp.toml" --trace "$S/hp.json" >"$S/hp.out" 2>&1 ||
  { cat "$S/hp.out"; fail "hetpipe run with --trace"; }
check_trace "$S/hp.json" 0,1 'names["forward+backward"] >= 20' 'inside[("forward", "send")] >= 20' \
  'inside[(None, "send")] >= 20 and inside[(None, "local update")] >= 20' \
  'inside[("forward+backward", "send")] == 0 and inside[("forward+backward", "local update")] == 0' \
  '{"hpstage0", "hpstage1"} <= threads' || { cat "$S/hp.out"; fail "hetpipe trace"; }
pass "hetpipe: stage 0 sends inside its forward; the last stage's send and local update follow its forward+backward"

# --- 4. preprocess ----------------------------------------------------------------------------------
"$HETFLOW" gen-criteo --rows 20000 --out "$S/in.tsv" >/dev/null 2>&1 || fail "gen-criteo"
write_topology "$S/pre.toml" 9730 2 auto 'kind = "preprocess"' "inputs = [\"$S/in.tsv\"]" \
  "output_dir = \"$S/pre-out\""
timeout 180 "$HETFLOW" run "$S/pre.toml" --trace "$S/pre.json" >"$S/pre.out" 2>&1 ||
  { cat "$S/pre.out"; fail "preprocess with --trace"; }
check_trace "$S/pre.json" 0,1 'names["pass 1: count"] == 2' 'names["pass 2: apply"] == 2' \
  'names["count segment"] >= 2' 'names["apply segment"] >= 2' 'names["merge column"] == 26' \
  'names["wait: vocabularies"] == 2' \
  '{"pp_shard_0", "pp_shard_1", "pp_merge_0", "pp_merge_1"} <= threads' || { cat "$S/pre.out"; fail "preprocess trace"; }
pass "preprocess, 2 shards: passes, segments, the vocabulary merge on both nodes and the waits for it"

# --- 5. a failed job ----------------------------------------------------------------------------------
# A stream shard duplicates a row of its first batch: the exactly-once check
# fails the job at its first step.
write_topology "$S/bad.toml" 9740 1 auto 'kind = "train"' 'model = "mlp"' 'dataset = "synthetic"' \
  'input_shape = [1, 12, 12]' 'train_size = 512' 'test_size = 64' 'classes = 5' 'epochs = 1' \
  'input = "stream"' 'stream_fault = "duplicate"'
timeout 120 "$HETFLOW" run "$S/bad.toml" --trace "$S/bad.json" >"$S/bad.out" 2>&1
rc=$?
[[ $rc -eq 1 ]] || { cat "$S/bad.out"; fail "failed job with --trace: exit $rc, want 1"; }
[[ $(grep -c "trace of the FAILED job written to $S/bad.json" "$S/bad.out") -eq 1 ]] ||
  { cat "$S/bad.out"; fail "failed job: no one-line trace notice"; }
check_trace "$S/bad.json" 0 'names["train step"] >= 1' 'names["build batch"] >= 1' || fail "failed job's trace"
json_get "$S/bad.json" 'd["otherData"]["status"]' | grep -q "^failed" || fail "failed job's trace: status"
pass "failed job: the trace of what ran, exit 1 unchanged, one line says so"

# --- 6. an unwritable path ---------------------------------------------------------------------------
"$HETFLOW" run "$topo" --trace "$S/no/such/dir/t.json" >"$S/err.out" 2>&1
rc=$?
[[ $rc -eq 2 ]] || { cat "$S/err.out"; fail "--trace into a missing directory: exit $rc, want 2"; }
grep -q -- "--trace: the directory of $S/no/such/dir/t.json does not exist" "$S/err.out" ||
  { cat "$S/err.out"; fail "--trace: no clear message"; }
! grep -q "^\[n0\]" "$S/err.out" || { cat "$S/err.out"; fail "a node ran despite the bad --trace path"; }
"$HETFLOW" node "$topo" --name n0 --trace "$S/no/t.json" >"$S/err2.out" 2>&1
rc=$?
[[ $rc -eq 2 ]] && grep -q "does not exist" "$S/err2.out" || { cat "$S/err2.out"; fail "node --trace bad path: exit $rc"; }
HETFLOW_TRACE_MAX_EVENTS=lots "$HETFLOW" run "$topo" --trace "$S/x.json" >"$S/err3.out" 2>&1
rc=$?
[[ $rc -eq 2 ]] && grep -q "HETFLOW_TRACE_MAX_EVENTS" "$S/err3.out" || { cat "$S/err3.out"; fail "bad bound: exit $rc"; }
[[ ! -e "$S/x.json" ]] || fail "a bad --trace wrote a file"
pass "--trace into a missing directory (run, node) or a bad bound: exit 2 before the job, clear message"

# The bound: a tiny one keeps that many events and says how many it dropped.
HETFLOW_TRACE_MAX_EVENTS=50 timeout 120 "$HETFLOW" run "$topo" --trace "$S/small.json" >"$S/small.out" 2>&1 ||
  { cat "$S/small.out"; fail "run with a small trace bound"; }
grep -q "dropped over the bound" "$S/small.out" || { cat "$S/small.out"; fail "no 'dropped' notice"; }
[[ $(json_get "$S/small.json" 'sum(1 for e in d["traceEvents"] if e["ph"] == "X")') -eq 50 ]] || fail "bound not kept"
[[ $(json_get "$S/small.json" 'd["otherData"]["dropped_events"] > 0') == True ]] || fail "drops not counted"
pass "HETFLOW_TRACE_MAX_EVENTS bounds the events and the drops are counted"
