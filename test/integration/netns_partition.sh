#!/usr/bin/env bash
# A network partition mid-job: three `hetflow node`s, each in its own network
# namespace (netns_lib.sh), run a skeleton job that would last for hours; once
# tensors flow, one host's switch port goes down (its packets are silently
# lost, nothing is refused). Every process, on both sides of the cut, must
# stop by itself with a non-zero exit and a message naming a node it lost:
# the survivors name the cut node, the cut node names one of the others. The
# first "stopping" line of every node must come within DETECT_MAX (5 s, the
# issue's bound) of the cut, every process must be gone within EXIT_MAX
# (15 s), and nothing may be left running in the namespaces. Cases: a whole
# host cut (the head, a middle node, over UCX/TCP, UCX's defaults and CAF),
# two hosts split from each other only; then a 0.3 s blip that the job must
# survive (connection_timeout 3 s), and a host off the network while the
# nodes join (exit 3 at the join timeout).
# Prints, per case, each node's detection and exit time after the cut.
# Needs root and iproute2; skipped (77) otherwise.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/netns_lib.sh"

DETECT_MAX=${DETECT_MAX:-5}
EXIT_MAX=${EXIT_MAX:-15}
netns_setup 3

# run_case NAME DATA_PLANE VICTIM [PEER]
#   without PEER: host VICTIM's switch port goes down (it loses everyone);
#   with PEER: only VICTIM and PEER lose each other (blackhole routes on both),
#   each still reaches the third node.
run_case() {
  local name=$1 dp=$2 victim=$3 peer=${4:-} i
  local topo="$HETFLOW_SCRATCH/$name.toml"
  netns_topology "$topo" 7100 3 "$dp" 'kind = "skeleton"' 'tensors = 1000000' \
    'tensor_bytes = "64KiB"' 'window = 2'
  netns_start_nodes "$topo" 3
  local pids=("${NODE_PIDS[@]}")
  wait_for_text "$topo.n0.log" "starting job" 70 || { cat "$topo".n*.log; fail "$name: job never started"; }
  # Mid-job: tensors are crossing the victim's link.
  local before after
  before=$(($(netns_bytes "$victim" rx) + $(netns_bytes "$victim" tx)))
  sleep 1
  after=$(($(netns_bytes "$victim" rx) + $(netns_bytes "$victim" tx)))
  ((after - before > 1000000)) || { cat "$topo".n*.log; fail "$name: no tensors crossed n$victim's link before the cut"; }
  for i in 0 1 2; do
    kill -0 "${pids[$i]}" 2>/dev/null || { cat "$topo".n*.log; fail "$name: n$i ended before the cut"; }
  done

  local t_cut
  t_cut=$(now_sod)
  if [[ -z $peer ]]; then
    netns_cut "$victim" || fail "$name: could not cut host $victim's link"
  else
    netns_split "$victim" "$peer" || fail "$name: could not split n$victim from n$peer"
  fi

  # Every process ends by itself: record when each is gone.
  local -a gone=() rc=()
  local left=3 t=0
  while ((left > 0)); do
    for i in 0 1 2; do
      [[ -n ${gone[$i]:-} ]] && continue
      if ! kill -0 "${pids[$i]}" 2>/dev/null; then
        gone[$i]=$(now_sod)
        wait "${pids[$i]}"
        rc[$i]=$?
        left=$((left - 1))
      fi
    done
    ((left > 0)) || break
    sleep 0.1
    t=$((t + 1))
    if ((t > EXIT_MAX * 10)); then
      for i in 0 1 2; do [[ -z ${gone[$i]:-} ]] && echo "n$i still running"; done
      tail -n 15 "$topo".n*.log
      fail "$name: a process was still running $EXIT_MAX s after the cut (a hang)"
    fi
  done
  if [[ -z $peer ]]; then netns_heal "$victim"; else netns_unsplit "$victim" "$peer"; fi
  [[ -z $(netns_leftovers) ]] || fail "$name: processes left in the namespaces: $(netns_leftovers)"

  local summary=""
  for i in 0 1 2; do
    local log="$topo.n$i.log"
    ((rc[i] != 0)) || { cat "$log"; fail "$name: n$i exited 0 after the partition"; }
    local line
    line=$(grep -m1 "stopping (exit" "$log") || { cat "$log"; fail "$name: n$i ended without a 'stopping' message"; }
    # Which node names are right: the ones this node lost (or, for a node
    # that lost nobody in a split, either side of the split).
    local j named=0 want=()
    if [[ -z $peer ]]; then
      if ((i == victim)); then
        for j in 0 1 2; do ((j != victim)) && want+=("$j"); done
      else
        want=("$victim")
      fi
    else
      if ((i == victim)); then want=("$peer"); elif ((i == peer)); then want=("$victim"); else want=("$victim" "$peer"); fi
    fi
    for j in "${want[@]}"; do [[ $line == *"'n$j'"* ]] && named=1; done
    ((named)) || { cat "$log"; fail "$name: n$i does not name a node it lost (n${want[*]}): $line"; }
    # A node on neither side of a split lost nobody: its stop came from a
    # peer, and must say which one saw the failure.
    if [[ -n $peer ]] && ((i != victim && i != peer)) && [[ $line != *"(reported by node 'n"* ]]; then
      cat "$log"; fail "$name: n$i lost nobody but does not say who reported the failure: $line"
    fi
    local detect exit_s
    detect=$(awk -v a="$(stamp_sod "${line%% *}")" -v b="$t_cut" 'BEGIN{d = a - b; if (d < -43200) d += 86400; printf "%.2f", d}')
    exit_s=$(awk -v a="${gone[$i]}" -v b="$t_cut" 'BEGIN{d = a - b; if (d < 0) d += 86400; printf "%.2f", d}')
    awk -v d="$detect" -v m="$DETECT_MAX" 'BEGIN{exit !(d <= m)}' ||
      { cat "$log"; fail "$name: n$i detected the partition after $detect s (> $DETECT_MAX s)"; }
    summary+=" n$i: exit ${rc[$i]}, detected ${detect} s, gone ${exit_s} s;"
    echo "  n$i: ${line#* }"
  done
  local what="cut n$victim"
  [[ -n $peer ]] && what="split n$victim|n$peer"
  pass "$name ($what, $dp):$summary"
}

