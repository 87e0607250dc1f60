#!/usr/bin/env bash
# `hetflow run` forwards SIGTERM/SIGINT and never leaves orphans, even when the
# launcher itself is SIGKILLed.
source "$(dirname "$0")/lib.sh"

count_nodes() { pgrep -f "hetflow node $1" | wc -l; }

for sig in TERM INT; do
  topo="$HETFLOW_SCRATCH/sig-$sig.toml"
  port=$([[ $sig == TERM ]] && echo 7610 || echo 7620)
  write_topology "$topo" $port 3 auto 'kind = "skeleton"' 'tensors = 1000000' 'tensor_bytes = "64KiB"'
  start_run "$topo" "starting job" 30
  lp=$RUN_PID
  [[ $(count_nodes "$topo") -eq 3 ]] || fail "expected 3 node processes"
  kill -$sig $lp
  wait_exit $lp 15 || { cat "$topo.out"; fail "launcher still running 15 s after SIG$sig"; }
  [[ $WAIT_RC -eq 130 ]] || { cat "$topo.out"; fail "SIG$sig: launcher exit $WAIT_RC, want 130"; }
  sleep 0.5
  [[ $(count_nodes "$topo") -eq 0 ]] || fail "SIG$sig left node processes behind"
  pass "SIG$sig stops every node; exit 130; no orphans"
done

topo="$HETFLOW_SCRATCH/sig-KILL.toml"
write_topology "$topo" 7630 3 auto 'kind = "skeleton"' 'tensors = 1000000' 'tensor_bytes = "64KiB"'
start_run "$topo" "starting job" 30
lp=$RUN_PID
kill -9 $lp
for i in $(seq 1 50); do
  [[ $(count_nodes "$topo") -eq 0 ]] && break
  sleep 0.2
done
[[ $(count_nodes "$topo") -eq 0 ]] || { pkill -9 -f "hetflow node $topo"; fail "SIGKILL of the launcher left orphans"; }
pass "SIGKILL of the launcher takes every node with it"
