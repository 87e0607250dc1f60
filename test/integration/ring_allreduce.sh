#!/usr/bin/env bash
# Ring all-reduce across real `hetflow node` processes on 127.0.0.1
# (job ring_check): 1..4 processes, 8 members (4 processes x 2), every dtype
# (f32, f64, i32, i64), sum and average, uneven lengths (0, 1, fewer than
# the members, not divisible by them, several chunks), gradient buckets of
# mixed dtypes; over UCX (default), UCX TCP and the CAF fallback; an
# explicit ring order; hierarchical mode (members on two "hosts"). Members
# on one host sum through a shared-memory segment by default (the ring's shm
# = "auto"); the transport cases and the *-msg cases run the message ring
# (shm = "off"). Every member checks its result bit for bit against a
# local expectation; the report says whether all members agree.
source "$(dirname "$0")/lib.sh"

run_check() {  # run_check NAME BASE_PORT NODES DATA_PLANE [job lines...]
  local name=$1 base=$2 nodes=$3 dp=$4
  shift 4
  local topo="$HETFLOW_SCRATCH/$name.toml"
  write_topology "$topo" "$base" "$nodes" "$dp" 'kind = "ring_check"' "$@"
  local t0=$(date +%s.%N)
  timeout 120 "$HETFLOW" run "$topo" --report "$topo.json" >"$topo.out" 2>&1
  local rc=$?
  ((rc == 0)) || { cat "$topo.out"; fail "$name: hetflow run exited $rc"; }
  # Which path ran: shared memory unless shm = "off" (or one member alone).
  if ((nodes > 1)); then
    if grep -q 'shm = "off"' "$topo"; then
      grep -q "(shared memory)" "$topo.out" && { cat "$topo.out"; fail "$name: shared memory although shm = off"; }
    else
      grep -q "collectives as rank 0 of .* (shared memory)" "$topo.out" ||
        { cat "$topo.out"; fail "$name: the members did not use shared memory"; }
    fi
  fi
  local ok
  ok=$(json_get "$topo.json" "d['status'] == 'ok' and d['members_identical'] and d['result']['cases'] > 0")
  [[ "$ok" == "True" ]] || { cat "$topo.json"; fail "$name: report not ok or members differ"; }
  pass "$name: $(json_get "$topo.json" "d['result']['cases']") collectives exact on every member ($(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}") s)"
}

small='lengths = [0, 1, 2, 3, 5, 7, 8, 9, 1000, 65537]'
run_check one 8110 1 auto "$small"
run_check two 8120 2 auto                      # defaults: up to 1048583 elements, 1 MiB chunks
run_check three 8130 3 auto "$small" 'chunk_bytes = "4KiB"' 'window = 2'
run_check four 8140 4 auto "$small" 'chunk_bytes = "64KiB"'
run_check eight 8150 4 auto "$small" 'members_per_node = 2' 'chunk_bytes = "16KiB"'
run_check four-msg 8145 4 auto "$small" 'chunk_bytes = "64KiB"' 'shm = "off"'
run_check tcp 8160 3 ucx:tcp,self "$small" 'chunk_bytes = "32KiB"' 'shm = "off"'
run_check caf 8170 2 caf "$small" 'chunk_bytes = "32KiB"' 'shm = "off"'
run_check shm-slots 8175 3 auto "$small" 'shm_slot_bytes = "4KiB"' 'dtypes = ["f64", "i32"]'
run_check order 8180 3 auto "$small" 'order = ["ring2", "ring0", "ring1"]' 'bucket_bytes = "1KiB"'

