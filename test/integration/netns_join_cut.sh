#!/usr/bin/env bash
# A partition while the nodes join: host 2 silently drops everything (its
# switch port is down, and the others keep a permanent neighbour entry for
# it, as when a router or firewall swallows the packets: no ARP failure, no
# refusal, a connect() just never completes). With join_timeout = 5 s every
# node must give up within 5 s + GRACE (one more connect attempt), exit 3 and
# name the nodes it never reached.
#
# Registered DISABLED (test/integration/CMakeLists.txt): hetflow node's join
# calls CAF's blocking remote_actor(), which waits for the kernel's connect
# timeout (tcp_syn_retries = 6: ~127 s) on such a host; measured 135 s here
# for n0 and n1 (n2, whose own link is down, fails fast). It also blocks the
# joins of the reachable peers meanwhile. Enable it with that fix.
# Needs root and iproute2; skipped (77) otherwise.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/netns_lib.sh"

JOIN_TIMEOUT=5
GRACE=${GRACE:-5}
netns_setup 3
topo="$HETFLOW_SCRATCH/join-cut.toml"
netns_topology "$topo" 7100 3 "ucx:tcp,self" 'kind = "skeleton"' 'tensors = 4'
sed -i "s/^join_timeout = .*/join_timeout = \"${JOIN_TIMEOUT}s\"/" "$topo"
mac=$(ip -n "${NS_HOSTS[2]}" -br link show eth0 | awk '{print $3}')
for i in 0 1; do
  ip -n "${NS_HOSTS[$i]}" neigh replace "${NS_ADDR[2]}" lladdr "$mac" dev eth0 nud permanent ||
    fail "cannot add a neighbour entry"
done
netns_cut 2
t0=$(now_sod)
netns_start_nodes "$topo" 3
pids=("${NODE_PIDS[@]}")
summary=""
limit=$((JOIN_TIMEOUT + GRACE))
for i in 0 1 2; do
  wait_exit "${pids[$i]}" "$limit" || { tail -n 5 "$topo".n*.log; fail "n$i still joining $limit s after start (join timeout $JOIN_TIMEOUT s)"; }
  ((WAIT_RC == 3)) || { cat "$topo.n$i.log"; fail "n$i exited $WAIT_RC, want 3"; }
  line=$(grep -m1 "join timeout" "$topo.n$i.log") || { cat "$topo.n$i.log"; fail "n$i gives no join timeout message"; }
  if ((i == 2)); then
    [[ $line == *"'n0'"* && $line == *"'n1'"* ]] || fail "n2 does not name n0 and n1: $line"
  else
    [[ $line == *"'n2'"* ]] || fail "n$i does not name n2: $line"
  fi
  summary+=" n$i gone $(awk -v a="$(now_sod)" -v b="$t0" 'BEGIN{printf "%.1f", a - b}') s;"
done
[[ -z $(netns_leftovers) ]] || fail "processes left in the namespaces"
pass "join with n2 unreachable (packets dropped):$summary"
