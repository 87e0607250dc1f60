#!/usr/bin/env bash
# The watchdog (issue 9): when nothing on a node advances for `watchdog`, the
# node logs who waits on whom (kernels/waits.hpp), before any timeout; the
# job itself goes on. Here a ps worker sleeps 4 s (the drill): worker 0's
# pull waits on the shards (BSP), and both nodes say so within ~1-2 s.
source "$(dirname "$0")/lib.sh"
S=$HETFLOW_SCRATCH

one_thread() { sed -i -E 's/^(port = [0-9]+)$/\1\ndevices = [ { kind = "cpu", threads = 1 } ]/' "$1"; }
common=('kind = "train"' 'model = "mlp"' 'dataset = "synthetic"' 'input_shape = [1, 12, 12]' 'classes = 5'
  'test_size = 128' 'batch_size = 32' 'lr = 0.02' 'epochs = 1' 'train_size = 640' 'strategy = "ps"'
  'ps_timeout = "60s"' 'ps_drill_worker = 1' 'ps_drill_clock = 3' 'ps_drill_delay = "4s"')

topo="$S/stall.toml"
write_topology "$topo" 9800 2 auto "${common[@]}"
one_thread "$topo"
sed -i 's/^connection_timeout = .*/connection_timeout = "10s"\nwatchdog = "1s"\nmetrics_port = 9810/' "$topo"
"$HETFLOW" validate "$topo" >/dev/null || fail "validate $topo"
timeout 120 "$HETFLOW" run "$topo" >"$topo.out" 2>&1 &
run_pid=$!
# The same waits on /metrics while the stall lasts: hetflow_wait_seconds.
python3 - <<'PY' || { kill "$run_pid" 2>/dev/null; cat "$topo.out"; fail "no open wait on /metrics during the stall"; }
import re, time, urllib.request, urllib.error
deadline = time.time() + 60
pat = re.compile(r'^hetflow_wait_seconds\{cluster="it-stall",node="n0",job="train",actor="psworker0",on="the ps shards",for="the weights of clock \d+[^"]*"\} (\S+)$', re.M)
while True:
    try:
        text = urllib.request.urlopen("http://127.0.0.1:9810/metrics", timeout=5).read().decode()
        m = pat.search(text)
        if m and float(m.group(1)) >= 0.5:
            assert re.search(r'^hetflow_progress_total\{[^}]*\} [1-9]', text, re.M), "no progress counted"
            print("wait on /metrics:", m.group(0)[:160])
            break
    except (urllib.error.URLError, ConnectionError):
        pass
    assert time.time() < deadline, "psworker0's wait never showed on /metrics"
    time.sleep(0.2)
PY
wait "$run_pid" || { cat "$topo.out"; fail "the stalled ps job failed"; }
# (The line lists every open wait on the node; ps0's may come first.)
grep -q "\[n0\].*watchdog: no progress on node 'n0' for [0-9.]* s (watchdog 1.0 s): .*psworker0 waits on the ps shards for the weights of clock" "$topo.out" ||
  { cat "$topo.out"; fail "n0: no watchdog line naming psworker0's pull"; }
# ... and each shard names the worker it waits on: the sleeping one.
grep -q "\[n0\].*watchdog: .*ps0 waits on worker 'psworker1' on node 'n1' (the slowest, at clock 3) for the clock that lets it answer psworker0's pull of clock 4" "$topo.out" ||
  { cat "$topo.out"; fail "n0: the watchdog line does not name psworker1 as the one ps0 waits on"; }
grep -q "\[n1\].*watchdog: no progress on node 'n1'.*ps1 waits on worker 'psworker1'" "$topo.out" ||
  { cat "$topo.out"; fail "n1: no watchdog line naming psworker1"; }
# While it lasts it repeats about once a watchdog period, not once a tick.
lines=$(grep -c "\[n0\].*watchdog: no progress" "$topo.out")
[[ $lines -ge 2 && $lines -le 6 ]] || { cat "$topo.out"; fail "n0: $lines watchdog lines for a ~4 s stall, want 2-6"; }
pass "a 4 s stall: /metrics and the watchdog name psworker0 waiting on the shards, the shards waiting on psworker1 ($lines lines on n0), the job still finishes"

# watchdog = "0s": off.
sed -i 's/^watchdog = .*/watchdog = "0s"/' "$topo"
timeout 120 "$HETFLOW" run "$topo" >"$topo.off.out" 2>&1 || { cat "$topo.off.out"; fail "the job with the watchdog off failed"; }
! grep -q "watchdog:" "$topo.off.out" || { cat "$topo.off.out"; fail "watchdog = 0s still reports"; }
pass "watchdog = \"0s\" turns it off"