# Hierarchical mode: nodes n2, n3 on "host" 127.0.0.2, n0, n1 on 127.0.0.1,
# 2 members each: per host one leader sums its 3 locals (through the host's
# segment; hier-msg: by messages), the 2 leaders run the ring, the result
# goes back. Also with the hosts interleaved in the ring order, and with
# hierarchical = "off" (one flat ring of 8).
run_hier() {  # run_hier NAME BASE_PORT WANT(true|false) [job lines...]
  local name=$1 base=$2 want=$3
  shift 3
  local topo="$HETFLOW_SCRATCH/$name.toml"
  write_topology "$topo" "$base" 4 auto 'kind = "ring_check"' 'members_per_node = 2' "$@"
  sed -i -E '/^name = "n[23]"$/,/^port/ s/^host = "127.0.0.1"$/host = "127.0.0.2"/' "$topo"
  timeout 120 "$HETFLOW" run "$topo" --report "$topo.json" >"$topo.out" 2>&1 ||
    { cat "$topo.out"; fail "$name: hetflow run failed"; }
  [[ $(json_get "$topo.json" "d['status'] == 'ok' and d['members_identical'] and d['result']['cases'] > 0") == True ]] ||
    { cat "$topo.json"; fail "$name: report not ok or members differ"; }
  local leaders
  leaders=$(grep -c "collectives as leader" "$topo.out" || true)
  if [[ $want == true ]]; then
    [[ $leaders -eq 2 ]] && [[ $(grep -c "collectives as local member of" "$topo.out") -eq 6 ]] ||
      { cat "$topo.out"; fail "$name: want 2 leaders and 6 local members"; }
    local shared
    shared=$(grep -c "collectives as \(leader\|local member\).*(shared memory)" "$topo.out" || true)
    if grep -q 'shm = "off"' "$topo"; then
      [[ $shared -eq 0 ]] || { cat "$topo.out"; fail "$name: shared memory although shm = off"; }
    else
      [[ $shared -eq 8 ]] || { cat "$topo.out"; fail "$name: want all 8 members on their host's segment, got $shared"; }
    fi
  else
    [[ $leaders -eq 0 ]] || { cat "$topo.out"; fail "$name: hierarchical although off"; }
  fi
  pass "$name: $(json_get "$topo.json" "d['result']['cases']") collectives exact on every member, hierarchical $want"
}
run_hier hier 8250 true "$small" 'chunk_bytes = "16KiB"'
run_hier hier-interleaved 8260 true "$small" 'chunk_bytes = "16KiB"' \
  'order = ["ring0", "ring4", "ring1", "ring5", "ring2", "ring6", "ring3", "ring7"]'
run_hier hier-msg 8265 true "$small" 'chunk_bytes = "16KiB"' 'shm = "off"'
run_hier hier-off 8270 false "$small" 'hierarchical = "off"'

# No segment can be made (no /dev/shm, or too small; forced here by a test
# variable): the first member says so, offers none, and every member sums by
# messages, flat and hierarchical, every result still exact.
for case in flat hier; do
  topo="$HETFLOW_SCRATCH/fallback-$case.toml"
  if [[ $case == flat ]]; then
    write_topology "$topo" 8280 3 auto 'kind = "ring_check"' "$small"
  else
    write_topology "$topo" 8285 4 auto 'kind = "ring_check"' 'members_per_node = 2' "$small"
    sed -i -E '/^name = "n[23]"$/,/^port/ s/^host = "127.0.0.1"$/host = "127.0.0.2"/' "$topo"
  fi
  HETFLOW_TEST_SHM_CREATE_FAIL=1 timeout 120 "$HETFLOW" run "$topo" --report "$topo.json" >"$topo.out" 2>&1 ||
    { cat "$topo.out"; fail "fallback-$case: hetflow run failed"; }
  [[ $(json_get "$topo.json" "d['status'] == 'ok' and d['members_identical'] and d['result']['cases'] > 0") == True ]] ||
    { cat "$topo.json"; fail "fallback-$case: report not ok or members differ"; }
  grep -q "no shared-memory segment (.*HETFLOW_TEST_SHM_CREATE_FAIL.*); the ring sums by messages instead" "$topo.out" &&
    grep -q "the ring's first member has no shared-memory segment; the ring sums by messages" "$topo.out" ||
    { cat "$topo.out"; fail "fallback-$case: no fallback lines"; }
  grep -q "(shared memory)" "$topo.out" && { cat "$topo.out"; fail "fallback-$case: a member says shared memory"; }
  pass "fallback-$case: no segment, $(json_get "$topo.json" "d['result']['cases']") collectives exact by messages"
done

# A bad order is refused before anything starts.
topo="$HETFLOW_SCRATCH/bad-order.toml"
write_topology "$topo" 8190 2 auto 'kind = "ring_check"' 'order = ["ring0", "ring0"]'
timeout 60 "$HETFLOW" run "$topo" >"$topo.out" 2>&1 && fail "bad order accepted"
grep -q "order must list each ring member once" "$topo.out" || { cat "$topo.out"; fail "bad order: no clear message"; }
pass "bad order refused with a clear message"
