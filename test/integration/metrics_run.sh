#!/usr/bin/env bash
# metrics_port (issue 8): every node serves Prometheus text at
# metrics_port + its index while it runs: training progress, actors, data
# plane counters; 404 elsewhere; closed after the job; validate refuses a
# metrics port that collides with a node's.
source "$(dirname "$0")/lib.sh"
S=$HETFLOW_SCRATCH
MP=9790

topo="$S/dp.toml"
# The message ring (shm = "off"): its chunks are what the data-plane and
# per-actor traffic metrics count (through shared memory nothing is sent).
write_topology "$topo" 9780 2 auto 'kind = "train"' 'strategy = "dp"' 'model = "mlp"' 'dataset = "synthetic"' \
  'input_shape = [1, 12, 12]' 'train_size = 4096' 'test_size = 256' 'classes = 5' 'epochs = 40' \
  'batch_size = 32' 'lr = 0.02' 'shm = "off"'
sed -i "s/^connection_timeout = .*/&\nmetrics_port = $MP/" "$topo"
"$HETFLOW" validate "$topo" >/dev/null || fail "validate $topo"
"$HETFLOW" run "$topo" >"$S/dp.out" 2>&1 &
run_pid=$!

# Scrape both nodes until the trainers report a step (at most 60 s).
python3 - "$MP" "$S" <<'PY' || { kill "$run_pid" 2>/dev/null; cat "$S/dp.out"; fail "scrape"; }
import re, sys, time, urllib.request, urllib.error
mp, scratch = int(sys.argv[1]), sys.argv[2]
line = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain; version=0.0.4"), r.headers
        return r.read().decode()
def samples(text):
    out = {}
    for l in text.splitlines():
        if l.startswith("#") or not l:
            continue
        m = line.match(l)
        assert m, f"not exposition syntax: {l!r}"
        labels = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        out.setdefault(m.group(1), []).append((labels, float(m.group(4))))
    return out
deadline = time.time() + 60
while True:
    try:
        got = [samples(scrape(mp + i)) for i in (0, 1)]
        steps = [max((v for _, v in g.get("hetflow_train_step", [])), default=0) for g in got]
        if all(s > 0 for s in steps):
            break
    except (urllib.error.URLError, ConnectionError):
        pass
    assert time.time() < deadline, "no training step reported within 60 s"
    time.sleep(0.3)
for i, g in enumerate(got):
    up = g["hetflow_job_running"][0]
    assert up[0]["node"] == f"n{i}" and up[0]["cluster"] == "it-dp" and up[0]["job"] == "train" and up[1] == 1, up
    running = {l["actor"]: v for l, v in g["hetflow_actor_running"]}
    assert running.get(f"replica{i}") == 1, running
    assert g["hetflow_uptime_seconds"][0][1] > 0 and g["hetflow_resident_memory_bytes"][0][1] > 1e6
    for k in ("bytes_sent_total", "bytes_received_total", "messages_sent_total"):
        assert g["hetflow_data_plane_" + k][0][1] > 0, (i, k, g["hetflow_data_plane_" + k])  # the ring moves bytes
    assert g["hetflow_data_plane_refused_messages_total"][0][1] == 0, g["hetflow_data_plane_refused_messages_total"]
    assert g["hetflow_train_samples_per_second"][0][1] > 0 and g["hetflow_train_loss"][0][1] > 0
    assert 0 <= g["hetflow_train_accuracy"][0][1] <= 1, g["hetflow_train_accuracy"]
    assert g["hetflow_train_epoch"][0][0]["actor"] == f"replica{i}"
    # Per actor: chunks delivered to this node's ring member, sent to the other's.
    rb = {l["actor"]: v for l, v in g["hetflow_actor_wire_received_bytes_total"]}
    sb = {l["actor"]: v for l, v in g["hetflow_actor_wire_sent_bytes_total"]}
    assert rb.get(f"ring{i}", 0) > 0 and sb.get(f"ring{1 - i}", 0) > 0, (i, rb, sb)
    # Delivered and not let go yet (the shell's MAILBOX): at most what was delivered.
    pm = {l["actor"]: v for l, v in g["hetflow_actor_wire_pending_messages"]}
    rmt = {l["actor"]: v for l, v in g["hetflow_actor_wire_received_messages_total"]}
    assert 0 <= pm[f"ring{i}"] <= rmt[f"ring{i}"], (i, pm, rmt)
# Byte counters only grow.
b0 = got[0]["hetflow_data_plane_bytes_sent_total"][0][1]
time.sleep(0.5)
b1 = samples(scrape(mp))["hetflow_data_plane_bytes_sent_total"][0][1]
assert b1 >= b0, (b0, b1)
# Rates over each node's last one-second sample: the ring is busy.
time.sleep(2.2)
for i in (0, 1):
    g = samples(scrape(mp + i))
    rr = {l["actor"]: v for l, v in g.get("hetflow_actor_wire_received_bytes_per_second", [])}
    rm = {l["actor"]: v for l, v in g.get("hetflow_actor_wire_received_messages_per_second", [])}
    assert rr.get(f"ring{i}", 0) > 0 and rm.get(f"ring{i}", 0) > 0, (i, rr, rm)
# Other paths and methods.
for path, code in (("/", 404), ("/metrics/x", 404)):
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{mp}{path}", timeout=5)
        raise AssertionError(path + " answered 200")
    except urllib.error.HTTPError as e:
        assert e.code == code, (path, e.code)
try:
    urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{mp}/metrics", data=b"x"), timeout=5)
    raise AssertionError("POST answered 200")
except urllib.error.HTTPError as e:
    assert e.code == 405, e.code
print("scrape ok: steps", steps)
PY
wait "$run_pid" || { cat "$S/dp.out"; fail "dp job with metrics_port failed"; }
grep -q "\[n0\].*metrics at http://127.0.0.1:$MP/metrics" "$S/dp.out" || { cat "$S/dp.out"; fail "no 'metrics at' line"; }
pass "2 dp nodes serve /metrics at $MP and $((MP + 1)): progress, actors, data plane; 404/405 elsewhere"

python3 - "$MP" <<'PY' || fail "a metrics port is still open after the job"
import socket, sys
for port in (int(sys.argv[1]), int(sys.argv[1]) + 1):
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", port))
        raise SystemExit(f"port {port} still accepts")
    except ConnectionRefusedError:
        pass
PY
pass "the metrics ports are closed after the job"

# validate: node 1's metrics port would be node 0's port.
bad="$S/bad.toml"
write_topology "$bad" 9785 2 auto 'kind = "skeleton"'
sed -i "s/^connection_timeout = .*/&\nmetrics_port = 9784/" "$bad"
"$HETFLOW" validate "$bad" >"$S/bad.out" 2>&1
rc=$?
[[ $rc -eq 2 ]] && grep -q "node 'n1' would serve /metrics at 127.0.0.1:9785 (metrics_port 9784 + its index 1), the address of node 'n0'" "$S/bad.out" ||
  { cat "$S/bad.out"; fail "validate: metrics port collision, exit $rc"; }
pass "validate refuses a metrics_port that collides with a node's port"
