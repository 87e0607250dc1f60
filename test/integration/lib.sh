# Shared helpers for the integration tests (sourced). Every test:
#  - gets $HETFLOW (binary), $HETFLOW_SRC, $HETFLOW_SCRATCH from CTest,
#  - uses its own port range, so tests can run side by side,
#  - kills whatever it started on exit (no leaked processes, ever).
set -u
: "${HETFLOW:?}" "${HETFLOW_SCRATCH:?}"
rm -rf "$HETFLOW_SCRATCH"
mkdir -p "$HETFLOW_SCRATCH"
cd "$HETFLOW_SCRATCH"
PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do
    [[ -n "$p" ]] && kill -9 "$p" 2>/dev/null
  done
  return 0
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "PASS: $*"; }

# write_topology FILE BASE_PORT NODES DATA_PLANE [job lines...]
write_topology() {
  local file=$1 base=$2 nodes=$3 dp=$4
  shift 4
  {
    echo '[cluster]'
    echo "name = \"it-$(basename "$file" .toml)\""
    # DATA_PLANE is "auto", "caf", "ucx" or "ucx:TLS" (e.g. ucx:tcp,self)
    echo "data_plane = \"${dp%%:*}\""
    [[ "$dp" == *:* ]] && echo "ucx_tls = \"${dp#*:}\""
    echo 'join_timeout = "20s"'
    echo 'heartbeat_interval = "200ms"'
    echo 'connection_timeout = "1s"'
    local i
    for ((i = 0; i < nodes; i++)); do
      echo '[[nodes]]'
      echo "name = \"n$i\""
      echo 'host = "127.0.0.1"'
      echo "port = $((base + i))"
    done
    echo '[job]'
    local l
    for l in "$@"; do echo "$l"; done
  } >"$file"
}

# wait_exit PID SECONDS -> sets WAIT_RC (exit code) or fails on timeout
start_nodes() {  # start_nodes TOPO N: n0..n(N-1) as background `hetflow node`s, logs TOPO.nI.log, pids in NODE_PIDS
  local topo=$1 n=$2 i
  NODE_PIDS=()
  for ((i = 0; i < n; i++)); do
    "$HETFLOW" node "$topo" --name "n$i" >"$topo.n$i.log" 2>&1 &
    NODE_PIDS[$i]=$!
    PIDS+=($!)
  done
}

wait_exit() {
  local pid=$1 secs=$2 t=0
  while kill -0 "$pid" 2>/dev/null; do
    sleep 0.1
    t=$((t + 1))
    if ((t > secs * 10)); then
      return 1
    fi
  done
  wait "$pid"
  WAIT_RC=$?
  return 0
}

# kill_node_and_wait TOPO NODE RUN_PID LOG: SIGKILL node NODE of `hetflow run
# TOPO` (pid RUN_PID, output in LOG), then wait up to 10 s for the run to end;
# fails unless it ends non-zero and LOG says the node is down. Sets KILL_RC
# (the run's exit status) and KILL_SECS (seconds from the kill to its end).
kill_node_and_wait() {
  local topo=$1 node=$2 pid=$3 log=$4 t0 t1
  pkill -KILL -f -- "node $topo --name $node" || fail "no node $node of $topo to kill"
  t0=$(date +%s.%N)
  wait_exit "$pid" 10 || { cat "$log"; fail "the run did not end within 10 s of $node's death"; }
  KILL_RC=$WAIT_RC
  t1=$(date +%s.%N)
  KILL_SECS=$(awk "BEGIN{printf \"%.2f\", $t1 - $t0}")
  ((KILL_RC != 0)) || { cat "$log"; fail "the run exited 0 after $node was killed"; }
  grep -q "node '$node'.*is down" "$log" || { cat "$log"; fail "the run's output does not name $node"; }
}

# run_and_kill TOPO NODE WHEN_TEXT WHEN_SECONDS END_SECONDS [NODE WHEN_TEXT]...:
# `hetflow run TOPO --report TOPO.json` in the background (output in
# TOPO.out), SIGKILL of NODE once WHEN_TEXT is in the output (then of each
# further NODE once its WHEN_TEXT is), then waits up to END_SECONDS for the
# run. Sets RUN_RC and KILL_TO_EXIT (seconds from the last kill to the exit).
# RUN_AND_KILL_ARGS (environment): extra words for `hetflow run` (e.g. --resume).
run_and_kill() {
  local topo=$1 node=$2 when=$3 when_secs=$4 end_secs=$5 run t0 t1
  shift 5
  # shellcheck disable=SC2086  # RUN_AND_KILL_ARGS: extra words for `hetflow run` (e.g. --resume)
  "$HETFLOW" run "$topo" ${RUN_AND_KILL_ARGS:-} --report "$topo.json" >"$topo.out" 2>&1 &
  run=$!
  PIDS+=($run)
  while :; do
    wait_for_text "$topo.out" "$when" "$when_secs" || { cat "$topo.out"; fail "'$when' never came"; }
    pkill -KILL -f -- "node $topo --name $node" || { cat "$topo.out"; fail "no node $node to kill (the job ended?)"; }
    (($# >= 2)) || break
    node=$1 when=$2
    shift 2
  done
  t0=$(date +%s.%N)
  wait_exit "$run" "$end_secs" || { cat "$topo.out"; fail "the run did not end within $end_secs s of $node's death"; }
  RUN_RC=$WAIT_RC
  t1=$(date +%s.%N)
  KILL_TO_EXIT=$(awk "BEGIN{printf \"%.1f\", $t1 - $t0}")
}

# wait_for_text FILE TEXT SECONDS
wait_for_text() {
  local f=$1 text=$2 secs=$3 t=0
  until grep -q -- "$text" "$f" 2>/dev/null; do
    sleep 0.1
    t=$((t + 1))
    ((t > secs * 10)) && return 1
  done
  return 0
}

# resume_and_check TOPO WANT_CHECKSUM TEXT WHAT: `hetflow run TOPO --resume
# --report TOPO.resume.json` (output in TOPO.resume.out); fails, naming WHAT,
# unless it succeeds, its output has TEXT (grep pattern) and its weights
# checksum is WANT_CHECKSUM.
resume_and_check() {
  local topo=$1 want=$2 text=$3 what=$4
  timeout 300 "$HETFLOW" run "$topo" --resume --report "$topo.resume.json" >"$topo.resume.out" 2>&1 ||
    { cat "$topo.resume.out"; fail "$what: --resume failed"; }
  grep -q -- "$text" "$topo.resume.out" || { cat "$topo.resume.out"; fail "$what: the output has no '$text'"; }
  [[ $(json_get "$topo.resume.json" 'd["weights_checksum"]') == "$want" ]] ||
    fail "$what: the resumed run's weights differ from the uninterrupted run's"
}

json_get() {  # json_get FILE PYTHON_EXPR (d is the parsed object)
  python3 -c "import json,sys; d=json.load(open('$1')); print($2)"
}

# start_run TOPOLOGY TEXT SECONDS: `hetflow run TOPOLOGY` in the background,
# output in TOPOLOGY.out, until TEXT appears; sets RUN_PID (fails otherwise).
start_run() {
  local topo=$1 text=$2 secs=$3
  "$HETFLOW" run "$topo" >"$topo.out" 2>&1 &
  RUN_PID=$!
  PIDS+=($RUN_PID)
  wait_for_text "$topo.out" "$text" "$secs" || { cat "$topo.out"; fail "'$text' never appeared running $topo"; }
}
