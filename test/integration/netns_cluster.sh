#!/usr/bin/env bash
# Multi-host for real: three `hetflow node` processes, each in its own network
# namespace with its own address, joined by a bridge (netns_lib.sh), run the
# skeleton job (n0 produces, n1 transforms, n2 checks). For each data plane:
# every node exits 0, the head's job report has every tensor checked, each
# node listened on its own host's address, and the tensors crossed the veths
# (byte counters of each host's eth0), not loopback or shared memory.
# Needs root and iproute2; skipped (77) otherwise.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/netns_lib.sh"

netns_setup 3

tensors=24
tensor_bytes=$((1024 * 1024))
total=$((tensors * tensor_bytes))

run_cluster() {  # run_cluster DATA_PLANE CHECK_VETH(0|1)
  local dp=$1 check_veth=$2 i
  local topo="$HETFLOW_SCRATCH/cluster-${dp//[:,]/_}.toml"
  netns_topology "$topo" 7100 3 "$dp" 'kind = "skeleton"' "tensors = $tensors" \
    'tensor_bytes = "1MiB"' 'window = 3'
  "$HETFLOW" validate "$topo" >/dev/null || fail "[$dp] generated topology is invalid"
  local -a rx0 tx0
  for i in 0 1 2; do rx0[$i]=$(netns_bytes $i rx); tx0[$i]=$(netns_bytes $i tx); done
  netns_start_nodes "$topo" 3
  local pids=("${NODE_PIDS[@]}")
  for i in 0 1 2; do
    wait_exit "${pids[$i]}" 120 || { tail -n 20 "$topo".n*.log; fail "[$dp] n$i still running after 120 s"; }
    [[ $WAIT_RC == 0 ]] || { cat "$topo".n*.log; fail "[$dp] n$i exited $WAIT_RC"; }
    grep -q "listening on ${NS_ADDR[$i]}:$((7100 + i))" "$topo.n$i.log" ||
      { cat "$topo.n$i.log"; fail "[$dp] n$i did not listen on its host's address ${NS_ADDR[$i]}"; }
  done
  [[ -z $(netns_leftovers) ]] || fail "[$dp] processes left in the namespaces: $(netns_leftovers)"
  local job="$topo.n0.json.job"
  [[ -f $job ]] || fail "[$dp] the head wrote no job report ($job)"
  [[ $(json_get "$job" 'd["status"]') == ok ]] || { cat "$job"; fail "[$dp] job status"; }
  [[ $(json_get "$job" 'd["result"]["tensors"]') == "$tensors" ]] || { cat "$job"; fail "[$dp] tensors checked"; }
  [[ $(json_get "$job" 'd["result"]["bytes"]') == "$total" ]] || { cat "$job"; fail "[$dp] bytes checked"; }
  for i in 0 1 2; do
    [[ $(json_get "$topo.n$i.json" 'd["status"]') == ok ]] || fail "[$dp] n$i report status"
  done
  local plane
  plane=$(json_get "$topo.n0.json" 'd["data_plane"]')
  # What each host's link carried during the run: n0 -> n1 -> n2.
  local -a rx tx
  for i in 0 1 2; do
    rx[$i]=$(($(netns_bytes $i rx) - rx0[i]))
    tx[$i]=$(($(netns_bytes $i tx) - tx0[i]))
  done
  echo "[$dp] data plane $plane; eth0 bytes rx/tx: n0 ${rx[0]}/${tx[0]} n1 ${rx[1]}/${tx[1]} n2 ${rx[2]}/${tx[2]}"
  # Control traffic (join, hellos, heartbeats) always crosses the bridge.
  for i in 0 1 2; do
    ((rx[i] > 0 && tx[i] > 0)) || fail "[$dp] host $i's link carried nothing"
  done
  if ((check_veth)); then
    ((tx[0] >= total && rx[1] >= total && tx[1] >= total && rx[2] >= total)) ||
      fail "[$dp] the tensors ($total bytes per hop) did not cross the veths"
  fi
  pass "[$dp] skeleton job across 3 namespaces ($plane)"
}

# Every data plane must carry the tensors over the network. UCX's default
# transport list included: the "hosts" share one kernel, but each has its own
# network namespace, and UCX 1.13 uses TCP between them (seen: ~25 MB per hop).
run_cluster "ucx:tcp,self" 1
run_cluster caf 1
run_cluster ucx 1
