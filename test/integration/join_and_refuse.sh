#!/usr/bin/env bash
# Joining: a missing node ends in a clear join-timeout error; a node started
# with a different topology file is refused; a taken port is reported.
source "$(dirname "$0")/lib.sh"

# 1. Missing peer: n0 alone with a 2 s join timeout.
topo="$HETFLOW_SCRATCH/lonely.toml"
write_topology "$topo" 7510 3 auto 'kind = "skeleton"'
timeout 20 "$HETFLOW" node "$topo" --name n0 --join-timeout 2 >"$topo.log" 2>&1
rc=$?
[[ $rc -eq 3 ]] || { cat "$topo.log"; fail "missing peers: exit $rc, want 3"; }
grep -q "join timeout" "$topo.log" && grep -q "n1" "$topo.log" && grep -q "n2" "$topo.log" ||
  { cat "$topo.log"; fail "join timeout message does not name n1 and n2"; }
pass "join timeout names the missing nodes"

# 2. Different topology: same nodes, different job keys -> different hash.
a="$HETFLOW_SCRATCH/a.toml"
b="$HETFLOW_SCRATCH/b.toml"
write_topology "$a" 7520 2 auto 'kind = "skeleton"' 'tensors = 5'
write_topology "$b" 7520 2 auto 'kind = "skeleton"' 'tensors = 6'
sed -i 's/name = "it-b"/name = "it-a"/' "$b"
"$HETFLOW" node "$a" --name n0 --join-timeout 5 >"$a.log" 2>&1 &
PIDS+=($!)
p0=$!
timeout 20 "$HETFLOW" node "$b" --name n1 --join-timeout 5 >"$b.log" 2>&1
rc=$?
[[ $rc -eq 3 ]] || { cat "$a.log" "$b.log"; fail "mismatched topology: exit $rc, want 3"; }
grep -q "different topology" "$b.log" || { cat "$b.log"; fail "no 'different topology' message"; }
wait_exit $p0 15 || fail "n0 did not give up"
pass "a node with a different topology file is refused"

# 3. Port taken: a second n0 on the same port.
topo="$HETFLOW_SCRATCH/port.toml"
write_topology "$topo" 7530 2 auto 'kind = "skeleton"'
"$HETFLOW" node "$topo" --name n0 --join-timeout 5 >"$topo.first.log" 2>&1 &
PIDS+=($!)
wait_for_text "$topo.first.log" "listening" 10 || fail "first n0 did not listen"
timeout 20 "$HETFLOW" node "$topo" --name n0 --join-timeout 5 >"$topo.second.log" 2>&1
rc=$?
[[ $rc -eq 2 ]] || { cat "$topo.second.log"; fail "port in use: exit $rc, want 2"; }
grep -q "cannot listen on 127.0.0.1:7530" "$topo.second.log" || { cat "$topo.second.log"; fail "port message"; }
pass "a taken port is reported"

# 4. Unknown node name.
timeout 10 "$HETFLOW" node "$topo" --name n7 >"$topo.n7.log" 2>&1
rc=$?
[[ $rc -eq 2 ]] && grep -q "no node named 'n7'" "$topo.n7.log" || { cat "$topo.n7.log"; fail "unknown node name"; }
pass "an unknown node name is reported"
