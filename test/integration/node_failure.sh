#!/usr/bin/env bash
# Three `hetflow node` processes; one dies mid-run (SIGKILL) or hangs
# (SIGSTOP). The others must exit non-zero within 10 s, naming it.
source "$(dirname "$0")/lib.sh"

run_case() {  # run_case NAME SIGNAL VICTIM BASE_PORT
  local name=$1 sig=$2 victim=$3 base=$4
  local topo="$HETFLOW_SCRATCH/$name.toml"
  # Long enough that the kill lands mid-run.
  write_topology "$topo" "$base" 3 auto 'kind = "skeleton"' 'tensors = 1000000' \
    'tensor_bytes = "64KiB"' 'window = 2'
  local i
  start_nodes "$topo" 3
  local pids=("${NODE_PIDS[@]}")
  wait_for_text "$topo.n0.log" "starting job" 30 || { cat "$topo".n*.log; fail "$name: job never started"; }
  sleep 1
  local t0=$(date +%s.%N)
  kill -"$sig" "${pids[$victim]}"
  for i in 0 1 2; do
    ((i == victim)) && continue
    wait_exit "${pids[$i]}" 10 || { cat "$topo".n*.log; fail "$name: n$i still running 10 s after n$victim was hit"; }
    local rc=$WAIT_RC
    ((rc != 0)) || fail "$name: n$i exited 0 after n$victim died"
    grep -q "n$victim" "$topo.n$i.log" || { cat "$topo.n$i.log"; fail "$name: n$i's message does not name n$victim"; }
  done
  local t1=$(date +%s.%N)
  kill -9 "${pids[$victim]}" 2>/dev/null
  wait "${pids[$victim]}" 2>/dev/null
  pass "$name: survivors exited non-zero naming n$victim after $(awk "BEGIN{printf \"%.2f\", $t1 - $t0}") s"
  grep -h "stopping" "$topo".n*.log | head -3
}

run_case kill-n1 KILL 1 7410
run_case kill-head KILL 0 7420
run_case hang-n2 STOP 2 7430
