#!/usr/bin/env bash
# A ring member that dies or stalls mid-collective: every other member's
# process exits non-zero within 5 s, and its output names the culprit.
#   kill   the whole node process of a member (SIGKILL)
#   die    the ring_member actor dies (fault drill), its process lives on
#   stall  the ring_member actor blocks its mailbox (fault drill): caught by
#          the collective timeout (2 s) and a probe of the stalled member
# These run the message ring (shm = "off"; the members share a host, so by
# default they would sum through shared memory). The shm-* cases run the
# same faults through the shared-memory segment: a member whose rounds stop
# (killed, drill "die", drill "stall") is named by the others' worker
# threads after the collective timeout, and the watchdog names it before.
source "$(dirname "$0")/lib.sh"

run_case() {  # run_case NAME BASE_PORT VICTIM_NODE CULPRIT_TEXT [job lines...]
  # RC_NODES (3): nodes; RC_TWO_HOSTS=1: n2, n3 on "host" 127.0.0.2 (hierarchical ring)
  local name=$1 base=$2 victim=$3 culprit=$4 nodes=${RC_NODES:-3}
  shift 4
  local topo="$HETFLOW_SCRATCH/$name.toml"
  write_topology "$topo" "$base" "$nodes" auto 'kind = "ring_check"' 'rounds = 1000000' \
    'lengths = [300000]' 'dtypes = ["f32"]' 'ops = ["sum"]' 'chunk_bytes = "64KiB"' "$@"
  [[ ${RC_TWO_HOSTS:-0} == 1 ]] && sed -i -E '/^name = "n[23]"$/,/^port/ s/^host = "127.0.0.1"$/host = "127.0.0.2"/' "$topo"
  # RC_WATCHDOG=D: [cluster] watchdog = D (shorter than the 2 s collective timeout)
  [[ -n ${RC_WATCHDOG:-} ]] && sed -i "s/^connection_timeout = \(.*\)$/connection_timeout = \1\nwatchdog = \"$RC_WATCHDOG\"/" "$topo"
  # RC_METRICS_PORT=P: [cluster] metrics_port = P; once the drill fired, the
  # victim's /metrics must show chunks waiting for its blocked mailbox.
  [[ -n ${RC_METRICS_PORT:-} ]] && sed -i "s/^connection_timeout = \(.*\)$/connection_timeout = \1\nmetrics_port = $RC_METRICS_PORT/" "$topo"
  local i
  start_nodes "$topo" "$nodes"
  local pids=("${NODE_PIDS[@]}")
  wait_for_text "$topo.n0.log" "starting job" 30 || { cat "$topo".n*.log; fail "$name: job never started"; }
  local t0
  if [[ $name == *kill ]]; then
    sleep 1
    t0=$(date +%s.%N)
    kill -KILL "${pids[$victim]}"
  else
    wait_for_text "$topo.n$victim.log" "fault drill" 30 || { cat "$topo".n*.log; fail "$name: drill never fired"; }
    t0=$(date +%s.%N)
    if [[ -n ${RC_METRICS_PORT:-} ]]; then
      sleep 0.3
      /usr/bin/env python3 - "$((RC_METRICS_PORT + victim))" "$culprit" <<'PY' || fail "$name: no pending chunks shown for $culprit"
import re, sys, urllib.request
text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=3).read().decode()
m = re.search(r'hetflow_actor_wire_pending_messages\{[^}]*actor="%s"\} (\S+)' % sys.argv[2], text)
print("pending wire messages of", sys.argv[2], "while it stalls:", m and m.group(1))
assert m and float(m.group(1)) >= 1
PY
    fi
  fi
  for ((i = 0; i < nodes; i++)); do
    ((i == victim)) && continue
    wait_exit "${pids[$i]}" 5 || { cat "$topo".n*.log; fail "$name: n$i still running 5 s after the fault"; }
    local rc=$WAIT_RC
    ((rc != 0)) || { cat "$topo.n$i.log"; fail "$name: n$i exited 0"; }
    grep -q -- "$culprit" "$topo.n$i.log" || { cat "$topo.n$i.log"; fail "$name: n$i's output does not name $culprit"; }
  done
  local t1=$(date +%s.%N)
  if [[ $name != *kill ]]; then
    wait_exit "${pids[$victim]}" 10 || fail "$name: the faulty node n$victim never exited"
  fi
  kill -9 "${pids[$victim]}" 2>/dev/null
  wait "${pids[$victim]}" 2>/dev/null
  pass "$name: the other members exited non-zero naming $culprit within $(awk "BEGIN{printf \"%.2f\", $t1 - $t0}") s"
  grep -h "stopping" "$topo".n*.log | head -2
}

run_case kill 8210 1 "n1" 'shm = "off"'
run_case die 8220 2 "ring2" 'shm = "off"' 'drill_member = "ring2"' 'drill = "die"' 'drill_after = 200'
RC_WATCHDOG=1s RC_METRICS_PORT=8235 run_case stall 8230 1 "ring1" 'shm = "off"' 'drill_member = "ring1"' \
  'drill = "stall"' 'drill_after = 200'
# Before the timeout, ring2's node logged whom ring2 waits on: its left, the stalled ring1.
grep -q "watchdog: no progress on node 'n2'.*ring2 waits on ring member 'ring1' (node 'n1') for the chunks of collective" \
  "$HETFLOW_SCRATCH/stall.toml.n2.log" || { cat "$HETFLOW_SCRATCH/stall.toml.n2.log"; fail "stall: n2's watchdog did not name ring1"; }
pass "stall: n2's watchdog named ring1 before the collective timed out"
# Hierarchical ring (2 hosts x 2 members): a stalled local member (ring3, not
# its host's leader) is probed by its leader and named.
RC_NODES=4 RC_TWO_HOSTS=1 run_case stall-hier 8240 3 "ring3" 'drill_member = "ring3"' 'drill = "stall"' \
  'drill_after = 50'

# Shared memory (the default for members on one host).
run_case shm-kill 8250 1 "n1"
run_case shm-die 8260 2 "ring2" 'drill_member = "ring2"' 'drill = "die"' 'drill_after = 20'
grep -q "fault drill: dying after 20 shared-memory rounds" "$HETFLOW_SCRATCH/shm-die.toml.n2.log" ||
  { cat "$HETFLOW_SCRATCH/shm-die.toml.n2.log"; fail "shm-die: the drill did not run in shared-memory mode"; }
RC_WATCHDOG=1s run_case shm-stall 8270 1 "ring1" 'drill_member = "ring1"' 'drill = "stall"' 'drill_after = 20'
grep -q "ring member 'ring1' (node 'n1') has not .* round .* (shared memory" "$HETFLOW_SCRATCH/shm-stall.toml.n0.log" ||
  { cat "$HETFLOW_SCRATCH/shm-stall.toml.n0.log"; fail "shm-stall: n0 does not say which round ring1 missed"; }
grep -q "watchdog: no progress on node 'n2'.*ring2 waits on ring member 'ring1' (node 'n1') for round .* (shared memory)" \
  "$HETFLOW_SCRATCH/shm-stall.toml.n2.log" ||
  { cat "$HETFLOW_SCRATCH/shm-stall.toml.n2.log"; fail "shm-stall: n2's watchdog did not name ring1"; }
pass "shm-stall: n2's watchdog named ring1 before the collective timed out"