run_case cut-n1-ucx-tcp "ucx:tcp,self" 1
run_case cut-head-ucx-tcp "ucx:tcp,self" 0
run_case cut-n2-caf caf 2
# UCX's default transports (error mode "peer": UCX watches its peers too).
run_case cut-n1-ucx-default ucx 1
# A partial partition: the producer (n0) and the checker (n2) lose each
# other; both still reach n1.
run_case split-n0-n2 "ucx:tcp,self" 0 2

# A blip is not a partition: with connection_timeout = "3s", n1's link goes
# down for 0.3 s mid-job and comes back; the job must finish normally (every
# node exits 0, every tensor checked). (With the default 1 s, a blip this
# short already ends the job: TCP's retransmission back-off keeps the
# connection silent for longer than the blip.)
topo="$HETFLOW_SCRATCH/blip.toml"
netns_topology "$topo" 7100 3 "ucx:tcp,self" 'kind = "skeleton"' 'tensors = 20000' \
  'tensor_bytes = "64KiB"' 'window = 2'
sed -i 's/^connection_timeout = .*/connection_timeout = "3s"/' "$topo"
netns_start_nodes "$topo" 3
pids=("${NODE_PIDS[@]}")
wait_for_text "$topo.n0.log" "starting job" 70 || { cat "$topo".n*.log; fail "blip: job never started"; }
sleep 0.5
for i in 0 1 2; do kill -0 "${pids[$i]}" 2>/dev/null || fail "blip: n$i ended before the blip"; done
t_cut=$(now_sod)
netns_cut 1
sleep 0.3
netns_heal 1
blip=$(awk -v a="$(now_sod)" -v b="$t_cut" 'BEGIN{d = a - b; if (d < 0) d += 86400; printf "%.2f", d}')
# On a machine so loaded that the "0.3 s" cut lasted 2 s or more, the
# outcome says nothing about blips: then only the bounded exit is checked.
strict=$(awk -v d="$blip" 'BEGIN{print (d < 2.0) ? 1 : 0}')
for i in 0 1 2; do
  wait_exit "${pids[$i]}" 120 || { tail -n 5 "$topo".n*.log; fail "blip: n$i still running 120 s after the blip"; }
  if ((strict && WAIT_RC != 0)); then
    cat "$topo.n$i.log"
    fail "blip: n$i exited $WAIT_RC after a $blip s cut (connection_timeout 3 s)"
  fi
done
if ((strict)); then
  [[ $(json_get "$topo.n0.json.job" 'd["result"]["tensors"]') == 20000 ]] || fail "blip: not every tensor checked"
  pass "blip: a $blip s cut of n1 mid-job (connection_timeout 3 s) is survived"
else
  echo "NOTE: the cut lasted $blip s (machine overloaded): survival not checked"
fi

# A partition before the job: host 2 is off the network while the nodes join
# (its switch port is down and nobody has its MAC address cached, so ARP
# fails and connects to it fail after ~3 s). Every node must give up at its
# join timeout (5 s here; plus at most one connect attempt) naming the nodes
# it never reached, and exit 3. (When packets to the host are dropped without
# an ARP failure, the join overruns its timeout by the kernel's connect
# timeout: netns_join_cut.sh, disabled until that is fixed.)
topo="$HETFLOW_SCRATCH/join-cut.toml"
netns_topology "$topo" 7100 3 "ucx:tcp,self" 'kind = "skeleton"' 'tensors = 4'
sed -i 's/^join_timeout = .*/join_timeout = "5s"/' "$topo"
netns_cut 2
for i in 0 1 2; do ip -n "${NS_HOSTS[$i]}" neigh flush all; done
t0=$(now_sod)
netns_start_nodes "$topo" 3
pids=("${NODE_PIDS[@]}")
summary=""
for i in 0 1 2; do
  wait_exit "${pids[$i]}" 15 || { tail -n 5 "$topo".n*.log; fail "join-cut: n$i still joining 15 s after start (join timeout 5 s)"; }
  ((WAIT_RC == 3)) || { cat "$topo.n$i.log"; fail "join-cut: n$i exited $WAIT_RC, want 3"; }
  line=$(grep -m1 "join timeout" "$topo.n$i.log") || { cat "$topo.n$i.log"; fail "join-cut: n$i gives no join timeout message"; }
  if ((i == 2)); then
    [[ $line == *"'n0'"* && $line == *"'n1'"* ]] || fail "join-cut: n2 does not name n0 and n1: $line"
  else
    [[ $line == *"'n2'"* ]] || fail "join-cut: n$i does not name n2: $line"
  fi
  summary+=" n$i gone $(awk -v a="$(now_sod)" -v b="$t0" 'BEGIN{printf "%.1f", a - b}') s;"
done
netns_heal 2
[[ -z $(netns_leftovers) ]] || fail "join-cut: processes left in the namespaces"
pass "join-cut (n2 unreachable while joining):$summary"
